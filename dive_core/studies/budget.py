"""The budget study: what to store in B bytes a vector, decided on this corpus's validation queries and
tested on its test queries.

For each budget of ``experiments.<name>.budgets`` the candidates are the frontier's codes of at most
that many bytes that need nothing outside the index (every method and dimension under every encoding
and index quantizer; label-free and supervised). :func:`dive_core.studies.frontier.pick_code` picks
one code, and one label-free code, from the ``frontier_validation`` record alone (select-stage maps,
trained on the training queries, scored on the validation queries). Each pick is then read from the
frontier's test record (final-stage maps, trained on training + validation queries) at the
frontier's seed and, through the ``frontier_seed`` records, at the study's other ``seeds``; its
per-query nDCG@10 averaged over its seeds is paired-tested against the label-free pick's and against
frozen float32 on all, seen and unseen test queries. The best candidate on test and the pick's
shortfall to it (the regret, both at the frontier's seed) are diagnostics: they choose nothing.
"""

from __future__ import annotations

import statistics
from typing import Mapping, Sequence

from .. import report
from ..efficiency import LATENCY_QUERIES
from ..selection import TIE_SE, candidates, code_key, code_label, pick_code, within_latency
from ..splits import STRATA
from .frontier import SUBSETS, _over_seeds, seed_scores, tested_row, validation_rows
from .shared import StudyContext, StudyOutput, pyplot, save, suptitle

METRIC = "ndcg@10"
RUNNERS_UP = 3  # the candidates next to the pick on validation, named in the table


def frozen_float32(rows: Sequence[Mapping]) -> Mapping:
    """The uncompressed reference: the frozen embeddings in float32."""
    found = [x for x in rows if x.get("method_type") == "frozen" and x["encoding"] == "float32"]
    if not found:
        raise ValueError("the frontier record holds no frozen float32 row: the budget study needs method frozen "
                         "among the frontier's methods")
    return found[0]


def query_groups(record: Mapping) -> dict[str, list[int]]:
    """The positions, in ``record['query_ids']``, of the queries of each subset: for a frontier record
    all, seen and unseen (its ``seen`` flags); for an ``arrival_codes`` record all and each stratum of
    :data:`dive_core.splits.STRATA` (known / new / mixed relevant documents)."""
    if "strata" in record:
        n = len(record["query_ids"])
        pos = {q: i for i, q in enumerate(record["query_ids"])}
        missing = sorted({q for s in STRATA for q in record["strata"].get(s, [])} - set(pos))
        if missing:
            raise ValueError(f"arrival codes of {record['dataset']} ({record['backbone']}): stratum queries "
                             f"{missing[:3]} are not among the record's queries")
        return {"all": list(range(n)), **{s: sorted(pos[q] for q in record["strata"].get(s, [])) for s in STRATA}}
    seen = record.get("seen")
    if seen is None:
        raise ValueError("the frontier record holds no `seen` flags: rerun rule frontier")
    return {"all": list(range(len(seen))), **{sub: [i for i, x in enumerate(seen) if x == (sub == "seen")]
                                      for sub in SUBSETS[1:]}}


def on_queries(rows: Sequence[Mapping], positions: Sequence[int], metric: str = METRIC) -> list[dict]:
    """``rows`` scored on the queries at ``positions`` alone: their per-query ``metric`` cut to them,
    its mean in ``metric``."""
    out = []
    for r in rows:
        pq = [r["per_query"][metric][i] for i in positions]
        out.append({**r, metric: sum(pq) / len(pq), "per_query": {**r["per_query"], metric: pq}})
    return out


def _paired(a: Sequence[float], b: Sequence[float], positions: Sequence[int]) -> dict:
    x, y = [a[i] for i in positions], [b[i] for i in positions]
    if not x:
        return {"n": 0, "diff": None, "p": None}
    return {"n": len(x), "diff": sum(x) / len(x) - sum(y) / len(y), "p": report.paired_randomization(x, y)}


def _mean(a: Sequence[float], positions: Sequence[int]) -> float:
    return sum(a[i] for i in positions) / len(positions)


