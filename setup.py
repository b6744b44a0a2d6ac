"""The one compiled part: schemas/_packed.c (packed records straight to columns, issue #25); the rest of the
project is declared in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("schemas._packed", ["schemas/_packed.c"],
                             extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror"])])
