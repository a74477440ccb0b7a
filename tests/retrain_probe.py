"""One DIVE training in this process; prints one JSON line with the hashes of what it made.

    python tests/retrain_probe.py [--method dive] [--epochs N]

The training the CI smoke run does (tests/test_workflow.py retrains it in a new process and
compares weights): the method's hyperparameters from config/config.yaml with config/test.yaml's
`training:` section (3 epochs, batch 32, hidden 256), MiniLM's shape (384 -> 64), on a seeded
synthetic problem (tests/synthetic.py) of 1,600 triplets. Run in N fresh processes, it must print
one line N times (tests/test_reproducibility.py; benchmarks/reproducibility.py times it per MKL
mode). ``dive_core`` is imported first, as every entry point does; the checkout in the working
directory comes first on the path, so the probe also runs against another checkout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path.cwd()), str(Path(__file__).resolve().parent)]

import dive_core  # noqa: E402,F401  (first: sets MKL's reproducible mode before torch loads)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from synthetic import make_problem  # noqa: E402

from dive_core import config as dcfg  # noqa: E402
from dive_core import plan, provenance  # noqa: E402
from dive_core.methods import new_method  # noqa: E402
from dive_core.training import TrainLog  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", default="dive")
    ap.add_argument("--epochs", type=int, default=None, help="default: config/test.yaml's")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    config = dcfg.load_yaml(REPO / "config/config.yaml")
    config["training"].update(dcfg.load_yaml(REPO / "config/test.yaml")["training"])
    hp = plan.method_hparams(config, a.method)
    if a.epochs:
        hp["epochs"] = a.epochs
    p = make_problem(seed=0, d=384, k=64, rank=32, n_docs=2000, n_train=400, n_neg=4)
    m = new_method(plan.method_type(config, a.method), p.d, p.k, hp, 2027)
    m.fit(p.train, TrainLog(), progress=False)
    docs = np.ascontiguousarray(m.compress(p.docs), dtype=np.float32)
    print(json.dumps({"weights_sha256": m.state_sha256(), "docs_sha256": hashlib.sha256(docs.tobytes()).hexdigest(),
                      "mkl": provenance.runtime(a.threads).get("mkl")}))


if __name__ == "__main__":
    main()
