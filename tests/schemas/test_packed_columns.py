"""The compiled reader (schemas/_packed.c through `schemas.packed_columns`): what it accepts it reads exactly
as msgspec and orjson read it; what it cannot vouch for it declines (None), and no input crashes it."""

from __future__ import annotations

import random
import struct
from typing import Any

import msgspec
import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import packed_columns as packed

SPEC = packed.Spec((("type", "s"), ("n", "i"), ("x", "f"), ("ok", "b"), ("inner", "o"), ("inner.a", "i"),
                    ("inner.b", "f"), ("items", "l"), ("items.key", "s"), ("items.v", "i"), ("gone", "n")))


class Item(msgspec.Struct, forbid_unknown_fields=True):
    key: str
    v: int | None = None


class Inner(msgspec.Struct, forbid_unknown_fields=True):
    a: int | None = None
    b: float | None = None


class Doc(msgspec.Struct, forbid_unknown_fields=True):
    type: str
    n: int | None = None
    x: float | None = None
    ok: bool | None = None
    inner: Inner | None = None
    items: list[Item] | None = None
    gone: None = None


DOCS = msgspec.json.Decoder(list[Doc])


def _read(raws: list[bytes], max_elements: int = 4096) -> packed.Columns | None:
    return packed.read(raws, SPEC, max_elements)


def _rows(c: packed.Columns, path: str) -> list[Any]:
    """A column as Python values, None where there is none."""
    states = c.states[path].tolist()
    if path in c.texts:
        values: list[Any] = c.texts[path]
    elif path in c.floats:
        values = c.floats[path].tolist()
    else:
        values = c.ints[path].tolist()
    return [v if s == packed.VALUE else None for v, s in zip(values, states, strict=True)]


def _expected(docs: list[Doc]) -> dict[str, list[Any]]:
    """The columns msgspec's structs give (a list's items flattened)."""
    items = [i for d in docs for i in (d.items or [])]
    return {"type": [d.type for d in docs], "n": [d.n for d in docs], "x": [d.x for d in docs],
            "ok": [None if d.ok is None else int(d.ok) for d in docs],
            "inner.a": [d.inner.a if d.inner else None for d in docs],
            "inner.b": [d.inner.b if d.inner else None for d in docs],
            "items": [None if d.items is None else len(d.items) for d in docs],
            "items.key": [i.key for i in items], "items.v": [i.v for i in items]}


def _agrees(raw: bytes) -> None:
    """The reader declines `raw`, or reads it as msgspec reads it (msgspec must accept it then)."""
    got = _read([raw])
    if got is None:
        return
    docs = DOCS.decode(raw if raw[:1] == b"[" else b"[" + raw + b"]")
    expected = _expected(docs)
    for path, values in expected.items():
        assert _rows(got, path) == values, path
    assert got.counts.tolist() == [len(docs)]


def test_every_kind_reads_with_its_state() -> None:
    raw = orjson.dumps([
        {"type": "a", "n": -(2**63), "x": 1.5, "ok": True, "inner": {"a": 7, "b": 2}, "items": [{"key": "k", "v": 1},
                                                                                              {"key": "é😀"}]},
        {"type": "a", "n": 2**63 - 1, "x": None, "ok": False, "inner": None, "items": []},
        {"type": "a", "gone": None}])
    c = _read([raw, b'{"type":"b","x":-0.0}'])
    assert c is not None
    assert c.counts.tolist() == [3, 1]
    assert _rows(c, "n") == [-(2**63), 2**63 - 1, None, None]
    assert c.states["x"].tolist() == [packed.VALUE, packed.NULL, packed.MISSING, packed.VALUE]
    assert str(c.floats["x"][3]) == "-0.0"
    assert _rows(c, "ok") == [1, 0, None, None]
    assert c.states["inner"].tolist() == [packed.VALUE, packed.NULL, packed.MISSING, packed.MISSING]
    assert _rows(c, "inner.b") == [2.0, None, None, None]
    assert _rows(c, "items") == [2, 0, None, None]
    assert _rows(c, "items.key") == ["k", "é😀"]
    assert _rows(c, "items.v") == [1, None]
    assert c.states["gone"].tolist() == [packed.MISSING, packed.MISSING, packed.NULL, packed.MISSING]
    assert c.texts["type"] == ["a", "a", "a", "b"]
    c.ints["n"][0] = 1  # the columns are the caller's to change


@pytest.mark.parametrize("raw", [
    b'{"type":"a","zzz":1}',                     # an unknown key
    b'{"type":"a","n":1,"n":2}',                 # a duplicate key
    b'{"type":"a\\u0062"}',                      # an escape
    b'{"type":"a\tb"}',                          # a raw control character
    b'{"type":"\xff"}',                          # invalid UTF-8
    b'{"type":"\xed\xa0\x80"}',                  # a UTF-8 surrogate
    b'{"type":"a","n":1.0}',                     # a float where an int is due
    b'{"type":"a","n":1e2}',
    b'{"type":"a","n":9223372036854775808}',     # past int64
    b'{"type":"a","n":-9223372036854775809}',
    b'{"type":"a","n":123456789012345678901}',
    b'{"type":"a","x":9007199254740993}',        # an int past 2**53 where a float is due
    b'{"type":"a","x":1e400}',                   # not finite
    b'{"type":"a","x":1e-400}',
    b'{"type":"a","x":NaN}',
    b'{"type":"a","x":01}',                      # not JSON
    b'{"type":"a","x":1.}',
    b'{"type":"a","x":.5}',
    b'{"type":"a","x":+1}',
    b'{"type":"a","n":"1"}',                     # another JSON type
    b'{"type":1}',
    b'{"type":"a","ok":1}',
    b'{"type":"a","inner":[]}',
    b'{"type":"a","items":{}}',
    b'{"type":"a","items":[1]}',
    b'{"type":"a","gone":1}',                    # must be absent or null
    b' {"type":"a"}',                            # whitespace before the record
    b'{"type":"a"} x',                           # content after the record
    b'{"type":"a"},',
    b'[{"type":"a"}]]',
    b'[]',                                       # an empty array
    b'[1]',
    b'{"type":"a"',                              # cut short
    b'{"type":"a","n":',
    b'{"type":"a",}',
    b'',
    b'null',
])
def test_declines_what_it_cannot_vouch_for(raw: bytes) -> None:
    assert _read([raw]) is None
    assert _read([b'{"type":"a"}', raw]) is None  # one declined record declines the call


