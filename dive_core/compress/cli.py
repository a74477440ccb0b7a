"""The command ``dive-compress`` (the package's docstring says what it does; ``python -m dive_core.compress``
runs it too, through ``__main__.py``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .. import numerics
from ..sparse import SPARSE_ENCODING
from ..vector_checks import option
from ..vectors import ENCODINGS, ID_COLUMN, VECTOR_COLUMN, VectorFileError, vector_format
from .errors import CompressError
from .files import _check_output, open_sets
from .index import TRAIN_SEED, TRAIN_SIZE, index_options, write_faiss_index
from .jobs import compress_file
from .model import describe, load_model, provenance


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="dive-compress",
        description="Compress a vector file with a trained compressor: INPUT's rows (raw backbone vectors, "
                    "L2-normalised here as the workflow does) -> OUTPUT, in chunks, in bounded memory. Formats by "
                    "extension: .parquet/.pq (id column + vector column), .npy (+ NAME.ids.txt), .h5/.hdf5 "
                    "(ids + emb datasets, at the root or in groups such as corpus/queries).")
    ap.add_argument("model", help="a trained compressor: a workflow checkpoint (results/.../model.pt) or an "
                                  "exported folder (python -m dive_core.export)")
    ap.add_argument("input", help="the vector file to compress")
    ap.add_argument("output", help="the file to write (format by its extension); written only when complete")
    ap.add_argument("--encoding", choices=(*ENCODINGS, SPARSE_ENCODING),
                    help="how the compressed vectors are stored: float32 (the default for a dense compressor), "
                         "float16, or int8 = FAISS SQ8 codes with per-coordinate ranges over the whole input (in "
                         "the file's metadata); sparse (the default for a k-sparse compressor, csr): each code's "
                         "(uint16 index, fp16 value) pairs, Parquet only, read back by dive_core.sparse.read_codes")
    ap.add_argument("--faiss", metavar="PATH", help="also write a FAISS index of OUTPUT (row i = row i): "
                                                    "IndexFlatIP for float32, the scalar quantizer for float16/int8")
    ap.add_argument("--index", metavar="FACTORY",
                    help="with --faiss: the index FAISS's index_factory builds from this string (e.g. 'OPQ16,PQ16', "
                         "'IVF256,PQ16', 'HNSW32'; inner product) instead of the flat one, trained on a seeded sample "
                         "of OUTPUT's rows and filled chunk by chunk; recorded in OUTPUT's metadata (faiss_index)")
    ap.add_argument("--faiss-train-size", type=int, default=TRAIN_SIZE, metavar="ROWS",
                    help=f"rows of the --index training sample (default {TRAIN_SIZE:,}; every row when fewer)")
    ap.add_argument("--faiss-seed", type=int, default=TRAIN_SEED, metavar="SEED",
                    help=f"seed of the sample's numpy Generator (default {TRAIN_SEED})")
    ap.add_argument("--side", choices=("document", "query"), default="document",
                    help="which map of an asymmetric compressor (query_side) to apply: document (the default: a "
                         "corpus) or query; a symmetric compressor maps both alike")
    ap.add_argument("--drift-report", metavar="PATH",
                    help="also write the drift guard's report (per input set) as JSON to PATH")
    ap.add_argument("--group", help="HDF5 input: compress only this group (default: the root, else every group)")
    ap.add_argument("--id-column", default=ID_COLUMN,
                    help=f"Parquet input: the id column (kept in OUTPUT; default {ID_COLUMN})")
    ap.add_argument("--vector-column", default=VECTOR_COLUMN,
                    help=f"Parquet input: the vector column (default {VECTOR_COLUMN})")
    ap.add_argument(option("zero"), action="store_true",
                    help="compress all-zero input rows too (refused by default: such a row has no direction, and "
                         "comes out as a unit vector that means nothing); the output's record says so")
    ap.add_argument(option("duplicate"), action="store_true",
                    help="compress an input whose ids repeat (refused by default, naming the rows); the output's "
                         "record says so")
    ap.add_argument("--rows", type=int, help="rows compressed at once (default: from the compressor's size)")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's own)")
    ap.add_argument("--device", default="cpu", help="torch device (default cpu)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    try:
        if args.rows is not None and args.rows < 1:
            raise CompressError(f"--rows {args.rows}: must be at least 1")
        try:
            vector_format(args.output)  # before any work
        except VectorFileError as exc:
            raise CompressError(str(exc)) from None
        sets = open_sets(args.input, args.group, args.id_column, args.vector_column)
        numerics.warm_vector_math()  # before any parallel region: the same bytes in every process
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        method = load_model(args.model, args.device)
        args.encoding = args.encoding or (SPARSE_ENCODING if method.sparse_codes else "float32")
        if args.faiss and args.encoding == SPARSE_ENCODING:
            raise CompressError("--faiss: FAISS holds dense vectors; search sparse codes with "
                                "dive_core.sparse.SparseCorpus(dive_core.sparse.read_codes(OUTPUT)[1])")
        if args.index is not None and not args.faiss:
            raise CompressError(f"--index {args.index!r}: names the index of --faiss PATH; give both")
        print(describe(provenance(method, args.side)), file=sys.stderr)
        _check_output(Path(args.output), sets)
        index = index_options(args.index, args.faiss_train_size, args.faiss_seed, method.k, sets)
        t0 = time.perf_counter()
        drift: list = []
        out = compress_file(method, args.input, args.output, args.encoding, group=args.group,
                            id_column=args.id_column, vector_column=args.vector_column, rows=args.rows,
                            device=args.device, progress=not args.quiet, side=args.side, drift=drift,
                            allow_zero_rows=args.allow_zero_rows,
                            allow_duplicate_ids=args.allow_duplicate_ids, faiss_index=index)
        seconds = time.perf_counter() - t0
        n = sum(vf.n for vf in sets)
        print(f"{out}: {n} vectors {method.d} -> {method.k} dimensions, {args.encoding}, in {seconds:.1f} s "
              f"({n / max(seconds, 1e-9):.0f} vectors/s)")
        reports = _drift_reports(drift, args)
        if args.drift_report:
            import json

            from ..atomic import atomic_open

            with atomic_open(args.drift_report, "w", encoding="utf-8") as fh:
                json.dump(reports, fh, indent=2)
        if args.faiss:
            t0 = time.perf_counter()
            path = write_faiss_index(out, args.faiss, progress=not args.quiet)
            what = f"FAISS index {args.index!r} (trained on a sample of {args.faiss_train_size} rows at most, seed " \
                   f"{args.faiss_seed})" if index else "FAISS index"
            print(f"{path}: {what} of {out}, {path.stat().st_size} bytes, in {time.perf_counter() - t0:.1f} s")
    except (CompressError, VectorFileError) as exc:  # a row the reader refuses: its message names the file
        print(f"dive-compress: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _drift_reports(drift: list, args) -> list[dict]:
    """Print the drift guard's report of each input set (or why there is none); return them."""
    from .drift import describe

    if args.side != "document":
        print("drift guard: not applied to the query side", file=sys.stderr)
        return []
    if not drift:
        print("drift guard: this compressor's record holds no fit statistics (trained before they were recorded)",
              file=sys.stderr)
        return []
    out = []
    for vf, monitor in drift:
        where = f"{vf.path}" + (f" ({vf.group})" if vf.group else "")
        report = monitor.report()
        print(describe(report, where), file=sys.stderr)
        out.append({"input": where, **report})
    return out


