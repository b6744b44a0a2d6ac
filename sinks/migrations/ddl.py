"""Small helpers the migrations share to spell CREATE TABLE the same way on every version, and to re-run
them safely."""

from __future__ import annotations

from collections.abc import Sequence

from sinks.backend import qualified, quote_identifier


def create_table(db: str, table: str, columns: Sequence[tuple[str, str]], engine: str) -> str:
    """``CREATE TABLE IF NOT EXISTS db.table (...) ENGINE = engine``, every name back-quoted.

    IF NOT EXISTS makes a migration safe to re-run after a crash between creating its
    tables and recording it (18.16 supports it on CREATE TABLE and CREATE DATABASE).
    """
    body = ",\n    ".join(f"{quote_identifier(name)} {ch_type}" for name, ch_type in columns)
    return f"CREATE TABLE IF NOT EXISTS {qualified(db, table)}\n(\n    {body}\n)\nENGINE = {engine}"


def create_rollup(db: str, view: str, target: str, select: str) -> str:
    """``CREATE MATERIALIZED VIEW IF NOT EXISTS db.view TO db.target AS select``.

    The ``TO target`` form (18.16 and 26.x alike) keeps the rollup a plain table that
    queries, TTLs and the cluster variant treat like any other; the view only feeds it.
    `select` names source tables as ``{db}.table`` already qualified by the caller.
    """
    return f"CREATE MATERIALIZED VIEW IF NOT EXISTS {qualified(db, view)} TO {qualified(db, target)}\nAS {select}"


def column_already_added(statement: str, exc: Exception) -> bool:
    """A re-run ALTER ... ADD COLUMN whose column a crashed earlier run already added (18.16 cannot spell
    ADD COLUMN IF NOT EXISTS): the statement's work is done."""
    return statement.startswith("ALTER TABLE") and " ADD COLUMN " in statement and "already exists" in str(exc)
