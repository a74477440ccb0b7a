"""The shared training machinery: seeding, data on device, batching, the optimisation loop,
per-epoch logging. Methods only say what one batch's loss is."""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from . import numerics
from .provenance import slow_half_precision

log = logging.getLogger(__name__)


def set_seed(seed: int) -> None:
    """Seed every RNG in play and ask PyTorch for deterministic kernels."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    numerics.deterministic()


@contextlib.contextmanager
def preserved_rng():
    """Run a block that seeds (:func:`set_seed`) without moving the caller's generators: Python's,
    NumPy's and PyTorch's (CPU and, where present, CUDA) states are restored after it."""
    states = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.random.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


@dataclass
class FitData:
    """Everything a method may train on, as tensors on one device.

    ``docs``: normalised frozen corpus (N, d); ``queries``: normalised frozen queries (Q, d)
    (rows indexed by ``t_q``); ``t_q``/``t_p``/``t_n``: triplet indices (query row, positive
    doc row, negative doc row); ``y_p``/``y_n``: their relevance grades.
    """

    docs: torch.Tensor
    queries: torch.Tensor
    t_q: torch.Tensor
    t_p: torch.Tensor
    t_n: torch.Tensor
    y_p: torch.Tensor
    y_n: torch.Tensor

    @property
    def n_triplets(self) -> int:
        return int(self.t_q.shape[0])

    @property
    def device(self) -> torch.device:
        return self.docs.device

    def triplet_batch(self, idx: torch.Tensor):
        """Frozen (q, p, n) embeddings and grades of the triplets ``idx``."""
        return (self.queries[self.t_q[idx]], self.docs[self.t_p[idx]], self.docs[self.t_n[idx]],
                self.y_p[idx], self.y_n[idx])

    @classmethod
    def without_triplets(cls, docs, queries, device: str = "cpu") -> "FitData":
        """Documents and training queries, no triplet: what a label-free map or stream fits on."""
        empty = np.zeros(0, dtype=np.int64)
        return cls.from_arrays(docs, queries, empty, empty, empty, empty, empty, device)

    @classmethod
    def documents(cls, docs, device: str = "cpu") -> "FitData":
        """Documents only (no query, no triplet)."""
        docs = np.asarray(docs, dtype=np.float32)
        return cls.without_triplets(docs, np.zeros((0, docs.shape[1]), np.float32), device)

    @classmethod
    def from_arrays(cls, docs, queries, t_q, t_p, t_n, y_p, y_n, device: str = "cpu") -> "FitData":
        f = lambda a, dt: torch.as_tensor(np.asarray(a), dtype=dt, device=device)  # noqa: E731
        return cls(f(docs, torch.float32), f(queries, torch.float32), f(t_q, torch.long),
                   f(t_p, torch.long), f(t_n, torch.long), f(y_p, torch.float32), f(y_n, torch.float32))


@dataclass
class TrainLog:
    """Per-epoch rows (dicts); ``phase`` names a training stage for multi-stage methods."""

    rows: list[dict] = field(default_factory=list)
    on_epoch: Callable[[dict], None] | None = None

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if self.on_epoch:
            self.on_epoch(row)

    def columns(self) -> list[str]:
        cols: list[str] = []
        for r in self.rows:
            cols += [c for c in r if c not in cols]
        return cols

    def total_seconds(self) -> float:
        return float(sum(r.get("seconds", 0.0) for r in self.rows))


PRECISIONS = ("fp32", "bf16")
GRAPH_DEVICE_TYPES = ("cuda",)  # where run_epochs(cuda_graph=True) replays steps from a CUDA graph


def check_precision(precision: str, owner: str = "") -> str:
    """``precision`` if it is one of :data:`PRECISIONS`; else a ValueError (``owner`` prefixes it)."""
    if precision not in PRECISIONS:
        raise ValueError(f"{owner}training precision must be one of {list(PRECISIONS)}, got {precision!r}")
    return precision


def precision_context(precision: str, device: torch.device | str = "cpu"):
    """The context a training forward pass runs in: nothing for ``fp32``, bfloat16 autocast on
    the device's type for ``bf16`` (with a warning on a CPU without bf16 instructions)."""
    if check_precision(precision) == "fp32":
        return contextlib.nullcontext()
    msg = slow_half_precision(precision, torch.device(device).type, "training.precision")
    if msg:
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


