"""The compiled parts, both for the hot consumers' per-event cost (issue #25): schemas/_packed.c (packed records
straight to columns) and infra/_kafka_records.c (a fetched Kafka record batch's records); the rest of the project
is declared in pyproject.toml."""

from setuptools import Extension, setup

FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror"]

setup(ext_modules=[Extension("schemas._packed", ["schemas/_packed.c"], extra_compile_args=FLAGS),
                   Extension("infra._kafka_records", ["infra/_kafka_records.c"], extra_compile_args=FLAGS)])
