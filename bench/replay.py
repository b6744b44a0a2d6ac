"""`make bench-replay`: every real multi-rank trace the project has, through the live pipeline, judged beside
the offline analyser and the tool its users already trust on the same input -> bench/results/replay.json.

Per trace:
- live: `steplens replay` (producers/replay) through the real Kafka broker (infra/, this checkout's
  ports) and a real `detect` worker, at the trace's own pace (`--speed`, default 1), its steps
  played until they cover `--steps` steps (default 20; `--repeat N` plays them N times instead): a
  profile holds 1-2 steps, and the detector judges a job once its warm-up (5 steps) is past, a
  straggler over a window of 10 steps (`streams/detect/scopes/sustained.py`) and opens an incident after
  3 flagged steps; the verdict is the trace rank of the rank- or host-scoped incidents (SLOW_RANK,
  SLOW_HOST, R5 ...; hangs excluded), none when there is none; every incident is listed; for a
  2-rank trace, each trace step's wait gap (the later arriver and its peer's extra wait in
  collectives, share of the step: what `streams/detect/scopes/slow_pair.py` judges); a land worker
  lands the same topics into a scratch chdb, and `slowest_ranks` is `steplens ranks` on that history
  (mean busy time = step - exposed communication, slowest first);
- offline: the `steplens analyse` code path (loader + diagnose); the verdict is the rank of its
  slow_rank findings of severity warning or critical (an `info` one is an unconfirmed extreme, or a
  late arriver whose peers wait less than 5 % of a step for it: `named` is the rank of any);
- reference: HolisticTraceAnalysis 0.5.0 `get_potential_stragglers(num_candidates=1)` for Kineto
  (bench/parse_hta.py in the interpreter that has `hta`: $STEPLENS_HTA_PYTHON, else
  .steplens/bench-hta/bin/python, else this one); msprof-analyze 26.2.0 for Ascend outputs
  (`msprof-analyze cluster` on `*_ascend_pt` folders, then its advisor's SlowRankAnalyzer,
  bench/msprof_slow_rank.py, in .steplens/bench-msprof): a dimension whose max-min gap exceeds 5 %
  of the mean step names its extreme rank (most Computing or Free, least Communication: the rank
  the others wait for); "none" when no dimension is flagged;
- agreement: live and offline each equal to the reference (the same rank, or both none), on the
  reference's own question (`ANCHOR_QUESTIONS`). msprof-analyze's advisor asks whether a rank costs
  the others >= 5 % of the step and may answer none: the live answer is the incidents, whose bar is
  the same. HTA's `get_potential_stragglers` ranks every rank by how often it starts its collectives
  last, whatever that costs, and never answers none: the live answer is an incident's rank, else the
  landed history's slowest rank. `live_alerts` compares the incidents alone with either reference,
  and `why_alerts_differ` says why they differ. The file's `traces` is keyed by trace name with
  bench/RESULTS.md's keys (`ranks`, `format`, `live_verdict`, `offline_verdict`, `anchor`,
  `anchor_verdict`, `agreement`) first.

A tool that cannot run records why instead of a verdict. Traces with one rank are listed as not
replayed (nobody to compare with).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench.provenance import git_commit, machine
from infra.settings import REPO_ROOT, Settings, load_settings
from streams.profiles.samples import real_samples_dir

RESULTS = REPO_ROOT / "bench" / "results" / "replay.json"
BUNDLED = REPO_ROOT / "bench" / "data" / "real"
MSPROF_BIN = Path(os.environ.get("STEPLENS_MSPROF_ANALYZE",
                                 str(REPO_ROOT / ".steplens" / "bench-msprof" / "bin" / "msprof-analyze")))
STRAGGLER_SCOPES = frozenset(("rank", "host"))
NOT_STRAGGLER_RULES = frozenset(("HUNG_RANK", "HUNG_HOST"))


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    paths: tuple[Path, ...]
    reference: str  # "hta" | "msprof"
    origin: str


def traces() -> tuple[list[Trace], list[dict[str, str]]]:
    """The real multi-rank traces (and the real traces left out, with why)."""
    real = real_samples_dir()
    kineto = real / "kineto-hta"
    found = [
        Trace("kineto-hta sampled ranks 0+1 of 128", (kineto / "trace_filter_sampled_rank-0.json.gz",
                                                      kineto / "trace_filter_sampled_rank-1.json.gz"),
              "hta", "HolisticTraceAnalysis tests/data/trace_filter, MIT (../shared/data/real)"),
        Trace("torch_npu ranks 0+1 of 8 (ImageNet)", (real / "ascend-torch_npu",), "msprof",
              "Ascend msinsight test/data/pytorch/text/level1, Mulan PSL v2 (../shared/data/real)"),
        Trace("torch_npu ranks 0+1 of 8, level 0 run", (BUNDLED / "msinsight-torch_npu-level0",), "msprof",
              "Ascend msinsight test/data/pytorch/text/level0, Mulan PSL v2 (bench/data/real)"),
        Trace("torch_npu ranks 0+1 of 8, level 2 run", (BUNDLED / "msinsight-torch_npu-level2",), "msprof",
              "Ascend msinsight test/data/pytorch/text/level2, Mulan PSL v2 (bench/data/real)"),
        Trace("msprof-analyze cluster output, 8 ranks", (BUNDLED / "msprof-advisor-8rank",), "msprof",
              "Ascend mstt profiler/msprof_analyze/test/resource/advisor/cluster_analysis_output, Mulan PSL v2 "
              "(bench/data/real)"),
    ]
    kept = [t for t in found if all(p.exists() for p in t.paths)]
    skipped = [{"name": t.name, "why": "input missing: " + ", ".join(str(p) for p in t.paths if not p.exists())}
               for t in found if t not in kept]
    skipped.append({"name": "kineto-hta nccl_parser_config (rank 0 of 2)",
                    "why": "one rank: no other rank to compare with"})
    return kept, skipped


# --- offline ---------------------------------------------------------------------------------------------
def offline_verdict(paths: tuple[Path, ...]) -> dict[str, Any]:
    from streams.profiles.analysis.diagnose import diagnose
    from streams.profiles.analysis.ranks import late_start_straggler
    from streams.profiles.loader import load_all

    started = time.perf_counter()
    profiles, clusters = load_all(list(paths))
    diag = diagnose(profiles, clusters)
    named = [f for f in diag.cluster if f.cause == "slow_rank" and f.rank is not None]
    confirmed = [f.rank for f in named if f.severity != "info"]
    return {"verdict": Counter(confirmed).most_common(1)[0][0] if confirmed else None,
            "named": Counter(f.rank for f in named).most_common(1)[0][0] if named else None,
            "findings": [{"severity": f.severity, "rank": f.rank, "summary": f.summary} for f in named],
            "late_start_straggler": late_start_straggler(profiles) if profiles else None,
            **({"matched_waits": waits} if (waits := matched_waits(profiles)) else {}),
            "seconds": round(time.perf_counter() - started, 3)}


def matched_waits(profiles: list[Any]) -> dict[str, Any] | None:
    """For a pair whose traces lost different collectives (ranks.py matched them by their common end): per trace
    step, the rank that starts last at the collectives both traces hold and its peer's summed wait for it over the
    step's time, the figure the live pair rule would read had both traces kept every collective."""
    from streams.profiles.analysis.ranks import late_arrivals, match_collectives

    if len(profiles) != 2 or not profiles[0].steps:
        return None
    matched = match_collectives(profiles)
    if not matched.by_end:
        return None
    steps = sorted(profiles[0].steps, key=lambda s: s.ts)
    waited: dict[int, dict[int, float]] = {}
    for arrival in late_arrivals(matched.matched):
        step = next((s for s in reversed(steps) if s.ts <= arrival.first_start_us), steps[0])
        by_rank = waited.setdefault(step.number, {})
        by_rank[arrival.late_rank] = by_rank.get(arrival.late_rank, 0.0) + arrival.lateness_us
    rows = []
    for s in steps:
        if s.number in waited and s.dur > 0:
            late, wait_us = max(waited[s.number].items(), key=lambda kv: kv[1])
            rows.append({"step": s.number, "late": late, "peer_wait_share": round(wait_us / s.dur, 4)})
    return {"collectives": len(matched.matched), "unmatched": matched.unmatched, "steps": rows}


