"""Time one DIVE optimisation step (forward of every loss term, backward, AdamW) at the
paper's batch size, on synthetic normalised embeddings, and break it into its parts.

    .venv/bin/python -m benchmarks.train_step [--d 384] [--k 64] [--batch 128] [--threads 2]

Prints median milliseconds over repeats (after warm-up) for: the adapter forward on 3B rows,
each loss term, and the full step. Use it before and after touching the training hot path.
"""
import argparse
import statistics
import time

import torch

import dive_core  # noqa: F401  (MKL's reproducible mode, as in the workflow)
from dive_core.adapters import ResidualMLP, split_heads
from dive_core.losses import GeometryDistillationLoss, HingeTripletLoss, MultiPositiveNTXent
from dive_core.methods import new_method
from dive_core.training import FitData, adamw


def timeit(fn, repeats=30, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def dive_step(d: int = 384, k: int = 64, heads: int = 4, hidden: int = 2048, batch: int = 128):
    """One full DIVE optimisation step (forward of every loss term, backward, the workflow's AdamW)
    on a seeded synthetic batch, as a callable (also timed by benchmarks/reproducibility.py)."""
    g = torch.Generator().manual_seed(0)
    n = 4096
    docs = torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=-1)
    idx = torch.randint(0, n, (n,), generator=g)
    ones = torch.ones(n)
    data = FitData(docs, docs, idx, idx.roll(1), idx.roll(2), ones, 0 * ones)
    hp = dict(margin=0.7, lambda_view=0.01, gamma_geo=10.0, tau=0.1, heads=heads, triplet_loss="hinge",
              lr=2e-4, epochs=1, batch_size=batch, hidden=hidden, weight_decay=0.01)
    m = new_method("dive", d, k, hp, 0)
    opt = adamw(m.net.parameters(), 2e-4, 0.01)
    b = torch.arange(batch)

    def step():
        out = m.batch_loss(data, b)
        opt.zero_grad(set_to_none=True)
        out["loss"].backward()
        opt.step()

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--deterministic", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(3 * a.batch, a.d, generator=g), dim=-1)
    f = ResidualMLP(a.d, a.hidden)
    heads = split_heads(f(x), a.k, a.heads)
    print(f"d={a.d} k={a.k} H={a.heads} r={a.hidden} B={a.batch} threads={a.threads}")
    with torch.no_grad():
        print(f"adapter forward (3B rows)     {timeit(lambda: f(x)):8.2f} ms")
        print(f"NT-Xent x3                    {timeit(lambda: [MultiPositiveNTXent(0.1)(heads[i::3]) for i in range(3)]):8.2f} ms")
        print(f"geometry (3B x 3B Gram)       {timeit(lambda: GeometryDistillationLoss()(heads[:, 0], x)):8.2f} ms")
        print(f"hinge                         {timeit(lambda: HingeTripletLoss(0.7)(heads[:a.batch, 0], heads[a.batch:2*a.batch, 0], heads[2*a.batch:, 0])):8.2f} ms")
    torch.use_deterministic_algorithms(bool(a.deterministic), warn_only=True)
    step = dive_step(a.d, a.k, a.heads, a.hidden, a.batch)

    print(f"full DIVE step (fwd+bwd+AdamW) {timeit(step):8.2f} ms")


if __name__ == "__main__":
    main()
