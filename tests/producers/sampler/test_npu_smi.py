"""npu-smi info watch parser, on text samples written from the tool's documented output format."""

from __future__ import annotations

from pathlib import Path

from producers.sampler.npu_smi import parse_watch
from producers.sampler.ranks import read_device_map, register_device
from producers.sampler.sampler import build_samples
from schemas import DeviceSample, decode_as, encode

# default watch (all types), two cards with two chips each (Atlas 300I style), header repeated
FULL = """\
NpuID(Idx)  ChipId(Idx) Pwr(W)      Temp(C)     AI Core(%)  AI Cpu(%)   Ctrl Cpu(%) Memory(%)   Memory BW(%)
0           0           12.8        41          0           0           3           4           0
0           1           13.1        42          87          1           5           61          35
1           0           NA          40          0           0           2           4           0
1           1           14.0        43          100         2           4           62          40

NpuID(Idx)  ChipId(Idx) Pwr(W)      Temp(C)     AI Core(%)  AI Cpu(%)   Ctrl Cpu(%) Memory(%)   Memory BW(%)
0           0           12.9        41          0           0           3           4           0
"""

# Atlas 800 training server (910): one chip per NPU, eight NPUs
A910 = FULL.splitlines()[0] + "\n" + "".join(
    f"{n}           0           {180 + n}.5       {50 + n}          {90 + n}          1           7           "
    f"{70 + n}          {30 + n}\n" for n in range(8))

# `-s ptm` (power, temperature, memory only): a narrower header, '-' for a missing value
SUBSET = """\
NpuID(Idx)  ChipId(Idx) Pwr(W)      Temp(C)     Memory(%)
3           0           95.0        -           55
"""

# noise around the table: banners, blank lines, a truncated row, an out-of-range percentage
NOISY = """\
npu-smi 23.0.rc2  Version: 23.0.rc2
NpuID(Idx)  ChipId(Idx) Pwr(W)      Temp(C)     AI Core(%)  AI Cpu(%)   Ctrl Cpu(%) Memory(%)   Memory BW(%)
2           0           70.2        48          55          1
2           0           70.2        48          255         1           6           40          20
"""


def test_full_watch_all_chips_and_repeated_header() -> None:
    rows = list(parse_watch(FULL.splitlines()))
    assert [(r.npu, r.chip) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 0)]
    r = rows[1]
    assert r.values == {"power_w": 13.1, "temp_c": 42.0, "aicore_pct": 87.0, "aicpu_pct": 1.0, "ctrlcpu_pct": 5.0,
                        "mem_pct": 61.0, "membw_pct": 35.0}
    assert rows[2].values["power_w"] is None  # NA
    assert [r.device_index(chips_per_npu=2) for r in rows[:4]] == [0, 1, 2, 3]


def test_910_eight_npus() -> None:
    rows = list(parse_watch(A910.splitlines()))
    assert [r.npu for r in rows] == list(range(8))
    assert rows[7].values["power_w"] == 187.5 and rows[7].values["aicore_pct"] == 97.0


def test_subset_columns_follow_the_header() -> None:
    (row,) = parse_watch(SUBSET.splitlines())
    assert (row.npu, row.chip) == (3, 0)
    assert row.values == {"power_w": 95.0, "temp_c": None, "mem_pct": 55.0}


def test_noise_is_skipped_and_bad_percentages_dropped() -> None:
    (row,) = parse_watch(NOISY.splitlines())
    assert row.values["aicore_pct"] is None and row.values["ctrlcpu_pct"] == 6.0


def test_every_sample_becomes_valid_device_events_joined_to_ranks(tmp_path: Path) -> None:
    register_device(tmp_path, 1, "job-x", 5)
    readings = {r.device_index(2): dict(r.values) for r in parse_watch(FULL.splitlines())}
    samples = build_samples("node-3", "npu", readings, read_device_map(tmp_path), 1_700_000_000_000_000_000)
    assert [s.device for s in samples] == [0, 1, 2, 3]
    assert (samples[1].job, samples[1].rank) == ("job-x", 5) and samples[0].job is None
    for s in samples:  # round trip through the contract's validation
        assert decode_as(DeviceSample, encode(s)) == s
