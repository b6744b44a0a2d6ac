"""Which job and rank use each device of this node: written by the hook, read by the sampler.

Each rank writes one small JSON file `<run_dir>/devices/<device>.json` = {"job", "rank", "pid"}
(atomic rename), so ranks never contend on one file and a restarted rank simply overwrites its
entry. The sampler drops entries whose pid is gone, so a finished job stops claiming a device.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson


def register_device(run_dir: Path, device: int, job: str, rank: int) -> Path | None:
    """Claim `device` for (job, rank); never raises (a sampler that cannot join is not worth a crash)."""
    try:
        folder = run_dir / "devices"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{device}.json"
        tmp = folder / f".{device}.{os.getpid()}.tmp"
        tmp.write_bytes(orjson.dumps({"job": job, "rank": rank, "pid": os.getpid()}))
        os.replace(tmp, path)
        return path
    except OSError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_device_map(run_dir: Path, *, check_pid: bool = True) -> dict[int, tuple[str, int]]:
    """{device: (job, rank)} for the devices a live rank registered."""
    out: dict[int, tuple[str, int]] = {}
    folder = run_dir / "devices"
    if not folder.is_dir():
        return out
    for path in folder.glob("*.json"):
        try:
            data = orjson.loads(path.read_bytes())
            device = int(path.stem)
            if check_pid and not _alive(int(data.get("pid", 0))):
                continue
            out[device] = (str(data["job"]), int(data["rank"]))
        except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            continue
    return out
