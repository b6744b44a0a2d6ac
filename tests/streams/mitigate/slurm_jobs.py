"""Helpers of the tests against the loopback Slurm (infra/launcher/slurm.py): commands, batch jobs, waits."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Mapping

from schemas import Incident
from streams.advice import advise


def slow_host(host: str, incident_id: str, observed: float = 1.25, detected_ns: int = 0, job: str = "train",
              state: str = "open") -> Incident:
    return Incident(incident_id=incident_id, job=job, rule="SLOW_HOST", state=state,  # type: ignore[arg-type]
                    severity="warning", scope="host", summary=f"{host} slow", detected_ns=detected_ns, host=host,
                    observed=observed, expected=1.0, cause=advise("backward_ms").cause)


def run(env: Mapping[str, str], *argv: str) -> str:
    return subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, check=True, timeout=30).stdout


def wait_for(what: str, cond: Callable[[], object], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def job_field(env: Mapping[str, str], job: str, name: str) -> str:
    m = re.search(rf"\b{name}=(\S*)", run(env, "scontrol", "show", "job", job, "-o"))
    return m.group(1) if m else ""


def submit(env: Mapping[str, str], name: str) -> tuple[str, list[str]]:
    """A 2-node batch job placed by Slurm, as a training job is; its id and its nodes."""
    out = run(env, "sbatch", "--parsable", "--requeue", f"--job-name={name}", "-N2", "--chdir=/tmp",
              "--output=/dev/null", "--wrap=sleep 600")
    job = out.strip().split(";")[0]
    wait_for(f"job {job} running", lambda: job_field(env, job, "JobState") == "RUNNING")
    return job, hostnames(env, job_field(env, job, "NodeList"))


def hostnames(env: Mapping[str, str], nodelist: str) -> list[str]:
    return run(env, "scontrol", "show", "hostnames", nodelist).split()


def reasons(env: Mapping[str, str]) -> str:
    """`sinfo -R`: every node out of service, with its reason."""
    return run(env, "sinfo", "-R", "--noheader", "--format=%N|%E")
