# nearfaas — `make demo` and `make test` are the whole quick start.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# aws-cli v1, which the S3 conformance tests drive (tests/integration/test_s3_awscli.py), in a venv
# of its own: it pins its own botocore, older than the runtime's.
AWSCLI_VENV ?= .venv-awscli
AWSCLI_VERSION := 1.45.11
PYTHON ?= python3
# Debian packages the project uses (installed by `make setup` when run as root):
#   faketime — libfaketime, to start a gateway with its clock behind (tests/integration/test_gateway_restart.py)
#   wrk — the C load generator of benchmarks/invoke_overhead.py
#   clang, lld, wasi-libc, libclang-rt-14-dev-wasm32 — compile the fast path's C lambdas to WebAssembly
#   memcached — the key-value store the fast path's memcached lambda talks to (tests, benchmarks)
#   stress-ng — the micro-operations `nearfaas econ rpwu` normalises (econ/rpwu.py)
#   fuse3 — libfuse3 and fusermount3 for the link file system of `nearfaas econ mbwu` (link/linkfs.py)
#   crun, runc, umoci, skopeo — run image-only functions (node/oci/, docs/images.md): crun is tried
#     first, runc where crun cannot run (Debian 12's crun refuses hybrid cgroup hosts); umoci unpacks,
#     skopeo imports archives and registry images; busybox-static builds the tests' small images;
#     docker-registry is the local registry the image tests push to and pull from
DEB_PACKAGES := faketime haproxy wrk clang lld wasi-libc libclang-rt-14-dev-wasm32 memcached stress-ng fuse3 crun runc umoci skopeo busybox-static docker-registry libseccomp2
# The fast path's Rust build lives outside the clone, so a fresh clone (CI) reuses it: a clean
# wasmtime build takes about 5 minutes on 2 cores, an up-to-date check about a second.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/nearfaas/cargo-target
# rustup installs into ~/.cargo/bin, which a non-login shell (CI) may not have on its PATH.
CARGO ?= $(shell command -v cargo 2>/dev/null || ls $(HOME)/.cargo/bin/cargo 2>/dev/null)

.PHONY: setup debs fastpath memshim faas-cli demo test test-fast golden bench bench-smoke lint clean

setup: $(VENV)/.installed $(AWSCLI_VENV)/.installed debs fastpath memshim faas-cli

debs:
	@if [ "$$(id -u)" = 0 ] && ! dpkg -s $(DEB_PACKAGES) >/dev/null 2>&1; then \
	  echo "installing Debian packages: $(DEB_PACKAGES)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEB_PACKAGES) >/dev/null) \
	    || echo "warning: could not install $(DEB_PACKAGES); the fast path may not build, benchmarks fall back to a Python load generator"; \
	fi

# The fast path (docs/fastpath.md): the Rust executor and the C lambdas. Without cargo or clang
# the cluster runs without it (fastpath.enabled: auto) and its tests say why they skip.
fastpath: debs
	@if [ -n "$(CARGO)" ]; then \
	  echo "building the fast path ($(CARGO), CARGO_TARGET_DIR=$(CARGO_TARGET_DIR))"; \
	  PATH="$$(dirname $(CARGO)):$$PATH" $(CARGO) build --release -q --manifest-path fastpath/Cargo.toml && $(MAKE) -s -C fastpath/lambdas; \
	else echo "warning: cargo not found: the fast path is not built (install Rust >= 1.95)"; fi

# The memory shim, the tier simulator's calibration benchmark and the native graph kernels
# (docs/memory.md), and the burst sender of `nearfaas econ headroom` (docs/econ.md): C, seconds to build.
memshim:
	@if command -v $${CC:-cc} >/dev/null; then $(MAKE) -s -C native/memshim && $(MAKE) -s -C native/membench && $(MAKE) -s -C native/headroom \
	  && $(MAKE) -s -C native/graphs; \
	else echo "warning: no C compiler: the memory shim is not built (its tests say why they skip)"; fi

# OpenFaaS's own client, which the integration tests drive (tests/integration/test_faas_cli.py): a
# static build of openfaas/faas-cli (MIT) from the shared tools folder, unpacked into the venv.
FAAS_CLI_XZ ?= ../shared/tools/faas-cli.xz
faas-cli: $(VENV)/.installed
	@if [ -f "$(FAAS_CLI_XZ)" ]; then \
	  if [ ! -x $(VENV)/bin/faas-cli ] || [ "$(FAAS_CLI_XZ)" -nt $(VENV)/bin/faas-cli ]; then \
	    xz -dc "$(FAAS_CLI_XZ)" > $(VENV)/bin/faas-cli.tmp && chmod +x $(VENV)/bin/faas-cli.tmp && mv $(VENV)/bin/faas-cli.tmp $(VENV)/bin/faas-cli; fi; \
	else echo "warning: $(FAAS_CLI_XZ) not found: the faas-cli tests skip (they say why)"; fi

