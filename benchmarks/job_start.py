"""What a job pays before its work: the start of a fresh Python process, by step. A smoke run's
fits (`make smoke`, tests/test_workflow.py) take well under a second each, so its jobs' few seconds
each are mostly this. Run from the repository root on an otherwise idle machine:

    .venv/bin/python benchmarks/job_start.py [--repeats 5]

Each step runs in ``--repeats`` fresh processes, the steps interleaved; its figure is the median wall
time of the whole process in seconds (interpreter start included):

- ``python``: the interpreter alone;
- ``import torch``;
- ``torch + AdamW``: torch imported and an AdamW optimizer made and stepped once, what every
  gradient-trained method's job does (PyTorch's optimizer imports TorchDynamo on its first call,
  for ``torch._disable_dynamo``);
- ``sentence-transformers``: ``import sentence_transformers`` (transformers, datasets, scikit-learn
  with it), what embedding, export and CSR's jobs (its ``SparseAutoEncoder``) import;
- ``train imports``: the imports of ``workflow_scripts/train.py`` (dive_core's modules).

The last line is one JSON object. Compare figures only within one run on one machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

STEPS = {
    "python": "pass",
    "import torch": "import torch",
    "torch + AdamW": ("import torch; p = torch.nn.Parameter(torch.zeros(4)); o = torch.optim.AdamW([p]); "
                      "p.grad = torch.ones(4); o.step()"),
    "sentence-transformers": "import sentence_transformers",
    "train imports": ("import dive_core; from dive_core import provenance, records, runlog, splits; "
                      "from dive_core.embeddings import read_embeddings; from dive_core.methods import new_method; "
                      "from dive_core.training import TrainLog, fit_data"),
}


def once(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from dive_core import provenance

    print(f"cpu: {provenance.cpu_model()}  simd: {' '.join(provenance.cpu_flags())}", flush=True)
    times: dict[str, list[float]] = {name: [] for name in STEPS}
    for _ in range(a.repeats):
        for name, code in STEPS.items():
            times[name].append(once(code))
    result = {"cpu": provenance.cpu_model(), "repeats": a.repeats,
              "median_s": {name: round(statistics.median(t), 3) for name, t in times.items()}}
    for name, s in result["median_s"].items():
        print(f"{name:24s} {s:7.3f} s", flush=True)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
