"""The run plan (dive_core.plan), without Snakemake: config expansion into study variants,
selection dependencies, the negatives wildcard, the runs of every study, and the config's key
order; each against the configured values."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from dive_core import config as dcfg
from dive_core import plan

REPO = Path(__file__).resolve().parent.parent
CONFIG = dcfg.load_yaml(REPO / "config" / "config.yaml")


def expanded(cfg=None):
    return plan.expand(cfg or CONFIG)


# -- config expansion ----------------------------------------------------------------------
def test_lr_audit_candidates_at_the_configured_values():
    cfg = expanded()
    cands = plan.selection_candidates(cfg, "lr_audit")
    assert {b: [n for n, _ in c] for b, c in cands.items()} == {
        "mrl": ["mrl-lr1e-04", "mrl", "mrl-lr5e-04"],  # 2e-4 is mrl's own lr: its runs are mrl's
        "search_adaptor": ["search_adaptor-lr1e-04", "search_adaptor", "search_adaptor-lr5e-04"],
        "smec": ["smec-lr1e-06", "smec", "smec-lr1e-05"],
        "csr": ["csr-lr1e-04", "csr", "csr-lr1e-03"],  # 4e-4 is csr's own lr
    }
    assert cfg["methods"]["smec-lr1e-05"] == {**CONFIG["methods"]["smec"], "lr": 1e-5}
    exp = plan.experiment(cfg, "lr_audit")
    assert exp["stage"] == "select" and exp["seeds"] == [2027] and exp["methods"][-1] == "dive"
    # the tuned methods read their lr from the audit; DIVE's single point selects nothing
    assert plan.selection_study(cfg, "mrl-tuned") == "lr_audit"
    assert plan.selection_study(cfg, "dive") is None


def test_lr_audit_needs_exactly_three_candidates():
    cfg = copy.deepcopy(CONFIG)
    cfg["selection"]["lr_audit"]["mrl"] = [1e-4, 2e-4]
    cfg = plan.expand(cfg)
    with pytest.raises(dcfg.ConfigError, match="selection.lr_audit.mrl has 2 candidates"):
        plan.check(cfg, dcfg.load_registry(REPO / "config" / "datasets.yaml"))


def test_dive_grid_generates_candidates_and_a_dependency():
    cfg = copy.deepcopy(CONFIG)
    cfg["selection"]["dive_grid"] = {"margin": [0.5, 0.7], "heads": [4]}
    cfg["methods"]["dive"] = {**cfg["methods"]["dive"], "selected": "dive_config/dive"}
    cfg = plan.expand(cfg)
    names = [n for n, _ in plan.selection_candidates(cfg, "dive_config")["dive"]]
    assert names == ["dive-margin0.5-heads4", "dive"]
    assert "selected" not in cfg["methods"]["dive-margin0.5-heads4"]  # candidates never depend on the pick
    assert plan.selection_study(cfg, "dive") == "dive_config"
    # the pick is made from dive's own select-stage run: that run must not wait for the pick
    assert plan.selection_study(cfg, "dive", "select") is None
    assert plan.selection_study(cfg, "dive", "final") == "dive_config"


def test_heads_variants_replace_impossible_head_counts():
    cfg = expanded()
    assert plan.experiment(cfg, "heads")["methods"] == ["dive-h2", "dive", "dive-h6"]
    assert "H = 8 cannot exist at k = 64, d = 384" in plan.experiment(cfg, "heads")["heads_note"]
    assert cfg["methods"]["dive-h6"]["heads"] == 6
    # LLM2Vec-Mistral at 128d: every H of the paper exists
    variants, note = plan.heads_variants(cfg, "dive", [2, 4, 8], 128, 4096)
    assert variants == [(2, "dive-h2"), (4, "dive"), (8, "dive-h8")] and note == ""


def test_doc_disjoint_variants_only_for_supervised_methods():
    cfg = expanded()
    methods = plan.experiment(cfg, "doc_disjoint")["methods"]
    assert methods == ["frozen", "truncate", "pca", "autoencoder", "mrl-docdisjoint",
                       "search_adaptor-docdisjoint", "smec-docdisjoint", "dive-docdisjoint"]
    assert plan.method_negatives(cfg, "dive-docdisjoint") == "random-docdisjoint"
    assert plan.method_negatives(cfg, "dive") == "random"


def test_the_implementations_take_their_metadata_from_the_specs():
    """The planner reads supervised / hyperparameters from the torch-free specs; the registered
    classes carry the same values, so the plan and the jobs agree."""
    from dive_core.methods import METHODS, SPECS

    assert sorted(METHODS) == sorted(SPECS)
    for t, cls in METHODS.items():
        assert (cls.supervised, cls.hyperparameters) == (SPECS[t].supervised, SPECS[t].hyperparameters), t
    assert [t for t, s in SPECS.items() if not s.supervised] == ["frozen", "truncate", "pca", "autoencoder", "csr_free"]


def test_triplet_cap_per_dataset():
    cfg = {"triplets": {"max_per_query": {"nfcorpus": 4}}}
    assert plan.triplet_cap(cfg, "nfcorpus") == 4 and plan.triplet_cap(cfg, "scifact") is None
    assert plan.triplet_cap({"triplets": {"max_per_query": 7}}, "scifact") == 7
    assert plan.triplet_cap({"triplets": {}}, "scifact") is None
    paper = dcfg.load_yaml(REPO / "config" / "paper.yaml")
    assert "nfcorpus" in paper["datasets"] and paper["triplets"]["max_per_query"]["nfcorpus"] >= 1


def test_expand_is_idempotent():
    once = expanded()
    twice = copy.deepcopy(once)
    twice = plan.expand(twice)
    assert once == twice



def test_the_negatives_wildcard_is_encoded_and_decoded_in_one_place():
    import re

    for mode in plan.NEGATIVES:
        for variant in (None, *plan.TRIPLET_VARIANTS):
            tag = plan.negatives_tag(mode, variant)
            assert re.fullmatch(plan.NEGATIVES_WILDCARD, tag) and plan.parse_negatives(tag) == (mode, variant)
    assert plan.negatives_tag("hard", plan.DOC_DISJOINT) == "hard-docdisjoint"
    assert plan.negatives_tag("random", plan.ARRIVAL) == "random-arrival"
    for bad in ("hard-disjoint", "random-arrival-docdisjoint", "random-"):
        with pytest.raises(ValueError, match="expected"):
            plan.parse_negatives(bad)
    with pytest.raises(dcfg.ConfigError, match="triplet variant 'late'"):
        plan.negatives_tag("random", "late")
    with pytest.raises(dcfg.ConfigError, match="negatives 'semi'"):
        plan.negatives_tag("semi")


def test_the_audits_reference_is_honoured_everywhere():
    """experiments.<lr_audit>.reference decides the audit's reference run: the select job reads
    it, the table lists it; the default is DIVE."""
    cfg = expanded()
    runs = plan.selection_runs(cfg, "lr_audit")
    assert runs[-1]["method"] == "dive" and plan.selection_reference(cfg, "lr_audit") == "dive"
    assert {r["stage"] for r in runs} == {"select"} and len(runs) == 13  # 4 audited methods x 3 + DIVE
    cfg = copy.deepcopy(CONFIG)
    cfg["experiments"]["lr_audit"]["reference"] = "autoencoder"
    cfg = plan.expand(cfg)
    assert plan.selection_reference(cfg, "lr_audit") == "autoencoder"
    assert [r["method"] for r in plan.selection_runs(cfg, "lr_audit")][-1] == "autoencoder"
    assert plan.experiment(cfg, "lr_audit")["methods"][-1] == "autoencoder"
    assert plan.selection_reference(cfg, "dive_config") is None
    cfg["experiments"]["lr_audit"]["reference"] = "nope"
    with pytest.raises(dcfg.ConfigError, match="reference = 'nope' is not defined"):
        plan.selection_reference(cfg, "lr_audit")


def test_runs_of_studies_and_of_the_measurement_studies():
    cfg = expanded()
    main = plan.experiment_runs(cfg, "main")
    assert len(main) == 9 * 3 and main[0] == dict(dataset="scifact", backbone="minilm", method="frozen", k=384,
                                                     stage="final", seed=2027)
    assert plan.experiment_runs(cfg, "efficiency") == [] and plan.experiment_runs(cfg, "frontier") == []
    assert plan.efficiency_runs(cfg, "minilm") == [("frozen", 384), ("dive", 96), ("dive", 64), ("csr", 1536)]
    assert ("frozen", 384) in plan.frontier_runs(cfg, "minilm") and ("mrl", 96) in plan.frontier_runs(cfg, "minilm")
    assert plan.headline_run(cfg, "scifact", "frozen", 2028)["k"] == 384
    assert plan.experiment_title(cfg, "heads") == "heads: validation queries, backbone minilm, primary dimension"
    assert plan.experiment_title(cfg, "dynamics").startswith("dynamics: final-stage training logs")
    assert plan.needs_triplets(cfg, "dive-docdisjoint") and not plan.needs_triplets(cfg, "pca")


def test_the_frontier_repeats_the_verdicts_methods_at_their_other_seeds():
    """config.yaml: autoencoder, MRL and dive-pca again at 2028 and 2029 (each dimension of the
    frontier: 64 and 96), one frontier_seed record per dataset and seed, read by the frontier's table;
    a method the study leaves out is ignored; a list without the first seed is refused."""
    cfg = expanded()
    assert plan.frontier_seeds(cfg) == [2028, 2029]
    assert plan.frontier_seed_runs(cfg, "minilm", 2028) == [("autoencoder", 64), ("autoencoder", 96), ("mrl", 64),
                                                            ("mrl", 96), ("dive-pca", 64), ("dive-pca", 96)]
    p = resolved()
    assert p.frontier_seed_quantized("minilm", 2028) == [("autoencoder", 64), ("mrl", 64), ("dive-pca", 64)]
    inputs = p.frontier_seed_inputs({"dataset": "scifact", "backbone": "minilm", "seed": "2029"})
    assert inputs["checkpoints"][2] == "results/scifact/minilm/mrl/k64/final/seed2029/model.pt"
    assert len(inputs["checkpoints"]) == 6
    assert p.table_inputs({"experiment": "frontier"})["repeats"] == [
        f"results/frontier/{ds}/minilm/seed{s}.json" for ds in p.experiment("frontier")["datasets"] for s in (2028, 2029)]
    narrowed = copy.deepcopy(CONFIG)
    narrowed["experiments"]["frontier"]["methods"] = ["frozen", "mrl"]
    narrowed["experiments"]["frontier"]["method_seeds"]["mrl"] = [2027, 2028]
    narrowed["experiments"]["budget"]["enabled"] = False  # its seeds (2028, 2029) would add 2029
    assert plan.frontier_seeds(expanded(narrowed)) == [2028]
    assert plan.frontier_seed_runs(expanded(narrowed), "minilm", 2028) == [("mrl", 64), ("mrl", 96)]
    resolved(narrowed)  # dive-pca and the autoencoder's repeats are left out, not refused
    inherited = copy.deepcopy(CONFIG)  # the frontier's seeds left to the top-level ones: checked the same
    del inherited["experiments"]["frontier"]["seeds"]
    resolved(inherited)
    frozen = copy.deepcopy(CONFIG)
    frozen["experiments"]["frontier"]["method_seeds"]["frozen"] = [2027, 2028]
    with pytest.raises(dcfg.ConfigError, match="method_seeds.frozen: 'frozen' has no map to retrain"):
        resolved(frozen)
    narrowed["experiments"]["frontier"]["method_seeds"]["dive-pca"] = [2028]  # left out: not checked
    resolved(narrowed)
    bad = copy.deepcopy(CONFIG)
    bad["experiments"]["frontier"]["method_seeds"]["mrl"] = [2028, 2029]
    with pytest.raises(dcfg.ConfigError, match=r"experiments.frontier.method_seeds.mrl = \[2028, 2029\]: the frontier "
                                               "picks its codes at seed 2027"):
        resolved(bad)


def test_a_budget_study_reruns_only_the_maps_picked_on_validation_and_refuses_bad_budgets():
    """config.yaml's budget study (seeds 2027-2029): the frontier's table and the study read the
    validation records; at 2028 and 2029 the frontier_seed jobs run method_seeds' maps and the fitted
    maps of `picked` (what the checkpoint's record picks), never a map that was not picked, and
    frozen never (no map to retrain). Each refusal names its key."""
    p = resolved()
    assert p.budget_seeds() == [2028, 2029]
    inputs = p.table_inputs({"experiment": "budget"})
    assert inputs["validation"] == [f"results/frontier/{ds}/minilm/validation.json"
                                    for ds in p.experiment("budget")["datasets"]]
    assert inputs["repeats"][0] == "results/frontier/scifact/minilm/seed2028.json"
    assert p.table_inputs({"experiment": "frontier"})["validation"] == inputs["validation"]
    picked = [("frozen", 384), ("dive", 64), ("pca", 96)]
    assert p.frontier_seed_runs("minilm", 2029, picked) == [("pca", 96), ("autoencoder", 64), ("autoencoder", 96),
                                                           ("mrl", 64), ("mrl", 96), ("dive", 64), ("dive-pca", 64),
                                                           ("dive-pca", 96)]
    assert p.frontier_seed_runs("minilm", 2029) == p.frontier_seed_runs("minilm", 2028)  # method_seeds' alone
    val = p.frontier_validation_inputs({"dataset": "scifact", "backbone": "minilm"})
    assert val["checkpoints"][1] == "results/scifact/minilm/truncate/k64/select/seed2027/model.pt"
    # the pick rule's maps, from a validation record's rows: to 32 B MRL pq8 (supervised, no label-free code
    # fits), from 64 B PCA sq8 (either family, and the label-free); frozen binary (48 B) is never picked
    row = lambda m, enc, b, v, sup: {"method": m, "dim": 64, "active": None, "encoding": enc,  # noqa: E731
                                     "bytes_per_vector": b, "ndcg@10": v, "per_query": {"ndcg@10": [v] * 3},
                                     "supervised": sup}
    rows = [row("mrl", "pq8", 8, 0.5, True), row("pca", "sq8", 64, 0.6, False), row("frozen", "binary", 48, 0.4, False)]
    assert plan.picked_maps(expanded(), rows) == [("mrl", 64), ("pca", 64)]

    def refused(change, match):
        cfg = copy.deepcopy(CONFIG)
        change(cfg)
        with pytest.raises(dcfg.ConfigError, match=match):
            resolved(cfg)

    refused(lambda c: c["experiments"]["budget"].update(budgets=[]), r"experiments.budget.budgets is empty")
    refused(lambda c: c["experiments"]["budget"].update(budgets=[16, 2]),
            r"experiments.budget.budgets\[1\] = 2: below the smallest code the frontier makes on backbone minilm, "
            r"8 bytes a vector \(autoencoder 64d binary\)")
    refused(lambda c: c["experiments"]["budget"].update(seeds=[2028, 2029]),
            r"experiments.budget.seeds = \[2028, 2029\]: the first must be the frontier's \(2027\)")
    refused(lambda c: c["experiments"]["frontier"].update(methods=["pca", "mrl"]),
            r"experiments.budget: experiments.frontier.methods holds no method of type frozen")
    refused(lambda c: c["experiments"]["budget"].update(index=[48]),
            r"experiments.budget.index\[0\] = 48: not one of experiments.budget.budgets \[8, 16, 32, 64, 256\]")
    assert "results/budget/budget/scifact/minilm/32B/card.json" in p.targets()
    with pytest.raises(dcfg.ConfigError, match=r"experiments.budget.budgets = \[8, 16, 32, 64, 256\]: no budget 48"):
        p.budget_pick({"experiment": "budget", "dataset": "scifact", "backbone": "minilm", "budget": "48"}, "unused")
    refused(lambda c: c["experiments"]["frontier"].update(enabled=False),
            r"experiments.budget: a budget study picks among the frontier's codes")


def test_a_budget_studys_latency_limit_times_the_validation_codes_and_drops_the_slower_from_its_picks(tmp_path):
    """experiments.budget.max_latency_ms: 1: rule frontier_validation times every code on
    efficiency.LATENCY_QUERIES (200) queries (0 with no limit, its rows untimed). Rows: MRL pq8 (8 B, 0.5,
    0.2 ms), PCA sq8 (64 B, 0.6, 3 ms), frozen float32 (1536 B, 0.7, 5 ms). Without a limit the maps picked
    are MRL's and PCA's; with it PCA sq8 is over, so MRL pq8 is the pick at every budget, and the verdict's
    picks (every row) still add PCA's map. The index's pick reads the limit (64 B: MRL pq8, not PCA sq8); a limit of 0.1 ms
    leaves no code: refused naming the key and the fastest; rows timed without latency are refused; an arrival
    budget study refuses the key; the schema refuses a limit of 0."""
    from jsonschema import Draft202012Validator

    from dive_core import records
    from dive_core.efficiency import LATENCY_QUERIES

    row = lambda m, enc, b, v, sup, ms: {"method": m, "dim": 64, "active": None, "encoding": enc,  # noqa: E731
                                         "bytes_per_vector": b, "ndcg@10": v, "per_query": {"ndcg@10": [v] * 3},
                                         "supervised": sup, "latency_ms": ms}
    rows = [row("mrl", "pq8", 8, 0.5, True, 0.2), row("pca", "sq8", 64, 0.6, False, 3.0),
            row("frozen", "float32", 1536, 0.7, False, 5.0)]
    assert resolved().frontier_latency_queries() == 0
    cfg = copy.deepcopy(CONFIG)
    cfg["experiments"]["budget"]["max_latency_ms"] = 1
    p = resolved(cfg)
    assert p.frontier_latency_queries() == LATENCY_QUERIES == 200
    assert plan.budget_candidates(expanded(cfg), "budget", rows) == rows[:1]
    assert plan.picked_maps(expanded(cfg), rows) == [("mrl", 64), ("pca", 64)]  # the verdict's, every row
    path = tmp_path / "validation.json"
    records.write("frontier", path, {"dataset": "scifact", "backbone": "minilm", "n_queries": 3, "query_ids": list("abc"),
                                     "seen": [1, 0, 0], "rows": rows, "versions": {}, "runtime": {}})
    wc = {"experiment": "budget", "dataset": "scifact", "backbone": "minilm", "budget": "64"}
    assert p.budget_pick(wc, str(path))["encoding"] == "pq8"
    assert resolved().budget_pick(wc, str(path))["encoding"] == "sq8"
    cfg["experiments"]["budget"]["max_latency_ms"] = 0.1
    with pytest.raises(dcfg.ConfigError, match=r"config: experiments.budget.max_latency_ms = 0.1: no code meets it "
                                               r"on this machine; the fastest, mrl 64d pq8, takes 0.200 ms a query"):
        resolved(cfg).budget_pick(wc, str(path))
    untimed = [{k: v for k, v in r.items() if k != "latency_ms"} for r in rows]
    with pytest.raises(dcfg.ConfigError, match=r"mrl 64d pq8 \(and 2 more codes\) was scored without a latency"):
        plan.picked_maps(expanded(cfg), untimed)
    arrival = copy.deepcopy(CONFIG)
    arrival["experiments"]["budget_arrival"]["max_latency_ms"] = 1
    with pytest.raises(dcfg.ConfigError, match=r"experiments.budget_arrival.max_latency_ms: a latency limit applies "
                                               r"to a budget study over the frontier's codes"):
        resolved(arrival)
    schema = dcfg.load_yaml(REPO / "config" / "schema" / "config.schema.yaml")
    zero = copy.deepcopy(CONFIG)
    zero["experiments"]["budget"]["max_latency_ms"] = 0
    assert [e.message for e in Draft202012Validator(schema).iter_errors(zero)] == ["0 is less than or equal to the minimum of 0"]
    assert not list(Draft202012Validator(schema).iter_errors({**CONFIG, "experiments": {
        **CONFIG["experiments"], "budget": {**CONFIG["experiments"]["budget"], "max_latency_ms": 2.5}}}))


def test_an_arrival_budget_study_reads_the_arrival_codes_on_validation_and_test_and_refuses_bad_keys():
    """config.yaml's budget_arrival (arrival: arrival_codes, stratum all): its table reads the arrival
    study's codes on test and on validation (rule arrival_codes_validation: the select stage's
    arrival-fitted maps at the arrival study's first seed) and the arrival manifests; it has that one
    seed, reruns no frontier map and writes no index. Each refusal names its key."""
    p = resolved()
    exp = p.experiment("budget_arrival")
    assert exp["seeds"] == [2027] and exp["stratum"] == "all" and exp["arrival"] == "arrival_codes"
    inputs = p.table_inputs({"experiment": "budget_arrival"})
    assert inputs == {"results": [f"results/arrival_codes/arrival_codes/{ds}/minilm.json" for ds in exp["datasets"]],
                      "validation": [f"results/arrival_codes/arrival_codes/{ds}/minilm/validation.json"
                                     for ds in exp["datasets"]],
                      "arrival": [f"results/{ds}/arrival.json" for ds in exp["datasets"]]}
    val = p.arrival_codes_inputs({"experiment": "arrival_codes", "dataset": "scifact", "backbone": "minilm"}, "select")
    assert val["checkpoints"][-1] == "results/scifact/minilm/dive-arrival/k64/select/seed2027/model.pt"
    assert p.budget_seeds() == [2028, 2029]  # the frontier budget study's alone
    assert not [t for t in p.targets() if t.startswith("results/budget/budget_arrival/")]
    with pytest.raises(dcfg.ConfigError, match="picks among an arrival study's codes: it writes no index"):
        p.budget_pick({"experiment": "budget_arrival", "dataset": "scifact", "backbone": "minilm", "budget": "32"},
                      "unused")

    def refused(change, match):
        cfg = copy.deepcopy(CONFIG)
        change(cfg)
        with pytest.raises(dcfg.ConfigError, match=match):
            resolved(cfg)

    ba = lambda c: c["experiments"]["budget_arrival"]  # noqa: E731
    refused(lambda c: ba(c).update(arrival="nope"), r"experiments.budget_arrival.arrival = 'nope': no such experiment")
    refused(lambda c: ba(c).update(arrival="frontier"),
            r"experiments.budget_arrival.arrival = 'frontier': not an enabled arrival study \(study 'frontier'")
    refused(lambda c: c["experiments"]["arrival_codes"].update(enabled=False),
            r"experiments.budget_arrival.arrival = 'arrival_codes': not an enabled arrival study")
    refused(lambda c: c["experiments"]["arrival_codes"].update(codes=["mrl", "dive"]),
            r"experiments.arrival_codes.codes holds no method of type frozen")
    refused(lambda c: ba(c).update(stratum="unseen"),
            r"experiments.budget_arrival.stratum = 'unseen': one of \['all', 'known', 'new', 'mixed'\]")
    refused(lambda c: ba(c).update(index=[32]), r"experiments.budget_arrival.index: an arrival budget study writes no index")
    refused(lambda c: ba(c).update(budgets=[]), r"experiments.budget_arrival.budgets is empty")
    refused(lambda c: ba(c).update(budgets=[16, 3]),
            r"experiments.budget_arrival.budgets\[1\] = 3: below the smallest code experiments.arrival_codes makes on "
            r"backbone minilm, 4 bytes a vector \(autoencoder-arrival 64d pq8x4\)")
    refused(lambda c: ba(c).update(seeds=[2027, 2028]),
            r"experiments.budget_arrival.seeds = \[2027, 2028\]: an arrival budget study scores its codes at "
            r"experiments.arrival_codes's first seed only, \[2027\]")


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(datasets=["scifact", "nope"]),
     r"config: datasets\[1\] = 'nope' is not in the dataset registry"),
    (lambda c: c["split"].update(fractions=[0.5, 0.3, 0.3]),
     r"config: split.fractions \[0.5, 0.3, 0.3\] must sum to 1"),
    (lambda c: c["backbones"]["minilm"]["dims"].update(primary=512),
     r"config: backbones.minilm.dims.primary = 512 exceeds dim 384"),
    (lambda c: c["experiments"]["frontier"].update(methods=["frozen", "nope"]),
     r"config: experiments.frontier.methods\[1\] = 'nope' is not defined under methods"),
    (lambda c: c["experiments"]["arrival_codes"].update(methods=["frozen", "csr"], codes=["frozen", "csr"]),
     r"config: experiments.arrival_codes.codes\[1\] = 'csr-arrival': k-sparse codes are stored as they are"),
    (lambda c: c["experiments"]["frontier"].update(datasets=["nope"]),
     r"config: experiments.frontier.datasets\[0\] = 'nope' is not in the dataset registry"),
    (lambda c: c["efficiency"].update(sparse_method="nope"),
     r"config: efficiency.sparse_method = 'nope' is not defined under methods"),
    (lambda c: c["experiments"]["arrival_codes"].update(methods=[]), r"config: experiments.arrival_codes has no methods"),
    (lambda c: c["experiments"]["budget_arrival"].update(backbones=["mpnet"]),
     r"config: experiments.budget_arrival.backbones: 'mpnet' is not among experiments.arrival_codes's backbones"),
    (lambda c: c["experiments"]["budget_arrival"].update(datasets=["nfcorpus"]),
     r"config: experiments.budget_arrival.datasets: 'nfcorpus' is not among experiments.arrival_codes's datasets"),
    (lambda c: c["experiments"]["budget"].update(backbones=["mpnet"]),
     r"config: experiments.budget.backbones: 'mpnet' is not among the frontier's backbones"),
    (lambda c: c["experiments"]["budget"].update(datasets=["nfcorpus"]),
     r"config: experiments.budget.datasets: 'nfcorpus' is not among the frontier's datasets"),
])
def test_a_key_that_names_what_the_config_does_not_run_is_refused_naming_the_key(change, message):
    """Each of these refusals, at config.yaml's values with one key changed: a dataset, method or backbone
    that is not defined, or not among those of the study a budget study reads, and values that cannot
    hold (fractions that do not sum to 1, a dimension above the backbone's)."""
    cfg = copy.deepcopy(CONFIG)
    change(cfg)
    with pytest.raises(dcfg.ConfigError, match=message):
        resolved(cfg)


def test_the_plan_and_its_params_need_no_torch():
    """The job graph and every job parameter come from dive_core.plan, which imports no torch: a
    Snakemake driver environment without torch plans exactly the same jobs with the same params."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import builtins, copy, json, sys
        real = builtins.__import__
        def no_torch(name, *a, **k):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("no torch here")
            return real(name, *a, **k)
        builtins.__import__ = no_torch
        from dive_core import config as dcfg, plan
        cfg = dcfg.load_yaml({str(REPO / "config" / "config.yaml")!r})
        p = plan.resolve(cfg, dcfg.load_registry({str(REPO / "config" / "datasets.yaml")!r}))
        out = {{m: p.hparams(m) for m in p.methods}}
        out["triplets"] = {{m: p.method(m).supervised for m in p.methods}}
        out["spec"] = p.backbone("minilm").job_spec
        print(json.dumps(out, sort_keys=True))
        assert "torch" not in sys.modules
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    cfg = expanded()
    want = {m: plan.method_hparams(cfg, m) for m in cfg["methods"]}
    want["triplets"] = {m: plan.needs_triplets(cfg, m) for m in cfg["methods"]}
    want["spec"] = {k: v for k, v in CONFIG["backbones"]["minilm"].items() if k not in ("dims", "mem_mb")}
    assert json.loads(proc.stdout) == json.loads(json.dumps(want, sort_keys=True))


def test_value_checks_run_at_plan_time_without_building_a_method():
    cfg = copy.deepcopy(CONFIG)
    cfg["methods"]["dive"] = {**cfg["methods"]["dive"], "heads": "7"}
    cfg = plan.expand(cfg)
    with pytest.raises(dcfg.ConfigError, match=r"methods.dive .*hyperparameter 'heads' must be an integer >= 1 "
                                               r"\(a string was given"):
        plan.check(cfg, dcfg.load_registry(REPO / "config" / "datasets.yaml"))


# -- the second backbone (config/paper.yaml) ------------------------------------------------
def paper_config():
    from snakemake.utils import update_config  # the merge of --configfile itself

    cfg = copy.deepcopy(CONFIG)
    update_config(cfg, dcfg.load_yaml(REPO / "config" / "paper.yaml"))  # what --configfile does
    cfg = plan.expand(cfg)
    plan.check(cfg, dcfg.load_registry(REPO / "config" / "datasets.yaml"))
    return cfg


def test_paper_config_runs_mpnets_own_audit_heads_and_tuned_studies():
    """mpnet's studies: H = 8 exists at 768d -> 64d (no replacement, unlike MiniLM), its audit
    reads mpnet's select-stage runs only, and its tuned runs are mpnet runs at 64d and 128d."""
    cfg = paper_config()
    heads = plan.experiment(cfg, "heads_mpnet")
    assert heads["methods"] == ["dive-h2", "dive", "dive-h8"] and heads["heads_note"] == ""
    assert plan.experiment(cfg, "heads")["methods"] == ["dive-h2", "dive", "dive-h6"]  # MiniLM's own
    audit = plan.experiment_runs(cfg, "lr_audit_mpnet")
    assert {r["backbone"] for r in audit} == {"mpnet"} and {r["stage"] for r in audit} == {"select"}
    assert {r["k"] for r in audit} == {64, 4 * 768}  # csr's candidates at its own width, 4 x 768 latents
    assert {r["dataset"] for r in audit} == {"scifact", "nfcorpus"}
    assert [r["method"] for r in plan.selection_runs(cfg, "lr_audit", "mpnet")] == \
        [r["method"] for r in plan.selection_runs(cfg, "lr_audit")]  # the same candidates, each backbone its own runs
    assert {r["backbone"] for r in plan.selection_runs(cfg, "lr_audit")} == {"minilm"}
    assert {(r["backbone"], r["k"]) for r in plan.selection_runs(cfg, "lr_audit", "mpnet")} == {("mpnet", 64),
                                                                                                ("mpnet", 3072)}
    ks = {(r["method"], r["k"]) for name in ("tuned_mpnet", "tuned_mpnet_secondary")
          for r in plan.experiment_runs(cfg, name)}
    assert ("dive", 64) in ks and ("dive", 128) in ks and ("mrl-tuned", 128) in ks and ("frozen", 768) in ks
    assert {r["backbone"] for r in plan.experiment_runs(cfg, "second_backbone")} == {"mpnet"}


def test_the_gemma_config_compares_every_compressor_with_gemmas_own_prefix():
    """config/gemma.yaml: every gemma study holds `truncate` (the Matryoshka prefix) at the study's
    k, main_gemma has three seeds for frozen, PCA, MRL and DIVE (one with gemma_seed2027.yaml), the
    128d studies run at gemma's secondary dimension, and nothing of it is a MiniLM run."""
    from snakemake.utils import update_config

    def gemma(*extra):
        cfg = copy.deepcopy(CONFIG)
        for name in ("gemma.yaml", *extra):
            update_config(cfg, dcfg.load_yaml(REPO / "config" / name))
        cfg = plan.expand(cfg)
        plan.check(cfg, dcfg.load_registry(REPO / "config" / "datasets.yaml"))
        return cfg

    cfg = gemma()
    names = [n for n in cfg["experiments"] if n.endswith(("_gemma", "_gemma_secondary"))]
    assert sorted(names) == ["arrival_gemma", "lr_audit_gemma", "main_gemma", "secondary_gemma", "tuned_gemma",
                             "tuned_gemma_secondary"]
    for name in names:
        runs = plan.experiment_runs(cfg, name)
        assert {r["backbone"] for r in runs} == {"gemma"}, name
        if name != "lr_audit_gemma":
            k = {r["k"] for r in runs if r["method"] != "frozen"}
            assert {r["k"] for r in runs if r["method"] == "truncate"} == k, name
    main = plan.experiment_runs(cfg, "main_gemma")
    assert sorted(r["seed"] for r in main if r["method"] == "dive") == [2027, 2027, 2028, 2028, 2029, 2029]  # 2 datasets
    assert {r["k"] for r in plan.experiment_runs(cfg, "secondary_gemma")} == {128, 768}
    first_pass = plan.experiment_runs(gemma("gemma_seed2027.yaml"), "main_gemma")
    assert {r["seed"] for r in first_pass} == {2027} and len(first_pass) == 2 * 8


def test_a_heads_or_audit_experiment_over_backbones_that_disagree_is_refused():
    cfg = copy.deepcopy(CONFIG)
    cfg["experiments"]["heads"]["backbones"] = ["minilm", "mpnet"]  # {2, 4, 6} vs {2, 4, 8}
    with pytest.raises(dcfg.ConfigError, match="experiments.heads: backbones .* admit different head counts"):
        plan.expand(cfg)
    cfg = copy.deepcopy(CONFIG)
    cfg["experiments"]["lr_audit"]["backbones"] = ["minilm", "mpnet"]
    with pytest.raises(dcfg.ConfigError, match="experiments.lr_audit: an lr_audit experiment reads one backbone"):
        plan.expand(cfg)
    cfg = copy.deepcopy(CONFIG)
    cfg["experiments"]["lr_audit"]["backbones"] = ["nope"]
    with pytest.raises(dcfg.ConfigError, match="experiments.lr_audit.backbones: 'nope' is not defined"):
        plan.expand(cfg)


# -- the resolved plan: what rules read ----------------------------------------------------
REGISTRY = dcfg.load_registry(REPO / "config" / "datasets.yaml")
RUN = dict(dataset="scifact", backbone="minilm", method="dive", k=64, stage="final", seed=2027)


def resolved(cfg=None, **kw):
    return plan.resolve(cfg or CONFIG, REGISTRY, registry_file="config/datasets.yaml", environ={}, **kw)


def test_resolve_leaves_the_config_as_it_was_and_the_plan_cannot_be_changed():
    cfg = copy.deepcopy(CONFIG)
    p = resolved(cfg)
    assert cfg == CONFIG  # no generated variant was written into the caller's config
    assert "mrl-lr1e-04" in p.methods and "mrl-lr1e-04" not in cfg["methods"]
    with pytest.raises(TypeError):
        p.config["methods"]["dive"] = {}
    with pytest.raises(TypeError):
        p.config["methods"]["dive"]["heads"] = 7
    with pytest.raises(AttributeError):
        p.config["seeds"].append(1)
    with pytest.raises(Exception, match="cannot assign"):
        p.local_beir = "/elsewhere"
    # what a job gets is a copy: changing it changes nothing in the plan
    spec = p.backbone("minilm").job_spec
    spec["batch_size"] = 1
    hp = p.hparams("dive")
    hp["heads"] = 99
    assert p.backbone("minilm").job_spec["batch_size"] == 64 and p.hparams("dive")["heads"] == 4


def test_the_plan_follows_the_defaults_files_key_order():
    """The same settings give the same job parameters however the config was composed."""
    composed = {k: CONFIG[k] for k in reversed(list(CONFIG))}
    a, b = resolved(CONFIG, defaults=CONFIG), resolved(composed, defaults=CONFIG)
    assert list(a.config) == list(b.config) == list(CONFIG)
    assert list(a.result_config(RUN)) == list(b.result_config(RUN))


def test_one_rule_decides_what_of_a_backbone_reaches_a_job():
    """Scheduling keys (dims, mem_mb, shards, source) never reach the embedding, evaluation or
    export jobs, so changing them reruns none of them; everything else does."""
    cfg = copy.deepcopy(CONFIG)
    cfg["backbones"]["minilm"].update(mem_mb=9000, shards=4, dims={"primary": 64, "secondary": 80})
    base, moved = resolved(), resolved(cfg)
    assert moved.backbone("minilm").job_spec == base.backbone("minilm").job_spec
    assert moved.result_config(RUN) == base.result_config(RUN)
    assert "dims" not in base.result_config(RUN)["backbone"] and "model" in base.result_config(RUN)["backbone"]
    cfg["backbones"]["minilm"]["max_length"] = 128  # a key that changes the vectors
    assert resolved(cfg).result_config(RUN)["backbone"]["max_length"] == 128


def test_a_fetched_backbones_model_folder_has_one_owner():
    paper = copy.deepcopy(CONFIG)
    p = resolved(paper)
    assert p.backbone("mpnet").model_dir == "data/models/mpnet" == p.backbone("mpnet").job_spec["model"]
    assert p.model_folder({"backbone": "mpnet"}) == "data/models/mpnet" and p.model_folder({"backbone": "minilm"}) == []
    paper["backbones"]["mpnet"]["model"] = "models/mpnet"
    with pytest.raises(dcfg.ConfigError, match=r"backbones.mpnet.model = 'models/mpnet'.*'data/models/mpnet'"):
        resolved(paper)


def test_each_backbones_embedding_gets_its_familys_environment(monkeypatch):
    """LLM2Vec embeds in its own environment: its conda file, or (pip) the stamp of its venv, which
    rule python_env builds; every other family, and a gather of parts, in the main one."""
    from dive_core import environments

    p = resolved()
    env = environments.ENVIRONMENTS["llm2vec"]
    l2v, mini = {"backbone": "llm2vec-sheared-1.3b", "dataset": "scifact"}, {"backbone": "minilm", "dataset": "scifact"}
    assert p.embed_conda(l2v) == str(REPO / "envs" / "embed-llm2vec.yaml")
    assert p.embed_conda(mini) == str(REPO / "envs" / "embed-gpu.yaml")
    monkeypatch.setattr(environments, "runs_here", lambda e: False)
    assert p.embed_venv({**l2v, "part": "corpus1of4"}, conda=False) == [str(REPO / ".venv-llm2vec" / ".installed")]
    assert p.embed_venv({**l2v, "part": "corpus1of4"}, conda=False) == [str(env.stamp)]
    assert p.embed_venv(l2v, conda=False) == []  # 4 shards: rule embed only gathers
    assert p.embed_venv({**l2v, "part": "corpus1of4"}, conda=True) == []
    assert p.embed_venv(mini, conda=False) == []
    monkeypatch.setattr(environments, "runs_here", lambda e: True)  # one environment that has it all
    assert p.embed_venv({**l2v, "part": "corpus1of4"}, conda=False) == []
    # the rule that builds the venv writes the stamp make writes
    smk = (REPO / "rules" / "embeddings.smk").read_text()
    assert 'os.path.join(workflow.basedir, ".venv-{env}", ".installed")' in smk and env.venv == ".venv-llm2vec"
    assert "L2V_VENV := .venv-llm2vec" in (REPO / "Makefile").read_text()


def test_input_functions_turn_wildcards_into_the_artifacts_a_job_reads():
    p = resolved()
    tuned = dict(RUN, method="mrl-tuned")
    assert p.train_inputs(tuned) == {
        "embeddings": "results/scifact/minilm/embeddings.h5", "splits": "results/scifact/splits.json",
        "selection": "results/selection/minilm/lr_audit.json",
        "triplets": "results/scifact/minilm/triplets/final-random.tsv",
        "triplets_meta": "results/scifact/minilm/triplets/final-random.json"}
    assert p.train_inputs(dict(RUN, method="pca")) == {"embeddings": "results/scifact/minilm/embeddings.h5",
                                                       "splits": "results/scifact/splits.json"}
    assert p.triplet_inputs(dict(RUN, negatives="hard"))["embeddings"] == "results/scifact/minilm/embeddings.h5"
    assert "embeddings" not in p.triplet_inputs(dict(RUN, negatives="random-docdisjoint"))
    assert p.staging_input({"dataset": "scifact"}) == "data/beir/_zips/scifact.zip"
    assert p.staging_input({"dataset": "scifact-tiny"}) == []  # local only
    assert plan.resolve(CONFIG, REGISTRY, environ={"BEIR_DATA_DIR": "/data/beir"}).staging_input(
        {"dataset": "scifact"}) == []
    assert p.table_inputs({"experiment": "efficiency"}) == {
        "results": ["results/efficiency/scifact/minilm.json", "results/efficiency/synthetic.json"]}
    audit = p.table_inputs({"experiment": "lr_audit"})
    assert audit["selection"] == "results/selection/minilm/lr_audit.json" and len(audit["results"]) == 13
    # the select job's params as before the plan object: (name, overrides) tuples (a change reruns it)
    assert p.selection_candidates("lr_audit")["mrl"][0] == ("mrl-lr1e-04", {"lr": 1e-4})
    assert p.headline_eval({"dataset": "scifact", "method": "frozen", "seed": "2028"}) == \
        "results/scifact/minilm/frozen/k384/final/seed2028/eval.json"
    assert p.embed_parts({"dataset": "scifact", "backbone": "minilm"}) == []
    cfg = copy.deepcopy(CONFIG)
    cfg["backbones"]["minilm"]["shards"] = 3
    assert resolved(cfg).embed_parts({"dataset": "scifact", "backbone": "minilm"}) == [
        f"results/scifact/minilm/embed_parts/{part}.h5" for part in ("corpus1of3", "corpus2of3", "corpus3of3",
                                                                     "queries")]
    with pytest.raises(dcfg.ConfigError, match="unknown method 'nope'; defined under methods"):
        p.train_inputs(dict(RUN, method="nope"))
    with pytest.raises(dcfg.ConfigError, match="dataset 'nope' is not in config/datasets.yaml"):
        p.staging_input({"dataset": "nope"})


def test_every_wildcard_value_the_plan_writes_into_a_path_matches_its_grammar():
    """The targets of `all` on the paper's config parse back under the wildcard grammar that
    Snakemake is given, and the shard names round-trip."""
    import re

    from dive_core import paths
    from snakemake.utils import update_config

    cfg = copy.deepcopy(CONFIG)
    update_config(cfg, dcfg.load_yaml(REPO / "config" / "paper.yaml"))
    p = resolved(cfg)
    pattern = re.sub(r"\\\{(\w+)\\\}", lambda m: f"(?P<{m.group(1)}>{plan.WILDCARDS[m.group(1)]})",
                     re.escape(paths.PER_QUERY))
    per_query = [t for t in p.targets() if t.endswith("per_query.tsv")]
    assert len(per_query) > 100 and all(re.fullmatch(pattern, t) for t in per_query)
    for n in (1, 3):
        for name in paths.part_names(n):
            assert re.fullmatch(plan.WILDCARDS["part"], name)
            shard, shards = paths.parse_part(name)
            assert paths.part_name(shard, shards or n) == name
    with pytest.raises(ValueError, match="expected 'queries' or 'corpus<i>of<n>'"):
        paths.parse_part("corpus2")


# -- a backbone of family vectors (embeddings from files) -----------------------------------
def vectors_config(**entry):
    cfg = copy.deepcopy(CONFIG)
    cfg["backbones"]["llm"] = {"family": "vectors", "dim": 4096, "dims": {"primary": 128, "secondary": 256},
                               "corpus": "/data/vec/{dataset}/corpus.npy",
                               "queries": "/data/vec/{dataset}/queries.parquet", **entry}
    return cfg


def test_a_vectors_backbone_reads_its_files_and_nothing_else():
    p = resolved(vectors_config(sha256={"corpus": {"scifact": "a" * 64}}))
    assert p.vector_files({"dataset": "scifact", "backbone": "llm"}) == [
        "/data/vec/scifact/corpus.npy", "/data/vec/scifact/corpus.ids.txt", "/data/vec/scifact/queries.parquet"]
    assert p.vector_files({"dataset": "scifact", "backbone": "minilm"}) == []
    spec = p.backbone("llm").job_spec
    assert spec["corpus"] == "/data/vec/{dataset}/corpus.npy" and spec["sha256"] == {"corpus": {"scifact": "a" * 64}}
    assert p.model_folder({"backbone": "llm"}) == [] and p.query_instruction({"dataset": "scifact",
                                                                               "backbone": "llm"}) == ""


@pytest.mark.parametrize("entry, message", [
    ({"shards": 4}, r"backbones.llm: \['shards'\] do not apply to a backbone of family 'vectors'"),
    ({"model": "x"}, r"backbones.llm: \['model'\] do not apply"),
    ({"corpus": "/data/vec/corpus.parquet"}, r"backbones.llm.corpus = '/data/vec/corpus.parquet' names one file for "
                                             r"the datasets \['scifact'.*put \{dataset\} in the path"),
    ({"queries": "/data/{dataset}/q.csv"}, r"backbones.llm.queries: /data/scifact/q.csv|backbones.llm.queries: .*"
                                           r"unknown vector file type '.csv'"),
    ({"corpus": "/data/{dataset}/{split}.npy"}, r"the only placeholder is \{dataset\}"),
    ({"sha256": {"corpus": "a" * 64}}, r"backbones.llm.sha256.corpus is one sha256 for a file per dataset"),
])
def test_a_vectors_backbone_that_cannot_work_is_refused_naming_its_key(entry, message):
    cfg = vectors_config(**entry)
    cfg["datasets"] = ["scifact", "nfcorpus"]
    with pytest.raises(dcfg.ConfigError, match=message):
        resolved(cfg)
    cfg = copy.deepcopy(CONFIG)
    cfg["backbones"]["minilm"]["corpus"] = "/x.parquet"
    with pytest.raises(dcfg.ConfigError, match=r"backbones.minilm: \['corpus'\] belong to a backbone of family "
                                               r"'vectors', not 'sentence_transformers'"):
        resolved(cfg)


def test_smecs_stages_at_the_papers_dimensions_need_enough_epochs_at_plan_time():
    """4096d -> 128d is five SMEC stages: three epochs cannot be split over them, which the plan
    says before any job starts (the test config's 3 epochs once failed inside the training job)."""
    cfg = vectors_config()
    cfg["training"]["epochs"] = 3
    cfg["experiments"]["main"]["backbones"] = ["llm"]
    with pytest.raises(dcfg.ConfigError, match=r"methods.smec \(experiments.main, backbone llm .*d = 4096, "
                                               r"k = 128\): .*epochs = 3 cannot be split over its 5 stages"):
        resolved(cfg)
    cfg["methods"]["smec"]["epochs"] = 5
    cfg["experiments"] = {"main": cfg["experiments"]["main"]}
    assert resolved(cfg).hparams("smec")["epochs"] == 5


def test_a_vectors_path_without_dataset_is_refused_when_any_study_uses_two_datasets():
    cfg = vectors_config(corpus="/data/vec/corpus.parquet")
    cfg["experiments"]["main"]["datasets"] = ["scifact", "nfcorpus"]  # top-level datasets: [scifact]
    with pytest.raises(dcfg.ConfigError, match=r"names one file for the datasets \['scifact', 'nfcorpus'\]"):
        resolved(cfg)


def test_the_arrival_variants_select_on_their_own_arrival_runs():
    """Every arrival_variants candidate is its own run under the arrival protocol (`-arrival`,
    `arrival: true`, no `selected`), beside the refitted references; the final variants read the pick."""
    p = plan.resolve(CONFIG, dcfg.load_registry(REPO / "config" / "datasets.yaml"), defaults=CONFIG)
    cands = p.selection_candidates("arrival_variants")
    assert cands["dive-corpusgeo"][0] == ("dive-corpusgeo-corpusdocs128-gammacorpus3-arrival",
                                          {"corpus_docs": 128, "gamma_corpus": 3.0})
    for name, over in (c for cs in cands.values() for c in cs):
        m = p.method(name)
        assert m.arrival and m.selected is None and m.negatives == "random-arrival"
        assert all(m.hparams[k] == v for k, v in over.items())
    runs = p.selection_runs("arrival_variants", "minilm")
    assert [r["method"] for r in runs][-2:] == ["dive-arrival", "mrl-arrival"]
    assert {r["stage"] for r in runs} == {"select"} and {r["k"] for r in runs} == {64}
    inputs = p.selection_inputs({"study": "arrival_variants", "backbone": "minilm"})
    assert len(inputs["per_query"]) == len(inputs["results"]) == len(runs)
    assert inputs["arrival"] == ["results/scifact/arrival.json"]
    assert list(p.selection_inputs({"study": "lr_audit", "backbone": "minilm"})) == ["results"]
    w = dict(dataset="scifact", backbone="minilm", method="dive-pcainit-arrival", k=64, stage="final", seed=2027)
    assert p.train_inputs(w)["selection"] == "results/selection/minilm/arrival_variants.json"


def test_an_arrival_run_drops_a_pick_made_on_fits_that_saw_every_document():
    """`mrl-tuned` reads lr_audit/mrl, a pick made on fits that saw the arriving documents too:
    its arrival refit trains at the entry's own values, with no dependency on that record. An
    arrival_variants pick (made on arrival runs) is kept."""
    cfg = copy.deepcopy(CONFIG)
    cfg["methods"]["dive"] = {**cfg["methods"]["dive"], "selected": "dive_config/dive"}
    cfg["selection"] = {**cfg["selection"], "dive_grid": {"margin": [0.5, 0.7]}}
    cfg["experiments"]["arrival"] = {**cfg["experiments"]["arrival"], "methods": ["dive", "mrl-tuned", "dive-pcainit"],
                                     "method_seeds": {}}
    p = plan.resolve(cfg, dcfg.load_registry(REPO / "config" / "datasets.yaml"), defaults=CONFIG)
    assert p.method("mrl-tuned").selected == "lr_audit/mrl" and p.method("dive").selected == "dive_config/dive"
    assert p.method("mrl-tuned-arrival").selected is None and p.method("dive-arrival").selected is None
    assert p.method("mrl-tuned-arrival").hparams == p.method("mrl-arrival").hparams
    assert p.method("dive-pcainit-arrival").selected == "arrival_variants/dive-pcainit"
    for m in ("mrl-tuned-arrival", "dive-arrival"):
        w = dict(dataset="scifact", backbone="minilm", method=m, k=64, stage="final", seed=2027)
        assert "selection" not in p.train_inputs(w), m
