#!/bin/bash
# Serve a model with the real SGLang of `make sglang-venv` on this machine's CPU, in the foreground, with the
# flags DayOne's adapter launches SGLang with (tasks/engines/sglang.py launch_command: --served-model-name,
# --context-length, --enable-metrics, --enable-cache-report; SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0 from
# launch_env) and the CPU ones (SGLANG_USE_CPU_ENGINE=1, --device cpu, --attention-backend torch_native), and
# a modest KV pool. The wire fixtures of tests/fixtures/wire/sglang-0.5.18 were recorded from it
# (docker/local/sglang_record_wire.py).
#
# usage: sglang_serve.sh MODEL_DIR PORT [EXTRA SGLANG ARGS...]
#   e.g. sglang_serve.sh ~/.cache/dayone/models/SmolLM2-135M-Instruct-bf16 30123 \
#          --reasoning-parser qwen3 --tool-call-parser qwen25
# Environment: DAYONE_SGLANG_VENV (the Makefile exports it), SERVED_NAME (default SmolLM2-135M-Instruct),
# CONTEXT (default 8192, the model's own), KV_TOKENS (default 16384).
set -euo pipefail
MODEL=${1:?usage: sglang_serve.sh MODEL_DIR PORT [ARGS...]}
PORT=${2:?port}
shift 2
VENV=${DAYONE_SGLANG_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/dayone/sglang-0.5.18}
[ -f "$VENV/.installed" ] || { echo "no SGLang environment at $VENV: run make sglang-venv"; exit 2; }
export SGLANG_USE_CPU_ENGINE=1  # what makes sglang.srt.utils.is_cpu() true
export SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0
export HF_HUB_OFFLINE=1
exec "$VENV/bin/python" -m sglang.launch_server \
  --model-path "$MODEL" --served-model-name "${SERVED_NAME:-SmolLM2-135M-Instruct}" \
  --host 127.0.0.1 --port "$PORT" --tp-size 1 --context-length "${CONTEXT:-8192}" \
  --enable-metrics --enable-cache-report \
  --device cpu --attention-backend torch_native --max-total-tokens "${KV_TOKENS:-16384}" "$@"
