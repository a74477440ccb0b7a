"""Structural facts of the residual adapter and of DIVE's heads (dive_core/adapters.py)."""

import torch

from dive_core.adapters import ResidualMLP, first_head, split_heads


def test_adapter_is_identity_at_init():
    torch.manual_seed(0)
    f = ResidualMLP(384, 2048)
    z = torch.nn.functional.normalize(torch.randn(50, 384), dim=-1)
    assert torch.equal(f(z), z)  # exactly, not approximately
    assert torch.count_nonzero(f.down.weight) == 0 and torch.count_nonzero(f.down.bias) == 0
    assert torch.count_nonzero(f.up.weight) > 0  # W1 is initialised, only W2/b2 are zero


def test_adapter_parameter_count():
    # |theta| = d r + r + r d + d (docs/methods.md#residual-adapter; paper: 2*4096*2048 + 2048 + 4096 ~ 16.8M)
    f = ResidualMLP(4096, 2048)
    assert sum(p.numel() for p in f.parameters()) == 2 * 4096 * 2048 + 2048 + 4096


def test_adapter_leaves_identity_after_a_step():
    torch.manual_seed(0)
    f = ResidualMLP(8, 16)
    z = torch.randn(4, 8)
    opt = torch.optim.SGD(f.parameters(), lr=0.1)
    (f(z) ** 2).sum().backward()
    opt.step()
    assert not torch.equal(f(z), z)


def test_split_heads_slices_and_normalises():
    z = torch.arange(1.0, 13.0).reshape(1, 12)  # d=12
    heads = split_heads(z, k=3, heads=3)
    assert heads.shape == (1, 3, 3)
    for h in range(3):
        block = z[0, 3 * h: 3 * h + 3]
        assert torch.allclose(heads[0, h], block / block.norm())
    assert torch.allclose(heads.norm(dim=-1), torch.ones(1, 3))
    # coordinates beyond k*H (here 9..11) are unused
    z2 = z.clone()
    z2[0, 9:] = -100
    assert torch.equal(split_heads(z2, 3, 3), heads)


def test_first_head_is_deployed_representation():
    z = torch.randn(5, 12)
    assert torch.allclose(first_head(z, 3), split_heads(z, 3, 4)[:, 0])


def test_adapter_first_width_coordinates_equal_the_full_pass_and_leave_the_rest_untouched():
    """``f(z, width)`` is ``f(z)[:, :width]``; the down-projection rows past ``width`` get no
    gradient (zeros, as when the full output is computed and its tail unused)."""
    torch.manual_seed(0)
    f = ResidualMLP(384, 2048)
    torch.nn.init.normal_(f.down.weight, std=0.02)
    z = torch.nn.functional.normalize(torch.randn(384, 384), dim=-1)
    part = f(z, width=256)
    assert part.shape == (384, 256)
    assert torch.allclose(part, f(z)[:, :256], atol=1e-6)
    part.square().sum().backward()
    grad_part = f.down.weight.grad.clone()
    assert torch.count_nonzero(grad_part[256:]) == 0 and torch.count_nonzero(f.down.bias.grad[256:]) == 0
    f.zero_grad()
    f(z)[:, :256].square().sum().backward()
    assert torch.allclose(grad_part, f.down.weight.grad, atol=1e-5)
    assert torch.equal(f(z, width=384), f(z))
