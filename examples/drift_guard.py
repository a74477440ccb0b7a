"""The drift guard on the arrival split: a compressor fitted on the known documents of a collection,
then asked to compress its known documents, the documents that arrived after training, and the
documents of another collection (docs/compressors.md#the-drift-guard).

    .venv/bin/python examples/drift_guard.py CHECKPOINT [FOREIGN_EMBEDDINGS] [--out DIR]

CHECKPOINT is an arrival-protocol run of the workflow (``results/<dataset>/<backbone>/<method>-arrival/
k<k>/final/seed<seed>/model.pt``, trained at or after the commit that records fit statistics);
its dataset's ``embeddings.h5`` and ``arrival.json`` are read from the workflow layout.
FOREIGN_EMBEDDINGS is another collection's ``embeddings.h5`` of the same backbone (its corpus group is
compressed). The vector sets are written as ``.npy`` files (raw vectors, with ids) into ``--out``
(default: a temporary folder), and each goes through ``dive-compress`` as a user would run it; its
drift reports are printed and gathered into ``--out/drift.json``.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

from dive_core import compress as C
from dive_core import records, splits
from dive_core.methods import Method
from dive_core.vectors import VectorWriter


def write_subset(h5: Path, ids: list[str], out: Path) -> Path:
    """The raw corpus vectors of ``ids`` from a workflow ``embeddings.h5``, as ``out`` (.npy + ids)."""
    with h5py.File(h5, "r") as f:
        all_ids = [i.decode() if isinstance(i, bytes) else str(i) for i in f["corpus/ids"][:]]
        emb = f["corpus/emb"]
        pos = {d: i for i, d in enumerate(all_ids)}
        rows = np.sort(np.asarray([pos[d] for d in ids]))
        x = emb[rows] if len(rows) else np.zeros((0, emb.shape[1]), np.float32)
        ids = [all_ids[r] for r in rows]
    with VectorWriter(out, len(ids), x.shape[1]) as w:
        w.write(ids, np.asarray(x, np.float32))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("foreign", type=Path, nargs="?")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    meta = Method.load(args.checkpoint).meta
    if "fit_statistics" not in meta:
        raise SystemExit(f"{args.checkpoint}: no fit statistics in its record (trained before they were recorded)")
    res = Path("results") / meta["dataset"]
    h5 = res / meta["backbone"] / "embeddings.h5"
    arrival = records.read("arrival", res / "arrival.json")
    with h5py.File(h5, "r") as f:
        doc_ids = [i.decode() if isinstance(i, bytes) else str(i) for i in f["corpus/ids"][:]]
    known = splits.known_docs(doc_ids, arrival)
    arriving = sorted(set(doc_ids) - set(known))
    out = args.out or Path(tempfile.mkdtemp(prefix="drift-"))
    out.mkdir(parents=True, exist_ok=True)
    sets = {"known": write_subset(h5, known, out / "known.npy"),
            "arriving": write_subset(h5, arriving, out / "arriving.npy")}
    if args.foreign:
        with h5py.File(args.foreign, "r") as f:
            ids = [i.decode() if isinstance(i, bytes) else str(i) for i in f["corpus/ids"][:]]
        sets["foreign"] = write_subset(args.foreign, ids, out / "foreign.npy")
    reports = {}
    for name, path in sets.items():
        print(f"--- {name}: dive-compress {args.checkpoint} {path}", file=sys.stderr)
        rc = C.main([str(args.checkpoint), str(path), str(out / f"{name}-compressed.npy"), "--quiet",
                     "--drift-report", str(out / f"{name}.drift.json")])
        if rc:
            return rc
        reports[name] = json.loads((out / f"{name}.drift.json").read_text())[0]
    (out / "drift.json").write_text(json.dumps({"checkpoint": str(args.checkpoint), "sets": reports}, indent=2))
    print(f"{out / 'drift.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
