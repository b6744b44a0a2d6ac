"""Feature gates derived from the engine version."""

from __future__ import annotations

import pytest

from sinks.features import Features


def test_debian_18_16_has_none_of_the_newer_features() -> None:
    assert Features.for_version((18, 16, 1)) == Features(
        low_cardinality=False, codecs=False, ttl=False, datetime64=False
    )


def test_chdb_26_has_all_of_them() -> None:
    assert Features.for_version((26, 9, 2)) == Features(
        low_cardinality=True, codecs=True, ttl=True, datetime64=True, dedup_token=True, packed_parts=True
    )


def test_packed_parts_from_26_7_only() -> None:
    assert not Features.for_version((26, 6, 9)).packed_parts
    assert not Features.for_version((24, 3, 0)).packed_parts
    assert Features.for_version((26, 7, 0)).packed_parts


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ((19, 1, 5), (False, False, False, False)),
        ((19, 1, 6), (False, True, False, False)),
        ((19, 3, 0), (True, True, False, False)),
        ((19, 6, 0), (True, True, True, False)),
        ((19, 17, 9), (True, True, True, False)),
        ((20, 1, 0), (True, True, True, True)),
    ],
)
def test_thresholds(version: tuple[int, int, int], expected: tuple[bool, bool, bool, bool]) -> None:
    f = Features.for_version(version)
    assert (f.low_cardinality, f.codecs, f.ttl, f.datetime64) == expected


def test_type_helpers_fall_back_to_plain_types() -> None:
    old, new = Features.for_version((18, 16, 1)), Features.for_version((24, 3, 0))
    assert old.dictionary("String") == "String"
    assert new.dictionary("Nullable(String)") == "LowCardinality(Nullable(String))"
    assert old.timestamp() == "Int64"
    assert new.timestamp() == "Int64 CODEC(Delta, ZSTD)"
