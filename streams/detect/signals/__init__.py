"""Rules R1–R10 fed from released frames and device samples; their state per job.

The glue between the engine's frames and the pure rule modules in streams/detect/rules/: it picks
the series each rule reads (spec §2's "data" column), keeps one state per series and turns
alarms into Findings on the right scope. Keys decide merging: a rule firing on "job" joins
the slow-step incident, on "rank:r" the rank's incident, on "host:h" the host's.

One module per feed:

- `device.py`, device samples: R1 (T1, T2, T3, T6, T7 bounds and the clock's down-clocking; lower bounds only
  where the job or device is meant to be busy) and R2 (CUSUM on T1, T2, T6) per device,
  R2 on the device's deviation from the job's median device at the same tick (common mode
  such as the thermal warm-up of a starting job is not a device drift);
- `steps.py`, steps: R1 on T8 (GC pause per rank), R3 on job step throughput and D1, R10 per rank;
- `kernels.py`, kernel summaries: R4 (per kernel key: job trend + rank cross-section), R5/R6 per collective
  key and group (SLOW_LINK / SLOW_GROUP), R7 (job median gap), R8 per rank, R9 per direction;

`frames.py` runs the two frame feeds and places job-wide rule findings after the join, `shared.py`
holds the job's `SignalState` and the findings built from alarms. Each feed takes its own `Params`
(`DeviceParams`, `StepParams`, `KernelParams`): the settings it reads, named as in
`infra.settings.DetectionConfig`, whose `params` fills them (the engine: per frame, and per device
chunk that releases ticks).
"""

from streams.detect.signals.device import DeviceParams, device_findings, device_ticks
from streams.detect.signals.frames import follow_slow_step, frame_findings, name_slow_groups
from streams.detect.signals.kernels import KernelParams
from streams.detect.signals.shared import SignalState
from streams.detect.signals.steps import StepParams

__all__ = ["DeviceParams", "KernelParams", "SignalState", "StepParams", "device_findings", "device_ticks",
           "follow_slow_step", "frame_findings", "name_slow_groups"]
