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
SMEC_TOL = 1e-6


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
    for st_new, st_old in zip(new.stages, old.stages):
        assert torch.equal(st_new.selected, st_old.selected)
    for a, b in zip(new.meta["ads"], old.meta["ads"]):
        assert a == pytest.approx(b, abs=1e-6)
    for a, b in zip(_strip(new_log), _strip(old_log)):
        assert a.keys() == b.keys()
        assert all(abs(a[k] - b[k]) < 1e-5 for k in a if k not in ("epoch", "phase")), (a, b)
