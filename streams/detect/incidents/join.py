"""Which incident a finding joins: one incident per problem, not one per rule or per symptom.

The book merges findings with the same (family, key). This module rewrites keys before the
book sees them, so that findings describing the same fault share one:

- a device finding of one rank (R1/R2 on its temperature, power, memory) is that rank's finding;
  on several devices of one host the host's, on a quarter of the devices or more (of two hosts or
  more), or on devices of `DEVICE_JOB_HOSTS` hosts or more in one step, the job's;
- R5/R6 on a group that a slow link's host, a slow rank or a slow host is part of are symptoms
  of that link, rank or host;
- R5 candidates on the members of a group that R6 flags now are the onset of the same fault:
  the group's incident carries R5 (`_join_pending_links`);
- a slow step (job scope) explained by a few culprit ranks or a host flagged in the same step
  (their own excess at least half the step's growth), or by a rank/host incident already open,
  joins that incident: in synchronous training the culprit makes the whole job slow, it is one
  problem; so does one long after the culprit's onset while the baseline it is judged against
  mostly predates the culprit (`_since_baseline`: slow steps never enter the baseline);
- a slow PP stage (SLOW_STAGE) is a culprit like a slow rank or host: the slow steps it
  causes join it; so does a split group (SLOW_GROUP: members busy while the others idle) or a
  slow link flagged a step before the slow steps, before either opened;
- the job's periodic work grown slower than its own past (a slow-step finding with
  `evidence.rhythm_period`, scopes/rhythm.py) is the whole job's: no culprit takes it (every
  stage's busy time grows with a checkpoint, the first stage's most);
- once the job's slow steps have joined a culprit's incident (it carries SLOW_STEP), every
  other job-wide perf finding (R3, R4, R7, R10, job-wide R1/R2 …) while it is open is a
  symptom of that culprit and joins it too: one incident, every rule id;
- GC: a slow step caused by GC on one rank joins its (leak) incident; GC on two or more
  different ranks within `GC_STORM_WINDOW` steps (unsynchronised pauses: a storm) or, pauses
  strong enough to open an incident, within `GC_STORM_MEMORY` steps (a sparse storm on a small
  job: one rank every 20 steps), while
  the job's GC incident is open, or within `GC_STORM_MEMORY` steps of the storm's last pause,
  folds the ranks' findings into the job's incident instead of one incident per rank; a slow
  rank whose excess is GC counts as a pause once it is strong enough to open on its own. The
  window needs `JoinState` (the engine keeps it per job).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from schemas.incident import Scope
from streams.detect.scopes.finding import Finding

Members = Callable[[str, int], set[int]]  # (domain, group) -> its ranks

CULPRIT_RULES = ("SLOW_HOST", "SLOW_RANK", "SLOW_STAGE")
CULPRIT_SCOPES = ("rank", "host", "stage")
SLOW_CULPRITS = (*CULPRIT_RULES, "R6", "SLOW_GROUP", "SLOW_LINK")  # what explains slow steps: a group, a link
SLOW_CULPRIT_SCOPES = (*CULPRIT_SCOPES, "group", "link")
ADOPTING_RULES = ("R6", "SLOW_GROUP", "SLOW_LINK")  # culprits that take over a job incident opened first
JOIN_SLACK_STEPS = 2  # a culprit that began at least this many steps before the slow steps still explains them
DEVICE_JOB_HOSTS = 3  # one rule and metric on devices of this many hosts in one step: the job's finding
GC_STORM_WINDOW = 10  # steps over which GC pauses of different ranks count as one storm
GC_STORM_RANKS = 2    # distinct ranks pausing within the window: a storm, the job's problem (a leak is one rank)
GC_STORM_MEMORY = 60  # steps after a storm's last pause in which another rank's pause is still that storm's
ONSET_R5_STEPS = 10   # R5 on a group's links this many steps before R6 flags the group: the same onset
JOB_WIDE_GROUPS = 3   # R5 on links of this many groups at once (and a quarter of the ranks): the job's
NEVER_ALONE = 1 << 30  # open_after of a finding that only joins (the job's slow steps, a culprit)
EXPLAINS_SHARE = 0.5  # a culprit of the slow step's own step explains it with this share of its growth or more
LOAD_METRICS = ("T1", "T2", "T3")  # device power, temperature, AI Core: they follow the device's load
RECOVERY_STEPS = 10   # steps after a culprit incident was last open in which the drift of the devices it sways is its


@dataclass(slots=True)
class Recovering:
    """A culprit incident open lately, as the device findings of its sway need it."""

    key: str
    scope: Scope
    ranks: tuple[int, ...]
    job_wide: bool  # it slowed the job's steps: every rank waited on it
    seen: int       # the last step it was seen open


@dataclass(slots=True)
class JoinState:
    """What join remembers between steps of one job: the last step each rank paused for GC, and
    the last step R5 flagged a link of each group ("domain/group")."""

    gc_last: dict[int, int] = field(default_factory=dict)
    r5_last: dict[str, int] = field(default_factory=dict)
    storm_last: int = -(1 << 62)  # the last step a GC pause was the job's storm
    gc_seen: dict[int, int] = field(default_factory=dict)  # rank -> its last pause, kept GC_STORM_MEMORY steps
    # open culprit incidents: key -> what they sway and the last step seen open, kept RECOVERY_STEPS
    culprits_seen: dict[str, Recovering] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OpenTrack:
    """An open perf incident as join needs it (from the book)."""

    key: str
    scope: str
    cause_phase: str | None
    first: int  # the step it began at
    opened: bool = True
    ranks: tuple[int, ...] = ()
    rules: tuple[str, ...] = ()


def _gc_rank(f: Finding) -> bool:
    gc = f.rule == "R1" and f.metric == "T8"
    return (gc or f.rule in ("SLOW_RANK", "R5")) and f.scope in ("rank", "link") and f.cause_phase in ("gc_ms", None)


def join(findings: list[Finding], world: int, tracks: list[OpenTrack], step: int,
         members: Members | None = None, baseline_len: int = 2 * JOIN_SLACK_STEPS,
         state: JoinState | None = None, held: frozenset[str] = frozenset()) -> list[Finding]:
    """`tracks`: the book's perf tracks, open or candidate; `step`: the step being evaluated;
    `baseline_len`: steps in the slow-step baseline (a culprit older than half of it is in it);
    `state`: the job's join memory (None: this step alone); `held`: keys of the book's resolved perf
    incidents that may still come back."""
    out = sorted(_join(findings, world, tracks, step, members, baseline_len, state, held),
                 key=lambda f: not (f.rule == "SLOW_GROUP" and f.scope == "group"))  # a split group is its
    # incident's primary rule (one joined to a slow rank or host is that culprit's symptom)
    for f in out:
        if f.key != "job":  # a new step-time baseline ends the job's own incident, never the culprit's
            f.evidence.pop("resolve_now", None)
    return out


def _join(findings: list[Finding], world: int, tracks: list[OpenTrack], step: int, members: Members | None,
          baseline_len: int, state: JoinState | None, held: frozenset[str]) -> list[Finding]:
    open_tracks = [t for t in tracks if t.opened]
    first = {t.key: t.first for t in tracks}
    if members is not None:
        _join_links(findings, tracks, members)
        _join_groups(findings, tracks, members)
    recent = _remember_r5(findings, step, state)
    _join_split_to_culprits(findings, tracks)
    _join_split(findings, tracks)
    findings = _join_pending_links(findings, tracks, recent)
    _job_wide_links(findings, world)
    recovering = _culprits_recovering(open_tracks, step, state)
    devices = [f for f in findings if f.scope == "device" and f.family == "perf"]
    by_metric: dict[tuple[str, str | None], list[Finding]] = {}
    for f in devices:
        by_metric.setdefault((f.rule, f.metric), []).append(f)
    for same in by_metric.values():
        spread = len({f.host for f in same})  # devices of many hosts at once: a job-wide cause (a PP stage's
        # load shifting every device's power and temperature), not one faulty device per host; a quarter of the
        # job's devices all on one host are that host's (a 32-rank job of four 8-device hosts: a slow host's
        # devices drifting back to their power at its recovery opened a job incident beside the host's)
        many = len({(f.host, f.device) for f in same}) >= max(2, world // 4) and spread >= 2
        owner = _recovering(same, recovering) if same[0].metric in LOAD_METRICS else None
        if owner is not None:
            for f in same:
                f.key, f.scope, f.ranks, f.host, f.device = owner.key, owner.scope, list(owner.ranks), None, None
            continue
        if many or spread >= DEVICE_JOB_HOSTS:
            for f in same:
                f.key, f.scope, f.ranks, f.host, f.device = "job", "job", [], None, None
            continue
        per_host: dict[str | None, list[Finding]] = {}
        for f in same:
            per_host.setdefault(f.host, []).append(f)
        for host, fs in per_host.items():
            if host is not None and len({f.device for f in fs}) >= 2:  # several devices of one host: the host's
                ranks = sorted({r for f in fs for r in f.ranks})
                for f in fs:
                    f.key, f.scope, f.ranks, f.device = f"host:{host}", "host", ranks, None
                continue
            for f in fs:
                if len(f.ranks) == 1:
                    f.key, f.scope = f"rank:{f.ranks[0]}", "rank"
    few = max(1, world // 8)
    slow = next((f for f in findings if f.rule == "SLOW_STEP" and f.scope == "job"), None)
    mid = slow.evidence.pop("baseline_mid_step", None) if slow is not None else None  # join's cue, not evidence
    opened = {t.key for t in open_tracks}
    # GC pauses of a rank: its GC rule (R1 on T8), or a slow rank whose excess is GC, once strong enough to open
    # an incident on its own (a candidate of healthy noise at 1,024 ranks is not a pause worth a storm)
    gc_ranks = [f for f in findings if f.scope == "rank" and (
        (f.rule == "R1" and f.metric == "T8")
        or (f.rule == "SLOW_RANK" and f.cause_phase == "gc_ms" and (f.open_after <= 1 or f.key in opened)))]
    storm_open = any(t.key == "job" and t.cause_phase == "gc_ms" for t in open_tracks)
    # a storm that paused lately is still the job's, between its bursts too (its incident held, not open)
    storm_open |= state is not None and step - getattr(state, "storm_last", -(1 << 62)) <= GC_STORM_MEMORY
    pausing = {r for f in gc_ranks for r in f.ranks}
    pausing_now = set(pausing)
    recalled: set[int] = set()  # ranks that paused within GC_STORM_MEMORY steps: a sparse storm's earlier pauses
    if state is not None:
        for r in pausing:
            state.gc_last[r] = step
        for r in [r for r, s in state.gc_last.items() if step - s >= GC_STORM_WINDOW]:
            del state.gc_last[r]
        pausing |= set(state.gc_last)
        seen = getattr(state, "gc_seen", None)  # a JoinState snapshotted before the field existed has none
        if seen is None:
            seen = state.gc_seen = {}
        for f in gc_ranks:  # only pauses that open an incident of their own count over the longer memory
            if f.rule == "SLOW_RANK" or f.open_after <= 1 or f.key in opened:
                seen.update((r, step) for r in f.ranks)
        for r in [r for r, s in seen.items() if step - s > GC_STORM_MEMORY]:
            del seen[r]
        recalled = set(seen)
    sparse = len(recalled) >= GC_STORM_RANKS  # a pause now and another rank's within the storm's memory
    if gc_ranks and (len(pausing) >= GC_STORM_RANKS or len(gc_ranks) > few or storm_open or sparse):
        if state is not None:
            state.storm_last = step
        keys = {f.key for f in findings if _gc_rank(f)}
        for f in findings:  # the pausing ranks' findings and the symptoms joined to them
            if _gc_rank(f) or (f.key in keys and f.family == "perf"):
                f.key, f.scope, f.ranks, f.host = "job", "job", [], None
            if f.key == "job" and f.family == "perf":
                f.ranks = sorted(pausing_now)  # the ranks hit: the book keeps every one (up to JOB_RANKS_LISTED)
                # the storm's spread (ranks paused lately); the book's cue to take over the incident that the
                # storm's first pause opened on its rank (`IncidentBook._storm_adoptee`)
                f.evidence["gc_ranks_recent"] = float(len(pausing))
        return findings
    since = first.get("job", step) - max(JOIN_SLACK_STEPS, baseline_len // 2)
    if slow is not None and mid is not None:
        since = _since_baseline(findings, slow, int(mid), first, step, since, few, open_tracks)
    _mark_adoption(findings, open_tracks, first, since)
    explained = _join_explained(findings, open_tracks, slow is not None, since)
    if slow is None and not explained:
        _join_throughput(findings, first, step, since, few)
    if slow is None or explained or "rhythm_period" in slow.evidence:  # the job's periodic work is the job's
        return findings
    if slow.cause_phase == "gc_ms" and gc_ranks and len(gc_ranks) <= few:
        _attach(slow, gc_ranks[0])
        return [f for f in findings if f is not slow] + [slow]  # the rank's rule stays the primary one
    # a culprit explains the slow steps only if it began with them (a rank slow all along is in the baseline)
    # same step: only culprits a job-wide slowdown cannot fake (a group's bandwidth or a link can dip
    # with every step that is slow for another reason: those join once open, or adopt, below)
    culprits = [f for f in _culprits_now(findings, first, step, since) if _explains(f, slow)]
    # a slow link (every inter-host group of one host slowed) flagged in an earlier step too
    culprits += [f for f in findings if f.rule == "SLOW_LINK" and since <= first.get(f.key, step) < step]
    # ... or flagged now and back from a held incident of its own: a flapping link's next episode slows the steps
    # it comes back with (a dip by coincidence is unlikely on a link that was this job's problem already; a
    # 32-rank job opened a job SLOW_STEP incident beside the link's 4th episode)
    culprits += [f for f in findings if f.rule == "SLOW_LINK" and f.key in held and not any(f is c for c in culprits)]
    # a split group (some members busy while the others idle: a job-wide slowdown cannot fake it) flagged in an
    # earlier step too, whose busy members account for the growth: it candidates a step or two before the
    # slow steps do and opens after them (moe_imbalance: a hot EP group opened beside the job's slow steps)
    culprits += [f for f in findings if f.rule == "SLOW_GROUP" and f.scope == "group"
                 and since <= first.get(f.key, step) < step and _split_explains(f, findings, slow)]
    keys = {f.key for f in culprits}
    if culprits and len(keys) <= few:
        for f in findings:  # the other job-wide findings of this step are the culprit's symptoms too
            if f.key == "job" and f.family == "perf" and f is not slow:
                _attach(f, culprits[0])
        _attach(slow, culprits[0])
        return [f for f in findings if f is not slow] + [slow]
    joinable = sorted((t for t in open_tracks if t.scope in SLOW_CULPRIT_SCOPES and t.first >= since),
                      key=lambda t: t.scope != "host")
    if joinable and len(joinable) <= few:
        slow.key, slow.scope = joinable[0].key, joinable[0].scope  # type: ignore[assignment]
    return findings


def _culprits_recovering(open_tracks: list[OpenTrack], step: int, state: JoinState | None) -> list[Recovering]:
    """The culprit incidents (rank, host, stage, group, link) open now or within RECOVERY_STEPS."""
    now = {t.key: Recovering(t.key, t.scope, t.ranks, "SLOW_STEP" in t.rules, step)  # type: ignore[arg-type]
           for t in open_tracks if t.scope in SLOW_CULPRIT_SCOPES and t.ranks}
    if state is None:
        return list(now.values())
    seen = getattr(state, "culprits_seen", None)  # a JoinState snapshotted before the field existed has none
    if seen is None:
        seen = state.culprits_seen = {}
    seen.update(now)
    for key in [k for k, v in seen.items() if step - v.seen > RECOVERY_STEPS]:
        del seen[key]
    return list(seen.values())


def _recovering(same: list[Finding], culprits: list[Recovering]) -> Recovering | None:
    """The culprit whose sway holds every device of `same` (one rule and load metric): its own ranks, or every
    rank of a culprit that slowed the job's steps (the others wait on it in every collective). A culprit's onset
    shifts the load, power and temperature of the devices it sways against the job's, and so does its recovery;
    that drift is the culprit's, not a device's, host's or the job's own problem (a 2-stage 32-rank job: a job
    R2 incident on devices of both stages opened 3 steps after its slow stage recovered; on a 4-stage one, R2
    incidents of 2-3 hosts while the stage was slow)."""
    ranks = {r for f in same for r in f.ranks}
    swaying = [c for c in culprits if ranks and (c.job_wide or ranks <= set(c.ranks))]
    return max(swaying, key=lambda c: (c.seen, c.key)) if swaying else None


def _since_baseline(findings: list[Finding], slow: Finding, mid: int, first: dict[str, int], step: int,
                    since: int, few: int, open_tracks: Sequence[OpenTrack] = ()) -> int:
    """`since`, moved back for a culprit flagged now that began after most of the slow step's baseline and
    explains this step's growth: slow steps never enter the baseline, so a straggler slow for 30 steps still
    makes every step slow against the baseline from before it: those slow steps are its, however long after
    its onset they come (a slow step that opened late as its own incident beside an open SLOW_RANK). A
    culprit older than the baseline's middle (a rank slow all along) is in the baseline: it explains nothing
    new. So does a rank, host or stage incident open since after the baseline's middle whose culprit rule is
    not flagged now (a slow host found by its kernels' efficiency, R4, in this step: its late slow steps opened
    a job incident beside it on a 32-rank job); one flagged now must explain the growth, as above. `since`
    unchanged when no such culprit (or more than `few` of them)."""
    fresh = mid + 1  # `mid`: the step half of the slow step's baseline is older than
    if fresh >= since:
        return since
    late = {f.key for f in _culprits_now(findings, first, step, fresh)
            if first.get(f.key, step) < since and _explains(f, slow)}
    judged = {f.key for f in findings if f.rule in CULPRIT_RULES}  # flagged now: `_explains` weighed them above
    late |= {t.key for t in open_tracks
             if t.scope in CULPRIT_SCOPES and fresh <= t.first < since and t.key not in judged}
    return fresh if late and len(late) <= few else since


def _mark_adoption(findings: list[Finding], open_tracks: list[OpenTrack], first: dict[str, int], since: int) -> None:
    """A slow group or link, or a host's finding, flagged while the job's own slow-step incident is open
    (and that began with it) takes that incident over if it persists to open (`Finding.adopts`, the book):
    a group's bandwidth rule needs a few steps more than the step time to show the same fault, and so does a
    host's (its kernels' efficiency, its inter-step CPU) where no slow rank or stage took the slow steps."""
    job = next((t for t in open_tracks if t.key == "job" and "SLOW_STEP" in t.rules), None)
    if job is None or job.first < since:
        return
    opened = {t.key for t in open_tracks}
    for f in findings:
        began = first.get(f.key, f.step)
        adopting = f.rule in ADOPTING_RULES or (f.scope == "host" and f.family == "perf")
        if adopting and f.key not in opened and began >= job.first - JOIN_SLACK_STEPS:
            f.adopts = "job"


def _explains(culprit: Finding, slow: Finding) -> bool:
    """Whether a culprit flagged in the slow step's own step can account for it: its own excess (busy
    time over its peers', a stage's over its baseline) is at least EXPLAINS_SHARE of the step's growth
    over the job's baseline. A rank 100 ms behind its peers does not make a step 800 ms slower: at
    1,024 ranks a few ranks of every step are flagged by noise, and a GC pause of every rank (+88 %
    step time) went to one of them, another each step, so no incident ever opened. Without the
    figures (a finding that carries none) it explains, as before."""
    own, growth = _excess(culprit), _excess(slow)
    if own is None or growth is None:
        return True
    return growth <= 0 or own >= EXPLAINS_SHARE * growth


def _split_explains(group: Finding, findings: list[Finding], slow: Finding) -> bool:
    """Whether a split group accounts for the slow step: one of its busy members (a slow rank folded into the
    group, `_join_split`) explains it (`_explains`); a split without such a member, as `_explains` without
    figures, does."""
    members = [f for f in findings if f.key == group.key and f.rule == "SLOW_RANK"]
    return not members or any(_explains(m, slow) for m in members)


def _excess(f: Finding) -> float | None:
    """observed - expected, None when a finding carries either not."""
    return None if f.observed is None or f.expected is None else f.observed - f.expected


def _culprits_now(findings: list[Finding], first: dict[str, int], step: int, since: int) -> list[Finding]:
    """Slow rank, host and stage findings of this step whose episode began at `since` or later (a rank
    slow all along is in the baseline: it explains no new slowdown), in CULPRIT_RULES order."""
    return [f for rule in CULPRIT_RULES for f in findings
            if f.rule == rule and f.scope in CULPRIT_SCOPES and first.get(f.key, step) >= since]


def _join_throughput(findings: list[Finding], first: dict[str, int], step: int, since: int, few: int) -> None:
    """Job-wide R3 on step throughput, or R4 on a kernel's efficiency, in a step the slow-step scope did not
    find slow, beside a culprit flagged now that began with it (a few keys at most): the culprit's toll on the
    job's throughput, a slowdown below the slow-step scope's robust sigmas, or on the job's median kernel (a
    slow stage of a 2-stage pipeline is half the job's ranks: its kernels move the job's median). It joins
    that culprit; it never opens an incident of its own (a candidate it joins persists by the culprit's
    findings)."""
    culprits = _culprits_now(findings, first, step, since)
    if not culprits or len({f.key for f in culprits}) > few:
        return
    for f in findings:
        if f.key == "job" and f.family == "perf" and (
                (f.rule == "R3" and f.metric == "step_throughput") or f.rule == "R4"):
            _attach(f, culprits[0])


def _join_explained(findings: list[Finding], open_tracks: list[OpenTrack], slow_now: bool, since: int) -> bool:
    """Job-wide perf findings join the open culprit incident that the job's slow steps joined.

    True when there is one (the slow step, if any, joined it too). A slow step now that the
    culprit cannot explain (it began before `since`: in the baseline already, e.g. a GC pause
    of every rank long after a slow rank's onset) is a problem of its own, and so are the
    job-wide findings of its step."""
    culprit = next((t for t in open_tracks if t.scope in SLOW_CULPRIT_SCOPES and "SLOW_STEP" in t.rules), None)
    if culprit is None or (slow_now and culprit.first < since):
        return False
    for f in findings:
        if f.key == "job" and f.family == "perf":
            f.key, f.scope, f.ranks = culprit.key, culprit.scope, list(culprit.ranks)  # type: ignore[assignment]
            f.host = None
    return True


def _join_links(findings: list[Finding], tracks: list[OpenTrack], members: Members) -> None:
    """R5/R6 on a group that a slow link's host takes part in are symptoms of that link."""
    links = [(f.key, set(f.ranks)) for f in findings if f.rule == "SLOW_LINK"]
    links += [(t.key, set(t.ranks)) for t in tracks if t.opened and t.scope == "link" and t.key.endswith("/rdma")]
    if not links:
        return
    for f in findings:
        if f.rule not in ("R5", "R6") or f.domain is None or f.group is None:
            continue
        group = members(f.domain, f.group)
        for key, ranks in links:
            if group & ranks:
                f.key, f.scope, f.ranks = key, "link", sorted(ranks)
                break


def _join_groups(findings: list[Finding], tracks: list[OpenTrack], members: Members) -> None:
    """R5/R6 on the group of a slow rank or host (flagged now or tracked) are its symptoms."""
    # only culprits flagged now or already open: a symptom never lifts a noise candidate to an incident
    culprits = [(f.key, set(f.ranks)) for rule in CULPRIT_RULES for f in findings if f.rule == rule]
    culprits += [(t.key, set(t.ranks)) for t in tracks if t.opened and t.scope in ("rank", "host") and t.ranks]
    if not culprits:
        return
    for f in findings:
        if f.rule not in ("R5", "R6") or f.domain is None or f.group is None or f.key.endswith("/rdma"):
            continue
        group = members(f.domain, f.group)
        for key, ranks in culprits:
            if group & ranks:
                f.key, f.ranks = key, sorted(group & ranks)
                f.scope = "host" if key.startswith("host:") else "rank"
                break


def _join_split_to_culprits(findings: list[Finding], tracks: list[OpenTrack]) -> None:
    """A split group whose hot members are all ranks of a slow host or slow rank (open, or flagged
    now) is that culprit seen from its group: the culprit is slow and its peers wait. Its "cold"
    members are no imbalance: with data-dependent work (variable sequence lengths) some replicas
    run below the stage's median every step, a different few each time. Nor is a hot member
    beside them when the culprit's ranks are most of the hot ones: heavy-tailed noise puts some
    other replica above the stage's median now and then (a 1,024-rank job: a DP group of the slow
    host's two ranks and one such replica opened a second incident). A rank that is really slow
    is found on its own (SLOW_RANK); a split half of whose hot members are elsewhere stays."""
    culprits = [(t.key, t.scope, frozenset(t.ranks)) for t in tracks
                if t.opened and t.scope in ("rank", "host") and set(t.rules) & {"SLOW_RANK", "SLOW_HOST"}]
    culprits += [(f.key, f.scope, frozenset(f.ranks)) for f in findings
                 if f.rule in ("SLOW_RANK", "SLOW_HOST") and f.scope in ("rank", "host")]
    if not culprits:
        return
    for f in findings:
        if f.rule != "SLOW_GROUP" or not f.hot_ranks:
            continue
        for key, scope, ranks in culprits:
            hot = set(f.hot_ranks)
            if 2 * len(hot & ranks) > len(hot):
                f.key, f.scope, f.ranks = key, scope, sorted(ranks)  # type: ignore[assignment]
                f.domain, f.group, f.observed = None, None, None  # the culprit's figure stays the headline
                break


def _join_split(findings: list[Finding], tracks: list[OpenTrack]) -> None:
    """Rank and link findings inside a split group (SLOW_GROUP flagged now, or open) are its members'
    symptoms: the slow members of an imbalanced group are not separate problems."""
    # an open split group claims its members first: a group only flagged now (a candidate) given a
    # member's device finding (R1/R2 open at once) would open beside it (moe_imbalance: a cold expert's
    # R1 lifted a one-step TP-group candidate inside the open EP-group incident to a second incident)
    groups = [(t.key, frozenset(t.ranks)) for t in tracks if t.opened and "SLOW_GROUP" in t.rules
              and t.scope == "group"]  # a host or rank incident that a split joined is no group
    groups += [(f.key, frozenset(f.ranks)) for f in findings if f.rule == "SLOW_GROUP" and f.scope == "group"]
    if not groups:
        return
    for f in findings:
        if f.scope not in ("rank", "link", "device") or f.family != "perf" or not f.ranks:
            continue
        for key, ranks in groups:
            if set(f.ranks) <= ranks:
                domain, _, group = key.removeprefix("group:").partition("/")
                if f.rule in ("R5", "R6") and (f.domain, f.group) != (domain, int(group)):
                    f.observed = None  # another group's bandwidth: a symptom, never the incident's headline figure
                f.key, f.scope, f.domain, f.group = key, "group", domain, int(group)
                f.host, f.link, f.device = None, None, None
                break


def _remember_r5(findings: list[Finding], step: int, state: JoinState | None) -> set[str]:
    """The groups ("domain/group") whose links R5 flagged within `ONSET_R5_STEPS` steps, this one
    included (only this one without `state`). Read before the other joins re-key the findings."""
    now = {f"{f.domain}/{f.group}" for f in findings
           if f.rule == "R5" and f.key.startswith("link:") and f.domain is not None and f.group is not None}
    if state is None:
        return now
    memory = state.r5_last
    memory.update((g, step) for g in now)
    for g in [g for g, s in memory.items() if step - s >= ONSET_R5_STEPS]:
        del memory[g]
    return set(memory)


def _join_pending_links(findings: list[Finding], tracks: list[OpenTrack],
                        recent: set[str] | None = None) -> list[Finding]:
    """R5 then R6 on one (domain, group) is one fault: the group's finding carries R5 too.

    A group slowing as a whole first moves each member off the group's own history (R5 fires on
    them while that history is still healthy; a group with a candidate is not R6-eligible); a
    step or two later the history has caught up, R5 goes quiet and R6 flags the group against
    the others. The members' R5 candidates never persist to open and are dropped, so without
    this the group's incident lacks R5. Only candidates (not open incidents) of R5 on links of
    the very group R6 flags now are taken: an R5 incident of its own stays one. `recent`: groups
    whose links R5 flagged within `ONSET_R5_STEPS` steps (JoinState): with heavy-tailed noise R6 may
    miss a step, its candidate drop and flag again a few steps on, when the members' R5 candidates of
    the onset have gone; they were still this fault's onset."""
    pending = [t for t in tracks if not t.opened and t.scope == "link" and "R5" in t.rules]
    recent = recent or set()
    if not pending and not recent:
        return findings
    extra = []
    for f in findings:
        if f.rule != "R6" or f.scope != "group" or not f.key.startswith("group:") or f.family != "perf":
            continue
        prefix = "link:" + f.key.removeprefix("group:") + "/"
        links = sorted(t.key for t in pending if t.key.startswith(prefix))
        opened = any(t.opened and t.key.startswith(prefix) for t in tracks)  # an R5 incident of its own
        if not links and (opened or f.key.removeprefix("group:") not in recent):
            continue
        r5 = copy.copy(f)
        r5.rule = "R5"
        r5.ranks = list(f.ranks)
        r5.evidence = {**f.evidence, "r5_candidates": float(len(links))}
        r5.summary = (f"R5 flagged {len(links)} member link(s) of this group at the onset ({', '.join(links[:4])})"
                      if links else "R5 flagged member links of this group at the onset")[:300]
        extra.append(r5)
    return findings + extra


def _job_wide_links(findings: list[Finding], world: int) -> None:
    """R5 on a quarter of the job's ranks or more, in `JOB_WIDE_GROUPS` groups or more, in one step, with no
    host in every flagged group (no slow link or group took them): no one host's link slows them all; every
    group's transfer moved together, the job's common mode (its slow steps' cause, `comm_bandwidth`), not
    that many links. They become one job-wide finding that never opens an incident alone (it joins the job's
    slow steps or the culprit that explains them). A wrong DP topology on a 32-rank job drew R5 on all 28
    other ranks, both PP stages' groups, for the 3 steps of its onset: 28 link incidents. A slow link on one
    host slows the groups through it: that host is in each of them, and they stay link findings."""
    links = [f for f in findings if f.rule == "R5" and f.scope == "link" and f.family == "perf"
             and not f.key.endswith("/rdma")]
    ranks = {r for f in links for r in f.ranks}
    hosts: dict[tuple[str | None, int | None], set[str | None]] = {}
    for f in links:
        hosts.setdefault((f.domain, f.group), set()).add(f.host)
    if len(ranks) < max(2, world // 4) or len(hosts) < JOB_WIDE_GROUPS:
        return
    if set.intersection(*hosts.values()) - {None}:
        return  # one host in every flagged group: its link may be the cause
    for f in links:
        f.key, f.scope, f.ranks, f.host, f.link, f.device = "job", "job", [], None, None, None
        f.domain, f.group = None, None
        f.open_after = NEVER_ALONE


def _attach(slow: Finding, culprit: Finding) -> None:
    slow.key, slow.scope = culprit.key, culprit.scope
    slow.domain, slow.group, slow.link, slow.stage = culprit.domain, culprit.group, culprit.link, culprit.stage
    slow.open_after = max(slow.open_after, culprit.open_after)  # joining never lowers the culprit's persistence
    slow.candidate_gap = culprit.candidate_gap
    slow.ranks, slow.host = list(culprit.ranks), culprit.host
