"""The migration modules themselves: ordering, and DDL that the oldest server accepts."""

from __future__ import annotations

import pkgutil
import re

import sinks.migrations as package
from sinks.features import Features
from sinks.migrations import MIGRATIONS

OLD = Features.for_version((18, 16, 1))
NEW = Features.for_version((26, 9, 2))


def test_every_module_is_listed_in_order() -> None:
    modules = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if re.fullmatch(r"m\d{4}_\w+", m.name))
    assert [f"{m.id}" for m in MIGRATIONS] == [name[1:] for name in modules]
    ids = [m.id for m in MIGRATIONS]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(m.description for m in MIGRATIONS)


def test_old_servers_get_plain_types_only() -> None:
    for migration in MIGRATIONS:
        for sql in migration.statements("db", OLD):
            for newer in ("LowCardinality", "CODEC", "TTL", "Map(", "DateTime64", "JSON"):
                assert newer not in sql, (migration.id, newer)


def test_new_engines_get_dictionaries_and_codecs() -> None:
    steps = MIGRATIONS[0].statements("db", NEW)[0]
    assert "`job` LowCardinality(String)" in steps
    assert "`start_ns` Int64 CODEC(Delta, ZSTD)" in steps
    assert "`duration_ms` Float64," in steps  # only timestamps get the codec


def test_statements_are_rerunnable_and_target_the_given_database() -> None:
    for migration in MIGRATIONS:
        for features in (OLD, NEW):
            for sql in migration.statements("my_db", features):
                assert sql.startswith((
                    "CREATE TABLE IF NOT EXISTS `my_db`.",
                    "CREATE MATERIALIZED VIEW IF NOT EXISTS `my_db`.",
                    "ALTER TABLE `my_db`.",  # idempotent MODIFY SETTING, ADD COLUMN (the runner skips it when there)
                    "DROP TABLE IF EXISTS `my_db`.",  # a view replaced
                )), sql
