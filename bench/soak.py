"""`make soak`: half an hour of a paced multi-job fleet while every worker role is restarted.

What an operator's week looks like, compressed: several concurrent jobs of 64-1,024 ranks at
1 step/s start and end (each with one slow rank: the incident to find), every few minutes one
worker role is restarted (SIGTERM and SIGKILL alternating), a second detect and a second land
worker join and leave, the broker is restarted once, and landing moves from embedded chdb to
the ClickHouse server a third of the way in (with `--clickhouse both`, the default: both sinks
in one run; the second land worker joins once landing is on the server, as embedded chdb is one
process's store).

Writes bench/results/soak.json (keys in RESULTS.md):
- duration_s, restarts (worker restarts), broker_restarts;
- lost (sent step and job events never landed, over both sinks), duplicates (rows beyond one per
  key under FINAL, per sink, summed), cross_sink_overlap (keys in both sinks);
- duplicate_incidents (SLOW_RANK incident ids beyond one per injected slow rank, plus repeated
  opens), incidents_expected / incidents_found, other_incidents (incidents on other ranks);
- max_committed_lag_after_restart_s: after each restart, seconds until every group committed what
  was in its topics at that moment (worst over the run), and each restart's figure;
- rss_mb_start / rss_mb_end per role: the first instance's RSS after warm-up and the last
  instance's at the end; rss_ratio_max per role: an instance's end over its own after-warm-up value;
- idle_cpu_pct per worker: once every job ended and every group caught up, CPU over 60 s (/proc).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.chaos import Harness, Offsets, Rig, Sent, emit_job, log, poll_until, read_alerts
from bench.provenance import git_commit, machine
from bench.restarts import groups, uncommitted
from infra.launcher import ClickHouseServer, InfraConfig, KafkaBroker
from infra.settings import REPO_ROOT, Settings, load_settings
from producers.sampler.procfs import process_cpu_ticks
from producers.simulator.catalogue import straggler
from producers.simulator.fleet import FleetJob
from producers.simulator.topology import Topology
from sinks import open_backend
from sinks.migrations.runner import migrate

RESULTS = REPO_ROOT / "bench" / "results" / "soak.json"
STEADY_RESULTS = REPO_ROOT / "bench" / "results" / "soak-steady.json"
SERIES_EVERY_S = 60.0
SIZES = (64, 256, 1024, 128, 512)
WARM_UP_S = 60.0


@dataclass
class Instance:
    """One worker process's life: its RSS after warm-up and at its end."""

    role: str
    name: str
    pid: int
    started: float
    rss_warm_mb: float | None = None
    rss_end_mb: float | None = None
    rss_series: list[tuple[float, float]] = field(default_factory=list)  # (seconds since its start, MB)


@dataclass
class Fleet:
    """The jobs sent so far, each with its own record of what went out and its slow rank."""

    sent: dict[str, Sent] = field(default_factory=dict)
    slow: dict[str, int] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


