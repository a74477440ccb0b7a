"""The HDF5 files (:data:`LAYOUTS`: the datasets, their types and shapes), checked by
:func:`check_h5`, their datasets made by :func:`h5_dataset`; their attributes are the record of
the same kind (:mod:`.base`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .base import RecordError, _remedy, _shown


@dataclass(frozen=True)
class Dataset:
    """One HDF5 dataset: its path in the file, its type (``"str"``: strings, written as
    variable-length UTF-8; else a numpy type) and its shape, one name per axis: axes of the same
    name have the same length in a file."""

    name: str
    dtype: str
    shape: tuple[str, ...]
    what: str  # what messages call its rows


LAYOUTS = {
    # rows of corpus/ids name the rows of corpus/emb (the same for queries); dim: the backbone's
    "embeddings": (Dataset("corpus/ids", "str", ("n_docs",), "doc ids"),
                   Dataset("corpus/emb", "float32", ("n_docs", "dim"), "doc vectors"),
                   Dataset("queries/ids", "str", ("n_queries",), "query ids"),
                   Dataset("queries/emb", "float32", ("n_queries", "dim"), "query vectors")),
    # a part's vectors, their ids and their positions among the part's inputs (rows)
    "embedding_shard": (Dataset("ids", "str", ("n_rows",), "ids"),
                        Dataset("rows", "int64", ("n_rows",), "row numbers"),
                        Dataset("emb", "float32", ("n_rows", "dim"), "vectors")),
}
LAYOUT_ATTRS = ("dim",)  # an axis length that is also an attribute of the file must equal it


def h5_dataset(kind: str, f, name: str, data: Any = None, shape: tuple[int, ...] | None = None):
    """Create dataset ``name`` of a ``kind`` file (an open, writable h5py file) with the type
    :data:`LAYOUTS` gives it, from ``data`` or empty of ``shape``; its group is made if missing."""
    import h5py
    import numpy as np

    spec = next((d for d in LAYOUTS[kind] if d.name == name), None)
    if spec is None:
        raise ValueError(f"a {kind} file has no dataset {name!r}; its datasets: {[d.name for d in LAYOUTS[kind]]}")
    group, _, leaf = name.rpartition("/")
    parent = f if not group else (f[group] if group in f else f.create_group(group))
    if spec.dtype == "str":
        dtype = h5py.string_dtype("utf-8")
        if data is not None:
            data = np.asarray(list(data), dtype=object)
    else:
        dtype = np.dtype(spec.dtype)
    return parent.create_dataset(leaf, data=data, shape=shape, dtype=dtype, track_times=False)


def check_h5(kind: str, f, path: str | os.PathLike) -> dict[str, int]:
    """The axis lengths (``{"n_docs": ..., "dim": ...}``) of an open ``kind`` HDF5 file if its
    datasets are those of :data:`LAYOUTS`: present, of their type, with as many axes, axes of one
    name of one length, and a length that is also a file attribute (:data:`LAYOUT_ATTRS`) equal to
    it; else a :class:`RecordError` naming ``path``. Reads no data."""
    import h5py
    import numpy as np

    fix = _remedy(kind, path)
    sizes: dict[str, tuple[int, Dataset, tuple, int]] = {}
    for spec in LAYOUTS[kind]:
        ds = f.get(spec.name)
        if not isinstance(ds, h5py.Dataset):
            raise RecordError(f"{path}: not a valid {kind} file: no dataset {spec.name}; {fix}")
        if spec.dtype == "str":
            ok = h5py.check_string_dtype(ds.dtype) is not None
        else:
            want = np.dtype(spec.dtype)
            ok = ds.dtype.kind == want.kind and ds.dtype.itemsize == want.itemsize
        if not ok:
            raise RecordError(f"{path}: not a valid {kind} file: {spec.name} holds {ds.dtype} values, "
                              f"{'strings' if spec.dtype == 'str' else spec.dtype} expected; {fix}")
        if len(ds.shape) != len(spec.shape):
            raise RecordError(f"{path}: not a valid {kind} file: {spec.name} has shape {ds.shape}, a "
                              f"{len(spec.shape)}-D array ({' x '.join(spec.shape)}) expected; {fix}")
        for axis, (name, n) in enumerate(zip(spec.shape, ds.shape)):
            if name not in sizes:
                sizes[name] = (n, spec, ds.shape, axis)
                continue
            m, other, other_shape, other_axis = sizes[name]
            if m != n:
                def size(k, d, ax):
                    return f"{k} {d.what}" if ax == 0 else f"{d.what} of {name} {k}"
                raise RecordError(f"{path}: not a valid {kind} file: {size(m, other, other_axis)} but "
                                  f"{size(n, spec, axis)} ({other.name}: {other_shape}, {spec.name}: {ds.shape}); "
                                  f"{fix}")
    out = {name: v[0] for name, v in sizes.items()}
    for name in LAYOUT_ATTRS:
        if name in out and name in f.attrs:
            try:
                same = int(f.attrs[name]) == out[name]
            except (TypeError, ValueError):
                same = False
            if not same:
                raise RecordError(f"{path}: not a valid {kind} file: attribute {name} = {_shown(f.attrs[name])} but "
                                  f"the vectors have {name} {out[name]}; {fix}")
    return out