# --- references ------------------------------------------------------------------------------------------
def _hta_python() -> str | None:
    for candidate in (os.environ.get("STEPLENS_HTA_PYTHON"), str(REPO_ROOT / ".steplens" / "bench-hta" / "bin" /
                                                                 "python"), sys.executable):
        if candidate and Path(candidate).exists():
            probe = subprocess.run([candidate, "-c", "import hta"], capture_output=True, check=False)
            if probe.returncode == 0:
                return candidate
    return None


def hta_verdict(paths: tuple[Path, ...], tmp: Path) -> dict[str, Any]:
    python = _hta_python()
    if python is None:
        return {"tool": "HolisticTraceAnalysis 0.5.0", "verdict": None,
                "error": "hta not installed (make bench-replay installs it; or set STEPLENS_HTA_PYTHON)"}
    folder = tmp / "hta"
    folder.mkdir()
    for p in paths:
        (folder / p.name).symlink_to(p.resolve())
    started = time.perf_counter()
    done = subprocess.run([python, str(REPO_ROOT / "bench" / "parse_hta.py"), str(folder)], capture_output=True,
                          text=True, check=False, cwd=REPO_ROOT)
    seconds = round(time.perf_counter() - started, 2)
    if done.returncode != 0:
        return {"tool": "HolisticTraceAnalysis 0.5.0", "verdict": None, "seconds": seconds,
                "error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    out = orjson.loads(done.stdout.strip().splitlines()[-1])
    stragglers = out.get("stragglers")
    return {"tool": "HolisticTraceAnalysis 0.5.0", "method": "get_potential_stragglers(num_candidates=1)",
            "verdict": int(stragglers[0]) if stragglers else None, "stragglers": stragglers, "seconds": seconds,
            **({} if stragglers is not None else {"error": "HTA raised (no NCCL kernels or one rank)"})}


def _msprof_rank(key: str) -> int:
    return int(key.rpartition("_")[2])  # SlowRankAnalyzer's "<step>_<rank>"


def msprof_verdict(paths: tuple[Path, ...], tmp: Path) -> dict[str, Any]:
    tool = "msprof-analyze 26.2.0"
    python = MSPROF_BIN.parent / "python"
    if not MSPROF_BIN.exists():
        return {"tool": tool, "verdict": None, "error": f"{MSPROF_BIN} not installed (make bench-replay installs it)"}
    folder = tmp / "msprof"
    folder.mkdir()
    started = time.perf_counter()
    root = paths[0]
    ascend = sorted(d for d in root.glob("*_ascend_pt") if d.is_dir()) if root.is_dir() else []
    if ascend:
        src = folder / "src"
        src.mkdir()
        for d in ascend:
            (src / d.name).symlink_to(d.resolve())
        done = subprocess.run([str(MSPROF_BIN), "cluster", "-d", str(src), "-o", str(folder / "out")],
                              capture_output=True, text=True, check=False, cwd=folder)
        if done.returncode != 0 or not (folder / "out" / "cluster_analysis_output").is_dir():
            return {"tool": tool, "verdict": None, "error": f"msprof-analyze cluster failed: exit {done.returncode}"}
        analysed = folder / "out"
        how = "msprof-analyze cluster, then advisor SlowRankAnalyzer"
    else:
        shutil.copytree(root, folder / "out" / "cluster_analysis_output")
        analysed = folder / "out"
        how = "advisor SlowRankAnalyzer on the shipped cluster_analysis_output"
    done = subprocess.run([str(python), str(REPO_ROOT / "bench" / "msprof_slow_rank.py"), str(analysed)],
                          capture_output=True, text=True, check=False, cwd=folder)
    seconds = round(time.perf_counter() - started, 2)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        return {"tool": tool, "verdict": None, "seconds": seconds, "error": tail}
    out = orjson.loads(done.stdout.strip().splitlines()[-1])
    named: list[tuple[float, int]] = []  # (gap ratio, rank) of each flagged dimension
    for dim, info in out["dimensions"].items():
        if info.get("flagged"):
            key = info["min"] if dim == "communication" else info["max"]
            named.append((float(info["gap_ratio"]), _msprof_rank(str(key))))
    votes = Counter(rank for _, rank in named)
    verdict = None
    if named:
        best = max(votes.values())
        verdict = max((gap, rank) for gap, rank in named if votes[rank] == best)[1]
    return {"tool": tool, "method": how, "verdict": verdict, "bottleneck": out["bottleneck"].strip(),
            "dimensions": out["dimensions"], "seconds": seconds}


# --- live ------------------------------------------------------------------------------------------------
def live_verdict(incidents: list[dict[str, Any]], trace_rank: Callable[[int], int]) -> int | None:
    ranks = Counter(trace_rank(int(r)) for i in incidents
                    if i.get("scope") in STRAGGLER_SCOPES and i.get("rule") not in NOT_STRAGGLER_RULES
                    for r in i.get("ranks") or [])
    return ranks.most_common(1)[0][0] if ranks else None


def run_live(settings: Settings, replays: list[Any], speed: float, logs: Path,
             stall_s: float = 120.0, land_db: Path | None = None) -> dict[str, dict[str, Any]]:
    """Send every replay through Kafka to a fresh detect worker; each job's incident events, as published.

    With `land_db`, a land worker lands the same topics into an embedded chdb there, and each job gets
    `slowest_ranks`: the fleet history's answer (`steplens ranks`) once the land worker has stopped."""
    from bench.detection.run import read_alerts, wait_jobs_finished
    from infra.clients import kafka_client_config
    from producers.emitter import BackgroundEmitter
    from producers.exporter import KafkaExporter
    from producers.replay import send
    from schemas import Topics
    from steplens.demo import start_worker, stop_worker
    from steplens.lag import end_offsets, wait_pipeline_caught_up
    from streams.land.processor import landing_types
    from streams.topics_admin import DetectTopics, ensure_topics

    topics = Topics(settings.topic_prefix)
    ensure_topics(settings, topics, settings.topic_partitions)
    alert_start = end_offsets(settings, topics.incidents)
    env = {**os.environ, "STEPLENS_HOME": str(settings.home), "STEPLENS_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "STEPLENS_TOPIC_PREFIX": settings.topic_prefix, "STEPLENS_APP_ID": settings.app_id,
           "STEPLENS_TOPIC_PARTITIONS": str(settings.topic_partitions),
           "STEPLENS_SECRETS_DIR": str(settings.secrets_path)}
    workers = [start_worker("detect", env, logs)]
    if land_db is not None:
        workers.append(start_worker("land", {**env, "STEPLENS_CLICKHOUSE_URL": "", "STEPLENS_CHDB_PATH": str(land_db)},
                                    logs))
    out: dict[str, dict[str, Any]] = {}
    try:
        for replay in replays:
            exporter = KafkaExporter(settings.kafka_bootstrap, extra_config=kafka_client_config(settings, "producer"))
            emitter = BackgroundEmitter(exporter, topics, name=f"replay-{replay.job}", spool_dir=None)
            try:
                result = send(replay, emitter, speed=speed)
            finally:
                emitter.close(timeout=30)
            out[replay.job] = {"events": result.events, "dropped": result.dropped,
                               "send_seconds": round(result.seconds, 2)}
        groups = {f"{settings.app_id}-detect-decode": [topics.steps, topics.kernel_summaries, topics.device,
                                                       topics.jobs],
                  f"{settings.app_id}-detect": [DetectTopics(settings.topic_prefix).partials]}
        if land_db is not None:
            groups[f"{settings.app_id}-land"] = list(landing_types(topics))
        wait_pipeline_caught_up(settings, groups, workers, stall_s=stall_s, every_s=1.0)
        unfinished = wait_jobs_finished(settings, set(out), 120.0)
        if land_db is not None:  # the incidents published meanwhile land too
            wait_pipeline_caught_up(settings, groups, workers, stall_s=stall_s, every_s=1.0)
    finally:
        for worker in workers:
            stop_worker(worker)
    alerts = read_alerts(settings, topics.incidents, alert_start, set(out))
    for job, entry in out.items():
        entry["finished"] = job not in unfinished
        entry["incidents"] = [a for a in alerts if a.get("job") == job]
    if land_db is not None:
        history = replace(settings, clickhouse_url="", chdb_path=land_db)
        for job, entry in out.items():
            entry["slowest_ranks"] = slowest_ranks(history, job)
    return out


def slowest_ranks(settings: Settings, job: str) -> list[dict[str, Any]]:
    """`steplens ranks --job JOB` on the landed history: every rank, slowest (most busy time) first."""
    from sinks import open_backend
    from steplens.queries.base import run
    from steplens.queries.fleet import slowest_ranks as query

    backend = open_backend(settings, "read")
    try:
        result = run(backend, query(job, limit=1_000_000))
    finally:
        backend.close()
    return result.records()


def _summary(incident: dict[str, Any], trace_rank: Callable[[int], int]) -> dict[str, Any]:
    return {"state": incident.get("state"), "rule": incident.get("rule"), "scope": incident.get("scope"),
            "ranks": [trace_rank(int(r)) for r in incident.get("ranks") or []],
            "steps": [incident.get("step_first"), incident.get("step_last")],
            "summary": incident.get("summary")}


def pair_gaps(replay: Any) -> list[dict[str, Any]]:
    """Per trace step of a 2-rank replay: the later arriver (least exposed communication) and its peer's extra
    wait over the pair's mean step, as `streams/detect/scopes/slow_pair.py` reads them; [] for other replays."""
    from schemas import StepEvent

    if len(replay.ranks) != 2:
        return []
    out = []
    for step in replay.steps[: len(replay.steps) // replay.repeats]:
        events = sorted((e for e in step.events if isinstance(e, StepEvent)), key=lambda e: e.rank)
        if len(events) != 2:
            continue
        first, second = events[0].phases.comm_exposed_ms, events[1].phases.comm_exposed_ms
        step_ms = sum(e.end_ns - e.start_ns for e in events) / 2e6
        if first is None or second is None or step_ms <= 0:
            continue
        late = events[0] if first < second else events[1]
        out.append({"step": step.step, "late": replay.trace_rank(late.rank),
                    "peer_wait_share": round(abs(second - first) / step_ms, 4)})
    return out


def _steps_text(gaps: list[dict[str, Any]]) -> str:
    return "; ".join(f"step {g['step']}: rank {g['late']} late, its peer waits {100 * g['peer_wait_share']:.1f} %"
                     for g in gaps)


def _why_not(trace_ranks: int, live: int | None, reference: int | None, gaps: list[dict[str, Any]],
             matched: dict[str, Any] | None = None) -> str | None:
    if live == reference:
        return None
    if trace_ranks == 2:
        lost = ("" if not matched else
                f". Each rank's trace lacks collectives the other's holds: the replay leaves the "
                f"{matched['unmatched']} kernels without a peer out of the exposed communication, so the steps "
                f"compare the {matched['collectives']} both traces hold; by their start times (the offline "
                f"analysis): {_steps_text(matched['steps'])}")
        return ("2 ranks: the live pair rule names the later arriver when its peer's extra wait is >= 5 % of the step "
                "and >= 6 sigma (2 x slow_rank_z) of the pair's step-to-step noise "
                "(streams/detect/scopes/slow_pair.py); the trace's steps: "
                f"{_steps_text(gaps)}{lost}. The reference names the later of the two from per-collective start "
                "times, whatever the wait costs, which the step events do not carry")
    return ("the live scopes name a slow rank that is an outlier of its group (robust z, Dixon's Q at 99.5 %) or "
            "that its group waits for alone >= 5 % of the step, step after step "
            "(streams/detect/scopes/sustained.py); the reference names the extreme rank of a dimension whose spread "
            "exceeds its threshold")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__.splitlines()[0])
    p.add_argument("--speed", type=float, default=1.0, help="replay pace (1 = the trace's own; 0 = flat out)")
    p.add_argument("--steps", type=int, default=20, help="play each trace until it covers this many steps "
                   "(default 20: warm-up, a 10-step window and 3 flagged steps)")
    p.add_argument("--repeat", type=int, help="plays of each trace's steps (overrides --steps)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    from infra.launcher import InfraConfig, KafkaBroker
    from producers.replay import load_replay

    started = datetime.now(UTC).isoformat(timespec="seconds")
    stamp = time.strftime("%H%M%S")
    base = load_settings()
    cfg = InfraConfig.from_env()
    broker = KafkaBroker(cfg)
    broker.install()
    broker.start()
    settings = replace(base, kafka_bootstrap=broker.bootstrap, topic_prefix=f"{base.topic_prefix}replay{stamp}.",
                       app_id=f"replay{stamp}", topic_partitions=2)
    found, skipped = traces()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="steplens-bench-replay-") as tmp_s:
        tmp = Path(tmp_s)
        replays = []
        for i, trace in enumerate(found):
            repeats = args.repeat or _repeats(trace.paths, args.steps)
            replay = load_replay(list(trace.paths), f"replay{stamp}-{i}", time.time_ns(), repeats=repeats)
            replays.append(replay)
            work = tmp / str(i)
            work.mkdir()
            print(f"• {trace.name}: offline and {trace.reference} verdicts", flush=True)
            reference = hta_verdict(trace.paths, work) if trace.reference == "hta" else msprof_verdict(trace.paths,
                                                                                                      work)
            rows.append({"name": trace.name, "anchor_kind": trace.reference, "origin": trace.origin,
                         "paths": [os.path.relpath(p, REPO_ROOT) for p in trace.paths], "format": replay.format,
                         "trace_ranks": sorted(replay.ranks), "trace_world": replay.trace_world,
                         "steps_in_trace": len(replay.steps) // replay.repeats, "repeats": replay.repeats,
                         "notes": replay.notes, "offline": offline_verdict(trace.paths), "reference": reference})
        logs = cfg.logs_dir
        logs.mkdir(parents=True, exist_ok=True)
        print(f"• live: {len(replays)} replays through Kafka and a detect worker (speed {args.speed:g}, "
              f"{'x' + str(args.repeat) if args.repeat else f'>= {args.steps} steps'})", flush=True)
        live = run_live(settings, replays, args.speed, logs, land_db=tmp / "chdb")
    for row, replay in zip(rows, replays, strict=True):
        entry = live[replay.job]
        alerts = live_verdict(entry["incidents"], replay.trace_rank)
        history = [{**r, "rank": replay.trace_rank(int(r["rank"]))} for r in entry.get("slowest_ranks", [])]
        gaps = pair_gaps(replay)
        row["live"] = {"verdict": alerts, "job": replay.job, "events": entry["events"], "dropped": entry["dropped"],
                       "send_seconds": entry["send_seconds"], "finished": entry["finished"],
                       "incidents": [_summary(i, replay.trace_rank) for i in entry["incidents"]],
                       "slowest_ranks": [{k: r[k] for k in ("rank", "steps", "busy_ms", "step_ms", "vs_median")}
                                         for r in history[:3]],
                       **({"pair_gaps": gaps} if gaps else {})}
        row["agreement"] = judge(row, history, len(replay.ranks), gaps)
    result = {"traces": {r["name"]: keyed(r) for r in rows}, "not_replayed": skipped, "speed": args.speed,
              "steps": args.steps, "repeat": args.repeat,
              "agreement": {r["name"]: r["agreement"]["both"] for r in rows},
              "machine": machine(), "started": started, "git": git_commit()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(f"{'trace':<42} {'live':>5} {'(alerts)':>8} {'offline':>8} {'anchor':>7} {'agree':>6}")
    for name, t in result["traces"].items():
        agree = "yes" if t["agreement"] else "NO"
        print(f"{name:<42} {_show(t['live_verdict']):>5} {_show(t['live_alerts_verdict']):>8} "
              f"{_show(t['offline_verdict']):>8} {_show(t['anchor_verdict']):>7} {agree:>6}")
    print(f"wrote {args.out}")
    return 0


ANCHOR_QUESTIONS = {
    "hta": ("which rank starts its collectives last most often, whatever it costs (get_potential_stragglers ranks "
            "every rank and never answers none); live: the rank of an incident, else the fleet history's slowest "
            "rank (`steplens ranks`: most busy time, step - exposed communication, on the landed steps); offline: "
            "a slow rank (warning), else the late arriver it names below the 5 % bar (info)"),
    "msprof": ("does a rank cost the others >= 5 % of the mean step, and which (the advisor answers none when no "
               "dimension is flagged); live: the ranks of the incidents (the same 5 % bar), none without one; "
               "offline: its slow ranks (warning: the same bar), none without one"),
}


def history_verdict(history: list[dict[str, Any]]) -> int | None:
    """The landed history's slowest rank: the first of `steplens ranks` when it is busier than the next."""
    if len(history) < 2 or float(history[0]["busy_ms"]) <= float(history[1]["busy_ms"]):
        return None
    return int(history[0]["rank"])


def judge(row: dict[str, Any], history: list[dict[str, Any]], trace_ranks: int,
          gaps: list[dict[str, Any]]) -> dict[str, Any]:
    """Live and offline verdicts against the anchor's, each on the anchor's own question (`ANCHOR_QUESTIONS`);
    the incidents alone against the anchor as well (`live_alerts`), with why they differ."""
    ref = row["reference"]
    alerts = row["live"]["verdict"]
    if "error" in ref:
        return {"live": False, "offline": False, "both": False, "live_alerts": False, "live_answer": alerts,
                "offline_answer": row["offline"]["verdict"], "why_alerts_differ": "no anchor verdict"}
    costless = row["anchor_kind"] == "hta"  # the anchor names a rank whatever it costs
    answer = history_verdict(history) if alerts is None and costless else alerts
    offline = row["offline"]["verdict"]
    offline_answer = row["offline"].get("named") if offline is None and costless else offline
    live_ok = answer == ref["verdict"]
    offline_ok = offline_answer == ref["verdict"]
    out = {"live": live_ok, "offline": offline_ok, "both": live_ok and offline_ok, "live_answer": answer,
           "offline_answer": offline_answer, "live_alerts": alerts == ref["verdict"],
           "offline_warnings": offline == ref["verdict"], "question": ANCHOR_QUESTIONS[row["anchor_kind"]]}
    why = _why_not(trace_ranks, alerts, ref["verdict"], gaps, row["offline"].get("matched_waits"))
    if why is not None:
        out["why_alerts_differ"] = why
    return out


def keyed(row: dict[str, Any]) -> dict[str, Any]:
    """A trace's entry of `traces` (keyed by name): bench/RESULTS.md's keys first, then the detail."""
    ref = row["reference"]
    agreement = row["agreement"]
    return {"ranks": len(row["trace_ranks"]), "format": row["format"], "live_verdict": agreement["live_answer"],
            "live_alerts_verdict": row["live"]["verdict"], "offline_verdict": agreement["offline_answer"],
            "offline_warnings_verdict": row["offline"]["verdict"],
            "anchor": ref["tool"], "anchor_verdict": None if "error" in ref else ref["verdict"],
            "agreement": agreement["both"], "agreement_detail": agreement,
            **{k: v for k, v in row.items() if k not in ("name", "agreement", "anchor_kind")}}


def _repeats(paths: tuple[Path, ...], steps: int) -> int:
    """Plays of a trace's steps that cover at least `steps` steps."""
    from producers.replay import load_replay

    once = load_replay(list(paths), "probe", 0)
    return max(1, -(-steps // len(once.steps)))


def _show(value: Any) -> str:
    return "none" if value is None else str(value)


if __name__ == "__main__":
    sys.exit(main())
