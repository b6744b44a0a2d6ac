"""The loopback Slurm's client environment, left as found: no job, every node resumed."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping

import pytest

from infra.launcher.slurm import PARTITION, SlurmCluster, node_names
from tests.streams.mitigate.slurm_jobs import run


@pytest.fixture
def slurm_env(slurm_cluster: SlurmCluster) -> Iterator[Mapping[str, str]]:
    env = slurm_cluster.client_env()
    yield env
    run(env, "scancel", "--partition", PARTITION)
    for node in node_names():
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=dict(env),
                       capture_output=True, timeout=30)
