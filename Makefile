# Bessemer — top-level commands. `make demo` and `make test` do all set-up themselves.
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: deps build demo demo-inprocess test test-rust test-python lint lint-python fmt bench-core bench-vs-bess bench-pmd bench-memif bench-profile bench-modules bench-ports bench-upf bench-upf-profile bench-slices bench-slice-lib bench-scaling bench-planner bench-megapipe soak soak-megapipe fuzz clean

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

test: deps lint test-rust test-python test-deploy
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

# The deploy tests run in test-deploy, after what they need is built.
test-python: $(PY_STAMP)
	cd python && ../$(PY) -m pytest -q --ignore-glob='tests/test_deploy_*'

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

# PMDPort over DPDK on net_null and net_ring against the real bessd's PMDPort, per core,
# alternated (bench/pmd.py; make bench-pmd ARGS=--quick). Ends with one JSON line.
bench-pmd: deps
	VS_BESS_DRIVER=bench/pmd.py bench/vs_bess.sh $(ARGS)

# MemifPort against DPDK's own net_memif, each on a pair of daemons (bench/memif.py; builds the
# real bessd once, as bench-vs-bess does) (make bench-memif ARGS=--quick). Part of bench-slices.
bench-memif: deps
	VS_BESS_DRIVER=bench/memif.py bench/vs_bess.sh $(ARGS)

# The UPF pipeline (conf/upf/upf.bess, sim mode) on one core: uplink and downlink at 1 000,
# 5 000 and 100 000 sessions, with and without QER, cost per stage; ends with one JSON line
# (make bench-upf ARGS=--quick).
bench-upf: deps
	bench/upf.sh $(ARGS)

# Callgrind instructions per packet of omec's own up4.bess on bessemerd by module class,
# uplink and downlink (root; about 5 minutes; make bench-upf-profile ARGS="--seconds 5").
bench-upf-profile: deps
	cargo build --release -q --bin bessemerd
	$(PY) bench/upf_profile.py $(ARGS)

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

# --- packaging and deployment (docs/deploy.md) ---------------------------------------------
# PROFILE=release (default) or debug picks the cargo build that is packaged; PREFIX and
# DESTDIR place `make install`. BESSEMER_K8S_CACHE (default ~/.cache/bessemer/k8s) holds the
# Kubernetes binaries the tests build once.
PROFILE ?= release
PREFIX ?= /usr/local
DESTDIR ?=
PROFILE_DIR := $(if $(filter debug dev,$(PROFILE)),debug,$(PROFILE))
CARGO_PROFILE := $(if $(filter debug dev,$(PROFILE)),,--profile $(PROFILE))
DIST := target/dist/$(PROFILE_DIR)
DEPLOY_BINS := bessemerd bessemer-controller bessemer-planner bessemer-demo bessemer-httpd bessemer-kv
# Debian 12 keeps units in /lib/systemd/system; elsewhere they go under the prefix.
UNITDIR ?= $(if $(filter /usr,$(PREFIX)),/lib/systemd/system,$(PREFIX)/lib/systemd/system)
INSTALL ?= install

.PHONY: bins clidoc man completions vendor-python install install-files deb image test-deploy k8s-cache

# The debug profile builds what `cargo test --workspace` builds (features unified with the
# tests' dev-dependencies), so after the Rust tests it costs nothing; a plain `--bin` build
# would resolve other features and rebuild about half the dependencies.
bins:
	$(CARGO) build $(CARGO_PROFILE) $(if $(CARGO_PROFILE),$(addprefix --bin ,$(DEPLOY_BINS)),--workspace --bins --tests)

# Man pages and bash/zsh/fish completions from the commands' own definitions.
clidoc man completions: bins $(PY_STAMP)
	scripts/gen-clidoc.sh target/$(PROFILE_DIR) $(DIST)/clidoc $(PY)

# The Python CLI and its pinned dependencies (deploy/python-requirements.txt).
vendor-python: $(PY_STAMP)
	scripts/vendor-python.sh $(DIST)/lib/python $(VENV)/bin/pip

install: bins install-files

# Installs what `bins` built (stripped), without building: debian/rules calls this.
install-files: clidoc vendor-python
	$(INSTALL) -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/bessemer \
	  $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	  $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d \
	  $(DESTDIR)$(UNITDIR) $(DESTDIR)$(PREFIX)/lib/sysusers.d \
	  $(DESTDIR)$(PREFIX)/share/doc/bessemer/examples $(DESTDIR)$(PREFIX)/share/bessemer
	for b in $(DEPLOY_BINS); do $(INSTALL) -m 755 -s target/$(PROFILE_DIR)/$$b $(DESTDIR)$(PREFIX)/bin/$$b || exit 1; done
	rm -rf $(DESTDIR)$(PREFIX)/lib/bessemer/python $(DESTDIR)$(PREFIX)/lib/bessemer/cache
	cp -R $(DIST)/lib/python $(DIST)/lib/cache $(DESTDIR)$(PREFIX)/lib/bessemer/
	sed 's|@LIB@|$(PREFIX)/lib/bessemer|g' deploy/bessemer-launcher.py > $(DESTDIR)$(PREFIX)/bin/bessemer
	chmod 755 $(DESTDIR)$(PREFIX)/bin/bessemer
	$(INSTALL) -m 644 $(DIST)/clidoc/man/man1/*.1.gz $(DESTDIR)$(PREFIX)/share/man/man1/
	$(INSTALL) -m 644 $(DIST)/clidoc/completions/bash/* $(DESTDIR)$(PREFIX)/share/bash-completion/completions/
	$(INSTALL) -m 644 $(DIST)/clidoc/completions/zsh/* $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/
	$(INSTALL) -m 644 $(DIST)/clidoc/completions/fish/* $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/
	sed 's|/usr/bin/bessemerd|$(PREFIX)/bin/bessemerd|' deploy/systemd/bessemerd.service > $(DESTDIR)$(UNITDIR)/bessemerd.service
	chmod 644 $(DESTDIR)$(UNITDIR)/bessemerd.service
	$(INSTALL) -m 644 deploy/systemd/bessemer.sysusers $(DESTDIR)$(PREFIX)/lib/sysusers.d/bessemer.conf
	$(INSTALL) -m 644 deploy/systemd/bessemerd-options.conf $(DESTDIR)$(PREFIX)/share/doc/bessemer/examples/
	$(INSTALL) -m 644 LICENSE CHANGELOG.md README.md docs/deploy.md docs/daemon.md $(DESTDIR)$(PREFIX)/share/doc/bessemer/
	rm -rf $(DESTDIR)$(PREFIX)/share/bessemer/conf && cp -R conf $(DESTDIR)$(PREFIX)/share/bessemer/conf

# The Debian package, built by dpkg-buildpackage from debian/ into target/deb/.
deb: $(PY_STAMP)
	scripts/build-deb.sh $(PROFILE)

# The OCI image (target/image/bessemer-VERSION.oci.tar), from a minimal Debian root made
# with mmdebstrap holding the Debian package; no registry. Prints its digest and size.
image: deb
	scripts/build-image.sh $(PROFILE)

# The Kubernetes binaries the tests run (kube-apiserver, kubectl, etcd, helm), built once
# from the Go module proxy into the cache.
k8s-cache:
	scripts/k8s-cache.sh

# Packaging, image, chart and control-plane tests (python/tests/test_deploy_*.py): a debug
# build is packaged so that no release build is needed.
test-deploy: $(PY_STAMP)
	PY=$(PY) scripts/test-deploy.sh
