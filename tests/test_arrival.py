"""The arrival protocol: documents that arrive after training. The split rule (by hand and by its
properties), the triplets and every method's fit see known documents only, and the label-free fits
depend on which documents are known."""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from dive_core import config as dcfg
from dive_core import plan, records, splits
from dive_core import triplets as T
from dive_core.data import BeirDataset
from dive_core.embeddings import Embeddings
from dive_core.methods import SPECS, discover, new_method
from dive_core.training import TrainLog, fit_data
from synthetic import SMALL_INPUTS

ROOT = Path(__file__).resolve().parents[1]


def dataset(corpus_ids, qrels, order_seed=None) -> BeirDataset:
    """A BeirDataset from ids and ``{query: {doc: score}}`` (optionally in a shuffled order)."""
    corpus_ids, qids = list(corpus_ids), list(qrels)
    if order_seed is not None:
        rnd = random.Random(order_seed)
        rnd.shuffle(corpus_ids)
        rnd.shuffle(qids)
    return BeirDataset(root=Path("."), corpus={d: {"title": "", "text": f"text of {d}"} for d in corpus_ids},
                       queries={q: f"query {q}" for q in qids}, qrels={"test": {q: dict(qrels[q]) for q in qids}},
                       fingerprint={"corpus": "x"})


def split_manifest(ids: dict[str, list[str]], ds: BeirDataset) -> dict:
    merged = ds.all_qrels()
    return {"dataset": "toy", "seed": 1, "source_fingerprint": ds.fingerprint, "ids": ids,
            "qrels": {r: {q: merged[q] for q in qs} for r, qs in ids.items()}}


# --------------------------------------------------------------------------- the rule by hand
def test_the_arrival_rule_on_a_hand_example():
    """4 documents, fraction 0.5: A = 2 arrive. Share 1.0: validation's v1 is taken first, and its
    relevant documents a, b arrive (2 <= A; d is judged 0); test's t1 (c) and t2 (b, c) would each
    make 3 arrive, so both are skipped; A are arriving, nothing is filled. Strata: v1 new, t1 known,
    t2 mixed, the training query r1 (a) new."""
    ds = dataset("abcd", {"r1": {"a": 1}, "v1": {"a": 1, "b": 2, "d": 0}, "t1": {"c": 1}, "t2": {"b": 1, "c": 1}})
    m = split_manifest({"train": ["r1"], "validation": ["v1"], "test": ["t1", "t2"]}, ds)
    a = splits.make_arrival_manifest(ds, m, seed=7, fraction=0.5, new_query_share=1.0, splits_sha256="s")
    assert a["arriving"] == ["a", "b"]
    assert a["taken"] == {"validation": ["v1"], "test": []}
    assert a["strata"]["validation"] == {"known": [], "new": ["v1"], "mixed": []}
    assert a["strata"]["test"] == {"known": ["t1"], "new": [], "mixed": ["t2"]}
    assert a["strata"]["train"] == {"known": [], "new": ["r1"], "mixed": []}
    assert a["counts"]["arriving"] == 2 and a["counts"]["known"] == 2
    assert a["counts"]["arriving_train_positives"] == 2  # a (r1's) and b (v1's, a final-stage training query)
    assert a["rule"] == splits.ARRIVAL_RULE_TEXT and "sha256(f'{seed}:arrival:{query_id}')" in a["rule"]
    records.check("arrival", records.stamp("arrival", a), "arrival.json")  # every field of the record
    # the known documents a fit may see, in the corpus order given
    assert splits.known_docs(["d", "c", "b", "a"], a) == ["d", "c"]
    assert splits.known_docs(["d", "c"], None) == ["d", "c"]


def test_the_fill_follows_the_document_hash_rank_and_turns_alternate():
    """With no evaluated query to take, the A documents of lowest sha256(f'{seed}:arrival:{id}')
    arrive; with queries, validation and test take turns (validation first)."""
    docs = [f"d{i}" for i in range(10)]
    arriving, taken = splits.arriving_docs(docs, {}, {"validation": [], "test": []}, seed=3, fraction=0.3)
    by_hash = sorted(docs, key=lambda d: splits.arrival_key(3, d))
    assert arriving == sorted(by_hash[:3])
    relevant = {"v1": {"d0"}, "v2": {"d1"}, "t1": {"d2"}, "t2": {"d3"}}
    arriving, taken = splits.arriving_docs(docs, relevant, {"validation": ["v1", "v2"], "test": ["t1", "t2"]},
                                           seed=3, fraction=0.3, new_query_share=1.0)
    # budget 3: validation's first, test's first, validation's second; test's second no longer fits
    first = {r: sorted(qs, key=lambda q: splits.arrival_key(3, q)) for r, qs in
             {"validation": ["v1", "v2"], "test": ["t1", "t2"]}.items()}
    assert taken == {"validation": first["validation"], "test": first["test"][:1]}
    assert set(arriving) == set().union(*(relevant[q] for q in taken["validation"] + taken["test"]))


