"""Let SGLang's CPU kernel build on an x86-64 CPU without AVX512-BF16 (sglang_venv.sh runs it where /proc/cpuinfo
lacks avx512f, avx512_bf16 or avx512_vnni).

The kernel's CMakeLists compiles every file for x86-64-v4 with AVX512-BF16, VNNI and AMX, so on an AVX2-only CPU
(an AMD EPYC VM, say) `import sgl_kernel` dies of an illegal instruction. Built with `-march=native` instead,
vec.h leaves CPU_CAPABILITY_AVX512 undefined and every kernel takes its at::vec path (AVX2 here), as on Arm64;
the AVX-512-only ones (int8/int4 GEMMs, MoE, the fused QKV projection) fail with their own "not implemented"
if called, which a bf16 text model does not. shm.cpp, the shared-memory all-reduce of tensor parallelism, has
x86 code for AVX-512 only: it keeps flags of its own and is not called at tensor parallel 1.

usage: python sglang_kernel_avx2.py CMAKELISTS
"""

import sys
from pathlib import Path

path = Path(sys.argv[1])
text = path.read_text()
flags = """        -march=x86-64-v4
        -mavx512bf16
        -mavx512vnni
        -mamx-tile
        -mamx-bf16
        -mamx-int8
"""
if flags not in text:
    sys.exit(f"sglang_kernel_avx2.py: {path} has changed (no x86-64-v4 flags block where expected): the build for a "
             "CPU without AVX-512 needs updating for this kernel source")
text = text.replace(flags, "        -march=native\n")
text += ('\n# DayOne: the x86 shared-memory all-reduce has AVX-512 code only (tensor parallel > 1, never called at 1)\n'
         'set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/shm.cpp PROPERTIES COMPILE_OPTIONS '
         '"-mavx512f;-mavx512bw;-mavx512vl;-mf16c")\n')
path.write_text(text)
print(f"{path}: built for this CPU (-march=native); shm.cpp alone keeps AVX-512")
