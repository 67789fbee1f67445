# Bessemer — top-level commands. `make demo` and `make test` do all set-up themselves.
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: deps build demo demo-inprocess test test-rust test-python lint lint-python fmt bench-core bench-vs-bess bench-profile bench-modules bench-ports bench-upf bench-slices bench-slice-lib bench-scaling bench-planner bench-megapipe soak soak-megapipe fuzz clean

VENV := .venv
PY := $(VENV)/bin/python
PY_STAMP := $(VENV)/.installed

deps:
	@scripts/install-deps.sh

# NATIVE=1 builds for this machine's CPU (-C target-cpu=native) into target/native; the
# default build stays portable x86-64. The daemon is then target/native/release/bessemerd.
ifeq ($(NATIVE),1)
build: export RUSTFLAGS += -C target-cpu=native
build: export CARGO_TARGET_DIR := target/native
endif
build: deps
	$(CARGO) build --release --workspace

# Starts bessemerd, runs conf/demo.bess (no NIC, no hugepages), shows `monitor pipeline`
# for 5 s, stops the daemon.
demo: build $(PY_STAMP)
	scripts/demo.sh

# The same pipeline built in-process through the Rust API (no daemon).
demo-inprocess: build
	./target/release/bessemer-demo --seconds 5

test: deps lint test-rust test-python
	@echo "make test: all tests passed"

# Root-only tests are reported as ignored with their reason when not root; as root none may be.
test-rust:
	CARGO=$(CARGO) scripts/test-rust.sh

lint: lint-python
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# The Python package lives in a project-local virtualenv (no system packages touched).
$(PY_STAMP): python/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e 'python[test]' ruff
	@touch $(PY_STAMP)

lint-python: $(PY_STAMP)
	$(VENV)/bin/ruff check python
	$(VENV)/bin/ruff format --check python

test-python: $(PY_STAMP)
	cd python && ../$(PY) -m pytest -q

fmt:
	$(CARGO) fmt --all

# Dataplane core benchmark at batch capacity 32 and 64; ends with one JSON line.
bench-core: deps
	NATIVE=$(NATIVE) bench/core.sh

# The real omec bessd against bessemerd, daemon to daemon, worker 0 on the same core, one
# pybess client driving both: bench-core's rows, the classifier rows of issue 30 and one
# pipeline per module class BESS ships that runs in memory; alternated runs, Mpps per second
# of the worker's CPU, each class's own cycles, the ratio; a table and one JSON line. Builds
# bessd once (scripts/build-bessd.sh) and says so where it cannot (make bench-vs-bess
# ARGS=--quick; ARGS="--rows 'ip_lookup*'"). Not part of make test.
bench-vs-bess: deps
	bench/vs_bess.sh $(ARGS)

# The UPF pipeline (conf/upf/upf.bess, sim mode) on one core: uplink and downlink at 1 000,
# 5 000 and 100 000 sessions, with and without QER, cost per stage; ends with one JSON line
# (make bench-upf ARGS=--quick).
bench-upf: deps
	bench/upf.sh $(ARGS)

# Issue 11's whole benchmark: scaling, slice library, NetSlice's comparison (root) and IPsec
# (ESPEncap / ESPDecap per core), each part's table and JSON line, then one combined JSON line
# (make bench-slices ARGS=--quick; PARTS="ipsec" for one part).
bench-slices: deps
	bench/slices.sh $(ARGS)

# Instructions per packet of one bench-core case by function, counted by callgrind
# (make bench-profile CASE=chain8_60).
CASE ?= src_sink_60
bench-profile: deps
	bench/profile.sh $(CASE)

# Multi-core scaling in memory: one and two workers, duplicated and chained, 60 and 1500 B,
# with the share of CPU the workers got; a table and one JSON line (make bench-scaling
# ARGS=--quick).
bench-scaling: deps
	bench/scaling.sh $(ARGS)

# Per-class cost of the module classes (ns/packet, Mpps) on one core; ends with one JSON line.
bench-modules: deps
	bench/modules.sh

# Switch throughput, CPU and latency between veth pairs: Bessemer (AF_XDP, AF_PACKET) vs
# in-kernel XDP_REDIRECT, the Linux bridge and OVS userspace (root); a table and one JSON line.
bench-ports: deps
	bench/ports.sh

# NetSlice's comparison (issue 11, root): pcap, pcap-mmap, recvmmsg batches 1..256, AF_XDP
# slices and the kernel bridge on bench-ports' topology, placement and added RTT; a table and
# one JSON line (make bench-netslice ARGS=--quick). Also a part of make bench-slices.
.PHONY: bench-netslice
bench-netslice: deps
	bench/netslice.sh $(ARGS)

# Slice library: Mpps between a SlicePort and an application thread, batches of 32: app ->
# daemon and the round trip with zero copy, daemon -> app copying another pool's packets; a
# table and one JSON line (make bench-slice-lib ARGS=--quick).
.PHONY: bench-slice-lib
bench-slice-lib: deps
	$(CARGO) run --release -q -p bessemer-bench --bin bench-slice-lib -- $(ARGS)

# Planner search scaling (seed 003 Table 5.1 grid on the 82599 model); ends with one JSON
# line (make bench-planner ARGS=--quick).
.PHONY: bench-planner
bench-planner: deps
	bench/planner.sh $(ARGS)

# MegaPipe (crates/megapipe): the seed-002 RPC ping-pong (epoll vs MegaPipe ablation) and the
# kv/httpd servers against memcached and nginx; a table and one JSON line
# (make bench-megapipe ARGS=--quick).
bench-megapipe: deps
	scripts/install-deps.sh --bench-megapipe
	bench/megapipe.sh $(ARGS)

# The full 100 000-connection leak soak of a MegaPipe channel (make test runs 5 000).
soak-megapipe:
	MEGAPIPE_SOAK_CONNS=100000 $(CARGO) test --release -p megapipe --test soak -- --nocapture

# Every fuzz target under libFuzzer for FUZZ_SECS seconds each (default 60; FUZZ_TARGETS="a b"
# for some; nightly toolchain): executions, exec/s, coverage and corpus size per target in a
# table and one JSON line. make test replays the saved corpora on stable.
fuzz:
	scripts/fuzz.sh

# The soak for SOAK_SECS seconds (default 600; make test runs it for 60): traffic between
# namespaces through a pipeline the controller changes every 100 ms, with hostile requests;
# checks leaks, packet accounting, RSS growth and request latency, prints the figures (root).
SOAK_SECS ?= 600
soak: deps $(PY_STAMP)
	cd python && SOAK_SECS=$(SOAK_SECS) ../$(PY) -m pytest -q -s -rs tests/test_soak.py

clean:
	$(CARGO) clean