def code_index(checkpoint: str | Path, embeddings: str | Path, encoding: str, vectors: str | Path,
               index: str | Path, quantizer_settings: dict | None = None, threads: int | None = None) -> dict:
    """The corpus of a workflow embedding file (``embeddings``, group ``corpus``) through the compressor
    of ``checkpoint`` into ``vectors`` and the FAISS index of one frontier code (``encoding``: float32,
    float16, sq8, binary or an index quantizer of :mod:`dive_core.quantizers`) into ``index``, made as
    ``dive-compress`` makes them: returns ``{"command": the dive-compress arguments (None for a
    1-bit code, which dive-compress does not write), "factory": the FAISS factory string or None}``.

    A 1-bit code (``binary``) has no float index: its sign codes go into FAISS's ``IndexBinaryFlat``
    (what the frontier searched), written beside the float32 vectors. A k-sparse code is refused:
    dive-compress stores it as (index, fp16 value) pairs (``--encoding sparse``), not in FAISS."""
    from .. import quantizers as Q
    from ..atomic import atomic_path
    from ..vectors import open_vectors
    from .model import _method

    store = {"float32": "float32", "float16": "float16", "sq8": "int8", "binary": "float32"}
    if encoding == SPARSE_ENCODING:
        raise CompressError("a k-sparse code has no FAISS index: dive-compress --encoding sparse stores its "
                            "(index, fp16 value) pairs, searched exactly (dive_core.sparse)")
    factory = None
    if Q.is_quantizer(encoding):
        factory = Q.factory_string(encoding, _method(checkpoint, "cpu").k)
    elif encoding not in store:
        raise CompressError(f"encoding {encoding!r}: expected one of {sorted(store)} or an index quantizer")
    args = [str(checkpoint), str(embeddings), str(vectors), "--group", "corpus", "--quiet",
            "--encoding", store.get(encoding, "float32")]
    if threads:
        args += ["--threads", str(int(threads))]
    if encoding != "binary":
        args += ["--faiss", str(index)] + (["--index", factory] if factory else [])
    if main(args) != 0:
        raise CompressError(f"dive-compress {' '.join(args)} failed (its message is above)")
    if encoding == "binary":
        import faiss

        from ..retrieval import build_index

        import numpy as np

        docs = np.concatenate([m for _, m in open_vectors(vectors, group="corpus").chunks()])
        with atomic_path(index, suffix=".faiss") as tmp:
            faiss.write_index_binary(build_index(docs, use_gpu=False, encoding="binary"), str(tmp))
        return {"command": None, "factory": None}
    return {"command": ["dive-compress", *args], "factory": factory}
