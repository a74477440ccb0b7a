"""The training step replayed from a CUDA graph (dive_core.training.CapturedStep) gives the plain
step's weights and logs, and only methods whose step can be recorded ask for it.

This machine has no GPU, so the loop runs here on the CPU with torch.cuda's graph and stream calls
replaced by stand-ins that reproduce what a recording does to the training: the recorded call runs
the step once (on a real GPU, recording runs nothing and the first replay runs it: the same update),
and every later replay reruns the recorded step on the static index buffer, writing into the same
output tensor. That checks the loop's side: the warm-up, the batch copied into the buffer before each
replay, the outputs read before the next replay, the last short batch run eagerly. The GPU side (the
recorded kernels are the plain ones) is checked on a GPU by benchmarks/captured_step.py, which
compares the weights of both (docs/performance.md)."""
import contextlib

import pytest
import torch

from dive_core import training
from dive_core.methods import new_method
from dive_core.training import CapturedStep, FitData, TrainLog

from dive_core import config as dcfg
from dive_core import plan

CONFIG = dcfg.load_yaml(__import__("pathlib").Path(__file__).resolve().parent.parent / "config" / "config.yaml")


def configured(name, epochs=3):
    """config/config.yaml's hyperparameters of method ``name``, for ``epochs`` epochs."""
    return dict(plan.method_hparams(CONFIG, name), epochs=epochs)


class _Graph:
    live: list = []

    def __init__(self):
        self.replays = 0

    def replay(self):
        self.replays += 1
        if self.replays == 1:
            return  # the recording already ran this batch's step (see the module docstring)
        cs = _Graph.live[-1]
        names, v = cs.step(cs.idx)
        cs.out[1].copy_(v)  # a real replay rewrites the recorded output in place


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda's graph and stream calls as CPU stand-ins; CapturedStep used on the CPU."""
    _Graph.live = []
    calls = {"warm": 0, "record": 0}
    init = CapturedStep.__init__

    def register(self, *a, **kw):
        init(self, *a, **kw)
        _Graph.live.append(self)

    @contextlib.contextmanager
    def stream(_s):
        calls["warm"] += 1
        yield

    @contextlib.contextmanager
    def graph(_g):
        calls["record"] += 1
        yield

    class _Stream:
        def __init__(self, *a, **kw):
            pass

        def wait_stream(self, other):
            pass

    monkeypatch.setattr(CapturedStep, "__init__", register)
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **kw: _Stream())
    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _Graph)
    monkeypatch.setattr(training, "GRAPH_DEVICE_TYPES", ("cuda", "cpu"))
    return calls


def _data(d=48, n_docs=300, n_q=60, n_trip=500, seed=0):
    g = torch.Generator().manual_seed(seed)
    docs = torch.nn.functional.normalize(torch.randn(n_docs, d, generator=g), dim=-1)
    queries = torch.nn.functional.normalize(torch.randn(n_q, d, generator=g), dim=-1)
    tq = torch.randint(0, n_q, (n_trip,), generator=g)
    tp, tn = (torch.randint(0, n_docs, (n_trip,), generator=g) for _ in range(2))
    return FitData(docs, queries, tq, tp, tn, torch.ones(n_trip), torch.zeros(n_trip))


DIVE_HP = configured("dive")


def _fit(type_name, hp, graph: bool):
    m = new_method(type_name, 48, 8, hp, 2027)
    if not graph:
        type(m).graph_capturable = lambda self: False
    log = TrainLog()
    try:
        m.fit(_data(), log, progress=False)
    finally:
        if not graph:
            del type(m).graph_capturable
    return m, log.rows


@pytest.mark.parametrize("type_name,hp", [
    ("dive", DIVE_HP),
    ("autoencoder", configured("autoencoder")),
])
def test_the_replayed_step_gives_the_plain_steps_weights_and_log(fake_cuda, type_name, hp):
    plain, plain_log = _fit(type_name, hp, graph=False)
    assert fake_cuda == {"warm": 0, "record": 0}  # the plain fit never touches a graph
    replayed, replayed_log = _fit(type_name, hp, graph=True)
    # 500 triplets / 128 = 3 full batches + 1 short one per epoch: 3 warm-up steps, one recording
    assert fake_cuda == {"warm": CapturedStep.WARMUP, "record": 1}
    assert _Graph.live[-1].graph.replays >= 2
    assert replayed.state_sha256() == plain.state_sha256()
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(replayed_log) == strip(plain_log)  # the logged terms, summed over replays, too


def test_only_methods_whose_step_can_be_recorded_ask_for_the_graph():
    assert new_method("dive", 48, 8, DIVE_HP, 0).graph_capturable()
    assert new_method("dive_corpus", 48, 8, configured("dive-pca"), 0).graph_capturable()
    # the corpus stream draws from a CPU generator at every step
    assert not new_method("dive_corpus", 48, 8, configured("dive-corpusgeo"), 0).graph_capturable()
    # MRL, SMEC and Search-Adaptor since their steps were made fixed-shape (tests/test_fixed_shape_steps.py)
    for name in ("mrl", "smec", "search_adaptor"):
        assert new_method.__globals__["method_class"](name).cuda_graph
    # the library's loss is not checked for capture
    assert not new_method.__globals__["method_class"]("csr").cuda_graph
