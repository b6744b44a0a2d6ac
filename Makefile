# steplens — the two commands a newcomer needs are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# the compiled parts (schemas/_packed.c, infra/_kafka_records.c) are built by the install: a change to one reinstalls
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml setup.py schemas/_packed.c infra/_kafka_records.c | cksum | cut -d' ' -f1)

.PHONY: venv up up-cluster down status demo demo-server test test-quick lint typecheck unit integration clean bench-detection bench-query chaos chaos-cluster soak bench-replay bench-throughput bench-scaleout bench-scaleout-cluster bench-parse bench-overhead bench-overhead-gpu bench-model bench-mitigation venv-train

$(STAMP): pyproject.toml setup.py schemas/_packed.c infra/_kafka_records.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]"
	@rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

# Training frameworks for the rank hook's tests and bench (torch ~0.5 GB + CUDA libs, MindSpore CPU ~0.8 GB):
# installed once per pinned version set, cached by pip.
TRAIN_STAMP := $(VENV)/.train-$(shell grep -E '^(torch|mindspore|nvml) = ' pyproject.toml | cksum | cut -d' ' -f1)
$(TRAIN_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[dev,torch,mindspore]"
	@rm -f $(VENV)/.train-* && touch $@

venv-train: $(TRAIN_STAMP)

bench-overhead: venv-train ## the DDP workload without hook, with hook, with torch.profiler -> bench/results/overhead.json
	$(BIN)/python -m bench.overhead

bench-overhead-gpu: venv-train ## the same on CUDA, one rank per GPU (where a GPU is) -> bench/results/overhead-gpu.json
	$(BIN)/python -m bench.overhead --device cuda

up: venv          ## start Kafka + ClickHouse on loopback (installs them when missing)
	$(BIN)/python -m infra.launcher up

up-cluster: venv  ## 3 Kafka nodes, ZooKeeper, 2 shards x 2 ClickHouse replicas on loopback (docs/scaling.md)
	$(BIN)/python -m infra.launcher up --cluster

down: venv        ## stop every service steplens started (the loopback cluster too)
	$(BIN)/python -m infra.launcher down

status: venv      ## which services run, their addresses and the logs directory
	$(BIN)/python -m infra.launcher status

demo: venv        ## simulated 64-rank job with injected faults through the real pipeline
	$(BIN)/python -m steplens demo

demo-server: venv ## the same, landing in the ClickHouse server instead of embedded chdb
	$(BIN)/python -m steplens demo --clickhouse server

bench-detection: venv ## every fault scenario through Kafka + workers, scored -> bench/results/detection.json
	$(BIN)/python -m bench.detection $(BENCH_ARGS)

bench-model: venv-train ## expected step time vs real traces and held-out simulated jobs; expected vs measured memory -> bench/results/model.json
	$(BIN)/python -m bench.model $(BENCH_ARGS)

bench-mitigation: venv ## the mitigation policy on the detector's incidents: GPU-hours lost with vs without, wrong drains; actions on the loopback Slurm -> bench/results/mitigation.json
	$(BIN)/python -m bench.mitigation $(BENCH_ARGS)

bench-query: venv ## 100 M step rows in embedded chdb, every CLI query timed -> bench/results/query.json
	$(BIN)/python -m bench.query $(BENCH_QUERY_ARGS)

lint: venv
	$(BIN)/ruff check .

typecheck: venv
	$(BIN)/mypy

# a change's first check: no service started, no trace of gigabytes, no `slow` file (under 3 minutes); `make test` stays the gate
QUICK_TESTS := tests/schemas tests/streams/detect/rules tests/streams/detect/scopes tests/streams/detect/incidents \
	tests/streams/detect/signals tests/streams/detect/state tests/streams/model tests/streams/alerts tests/infra tests/sinks tests/streams/profiles \
	tests/producers/simulator tests/test_architecture.py tests/docs
QUICK_MARKS := not integration and not kafka and not clickhouse and not cluster and not alertmanager and not prometheus and not slurm and not large

# `make test` runs the service-free tests TEST_WORKERS at a time (pytest-xdist: they share nothing), then the
# services' tests TEST_WORKERS files at a time (one broker and one ClickHouse server, each test on its own topics,
# databases and groups; tests/conftest.py), then the `exclusive` ones alone: they stop a shared service or start
# the loopback cluster
TEST_WORKERS ?= 2
test: venv venv-train lint typecheck ## lint, types, unit and integration tests (starts the services it needs)
	$(BIN)/pytest -n $(TEST_WORKERS) -m "$(QUICK_MARKS)"
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile -m "not ($(QUICK_MARKS)) and not exclusive"
	$(BIN)/pytest -m "exclusive"

test-quick: venv lint ## ruff and the service-free unit tests of the pure stages, in under 3 minutes (the `slow` files are left out)
	$(BIN)/pytest -q -m "$(QUICK_MARKS) and not slow" $(QUICK_TESTS)

chaos: venv       ## hostile input, killed workers, Kafka and ClickHouse outages -> bench/results/chaos.json
	$(BIN)/python -m bench.chaos

chaos-cluster: venv ## brokers, the KRaft leader, a replica, ZooKeeper, workers killed on a wiped loopback cluster -> bench/results/chaos-cluster.json
	$(BIN)/python -m bench.chaos_cluster --fresh $(CHAOS_ARGS)

soak: venv        ## 30 min of concurrent jobs while workers, the broker and the sink restart -> bench/results/soak.json
	$(BIN)/python -m bench.soak $(SOAK_ARGS)

MSPROF_VENV := .steplens/bench-msprof

bench-parse: venv ## steplens vs HolisticTraceAnalysis 0.5.0 (and msprof-analyze) -> bench/results/parse.json
	$(BIN)/python -m pip install -q -e ".[dev,hta]"
	@test -x $(MSPROF_VENV)/bin/msprof-analyze || ($(PYTHON) -m venv $(MSPROF_VENV) && \
		$(MSPROF_VENV)/bin/pip install -q msprof-analyze==26.2.0)
	$(BIN)/python bench/parse.py

bench-replay: venv ## real multi-rank traces through Kafka + detect vs offline, HTA, msprof-analyze -> bench/results/replay.json
	$(BIN)/python -m pip install -q -e ".[dev,hta]"
	@test -x $(MSPROF_VENV)/bin/msprof-analyze || ($(PYTHON) -m venv $(MSPROF_VENV) && \
		$(MSPROF_VENV)/bin/pip install -q msprof-analyze==26.2.0)
	$(BIN)/python -m bench.replay $(BENCH_ARGS)

clean:
	rm -rf .steplens reports .pytest_cache .mypy_cache .ruff_cache

bench-throughput: venv ## largest simulated job sustained at 1 step/s end to end -> bench/results/throughput.json
	$(BIN)/python -m bench.throughput $(BENCH_ARGS)

SCALEOUT_ARGS ?= --ranks 1024,2048,4096

bench-scaleout: venv ## the same load through 1 and 2 workers of each role -> bench/results/throughput-scaleout.json
	$(BIN)/python -m bench.throughput --workers 1,2 $(SCALEOUT_ARGS)

bench-scaleout-cluster: venv ## the same through the loopback cluster (3 brokers RF 3, ClickHouse 2x2) -> bench/results/throughput-scaleout-cluster.json
	$(BIN)/python -m bench.throughput --cluster --fresh --workers 1,2 $(SCALEOUT_ARGS)
