"""Find and parse every dump under the given paths, whatever their format (files or directories).

A path named on the command line must be a dump (else the run stops: exit 2). A folder may hold
other things: its `.json` files that hold no trace event array (configs, metadata, results) are
skipped with a warning, so one stray file does not abort the analysis of the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from streams.profiles.importers.ascend_pt import is_ascend_dir, parse_ascend
from streams.profiles.importers.kineto import parse_kineto
from streams.profiles.importers.msprof_cluster import is_cluster_dir, is_cluster_file, parse_cluster
from streams.profiles.jsonstream import NotATraceError, TraceFormatError, looks_like_trace
from streams.profiles.model import ClusterTable, Profile

_NOT_TRACES = ("profiler_info", "profiler_metadata", "communication", "cluster_", "communication_group")
Progress = Callable[[str, int, int], None]  # (source, bytes done, bytes total)
Warn = Callable[[str], None]


def discover(path: Path) -> Iterator[tuple[str, Path]]:
    """(format, path) of each dump under path: kineto files, *_ascend_pt dirs, msprof cluster dirs or files."""
    if path.is_file():
        if is_cluster_file(path):
            yield "msprof", path
            return
        yield "kineto", path  # whatever its name: the trace reader says so if its content is no trace
        return
    if not path.exists():
        raise TraceFormatError(f"{path}: no such file or directory")
    if is_ascend_dir(path):
        yield "ascend_pt", path
        return
    if is_cluster_dir(path):
        yield "msprof", path
    for child in sorted(path.iterdir()):
        if child.is_dir():
            yield from discover(child)
        elif child.name.startswith(_NOT_TRACES):
            continue
        elif is_cluster_file(child):  # a renamed cluster table, by its content
            yield "msprof", child
        elif child.name.endswith((".json", ".json.gz")) or looks_like_trace(child):  # a renamed trace too
            yield "kineto", child


def load(fmt: str, path: Path, progress: Progress | None = None) -> Profile | ClusterTable:
    total = path.stat().st_size if path.is_file() else 0

    def tick(done: int) -> None:
        if progress is not None:
            progress(str(path), done, total)

    if fmt == "kineto":
        try:
            profile = parse_kineto(path, progress=tick)
        except (AttributeError, TypeError) as exc:  # a JSON array of something else than event objects
            raise NotATraceError(f"{path}: not a trace: its array holds no event objects ({exc})") from exc
        bare = profile.meta.get("schemaVersion") is None and profile.world is None  # no Kineto header at all
        if bare and profile.events and not (len(profile.kernels) or len(profile.ops) or len(profile.runtime)):
            raise NotATraceError(f"{path}: not a trace: none of its {profile.events} entries is a trace event")
        return profile
    if fmt == "ascend_pt":
        return parse_ascend(path, progress=tick)
    if fmt == "msprof":
        return parse_cluster(path)
    raise TraceFormatError(f"{path}: unknown profile format {fmt!r}")


def load_all(paths: list[Path], progress: Progress | None = None,
             warn: Warn | None = None) -> tuple[list[Profile], list[ClusterTable]]:
    profiles: list[Profile] = []
    clusters: list[ClusterTable] = []
    for root in paths:
        items = list(discover(root))
        loaded = 0
        for fmt, path in items:
            try:
                result = load(fmt, path, progress)
            except NotATraceError as exc:
                if path == root:
                    raise
                if warn is not None:
                    warn(f"skipped {path}: not a profiler dump ({exc})")
                continue
            loaded += 1
            (clusters if isinstance(result, ClusterTable) else profiles).append(result)  # type: ignore[arg-type]
        if not loaded:
            raise TraceFormatError(f"{root}: no Kineto trace, torch_npu output or msprof-analyze cluster output")
    return profiles, clusters
