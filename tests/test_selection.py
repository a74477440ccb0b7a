"""Selection on validation results (dive_core.selection) against hand-computed picks."""

from __future__ import annotations

import pytest

from dive_core import report
from dive_core.config import ConfigError
from dive_core.selection import apply_selection, select


# -- selection -----------------------------------------------------------------------------
def result(method, dataset, ndcg, stage="select", seed=2027, backbone="minilm"):
    return {"method": method, "dataset": dataset, "backbone": backbone, "stage": stage, "seed": seed,
            "role": "validation" if stage == "select" else "test", "metrics": {"ndcg@10": ndcg}}


CANDS = {"mrl": [("mrl-lr1e-04", {"lr": 1e-4}), ("mrl", {"lr": 2e-4}), ("mrl-lr5e-04", {"lr": 5e-4})]}
GROUPS = {"a": "a", "cq1": "cq", "cq2": "cq"}


def validation(scores):
    return [result(m, ds, v) for (m, ds), v in scores.items()]


SCORES = {("mrl-lr1e-04", "a"): 0.50, ("mrl-lr1e-04", "cq1"): 0.30, ("mrl-lr1e-04", "cq2"): 0.10,
          ("mrl", "a"): 0.40, ("mrl", "cq1"): 0.40, ("mrl", "cq2"): 0.30,
          ("mrl-lr5e-04", "a"): 0.60, ("mrl-lr5e-04", "cq1"): 0.05, ("mrl-lr5e-04", "cq2"): 0.05,
          ("dive", "a"): 0.70, ("dive", "cq1"): 0.50, ("dive", "cq2"): 0.40}


def test_select_by_hand():
    """Group mean first: lr1e-4 (0.50 + 0.20) / 2 = 0.35, lr2e-4 (0.40 + 0.35) / 2 = 0.375,
    lr5e-4 (0.60 + 0.05) / 2 = 0.325 -> mrl (2e-4). Without the grouping lr5e-4's 0.60 would
    win either: means over the three datasets would be 0.30, 0.367, 0.233."""
    out = select("lr_audit", CANDS, validation(SCORES), ["a", "cq1", "cq2"], 2027, GROUPS, "dive", backbone="minilm")
    means = [c["mean"] for c in out["methods"]["mrl"]["candidates"]]
    assert means == pytest.approx([0.35, 0.375, 0.325])
    assert out["methods"]["mrl"]["pick"] == {"method": "mrl", "overrides": {"lr": 2e-4}, "mean": pytest.approx(0.375)}
    assert out["reference"]["mean"] == pytest.approx((0.70 + 0.45) / 2)


def test_changing_one_validation_score_changes_the_pick():
    scores = dict(SCORES)
    scores[("mrl-lr5e-04", "cq2")] = 0.45  # lr5e-4: (0.60 + 0.25) / 2 = 0.425 > 0.375
    out = select("lr_audit", CANDS, validation(scores), ["a", "cq1", "cq2"], 2027, GROUPS, backbone="minilm")
    assert out["methods"]["mrl"]["pick"]["overrides"] == {"lr": 5e-4}


def test_select_ties_go_to_the_earlier_candidate_and_test_results_are_refused():
    flat = {(m, "a"): 0.5 for m, _ in CANDS["mrl"]}
    out = select("lr_audit", CANDS, validation(flat), ["a"], 2027, backbone="minilm")
    assert out["methods"]["mrl"]["pick"]["method"] == "mrl-lr1e-04"
    leak = validation(flat) + [result("mrl", "a", 0.9, stage="final")]
    with pytest.raises(ValueError, match="only validation results may select"):
        select("lr_audit", CANDS, leak, ["a"], 2027, backbone="minilm")
    with pytest.raises(ValueError, match="no validation result for mrl-lr1e-04 on b"):
        select("lr_audit", CANDS, validation(flat), ["a", "b"], 2027, backbone="minilm")



def test_dataset_mean_averages_a_group_first():
    assert report.dataset_mean({"a": 0.6, "cq1": 0.2, "cq2": 0.4}, GROUPS) == pytest.approx(0.45)
    assert report.dataset_mean({"a": 0.6, "cq1": 0.2, "cq2": 0.4}, {}) == pytest.approx(0.4)




