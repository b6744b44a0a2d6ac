"""What a training rank loads by importing the hook (issue #47): no launcher, no TLS toolkit, no
stream-processing or ClickHouse client. Every rank of a 10,000-device job imports it; the broker
supervisor, `cryptography.x509`, Faust and the ClickHouse drivers are for the services' side."""

from __future__ import annotations

import subprocess
import sys

from infra.settings import REPO_ROOT

FORBIDDEN = ("cryptography", "faust", "mode", "aiokafka", "clickhouse_driver", "chdb", "pyarrow",
             "infra.launcher", "streams", "sinks")


def test_importing_the_hook_loads_no_launcher_and_no_service_client() -> None:
    code = "import sys, producers.hook; print('\\n'.join(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, check=True)
    loaded = proc.stdout.split()
    heavy = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    assert not heavy, f"`import producers.hook` loads {heavy}"


def test_the_launcher_is_a_package_of_its_own() -> None:
    from infra.launcher import ClickHouseServer, InfraConfig, KafkaBroker, down, status, up

    assert all(callable(x) for x in (ClickHouseServer, InfraConfig, KafkaBroker, down, status, up))
    import infra

    assert not hasattr(infra, "KafkaBroker")  # one way in: `infra.launcher`