# Installing into a fresh venv: uv (from PyPI, into the venv itself) installs the same versions as
# pip (compared with `pip freeze`), both venvs in about 25 s instead of pip's 56 s on 2 cores, from a
# cache outside the clone (~/.cache/uv). It compiles the bytecode as pip does: jailed functions run
# as another user and cannot write __pycache__ into the venv, so without it every cold start would
# compile numpy and the rest again. It is given pip's index, find-links and certificate settings; if
# it cannot install, pip does, as before. Usage: $(call pip_install,<venv python>,<requirements>)
define pip_install
	@$(1) -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1 \
	  && UV_NATIVE_TLS=1 UV_INDEX_URL="$${PIP_INDEX_URL:-https://pypi.org/simple}" UV_EXTRA_INDEX_URL="$${PIP_EXTRA_INDEX_URL:-}" \
	     UV_FIND_LINKS="$${PIP_FIND_LINKS:-}" UV_HTTP_TIMEOUT=60 timeout 600 $$(dirname $(1))/uv pip install -q --compile-bytecode --python $(1) $(2) \
	  || { echo "uv could not install $(2); installing with pip"; $(1) -m pip install -q --disable-pip-version-check $(2); }
endef

# aws-cli v1 in a venv of its own (see AWSCLI_VENV above).
$(AWSCLI_VENV)/.installed: Makefile
	@test -x $(AWSCLI_VENV)/bin/python || $(PYTHON) -m venv $(AWSCLI_VENV)
	$(call pip_install,$(AWSCLI_VENV)/bin/python,awscli==$(AWSCLI_VERSION))
	@touch $@

# Re-install only when the dependency pins change.
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(call pip_install,$(PY),-e '.[dev]')
	@touch $@

demo: setup
	$(VENV)/bin/nearfaas demo

# The fast path's cargo tests run beside pytest (about a minute, most of it waiting on sockets),
# their output printed when both are done; pytest runs on two workers, a module's tests on one
# (tests/conftest.py, docs/testing.md), and prints its slowest tests, for keeping CI under 12 minutes.
test: setup
	@cargo_log=$$(mktemp /tmp/nearfaas-cargo-test.XXXXXX); cargo_pid=; \
	if [ -n "$(CARGO)" ]; then \
	  (PATH="$$(dirname $(CARGO)):$$PATH" $(CARGO) test --release -q --manifest-path fastpath/Cargo.toml > $$cargo_log 2>&1) & cargo_pid=$$!; \
	  echo "cargo test (fast path) running beside pytest; its output follows pytest's"; \
	fi; \
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --durations=25; py_rc=$$?; \
	cargo_rc=0; if [ -n "$$cargo_pid" ]; then wait $$cargo_pid; cargo_rc=$$?; echo "--- cargo test (fast path), exit $$cargo_rc"; cat $$cargo_log; fi; \
	rm -f $$cargo_log; [ $$py_rc = 0 ] && [ $$cargo_rc = 0 ]

test-fast: setup
	$(PY) -m pytest -q -p no:cacheprovider -m "not integration"

# The twin's golden tables (tests/golden/twin/): the tests only compare with them; after a change
# to the twin that is meant to move its numbers, regenerate them here and review the diff.
golden: setup
	$(PY) tests/golden/regenerate.py

bench: setup
	$(PY) benchmarks/invoke_overhead.py
	$(PY) benchmarks/object_io.py
	$(PY) benchmarks/cold_start.py
	$(PY) benchmarks/placement.py
	$(PY) benchmarks/fastpath.py
	$(PY) benchmarks/stream_topk.py
	$(PY) benchmarks/dataservices.py
	$(PY) benchmarks/porter.py

# Every benchmark at its smallest (a few minutes in all), writing to a scratch folder instead of
# benchmarks/results/: checks that they still run without replacing the committed numbers.
bench-smoke: setup
	@out=$$(mktemp -d /tmp/nearfaas-bench-smoke.XXXXXX); export NEARFAAS_BENCH_RESULTS=$$out; set -ex; \
	$(PY) benchmarks/invoke_overhead.py --duration 1 --repeats 1 --cold 1; \
	$(PY) benchmarks/object_io.py --repeats 1; \
	$(PY) benchmarks/cold_start.py --rounds 1 --per-round 1; \
	$(PY) benchmarks/placement.py --quick; \
	$(PY) benchmarks/fastpath.py --quick; \
	$(PY) benchmarks/consistency.py --quick; \
	$(PY) benchmarks/idle_connections.py --quick; \
	$(PY) benchmarks/twin.py --quick --no-report; \
	$(PY) benchmarks/apps.py --quick --apps credit_risk --out $$out/apps.json; \
	$(PY) benchmarks/stream_topk.py --quick; \
	$(PY) benchmarks/dataservices.py --quick --queries 20 --max-rows 100000 --samples 60; \
	$(PY) benchmarks/porter.py --quick --repeats 1 --no-cachegrind; \
	echo "results in $$out"

lint: setup
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m pytest -q -p no:cacheprovider tests/unit/test_layers.py  # imports point only down

clean:
	rm -rf .nearfaas .nearfaas-demo twin-report build dist src/*.egg-info native/memshim/build native/membench/build native/graphs/build
