"""Reproducible floating point on the CPU: the same inputs, seed, thread count and machine give
the same bytes in every process.

PyTorch's CPU wheel sends fp32 matrix products to Intel MKL (linked into ``libtorch_cpu.so``). In
its default mode MKL may pick a different kernel from one process to the next (it depends on the
alignment of the operands and on the dispatch of the moment), so the same training gave other
weights in a new process on an Intel Xeon (AVX-512). MKL's *conditional numerical
reproducibility* (CNR) fixes the code path. :func:`configure` selects it:

- ``AUTO,STRICT`` (the default, :data:`DEFAULT_MKL_CBWR`): the best branch of this CPU, with
  deterministic reductions and static scheduling; ``STRICT`` makes gemm bit-exact even on
  unaligned operands. Measured cost: none within noise on the matrix product and the DIVE step
  (``benchmarks/reproducibility.py``; docs/performance.md). Bytes are the same across processes
  on one machine, not across CPU kinds.
- ``COMPATIBLE``: one SSE2 branch on every x86 CPU (Intel and AMD). About 2.2x slower matrix
  products on an AMD EPYC and 4.4x on a Sapphire Rapids, 1.9x slower DIVE steps; and it fixes only
  MKL: PyTorch's own kernels still follow the CPU's instruction set (``ATEN_CPU_CAPABILITY``)
  and FAISS's OpenBLAS its core type, so it alone does not make two CPU kinds agree.
- Branch names other than AUTO and COMPATIBLE (``AVX2``, ``AVX512``) are Intel-only: on an AMD CPU
  MKL silently runs ``AUTO`` instead (read back with :func:`mkl_mode`).

A user's own ``MKL_CBWR`` is kept (and recorded). MKL reads the variable once, when
``libtorch_cpu.so`` is loaded, so it must be in the environment before the first ``import torch``:
``import dive_core`` (which every workflow script, ``dive-compress`` and the benchmarks go through;
an exported sentence-transformers model runs no code of this package) sets it. Where torch was imported first, the mode is set through MKL's own
``mkl_cbwr_set``, which works until MKL's first computation; after that the mode cannot change,
and a warning says which mode the process runs in.

MKL's vector math (VML), which PyTorch's CPU kernels of ``exp``, ``log``, ``sqrt``, ``tanh``,
``erf`` and a few more call from every thread of a parallel region, chooses its kernels at its
first call in a process. When that first call comes from two threads at once, one thread may
compute its share of that one call with another kernel: other bytes, whatever ``MKL_CBWR`` says
(measured on an Intel Xeon with 2 threads: a DIVE training's first ``logsumexp`` gave other bytes,
and so other weights, in 4 of 351 fresh processes; ``tests/vml_probe.py`` shows the race alone).
:func:`warm_vector_math` makes that first call on one element, on one thread; :func:`deterministic`
(every training), :func:`dive_core.runlog.set_threads` (every job given threads) and
``dive-compress`` call it.

OpenBLAS (numpy's and faiss-cpu's) and oneDNN need nothing: their kernels are chosen once per
process from the CPU and the thread count (oneDNN: "run-to-run deterministic for a fixed
environment"), which ``benchmarks/reproducibility.py`` checks across processes too.

On a GPU, cuBLAS is reproducible only with a fixed workspace: :func:`configure` also sets
``CUBLAS_WORKSPACE_CONFIG`` (:data:`DEFAULT_CUBLAS_WORKSPACE`, unless the user set it) before any
CUDA context exists, and :func:`deterministic` turns on PyTorch's deterministic kernels (every
training calls it through ``dive_core.training.set_seed``). Measured on an H100: the same DIVE
training twice, and in separate processes, gives the same weights (docs/performance.md, GPU).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import warnings

DEFAULT_MKL_CBWR = "AUTO,STRICT"
DEFAULT_CUBLAS_WORKSPACE = ":4096:8"  # cuBLAS's documented reproducible setting (8 buffers of 4 MiB)
# MKL's named constants (mkl_cbwr.h)
_STRICT = 0x10000
_BRANCHES = {0: "OFF", 1: "BRANCH_OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1",
             8: "SSE4_2", 9: "AVX", 10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1",
             14: "AVX512_E1"}
_CODES = {v: k for k, v in _BRANCHES.items()}
_ALL = -1  # MKL_CBWR_ALL (~0)


def parse_mode(text: str) -> int:
    """MKL's code of a ``MKL_CBWR`` value such as ``AUTO,STRICT`` or ``BRANCH=COMPATIBLE``."""
    code = 0
    for part in (p.strip().upper() for p in text.split(",") if p.strip()):
        part = part.removeprefix("BRANCH=")
        if part == "STRICT":
            code |= _STRICT
        elif part in _CODES and part not in ("OFF", "BRANCH_OFF"):
            code |= _CODES[part]
        else:
            raise ValueError(f"MKL_CBWR={text!r}: unknown part {part!r} (expected AUTO or COMPATIBLE, an "
                             f"Intel branch such as AVX2, and optionally ,STRICT)")
    if code & 0xFFFF == 0:
        raise ValueError(f"MKL_CBWR={text!r}: no branch (expected e.g. {DEFAULT_MKL_CBWR})")
    return code


def format_mode(code: int) -> str:
    """``MKL_CBWR`` text of MKL's code (``BRANCH_OFF``: CNR not enabled, MKL's default)."""
    name = _BRANCHES.get(code & 0xFFFF, f"UNKNOWN({code & 0xFFFF})")
    return f"{name},STRICT" if code & _STRICT else name


