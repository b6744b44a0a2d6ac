"""The detect stage's thresholds: one flat, documented table (docs/detection.md explains each).

Loaded with every other setting, from the one settings table: `Settings.detection` holds the [detection] TOML
table and the STEPLENS_DETECTION_<NAME> variables as given; `DetectionConfig.of(settings)` reads them over
the defaults here, each as the type of its default, and refuses an unknown name. Each scope and rule feed
takes only the thresholds it reads (`params`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from infra.settings import Settings, apply_table

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

P = TypeVar("P", bound="DataclassInstance")


@dataclass(frozen=True, slots=True)
class DetectionConfig:
    """Thresholds of the slow-step and slow-rank analyses (Hermes §3 of the spec)."""

    warmup_steps: int = 5            # steps ignored before a baseline forms
    baseline_steps: int = 50         # history length for the step-time baseline
    slow_step_ratio: float = 1.10    # step time > ratio x baseline is a slow step (Hermes: 10 %)
    slow_rank_wait_ratio: float = 0.05  # R_wait = 1 - mean(busy)/max(busy) over a group
    slow_rank_z: float = 3.0         # the slowest rank's busy time must also be this many robust sigmas out
    slow_rank_min_steps: int = 3     # consecutive flagged steps before a slow-rank incident opens
    slow_rank_gap_share: float = 0.05  # a group's wait for its late arriver alone, share of the step (mstt: 5 %)
    # graded confirmation (streams/detect/scopes/confirm.py): a deviation far past every threshold confirms sooner
    slow_rank_strong_min_steps: int = 2  # flagged steps for a strong one (>= slow_rank_min_steps: grading off)
    slow_rank_strong_z: float = 10.0     # strong: robust z at least this ...
    slow_rank_strong_excess: float = 0.15  # ... and busy this far over the group median ...
    slow_rank_strong_q_margin: float = 0.25  # ... and Dixon's Q this share of the way from its critical value to 1
    slow_rank_strong_compute_share: float = 0.8  # ... and this share of its excess in device compute
    resolve_after_steps: int = 5     # clean steps before an open incident is resolved
    incident_hold_down_steps: int = 10  # a resolved incident re-opens (same id) on a re-fire this soon after
    culprit_hold_down_steps: int = 50  # ... and one of a rank, host, link, group or stage this soon: a culprit
    # slow in bursts (5 steps every 25) or a flapping link is one incident recording each burst
    window_lateness_steps: int = 8   # a group's step window closes incomplete this many steps behind the newest
    profile_steps: int = 5           # steps of detailed profiling requested for a slow rank
    # engine (streams/detect/engine.py) — windows, scopes; docs/detection.md explains each
    slow_step_mad_z: float = 6.0     # a slow step must also be this many robust sigmas above the baseline
    slow_step_open_after: int = 2    # slow steps in a row before a slow-step incident (1 = eval/checkpoint steps alarm)
    shift_steps: int = 10            # a stable run of slow steps this long is a permanent shift: new baseline
    shift_spread: float = 0.05       # "stable": relative MAD of the run below this
    comm_volume_ratio: float = 1.5   # slow step caused by communication: bytes this x baseline = more traffic
    stall_gap_steps: int = 10        # clean steps allowed between slow steps of an unplanned cause (stalls recur)
    # the job's rhythm (streams/detect/scopes/rhythm.py): periodic work (checkpoint, evaluation) learned, not alarmed
    rhythm_gap_steps: int = 2        # quiet steps inside one episode of a planned kind's work
    rhythm_active_share: float = 0.05  # a planned kind's phase grown by this share of the step: its work goes on
    rhythm_min_period: int = 5       # episodes of one kind this many steps apart or more can be a rhythm
    rhythm_slower_ratio: float = 2.0  # an episode on the rhythm costing this x its past is a finding (storage slowed)
    rhythm_tail_steps: int = 12      # mild slow steps this soon after a planned spike are its aftermath (async write)
    rhythm_tail_ratio: float = 1.3   # ... "mild": at most this x the baseline
    rhythm_tail_spike_ratio: float = 1.4  # ... "spike": the episode's first step at least this x the baseline
    slow_host_fraction: float = 0.5  # share of a host's ranks flagged together that makes a host incident
    slow_link_ratio: float = 1.5     # a group's transfer time this many times its own baseline: slowed (link < 67 %)
    slow_link_open_after: int = 2    # flagged steps before a slow-link incident
    slow_stage_ratio: float = 0.10   # a PP stage this much above its own baseline (and above the others)
    window_timeout_factor: float = 3.0   # a frame waits at most this many recent step times ...
    window_timeout_min_s: float = 5.0    # ... but at least this long ...
    window_timeout_max_s: float = 60.0   # ... and at most this long (then missing ranks may be hung)
    hang_silence_s: float = 20.0     # a rank silent this long while its peers went on is hung (> a detect
    #                                  worker's death: its input partitions are silent ~10 s until reassigned)
    hang_stall_factor: float = 2.0      # devices sampling this many window timeouts past the last step: a hang
    job_silence_s: float = 60.0      # no rank nor device of a job reported this long, no `end`: it stopped
    #                                  (a crash: one JOB_STOPPED incident; > window_timeout_max_s)
    window_max_open_steps: int = 64      # open frames per job before the oldest is closed
    batch_max: int = 10_000          # raw messages per take() of the decode stage
    batch_within_s: float = 0.2      # decode poll timeout (kafka-python returns at once when records are there)
    # decode: polls bringing records within this long of a batch's first join it (one poll is one broker's
    # fetch: on 3 brokers a step came in ~3x more, ~3x smaller polls, and a decode batch has a fixed cost)
    batch_gather_s: float = 0.05
    # detect take(): a chunk waits at most this for its batch. Faust's take() wakes every `within` even with no
    # input: 0.02 s cost an idle detect worker 1.1 % of a core (50 wake-ups/s); 0.1 s costs ~0.2 %
    detect_within_s: float = 0.1
    snapshot_interval_s: float = 1.0  # state snapshot period per changed job (streams/detect/state/)
    # ... stretched so that encoding snapshots takes at most this share of the worker's time (a 10,240-rank job's
    # snapshot costs ~50 ms: once a second that was ~2 µs of detect's ~10 µs per event), as Flink's minimum pause
    # between checkpoints does; a snapshot with outputs to send is never put off; 0 = always the interval.
    snapshot_max_share: float = 0.02
    snapshot_interval_max_s: float = 10.0  # ... and never longer (a restart replays the chunks since the last one)
    metrics_port: int = 0            # Prometheus self-metrics port of the detect worker; 0 = off
    # rules R1–R10 (spec §2), defaults as the spec gives them; 0 = bound off
    rule_open_after: int = 3         # flagged steps before a rule-only incident opens (R4–R10 per rank)
    r1_k: int = 3                    # R1: consecutive samples outside [L, U]
    r1_temp_max_c: float = 85.0
    r1_mem_max_pct: float = 90.0     # spec §4: memory >= 90 % is the memory-mismanagement symptom; judged only
    #                                  on a device whose memory rose into the band during the run (its level, the
    #                                  median of r1_mem_baseline_samples samples after r2_warmup_mem_pct, under
    #                                  the bound): a job that keeps HBM at 95-97 % by design raises nothing
    r1_mem_baseline_samples: int = 20
    r1_power_max_w: float = 0.0
    r1_aicore_min_pct: float = 30.0  # spec §4 unbalanced scheduling: some cores 100 %, others <= 30 %
    r1_membw_min_pct: float = 25.0   # spec §4 memory bottleneck "< 40 %": under the healthy band (38 % at the
    #                                  simulator's 62 % AI Core, >= 30 % on a busy device waiting for a straggler),
    #                                  over the fault's (~23 %); a deployment setting: the device's healthy band
    r1_busy_min_pct: float = 50.0    # a device is busy at AI Core >= this: its T7 and clock lower bounds apply
    r1_job_busy_min_pct: float = 40.0  # the job is busy at median AI Core >= this: the T3 lower bound applies
    #                                    (a checkpoint or eval pause idles every device: ~25 % in the simulator)
    r1_downclock_pct: float = 5.0    # spec §3 "check down-clocking (> 5 %)": clock below the job's highest seen
    #                                  clock by more than this is out of bounds (0 = off)
    r1_gc_max_ms: float = 500.0      # T8: GC pause per step
    r1_gc_k: int = 1
    r2_k: float = 0.5                # R2 CUSUM reference offset
    r2_h: float = 5.0                # R2 alarm threshold
    r2_history: int = 30             # R2 steady-state samples for mu0, sigma0
    r2_warmup: int = 60              # R2: samples skipped first (a starting job heats up: thermal lag) ...
    r2_warmup_power_w: int = 20      # ... power and memory follow the load at once (no lag): the job's own
    r2_warmup_mem_pct: int = 20      # warm-up steps (~11 s in the simulator) and a margin
    r2_confirm: int = 3              # R2: alarms of one device within its last r2_confirm_window samples ...
    r2_confirm_window: int = 6       # ... before it counts (1 = every CUSUM alarm counts, the bare rule)
    r2_sigma_min_temp_c: float = 1.0   # R2 absolute sigma floors (smooth metrics)
    r2_sigma_min_power_w: float = 10.0
    r2_sigma_min_mem_pct: float = 1.0
    r2_transition: float = 0.10      # R2: a tick whose job-wide median moved this share from the last one
    #                                  (a checkpoint, an evaluation, a job-wide stall) and the next tick
    #                                  are left out: hosts sample at their own phase and clocks, so such
    #                                  a tick mixes devices sampled before and after the change
    # OOM forecast (streams/detect/rules/oom_forecast.py, issue #44): a device whose T6 trend reaches 100 %
    # within the horizon; told in steps, converted with the job's recent step time (device samples are timed)
    oom_horizon_steps: float = 200.0  # forecast a run-out this many steps ahead at most (a steady creep is
    #                                   caught as soon as its trend is significant: >= 50 steps ahead at 0.05-0.3
    #                                   %/step from 70-94 %; gc_leak's +0.1 %/step from ~72 % is ~260 steps out)
    oom_min_growth_pct_per_step: float = 0.01  # slower growth is no leak (200 steps to gain 2 %)
    oom_window: int = 48             # samples per device the trend is fitted on (~1 per second); a device is
    #                                  judged once twice as many arrived after its warm-up (its level before)
    oom_t_min: float = 6.0           # the least-squares slope's t statistic, its lag-1 autocorrelation
    #                                  accounted for (0.05 %/step under 0.3 % noise: t ~ 13 over 48 samples;
    #                                  0.2 %/step under an 8 % per-step sawtooth: ~ 7)
    r3_warmup: int = 50              # R3 W
    r3_length: int = 50              # R3 L
    r3_k: float = 2.0                # R3 k (spec: 2–3; 3 missed a 25 % drop behind one eval step in the first window)
    r3_min_deviation: float = 0.05   # R3: a flagged value must also be >= 5 % off the window mean
    r3_adapt_after: int = 50         # R3: alarms in a row after which they become the window (a lasting shift)
    r4_history: int = 100            # R4 N
    r4_iqr_k: float = 1.5
    r4_bench_samples: int = 20       # R4: samples to learn P_bench when not configured
    r4_p_bench: float = 0.0          # R4: configured P_bench in FLOP/s (0 = learn per kernel and shape)
    r4_min_deviation: float = 0.1    # R4: a flagged ratio must also be >= 10 % off the median (tight fences)
    r4_trend_min_deviation: float = 0.10  # R4 on a kernel's job median: >= 10 % (5 %: 2 FAs at 8 % jitter)
    r4_compute_min_deviation: float = 0.06  # R4 on the job's compute (FLOP-weighted over kernels): >= 6 % (4 sigma)
    r5_periods: int = 20             # R5 M
    r5_k: float = 3.0
    r5_min_deviation: float = 0.25   # R5: a slow link is also >= 25 % below its group (waits blur bandwidth)
    r6_k: float = 3.0
    r6_min_deviation: float = 0.2    # R6: a slow group is also >= 20 % below the groups' median (a step's least
    # kernel holds what the least-waiting member waited elsewhere: a few % on a TP group now and then)
    r7_bound: float = 0.4
    r7_jump: float = 0.15
    r8_min_cu: float = 0.7
    r9_low_gbps: float = 0.0         # R9 band (0 = learned from the series' own history)
    r9_high_gbps: float = 0.0
    r9_learned_low: float = 0.7      # R9 learned band: this x the rank's median rate ... (H2D -40 % is a fault)
    r9_learned_high: float = 2.0     # ... to this x it
    r10_severe: float = 0.5
    r10_k: float = 5.0
    r10_min_ratio: float = 0.1
    # below what the fleet achieves (streams/detect/scopes/expected.py, issue #44): a job judged against the fleet's
    # reference models over its first steps, one BELOW_EXPECTED incident when it runs well below them
    reference_models: str = ""       # a reference-model export (JSON, streams/model/reference.py) loaded at start;
    #                                  "" = none (STEPLENS_REFERENCE_MODELS); the fleet learns its own as well
    expected_warmup_steps: int = 5   # a job's first steps not judged (compile, caches, allocator)
    expected_steps: int = 10         # steps judged after them; the verdict comes then (step ~15, < 30)
    expected_decide_by: int = 30     # no verdict by this many steps from the job's start (from its first
    #                                  reference on a fleet that just started): none (silent)
    expected_share: float = 0.8      # share of those steps a component must be below on
    expected_comm_ratio: float = 2.0  # a collective's transfer time >= this x its curve: half the fleet's bandwidth
    expected_compute_ratio: float = 0.85  # a kernel's FLOP/s <= this x the fleet's p50 (and below its p10)
    expected_refit_s: float = 60.0   # the fleet refits its learned models this often (worker clock), and
    #                                  sooner for a job waiting for them (engine.WAITING_REFIT_FRAMES)
    expected_min_jobs: int = 3       # healthy jobs a learned kernel benchmark or curve needs before it judges
    expected_drift_jobs: int = 3     # fleet-wide drift: at least this many running jobs of one link class or
    expected_drift_share: float = 0.5  # device kind below together, and more than this share of those judged on
    #                                    it: ONE fleet incident (job "fleet") listing them, none per job

    def params(self, cls: type[P]) -> P:
        """A scope's or a rule feed's `Params` (streams/detect/scopes/, streams/detect/signals/)
        filled from these settings.

        Each declares only the thresholds it reads, named as the settings here: the settings
        (env, TOML, defaults) stay one flat documented table, and a scope or feed can be read,
        tested and called without the other ninety. The engine builds them per frame: the values
        go in positionally, in the order of the dataclass's fields (`__match_args__`: its fields'
        names in its `__init__`'s order), half the cost of `fields()` and keywords.
        """
        names: tuple[str, ...] = cls.__match_args__  # type: ignore[attr-defined]  # every dataclass has them
        return cls(*[getattr(self, name) for name in names])

    @classmethod
    def of(cls, settings: Settings) -> DetectionConfig:
        """The thresholds `settings` give (the defaults, then its [detection] table and variables)."""
        config: DetectionConfig = apply_table(cls(), settings.detection, "detection.")
        return config