def budget_entries(record: Mapping, validation: Sequence[Mapping], repeats: Sequence[Sequence[Mapping]],
                   budgets: Sequence[int], weigh: Sequence[int] | None = None, stratum: str = "all") -> list[dict]:
    """One entry per budget of ``budgets`` at which some code fits: the pick and the label-free pick
    (on ``validation``, the candidate codes; ``weigh``: the positions of the validation queries the pick
    reads, None: all), their test scores over their seeds on the test queries of subset ``stratum``
    (:func:`query_groups`), the paired tests on every subset against the label-free pick and against
    frozen float32, the runners-up on validation and, as diagnostics, the best candidates (codes of
    ``validation``) on ``stratum``'s test queries and each pick's regret."""
    rows, groups = record["rows"], query_groups(record)
    allowed = {code_key(x) for x in validation}
    if stratum not in groups:
        raise ValueError(f"{record['dataset']} ({record['backbone']}): no `{stratum}` subset of test queries "
                         f"(have {list(groups)})")
    if weigh is not None:
        if not weigh:
            raise ValueError(f"{record['dataset']} ({record['backbone']}): the validation queries have an empty "
                             f"`{stratum}` stratum, so no pick can weigh it (raise arrival.new_query_share, or "
                             "pick on stratum all)")
        validation = on_queries(validation, weigh)
    on = groups[stratum]
    if not on:
        raise ValueError(f"{record['dataset']} ({record['backbone']}): the test queries have an empty "
                         f"`{stratum}` stratum")
    frozen = frozen_float32(rows)
    frozen_mean = _over_seeds(seed_scores(frozen, repeats, METRIC))
    out = []
    for b in budgets:
        pick_v = pick_code(validation, b)
        if pick_v is None:
            continue
        lf_v = pick_code(validation, b, "label-free")
        pick = tested_row(pick_v, rows)
        lf = tested_row(lf_v, rows) if lf_v is not None else None
        entry = {"budget": b, "stratum": stratum, "pick": pick, "pick_validation": pick_v[METRIC],
                 "pick_latency_ms": pick_v.get("latency_ms"),
                 "label_free_latency_ms": lf_v.get("latency_ms") if lf_v is not None else None}
        for name, row in (("pick", pick), ("label_free", lf)):
            if row is None:
                entry[name] = None
                continue
            by_seed = seed_scores(row, repeats, METRIC)
            means = {s: _mean(v, on) for s, v in by_seed.items()}
            entry[f"{name}_seeds"] = sorted(by_seed)
            entry[f"{name}_by_seed"] = means
            entry[f"{name}_test"] = statistics.fmean(means.values())
            entry[f"{name}_per_query"] = _over_seeds(by_seed)
        entry["label_free"] = lf
        entry["label_free_validation"] = lf_v[METRIC] if lf_v is not None else None
        entry["frozen"] = frozen
        entry["frozen_test"] = _mean(frozen_mean, on)
        entry["tests"] = {}
        for sub, positions in groups.items():
            entry["tests"][sub] = {
                "vs_label_free": (_paired(entry["pick_per_query"], entry["label_free_per_query"], positions)
                                  if lf is not None else None),
                "vs_frozen": _paired(entry["pick_per_query"], frozen_mean, positions)}
        ranked = sorted(candidates(validation, b), key=lambda x: (-x[METRIC], x["bytes_per_vector"]))
        entry["runners_up"] = [x for x in ranked if code_key(x) != code_key(pick_v)][:RUNNERS_UP]
        entry["candidates"] = len(ranked)
        tested = on_queries([x for x in rows if code_key(x) in allowed], on)
        for name, row, fam in (("pick", pick, None), ("label_free", lf, "label-free")):
            if row is None:
                continue
            best = max(candidates(tested, b, fam), key=lambda x: (x[METRIC], -x["bytes_per_vector"]))
            entry[f"{name}_best_on_test"] = best
            entry[f"{name}_regret"] = best[METRIC] - _mean(row["per_query"][METRIC], on)  # at the first seed
        out.append(entry)
    return out


def _p(t: Mapping | None) -> str:
    if not t or t["diff"] is None:
        return "-"
    return f"{t['diff']:+.4f} (p {t['p']:.4f})"


def _spread(entry: Mapping, name: str) -> str:
    v = list(entry[f"{name}_by_seed"].values())
    return f"{min(v):.4f}-{max(v):.4f}" if len(v) > 1 else "one seed"