def toy_world(n_docs=80, n_queries=40, seed=0):
    rng = np.random.default_rng(seed)
    docs = [f"doc{i:03d}" for i in range(n_docs)]
    qrels = {}
    for i in range(n_queries):
        rel = rng.choice(n_docs, size=int(rng.integers(1, 4)), replace=False)
        qrels[f"q{i:03d}"] = {docs[j]: int(rng.integers(1, 3)) for j in rel}
    return docs, qrels


def test_the_split_is_seeded_exact_and_independent_of_listing_order():
    docs, qrels = toy_world()
    ds = dataset(docs, qrels)
    m = splits.make_manifest(ds, "toy", 2027)
    a = splits.make_arrival_manifest(ds, m, 2027, 0.25, 0.5)
    assert len(a["arriving"]) == math.floor(0.25 * len(docs)) == a["counts"]["arriving"]
    rel = ds.relevant()
    arr = set(a["arriving"])
    for role in ("validation", "test"):
        assert len(a["taken"][role]) == math.floor(0.5 * len(m["ids"][role]))  # enough room in this world
        for q in a["taken"][role]:
            assert rel[q] <= arr and q in a["strata"][role]["new"]
        for s, qs in a["strata"][role].items():
            assert all(splits.stratum(rel[q], arr) == s for q in qs)
        assert sorted(q for qs in a["strata"][role].values() for q in qs) == sorted(m["ids"][role])
    shuffled = dataset(docs, qrels, order_seed=5)
    assert splits.make_arrival_manifest(shuffled, splits.make_manifest(shuffled, "toy", 2027), 2027, 0.25, 0.5) == a
    other = splits.make_arrival_manifest(ds, m, 2028, 0.25, 0.5)
    assert other["arriving"] != a["arriving"]


def test_a_query_that_is_its_own_arriving_document_is_no_training_query():
    """ArguAna-style collections: a query whose own corpus document arrives is the document's
    vector, so it leaves the training queries; one whose document is known stays."""
    m = {"identical_ids": {"ids": ["d1", "d2"]}}
    a = {"arriving": ["d1", "d9"]}
    assert splits.known_queries(["q0", "d1", "d2"], m, a) == ["q0", "d2"]
    assert splits.known_queries(["q0", "d1"], m, None) == ["q0", "d1"]


@pytest.mark.parametrize("key,value", [("fraction", 0.0), ("fraction", 1.0), ("new_query_share", 1.5)])
def test_bad_arrival_settings_are_refused_naming_the_key(key, value):
    kwargs = {"fraction": 0.2, "new_query_share": 0.2, key: value}
    with pytest.raises(ValueError, match=f"arrival.{key}"):
        splits.arriving_docs(["a", "b"], {}, {"validation": [], "test": []}, 1, **kwargs)


def test_an_arrival_manifest_of_another_split_is_refused(tmp_path):
    (tmp_path / "splits.json").write_text("{}")
    with pytest.raises(ValueError, match="arrival.json: made from another split manifest.*make_arrival"):
        splits.check_arrival({"splits_sha256": "0" * 64}, tmp_path / "arrival.json", tmp_path / "splits.json")


# --------------------------------------------------------------------------- what the fits see
@pytest.fixture(scope="module")
def world():
    """A toy collection with embeddings, its split, an arrival split, and the arrival triplets."""
    docs, qrels = toy_world(n_docs=120, n_queries=60, seed=1)
    ds = dataset(docs, qrels)
    m = splits.make_manifest(ds, "toy", 2027)
    a = splits.make_arrival_manifest(ds, m, 2027, 0.25, 0.5)
    rng = np.random.default_rng(2)
    d = 32
    vec = rng.standard_normal((len(docs) + len(qrels), d)).astype(np.float32)
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    emb = Embeddings(docs, vec[:len(docs)], list(qrels), vec[len(docs):], {})
    return ds, m, a, emb


