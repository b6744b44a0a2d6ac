"""Backend helpers: version parsing, identifier quoting, error messages."""

from __future__ import annotations

import pytest

from sinks.backend import SinkError, check_rows, column_list, parse_version, qualified, quote_identifier


@pytest.mark.parametrize(
    ("text", "expected"),
    [("18.16.1", (18, 16, 1)), ("26.9.2.1", (26, 9, 2)), ("24.3", (24, 3, 0)), (" 19.17.10.1-stable", (19, 17, 10))],
)
def test_parse_version(text: str, expected: tuple[int, int, int]) -> None:
    assert parse_version(text) == expected


def test_parse_version_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="version"):
        parse_version("unknown")


def test_identifiers_are_back_quoted_and_escaped() -> None:
    assert quote_identifier("group") == "`group`"
    assert quote_identifier("we`ird\\") == "`we\\`ird\\\\`"
    assert qualified("db", "steps") == "`db`.`steps`"
    assert column_list(["partition", "offset"]) == "`partition`, `offset`"


def test_sink_error_names_backend_action_table_and_detail() -> None:
    err = SinkError("server clickhouse://h:9000", "insert", "Code: 60. Table x doesn't exist", table="steps")
    assert str(err) == "server clickhouse://h:9000: insert failed on table steps: Code: 60. Table x doesn't exist"
    assert (err.backend, err.action, err.table) == ("server clickhouse://h:9000", "insert", "steps")
    assert str(SinkError("embedded /x", "open", "locked")) == "embedded /x: open failed: locked"


def test_check_rows_rejects_misaligned_rows() -> None:
    check_rows("b", "t", ["a", "b"], [(1, 2), [3, 4]])
    with pytest.raises(SinkError, match="row 1 has 1 values for 2 columns"):
        check_rows("b", "t", ["a", "b"], [(1, 2), (3,)])
