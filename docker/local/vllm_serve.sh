#!/usr/bin/env bash
# A real vLLM (the CPU build from `make vllm-venv`) serving SmolLM2-135M-Instruct on 127.0.0.1, with the flags
# DayOne's adapter launches it with (tasks/engines/vllm.py launch_command) plus the hermes tool parser; what
# tests/fixtures/wire/vllm-0.32.0 was recorded from (docker/local/record_wire.py).
#   docker/local/vllm_serve.sh PORT [more vLLM flags]      (stop it with kill on its pid; it logs to stdout)
# `vllm serve` fails in this build (its CLI asks package metadata for a distribution named vllm), so the
# OpenAI server module is run directly: the same flags. --enforce-eager skips torch.compile (at /health in
# about 30 s on 2 cores); drop it with VLLM_EAGER=0. The KV cache is VLLM_CPU_KVCACHE_SPACE GiB (1 by default).
set -euo pipefail
port=${1:?usage: $0 PORT [vLLM flags]}
shift
cache=${XDG_CACHE_HOME:-$HOME/.cache}/dayone
venv=${DAYONE_VLLM_VENV:-$cache/vllm-0.32.0}
model=${DAYONE_SMOLLM2_HF:-$cache/models/SmolLM2-135M-Instruct-bf16}
eager=()
[ "${VLLM_EAGER:-1}" = 1 ] && eager=(--enforce-eager)
export VLLM_SERVER_DEV_MODE=1 VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
exec "$venv/bin/python" -m vllm.entrypoints.openai.api_server \
  --model "$model" \
  --served-model-name SmolLM2-135M-Instruct \
  --host 127.0.0.1 --port "$port" \
  --tensor-parallel-size 1 \
  --max-model-len "${VLLM_MAX_MODEL_LEN:-2048}" \
  --enable-prefix-caching \
  --enable-prompt-tokens-details \
  --tool-call-parser hermes --enable-auto-tool-choice \
  "${eager[@]}" "$@"
