"""The one interface every compression method implements, and the method registry.

A method is a class registered under a ``type`` name. It is constructed from the input
dimension ``d``, the output dimension ``k``, its resolved hyperparameters (from the config;
the class only lists their names) and the optimisation seed; it can ``fit`` on a
:class:`~dive_core.training.FitData`, ``compress`` any (n, d) matrix of normalised frozen
embeddings to L2-normalised (n, k) vectors, and be saved to / loaded from a checkpoint.

Adding a method = its :class:`~dive_core.methods.specs.MethodSpec` (whether it is supervised, its
hyperparameter names and value checks, known without torch), one new module in
``dive_core/methods/`` that defines a registered subclass (modules are discovered automatically),
and one entry under ``methods:`` in the config.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .. import records
from ..atomic import atomic_path
from ..training import FitData, TrainLog, check_precision, run_epochs, set_seed
from .specs import SIDES, SPECS, stored_bytes

METHODS: dict[str, type["Method"]] = {}


def register(cls: type["Method"]) -> type["Method"]:
    """Register an implementation; it takes ``supervised`` and ``hyperparameters`` from its spec."""
    if not cls.type:
        raise TypeError(f"{cls.__name__} has no type name")
    if cls.type not in SPECS:
        raise TypeError(f"method type {cls.type!r} has no MethodSpec (dive_core.methods.specs.SPECS / add_spec)")
    if cls.type in METHODS and METHODS[cls.type] is not cls:
        raise TypeError(f"method type {cls.type!r} registered twice")
    cls.supervised = SPECS[cls.type].supervised
    cls.hyperparameters = SPECS[cls.type].hyperparameters
    METHODS[cls.type] = cls
    return cls


def discover() -> dict[str, type["Method"]]:
    """Import every module of this package so that each registers its method."""
    pkg = Path(__file__).parent
    for mod in pkgutil.iter_modules([str(pkg)]):
        if not mod.name.startswith("_") and mod.name not in ("base", "specs"):
            importlib.import_module(f"{__package__}.{mod.name}")
    return METHODS


def method_class(type_name: str) -> type["Method"]:
    discover()
    if type_name not in METHODS:
        raise KeyError(f"unknown method type {type_name!r}; known: {sorted(METHODS)}")
    return METHODS[type_name]


NORMALIZE_EPS = 1e-12  # F.normalize's default


def normalize(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=-1, eps=NORMALIZE_EPS)


# float32 intermediates of one compress batch (see Method.compress), by device type: on a CPU a batch
# whose hidden layer stays in cache runs the products at 0.96 of the machine's rate against 0.78 for
# 256 MB batches (768 -> 2048 -> 64, 2 EPYC cores; benchmarks/compress_speed.py); a GPU wants large ones
COMPRESS_BATCH_BYTES = {"cpu": 16 << 20, "cuda": 256 << 20}


class Method:
    type: ClassVar[str] = ""
    # from the type's MethodSpec (set by register)
    hyperparameters: ClassVar[tuple[str, ...]] = ()
    supervised: ClassVar[bool] = False
    #: True when queries and documents go through different maps (``transform_query`` overridden)
    asymmetric: ClassVar[bool] = False

    def __init__(self, d: int, k: int, hparams: Mapping[str, Any] | None = None, seed: int = 0,
                 device: str = "cpu", precision: str = "fp32"):
        hparams = dict(hparams or {})
        missing = [h for h in self.hyperparameters if h not in hparams]
        unknown = [h for h in hparams if h not in self.hyperparameters]
        if missing or unknown:
            raise ValueError(f"method {self.type!r}: missing hyperparameters {missing}, unknown {unknown}")
        SPECS[self.type].validate(d, k, hparams)
        self.d, self.k, self.hp, self.seed, self.device = d, k, hparams, seed, device
        # of training's forward passes (inference is always fp32)
        self.precision = check_precision(precision, f"method {self.type!r}: ")
        self.meta: dict[str, Any] = {}  # provenance stored with / read from a checkpoint
        self.build()

    @property
    def active(self) -> int | None:
        """The non-zeros a compressed vector keeps when :meth:`compress` returns k-sparse rows (csr;
        its spec's ``active``), else None. Such rows are stored as (index, fp16 value) pairs and
        searched as sparse matrices (:mod:`dive_core.sparse`)."""
        count = SPECS[self.type].active
        return None if count is None else count(self.hp)

    @property
    def sparse_codes(self) -> bool:
        return self.active is not None

    def bytes_per_vector(self) -> int:
        """Bytes one compressed vector takes as stored (:func:`dive_core.methods.specs.stored_bytes`)."""
        return stored_bytes(self.type, self.k, self.hp)

    # -- to override -------------------------------------------------------------------
    def build(self) -> None:
        """Create parameters (called from ``__init__``, after seeding by the caller)."""

    def fit(self, data: FitData, log: TrainLog, progress: bool = True) -> None:
        """Train on ``data``; default: nothing to learn."""

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        """(n, d) normalised frozen embeddings -> (n, k), before the final normalisation: the map
        of documents, and of queries too unless the method overrides :meth:`transform_query`."""
        raise NotImplementedError

    def reconstruction_error(self, x: torch.Tensor) -> torch.Tensor | None:
        """(n,) distance of each normalised frozen row from what the document map can represent
        (``|x - reconstruction(x)|``), for a label-free map (the drift guard,
        :mod:`dive_core.compress.drift`); None for a method without a reconstruction."""
        return None

    def document_map(self) -> "Method":
        """The method that maps documents, alone (the one whose :meth:`reconstruction_error` this
        method reports): the method itself; a query-side method's label-free document map."""
        return self

    def transform_query(self, x: torch.Tensor) -> torch.Tensor:
        """The query map (default: the document map). An asymmetric method (:mod:`.query_side`)
        maps queries into the document map's space by a map of their own."""
        return self.transform(x)

    def layers(self, side: str = "document") -> list:
        """The map of ``side`` (:meth:`transform`, or :meth:`transform_query` for ``query``) as plain
        layers (:mod:`dive_core.layers`: affine maps, ReLU networks, normalisations), without the
        normalisation of its input and output; an export writes them as sentence-transformers' own
        modules. A method whose map no such layers express raises NotImplementedError saying why."""
        raise NotImplementedError(f"method {self.type!r} states no layers")

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {}

    def check_loaded(self, source: str) -> None:
        """Called by :meth:`load` once state and record are read: refuse a checkpoint whose parts
        do not belong together (``source`` names the file). Default: nothing to check."""

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        if state:
            raise ValueError(f"method {self.type!r} has no state, got keys {sorted(state)}")

    # -- shared ------------------------------------------------------------------------
    @torch.no_grad()
    def compress(self, x: np.ndarray, batch_size: int | None = None, out: np.ndarray | None = None,
                 side: str = "document") -> np.ndarray:
        """L2-normalised (n, k) float32 vectors for (n, d) normalised frozen embeddings of ``side``
        (``document``: :meth:`transform`; ``query``: :meth:`transform_query`), written
        into ``out`` if given (may be ``x`` itself when k = d: each batch is read before its rows
        are overwritten, so an uncompressed method needs no second copy of the corpus).
        ``batch_size``: rows per batch; by default as many as keep one batch's intermediates
        (input, the adapter's hidden layer and its activation, output) within
        ``COMPRESS_BATCH_BYTES`` of the device type, so compressing a corpus adds a bounded amount of
        memory."""
        if batch_size is None:
            width = self.d + self.k + 2 * int(self.hp.get("hidden", self.d))
            budget = COMPRESS_BATCH_BYTES.get(torch.device(self.device).type, COMPRESS_BATCH_BYTES["cuda"])
            batch_size = max(256, budget // (4 * width))
        if side not in SIDES:
            raise ValueError(f"{self.type}: side must be one of {list(SIDES)}, got {side!r}")
        transform = self.transform_query if side == "query" else self.transform
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.d:
            raise ValueError(f"{self.type}: expected an (n, {self.d}) matrix, got {x.shape}")
        if out is None:
            out = np.empty((x.shape[0], self.k), dtype=np.float32)
        elif out.shape != (x.shape[0], self.k) or out.dtype != np.float32:
            raise ValueError(f"{self.type}: out must be a float32 {(x.shape[0], self.k)} array, got "
                             f"{out.dtype} {out.shape}")
        cpu = torch.device(self.device).type == "cpu"
        for s in range(0, x.shape[0], batch_size):
            xb = torch.as_tensor(x[s:s + batch_size], device=self.device)  # on the CPU: a view of x
            y = transform(xb)
            if cpu:  # normalize(y), bit for bit, divided straight into out's rows (in place when out is x)
                torch.div(y, y.norm(2, dim=-1, keepdim=True).clamp_min(NORMALIZE_EPS),
                          out=torch.from_numpy(out[s:s + batch_size]))
            else:
                out[s:s + batch_size] = normalize(y).float().cpu().numpy()
        return out

    def state_sha256(self) -> str:
        """sha256 of the learned state alone (names, dtypes, shapes, values): equal for equal
        weights, unlike the checkpoint file, which also records timings and provenance."""
        import hashlib

        h = hashlib.sha256()
        for name, t in sorted(self.state_dict().items()):
            t = t.detach().cpu().contiguous()
            h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.float().numpy().tobytes())
        return h.hexdigest()

    def save(self, path: str | Path, meta: Mapping[str, Any] | None = None) -> None:
        """Write the checkpoint record (:mod:`dive_core.records`, kind ``checkpoint``); ``meta``: the
        training job's provenance (:func:`dive_core.records.checkpoint_meta`)."""
        obj = records.stamp("checkpoint", {
            "type": self.type,
            "d": self.d,
            "k": self.k,
            "seed": self.seed,
            "hparams": dict(self.hp),
            "state": {n: t.detach().cpu().contiguous() for n, t in self.state_dict().items()},
            "state_sha256": self.state_sha256(),
            "meta": {**self.meta, **dict(meta or {})},  # what the method recorded + the caller's
        })
        with atomic_path(path, suffix=".pt.tmp") as tmp:
            torch.save(obj, tmp)

    @staticmethod
    def load(path: str | Path, device: str = "cpu") -> "Method":
        try:
            obj = torch.load(path, map_location=device, weights_only=True)
        except Exception as exc:  # noqa: BLE001 - re-raised with the file name
            raise records.RecordError(f"{path}: cannot read checkpoint: {exc}") from exc
        obj = records.check("checkpoint", obj, path)
        m = method_class(obj["type"])(obj["d"], obj["k"], obj["hparams"], obj["seed"], device)
        m.load_state_dict(obj["state"])
        m.meta = dict(obj["meta"])
        m.check_loaded(str(path))
        return m


class TorchMethod(Method):
    """A method whose parameters live in ``self.net`` (an ``nn.Module``) and that trains with
    the shared loop over triplet mini-batches; subclasses define ``build`` and ``batch_loss``."""

    net: torch.nn.Module
    #: whether :meth:`batch_loss` can be recorded in a CUDA graph (no host synchronisation, no
    #: data-dependent shapes, no CPU generator): on a GPU its steps are then replayed from one graph
    #: (:class:`dive_core.training.CapturedStep`)
    cuda_graph: ClassVar[bool] = False

    #: whether :meth:`batch_loss` is compiled (:func:`dive_core.training.compiled_loss`): off by
    #: default, the weights then differ from the plain step's within rounding; on where a
    #: benchmark or a study asks (benchmarks/captured_step.py ``--compile``), for the methods whose
    #: compiled step is tested (DIVE, tests/test_compiled_step.py)
    compile_step: ClassVar[bool] = False

    #: whether several fits of this type (seeds) may train together (:meth:`fit_together`): its
    #: ``fit`` is the plain one and its ``batch_loss`` a function of ``self.net``'s tensors that
    #: ``torch.func.vmap`` maps (no random op, no in-place update of module state)
    stackable: ClassVar[bool] = False

    def graph_capturable(self) -> bool:
        """Whether this instance's training step may be recorded as a CUDA graph."""
        return self.cuda_graph

    @staticmethod
    def fit_together(methods: Sequence["TorchMethod"], data: FitData, logs: Sequence[TrainLog],
                     progress: bool = True) -> None:
        """Train several fits of one method (the same type and hyperparameters, each built with its
        own seed) in one process, as the shared loop trains one: their parameters stacked
        (``torch.func.stack_module_state``), every step's ``batch_loss`` of all fits in one
        ``torch.func.vmap`` call over their stacked parameters and their own batches, each fit
        shuffling with its own generator (its seed's, :func:`~dive_core.training.run_epochs`), and
        AdamW over the stacked tensors (elementwise, so each fit's slice is updated as it would be
        alone). On a GPU the small steps of several fits then share each kernel launch. Each fit's
        weights and log end where its own ``fit`` would put them, up to the rounding of batched
        kernels (tests/test_fit_together.py)."""
        from torch.func import functional_call, stack_module_state, vmap

        first = methods[0]
        same = {(type(m), m.d, m.k, repr(sorted(m.hp.items())), m.precision, str(m.device)) for m in methods}
        if len(same) != 1:
            raise ValueError("fit_together: the fits differ in type, dimensions, hyperparameters, precision or "
                             "device; only their seeds may differ")
        if not type(first).stackable or type(first).fit is not TorchMethod.fit:
            raise ValueError(f"fit_together: method {first.type!r} does not train as a plain stack of fits")
        if len({m.seed for m in methods}) != len(methods):
            raise ValueError("fit_together: two fits share a seed")
        for m in methods:
            m.net.to(data.device).train()
        params, buffers = stack_module_state([m.net for m in methods])
        shell = torch.nn.Module()  # calls first.batch_loss with first.net's tensors swapped for one fit's slice
        shell.net = first.net
        shell.forward = lambda idx: first.batch_loss(data, idx)

        def one(p, b, idx):
            return functional_call(shell, {**{f"net.{k}": v for k, v in p.items()},
                                           **{f"net.{k}": v for k, v in b.items()}}, (idx,))

        stacked_loss = vmap(one)  # over the fits: their parameter slices, buffers and (b,) batches
        first.train_phase(data, list(logs), first.hp["epochs"], first.hp["lr"],
                          lambda _, idx: stacked_loss(params, buffers, idx), list(params.values()),
                          progress=progress, seed=[m.seed for m in methods], cuda_graph=first.graph_capturable(),
                          compile=first.compile_step)
        with torch.no_grad():
            for i, m in enumerate(methods):
                m.net.load_state_dict({**{k: v[i] for k, v in params.items()}, **{k: v[i] for k, v in buffers.items()}})
                m.net.eval()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.net.state_dict())

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        self.net.load_state_dict(state)

    def batch_loss(self, data: FitData, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def n_items(self, data: FitData) -> int:
        """How many items one epoch iterates over (triplets by default)."""
        return data.n_triplets

    def fit(self, data: FitData, log: TrainLog, progress: bool = True) -> None:
        self.train_phase(data, log, self.hp["epochs"], self.hp["lr"], self.batch_loss,
                         self.net.parameters(), progress=progress)

    def train_phase(self, data, log, epochs, lr, loss_fn, params, phase="train", progress=True,
                    after_step=None, n_items: int | None = None, seed=None, cuda_graph: bool | None = None,
                    before_epoch=None, compile: bool | None = None) -> None:
        """One call of the shared loop; ``n_items`` defaults to :meth:`n_items`, ``seed`` to this fit's
        (:meth:`fit_together`: the stacked fits' seeds, ``log`` their logs), ``cuda_graph`` to whether
        ``loss_fn`` is this method's capturable ``batch_loss``, ``compile`` to :attr:`compile_step` for
        its ``batch_loss``; ``before_epoch`` as in :func:`~dive_core.training.run_epochs`."""
        self.net.to(data.device).train()
        if cuda_graph is None:
            cuda_graph = loss_fn == self.batch_loss and after_step is None and self.graph_capturable()
        if compile is None:
            compile = loss_fn == self.batch_loss and self.compile_step
        run_epochs(
            params, lambda idx: loss_fn(data, idx), self.n_items(data) if n_items is None else n_items,
            epochs=int(epochs), batch_size=int(self.hp["batch_size"]), lr=float(lr),
            weight_decay=float(self.hp["weight_decay"]), seed=self.seed if seed is None else seed, log_=log,
            phase=phase, desc=f"{self.type}:{phase}", progress=progress, device=data.device,
            after_step=after_step, precision=self.precision, cuda_graph=cuda_graph, before_epoch=before_epoch,
            compile=compile,
        )
        self.net.eval()


def new_method(type_name: str, d: int, k: int, hparams: Mapping[str, Any], seed: int,
               device: str = "cpu", precision: str = "fp32") -> Method:
    """Seed, then construct (parameter initialisation is part of what the seed fixes)."""
    set_seed(seed)
    return method_class(type_name)(d, k, hparams, seed, device, precision)
