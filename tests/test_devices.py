"""What the GPU run of benchmarks/device_check.py found, kept from coming back on a CPU-only
machine: tensors made on the CPU inside a training step (SMEC once logged CPU scalars next to
CUDA losses and failed on the GPU), the reproducibility settings a GPU needs, and the exact
search PyTorch runs on a GPU (here on the CPU device: the same code)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dive_core import numerics, retrieval
from dive_core.training import set_seed

REPO = Path(__file__).resolve().parent.parent
FACTORIES = {"tensor", "zeros", "ones", "empty", "full", "arange", "eye", "rand", "randn", "randint", "randperm",
             "linspace"}
TRAINING_CODE = sorted([*(REPO / "dive_core" / "methods").glob("*.py"), REPO / "dive_core" / "losses.py",
                        REPO / "dive_core" / "training.py", REPO / "dive_core" / "adapters.py"])
MARK = "# cpu"


def factory_calls_without_device(path: Path) -> list[str]:
    """``torch.<factory>(...)`` calls with no ``device=`` and no ``# cpu`` mark (a comment on the
    call's line or the line above saying why the CPU is meant)."""
    lines = path.read_text().splitlines()
    bad = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
                and not any(k.arg == "device" for k in node.keywords)):
            here, above = lines[node.lineno - 1], lines[node.lineno - 2] if node.lineno > 1 else ""
            if MARK not in here and not above.strip().startswith(MARK):
                bad.append(f"{path}:{node.lineno}: {here.strip()}")
    return bad


def test_training_code_makes_no_tensor_on_the_cpu_by_accident():
    bad = [b for f in TRAINING_CODE for b in factory_calls_without_device(f)]
    assert not bad, ("tensors created without device= in training code (on a GPU they stay on the CPU; "
                     "pass device=, use x.new_tensor / new_zeros, or mark the line '# cpu: why'):\n" + "\n".join(bad))


def test_the_scan_sees_an_unmarked_factory(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import torch\nx = torch.tensor(1.0)\ny = torch.zeros(3, device=z.device)\n"
                 "w = torch.eye(3)  # cpu: moved later\n")
    assert [b.split(": ", 1)[1] for b in factory_calls_without_device(f)] == ["x = torch.tensor(1.0)"]


def test_set_seed_turns_strict_determinism_on():
    set_seed(1)
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()  # refuse, do not only warn
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == numerics.DEFAULT_CUBLAS_WORKSPACE


def test_import_sets_cublas_workspace_before_any_cuda_context():
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    code = "import os, dive_core; print(os.environ.get('CUBLAS_WORKSPACE_CONFIG'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == numerics.DEFAULT_CUBLAS_WORKSPACE
    env["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"  # a user's own setting is kept
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ":16:8"


def test_torch_search_equals_faiss_and_orders_ties_by_row():
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((300, 16)).astype(np.float32)
    docs[7] = docs[3]  # exact ties: TorchCorpus puts the lower row first (FAISS: its heap's order)
    docs[250] = docs[3]
    queries = np.vstack([docs[3], rng.standard_normal((20, 16)).astype(np.float32)])
    s_t, r_t = retrieval.TorchCorpus(docs, device="cpu").search(queries, 10)
    s_f, r_f = retrieval.FlatCorpus(docs).search(queries, 10)
    assert r_t[0, :3].tolist() == [3, 7, 250]
    assert sorted(r_f[0, :3].tolist()) == [3, 7, 250]
    np.testing.assert_array_equal(r_t[0, 3:], r_f[0, 3:])
    np.testing.assert_array_equal(r_t[1:], r_f[1:])  # no ties: the same ids in the same order
    np.testing.assert_allclose(s_t, s_f, rtol=1e-5, atol=1e-5)


def test_a_gpu_search_without_any_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(retrieval, "_torch_cuda", lambda: False)
    with pytest.raises(RuntimeError, match="no GPU"):
        retrieval.search_index(np.zeros((4, 2), np.float32), use_gpu=True)
    assert isinstance(retrieval.search_index(np.zeros((4, 2), np.float32), use_gpu="auto"), retrieval.FlatCorpus)
