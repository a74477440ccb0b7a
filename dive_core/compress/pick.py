"""What to store in B bytes a vector when there are no relevance judgments (vectors alone): each
budget's code picked on held-out queries scored against exact search, tested on others, its index
written.

    python -m dive_core.compress.pick CORPUS OUT_DIR [--queries FILE] [--budgets 8 16 32 64 256]
        [--dims 64 96 192] [--sample 1000] [--seed 2027] [--index-budget B ...] [--config YAML]

Without judgments only label-free codes compete, and a code is scored as autofaiss scores its
indexes: recall@10 against exact search. Here:

* **Candidates** (:func:`candidate_codes`): FAISS indexes over the corpus, each one code: the vectors
  as they are (``frozen``) and their FAISS PCA (``PCAMatrix`` fitted on the corpus, ``pca``) at each of
  ``--dims``, each under float32 (``Flat``), float16 (``SQfp16``), SQ8 and the index quantizers of the
  config's ``quantizers:`` (PQ, OPQ + PQ, RaBitQ, SQ4: :mod:`dive_core.quantizers`, their k-means seeded
  with ``quantizers.seed``). A code's bytes are FAISS's ``sa_code_size``; PCA's matrix, like every
  codebook, is stated once (``codebook_bytes``), not per vector.
* **Queries**: a seeded sample (``--sample``, ``--seed``) of the rows of ``--queries`` or, without
  it, of the corpus's own documents used as queries (each then finds itself: every code alike). The
  sample is divided by the seed into a validation half, which picks, and a test half, which reports.
* **Score**: recall@10 against the exact float32 inner-product top 10 over the whole corpus, every
  vector L2-normalised as the workflow normalises embeddings.
* **Pick** (:func:`dive_core.selection.pick_code`, the budget study's rule, on recall@10): the map
  (frozen or PCA at one dimension) of the best code on validation; of that map's codes level with it
  (a paired per-query deficit within :data:`~dive_core.selection.TIE_SE` standard error), the one of
  most bytes. No test query is read before every pick is made. The best on test and the regret are
  diagnostics that choose nothing.

Writes ``OUT_DIR/budget.md`` (the table, also as ``OUT_DIR/tables/{--name}.md`` with its
``_runs.tsv``, which ``tools/publish_tables.py --results OUT_DIR`` publishes), ``OUT_DIR/budget.json``
(every candidate's scores, the picks, the command, the machine) and, per ``--index-budget`` B, ``OUT_DIR/{B}B/index.faiss`` (the
pick's index over the whole corpus, queries taken in the input's own space: PCA is inside it) with
``card.json``; each written under a temporary name, renamed when complete. The corpus is held in
memory (N x d float32) for the exact search.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..efficiency import LATENCY_QUERIES, single_query_ms
from ..selection import BUDGETS, TIE_SE, candidates, code_key, code_label, pick_code
from ..selection import within_latency as selection_within_latency
from .errors import CompressError

METRIC = "recall@10"
K = 10
SAMPLE = 1000  # held-out queries, both halves
FLOAT_CODES = {"float32": "Flat", "float16": "SQfp16", "sq8": "SQ8"}
CONFIG = Path(__file__).resolve().parents[2] / "config" / "config.yaml"


def read_matrix(path: str | Path, group: str | None = None) -> tuple[list[str], np.ndarray]:
    """``(ids, rows)`` of a vector file (:mod:`dive_core.vectors`), L2-normalised; a NaN, Inf or
    all-zero row is refused naming file, row and id."""
    from ..embeddings import normalize_rows_
    from ..vector_checks import bad_rows, where
    from ..vectors import open_vectors

    vf = open_vectors(path, group=group)
    ids, parts, start = [], [], 0
    for chunk_ids, mat in vf.chunks():
        bad = bad_rows(where(vf), chunk_ids, mat, start)
        if bad:
            raise CompressError(str(bad[0]))
        ids += chunk_ids
        parts.append(np.array(mat, dtype=np.float32))
        start += len(chunk_ids)
    if not parts:
        raise CompressError(f"{where(vf)}: no rows")
    rows = np.concatenate(parts)
    normalize_rows_(rows)
    return ids, rows


def split_sample(n: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(validation, test)``: row numbers of ``n`` rows drawn without replacement (``size``, at most
    ``n``; at least 2) by ``seed``, the first half of the draw validation, the rest test."""
    if n < 2 or size < 2:
        raise CompressError(f"held-out queries: {min(n, size)} to draw; the validation and the test half need "
                            "one each (give --sample 2 or more, and 2 or more query rows)")
    draw = np.random.default_rng(int(seed)).permutation(int(n))[:min(int(size), int(n))]
    half = len(draw) // 2
    return np.sort(draw[:half]), np.sort(draw[half:])


