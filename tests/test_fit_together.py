"""Several fits of one method trained together (TorchMethod.fit_together: stacked parameters, one
vmapped step for all, each fit its own shuffling generator) end where each fit trained alone ends:
the same weights and the same per-epoch log, at the configured hyperparameters."""

from __future__ import annotations

import math

import pytest
import torch

from dive_core.methods import new_method
from dive_core.methods.base import TorchMethod
from dive_core.training import TrainLog
from synthetic import make_problem
from test_export import configured

SEEDS = (2027, 2028, 2029)


@pytest.fixture(scope="module")
def problem():
    torch.set_num_threads(1)
    return make_problem()


def alone_and_together(problem, mtype, seeds=SEEDS, **over):
    hp = {**configured(mtype), "epochs": 3, **over}
    alone, logs_alone = [], []
    for s in seeds:
        m = new_method(mtype, problem.d, problem.k, hp, s)
        log = TrainLog()
        m.fit(problem.train, log, progress=False)
        alone.append(m)
        logs_alone.append(log)
    together = [new_method(mtype, problem.d, problem.k, hp, s) for s in seeds]
    logs = [TrainLog() for _ in seeds]
    TorchMethod.fit_together(together, problem.train, logs, progress=False)
    return alone, logs_alone, together, logs


@pytest.mark.parametrize("mtype", ["dive", "autoencoder"])
def test_each_fit_ends_where_it_ends_alone(problem, mtype):
    alone, logs_alone, together, logs = alone_and_together(problem, mtype)
    worst = 0.0
    for a, t in zip(alone, together):
        sa, st = a.state_dict(), t.state_dict()
        assert sa.keys() == st.keys()
        for name in sa:
            worst = max(worst, float((sa[name] - st[name]).abs().max()))
    assert worst < 1e-5, worst  # batched kernels round differently (a few 1e-8 on a CPU)
    print(f"{mtype}: largest |together - alone| over every weight: {worst:.3g}")
    for la, lt in zip(logs_alone, logs):
        assert len(la.rows) == len(lt.rows) == 3
        for ra, rt in zip(la.rows, lt.rows):
            assert ra.keys() == rt.keys()
            assert (ra["epoch"], ra["phase"]) == (rt["epoch"], rt["phase"])
            for key in ra:
                if key not in ("seconds", "phase", "epoch"):
                    assert math.isclose(ra[key], rt[key], rel_tol=1e-5, abs_tol=1e-7), (key, ra[key], rt[key])
    # the fits differ from one another (their own initialisation and shuffling)
    assert not torch.equal(together[0].state_dict()[next(iter(together[0].state_dict()))],
                           together[1].state_dict()[next(iter(together[1].state_dict()))])


def test_a_fit_that_differs_in_more_than_its_seed_or_cannot_stack_is_refused(problem):
    hp = {**configured("dive"), "epochs": 1}
    a = new_method("dive", problem.d, problem.k, hp, 1)
    b = new_method("dive", problem.d, problem.k, {**hp, "margin": 0.3}, 2)
    with pytest.raises(ValueError, match="only their seeds may differ"):
        TorchMethod.fit_together([a, b], problem.train, [TrainLog(), TrainLog()], progress=False)
    with pytest.raises(ValueError, match="two fits share a seed"):
        TorchMethod.fit_together([a, new_method("dive", problem.d, problem.k, hp, 1)], problem.train,
                                 [TrainLog(), TrainLog()], progress=False)
    mrl = configured("mrl")
    pair = [new_method("mrl", problem.d, problem.k, {**mrl, "min_prefix": 4}, s) for s in (1, 2)]
    with pytest.raises(ValueError, match="method 'mrl' does not train as a plain stack of fits"):
        TorchMethod.fit_together(pair, problem.train, [TrainLog(), TrainLog()], progress=False)
