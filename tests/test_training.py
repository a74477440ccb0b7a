"""The shared training loop: AdamW's update against a hand computation, the precision option."""

import pytest
import torch

from dive_core.methods import new_method
from dive_core.training import TrainLog, precision_context, run_epochs


def _one_step(precision="fp32", seen=None):
    """One AdamW step of the shared loop on L(p) = g . p (constant gradient g)."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    g = torch.tensor([0.3, -0.02, 4.0])

    def loss(idx):
        seen.append((torch.is_autocast_enabled("cpu"), (torch.ones(2, 2) @ torch.ones(2, 2)).dtype)) \
            if seen is not None else None
        return {"loss": (g * p).sum()}

    run_epochs([p], loss, 1, epochs=1, batch_size=1, lr=0.1, weight_decay=0.01, seed=0, log_=TrainLog(),
               progress=False, precision=precision)
    return p.detach(), g


def test_adamw_step_equals_the_hand_computation():
    # first step: m^ = g, v^ = g^2, so p' = p (1 - lr wd) - lr g / (|g| + eps)
    p, g = _one_step()
    p0, lr, wd, eps = torch.tensor([1.0, -2.0, 0.5]), 0.1, 0.01, 1e-8
    expected = p0 * (1 - lr * wd) - lr * g / (g.abs() + eps)
    assert torch.allclose(p, expected, rtol=0, atol=1e-7)


def test_bf16_runs_the_loss_under_autocast_and_fp32_does_not():
    seen = []
    _one_step("bf16", seen)
    assert seen == [(True, torch.bfloat16)]
    seen = []
    _one_step("fp32", seen)
    assert seen == [(False, torch.float32)]


def test_an_unknown_precision_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"precision must be one of \['fp32', 'bf16'\], got 'fp16'"):
        precision_context("fp16")
    with pytest.raises(ValueError, match="method 'dive': training precision .* got 'half'"):
        new_method("dive", 8, 2, dict(margin=0.7, lambda_view=0.01, gamma_geo=10.0, tau=0.1, heads=2,
                                      triplet_loss="hinge", lr=1e-3, epochs=1, batch_size=4, hidden=8,
                                      weight_decay=0.0), 0, precision="half")


@pytest.mark.parametrize("name", ["dive", "mrl", "search_adaptor", "smec", "autoencoder"])
def test_every_trained_method_trains_under_bf16_with_its_configured_hyperparameters(name):
    """training.precision: bf16 is a workflow setting for every trained method: each must train
    under autocast (no dtype error in its loss), learn (weights move) and stay fp32 itself."""
    import math

    from dive_core import config as dcfg
    from dive_core import plan
    from synthetic import FAST, make_problem

    torch.set_num_threads(1)
    prob = make_problem()
    config = dcfg.load_yaml("config/config.yaml")
    hp = {**plan.method_hparams(config, name), **{k: v for k, v in FAST.items() if k != "epochs"}, "epochs": 3}
    m = new_method(plan.method_type(config, name), prob.d, prob.k, hp, 0, precision="bf16")
    before = {n: t.clone() for n, t in m.state_dict().items()}
    log = TrainLog()
    m.fit(prob.train, log, progress=False)
    assert all(math.isfinite(r["total"]) for r in log.rows)
    assert all(t.dtype == torch.float32 for t in m.state_dict().values() if t.is_floating_point())
    assert any(not torch.equal(before[n], t) for n, t in m.state_dict().items() if t.is_floating_point())


@pytest.mark.parametrize("flags, warned", [({"avx2", "fma"}, True), ({"avx2", "avx512_bf16"}, False)])
def test_bf16_training_on_a_cpu_without_bf16_warns(monkeypatch, flags, warned):
    """training.precision: bf16 on a CPU without bf16 instructions warns (in the train job's log),
    naming the key and the fix; with them, or in fp32, nothing is said."""
    import warnings

    from dive_core import provenance

    monkeypatch.setattr(provenance, "_cpuinfo_flags", lambda cpuinfo="": flags)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _one_step("bf16")
        _one_step("fp32")
    said = [str(w.message) for w in caught if "without bf16 instructions" in str(w.message)]
    assert len(said) == (1 if warned else 0), said
    assert not said or said[0].startswith("training.precision: bf16") and "Set training.precision: fp32" in said[0]


def test_the_workflows_adamw_gives_the_bytes_of_pytorchs_fused_adamw():
    """training.adamw (FusedAdamW: PyTorch's functional fused update without torch.optim's wrappers)
    against torch.optim.AdamW(fused=True), parameter groups with their own lr and weight decay, a
    parameter without a gradient at the first step: the same weights, bit for bit, after 6 steps."""
    from dive_core.training import adamw

    def params():
        g = torch.Generator().manual_seed(3)
        return [torch.nn.Parameter(torch.randn(7, 5, generator=g)), torch.nn.Parameter(torch.randn(5, generator=g)),
                torch.nn.Parameter(torch.randn(3, generator=g))]

    def run(make):
        a, b, c = params()
        opt = make([{"params": [a, b]}, {"params": [c], "lr": 0.3, "weight_decay": 0.0}])
        for step in range(6):
            opt.zero_grad(set_to_none=True)
            loss = (a.sum(0) ** 2).sum() + (b.tanh() * a[0]).sum() + (c.prod() if step else 0.0)
            loss.backward()
            opt.step()
        return a, b, c

    ours = run(lambda groups: adamw(groups, lr=0.01, weight_decay=0.05))
    theirs = run(lambda groups: torch.optim.AdamW(groups, lr=0.01, weight_decay=0.05, fused=True))
    for x, y in zip(ours, theirs):
        assert torch.equal(x, y)


def test_a_training_does_not_import_torchdynamo():
    """A fit through the shared loop (set_seed's deterministic kernels, run_epochs, its AdamW and the
    loss's backward pass) in a fresh process leaves torch._dynamo unimported: torch.optim's optimizers
    and torch.use_deterministic_algorithms import it (1 to 2 s each of a training job's start);
    training.FusedAdamW and numerics.deterministic do not, and the flag is set all the same."""
    code = ("import sys, torch; from dive_core.training import TrainLog, run_epochs, set_seed\n"
            "set_seed(0); assert torch.are_deterministic_algorithms_enabled()\n"
            "assert not torch.is_deterministic_algorithms_warn_only_enabled()\n"
            "p = torch.nn.Parameter(torch.ones(3))\n"
            "run_epochs([p], lambda idx: {'loss': (p * p).sum()}, 4, epochs=2, batch_size=2, lr=0.1,\n"
            "           weight_decay=0.01, seed=0, log_=TrainLog(), progress=False)\n"
            "assert float(p[0]) < 1.0\n"
            "print('torch._dynamo' in sys.modules)")
    assert _fresh_process(code) == "False"


def _fresh_process(code: str) -> str:
    """What ``code`` prints, run by this interpreter in a fresh process from the repository root."""
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_compiled_loss_gets_inductors_deterministic_setting():
    """numerics.deterministic leaves TorchInductor unimported; compiled_loss sets Inductor's own
    `deterministic` to PyTorch's flag before compiling, as torch.use_deterministic_algorithms would."""
    code = ("import sys, torch; from dive_core import numerics; from dive_core.training import compiled_loss\n"
            "numerics.deterministic(); assert 'torch._inductor.config' not in sys.modules\n"
            "compiled_loss(lambda idx: {'loss': idx.sum()})\n"
            "import torch._inductor.config as c; print(c.deterministic)")
    assert _fresh_process(code) == "True"