def _mkl():
    """libtorch_cpu's MKL service functions, or None (torch not imported, or no MKL in this build)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        get, put, auto = lib.mkl_serv_cbwr_get, lib.mkl_serv_cbwr_set, lib.mkl_serv_cbwr_get_auto_branch
    except (OSError, AttributeError):
        return None
    get.argtypes, get.restype = [ctypes.c_int], ctypes.c_int
    put.argtypes, put.restype = [ctypes.c_int], ctypes.c_int
    auto.argtypes, auto.restype = [], ctypes.c_int
    return get, put, auto


def wanted_mode() -> str:
    """The mode this process asks for: the user's ``MKL_CBWR`` if set, else :data:`DEFAULT_MKL_CBWR`."""
    return os.environ.get("MKL_CBWR") or DEFAULT_MKL_CBWR


def configure() -> None:
    """Make MKL reproducible in this process and in every process it starts (idempotent).

    Before torch is imported: sets ``MKL_CBWR`` (unless the user did) and ``MKL_DYNAMIC=FALSE``
    (MKL's own reproducibility condition: no run-time change of its thread count). After: sets the
    same mode through MKL, or warns when MKL has computed already and the mode is another."""
    mode = wanted_mode()
    code = parse_mode(mode)  # a wrong user value fails here, naming the variable
    os.environ["MKL_CBWR"] = mode
    os.environ.setdefault("MKL_DYNAMIC", "FALSE")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", DEFAULT_CUBLAS_WORKSPACE)  # read by cuBLAS at its first handle
    mkl = _mkl()
    if mkl is None:
        return
    get, put, _ = mkl
    if get(_ALL) == code:
        return
    if put(code) != 0:  # MKL_CBWR_SUCCESS
        warnings.warn(f"MKL numerical reproducibility could not be set to {mode}: MKL has run already in this "
                      f"process, in mode {format_mode(get(_ALL))}. Import dive_core before torch (or set "
                      f"MKL_CBWR={mode} in the environment) for the same bytes in every process.",
                      RuntimeWarning, stacklevel=2)


def deterministic() -> None:
    """PyTorch's deterministic kernels, strictly: an operation with no deterministic CUDA kernel
    raises (naming itself) instead of warning, so a GPU result is either reproducible or refused.
    On the CPU the kernels the methods use are deterministic once MKL's vector math has made its
    first call (:func:`warm_vector_math`, called here).

    The flag is set as ``torch.use_deterministic_algorithms(True)`` sets it, less its import of
    ``torch._inductor.config``: that import loads TorchInductor's package and, through it,
    TorchDynamo (1.4 s of every training job's start, for a setting of compiled code only). Inductor's
    own ``deterministic`` flag is set where Inductor is already loaded, and by
    :func:`inductor_deterministic` before a compilation (``dive_core.training.compiled_loss``)."""
    import torch

    warm_vector_math()
    torch._C._set_deterministic_algorithms(True, warn_only=False)  # CUBLAS_WORKSPACE_CONFIG: set by configure()
    torch.backends.cudnn.benchmark = False
    if "torch._inductor.config" in sys.modules:
        inductor_deterministic()


def inductor_deterministic() -> None:
    """TorchInductor's ``deterministic`` setting made equal to PyTorch's deterministic flag (what
    ``torch.use_deterministic_algorithms`` does beside setting the flag); imports Inductor."""
    import torch
    import torch._inductor.config as inductor_config

    inductor_config.deterministic = torch.are_deterministic_algorithms_enabled()


@contextlib.contextmanager
def one_thread():
    """Run the block on one torch thread, then restore the count (only the CPU's threads).

    LAPACK's decompositions give other bytes at another thread count: the eigenvectors of SciFact's
    384 x 384 MiniLM covariance differ between 1 and 2 threads, and so would PCA's axes and every
    map that starts from them (``pca``, ``dive-pca``), though a job's thread count is a cost setting.
    So ``methods.pca.principal_axes`` runs its eigendecomposition and SVD in this block. Cost: 0.15 s
    at 768d, 19.5 s instead of 9.9 s at 4096d (2 cores of an AMD EPYC). ``qside-procrustes``'s SVD
    needs none: its factors differ too, but their product, the rotation, differs by about 1e-16 in
    float64 and is the same once cast to the float32 it is stored in (measured, 64 x 64)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


_vector_math_warm = False


def warm_vector_math() -> None:
    """MKL's vector math makes its first call in this process here, on one element and one thread,
    so that no parallel region makes it from two threads at once (which can give one thread's share
    of that call other bytes; see the module's docstring). Idempotent; imports torch."""
    global _vector_math_warm
    if _vector_math_warm:
        return
    import torch

    with torch.no_grad():
        for dtype in (torch.float32, torch.float64):
            one = torch.full((1,), 0.5, dtype=dtype)
            torch.log(torch.exp(one))  # at::vml -> vmsExp, vmsLn (vmdExp, vmdLn)
    _vector_math_warm = True


def cuda_mode() -> dict:
    """What decides reproducibility on a GPU, as this process runs: PyTorch's deterministic flag,
    cuBLAS's workspace, TF32 in matrix products."""
    import torch

    return {"deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
            "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


def mkl_mode() -> dict | None:
    """The mode MKL runs in, read from MKL itself, e.g. ``{"mkl_cbwr": "AUTO,STRICT", "auto_branch":
    "AVX512"}`` (``mkl_cbwr``: ``BRANCH_OFF`` = MKL's default, not reproducible; ``auto_branch``: the
    branch AUTO stands for on this CPU; MKL reports ``AUTO`` for it on non-Intel CPUs), or None
    without torch's MKL."""
    mkl = _mkl()
    if mkl is None:
        return None
    get, _, auto = mkl
    return {"mkl_cbwr": format_mode(get(_ALL)), "auto_branch": format_mode(auto())}