def test_apply_selection_overrides_the_configured_values():
    record = {"study": "lr_audit", "backbone": "minilm", "methods": {"mrl": {"pick": {"overrides": {"lr": 5e-4}}}}}
    hp, over = apply_selection({"lr": 2e-4, "alpha": 1.0}, record, "lr_audit/mrl", "minilm")
    assert hp == {"lr": 5e-4, "alpha": 1.0} and over == {"lr": 5e-4}


def test_a_pick_made_on_one_backbone_never_trains_another_backbones_runs():
    """Selection is per backbone: the select job refuses another backbone's results, the record
    names its backbone, and a training job of another backbone refuses the record."""
    mixed = validation({k: v for k, v in SCORES.items() if k[0] != "dive"})
    mixed[0] = {**mixed[0], "backbone": "mpnet"}
    with pytest.raises(ValueError, match="is backbone 'mpnet'; a backbone selects on its own runs only"):
        select("lr_audit", CANDS, mixed, ["a", "cq1", "cq2"], 2027, GROUPS, backbone="minilm")
    out = select("lr_audit", CANDS, validation(SCORES), ["a", "cq1", "cq2"], 2027, GROUPS, backbone="minilm")
    assert out["backbone"] == "minilm"
    with pytest.raises(ConfigError, match="made on backbone 'minilm'; a run of backbone 'mpnet'.*"
                                          "results/selection/mpnet/lr_audit.json"):
        apply_selection({"lr": 2e-4}, out, "lr_audit/mrl", "mpnet")
    assert apply_selection({"lr": 2e-4}, out, "lr_audit/mrl", "minilm")[1] == {"lr": 2e-4}


# -- the arrival variants: best `new` stratum within a tolerance of the references' `known` ------
ARR_CANDS = {"v": [("v-g1-arrival", {"g": 1}), ("v-g2-arrival", {"g": 2}), ("v-g3-arrival", {"g": 3})]}
# (known, new) per (method, dataset); `all` comes from the record
ARR = {("v-g1-arrival", "a"): (0.74, 0.40), ("v-g1-arrival", "b"): (0.70, 0.40),
       ("v-g2-arrival", "a"): (0.70, 0.70), ("v-g2-arrival", "b"): (0.66, 0.50),
       ("v-g3-arrival", "a"): (0.72, 0.50), ("v-g3-arrival", "b"): (0.67, 0.42),
       ("dive-arrival", "a"): (0.80, 0.30), ("dive-arrival", "b"): (0.60, 0.30),
       ("mrl-arrival", "a"): (0.60, 0.20), ("mrl-arrival", "b"): (0.60, 0.20)}


def arrival_select(scores, tolerance=0.01, **kw):
    from dive_core.selection import select_arrival

    results = [result(m, ds, 0.5) for (m, ds) in scores]
    strata = [{"known": k, "new": n, "mixed": float("nan")} for k, n in scores.values()]
    return select_arrival(ARR_CANDS, results, strata, ["a", "b"], 2027, ["dive-arrival", "mrl-arrival"],
                          tolerance, backbone="minilm", **kw)


def test_arrival_selection_by_hand():
    """Best reference on `known`: dive (0.80 + 0.60) / 2 = 0.70, so the bar is 0.69. Known means:
    g1 0.72 (qualifies), g2 0.68 (does not), g3 0.695 (qualifies); new means: g1 0.40, g2 0.60,
    g3 0.46 -> g3, the best `new` among those that qualify (g2 is better on `new` but gives up
    `known`). With tolerance 0.05 (bar 0.65) g2 qualifies and is picked."""
    out = arrival_select(ARR)
    rows = out["methods"]["v"]["candidates"]
    assert [r["mean_known"] for r in rows] == pytest.approx([0.72, 0.68, 0.695])
    assert [r["mean_new"] for r in rows] == pytest.approx([0.40, 0.60, 0.46])
    assert [r["qualifies"] for r in rows] == [True, False, True]
    assert out["known_bar"] == pytest.approx(0.69)
    assert out["methods"]["v"]["pick"]["method"] == "v-g3-arrival"
    assert out["methods"]["v"]["pick"]["overrides"] == {"g": 3} and out["methods"]["v"]["pick"]["qualified"]
    assert [r["method"] for r in out["references"]] == ["dive-arrival", "mrl-arrival"]
    assert "`new` stratum" in out["criterion"]
    assert arrival_select(ARR, tolerance=0.05)["methods"]["v"]["pick"]["method"] == "v-g2-arrival"
    # no candidate reaches the bar: the best on `known` (g1) is picked and the record says so
    raised = {**ARR, ("dive-arrival", "a"): (0.95, 0.30)}
    pick = arrival_select(raised)["methods"]["v"]["pick"]
    assert pick["method"] == "v-g1-arrival" and not pick["qualified"]


