#!/bin/bash
# A real SGLang for x86-64 CPUs: builds the virtual environment VENV with sglang==VERSION on torch 2.13.0+cpu
# and SGLang's CPU kernel library (sglang-kernel-cpu 0.4.6.post1) compiled here from source.
# Called by `make sglang-venv`, which names every input; takes about 5.5 min on 2 cores (the kernel's C++
# build about 4 of them) and 3.5 GB of disk (triton about 1 GB: sglang imports it even on a CPU).
#
# usage: sglang_venv.sh VENV VERSION KERNEL_SRC [PYTHON]
#   KERNEL_SRC  the kernel's source: a directory or a .tar.gz holding either the kernel tree itself
#               (pyproject_cpu.toml, csrc/cpu, include, python/sgl_kernel) or a whole sgl-project/sglang
#               checkout (the tree is its python/sglang/kernels/aot, or sgl-kernel in older releases)
#   PYTHON      python3.11 by default: the only Python the torch 2.13.0+cpu wheel in /opt/wheels is built for
#
# Serving it needs SGLANG_USE_CPU_ENGINE=1 in the environment (without it sglang does not take the machine
# for a CPU) and `--device cpu --attention-backend torch_native` (without AMX, sglang would fall back from
# intel_amx to torch_native itself; `--enable-torch-compile` fails with torch_native).
set -euo pipefail
VENV=${1:?usage: sglang_venv.sh VENV VERSION KERNEL_SRC [PYTHON]}
VERSION=${2:?sglang version}
KERNEL_SRC=${3:?kernel source (directory or .tar.gz)}
PYTHON=${4:-python3.11}
HERE=$(cd "$(dirname "$0")" && pwd)
LOCK=$HERE/sglang-requirements.lock
PIP="nice -n 10 $VENV/bin/pip"
T0=$(date +%s)
step() { echo "== $(date +%T) (+$(( $(date +%s) - T0 )) s) $*"; }

[ -e "$KERNEL_SRC" ] || { echo "sglang_venv.sh: no kernel source at $KERNEL_SRC (set SGLANG_KERNEL_SRC)"; exit 2; }

step "system package libnuma-dev (the kernel's CMakeLists links libnuma)"
if [ ! -e /usr/lib/x86_64-linux-gnu/libnuma.so ] && ! dpkg -s libnuma-dev >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libnuma-dev
  else
    echo "missing system package: libnuma-dev (run as root, or: sudo apt-get install libnuma-dev)"; exit 1
  fi
fi

step "virtual environment $VENV"
"$PYTHON" -m venv "$VENV"
$PIP install -q -U pip
step "torch 2.13.0+cpu first (pip takes the CPU wheel on disk instead of a CUDA build)"
$PIP install -q "torch==2.13.0"
step "sglang's dependencies, exact, --no-deps (nothing may pull a CUDA torch)"
$PIP install -q --no-deps -r "$LOCK"
step "sglang $VERSION and torchvision 0.28.0, --no-deps"
$PIP install -q --no-deps "sglang==$VERSION" "torchvision==0.28.0"

step "torchvision op schemas"
# PyPI's torchvision is a CUDA build: its _C.so needs libtorch_cuda.so and cannot load beside torch+cpu, and
# its import then dies ("operator torchvision::nms does not exist") because _meta_registrations.py registers
# fakes for nms/qnms unconditionally. sglang imports torchvision.transforms at startup even for text models
# (sglang/srt/multimodal/internvl_utils.py). Define the two op schemas (no kernels) when _C did not load.
tv=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/torchvision/extension.py
grep -q _tv_shim_lib "$tv" || cat >> "$tv" <<'EOF'

# --- added by DayOne's docker/local/sglang_venv.sh: the CUDA-built _C.so cannot load beside torch+cpu ---
if not _has_ops():
    _tv_shim_lib = torch.library.Library("torchvision", "DEF")
    _tv_shim_lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _tv_shim_lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
EOF

step "sglang-kernel-cpu from $KERNEL_SRC"
# PyPI ships only CUDA wheels of sgl-kernel / sglang-kernel and no source; upstream builds the CPU one itself.
work=$VENV/kernel-build
rm -rf "$work" && mkdir -p "$work/src"
if [ -d "$KERNEL_SRC" ]; then cp -a "$KERNEL_SRC/." "$work/src/"; else tar xzf "$KERNEL_SRC" -C "$work/src"; fi
# the shallowest pyproject_cpu.toml: the kernel tree itself, or python/sglang/kernels/aot of a checkout
ksrc=$(find "$work/src" -maxdepth 6 -name pyproject_cpu.toml -printf '%d %h\n' | sort -n | head -1 | cut -d' ' -f2-)
[ -n "$ksrc" ] || { echo "sglang_venv.sh: no pyproject_cpu.toml in $KERNEL_SRC"; exit 2; }
cp "$ksrc/pyproject_cpu.toml" "$ksrc/pyproject.toml"
# Upstream compiles every file for AVX512-BF16 (x86-64-v4); a CPU without it dies of an illegal instruction at
# `import sgl_kernel`. There the kernel is built for this CPU instead, its AVX-512 paths left out (which, and
# why a bf16 model at tensor parallel 1 needs none of them: sglang_kernel_avx2.py).
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
if ! { grep -qw avx512f <<<"$cpu_flags" && grep -qw avx512_bf16 <<<"$cpu_flags" && grep -qw avx512_vnni <<<"$cpu_flags"; }; then
  step "this CPU has no AVX512-BF16/VNNI: the kernel built for it (-march=native: its portable paths)"
  "$PYTHON" "$HERE/sglang_kernel_avx2.py" "$ksrc/csrc/cpu/CMakeLists.txt"
fi
kt0=$(date +%s)
VIRTUAL_ENV=$VENV PATH=$VENV/bin:$PATH CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) MAX_JOBS=$(nproc) \
  $PIP wheel -q --no-build-isolation --no-deps -w "$work/wheels" "$ksrc"
echo "kernel build: $(( $(date +%s) - kt0 )) s"
$PIP install -q --no-deps --force-reinstall "$work"/wheels/sglang_kernel_cpu-*.whl
rm -rf "$work"

step "import check"
SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c "import torch, sgl_kernel, sglang
from sgl_kernel import copy_all_layer_kv_cache_cpu
from sglang.srt.utils import cpu_has_amx_support
assert sglang.__version__ == '$VERSION', sglang.__version__
print('torch', torch.__version__, 'sglang', sglang.__version__, 'amx', cpu_has_amx_support())"
step "done in $(( $(date +%s) - T0 )) s ($(du -sh "$VENV" | cut -f1))"
