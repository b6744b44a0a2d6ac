"""Find and parse every dump under the given paths, whatever their format (files or directories)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from streams.profiles.importers.ascend_pt import is_ascend_dir, parse_ascend
from streams.profiles.importers.kineto import parse_kineto
from streams.profiles.importers.msprof_cluster import is_cluster_dir, parse_cluster
from streams.profiles.jsonstream import TraceFormatError
from streams.profiles.model import ClusterTable, Profile

_NOT_TRACES = ("profiler_info", "profiler_metadata", "communication", "cluster_", "communication_group")
Progress = Callable[[str, int, int], None]  # (source, bytes done, bytes total)


def discover(path: Path) -> Iterator[tuple[str, Path]]:
    """(format, path) of each dump under path: kineto files, *_ascend_pt dirs, msprof cluster dirs."""
    if path.is_file():
        if path.name.endswith((".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")):
            yield "kineto", path
            return
        raise TraceFormatError(f"{path}: not a Kineto trace (.json / .json.gz)")
    if not path.exists():
        raise TraceFormatError(f"{path}: no such file or directory")
    if is_ascend_dir(path):
        yield "ascend_pt", path
        return
    if is_cluster_dir(path):
        yield "msprof", path
    found = False
    for child in sorted(path.iterdir()):
        if child.is_dir():
            for item in discover(child):
                found = True
                yield item
        elif child.name.endswith((".json", ".json.gz")) and not child.name.startswith(_NOT_TRACES):
            found = True
            yield "kineto", child
    del found


def load(fmt: str, path: Path, progress: Progress | None = None) -> Profile | ClusterTable:
    total = path.stat().st_size if path.is_file() else 0

    def tick(done: int) -> None:
        if progress is not None:
            progress(str(path), done, total)

    if fmt == "kineto":
        return parse_kineto(path, progress=tick)
    if fmt == "ascend_pt":
        return parse_ascend(path, progress=tick)
    if fmt == "msprof":
        return parse_cluster(path)
    raise TraceFormatError(f"{path}: unknown profile format {fmt!r}")


def load_all(paths: list[Path], progress: Progress | None = None) -> tuple[list[Profile], list[ClusterTable]]:
    profiles: list[Profile] = []
    clusters: list[ClusterTable] = []
    for root in paths:
        items = list(discover(root))
        if not items:
            raise TraceFormatError(f"{root}: no Kineto trace, torch_npu output or msprof-analyze cluster output")
        for fmt, path in items:
            result = load(fmt, path, progress)
            (clusters if isinstance(result, ClusterTable) else profiles).append(result)  # type: ignore[arg-type]
    return profiles, clusters
