"""Host CPU and memory from /proc: the sampler's source when there is no accelerator."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class CpuTimes:
    busy: int
    total: int


def read_cpu_times(proc: Path = Path("/proc")) -> CpuTimes:
    """Aggregate jiffies from /proc/stat's first line."""
    with open(proc / "stat") as fh:
        parts = fh.readline().split()
    nums = [int(x) for x in parts[1:]]
    idle = nums[3] + (nums[4] if len(nums) > 4 else 0)
    total = sum(nums[:8])
    return CpuTimes(busy=total - idle, total=total)


def process_cpu_ticks(pid: int, proc: Path = Path("/proc")) -> int:
    """CPU time a process has used so far, user + system, in clock ticks (`os.sysconf("SC_CLK_TCK")`
    a second): fields 14 and 15 of /proc/PID/stat, counted after the command name, which may hold
    spaces and parentheses. Raises OSError when the process is gone."""
    fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def cpu_percent(before: CpuTimes, after: CpuTimes) -> float | None:
    dt = after.total - before.total
    if dt <= 0:
        return None
    return max(0.0, min(100.0, 100.0 * (after.busy - before.busy) / dt))


def memory_percent(proc: Path = Path("/proc")) -> float | None:
    """Used memory (MemTotal - MemAvailable) in percent of MemTotal."""
    info: dict[str, int] = {}
    with open(proc / "meminfo") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            fields = rest.split()
            if fields:
                info[key] = int(fields[0])
    total, avail = info.get("MemTotal"), info.get("MemAvailable")
    if not total or avail is None:
        return None
    return 100.0 * (total - avail) / total