def test_arrival_selection_reads_validation_results_only():
    from dive_core.selection import select_arrival

    results = [result(m, ds, 0.5, stage="final") for (m, ds) in ARR]
    with pytest.raises(ValueError, match="only validation results may select"):
        select_arrival(ARR_CANDS, results, [{"known": 1, "new": 1}] * len(results), ["a", "b"], 2027,
                       ["dive-arrival"], backbone="minilm")


def test_arrival_selection_records_an_empty_stratum_as_null_and_refuses_an_empty_new_one():
    import json

    out = arrival_select(ARR)
    assert out["methods"]["v"]["candidates"][0]["per_dataset"]["a"]["mixed"] is None
    json.dumps(out, allow_nan=False)  # the record is plain JSON
    empty = {**ARR, ("v-g1-arrival", "b"): (0.70, float("nan"))}
    with pytest.raises(ValueError, match=r"validation queries of b \(results/b/arrival.json\) have an empty `new` stratum.*new_query_share"):
        arrival_select(empty)


# -- the code to store at a byte budget (pick_code) ------------------------------------------
def code(method, enc, nbytes, per_query, supervised=True, dim=64, seed=2027, method_type=None):
    return {"method": method, "dim": dim, "active": None, "encoding": enc, "bytes_per_vector": nbytes,
            "ndcg@10": sum(per_query) / len(per_query), "per_query": {"ndcg@10": list(per_query)},
            "supervised": supervised, "seed": seed, "method_type": method_type or method}


# Validation, four queries. MRL 64d: SQ4 (32 B) is the best, 0.70; SQ8 (64 B) and float32 (256 B) are 0.675
# with per-query deficits (0.1, -0.1, 0.1, 0) against it: mean 0.025, sample sd 0.0957, standard error
# 0.0479, so level with it; PCA 64d SQ8 (64 B) at 0.6875, another map; DIVE 64d PQ16 (16 B) 0.5; MRL's
# 1-bit re-scored code (8 B, 1.0) reads float32 vectors outside the index: never a candidate.
VAL = [code("mrl", "sq4", 32, (0.8, 0.6, 0.8, 0.6)), code("mrl", "sq8", 64, (0.7, 0.7, 0.7, 0.6)),
       code("mrl", "float32", 256, (0.7, 0.7, 0.7, 0.6)), code("pca", "sq8", 64, (0.8, 0.6, 0.8, 0.55), False),
       code("dive", "pq16", 16, (0.5,) * 4), code("mrl", "binary_rescore", 8, (1.0,) * 4)]


def test_a_budgets_code_is_the_best_maps_level_code_of_most_bytes():
    from dive_core.selection import level_with, pick_code

    assert level_with(VAL[0], VAL[1]) and level_with(VAL[0], VAL[0])
    assert not level_with(VAL[0], VAL[4])  # 0.2 below on every query: sd 0
    picked = {b: (x["method"], x["encoding"]) if x else None for b in (8, 16, 32, 64, 256)
              for x in [pick_code(VAL, b)]}
    assert picked == {8: None, 16: ("dive", "pq16"), 32: ("mrl", "sq4"), 64: ("mrl", "sq8"), 256: ("mrl", "float32")}
    assert pick_code(VAL, 64, "label-free")["method"] == "pca"
    # a deficit beyond one standard error: the best itself (SQ8 0.1 below on every query)
    far = [VAL[0], code("mrl", "sq8", 64, (0.7, 0.5, 0.7, 0.5))]
    assert pick_code(far, 64)["encoding"] == "sq4"
    # ties in bytes go to the higher validation score (PQ32 and SQ4 are both 32 B)
    assert pick_code([VAL[0], code("mrl", "pq32", 32, (0.8, 0.6, 0.7, 0.6))], 32)["encoding"] == "sq4"
    with pytest.raises(ValueError, match="not the same queries"):
        level_with(VAL[0], code("mrl", "sq8", 64, (0.7, 0.7, 0.7)))