def exact_top(corpus: np.ndarray, queries: np.ndarray, k: int = K) -> np.ndarray:
    """The ids of the exact inner-product top ``k`` of each query (FAISS ``IndexFlatIP``)."""
    import faiss

    index = faiss.IndexFlatIP(corpus.shape[1])
    index.add(corpus)
    return index.search(queries, k)[1]


def recall_at(found: np.ndarray, truth: np.ndarray) -> list[float]:
    """Per query: the share of the exact top k among the ``k`` ids found."""
    return [len(set(f.tolist()) & set(t.tolist())) / truth.shape[1] for f, t in zip(found, truth)]


def candidate_codes(d: int, dims: Sequence[int], settings: Mapping) -> list[dict]:
    """Every code of the grid (module docstring): ``method`` frozen (dimension ``d``) or pca (each of
    ``dims`` below ``d``), ``encoding``, ``factory`` (FAISS's factory string)."""
    from .. import quantizers as Q

    out = []
    for method, k in [("frozen", d), *(("pca", int(k)) for k in dims if int(k) < d)]:
        pre = f"PCA{k}," if method == "pca" else ""
        for enc, fac in FLOAT_CODES.items():
            out.append({"method": method, "dim": k, "encoding": enc, "factory": pre + fac})
        for name in Q.grid(k, settings):  # the grid holds only the quantizers that fit k
            out.append({"method": method, "dim": k, "encoding": name, "factory": pre + Q.factory_string(name, k)})
    return out


def empty_index(code: Mapping, d: int, settings: Mapping):
    """``code``'s untrained FAISS index for ``d``-dimensional input: PCA (``PCAMatrix``) in front where
    ``method`` is pca, then the float code's (``Flat``, ``SQfp16``, ``SQ8``) or the quantizer's own
    (:func:`dive_core.quantizers.empty_index`, its k-means seeded with ``quantizers.seed``)."""
    import faiss

    from .. import quantizers as Q

    k, enc = int(code["dim"]), code["encoding"]
    inner = (faiss.index_factory(k, FLOAT_CODES[enc], faiss.METRIC_INNER_PRODUCT) if enc in FLOAT_CODES
             else Q.empty_index(enc, k, int(settings["seed"]), int(settings["opq_niter"])))
    return faiss.IndexPreTransform(faiss.PCAMatrix(d, k), inner) if code["method"] == "pca" else inner


def build_index(code: Mapping, corpus: np.ndarray, settings: Mapping):
    """``(index, fit_seconds, codebook_bytes)``: ``code``'s FAISS index for the corpus's dimension (PCA
    in front of the code where ``method`` is pca), trained on the corpus as
    :func:`dive_core.quantizers.fit` trains (one thread; the quantizers' own index, k-means seeded with
    ``quantizers.seed``, OPQ at ``quantizers.opq_niter`` iterations) and filled with it."""
    from .. import quantizers as Q

    index = empty_index(code, corpus.shape[1], settings)
    seconds = Q.train_one_thread(index, corpus)
    book = Q.codebook_bytes(index)
    index.add(corpus)
    return index, seconds, book


def within_latency(rows_v: Sequence[Mapping], rows_t: Sequence[Mapping], limit: float | None):
    """``(rows_v, rows_t, dropped)``: the codes within ``limit`` ms a query on validation queries
    (:func:`dive_core.selection.within_latency`), in validation and test alike, and the dropped ones."""
    try:
        kept, dropped = selection_within_latency(rows_v, limit, "--max-latency-ms")
    except ValueError as e:
        raise CompressError(str(e)) from None
    keep = {code_key(r) for r in kept}
    return kept, [r for r in rows_t if code_key(r) in keep], dropped