SUBSET_TEXT = {
    "seen": "On the test queries a relevant document of which is a training positive (`seen`) and on the others "
            "(`unseen`): the pick's mean difference and p.",
    "known": "On the test queries of each stratum (`known`: every relevant document known at training time; `new`: "
             "every one arrived after; `mixed`: some of each): the pick's mean difference and p.",
}


def budget_markdown(entries: Sequence[Mapping], record: Mapping, n_validation: int) -> list[str]:
    where = f"{record['dataset']} ({record['backbone']})"
    lines = [f"### {where}: {record['n_queries']} test queries, {n_validation} validation queries", ""]
    if not entries:
        return lines + ["No code fits any of the budgets.", ""]
    on = entries[0]["stratum"]
    val, test = ("val nDCG@10", "test nDCG@10") if on == "all" else (f"val nDCG@10 ({on})", f"test nDCG@10 ({on})")
    lines += [f"| budget B | pick | B | {val} | {test} | seeds | by seed | label-free pick | B | val | "
              "test | seeds | pick - label-free | pick - frozen float32 |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        lf = e["label_free"]
        lf_cells = (f"{code_label(lf)} | {lf['bytes_per_vector']} | {e['label_free_validation']:.4f} | "
                    f"{e['label_free_test']:.4f} | {len(e['label_free_seeds'])}" if lf is not None else "- | - | - | - | -")
        lines.append(f"| {e['budget']} | **{code_label(e['pick'])}** | {e['pick']['bytes_per_vector']} | "
                     f"{e['pick_validation']:.4f} | {e['pick_test']:.4f} | {len(e['pick_seeds'])} | "
                     f"{_spread(e, 'pick')} | {lf_cells} | {_p(e['tests'][on]['vs_label_free'])} | "
                     f"{_p(e['tests'][on]['vs_frozen'])} |")
    frozen = entries[0]
    subs = [sub for sub in frozen["tests"] if sub != "all"]
    lines += ["", f"Frozen float32 ({frozen['frozen']['bytes_per_vector']} B a vector, the uncompressed reference): "
                  f"test nDCG@10 {frozen['frozen_test']:.4f}" + ("." if on == "all" else f" on `{on}`."), "",
              SUBSET_TEXT[subs[0]], "",
              "| budget B | " + " | ".join(f"{sub} n | pick - label-free | pick - frozen" for sub in subs) + " |",
              "|---|" + "---|---|---|" * len(subs)]
    for e in entries:
        cells = [f"{e['tests'][sub]['vs_frozen']['n']} | {_p(e['tests'][sub]['vs_label_free'])} | "
                 f"{_p(e['tests'][sub]['vs_frozen'])}" for sub in subs]
        lines.append(f"| {e['budget']} | " + " | ".join(cells) + " |")
    scope = "" if on == "all" else f" on the `{on}` test queries"
    lines += ["", "Diagnostics, which choose nothing: the runners-up on validation (nDCG@10), and the candidate of "
                  f"highest test nDCG@10{scope} at the first seed with the pick's shortfall to it (regret; 0: the pick "
                  "is the best on test).", "",
              "| budget B | candidates | runners-up on validation | best on test | regret | best label-free on test "
              "| regret |", "|---|---|---|---|---|---|---|"]
    for e in entries:
        ups = "; ".join(f"{code_label(x)} {x[METRIC]:.4f}" for x in e["runners_up"]) or "-"
        best = e["pick_best_on_test"]
        lf_best = (f"{code_label(e['label_free_best_on_test'])} {e['label_free_best_on_test'][METRIC]:.4f} | "
                   f"{e['label_free_regret']:.4f}") if e["label_free"] is not None else "- | -"
        lines.append(f"| {e['budget']} | {e['candidates']} | {ups} | {code_label(best)} {best[METRIC]:.4f} | "
                     f"{e['pick_regret']:.4f} | {lf_best} |")
    return lines + [""]


def latency_markdown(entries: Sequence[Mapping], dropped: Sequence[Mapping], validation: Mapping,
                     limit: float) -> list[str]:
    """The latency limit's paragraph: how the codes were timed and on what machine, how many it left
    out, and each pick's own latency (read from the validation record, where the codes were timed)."""
    timed = sum(1 for x in validation["rows"] if x.get("latency_ms") is not None)
    slow = sorted(dropped, key=lambda d: d["latency_ms"])
    lines = [f"Latency limit: {limit:g} ms a query (one query searched alone at k = 10 on one thread, the median "
             f"over {min(LATENCY_QUERIES, validation['n_queries'])} validation queries, on "
             f"{validation['runtime']['cpu']}). {len(dropped)} of {timed} codes are over it and are no "
             "candidates" + (f"; the fastest of them, {slow[0]['code']}, takes {slow[0]['latency_ms']:.3f} ms"
                             if slow else "") + ".", "",
             "| budget B | pick | ms a query | label-free pick | ms a query |", "|---|---|---|---|---|"]
    for e in entries:
        lf = e["label_free"]
        lines.append(f"| {e['budget']} | {code_label(e['pick'])} | {e['pick_latency_ms']:.3f} | "
                     + (f"{code_label(lf)} | {e['label_free_latency_ms']:.3f} |" if lf is not None else "- | - |"))
    return lines + [""]


def budget_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Frontier records (test), with the study's ``validation`` and ``repeats`` records: per budget the
    code to store, picked on validation queries, and its test scores and tests."""
    budgets = list(ctx.budgets)
    lines = [f"## {ctx.title}", "",
             "What to store in B bytes a vector on this corpus. At each budget B the candidates are every code of "
             "the frontier of at most B bytes a vector that needs nothing outside the index (each method and "
             "dimension under float32, float16, SQ8, 1-bit codes and the index quantizers). **Each pick reads "
             "validation queries only**: every candidate is scored on them with the select stage's maps (trained "
             "on the training queries; codebooks fitted on the corpus). Rule: the map (method, dimension) of the "
             "best code on validation nDCG@10; then, of that map's codes level with that best (a paired per-query "
             f"deficit within {TIE_SE:g} standard error), the one of most bytes, as the budget allows them; ties to "
             "the higher validation score. The label-free pick is made the same way among codes fitted without "
             "relevance judgments. Each pick is then scored on the test queries with the final stage's maps "
             "(trained on training and validation queries), at each of its seeds (frozen's codes and the "
             "quantizers' k-means have one), its per-query nDCG@10 averaged over them, and paired-tested (two-sided "
             "randomization, 10,000 sign flips) against the label-free pick and against frozen float32.", ""]
    arrival = any("strata" in r for r in results)
    if arrival:  # an arrival study's codes (experiments.<name>.arrival)
        lines[2] = (
            "What to store in B bytes a vector on a corpus whose documents keep arriving. The candidates are the "
            "codes of an arrival study (each of its `codes` methods under float32 and the index quantizers): every "
            "map, codebook, rotation and range fitted on the documents known at training time, the whole corpus "
            "searched. **Each pick reads validation queries only**, those of stratum "
            f"`{ctx.stratum}`" + (" (every validation query)" if ctx.stratum == "all" else "") + ", scored with the "
            "select stage's maps (trained on the training queries and the known documents). Rule: the map (method, "
            "dimension) of the best code on validation nDCG@10; then, of that map's codes level with that best (a "
            f"paired per-query deficit within {TIE_SE:g} standard error), the one of most bytes; ties to the higher "
            "validation score. The label-free pick is made the same way among codes fitted without relevance "
            "judgments. Each pick is then scored on the test queries with the final stage's maps (trained on "
            "training and validation queries, the same known documents), at the arrival study's first seed, "
            f"reported on the `{ctx.stratum}` test queries and paired-tested (two-sided randomization, 10,000 sign "
            "flips) against the label-free pick and against frozen float32 on each stratum.")
    rows, all_entries = [], []
    for r in results:
        val = validation_rows(ctx, r, "arrival_codes_validation" if arrival else "frontier_validation")
        val, dropped = within_latency(val, ctx.max_latency_ms, f"config: experiments.{ctx.name}.max_latency_ms =")
        reps = [x["rows"] for x in ctx.repeats if (x["dataset"], x["backbone"]) == (r["dataset"], r["backbone"])]
        for x in ctx.repeats:
            if (x["dataset"], x["backbone"]) == (r["dataset"], r["backbone"]) and x["query_ids"] != r["query_ids"]:
                raise ValueError(f"{r['dataset']} ({r['backbone']}): a frontier_seed record scores other test "
                                 "queries than the frontier's; rerun rule frontier_seed")
        v_rec = next(v for v in ctx.validation if (v["dataset"], v["backbone"]) == (r["dataset"], r["backbone"]))
        n_val = v_rec["n_queries"]
        weigh = query_groups(v_rec)[ctx.stratum] if arrival else None
        entries = budget_entries(r, val, reps, budgets, weigh, ctx.stratum if arrival else "all")
        all_entries.append((r, entries))
        lines += budget_markdown(entries, r, n_val)
        if ctx.max_latency_ms is not None:
            lines += latency_markdown(entries, dropped, v_rec, ctx.max_latency_ms)
        for e in entries:
            row = {"dataset": r["dataset"], "backbone": r["backbone"], "budget": e["budget"], "stratum": e["stratum"],
                   "pick": code_label(e["pick"]), "pick_bytes": e["pick"]["bytes_per_vector"],
                   "pick_validation": e["pick_validation"], "pick_test": e["pick_test"],
                   "pick_seeds": len(e["pick_seeds"]),
                   "label_free_pick": code_label(e["label_free"]) if e["label_free"] else None,
                   "label_free_validation": e["label_free_validation"], "label_free_test": e.get("label_free_test"),
                   "frozen_test": e["frozen_test"], "pick_regret": e["pick_regret"],
                   "best_on_test": code_label(e["pick_best_on_test"]),
                   "label_free_regret": e.get("label_free_regret"), "candidates": e["candidates"]}
            if ctx.max_latency_ms is not None:
                row["pick_latency_ms"], row["label_free_latency_ms"] = e["pick_latency_ms"], e["label_free_latency_ms"]
            for sub in e["tests"]:
                for name in ("vs_label_free", "vs_frozen"):
                    t = e["tests"][sub][name] or {}
                    row[f"{sub}_{name}_diff"], row[f"{sub}_{name}_p"] = t.get("diff"), t.get("p")
            rows.append(row)

    def figure(path):
        plt = pyplot()
        n = max(1, len(all_entries))
        fig, axes = plt.subplots(1, n, figsize=(7 * n, 4.8), dpi=120, squeeze=False)
        for ax, (r, entries) in zip(axes[0], all_entries):
            xs = list(range(len(entries)))
            for name, color, label, dx in (("pick", "tab:red", "pick (validation)", -0.08),
                                           ("label_free", "#000080", "label-free pick (validation)", 0.08)):
                pts = [(i + dx, e) for i, e in zip(xs, entries) if e[name] is not None]
                if not pts:
                    continue
                means = [e[f"{name}_test"] for _, e in pts]
                lo = [m - min(e[f"{name}_by_seed"].values()) for m, (_, e) in zip(means, pts)]
                hi = [max(e[f"{name}_by_seed"].values()) - m for m, (_, e) in zip(means, pts)]
                ax.errorbar([x for x, _ in pts], means, yerr=[lo, hi], fmt="o", color=color, capsize=4,
                            markersize=7, label=label + " on test, seeds' range")
                for (x, e), m in zip(pts, means):
                    same = name == "label_free" and code_key(e["label_free"]) == code_key(e["pick"])
                    text = "(the same code)" if same else code_label(e[name]).replace(" ", "\n", 1)
                    ax.annotate(text, (x, m), textcoords="offset points", xytext=(-4 if name == "pick" else 4, 6),
                                ha="right" if name == "pick" else "left", fontsize=6, color=color)
            best = [e["pick_best_on_test"][METRIC] for e in entries]
            ax.scatter(xs, best, marker="_", s=300, color="black", label="best candidate on test (diagnostic)")
            for x, e, bt in zip(xs, entries, best):  # the regret: the pick's shortfall at the frontier's seed
                ax.plot([x, x], [e["pick"][METRIC], bt], color="black", linewidth=0.8, linestyle="dotted")
            if entries:
                ax.axhline(entries[0]["frozen_test"], color="0.45", linestyle="dashed",
                           label=f"frozen float32 ({entries[0]['frozen']['bytes_per_vector']} B)")
            ax.set_xticks(xs, [f"{e['budget']} B" for e in entries])
            ax.set_xlim(-0.6, len(entries) - 0.4)
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo - 0.08 * (hi - lo), hi + 0.05 * (hi - lo))  # room for the labels
            ax.set_xlabel("budget (bytes per vector)")
            on = entries[0]["stratum"] if entries else "all"
            ax.set_ylabel("test nDCG@10" + ("" if on == "all" else f" on the `{on}` stratum"))
            ax.grid(alpha=0.3, axis="y")
            ax.set_title(f"{r['dataset']} ({r['backbone']}): the code to store at each budget", fontsize=10)
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
        suptitle(fig, ctx.title)
        save(fig, path)

    return StudyOutput("\n".join(lines) + "\n", rows, figure)


def index_card(experiment: str, budget: int, pick: Mapping, made: Mapping, inp, out, top_k: int,
               max_latency_ms: float | None = None) -> dict:
    """The card of a budget study's pick written out (rule budget_index): what was picked and on what,
    its scores on validation and on test at the frontier's seed, the written index's own search of the
    test queries (the compressed queries against ``out.index``, through the evaluation path), the
    dive-compress command that writes the same files, the latency limit and the pick's measured
    latency (where the study sets one), and the candidates (those within the limit)."""
    import faiss
    import numpy as np

    from .. import records
    from ..embeddings import read_embeddings
    from ..evaluation import evaluate_vectors
    from ..methods import Method
    from ..splits import eval_queries
    from ..vectors import open_vectors

    val, test = records.read("frontier", inp.validation), records.read("frontier", inp.frontier)
    manifest = records.read("splits", inp.splits)
    emb = read_embeddings(inp.embeddings, expected_source=manifest["source_fingerprint"], against=inp.splits)
    method = Method.load(inp.checkpoint)
    queries = method.compress(emb.query_rows(eval_queries(manifest, "final")), side="query")
    binary = pick["encoding"] == "binary"
    index = (faiss.read_index_binary if binary else faiss.read_index)(str(out.index))
    docs = np.concatenate([m for _, m in open_vectors(out.vectors, group="corpus").chunks()])
    per_query, summary = evaluate_vectors(docs, emb.doc_ids, queries, manifest, "final", top_k, use_gpu=False,
                                          encoding="binary" if binary else "float32", index=index)
    tested = tested_row(pick, test["rows"])
    qids = eval_queries(manifest, "final")
    ours = [per_query[q]["ndcg@10"] for q in qids]
    key = f"config: experiments.{experiment}.max_latency_ms ="
    fits = candidates(within_latency(val["rows"], max_latency_ms, key)[0], budget)
    return {"experiment": experiment, "dataset": val["dataset"], "backbone": val["backbone"], "budget": budget,
            "code": code_label(pick), "method": pick["method"], "dim": pick["dim"], "encoding": pick["encoding"],
            "bytes_per_vector": pick["bytes_per_vector"], "supervised": bool(pick.get("supervised")),
            "rule": f"the best validation map's code of most bytes level with its best (within {TIE_SE:g} SE)",
            "validation": {"n_queries": val["n_queries"], "ndcg@10": pick[METRIC]},
            "frontier_test": {"n_queries": test["n_queries"], "seed": tested["seed"], "ndcg@10": tested[METRIC]},
            "index_test": {"n_queries": summary["n_queries"], **summary["metrics"],
                           "same_per_query_ndcg_as_frontier": ours == list(tested["per_query"][METRIC])},
            "index": {"path": str(out.index), "factory": made["factory"], "ntotal": int(index.ntotal),
                      "faiss": faiss.__version__,
                      "fitted": ("by dive-compress: its training sample and FAISS's own k-means seed, not the "
                                 "frontier's quantizer seed, so index_test, not frontier_test, is this file's score"
                                 if made["factory"] else "nothing to fit but SQ8's ranges, as the frontier's")},
            "dive_compress": made["command"], "checkpoint": str(inp.checkpoint),
            "latency": {"max_ms": max_latency_ms, "pick_ms": pick.get("latency_ms"), "k": 10, "threads": 1},
            "candidates": len(fits),
            "runners_up": [{"code": code_label(x), "ndcg@10": x[METRIC]} for x in
                           sorted(fits, key=lambda x: (-x[METRIC], x["bytes_per_vector"])) if code_key(x) != code_key(pick)][:RUNNERS_UP]}