class Soak:
    def __init__(self, harness: Harness, broker: KafkaBroker, server_url: str, mode: str, minutes: float,
                 restart_every_s: float, concurrent: int, seed: int = 5, steady: bool = False,
                 job_ranks: int = 0) -> None:
        self.harness = harness
        self.broker = broker
        self.server_url = server_url
        self.mode = mode
        self.duration = minutes * 60
        self.restart_every_s = restart_every_s
        self.concurrent = concurrent
        self.rng = random.Random(seed)
        self.rig: Rig = harness.rig("soak", server_url=server_url if mode == "server" else "")
        self.offsets = Offsets(self.rig.settings)
        self.fleet = Fleet()
        self.instances: list[Instance] = []
        self.recoveries: list[dict[str, Any]] = []
        self.restarts = 0
        self.broker_restarts = 0
        self.stop = threading.Event()
        self.t0 = 0.0
        self.steady = steady  # constant load, nothing disturbed: does a worker's memory stay flat?
        self.job_ranks = job_ranks  # every job this size (0: the SIZES cycle): a load whose state is the same
        self.next_series_s = 0.0

    # --- workers ----------------------------------------------------------------------------------
    def start(self, role: str, name: str | None = None) -> None:
        name = name or role
        self.rig.start(role, name)
        self.instances.append(Instance(role, name, self.rig.procs[name].pid, time.monotonic()))
        self.rig.wait_ready((name,))

    def end(self, name: str, sig: int) -> None:
        inst = next(i for i in reversed(self.instances) if i.name == name)
        inst.rss_end_mb = rss_mb(inst.pid)
        self.rig.kill(name, sig)
        self.rig.procs.pop(name)

    def restart(self, name: str, role: str, sig: int) -> None:
        self.end(name, sig)
        self.start(role, name)
        self.restarts += 1
        self.measure_recovery(f"restart {name} ({signal.Signals(sig).name})")

    def measure_recovery(self, what: str) -> None:
        """Seconds until every group committed what its topics held when the worker was back."""
        t_up = time.monotonic()
        targets: dict[str, dict[Any, int]] = {}

        def snapshot() -> bool:
            for group, names in groups(self.rig).items():
                targets[group] = self.offsets.ends(names)
            return True

        poll_until(snapshot, 120.0)
        ok = poll_until(lambda: all(self.offsets.covered(g, t) for g, t in targets.items()), 300.0, every=0.5)
        seconds = round(time.monotonic() - t_up, 1) if ok else None
        self.recoveries.append({"at_s": round(t_up - self.t0), "what": what, "committed_lag_s": seconds})
        log(f"{what}: committed lag back to 0 in {seconds} s")

    def sample_rss(self) -> None:
        now = time.monotonic()
        for inst in self.instances:
            if inst.rss_warm_mb is None and now - inst.started >= WARM_UP_S and inst.name in self.rig.procs:
                inst.rss_warm_mb = rss_mb(inst.pid)
        if now - self.t0 >= self.next_series_s:  # one sample per live worker a minute
            self.next_series_s += SERIES_EVERY_S
            for inst in self.instances:
                mb = rss_mb(inst.pid) if inst.name in self.rig.procs and inst.rss_end_mb is None else None
                if mb is not None:
                    inst.rss_series.append((round(now - inst.started, 1), mb))

    # --- load -------------------------------------------------------------------------------------
    def job(self, n: int) -> FleetJob:
        size = self.job_ranks or SIZES[n % len(SIZES)]
        slow = self.rng.randrange(size)
        topo = Topology(dp=size // 8, tp=8, pp=1)
        job = FleetJob(f"soak-{n}", topo, self.rng.randint(150, 300), [straggler(topo, slow, 1.4)], n)
        self.fleet.slow[job.job_id] = slow
        return job

    def load(self) -> None:
        n = 0
        while time.monotonic() - self.t0 < self.duration - 300 and not self.stop.is_set():
            running = [t for t in self.fleet.threads if t.is_alive()]
            if len(running) < self.concurrent:
                job = self.job(n)
                sent = self.fleet.sent[job.job_id] = Sent()
                t = threading.Thread(target=emit_job, args=(self.rig, job, sent, 1.0), daemon=True,
                                     name=job.job_id)
                t.start()
                self.fleet.threads.append(t)
                log(f"job {job.job_id}: {job.topology.world} ranks, {job.steps} steps, slow rank "
                    f"{self.fleet.slow[job.job_id]}")
                n += 1
            self.stop.wait(5.0)

    # --- the schedule -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.start("detect")
        self.start("land")
        self.t0 = time.monotonic()
        loader = threading.Thread(target=self.load, daemon=True)
        loader.start()
        events = self.schedule()
        for at, action in events:
            while time.monotonic() - self.t0 < at:
                self.sample_rss()
                time.sleep(1.0)
            log(f"t={at:.0f}s: {action.__doc__ or action}")
            action()
        loader.join()
        for t in self.fleet.threads:
            t.join(900)
        caught = poll_until(lambda: not any(uncommitted(self.rig, self.offsets).values()), 600.0, every=2.0)
        self.sample_rss()
        idle = self.idle_cpu(60.0)
        for name in list(self.rig.procs):
            self.end(name, signal.SIGTERM)
        duration = time.monotonic() - self.t0
        self.offsets.close()
        return self.result(duration, caught, idle)

    def schedule(self) -> list[tuple[float, Any]]:
        """(seconds after the start, action): role restarts every `restart_every_s`, the second
        workers joining and leaving, the broker restart and the switch of sink."""
        d = self.duration - 300  # the last 5 minutes: the jobs end, nothing is disturbed
        out: list[tuple[float, Any]] = []
        if self.steady:
            return [(d, self._mark_end_of_load)]
        roles = ("detect", "land")
        k = 0
        t = self.restart_every_s
        while t < d:
            name = roles[k % 2]
            sig = signal.SIGTERM if (k // 2) % 2 == 0 else signal.SIGKILL
            out.append((t, self._restarter(name, sig)))
            k += 1
            t += self.restart_every_s
        out.append((0.22 * d, self._joiner("detect", "detect2")))
        out.append((0.32 * d, self._leaver("detect2", signal.SIGKILL)))
        if self.mode == "both":
            out.append((0.35 * d + 7, self.switch_sink))
        if self.mode != "embedded":  # embedded chdb is one process's store: a second land worker needs the server
            out.append((0.42 * d, self._joiner("land", "land2")))
            out.append((0.52 * d, self._leaver("land2", signal.SIGTERM)))
        out.append((0.7 * d + 3, self.restart_broker))
        return sorted(out, key=lambda e: e[0])

    def _mark_end_of_load(self) -> None:
        """the load stops: no new job starts"""

    def _restarter(self, name: str, sig: int) -> Any:
        def act() -> None:
            self.restart(name, name, sig)
        act.__doc__ = f"restart {name} with {signal.Signals(sig).name}"
        return act

    def _joiner(self, role: str, name: str) -> Any:
        def act() -> None:
            self.start(role, name)
            self.measure_recovery(f"{name} joined")
        act.__doc__ = f"{name} joins"
        return act

    def _leaver(self, name: str, sig: int) -> Any:
        def act() -> None:
            self.end(name, sig)
            self.measure_recovery(f"{name} left ({signal.Signals(sig).name})")
        act.__doc__ = f"{name} leaves"
        return act

    def switch_sink(self) -> None:
        """landing moves from embedded chdb to the ClickHouse server (a land restart)"""
        self.rig.settings = replace(self.rig.settings, clickhouse_url=self.server_url)
        self.restart("land", "land", signal.SIGTERM)

    def restart_broker(self) -> None:
        """the broker is stopped for 20 s and started again"""
        self.broker.stop()
        time.sleep(20.0)
        self.broker.start()
        self.broker_restarts += 1
        self.offsets.reset()
        self.measure_recovery("broker restart")

    # --- results ------------------------------------------------------------------------------------
    def idle_cpu(self, seconds: float) -> dict[str, float]:
        hz = os.sysconf("SC_CLK_TCK")
        pids = {name: proc.pid for name, proc in self.rig.procs.items()}
        before = {name: process_cpu_ticks(pid) for name, pid in pids.items()}
        t = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t
        return {name: round(100 * (process_cpu_ticks(pid) - before[name]) / hz / elapsed, 2)
                for name, pid in pids.items()}

    def landed(self, settings: Settings) -> tuple[set[tuple[str, int, int]], set[tuple[str, str]], int]:
        backend = open_backend(settings)
        try:
            migrate(backend)
            db = backend.database
            steps = {(j, int(s), int(r)) for j, s, r in backend.query(f"SELECT job, step, rank FROM {db}.steps")}
            jobs = {(j, p) for j, p in backend.query(f"SELECT job, phase FROM {db}.jobs")}
            rows, keys = backend.query(f"SELECT count(), uniqExact(job, step, rank) FROM {db}.steps FINAL")[0]
            jrows, jkeys = backend.query(f"SELECT count(), uniqExact(job, phase) FROM {db}.jobs FINAL")[0]
            return steps, jobs, int(rows - keys + jrows - jkeys)
        finally:
            backend.close()

    def result(self, duration: float, caught: bool, idle: dict[str, float]) -> dict[str, Any]:
        sinks = [replace(self.rig.settings, clickhouse_url="")] if self.mode != "server" else []
        if self.mode in ("server", "both"):
            sinks.append(replace(self.rig.settings, clickhouse_url=self.server_url))
        landed = [self.landed(s) for s in sinks]
        steps = set().union(*(s for s, _, _ in landed))
        jobs = set().union(*(j for _, j, _ in landed))
        sent_steps = set().union(*(s.steps for s in self.fleet.sent.values()))
        sent_jobs = set().union(*(s.jobs for s in self.fleet.sent.values()))
        overlap = len(landed[0][0] & landed[1][0]) if len(landed) == 2 else 0
        found = 0
        duplicates = 0
        other = 0
        per_job: dict[str, Any] = {}
        for job, slow in self.fleet.slow.items():
            alerts, _ = read_alerts(self.rig, job)
            ids = {a.incident_id for a in alerts if "SLOW_RANK" in (a.rules or [a.rule]) and slow in a.ranks}
            opens: dict[str, int] = {}
            for a in alerts:
                if a.state == "open":
                    opens[a.incident_id] = opens.get(a.incident_id, 0) + 1
            others = {a.incident_id for a in alerts} - ids
            found += bool(ids)
            duplicates += max(0, len(ids) - 1) + sum(n - 1 for n in opens.values() if n > 1)
            other += len(others)
            per_job[job] = {"slow_rank": slow, "incidents": len(ids), "other_incidents": len(others),
                            "rules_other": sorted({a.rule for a in alerts if a.incident_id in others})}
        by_role: dict[str, list[Instance]] = {}
        for inst in self.instances:
            by_role.setdefault(inst.name, []).append(inst)
        lags = [r["committed_lag_s"] for r in self.recoveries]
        return {
            "duration_s": round(duration),
            "restarts": self.restarts,
            "broker_restarts": self.broker_restarts,
            "clickhouse": self.mode,
            "jobs": len(self.fleet.slow),
            "caught_up_at_end": caught,
            "sent": len(sent_steps) + len(sent_jobs),
            "lost": len(sent_steps - steps) + len(sent_jobs - jobs),
            "duplicates": sum(d for _, _, d in landed),
            "cross_sink_overlap": overlap,
            "duplicate_incidents": duplicates,
            "incidents_expected": len(self.fleet.slow),
            "incidents_found": found,
            "other_incidents": other,
            "max_committed_lag_after_restart_s": None if None in lags else max(lags, default=None),
            "recoveries": self.recoveries,
            "rss_mb_start": {r: v[0].rss_warm_mb for r, v in by_role.items()},
            "rss_mb_end": {r: v[-1].rss_end_mb for r, v in by_role.items()},
            "rss_ratio_max": {r: max((i.rss_end_mb / i.rss_warm_mb for i in v if i.rss_end_mb and i.rss_warm_mb),
                                     default=None) for r, v in by_role.items()},
            "idle_cpu_pct": idle,
            "steady": self.steady,
            "job_ranks": self.job_ranks or None,
            "rss_series_mb": {i.name: i.rss_series for i in self.instances if i.rss_series},
            "rss_growth_mb_per_hour": {i.name: growth_mb_per_hour(i.rss_series) for i in self.instances
                                       if i.rss_series},
            "per_job": per_job,
        }


def growth_mb_per_hour(series: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of RSS over a worker's second half under load (warm-up, the first
    jobs' state and caches excluded), in MB per hour; None with fewer than 5 samples there."""
    if not series:
        return None
    half = series[-1][0] / 2
    tail = [(t, mb) for t, mb in series if t >= max(half, WARM_UP_S)]
    if len(tail) < 5:
        return None
    n = len(tail)
    mt = sum(t for t, _ in tail) / n
    mm = sum(mb for _, mb in tail) / n
    var = sum((t - mt) ** 2 for t, _ in tail)
    if var == 0:
        return None
    return round(sum((t - mt) * (mb - mm) for t, mb in tail) / var * 3600, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--restart-every-s", type=float, default=150.0)
    parser.add_argument("--concurrent", type=int, default=2, help="jobs running at once")
    parser.add_argument("--clickhouse", choices=("both", "embedded", "server"), default="both")
    parser.add_argument("--steady", action="store_true",
                        help="constant load, no restart, no broker restart, no sink switch: RSS per minute and "
                             "its growth per hour over the second half (-> soak-steady.json)")
    parser.add_argument("--job-ranks", type=int, default=0, choices=(0, *SIZES),
                        help="every job of this many ranks (default: the sizes cycle 64, 256, 1,024, 128, 512); "
                             "with --steady, the same work all along, so RSS after warm-up is the steady state")
    parser.add_argument("--out", type=Path, default=None, help=f"default {RESULTS.name} ({STEADY_RESULTS.name} "
                                                                "with --steady)")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = STEADY_RESULTS if args.steady else RESULTS
    if args.steady and args.clickhouse == "both":
        args.clickhouse = "embedded"  # no switch of sink in a steady run
    cfg = InfraConfig.from_env()
    broker = KafkaBroker(cfg)
    broker.install()
    ours: list[KafkaBroker | ClickHouseServer] = [broker] if broker.start() else []
    server_url = ""
    if args.clickhouse != "embedded":
        from infra.secrets import CLICKHOUSE_WRITER
        server = ClickHouseServer(cfg)
        server.install()
        if server.start():
            ours.append(server)
        server_url = server.url_for(CLICKHOUSE_WRITER)
    try:
        return _soak(args, cfg, broker, server_url)
    finally:
        for service in ours:  # what this run started, it stops (a broker left behind holds the ports)
            service.stop()


def _soak(args: argparse.Namespace, cfg: InfraConfig, broker: KafkaBroker, server_url: str) -> int:
    base = replace(load_settings(), kafka_bootstrap=broker.bootstrap, secrets_dir=cfg.client_settings().secrets_path)
    started = datetime.now(UTC)
    run_dir = base.home / "soak" / started.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    log(f"soak: {args.minutes} min, logs in {run_dir}")
    soak = Soak(Harness(base, cfg, run_dir, quick=False), broker, server_url, args.clickhouse, args.minutes,
                args.restart_every_s, args.concurrent, steady=args.steady, job_ranks=args.job_ranks)
    result = soak.run()
    result.update(started=started.isoformat(), git=git_commit(), machine=machine(), logs=str(run_dir),
                  loadavg_1m=round(os.getloadavg()[0], 1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    log(json.dumps({k: v for k, v in result.items() if k not in ("per_job", "recoveries")}, default=str))
    ok = (result["lost"] == 0 and result["duplicates"] == 0 and result["duplicate_incidents"] == 0
          and result["incidents_found"] == result["incidents_expected"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