def score_codes(corpus: np.ndarray, queries: np.ndarray, val: np.ndarray, test: np.ndarray, codes: Sequence[Mapping],
                settings: Mapping, progress: bool = True) -> tuple[list[dict], list[dict]]:
    """``(validation rows, test rows)``: each code's recall@10 per held-out query (``val``, ``test``:
    rows of ``queries``) against the exact top 10, in the frontier rows' shape (``per_query``,
    ``bytes_per_vector``, ``supervised`` False) for :func:`dive_core.selection.pick_code`."""
    from tqdm import tqdm

    truth = exact_top(corpus, queries)
    rows_v, rows_t = [], []
    for code in tqdm(codes, desc="codes", unit="code", disable=not progress, file=sys.stderr):
        index, seconds, book = build_index(code, corpus, settings)
        found = index.search(queries, K)[1]
        per = recall_at(found, truth)
        base = {**code, "active": None, "supervised": False, "method_type": code["method"], "seed": int(settings["seed"]),
                "bytes_per_vector": int(index.sa_code_size()), "codebook_bytes": book, "fit_seconds": seconds,
                "latency_ms": single_query_ms(index, queries[val], k=K)}
        for rows, part in ((rows_v, val), (rows_t, test)):
            pq = [per[i] for i in part]
            rows.append({**base, METRIC: sum(pq) / len(pq), "per_query": {METRIC: pq}})
    return rows_v, rows_t


def picks(rows_v: Sequence[Mapping], rows_t: Sequence[Mapping], budgets: Sequence[int]) -> list[dict]:
    """Per budget at which a code fits: the pick on validation (:func:`pick_code` on recall@10), its test
    recall@10, the runners-up on validation and, as diagnostics, the best on test and the regret."""
    by_key = {code_key(r): r for r in rows_t}
    out = []
    for b in budgets:
        pick = pick_code(rows_v, b, metric=METRIC)
        if pick is None:
            continue
        tested = by_key[code_key(pick)]
        best = max(candidates(rows_t, b), key=lambda x: (x[METRIC], -x["bytes_per_vector"]))
        ranked = sorted(candidates(rows_v, b), key=lambda x: (-x[METRIC], x["bytes_per_vector"]))
        out.append({"budget": int(b), "code": code_label(pick), "method": pick["method"], "dim": pick["dim"],
                    "encoding": pick["encoding"], "factory": pick["factory"], "latency_ms": pick["latency_ms"],
                    "bytes_per_vector": pick["bytes_per_vector"], "validation": pick[METRIC], "test": tested[METRIC],
                    "candidates": len(ranked), "best_on_test": code_label(best), "best_test": best[METRIC],
                    "regret": best[METRIC] - tested[METRIC],
                    "runners_up": [{"code": code_label(x), "validation": x[METRIC]}
                                   for x in ranked if code_key(x) != code_key(pick)][:3]})
    return out


def markdown(record: Mapping) -> str:
    q = record["queries"]
    lines = [f"## What to store in B bytes a vector, without judgments: {record['corpus']['path']}", "",
             f"{record['corpus']['rows']} documents of {record['corpus']['dim']} dimensions. No relevance judgment is "
             "read: every candidate is a label-free code (the vectors as they are, `frozen`, and their FAISS PCA "
             "fitted on the corpus, each under float32, float16, SQ8 and the index quantizers), scored by recall@10 "
             "against exact float32 search over the whole corpus, as autofaiss scores its indexes. Held-out queries: "
             f"{q['validation']} for validation and {q['test']} for test, drawn with seed {q['seed']} from "
             f"{q['source']}. Rule (the budget study's, on recall@10): the map (frozen, or PCA at one dimension) of "
             f"the best code on validation; then, of that map's codes level with that best (within {TIE_SE:g} "
             "standard error of the paired per-query deficit), the one of most bytes. The best code on test and the "
             "regret are diagnostics, which choose nothing.", ""]
    lat = record["latency"]
    if lat["max_ms"] is not None:
        lines += [f"Latency limit {lat['max_ms']:g} ms a query (k = {lat['k']}, one thread, the median of "
                  f"{lat['queries']} validation queries searched one at a time on {record['machine']['cpu']}): "
                  f"{len(lat['dropped'])} codes over it left out"
                  + (": " + "; ".join(f"{d['code']} {d['latency_ms']:.3f} ms" for d in lat["dropped"]) if lat["dropped"]
                     else "") + ".", ""]
    lines += ["| budget B | pick | B | val recall@10 | test recall@10 | ms a query | candidates | runners-up on validation | "
              "best on test | regret |", "|---|---|---|---|---|---|---|---|---|---|"]
    for e in record["picks"]:
        ups = "; ".join(f"{x['code']} {x['validation']:.4f}" for x in e["runners_up"]) or "-"
        lines.append(f"| {e['budget']} | **{e['code']}** | {e['bytes_per_vector']} | {e['validation']:.4f} | "
                     f"{e['test']:.4f} | {e['latency_ms']:.3f} | {e['candidates']} | {ups} | {e['best_on_test']} "
                     f"{e['best_test']:.4f} | "
                     f"{e['regret']:.4f} |")
    return "\n".join(lines) + "\n"


