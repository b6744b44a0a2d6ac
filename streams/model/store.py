"""The fleet's reference models in ClickHouse: read a version, write the next, gather what a fit learns from.

Why here and not in the detect worker: fitting reads the fleet's whole history (every job's
kernel summaries, the topology, the incidents), which is what ClickHouse is for; the detect
worker judges live against the version it was given (`STEPLENS_REFERENCE_MODELS`), so a
detection always names the model it used. `steplens model fit` runs `fit_from_history`.

Never learns from a job while it is under an incident: a step inside any incident's
[step_first, step_last] of its job is left out of every sample.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sinks.backend import Backend, qualified
from streams.model.kernels import KernelFlops
from streams.model.reference import CollectiveCurve, KernelBench, ReferenceModels

TABLE = "reference_models"
COLUMNS = ("version", "stack", "kind", "op", "link", "group_size", "key", "device_kind", "t_s_ns", "m1", "m2",
           "bw_max", "sig_l", "sig_x0", "sig_k", "sig_b", "fit_error", "samples", "p10", "p50", "p90", "jobs",
           "source", "created_ns")
DOMAIN_GROUPS = {"dp": "dp_group", "tp": "tp_group", "pp": "pp_group", "ep": "ep_group", "cp": "cp_group"}


def versions(backend: Backend) -> list[tuple[int, str, int, int, int]]:
    """(version, stack, curves, kernels, created_ns) of every stored version, newest first."""
    rows = backend.query(
        f"SELECT version, any(stack), countIf(kind = 'curve'), countIf(kind = 'kernel'), max(created_ns) "
        f"FROM {qualified(backend.database, TABLE)} GROUP BY version ORDER BY version DESC")
    return [(int(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]


def latest_version(backend: Backend) -> int:
    rows = backend.query(f"SELECT max(version), count() FROM {qualified(backend.database, TABLE)}")
    return int(rows[0][0]) if rows and rows[0][1] else 0


def load(backend: Backend, version: int | None = None) -> ReferenceModels | None:
    """One stored version (the newest when `version` is None); None when there is none."""
    chosen = latest_version(backend) if version is None else version
    rows = backend.query(
        f"SELECT {', '.join(COLUMNS)} FROM {qualified(backend.database, TABLE)} FINAL "
        "WHERE version = %(v)s ORDER BY kind, op, link, group_size, key, device_kind", {"v": chosen})
    if not rows:
        return None
    curves: list[CollectiveCurve] = []
    kernels: list[KernelBench] = []
    for row in rows:
        r = dict(zip(COLUMNS, row, strict=True))
        if r["kind"] == "curve":
            curves.append(CollectiveCurve(
                op=r["op"], link=r["link"], group_size=int(r["group_size"]), t_s_ns=r["t_s_ns"], m1=r["m1"],
                m2=r["m2"], bw_max=r["bw_max"], sig_l=r["sig_l"], sig_x0=r["sig_x0"], sig_k=r["sig_k"],
                sig_b=r["sig_b"], fit_error=float("nan") if r["fit_error"] is None else r["fit_error"],
                samples=int(r["samples"])))
        else:
            kernels.append(KernelBench(key=r["key"], device_kind=r["device_kind"], p10=r["p10"], p50=r["p50"],
                                       p90=r["p90"], jobs=int(r["jobs"]), source=r["source"]))
    return ReferenceModels(version=chosen, stack=str(rows[0][1]), curves=tuple(curves), kernels=tuple(kernels))


def save(backend: Backend, models: ReferenceModels, *, version: int | None = None) -> int:
    """Store `models` as a new version (the next free one unless `version` is given); returns it."""
    chosen = latest_version(backend) + 1 if version is None else version
    now = time.time_ns()
    rows: list[tuple[Any, ...]] = []
    for c in models.curves:
        rows.append((chosen, models.stack, "curve", c.op, c.link, c.group_size, "", "", c.t_s_ns, c.m1, c.m2,
                     c.bw_max, c.sig_l, c.sig_x0, c.sig_k, c.sig_b,
                     None if not np.isfinite(c.fit_error) else c.fit_error, c.samples, 0.0, 0.0, 0.0, 0, "fleet",
                     now))
    for k in models.kernels:
        rows.append((chosen, models.stack, "kernel", "", "", 0, k.key, k.device_kind, 0.0, 0.0, 0.0, 0.0, 0.0,
                     0.0, 0.0, 0.0, None, 0, k.p10, k.p50, k.p90, k.jobs, k.source, now))
    if not rows:
        raise ValueError("no model to store: the fit found no collective and no kernel to learn from")
    backend.insert(TABLE, COLUMNS, rows, dedup_token=f"reference_models:{chosen}:{now}")
    return chosen


@dataclass(frozen=True, slots=True)
class CollectiveSamples:
    """One point per (job, step, collective kind): the message size per rank and the transfer time per call."""

    job: list[str]
    op: list[str]
    link: list[str]
    group_size: npt.NDArray[np.int64]
    nbytes: npt.NDArray[np.float64]
    transfer_ns: npt.NDArray[np.float64]


def _incident_spans(backend: Backend) -> dict[str, list[tuple[int, int]]]:
    rows = backend.query(
        f"SELECT job, ifNull(step_first, 0), ifNull(step_last, ifNull(step_first, 0)) "
        f"FROM {qualified(backend.database, 'incidents')} WHERE job != ''")
    spans: dict[str, list[tuple[int, int]]] = {}
    for job, first, last in rows:
        spans.setdefault(str(job), []).append((int(first), max(int(first), int(last))))
    return spans


def _healthy(jobs: Sequence[str], steps: npt.NDArray[np.int64], spans: dict[str, list[tuple[int, int]]]
             ) -> npt.NDArray[np.bool_]:
    keep = np.ones(len(steps), dtype=bool)
    if not spans:
        return keep
    job_arr = np.asarray(jobs, dtype=object)
    for job, ranges in spans.items():
        mine = job_arr == job
        if not mine.any():
            continue
        for first, last in ranges:
            keep &= ~(mine & (steps >= first) & (steps <= last))
    return keep


def _link_classes(backend: Backend) -> dict[tuple[str, str], str]:
    """(job, domain) -> 'intra' when every group of that domain sits on one host, else 'inter'."""
    out: dict[tuple[str, str], str] = {}
    topo = qualified(backend.database, "topology")
    for domain, column in DOMAIN_GROUPS.items():
        rows = backend.query(
            f"SELECT job, max(hosts) FROM (SELECT job, {column}, uniqExact(host) AS hosts FROM {topo} FINAL "
            f"WHERE {column} >= 0 GROUP BY job, {column}) GROUP BY job")
        for job, hosts in rows:
            out[(str(job), domain)] = "intra" if int(hosts) <= 1 else "inter"
    return out


def collect_collectives(backend: Backend, *, max_steps_per_job: int = 2000) -> CollectiveSamples:
    """Transfer time per call of every (job, step, collective kind) outside incidents.

    The transfer time is the least-waiting rank's: a collective's kernel spins until the group's
    last member arrives, so only the rank that arrived last measures the transfer alone (the
    detect scopes read it the same way)."""
    ks = qualified(backend.database, "kernel_summaries")
    rows = backend.query(
        f"SELECT job, step, op, domain, max(group_size), min(total_ns / count), max(bytes / count) FROM {ks} "
        f"WHERE cat = 'comm' AND count > 0 AND ifNull(bytes, 0) > 0 AND op IS NOT NULL AND domain IS NOT NULL "
        f"AND step < %(max_steps)s GROUP BY job, step, op, domain", {"max_steps": max_steps_per_job})
    links = _link_classes(backend)
    spans = _incident_spans(backend)
    jobs = [str(r[0]) for r in rows]
    steps = np.array([int(r[1]) for r in rows], dtype=np.int64)
    keep = _healthy(jobs, steps, spans)
    out_job, out_op, out_link, gs, nb, tr = [], [], [], [], [], []
    for row, ok in zip(rows, keep, strict=True):
        job, _, op, domain, size, transfer, nbytes = row
        link = links.get((str(job), str(domain)))
        if not ok or link is None or size is None or not transfer or not nbytes:
            continue
        out_job.append(str(job))
        out_op.append(str(op))
        out_link.append(link)
        gs.append(int(size))
        nb.append(float(nbytes))
        tr.append(float(transfer))
    return CollectiveSamples(out_job, out_op, out_link, np.asarray(gs, dtype=np.int64),
                             np.asarray(nb, dtype=np.float64), np.asarray(tr, dtype=np.float64))


def collect_kernels(backend: Backend) -> list[KernelFlops]:
    """FLOP/s per (job, compute kernel key, step) outside incidents, with the job's device kind (from its
    device samples: a job without any is left out, there is no device kind to hold it against)."""
    ks = qualified(backend.database, "kernel_summaries")
    rows = backend.query(
        f"SELECT job, key, step, sum(flops) / sum(total_ns) * 1e9 FROM {ks} "
        f"WHERE cat = 'compute' AND total_ns > 0 AND ifNull(flops, 0) > 0 GROUP BY job, key, step")
    kinds = {str(j): str(k) for j, k in backend.query(
        f"SELECT job, any(device_kind) FROM {qualified(backend.database, 'device_samples')} "
        "WHERE job != '' AND device_kind != '' GROUP BY job")}
    keep = _healthy([str(r[0]) for r in rows], np.array([int(r[2]) for r in rows], dtype=np.int64),
                    _incident_spans(backend))
    return [KernelFlops(job=str(job), key=str(key), device_kind=kinds[str(job)], flops_per_s=float(value))
            for (job, key, _, value), ok in zip(rows, keep, strict=True) if ok and str(job) in kinds]