class FusedAdamW:
    """PyTorch's fused AdamW update, without ``torch.optim.Optimizer``'s wrappers.

    ``torch.optim.AdamW`` imports TorchDynamo (``torch._dynamo``, 1 to 2 s of a job's start) the
    first time it is used: its ``add_param_group`` (called by its constructor) is wrapped in
    ``torch._disable_dynamo``, which imports it on its first call, and its ``step`` in
    ``_use_grad_for_differentiable``, which imports it on every call (for ``graph_break``). No
    setting turns that off. This class holds the same per-parameter state as ``AdamW(fused=True)``
    (``step`` a 0-d float32 tensor on the parameter's device, ``exp_avg`` and ``exp_avg_sq`` zeros
    made lazily at the first step a parameter has a gradient) and calls the same update,
    ``torch.optim.adam.adam(..., fused=True, decoupled_weight_decay=True)`` (PyTorch's functional
    API, which is what ``AdamW.step`` calls), under ``torch.no_grad()``, so the weights are the same
    bytes (tests/test_training.py compares them with ``torch.optim.AdamW`` over parameter groups).

    ``param_groups``: dicts with ``params`` and optionally their own ``lr`` / ``weight_decay``;
    betas (0.9, 0.999) and eps 1e-8 are AdamW's defaults. ``capturable`` is recorded for a CUDA
    graph's capture; the fused kernel keeps its step count on the device either way.
    """

    betas = (0.9, 0.999)
    eps = 1e-8

    def __init__(self, param_groups, lr: float, weight_decay: float, capturable: bool = False):
        from torch.optim.adam import adam

        self._adam = adam
        self.capturable = bool(capturable)
        params = list(param_groups)
        groups = [g for g in params if isinstance(g, dict)] or [{"params": params}]
        self.param_groups = [{"lr": lr, "weight_decay": weight_decay, **g, "params": list(g["params"])}
                             for g in groups]
        for g in self.param_groups:
            for p in g["params"]:
                if not (p.is_floating_point() and p.device.type in ("cpu", "cuda", "mps", "xpu")):
                    raise RuntimeError(f"fused AdamW needs floating-point parameters on a CPU or GPU, "
                                       f"got {p.dtype} on {p.device}")
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self) -> None:
        for g in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
            for p in g["params"]:
                if p.grad is None:
                    continue
                st = self.state.get(p)
                if st is None:
                    st = self.state[p] = {"step": torch.zeros((), dtype=torch.float32, device=p.device),
                                          "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                          "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
                params.append(p)
                grads.append(p.grad)
                exp_avgs.append(st["exp_avg"])
                exp_avg_sqs.append(st["exp_avg_sq"])
                steps.append(st["step"])
            self._adam(params, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=None, capturable=self.capturable,
                       differentiable=False, fused=True, grad_scale=None, found_inf=None, has_complex=False,
                       decoupled_weight_decay=True, amsgrad=False, beta1=self.betas[0], beta2=self.betas[1],
                       lr=g["lr"], weight_decay=g["weight_decay"], eps=self.eps, maximize=False)


def adamw(params, lr: float, weight_decay: float, capturable: bool = False) -> FusedAdamW:
    """The optimiser of every training: PyTorch's fused AdamW (one pass over each parameter, not a
    dozen elementwise ops), as :class:`FusedAdamW` (no TorchDynamo import). ``params``: parameters
    or parameter groups. ``capturable`` lets a CUDA graph record its step; the fused kernel is the
    same either way (its step count already lives on the device), so the weights do not change."""
    return FusedAdamW(params, lr=lr, weight_decay=weight_decay, capturable=capturable)


class CapturedStep:
    """An optimisation step recorded once as a CUDA graph and replayed for every later batch of the
    same size: the forward pass, backward pass and AdamW's update then cost one graph launch
    instead of a few hundred kernel launches from Python (a small step on a GPU is bound by those
    launches, not by its arithmetic; docs/performance.md).

    ``step(idx)`` -> ``(names, values)`` is the plain step (:func:`run_epochs`). The first
    :data:`WARMUP` calls run it eagerly on a side stream, as PyTorch's whole-network capture asks
    (lazy initialisations, AdamW's state); the next call records it on a static index buffer and
    replays it, which is when that batch's update happens (recording runs nothing). Every replay
    runs the recorded kernels on the new batch's indices, so the arithmetic, and the weights, are
    those of the plain step. The returned values live in the graph's memory: read them before the
    next call.
    """

    WARMUP = 3

    def __init__(self, step: Callable[[torch.Tensor], tuple[list[str], torch.Tensor]], batch_shape,
                 device: torch.device | str):
        self.step, self.device = step, torch.device(device)
        shape = tuple(batch_shape) if isinstance(batch_shape, (list, tuple)) else (int(batch_shape),)
        self.idx = torch.empty(shape, dtype=torch.long, device=self.device)  # (batch,) or (fits, batch)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: tuple[list[str], torch.Tensor] | None = None
        self.warm = 0

    def __call__(self, idx: torch.Tensor) -> tuple[list[str], torch.Tensor]:
        if self.graph is None and self.warm < self.WARMUP:
            self.warm += 1
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                out = self.step(idx)
            torch.cuda.current_stream(self.device).wait_stream(side)
            return out
        self.idx.copy_(idx)
        if self.graph is None:
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.out = self.step(self.idx)
        self.graph.replay()
        return self.out


def compiled_loss(batch_loss: Callable[[torch.Tensor], Mapping[str, torch.Tensor]]):
    """``batch_loss`` compiled by ``torch.compile`` (TorchInductor, the whole function as one graph,
    static shapes): its forward pass and, through AOTAutograd, its backward pass become a few fused
    kernels (C++ on the CPU, Triton on a GPU) instead of one kernel per elementwise op. Compiled on
    its first call (seconds; Inductor's cache makes later processes faster); a function with a host
    read or a data-dependent shape is refused there (``fullgraph``), not split."""
    numerics.inductor_deterministic()  # deterministic() leaves Inductor unimported
    return torch.compile(batch_loss, fullgraph=True, dynamic=False)


def run_epochs(
    params: Iterable[torch.nn.Parameter],
    batch_loss: Callable[[torch.Tensor], Mapping[str, torch.Tensor]],
    n_items: int,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    seed: int | Sequence[int],
    log_: TrainLog | Sequence[TrainLog],
    phase: str = "train",
    desc: str = "train",
    progress: bool = True,
    device: torch.device | str = "cpu",
    after_step: Callable[[], None] | None = None,
    precision: str = "fp32",
    cuda_graph: bool = False,
    before_epoch: Callable[[torch.Tensor], None] | None = None,
    compile: bool = False,
) -> None:
    """AdamW over shuffled mini-batches of ``range(n_items)`` for ``epochs`` epochs.

    ``params`` are parameters or AdamW parameter groups (a group may set its own ``lr`` and
    ``weight_decay``).

    ``batch_loss(idx)`` returns a dict with the scalar to minimise under ``"loss"`` and any
    other scalars to log (already weighted); every logged value is averaged over the epoch's
    items (batch means weighted by batch size), so ``rho`` is the fraction of the epoch's
    triplets that were active. Shuffling uses its own generator seeded by ``seed``.

    Several fits at once (:meth:`dive_core.methods.base.TorchMethod.fit_together`): ``seed`` a list
    of S seeds and ``log_`` a list of S logs. Each fit shuffles with its own generator, as it would
    alone; ``batch_loss(idx)`` then takes the (S, b) indices of the S fits' batches and returns
    (S,) values per term (their ``"loss"`` is summed for the backward pass: each fit's parameters
    receive its own loss's gradient), and each fit's terms go to its own log.

    ``precision``: ``fp32``, or ``bf16`` to run ``batch_loss`` under bfloat16 autocast (matrix
    products in bf16; parameters, gradients and the optimiser stay fp32). The optimiser is
    :func:`adamw`.

    ``cuda_graph``: on a CUDA device, replay the full-size batches' steps from one recorded CUDA
    graph (:class:`CapturedStep`) instead of launching each kernel from Python; ``batch_loss`` must
    then be capturable (no host synchronisation, no data-dependent shapes, no CPU generator). The
    kernels, and so the weights, are those of the plain step. Ignored on other devices.

    ``before_epoch(order)``: called with the epoch's order of items (the (n_items,) permutation on
    ``device``; (S, n_items) for S fits), before its first step and outside any recorded step: what
    the steps need that depends only on which items come when (not on the weights) can be worked
    out there, with host reads, and the steps read it from fixed-shape tensors (SMEC's queue).

    ``compile``: the full-size batches' ``batch_loss`` through :func:`compiled_loss` (TorchInductor
    fuses the forward and backward passes' small elementwise kernels; with ``cuda_graph`` the graph
    records the fused kernels); a last, smaller batch runs eagerly, so only one shape is compiled.
    Fusion reorders some floating-point operations: the weights match the plain step's within a
    tested tolerance (tests/test_compiled_step.py), not bit for bit; the same inputs still give the
    same weights in every process on one machine.
    """
    from tqdm import tqdm

    # ``params``: parameters, or AdamW parameter groups (dicts whose own "lr" / "weight_decay"
    # override the defaults); frozen parameters are dropped.
    params = list(params)
    groups = [{"params": [p for p in params if not isinstance(p, dict)]}]
    groups += [dict(g, params=list(g["params"])) for g in params if isinstance(g, dict)]
    groups = [dict(g, params=[p for p in g["params"] if p.requires_grad]) for g in groups]
    graph = cuda_graph and torch.device(device).type in GRAPH_DEVICE_TYPES
    opt = adamw([g for g in groups if g["params"]], lr, weight_decay, capturable=graph)
    autocast = precision_context(precision, device)

    fused = compiled_loss(batch_loss) if compile else None

    def step(idx: torch.Tensor) -> tuple[list[str], torch.Tensor]:
        """One optimisation step on batch ``idx``: the logged terms' names and their values
        (float64, times the batch size, to be summed over the epoch)."""
        with autocast:
            out = (fused if fused is not None and idx.shape[-1] == batch_size else batch_loss)(idx)
        opt.zero_grad(set_to_none=True)
        (out["loss"].sum() if stacked else out["loss"]).backward()
        opt.step()
        if after_step:
            after_step()
        # one stacked vector per step (not three ops per logged term)
        shape = (len(seeds),) if stacked else ()
        return list(out), torch.stack([val.detach().reshape(shape).to(torch.float64)
                                       for val in out.values()]) * idx.shape[-1]

    stacked = isinstance(seed, (list, tuple))  # several fits: (S, b) batches, (S,) terms
    seeds = [int(s) for s in seed] if stacked else [int(seed)]
    logs = list(log_) if stacked else [log_]
    if len(logs) != len(seeds):
        raise ValueError(f"{desc}: {len(seeds)} seeds but {len(logs)} logs")
    captured = CapturedStep(step, (len(seeds), batch_size) if stacked else batch_size, device) if graph else None
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    first_epoch = len(logs[0].rows) + 1
    bar = tqdm(range(epochs), desc=f"{desc} x{len(seeds)}" if stacked else desc, unit="epoch", disable=not progress, mininterval=5.0)
    for e in bar:
        t0 = time.perf_counter()
        # Logged terms are summed on the device and read once per epoch: a float() per step
        # would wait for the device at every step. A non-finite loss is caught at the end of
        # the epoch (the sum is non-finite too), naming the epoch.
        keys: list[str] = []
        sums = None  # the logged terms of the epoch, one float64 vector in the order of ``keys``
        # cpu: one order on every device; copied to the device once per epoch, not once per step
        order = torch.stack([torch.randperm(n_items, generator=g) for g in gens]).to(device)
        if before_epoch is not None:
            before_epoch(order if stacked else order[0])
        for idx in order.split(batch_size, dim=1):
            idx = idx if stacked else idx[0]
            names, v = captured(idx) if captured is not None and idx.shape[-1] == batch_size else step(idx)
            if not keys:
                keys = names
            elif names != keys:
                raise ValueError(f"{desc}: batch_loss returned terms {names}, earlier {keys}")
            sums = v.clone() if sums is None else sums + v  # v may be a graph's output, rewritten by its next replay
        per_fit = sums.reshape(len(keys), -1).T.tolist() if sums is not None else [None] * len(seeds)
        seconds = time.perf_counter() - t0  # after the read above, which waits for the device
        for fit_seed, fit_log, values in zip(seeds, logs, per_fit):
            means = dict(zip(keys, (float(x) / n_items for x in values))) if values is not None else {"loss": 0.0}
            if not math.isfinite(means["loss"]):
                which = f" (the fit of seed {fit_seed})" if stacked else ""
                raise FloatingPointError(f"{desc}: non-finite loss in epoch {first_epoch + e}{which}")
            row = {"epoch": first_epoch + e, "phase": phase}
            row.update({k: v for k, v in means.items() if k != "loss"})
            row["total"] = means["loss"]
            row["seconds"] = seconds
            fit_log.add(row)
        bar.set_postfix(loss=f"{row['total']:.4f}")
    bar.close()


def write_log_tsv(path, log_: TrainLog) -> None:
    """The per-epoch log as TSV (:data:`dive_core.records.TABLES` ``train_log``, written
    atomically): epoch, phase, then the logged terms, total and seconds as they first appear, floats
    with 6 significant digits; a term a row lacks is an empty cell. Read by
    :func:`dive_core.records.read_train_log` (no torch)."""
    from . import records

    records.write_tsv("train_log", path, log_.rows, columns=log_.columns() or None)


def fit_data(emb, train_qids: Sequence[str], triplets_path=None, device: str = "cpu",
             doc_ids: Sequence[str] | None = None) -> FitData:
    """FitData for one training stage: the corpus (or only its documents ``doc_ids``: the known
    documents of the arrival split, so no other document reaches a fit), only the stage's training
    queries (evaluated queries never reach a method's ``fit``), and the triplets mapped to rows."""
    from .triplets import read_triplets

    if doc_ids is None:
        docs, drow = emb.docs, None
    else:
        doc_ids = list(doc_ids)
        docs, drow = emb.docs[emb.doc_positions(doc_ids)], {d: i for i, d in enumerate(doc_ids)}
    queries = emb.query_rows(list(train_qids))
    if triplets_path is None:
        return FitData.without_triplets(docs, queries, device)
    t = read_triplets(triplets_path)
    qrow = {q: i for i, q in enumerate(train_qids)}
    drow = emb.doc_index() if drow is None else drow
    try:
        tq = [qrow[q] for q in t.query_ids]
    except KeyError as exc:
        raise ValueError(f"{triplets_path}: query {exc.args[0]!r} is not a training query of this stage") from None
    try:
        tp = [drow[d] for d in t.pos_ids]
        tn = [drow[d] for d in t.neg_ids]
    except KeyError as exc:
        raise ValueError(f"{triplets_path}: document {exc.args[0]!r} " + (
            "has no embedding" if doc_ids is None else "is not a document this fit may see (it arrives after "
            "training)")) from None
    return FitData.from_arrays(docs, queries, tq, tp, tn, t.pos_scores, t.neg_scores, device)
