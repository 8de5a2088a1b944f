# nearfaas — `make demo` and `make test` are the whole quick start.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
# Debian packages the project uses (installed by `make setup` when run as root):
#   wrk — the C load generator of benchmarks/invoke_overhead.py
DEB_PACKAGES := wrk

.PHONY: setup demo test test-fast bench lint clean

setup: $(VENV)/.installed
	@if [ "$$(id -u)" = 0 ] && ! dpkg -s $(DEB_PACKAGES) >/dev/null 2>&1; then \
	  echo "installing Debian packages: $(DEB_PACKAGES)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEB_PACKAGES) >/dev/null) \
	    || echo "warning: could not install $(DEB_PACKAGES); benchmarks fall back to a Python load generator"; \
	fi

# Re-run pip only when the dependency pins change.
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

demo: setup
	$(VENV)/bin/nearfaas demo

test: setup
	$(PY) -m pytest -q -p no:cacheprovider

test-fast: setup
	$(PY) -m pytest -q -p no:cacheprovider -m "not integration"

bench: setup
	$(PY) benchmarks/invoke_overhead.py
	$(PY) benchmarks/object_io.py
	$(PY) benchmarks/cold_start.py
	$(PY) benchmarks/placement.py

lint: setup
	$(PY) -m ruff check src tests benchmarks

clean:
	rm -rf .nearfaas .nearfaas-demo twin-report build dist src/*.egg-info