def arrival_triplets(ds, m, a, mode="random", hard=None):
    train = splits.train_queries(m, "final")
    return train, T.build_triplets(splits.role_qrels(m, ["train", "validation"]), train,
                                   splits.known_docs(ds.doc_ids, a), seed=2027, num_negatives=5, mode=mode,
                                   hard_candidates=hard)


@pytest.mark.parametrize("mode", ["random", "hard"])
def test_no_arriving_document_is_a_positive_or_a_negative(world, mode):
    ds, m, a, _ = world
    arr = set(a["arriving"])
    # hard candidates that include arriving documents: the triplets still hold none of them
    hard = {q: list(ds.doc_ids) for q in m["ids"]["train"] + m["ids"]["validation"]} if mode == "hard" else None
    train, t = arrival_triplets(ds, m, a, mode, hard)
    assert len(t) > 0
    assert not arr & (set(t.pos_ids) | set(t.neg_ids))
    # every known positive of a training query is kept, every arriving one dropped
    rel = ds.relevant()
    assert set(zip(t.query_ids, t.pos_ids)) == {(q, p) for q in train for p in rel.get(q, ()) if p not in arr}


def configured_hparams():
    """Every method type at the configured values of config/config.yaml, trained briefly."""
    cfg = dcfg.load_yaml(ROOT / "config" / "config.yaml")
    cfg["training"].update(epochs=2, batch_size=16, hidden=32)
    out = {}
    for name, entry in cfg["methods"].items():
        t = entry.get("type", name)
        if t not in out:  # the first entry of each type
            out[t] = plan.method_hparams(cfg, name)
    for t, small in SMALL_INPUTS.items():
        out[t].update(small)
    return out


def test_no_arriving_document_reaches_any_fit(world, tmp_path, monkeypatch):
    """Record what every registered method's ``fit`` receives when its data is built as the
    train job builds it under the arrival protocol: the corpus rows are exactly the known
    documents' vectors (none of an arriving one), the queries only the stage's training queries,
    every triplet index within them."""
    ds, m, a, emb = world
    train, t = arrival_triplets(ds, m, a)
    tsv = tmp_path / "final-random-arrival.tsv"
    T.write_triplets(tsv, t)
    known = splits.known_docs(emb.doc_ids, a)
    row = emb.doc_index()
    known_rows = {emb.docs[row[d]].tobytes() for d in known}
    arriving_rows = {emb.docs[row[d]].tobytes() for d in a["arriving"]}
    train_rows = {emb.queries[emb.query_index()[q]].tobytes() for q in train}
    hp = configured_hparams()
    seen = {}
    types = discover()
    for type_name, cls in types.items():
        real = cls.fit

        def recording(self, data, log, progress=True, _real=real, _name=type_name):
            seen[_name] = (data.docs.detach().clone(), data.queries.detach().clone(), data.t_p.clone(),
                           data.t_n.clone(), data.t_q.clone())
            return _real(self, data, log, progress=progress)

        monkeypatch.setattr(cls, "fit", recording)
    torch.set_num_threads(1)
    for type_name in types:
        supervised = types[type_name].supervised
        data = fit_data(emb, train, tsv if supervised else None, doc_ids=known)
        k = SPECS[type_name].dimension(emb.dim, 8, hp.get(type_name, {}))  # frozen: d; csr: its H latents
        new_method(type_name, emb.dim, k, hp.get(type_name, {}), 2027).fit(data, TrainLog(), progress=False)
    assert set(seen) == set(types)
    for type_name, (docs, queries, t_p, t_n, t_q) in seen.items():
        got = {r.numpy().tobytes() for r in docs}
        assert got == known_rows and len(docs) == len(known), type_name
        assert not got & arriving_rows, type_name
        assert {r.numpy().tobytes() for r in queries} <= train_rows, type_name
        if len(t_p):
            assert int(max(t_p.max(), t_n.max())) < len(known) and int(t_q.max()) < len(queries), type_name
    # without the arrival split the same data holds every document (what the check above would catch)
    everything = {r.numpy().tobytes() for r in fit_data(emb, train).docs}
    assert everything & arriving_rows


def test_a_triplet_with_an_arriving_document_is_refused(world, tmp_path):
    ds, m, a, emb = world
    train = splits.train_queries(m, "final")
    t = T.build_triplets(splits.role_qrels(m, ["train", "validation"]), train, ds.doc_ids, seed=2027,
                         num_negatives=5)  # the standard triplets: arriving documents among them
    tsv = tmp_path / "final-random.tsv"
    T.write_triplets(tsv, t)
    with pytest.raises(ValueError, match="final-random.tsv: document .* is not a document this fit may see"):
        fit_data(emb, train, tsv, doc_ids=splits.known_docs(emb.doc_ids, a))


