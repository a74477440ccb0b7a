"""What a job pays before its work: the start of a fresh Python process, by step and by kind of job.
A smoke run's fits (`make smoke`, tests/test_workflow.py) take well under a second each, so its jobs'
few seconds each are mostly this. Run from the repository root on an otherwise idle machine:

    .venv/bin/python benchmarks/job_start.py [--repeats 5] [--against OLD_CHECKOUT]

Each measurement runs in ``--repeats`` fresh processes, all of them interleaved; its figure is the
median wall time of the whole process in seconds (interpreter start included).

Steps (the packages alone):

- ``python``: the interpreter alone;
- ``import torch``;
- ``torch + AdamW``: torch imported and ``torch.optim.AdamW`` made and stepped once (PyTorch's
  optimizer imports TorchDynamo on its first call, for ``torch._disable_dynamo``);
- ``sentence-transformers``: ``import sentence_transformers`` (transformers, datasets, scikit-learn
  with it), what embedding, export and CSR's jobs import.

Kinds of job (:data:`KINDS`), in this checkout and, with ``--against``, in another one (an older
commit checked out beside it, its own dive_core and workflow scripts, the same venv): the
top-level imports of the kind's ``workflow_scripts/<kind>.py`` as that checkout has them, its
``runlog.setup`` with the job's threads, then what its work does first: a training's seed (the
deterministic kernels) and first AdamW step on a model of the method, the first FAISS search of an
evaluation or frontier job, a table's pyplot, an embedding or export job's sentence-transformers.
That is a job's start up to its first batch or first search. Each process runs its code from a file,
as Snakemake runs a script, and, unless ``--no-server``, with a job server of this checkout running
(dive_core.job_server, as a local run has one): a kind whose script hands its job over to it
(``job_server.delegate(...)``) then starts as a fork of a warm zygote (an embedding's or export's with
sentence-transformers imported); each zygote's own start, once per run, is made before the timing.

The last line is one JSON object. Compare figures only within one run on one machine.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

STEPS = {
    "python": "pass",
    "import torch": "import torch",
    "torch + AdamW": ("import torch; p = torch.nn.Parameter(torch.zeros(4)); o = torch.optim.AdamW([p]); "
                      "p.grad = torch.ones(4); o.step()"),
    "sentence-transformers": "import sentence_transformers",
}

_TRAIN_FIRST = ("import torch\nfrom dive_core.methods import new_method\nfrom dive_core.training import adamw\n"
                "m = new_method('pca', 8, 4, {}, 2027, 'cpu', 'fp32')\n"  # new_method seeds: deterministic kernels
                "p = torch.nn.Parameter(torch.zeros(8, 4)); o = adamw([p], 1e-3, 0.01)\n"
                "(p * p).sum().backward(); o.step()\n")
_SEARCH_FIRST = ("import numpy as np\nfrom dive_core.retrieval import search\n"
                 "x = np.eye(4, dtype=np.float32)\nsearch(x, list('abcd'), x, list('abcd'), top_k=2)\n")
#: kind of job -> (its script, its threads, what its work does first)
KINDS = {
    "train": ("train.py", 2, _TRAIN_FIRST),
    "evaluate": ("evaluate.py", 2, _SEARCH_FIRST + "import pytrec_eval\n"),
    "select": ("select.py", None, ""),
    "table": ("table.py", None, "from dive_core.studies.shared import pyplot\npyplot()\n"),
    "frontier": ("frontier.py", 2, _SEARCH_FIRST),
    "embed": ("embed.py", 2, "import sentence_transformers\n"),
    "export": ("export.py", None, "import sentence_transformers\n"),
    "triplets": ("triplets.py", 2, ""),
}


def kind_code(checkout: Path, kind: str) -> str:
    """The Python a job of ``kind`` runs before its work in ``checkout``: its script's top-level
    imports and its hand-over to the job server where it has one (``job_server.delegate()``), read
    from that checkout, runlog.setup with its threads, its first step."""
    script, threads, first = KINDS[kind]
    tree = ast.parse((checkout / "workflow_scripts" / script).read_text(encoding="utf-8"))
    lines = [ast.unparse(n) for n in tree.body if (isinstance(n, (ast.Import, ast.ImportFrom))
             or ast.unparse(n).startswith("job_server.delegate(")) and "_dive_path" not in ast.unparse(n)]
    return "\n".join([f"import sys\nsys.path.insert(0, {str(checkout)!r})", _JOB, *lines,
                      "from dive_core import runlog", f"runlog.setup(None, {threads})", first])


# what a hand-over reads of the job (its rule's params): a MiniLM embedding, a method that is not CSR
_JOB = ("from types import SimpleNamespace\nsnakemake = SimpleNamespace(params=SimpleNamespace(type='pca', "
        "spec={'family': 'sentence_transformers'}), input={})")


def once(code: str, cwd: Path) -> float:
    """Wall seconds of ``python FILE`` running ``code`` as Snakemake runs a script: from a file whose
    preamble sets ``__real_file__`` (what job_server.delegate hands over)."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", dir=cwd, delete=False) as f:
        f.write("__real_file__ = __file__\n" + code + "\n")
    try:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, f.name], cwd=cwd, check=True, capture_output=True)
        return time.perf_counter() - t0
    finally:
        os.unlink(f.name)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--against", type=Path, default=None,
                    help="another checkout (e.g. an older commit) whose kinds of job are timed beside this one's")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    ap.add_argument("--no-server", action="store_true",
                    help="no job server (dive_core.job_server): every job a fresh process, as on a cluster")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from dive_core import provenance

    print(f"cpu: {provenance.cpu_model()}  simd: {' '.join(provenance.cpu_flags())}", flush=True)
    checkouts = {"this": REPO} | ({"against": a.against.resolve()} if a.against else {})
    jobs = {name: (code, REPO) for name, code in STEPS.items()}
    for kind in [k for k in a.kinds.split(",") if k]:
        for label, path in checkouts.items():
            jobs[f"{kind} ({label})"] = (kind_code(path, kind), path)
    server = None
    if not a.no_server:  # as a local run has it: the jobs that hand over to it run in its zygote's forks
        from dive_core import job_server

        server = job_server.start()
        for name, (code, cwd) in jobs.items():  # the zygotes' start (their imports, once a run) is not timed
            if "job_server.delegate(" in code:
                once(code, cwd)
    times: dict[str, list[float]] = {name: [] for name in jobs}
    try:
        for _ in range(a.repeats):
            for name, (code, cwd) in jobs.items():
                times[name].append(once(code, cwd))
    finally:
        if server is not None:
            job_server.stop(server)
    result = {"cpu": provenance.cpu_model(), "repeats": a.repeats, "job_server": server is not None,
              "checkouts": {k: str(v) for k, v in checkouts.items()},
              "median_s": {name: round(statistics.median(t), 3) for name, t in times.items()}}
    for name, s in result["median_s"].items():
        print(f"{name:24s} {s:7.3f} s", flush=True)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
