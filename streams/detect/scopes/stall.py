"""Hung job: no rank completes a step while the devices go on sampling (C4D's hang, told apart from slow).

When one rank hangs in synchronous training, every peer blocks in its next collective, so NO
rank reports a step any more: the frame-based check (streams/detect/scopes/hung.py, peers went on)
sees nothing. The device samples keep coming, and on the job's own clock (event time, never
the worker's wall clock, so a backlog in the decode stage is not a hang) they run past the
last step's end. Once they are `hang_stall_factor` x the adaptive window timeout past it:

- a host whose devices stopped sampling as well is silent: one HUNG_HOST finding;
- a rank whose device sits idle while its peers' devices are busy (blocked peers spin in the
  collective; the hung rank does not reach it) is the hung one: HUNG_RANK;
- nobody singled out: the job stalled together (not reported here; the frame windows wait).

Reported once per stall (keyed by the last step end); the incident resolves when steps resume.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from streams.detect.scopes.finding import Finding
from streams.detect.scopes.hung import ADVICE
from streams.detect.windows.step_frames import FloatArray, IntArray, ReportedLayout

IDLE_PCT = 10.0   # a device below this AI Core utilisation is idle ...
BUSY_PCT = 50.0   # ... while its peers' median is above this
MIN_SAMPLES = 3   # device samples per rank past the last step before judging it
MAX_TAIL_ROWS = 262_144  # device samples past the last step end kept apart for `StallState.cut` (~6 MB)
SAMPLE_SLACK_NS = 2_000_000_000  # a silent device's last sample may follow the last step end by this much:
# each host's agent samples at its own phase (up to one 1 Hz interval late) on its own clock (ms off)


@dataclass(frozen=True, slots=True)
class Params:
    """The settings this scope reads (infra/settings.py `DetectionConfig.params` fills them)."""

    hang_stall_factor: float


@dataclass(slots=True)
class StallState:
    last_end_ns: int = 0      # newest step end (event time) any rank reported
    newest_dev_ns: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # per rank
    busy_sum: FloatArray = field(default_factory=lambda: np.zeros(0))  # AI Core % since last_end_ns, per rank
    busy_n: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    reported_for: int = -1    # last_end_ns of the stall already reported
    seen_since_ns: int = 0    # worker clock when the stall was first seen (it must hold a window timeout)
    # The stall's evidence kept apart, so it can be judged as of a time (`cut`): the newest sample per rank up to
    # `last_end_ns`, and the samples after it, as they came (a few per rank between two step ends; a hang's grow
    # until `MAX_TAIL_ROWS`, then `tail_dropped_ns` says the tail is no longer whole)
    head_newest_ns: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    tail: list[tuple[IntArray, IntArray, FloatArray]] = field(default_factory=list)
    tail_rows: int = 0
    tail_dropped_ns: int = 0

    def _grow(self, world: int) -> None:
        if self.newest_dev_ns.size < world:
            extra = world - self.newest_dev_ns.size
            self.newest_dev_ns = np.concatenate([self.newest_dev_ns, np.zeros(extra, dtype=np.int64)])
            self.busy_sum = np.concatenate([self.busy_sum, np.zeros(extra)])
            self.busy_n = np.concatenate([self.busy_n, np.zeros(extra, dtype=np.int64)])
        head = self._head()
        if head is not None and head.size < world:
            self.head_newest_ns = np.concatenate([head, np.zeros(world - head.size, dtype=np.int64)])

    def _head(self) -> IntArray | None:
        """None for a state restored from a snapshot older than the kept tail (it cannot be cut)."""
        head: IntArray | None = getattr(self, "head_newest_ns", None)
        return head

    def on_steps(self, end_ns: IntArray) -> None:
        newest = int(end_ns.max(initial=0))
        if newest > self.last_end_ns:
            self.last_end_ns = newest
            self.busy_sum[:] = 0.0
            self.busy_n[:] = 0
            self._settle(newest)

    def _settle(self, last_end_ns: int) -> None:
        """Samples up to the new last step end leave the tail for the per-rank head."""
        head = self._head()
        if head is None:
            return
        kept: list[tuple[IntArray, IntArray, FloatArray]] = []
        for ranks, ts, aicore in self.tail:
            old = ts <= last_end_ns
            if old.any():
                np.maximum.at(head, ranks[old], ts[old])
                if not old.all():
                    kept.append((ranks[~old], ts[~old], aicore[~old]))
            else:
                kept.append((ranks, ts, aicore))
        self.tail = kept
        self.tail_rows = sum(int(t.size) for _, t, _ in kept)
        if self.tail_dropped_ns and self.tail_dropped_ns <= last_end_ns:
            self.tail_dropped_ns = 0  # what was dropped is before the stall now: the tail is whole again

    def on_device(self, ranks: IntArray, ts_ns: IntArray, aicore: FloatArray) -> None:
        ok = ranks >= 0
        ranks, ts_ns, aicore = ranks[ok], ts_ns[ok], aicore[ok]
        if ranks.size == 0:
            return
        self._grow(int(ranks.max()) + 1)
        np.maximum.at(self.newest_dev_ns, ranks, ts_ns)
        late = ts_ns > self.last_end_ns
        after = late & np.isfinite(aicore)
        np.add.at(self.busy_sum, ranks[after], aicore[after])
        np.add.at(self.busy_n, ranks[after], 1)
        head = self._head()
        if head is None:
            return
        if not late.all():
            np.maximum.at(head, ranks[~late], ts_ns[~late])
        if late.any():
            if self.tail_rows + int(late.sum()) > MAX_TAIL_ROWS:
                self.tail_dropped_ns = max(self.tail_dropped_ns, int(ts_ns[late].max()))
            else:
                self.tail.append((ranks[late], ts_ns[late], aicore[late]))
                self.tail_rows += int(late.sum())

    def cut(self, before_ns: int) -> StallState | None:
        """This stall as it stood on the job's clock before `before_ns`: only the samples taken before it.

        Why: device samples carry no attempt. Under a backlog a relaunch's samples reach the attempt it
        replaced before the relaunch's `start` does, with the relaunch's ranks; judged with them, the
        attempt's hang names the host the relaunch left out instead of the one that died. None when the
        tail is not whole (a hang longer than `MAX_TAIL_ROWS` samples, or a state from an older snapshot)."""
        head = self._head()
        if head is None or self.tail_dropped_ns:
            return None
        newest = head.copy()
        busy_sum = np.zeros(newest.size)
        busy_n = np.zeros(newest.size, dtype=np.int64)
        tail: list[tuple[IntArray, IntArray, FloatArray]] = []
        for ranks, ts, aicore in self.tail:
            before = ts < before_ns
            piece = (ranks[before], ts[before], aicore[before])
            tail.append(piece)
            np.maximum.at(newest, piece[0], piece[1])
            counted = np.isfinite(piece[2])
            np.add.at(busy_sum, piece[0][counted], piece[2][counted])
            np.add.at(busy_n, piece[0][counted], 1)
        return StallState(last_end_ns=self.last_end_ns, newest_dev_ns=newest, busy_sum=busy_sum, busy_n=busy_n,
                          reported_for=self.reported_for, seen_since_ns=self.seen_since_ns,
                          head_newest_ns=head.copy(), tail=tail, tail_rows=sum(int(t.size) for _, t, _ in tail))


def evaluate(state: StallState, topo: ReportedLayout, step: int, timeout_ns: int, params: Params,
             input_lagging: bool, now_ns: int, final: bool, stopped: bool = False) -> list[Finding]:
    """Findings for a stall past the last step end (`step`: the first step that did not complete).

    Steps and device samples come from different partitions, so samples may run ahead of steps
    still queued: a stall counts once it has held for a window timeout on the worker's clock with
    the input current, or at once when the job ended (`final`: every step it completed is in).
    `stopped`: the whole job fell silent (killed: `JOB_STOPPED`). Then the seconds between its last
    step and the kill are all the evidence there will be of who stopped first, however short (a
    launcher kills the other ranks within seconds of one rank's death): no `hang_stall_factor`
    wait, but a device still needs `MIN_SAMPLES` past the last step, a silent host is named only
    if the others went on sampling `SAMPLE_SLACK_NS` past its last sample, and more than a
    quarter of the hosts silent together were killed together (no host is named).
    """
    world = min(topo.world, state.newest_dev_ns.size)
    newest = state.newest_dev_ns[:world]
    past = int(newest.max(initial=0)) - state.last_end_ns
    if (input_lagging or world == 0 or state.last_end_ns == 0 or state.reported_for == state.last_end_ns
            or past < (1 if stopped else params.hang_stall_factor * timeout_ns)):
        state.seen_since_ns = 0
        return []
    if not final:
        if state.seen_since_ns == 0:
            state.seen_since_ns = now_ns
        if now_ns - state.seen_since_ns < timeout_ns:
            return []
    sampled = newest > 0
    # the others are far past: hang_stall_factor x
    slack = min(SAMPLE_SLACK_NS, int(params.hang_stall_factor * timeout_ns) // 2)
    silent = sampled & (newest <= state.last_end_ns + slack)
    out: list[Finding] = []
    done: set[int] = set()
    silent_hosts = np.unique(topo.host_of[:world][silent]).tolist()
    if stopped and silent_hosts:
        # named only if the other hosts went on sampling well after it stopped, and it is one of a few: hosts
        # killed a second after the last step stop within a second of each other, some inside the slack
        others = sampled & ~silent
        went_on = float(np.median(newest[others])) if others.any() else 0.0
        silent_hosts = [h for h in silent_hosts
                        if went_on - float(newest[topo.ranks_of_host(int(h))[:world]].max()) >= SAMPLE_SLACK_NS]
        if len(silent_hosts) > max(1, np.unique(topo.host_of[:world][sampled]).size // 4):
            silent_hosts = []
    for host in silent_hosts:
        members = topo.ranks_of_host(int(host))
        members = members[members < world]
        if host < 0 or members.size == 0 or not silent[members].all():
            continue
        name = topo.hosts[int(host)]
        done.update(members.tolist())
        out.append(Finding(
            rule="HUNG_HOST", key=f"host:{name}", family="hang", scope="host", step=step, host=name,
            ranks=members.tolist(), severity="critical", metric="reports",
            summary=f"host {name} went silent: no step completed since step {step - 1} and its {members.size} "
                    f"devices stopped sampling while the other hosts' went on",
            evidence={"ranks_silent": float(members.size)}, cause=ADVICE.cause, suggestion=ADVICE.suggestion,
            open_after=1, resolve_after=1))
    enough = state.busy_n[:world] >= MIN_SAMPLES
    mean = np.where(enough, state.busy_sum[:world] / np.maximum(state.busy_n[:world], 1), np.nan)
    if enough.sum() >= 2:
        idle = enough & (mean < IDLE_PCT)
        peers = mean[enough & ~idle]
        if peers.size and float(np.median(peers)) > BUSY_PCT and idle.sum() <= max(1, world // 8):
            for rank in np.flatnonzero(idle).tolist():
                if rank in done:
                    continue
                h = int(topo.host_of[rank])
                host = topo.hosts[h] if h >= 0 else None
                out.append(Finding(
                    rule="HUNG_RANK", key=f"rank:{rank}", family="hang", scope="rank", step=step, host=host,
                    ranks=[rank], severity="critical", metric="reports",
                    summary=f"rank {rank} ({host}) hung: no step completed since step {step - 1}; its device is "
                            f"idle ({mean[rank]:.0f} % AI Core) while its peers' spin in the collective "
                            f"({float(np.median(peers)):.0f} %)",
                    observed=float(mean[rank]), expected=float(np.median(peers)), threshold=IDLE_PCT, unit="%",
                    evidence={"aicore_pct": float(mean[rank])}, cause=ADVICE.cause, suggestion=ADVICE.suggestion,
                    open_after=1, resolve_after=1))
    if out:
        state.reported_for = state.last_end_ns
    return out