def state_after_fit(type_name, emb, ds, m, a, hp):
    train, t = arrival_triplets(ds, m, a)
    path = Path(f"/tmp/arrival-{type_name}-{a['seed']}.tsv")
    T.write_triplets(path, t)
    data = fit_data(emb, train, path if type_name == "mrl" else None, doc_ids=splits.known_docs(emb.doc_ids, a))
    method = new_method(type_name, emb.dim, 8, hp[type_name], 2027)
    method.fit(data, TrainLog(), progress=False)
    return method.state_sha256()


@pytest.mark.parametrize("type_name", ["pca", "autoencoder", "mrl"])
def test_the_corpus_fits_change_when_the_arrival_split_changes(world, type_name):
    """PCA, the autoencoder and MRL (whose first stage reads the corpus) fitted on the known
    documents of two arrival splits differ; the same split twice gives the same weights."""
    ds, m, a, emb = world
    torch.set_num_threads(1)
    hp = configured_hparams()
    b = splits.make_arrival_manifest(ds, m, 2028, 0.25, 0.5)
    assert b["arriving"] != a["arriving"]
    first = state_after_fit(type_name, emb, ds, m, a, hp)
    assert state_after_fit(type_name, emb, ds, m, copy.deepcopy(a), hp) == first
    assert state_after_fit(type_name, emb, ds, m, b, hp) != first


# --------------------------------------------------------------------------- the plan
def test_the_arrival_study_refits_every_method_that_fits_and_shares_the_others():
    cfg = dcfg.load_yaml(ROOT / "config" / "config.yaml")
    reg = dcfg.load_registry(ROOT / "config" / "datasets.yaml")
    p = plan.resolve(cfg, reg, defaults=cfg)
    exp = p.experiment("arrival")
    assert exp["methods"] == ["frozen", "truncate", "pca-arrival", "autoencoder-arrival", "mrl-arrival",
                              "search_adaptor-arrival", "smec-arrival", "dive-arrival", "dive-pcainit-arrival",
                              "dive-corpusgeo-arrival", "dive-pcacorpus-arrival", "qside-linear-arrival",
                              "qside-mlp-arrival", "qside-procrustes-arrival", "qside-ae-arrival",
                              "qside-known-arrival"]
    seeds = {r["method"]: [] for r in p.runs("arrival")}
    for r in p.runs("arrival"):
        seeds[r["method"]].append(r["seed"])
    assert seeds["frozen"] == seeds["pca-arrival"] == seeds["dive-arrival"] == seeds["qside-ae-arrival"] == \
        [2027, 2028, 2029]
    assert seeds["smec-arrival"] == seeds["truncate"] == [2027]
    w = dict(dataset="scifact", backbone="minilm", k=64, stage="final", seed=2027)
    for name in ("pca-arrival", "dive-arrival"):
        assert p.train_inputs(dict(w, method=name))["arrival"] == "results/scifact/arrival.json"
    assert "arrival" not in p.train_inputs(dict(w, method="dive"))
    assert p.train_inputs(dict(w, method="dive-arrival"))["triplets"].endswith("final-random-arrival.tsv")
    tw = dict(dataset="scifact", backbone="minilm", stage="final", negatives="random-arrival")
    assert p.triplet_inputs(tw)["arrival"] == "results/scifact/arrival.json"
    assert p.table_inputs({"experiment": "arrival"})["arrival"] == ["results/scifact/arrival.json"]
    assert plan.parse_negatives("hard-arrival") == ("hard", "arrival")
    bad = copy.deepcopy(cfg)
    bad["methods"]["dive"]["doc_disjoint"] = True
    bad["methods"]["dive"]["arrival"] = True
    with pytest.raises(dcfg.ConfigError, match="methods.dive: doc_disjoint and arrival"):
        plan.resolve(bad, reg, defaults=cfg)
    bad = copy.deepcopy(cfg)
    bad["experiments"]["arrival"]["method_seeds"]["dive-arrival"] = [1]
    with pytest.raises(dcfg.ConfigError, match="names both 'dive' and its generated variant 'dive-arrival'"):
        plan.resolve(bad, reg, defaults=cfg)
    bad = copy.deepcopy(cfg)
    bad["experiments"]["arrival"]["method_seeds"]["nope"] = [1]
    with pytest.raises(dcfg.ConfigError, match="experiments.arrival.method_seeds.nope"):
        plan.resolve(bad, reg, defaults=cfg)
