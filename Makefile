# Two commands set everything up on a fresh machine: `make demo` and `make test`.
# VENV can point at a shared environment (helpers use VENV=/work/venv with `make check`).
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
APT_PACKAGES := espeak-ng sox chromium

.PHONY: test demo check venv deps-test apt lint typecheck pytest bench clean

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

venv: $(PY)

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing Debian packages:$$missing"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; fi

deps-test: venv apt
	$(PIP) install -q -e '.[test,local]'
	$(PY) -m brisvox models fetch

test: deps-test check

check: lint typecheck pytest

lint:
	$(PY) -m ruff check src tests bench

typecheck:
	$(PY) -m mypy

pytest:
	$(PY) -m pytest

demo: venv apt
	$(PIP) install -q -e '.[local]'
	$(PY) -m brisvox models fetch
	$(PY) -m brisvox demo

bench: venv
	$(PIP) install -q -e '.[bench,local]'
	$(PY) -m brisvox models fetch
	$(PY) bench/core_hops.py
	$(PY) bench/inference.py
	$(PY) bench/cloud_llm_stream.py
	$(PY) bench/turn_machine.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
