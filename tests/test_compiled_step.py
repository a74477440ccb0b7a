"""DIVE's training step compiled by TorchInductor (``run_epochs(compile=True)``,
``TorchMethod.compile_step``; issue 63 item 2) trains to the plain step's weights within rounding,
compiles one graph (the full batches; the last, smaller batch runs eagerly), works for fits
trained together, and gives the same bytes in two fresh processes.

On a GPU the compiled kernels are Triton's and a CUDA graph records them; that side is timed and
compared by benchmarks/captured_step.py --compile on a GPU. Here the kernels are Inductor's C++
ones: the same graph capture and fusion, checked at config/config.yaml's DIVE hyperparameters."""
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dive_core import config as dcfg
from dive_core import plan
from dive_core.methods import new_method
from dive_core.methods.base import TorchMethod
from dive_core.methods.dive import DIVE
from dive_core.training import CapturedStep, FitData, TrainLog

from test_captured_step import _Graph, fake_cuda  # noqa: F401  (fixture)

# PyTorch's own notices while it traces and compiles (the lru_cache-wrapped function is the NT-Xent's
# constant self-mask, which tracing through is what it should do)
pytestmark = [
    pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`:UserWarning"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:`torch._prims_common.check` is deprecated:FutureWarning"),
]
ROOT = Path(__file__).resolve().parent.parent
CONFIG = dcfg.load_yaml(ROOT / "config" / "config.yaml")
# the compiled step's weights against the plain step's after these tests' 2 epochs of 4 steps
# (observed: 3.2e-6 at 384d -> 64d, while the 8 steps move the weights by 1.6e-3; 7e-8 for the
# small fits trained together)
TOL = 1e-5


def data(d: int, triplets: int, seed: int = 0) -> FitData:
    g = torch.Generator().manual_seed(seed)
    docs = torch.nn.functional.normalize(torch.randn(300, d, generator=g), dim=-1)
    queries = torch.nn.functional.normalize(torch.randn(60, d, generator=g), dim=-1)
    tq = torch.randint(0, 60, (triplets,), generator=g)
    tp, tn = (torch.randint(0, 300, (triplets,), generator=g) for _ in range(2))
    ones = torch.ones(triplets)
    return FitData.from_arrays(docs, queries, tq, tp, tn, ones, 0 * ones, "cpu")


@contextlib.contextmanager
def compiling(on: bool):
    """DIVE's step compiled (or not) inside the block, back to the default after."""
    DIVE.compile_step = on
    try:
        yield
    finally:
        DIVE.compile_step = False


def fit(d, k, fd, compile_step, hp, seed=2027):
    with compiling(compile_step):
        m = new_method("dive", d, k, hp, seed)
        log = TrainLog()
        m.fit(fd, log, progress=False)
    return m, log.rows


def max_diff(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_off_by_default():
    assert TorchMethod.compile_step is False and DIVE.compile_step is False


def test_compiled_dive_matches_the_plain_step_at_the_configured_values():
    import torch._dynamo

    hp = dict(plan.method_hparams(CONFIG, "dive"), epochs=2)
    b = int(hp["batch_size"])
    fd = data(384, 3 * b + 40)  # three full batches (compiled) and one of 40 (eager) per epoch
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled, rows_c = fit(384, 64, fd, True, hp)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    plain, rows_p = fit(384, 64, fd, False, hp)
    assert graphs == 1, f"expected one compiled graph (the full batch's shape), got {graphs}"
    assert max_diff(compiled, plain) < TOL
    for rc, rp in zip(rows_c, rows_p):
        for term in ("triplet", "view", "geo", "rho", "total"):
            assert rc[term] == pytest.approx(rp[term], rel=1e-5, abs=1e-7), (term, rc, rp)
    # the adapter moved: a compiled step that did nothing would also be "close" to an untrained one
    untrained = new_method("dive", 384, 64, hp, 2027)
    assert max_diff(plain, untrained) > 100 * TOL


def test_compiled_fits_trained_together_match_the_plain_ones():
    hp = dict(plan.method_hparams(CONFIG, "dive"), epochs=2, hidden=128, batch_size=32)
    fd = data(64, 3 * 32 + 7)

    def together(compile_step):
        with compiling(compile_step):
            ms = [new_method("dive", 64, 8, hp, 2027 + i) for i in range(2)]
            TorchMethod.fit_together(ms, fd, [TrainLog() for _ in ms], progress=False)
        return ms

    for c, p in zip(together(True), together(False)):
        assert max_diff(c.net, p.net) < TOL


SCRIPT = """
import hashlib, json, sys, torch
sys.path.insert(0, {tests!r})
import test_compiled_step as t
from dive_core import plan
hp = dict(plan.method_hparams(t.CONFIG, "dive"), epochs=2, hidden=128, batch_size=32)
m, _ = t.fit(64, 8, t.data(64, 3 * 32 + 7), True, hp)
h = hashlib.sha256()
for name, v in sorted(m.state_dict().items()):
    h.update(name.encode()); h.update(v.detach().contiguous().numpy().tobytes())
print(json.dumps(h.hexdigest()))
"""


def test_compiled_step_gives_the_same_bytes_in_two_fresh_processes(tmp_path):
    digests = []
    for i in range(2):  # each with its own empty Inductor cache: two compilations, not one reused
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"cache{i}"), PYTHONHASHSEED=str(i))
        out = subprocess.run([sys.executable, "-c", SCRIPT.format(tests=str(ROOT / "tests"))], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        digests.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert digests[0] == digests[1]


def test_the_compiled_step_recorded_in_a_graph_matches_the_plain_step(fake_cuda):
    """The loop's side of compile + CUDA graph (torch.cuda's graph calls as the CPU stand-ins of
    tests/test_captured_step.py): the warm-up calls compile, the recording and every replay run the
    compiled function on the static index buffer."""
    import torch._dynamo

    hp = dict(plan.method_hparams(CONFIG, "dive"), epochs=2, hidden=128, batch_size=32)
    fd = data(64, 5 * 32 + 7)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    replayed, rows_r = fit(64, 8, fd, True, hp)
    assert fake_cuda == {"warm": CapturedStep.WARMUP, "record": 1}
    assert _Graph.live[-1].graph.replays >= 2
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    plain, rows_p = fit(64, 8, fd, False, dict(hp))
    assert max_diff(replayed, plain) < TOL
    for rr, rp in zip(rows_r, rows_p):
        assert rr["total"] == pytest.approx(rp["total"], rel=1e-5)


def test_one_compiled_graph_serves_later_fits_of_other_weights_and_data():
    """A process that trains several fits (a benchmark's repeats) compiles once per shape; the graph
    must read each fit's own parameters and data, not those it was traced with."""
    import torch._dynamo

    hp = dict(plan.method_hparams(CONFIG, "dive"), epochs=2, hidden=64, batch_size=32)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    for seed, data_seed in [(1, 0), (2, 5), (3, 0)]:
        fd = data(32, 3 * 32, seed=data_seed)
        compiled, _ = fit(32, 8, fd, True, hp, seed=seed)
        plain, _ = fit(32, 8, fd, False, hp, seed=seed)
        assert max_diff(compiled, plain) < TOL, (seed, data_seed)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
