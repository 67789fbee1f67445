# Bessemer — top-level commands. `make demo` and `make test` do all set-up themselves.
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: deps build demo test test-rust lint fmt bench-core clean

deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --release --workspace

# Runs a sample pipeline in-process on an embedded default (no NIC, no hugepages).
demo: build
	./target/release/bessemer-demo --seconds 5

test: deps lint test-rust
	@echo "make test: all tests passed"

test-rust:
	$(CARGO) test --workspace

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# Dataplane core benchmark at batch capacity 32 and 64; ends with one JSON line.
bench-core: deps
	bench/core.sh

clean:
	$(CARGO) clean
