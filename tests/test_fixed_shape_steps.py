"""The MRL, SMEC and Search-Adaptor training steps can be recorded as CUDA graphs (issue 63, item 1),
checked on the CPU, and they train to the weights of the steps they replaced.

1. Same weights: each method's fit against the same fit with the step of commit b593cd5 kept in
   tests/plain_steps_reference.py (same seed, same data). Where the fixed-shape step pads a batch
   to a fixed number of rows, the adapter's matrix products and the loss's sums run over more rows
   (padding rows of weight 0), so their floating-point summation order changes and bits may not
   match: the test allows the tolerance stated there (max abs weight difference).
2. Recordable: the step that ``run_epochs(cuda_graph=True)`` records (torch.cuda's graph calls
   replaced by CPU stand-ins, tests/test_captured_step.py) runs under a ``TorchDispatchMode`` that
   lists its aten ops: none may read a value back to the host (``aten::_local_scalar_dense``:
   ``.item()``, ``bool()``, ``float()``, ``.tolist()``), have an output shape that depends on the
   data (``unique``, ``nonzero``, ``masked_select``, boolean indexing), build a tensor from host data
   (``lift_fresh``: an upload at every step) or draw from an explicit (CPU) generator; and every
   replay must run the recorded op sequence with the recorded shapes.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import plain_steps_reference as ref
from test_captured_step import _Graph, configured, fake_cuda  # noqa: F401  (fixture)

from dive_core.methods import new_method
from dive_core.methods import smec as smec_mod
from dive_core.training import FitData, TrainLog, set_seed

D, K = 48, 8


def _data(d=D, n_docs=300, n_q=60, n_trip=500, seed=0):
    """Few queries (60) for 500 triplets: every batch of 128 repeats queries and documents."""
    g = torch.Generator().manual_seed(seed)
    docs = torch.nn.functional.normalize(torch.randn(n_docs, d, generator=g), dim=-1)
    queries = torch.nn.functional.normalize(torch.randn(n_q, d, generator=g), dim=-1)
    tq = torch.randint(0, n_q, (n_trip,), generator=g)
    tp, tn = (torch.randint(0, n_docs, (n_trip,), generator=g) for _ in range(2))
    grades = torch.randint(1, 3, (n_trip,), generator=g).float()
    return FitData(docs, queries, tq, tp, tn, grades, torch.zeros(n_trip))


MRL_HP = dict(configured("mrl", epochs=4), min_prefix=4)
SMEC_HP = dict(configured("smec", epochs=6), queue_size=200, lr=1e-3)  # small queue: it fills and evicts
SA_HP = configured("search_adaptor", epochs=3)


def _fit(cls_or_type, hp, seed=2027):
    if isinstance(cls_or_type, str):
        m = new_method(cls_or_type, D, K, hp, seed)
    else:
        set_seed(seed)
        m = cls_or_type(D, K, hp, seed)
    log = TrainLog()
    m.fit(_data(), log, progress=False)
    return m, log.rows


def _max_diff(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max(float((sa[n].double() - sb[n].double()).abs().max()) for n in sa)


def _strip(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


# ---- 1. the same weights as the replaced steps -------------------------------------------------
# MRL: the batch's distinct queries and documents are padded to B and 2B rows (the step had as many
# rows as there were distinct items), so the adapter runs on 3B rows and the Gram matrices, L_pair's
# and L_topk's means and L_rec's mean sum over padded (weight 0) entries: a different summation
# order. Measured after 4 epochs here: 2.1e-7 (test: 1e-6).
MRL_TOL = 1e-6
# SMEC: the anchors padded to 3B rows, the S-XBM mean over (3B, m) slots instead of (n, min(m, L)).
# Stage 1 (the same inputs): 3.0e-8 on the Xeon (AVX-512), 1.3e-6 on the EPYC with AVX2 only, where
# MKL's kernels for the padded and the unpadded shapes round differently and AdamW, dividing each
# gradient by its own running scale, enlarges last-bit changes of near-zero gradients (test: 5e-6,
# 200x below one step's move at lr 1e-3; the whole fit on that EPYC: 4.8e-6). Later stages train on the outputs of the
# earlier ones, which differ by those few 1e-8, and at this test's lr (1e-3; SMEC's configured lr
# is 5e-6) the fit amplifies that: 5.9e-6. The old step itself, given documents moved by 1e-8,
# ends 6.4e-6 away from its own weights (test: 2e-5). At lr 5e-6: 3.9e-8 in every stage.
SMEC_STAGE1_TOL, SMEC_TOL = 5e-6, 2e-5


def test_mrl_trains_to_the_replaced_steps_weights():
    new, new_log = _fit("mrl", MRL_HP)
    old, old_log = _fit(ref.PlainMRL, MRL_HP)
    assert _max_diff(new, old) < MRL_TOL
    assert [r["phase"] for r in new_log] == [r["phase"] for r in old_log]
    for a, b in zip(_strip(new_log), _strip(old_log)):
        assert a.keys() == b.keys()
        assert all(abs(a[k] - b[k]) < 1e-5 for k in a if k not in ("epoch", "phase")), (a, b)


@pytest.mark.parametrize("search", ["precomputed", "per_step"])
def test_smec_trains_to_the_replaced_steps_weights(monkeypatch, search):
    monkeypatch.setattr(smec_mod.FrozenNeighbours, "worthwhile", staticmethod(lambda *a: search == "precomputed"))
    new, new_log = _fit("smec", SMEC_HP)
    old, old_log = _fit(ref.PlainSMEC, SMEC_HP)
    assert new.meta["neighbour_search"] == old.meta["neighbour_search"] == search
    assert _max_diff(new, old) < SMEC_TOL
    first_new, first_old = new.stages[0].state_dict(), old.stages[0].state_dict()
    assert max(float((first_new[n].double() - first_old[n].double()).abs().max()) for n in first_new) < SMEC_STAGE1_TOL
    for st_new, st_old in zip(new.stages, old.stages):
        assert torch.equal(st_new.selected, st_old.selected)
    for a, b in zip(new.meta["ads"], old.meta["ads"]):
        assert a == pytest.approx(b, abs=1e-6)
    for a, b in zip(_strip(new_log), _strip(old_log)):
        assert a.keys() == b.keys()
        assert all(abs(a[k] - b[k]) < 1e-5 for k in a if k not in ("epoch", "phase")), (a, b)


# ---- 2. recordable: no host read, no data-dependent shape, the same ops at every replay ---------
FORBIDDEN = {
    "aten::_local_scalar_dense": "a value read back to the host (.item(), bool(), float(), .tolist())",
    "aten::item": "a value read back to the host",
    "aten::is_nonzero": "a value read back to the host (bool(tensor))",
    "aten::equal": "a comparison answered on the host",
    "aten::allclose": "a comparison answered on the host",
    "aten::_unique": "an output shape that depends on the data",
    "aten::_unique2": "an output shape that depends on the data",
    "aten::unique_dim": "an output shape that depends on the data",
    "aten::unique_consecutive": "an output shape that depends on the data",
    "aten::unique_dim_consecutive": "an output shape that depends on the data",
    "aten::nonzero": "an output shape that depends on the data",
    "aten::masked_select": "an output shape that depends on the data",
    "aten::repeat_interleave": "an output shape that depends on the data",
    "aten::bincount": "an output shape that depends on the data",
    "aten::lift_fresh": "a tensor built from host data (an upload at every step)",
}


class OpRecorder(TorchDispatchMode):
    """The aten ops run under it, with their output shapes, and what in them a CUDA graph cannot
    record."""

    def __init__(self):
        super().__init__()
        self.ops, self.bad = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name in FORBIDDEN:
            self.bad.append(f"{name}: {FORBIDDEN[name]}")
        if name in ("aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"):
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ()):
                self.bad.append(f"{name} with a boolean mask: an output shape that depends on the data")
        if kwargs.get("generator") is not None:
            self.bad.append(f"{name} draws from an explicit generator (a CPU generator cannot be recorded)")
        out = func(*args, **kwargs)
        shapes = tuple(tuple(o.shape) for o in (out if isinstance(out, (list, tuple)) else [out])
                       if isinstance(o, torch.Tensor))
        self.ops.append((name, shapes))
        return out


@pytest.fixture
def recorded(fake_cuda, monkeypatch):  # noqa: F811
    """Every recording (``torch.cuda.graph``) and every replay run under an :class:`OpRecorder`."""
    rec = {"recordings": [], "replays": []}

    @contextlib.contextmanager
    def graph(_g):
        fake_cuda["record"] += 1
        with OpRecorder() as r:
            yield
        rec["recordings"].append(r)

    class Graph(_Graph):
        def replay(self):  # _Graph.replay, with the step (not the stand-in's output copy) recorded
            self.replays += 1
            if self.replays == 1:
                return
            cs = _Graph.live[-1]
            with OpRecorder() as r:
                names, v = cs.step(cs.idx)
            cs.out[1].copy_(v)
            rec["replays"].append(r)

    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    return rec


@pytest.mark.parametrize("type_name,hp,phases", [
    ("dive", configured("dive", epochs=2), 1),
    ("mrl", dict(MRL_HP, epochs=4), 2),  # the unsupervised stage on documents, the supervised one
    ("smec", SMEC_HP, 3),  # one graph per stage (2 epochs of 3 full batches each)
    ("search_adaptor", dict(SA_HP, epochs=2), 1),
])
def test_the_recorded_step_has_no_host_read_and_fixed_shapes(recorded, type_name, hp, phases):
    m = new_method(type_name, D, K, hp, 2027)
    assert m.graph_capturable()
    log = TrainLog()
    m.fit(_data(), log, progress=False)
    assert len(recorded["recordings"]) == phases  # every training stage records its step
    assert recorded["replays"], "no replay after the recording"
    for r in recorded["recordings"]:
        assert r.ops, "the recording ran no op"
        assert not r.bad, sorted(set(r.bad))
    # every replay runs the recorded ops at the recorded shapes (its stage's recording)
    signatures = {tuple(r.ops) for r in recorded["recordings"]}
    for r in recorded["replays"]:
        assert not r.bad, sorted(set(r.bad))
        assert tuple(r.ops) in signatures


@pytest.mark.parametrize("type_name,hp,cls", [
    ("mrl", MRL_HP, ref.PlainMRL),
    ("smec", SMEC_HP, ref.PlainSMEC),
    ("search_adaptor", SA_HP, None),
])
def test_the_replayed_step_gives_the_plain_steps_weights_and_log(recorded, monkeypatch, type_name, hp, cls):
    """Recorded and replayed (on the CPU stand-ins) against the same fit's plain loop: the same
    weights and logs, bit for bit (the loop's side of the replay: warm-up, the index buffer, the
    step counter SMEC keeps on the device, the last short batch run eagerly)."""
    replayed, replayed_log = _fit(type_name, hp)
    assert recorded["recordings"]
    from dive_core import training

    monkeypatch.setattr(training, "GRAPH_DEVICE_TYPES", ("cuda",))
    plain, plain_log = _fit(type_name, hp)
    assert replayed.state_sha256() == plain.state_sha256()
    assert _strip(replayed_log) == _strip(plain_log)


def test_padding_rows_take_no_part_in_the_pair_losses():
    """L_pair, L_topk and L_rec with padding rows of weight 0 equal the losses on the real rows."""
    from dive_core.losses import (L1ReconstructionLoss, MatryoshkaPairSimilarityLoss, MatryoshkaTopKSimilarityLoss,
                                  prefix_similarity_deviation)

    g = torch.Generator().manual_seed(1)
    e, z = torch.randn(9, 16, generator=g, dtype=torch.float64), torch.randn(9, 16, generator=g, dtype=torch.float64)
    w = torch.tensor([1, 1, 0, 1, 1, 1, 0, 0, 1], dtype=torch.float64)
    real = w > 0
    prefixes = [4, 8, 16]
    for loss in (MatryoshkaPairSimilarityLoss(prefixes), MatryoshkaTopKSimilarityLoss(prefixes, 3),
                 MatryoshkaTopKSimilarityLoss(prefixes, 10)):  # 10 > 6 - 1 real neighbours
        padded = loss(e, z, prefix_similarity_deviation(e, z, prefixes), w)
        assert float(padded) == pytest.approx(float(loss(e[real], z[real])), rel=1e-12)
    for reduction in ("sum", "mean"):
        rec = L1ReconstructionLoss(reduction)
        assert float(rec(e, z, w)) == pytest.approx(float(rec(e[real], z[real])), rel=1e-12)


def test_smec_steps_read_tensors_that_keep_their_storage_for_the_whole_stage():
    """A recorded step reads SMEC's schedule, step counter and vector table at the addresses it was
    recorded with: each epoch's schedule is written into the same tensors, never rebound."""
    m = new_method("smec", D, K, SMEC_HP, 2027)
    seen = []
    original = m._schedule

    def spy(order):
        original(order)
        seen.append((m._stage, tuple(v.data_ptr() for v in m._sched.values()), m._t.data_ptr(), m._wide.data_ptr(),
                     int(m._t)))

    m._schedule = spy
    m.fit(_data(), TrainLog(), progress=False)
    assert len(seen) == SMEC_HP["epochs"]
    for stage in {s[0] for s in seen}:
        ptrs = {s[1:4] for s in seen if s[0] == stage}
        assert len(ptrs) == 1, f"stage {stage}: the step's tensors were rebound between epochs"
    assert all(s[4] == 0 for s in seen)  # the counter starts each epoch at its first step
