# Two commands set everything up on a fresh machine: `make demo` and `make test`.
# VENV can point at a shared environment (helpers use VENV=/work/venv with `make check`).
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
APT_PACKAGES := espeak-ng sox chromium haproxy nginx redis-server coturn

.PHONY: test demo check venv deps-test apt lint typecheck pytest bench clean rtvi-proto

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

venv: $(PY)

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing Debian packages:$$missing"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; fi

RTVI_JS := tests/transport/rtvi/js
CLIENT_TS := clients/ts

deps-test: venv apt
	$(PIP) install -q -e '.[test,local]'
	$(PY) -m brisvox models fetch
	@# Pipecat's own JavaScript client for the RTVI tests (pinned by package-lock.json); without node they skip
	@if command -v npm >/dev/null 2>&1; then (cd $(RTVI_JS) && npm ci --no-audit --no-fund --silent) \
	  || echo "npm ci failed: the RTVI JavaScript client tests will skip, saying why"; \
	  else echo "node/npm not found: the RTVI JavaScript client tests will skip"; fi
	@# The TypeScript agent client (pinned by its package-lock.json; npm ci compiles it); without node its tests skip
	@if command -v npm >/dev/null 2>&1; then (cd $(CLIENT_TS) && npm ci --no-audit --no-fund --silent) \
	  || echo "npm ci failed: the TypeScript client tests will skip, saying why"; \
	  else echo "node/npm not found: the TypeScript client tests will skip"; fi

test: deps-test check

check: lint typecheck pytest

lint:
	$(PY) -m ruff check src tests bench

typecheck:
	$(PY) -m mypy

pytest:
	$(PY) -m pytest

# The demo agent's [llm] is provider = "auto": a key in the environment picks OpenAI or Anthropic,
# so the demo installs the cloud extra (httpx) with the local models, and the webrtc extra (aiortc
# wheels): the demo page calls over WebRTC by default.  The local LLM (extra
# local-llm: xllamacpp's prebuilt llama.cpp wheel, nothing to compile) and its 491 MB GGUF come
# too; BRISVOX_DEMO_LLM=scripted skips both, and a failed fetch leaves the scripted host.
demo: venv apt
	@echo "installing brisvox and its local models' libraries"
	@if [ "$$BRISVOX_DEMO_LLM" = "scripted" ]; then $(PIP) install -q -e '.[local,cloud,webrtc]'; \
	  else $(PIP) install -q -e '.[local,cloud,webrtc,local-llm]'; fi
	@echo "fetching the models (pinned by sha256)"
	$(PY) -m brisvox models fetch
	@if [ "$$BRISVOX_DEMO_LLM" != "scripted" ]; then \
	  echo "fetching the local LLM's model (491 MB, once)"; \
	  $(PY) -m brisvox models fetch qwen2_5_coder_0_5b_q4 || echo "the local LLM's model was not fetched; the demo runs the scripted host"; \
	fi
	$(PY) -m brisvox demo

bench: venv
	$(PIP) install -q -e '.[bench,local]'
	$(PY) -m brisvox models fetch
	$(PY) bench/core_hops.py
	$(PY) bench/inference.py
	$(PY) bench/cloud_llm_stream.py
	$(PY) bench/turn_machine.py

# Regenerates the RTVI wire module from its .proto (tests/transport/rtvi/test_wire.py checks it is current).
rtvi-proto:
	cd src/brisvox/transport/rtvi && $(abspath $(PY)) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. frames.proto

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