def _write_text(path: Path, text: str) -> None:
    from ..atomic import atomic_open

    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict:
    import faiss

    from .. import provenance
    from ..config import load_yaml

    settings = dict(load_yaml(Path(args.config)).get("quantizers") or {})
    missing = [k for k in ("seed", "opq_niter") if k not in settings]
    if missing:
        raise CompressError(f"{args.config}: quantizers: lacks {missing}")
    unknown = [b for b in args.index_budget or [] if b not in args.budgets]
    if unknown:
        raise CompressError(f"--index-budget {unknown[0]}: not one of --budgets {list(args.budgets)}")
    ids, corpus = read_matrix(args.corpus, args.group)
    d = corpus.shape[1]
    if args.queries:
        _, queries = read_matrix(args.queries, args.queries_group)
        if queries.shape[1] != d:
            raise CompressError(f"{args.queries}: {queries.shape[1]} dimensions; the corpus {args.corpus} has {d}")
        source = f"the rows of {args.queries}"
    else:
        queries, source = corpus, f"the documents of {args.corpus} used as queries (each finds itself)"
    val, test = split_sample(len(queries), args.sample, args.seed)
    held = np.concatenate([val, test])
    q = np.ascontiguousarray(queries[held])
    pos_v, pos_t = np.arange(len(val)), np.arange(len(val), len(held))
    dims = args.dims or [k for k in (d // 2, d // 4, d // 6) if k >= 8]
    from .. import quantizers as Q

    codes, few = [], []  # a quantizer with more centroids per sub-quantizer than documents cannot be fitted
    for c in candidate_codes(d, dims, settings):
        n = Q.centroids(c["encoding"]) if Q.is_quantizer(c["encoding"]) else None
        (few if n is not None and n > len(corpus) else codes).append(c)
    least = min((int(empty_index(c, d, settings).sa_code_size()), code_label({**c, "active": None})) for c in codes)
    low = [b for b in args.budgets if b < least[0]]
    if low:
        raise CompressError(f"--budgets {low[0]}: below the smallest code of the grid, {least[0]} bytes a vector "
                            f"({least[1]})")
    t0 = time.perf_counter()
    rows_v, rows_t = score_codes(corpus, q, pos_v, pos_t, codes, settings, progress=not args.quiet)
    kept_v, kept_t, dropped = within_latency(rows_v, rows_t, args.max_latency_ms)
    chosen = picks(kept_v, kept_t, args.budgets)
    record = {"format": "dive-pick/1", "command": " ".join(["python -m dive_core.compress.pick", *argv]),
              "corpus": {"path": str(args.corpus), "rows": len(ids), "dim": d},
              "queries": {"source": source, "seed": int(args.seed), "validation": len(val), "test": len(test),
                          "validation_rows": val.tolist(), "test_rows": test.tolist()},
              "metric": METRIC, "rule": f"the best validation map's code of most bytes level with its best "
                                        f"(within {TIE_SE:g} SE)", "quantizers": settings, "dims": list(dims),
              "seconds": time.perf_counter() - t0, "picks": chosen,
              "left_out": [{"code": code_label({**c, "active": None}), "why": f"{Q.centroids(c['encoding'])} centroids "
                            f"per sub-quantizer, {len(corpus)} documents"} for c in few],
              "latency": {"max_ms": args.max_latency_ms, "queries": min(LATENCY_QUERIES, len(val)), "threads": 1,
                          "k": K, "dropped": dropped},
              "rows": rows_v, "test_rows": rows_t,
              "faiss": faiss.__version__, "machine": {"cpu": provenance.cpu_model(), "simd": provenance.cpu_flags(),
                                                       "threads": faiss.omp_get_max_threads(),
                                                       "commit": provenance.git_commit(CONFIG.parents[1])},
              # the workflow records' machine fields, which tools/publish_tables.py reads (torch is unused here)
              "runtime": provenance.runtime(1), "versions": provenance.versions()}
    fitting = {x["budget"]: x for x in chosen}
    unfit = [b for b in args.index_budget or [] if b not in fitting]
    if unfit:  # every code of at most that many bytes was over the latency limit
        raise CompressError(f"--index-budget {unfit[0]}: no code of at most {unfit[0]} bytes a vector is within "
                            f"--max-latency-ms {args.max_latency_ms:g}")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for b in args.index_budget or []:
        write_index(out / f"{int(b)}B", fitting[b], corpus, settings, record)
    from ..atomic import write_json

    write_json(out / "budget.json", record)
    _write_text(out / "budget.md", markdown(record))
    # the same table where tools/publish_tables.py --results OUT_DIR finds it, with its record listed
    (out / "tables").mkdir(exist_ok=True)
    _write_text(out / "tables" / f"{args.name}.md", markdown(record))
    _write_text(out / "tables" / f"{args.name}_runs.tsv", f"corpus\trecord\n{args.corpus}\tresults/budget.json\n")
    return record


def write_index(folder: Path, entry: Mapping, corpus: np.ndarray, settings: Mapping, record: Mapping) -> None:
    """The picked code's index over the whole corpus (``index.faiss``) and its card (``card.json``)."""
    import faiss

    from ..atomic import atomic_path, write_json

    folder.mkdir(parents=True, exist_ok=True)
    index, _, _ = build_index(entry, corpus, settings)
    with atomic_path(folder / "index.faiss") as tmp:
        faiss.write_index(index, str(tmp))
    write_json(folder / "card.json", {**entry, "ntotal": int(index.ntotal), "index": str(folder / "index.faiss"),
                                      "queries": record["queries"]["source"], "command": record["command"],
                                      "faiss": faiss.__version__})


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m dive_core.compress.pick", description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", help="the corpus vectors (Parquet, .npy with .ids.txt, or HDF5)")
    ap.add_argument("out_dir", help="where budget.md, budget.json and the indexes are written")
    ap.add_argument("--group", help="HDF5 corpus: its group (e.g. corpus of an embeddings.h5)")
    ap.add_argument("--queries", help="held-out query vectors (default: documents of the corpus used as queries)")
    ap.add_argument("--queries-group", help="HDF5 queries: their group (e.g. queries of an embeddings.h5)")
    ap.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS), help="bytes per vector")
    ap.add_argument("--dims", type=int, nargs="+", help="PCA dimensions (default: d/2, d/4, d/6)")
    ap.add_argument("--sample", type=int, default=SAMPLE, help="held-out queries drawn, both halves")
    ap.add_argument("--seed", type=int, default=2027, help="the draw and its division into halves")
    ap.add_argument("--index-budget", type=int, nargs="+", help="write these budgets' picks' indexes")
    ap.add_argument("--max-latency-ms", type=float, help="drop the codes whose search of one query at k = 10 "
                    "on one thread takes longer here (median over validation queries)")
    ap.add_argument("--config", default=str(CONFIG), help="a config whose quantizers: gives the grid")
    ap.add_argument("--name", default="pick", help="the table's name under OUT_DIR/tables/ (tools/publish_tables.py "
                    "--results OUT_DIR NAME publishes it)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    bad = [b for b in args.budgets if b <= 0]
    if bad:
        print(f"--budgets: {bad[0]} is not a number of bytes", file=sys.stderr)
        return 2
    from ..vectors import VectorFileError

    try:
        record = run(args, argv)
    except (CompressError, VectorFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