def test_declines_more_elements_than_allowed_and_what_is_not_bytes() -> None:
    raw = orjson.dumps([{"type": "a"}] * 5)
    assert _read([raw], max_elements=5) is not None
    assert _read([raw], max_elements=4) is None
    assert packed.read([bytearray(b'{"type":"a"}')], SPEC, 10) is None  # type: ignore[list-item]


def test_floats_read_as_python_reads_them() -> None:
    """Shortest reprs of random doubles, 17-digit and fixed forms, and exact decimal midpoints between two
    doubles (where a careless rounding shows) read to the same double as `float()`, or are declined."""
    rnd = random.Random(7)
    texts: list[str] = []
    for _ in range(40_000):
        x = struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0]
        if x == x and abs(x) != float("inf"):
            texts += [repr(x), f"{x:.17e}"]
        y = rnd.uniform(0, 1000)
        texts += [repr(y), f"{y:.{rnd.randint(1, 20)}f}"]
    for _ in range(2_000):
        from decimal import Decimal
        m, e = rnd.getrandbits(53) | (1 << 52), rnd.randint(-30, 10)
        texts.append(format((Decimal(2 * m + 1) * Decimal(2) ** (e - 1)).normalize(), "f"))
    read = declined = 0
    for i in range(0, len(texts), 1_000):
        chunk = texts[i:i + 1_000]
        for text in chunk:
            c = _read([b'{"type":"a","x":' + text.encode() + b"}"])
            if c is None:
                declined += 1
                continue
            read += 1
            assert c.floats["x"][0] == float(text), text
    assert read > 0.95 * len(texts)


@st.composite
def _docs(draw: st.DrawFn) -> list[dict[str, Any]]:
    ints = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
    # exponents within +-300 (the reader leaves the rest to msgspec)
    floats = st.one_of(st.none(), st.floats(-1e300, 1e300).filter(lambda x: x == 0 or abs(x) >= 1e-300),
                       st.integers(-(2**53), 2**53))
    texts = st.text(max_size=6)
    item = st.fixed_dictionaries({"key": texts}, optional={"v": ints})
    doc = st.fixed_dictionaries({"type": texts}, optional={
        "n": ints, "x": floats, "ok": st.one_of(st.none(), st.booleans()),
        "inner": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"a": ints, "b": floats})),
        "items": st.one_of(st.none(), st.lists(item, max_size=3)), "gone": st.none()})
    return draw(st.lists(doc, min_size=1, max_size=4))


@settings(max_examples=300, deadline=None)
@given(_docs(), st.booleans(), st.booleans())
def test_random_records_read_as_msgspec_reads_them(docs: list[dict[str, Any]], indent: bool, one: bool) -> None:
    raw = orjson.dumps(docs[0] if one else docs, option=orjson.OPT_INDENT_2 if indent else 0)
    _agrees(raw)
    if not any("\\" in orjson.dumps(d).decode() for d in docs):
        assert _read([raw]) is not None  # no escape: nothing to decline


@settings(max_examples=2_000, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 4))
def test_damaged_records_are_declined_or_read_as_msgspec_reads_them(seed: int, edits: int) -> None:
    """Bytes cut, dropped, doubled or replaced in a valid record: never a crash, never a wrong value."""
    rnd = random.Random(seed)
    raw = bytearray(orjson.dumps([{"type": "a", "n": 12, "x": 0.25, "ok": True, "inner": {"a": 1, "b": -2.5},
                                   "items": [{"key": "k", "v": 3}]}, {"type": "b", "gone": None}]))
    for _ in range(edits):
        at = rnd.randrange(len(raw))
        how = rnd.randrange(4)
        if how == 0:
            del raw[at]
        elif how == 1:
            raw.insert(at, raw[at])
        elif how == 2:
            raw[at] = rnd.choice(b'{}[]",:0123456789.eE-+ntfaxz\\ \x00\xff')
        else:
            del raw[at:]
        if not raw:
            raw = bytearray(b"{")
    try:
        DOCS.decode(bytes(raw) if raw.lstrip()[:1] == b"[" else b"[" + bytes(raw) + b"]")
    except (msgspec.DecodeError, UnicodeDecodeError):
        assert _read([bytes(raw)]) is None
        return
    _agrees(bytes(raw))


def test_a_spec_must_name_parents_first_and_known_kinds() -> None:
    with pytest.raises(ValueError):
        packed.Spec((("a", "q"),))
    with pytest.raises(ValueError):
        packed.read([b"{}"], packed.Spec((("a.b", "i"), ("a", "o"))), 10)
    with pytest.raises(ValueError):
        packed.read([b"{}"], packed.Spec((("a", "i"), ("a.b", "i"))), 10)


def test_columns_are_numpy_of_their_kind() -> None:
    c = _read([b'{"type":"a","n":3,"x":2}'])
    assert c is not None
    assert c.ints["n"].dtype == np.int64 and c.floats["x"].dtype == np.float64
    assert c.floats["x"].tolist() == [2.0] and c.counts.dtype == np.int64
