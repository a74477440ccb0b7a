"""dive_core.compress.pick: the code to store in B bytes a vector without judgments (vectors alone),
picked on held-out queries by recall@10 against exact search, tested on others, its index written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dive_core.compress import pick
from dive_core.selection import code_key, pick_code

REPO = Path(__file__).resolve().parent.parent
SETTINGS = {"pq_m": [4, 8], "opq_m": [4], "opq_niter": 2, "rabitq_bits": [1], "sq4": True, "seed": 2027}


def test_recall_and_the_seeded_division_of_the_held_out_queries():
    """recall@10 per query: the share of the exact top k among those found ({3} of {1, 2, 3} against
    {3, 4, 5}: 1/3). The sample: 6 of 10 rows drawn by the seed, the first 3 drawn validation, the
    rest test, the same for the same seed, disjoint, another draw for another seed."""
    assert pick.recall_at(np.array([[1, 2, 3], [4, 5, 6]]), np.array([[3, 4, 5], [6, 5, 4]])) == [1 / 3, 1.0]
    val, test = pick.split_sample(10, 6, 2027)
    draw = np.random.default_rng(2027).permutation(10)[:6]
    assert val.tolist() == sorted(draw[:3].tolist()) and test.tolist() == sorted(draw[3:].tolist())
    assert not set(val) & set(test)
    assert pick.split_sample(10, 6, 2028)[0].tolist() != val.tolist()
    assert [len(x) for x in pick.split_sample(5, 100, 1)] == [2, 3]  # at most the rows there are
    with pytest.raises(pick.CompressError, match="the validation and the test half need one each"):
        pick.split_sample(1, 100, 1)


def test_the_grid_is_frozen_and_pca_under_the_float_codes_and_the_configured_quantizers():
    """At d = 32, PCA at 16 and 8 (64, not below d, is left out): float32, float16, SQ8, then PQ at M 4
    and 8 where M divides the dimension and is at most half of it (PQ8 at 32 and 16, not at 8), OPQ4,
    RaBitQ and SQ4; PCA's matrix stands in front of each code's factory string."""
    codes = pick.candidate_codes(32, [16, 8, 64], SETTINGS)
    got = {(c["method"], c["dim"], c["encoding"]): c["factory"] for c in codes}
    assert {k for k in got if k[0] == "frozen"} == {("frozen", 32, e) for e in
                                                   ("float32", "float16", "sq8", "pq4", "pq8", "opq4", "rabitq", "sq4")}
    assert ("pca", 8, "pq8") not in got and ("pca", 8, "pq4") in got and not [k for k in got if k[1] == 64]
    assert got[("pca", 16, "opq4")] == "PCA16,OPQ4,PQ4x8" and got[("frozen", 32, "float16")] == "SQfp16"
    assert got[("pca", 8, "float32")] == "PCA8,Flat"


def clustered(n=700, d=32, centers=12, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(centers, d))
    x = c[rng.integers(0, centers, n)] + 0.35 * rng.normal(size=(n, d))
    return x.astype(np.float32)


def write_npy(path: Path, x: np.ndarray, prefix: str) -> Path:
    np.save(path, x)
    path.with_name(path.stem + ".ids.txt").write_text("".join(f"{prefix}{i}\n" for i in range(len(x))))
    return path


def test_each_budget_is_picked_on_validation_scored_on_test_and_its_index_searches_as_scored(tmp_path):
    """700 clustered 32d documents, 200 held-out queries (100 + 100): every pick is pick_code's on the
    validation rows alone (test rows perturbed: the same picks); its test recall@10 is its row's; the
    written 16-byte index is the pick's code over the whole corpus and, searched with the test queries in
    their own 32d space, finds what the record says it found (the same recall@10); a second process
    writes the same index bytes."""
    docs = write_npy(tmp_path / "docs.npy", clustered(), "d")
    queries = write_npy(tmp_path / "q.npy", clustered(300, seed=1), "q")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"quantizers": SETTINGS}))
    argv = [str(docs), str(tmp_path / "out"), "--queries", str(queries), "--sample", "200", "--budgets", "4", "8",
            "16", "64", "--dims", "16", "8", "--index-budget", "16", "--config", str(cfg), "--quiet"]
    assert pick.main(argv) == 0
    rec = json.loads((tmp_path / "out" / "budget.json").read_text())
    assert (rec["queries"]["validation"], rec["queries"]["test"]) == (100, 100)
    assert [e["budget"] for e in rec["picks"]] == [4, 8, 16, 64]
    by_key = {code_key(r): r for r in rec["test_rows"]}
    for e in rec["picks"]:
        want = pick_code(rec["rows"], e["budget"], metric="recall@10")
        assert (e["method"], e["dim"], e["encoding"]) == (want["method"], want["dim"], want["encoding"])
        assert e["test"] == by_key[code_key(want)]["recall@10"] and e["bytes_per_vector"] <= e["budget"]
        assert e["regret"] >= 0
    shuffled = [{**r, "recall@10": 1.0 - r["recall@10"]} for r in rec["test_rows"]]
    assert [x["code"] for x in pick.picks(rec["rows"], shuffled, [4, 8, 16, 64])] == [e["code"] for e in rec["picks"]]
    md = (tmp_path / "out" / "budget.md").read_text()
    assert "No relevance judgment is read" in md and f"| 16 | **{rec['picks'][2]['code']}** |" in md

    import faiss

    from dive_core.embeddings import normalize_rows_

    e16 = rec["picks"][2]
    index = faiss.read_index(str(tmp_path / "out" / "16B" / "index.faiss"))
    assert index.ntotal == 700 and index.sa_code_size() == e16["bytes_per_vector"]
    x, q = np.load(docs), np.load(queries)
    normalize_rows_(x), normalize_rows_(q)
    test_q = q[rec["queries"]["test_rows"]]
    truth = pick.exact_top(x, test_q)
    assert np.mean(pick.recall_at(index.search(test_q, 10)[1], truth)) == pytest.approx(e16["test"])
    card = json.loads((tmp_path / "out" / "16B" / "card.json").read_text())
    assert card["code"] == e16["code"] and card["ntotal"] == 700
    done = subprocess.run([sys.executable, "tools/publish_tables.py", "--results", str(tmp_path / "out"), "--docs",
                           str(tmp_path / "docs"), "--command", "python -m dive_core.compress.pick ...", "--", "pick"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "docs" / "pick.md").read_text()
    assert "- runs: 1, listed in" in page and "- machine: " in page and "No relevance judgment is read" in page
    argv2 = [*argv[:1], str(tmp_path / "again"), *argv[2:]]
    subprocess.run([sys.executable, "-m", "dive_core.compress.pick", *argv2], cwd=REPO, check=True, capture_output=True)
    assert (tmp_path / "again" / "16B" / "index.faiss").read_bytes() == (tmp_path / "out" / "16B" / "index.faiss").read_bytes()


def test_bad_input_is_refused_before_anything_is_written(tmp_path, capsys):
    """A NaN row names file, row and id; a budget below the grid's smallest code names that code; an
    index budget not among the budgets is refused; nothing is written."""
    x = clustered(100)
    x[7, 3] = np.nan
    bad = write_npy(tmp_path / "bad.npy", x, "d")
    good = write_npy(tmp_path / "good.npy", clustered(100), "d")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"quantizers": SETTINGS}))
    out = tmp_path / "out"
    assert pick.main([str(bad), str(out), "--config", str(cfg), "--quiet"]) == 1
    assert "row 7 (id 'd7')" in capsys.readouterr().err
    assert pick.main([str(tmp_path / "none.npy"), str(out), "--config", str(cfg), "--quiet"]) == 1
    assert "none.npy: no such vector file" in capsys.readouterr().err
    assert pick.main([str(good), str(out), "--config", str(cfg), "--budgets", "1", "8", "--quiet"]) == 1
    assert "--budgets 1: below the smallest code of the grid, 4 bytes a vector (pca 8d sq4)" in capsys.readouterr().err
    assert pick.main([str(good), str(out), "--config", str(cfg), "--index-budget", "48", "--quiet"]) == 1
    assert "--index-budget 48: not one of --budgets [8, 16, 32, 64, 256]" in capsys.readouterr().err
    assert not out.exists()


def test_a_latency_limit_drops_the_slower_codes_and_one_no_code_meets_is_refused(tmp_path, capsys):
    """Codes A (0.5 ms), B (2 ms), C (1 ms): a 1 ms limit keeps A and C, in validation and test alike, and
    names B with its latency; a 0.1 ms limit is refused naming the fastest, A at 0.500 ms. Through the
    command, an impossibly low limit is refused before anything is written."""
    from test_selection import code

    rows = [{**code(m, "pq8", 8, (0.5,)), "latency_ms": ms} for m, ms in (("a", 0.5), ("b", 2.0), ("c", 1.0))]
    kept_v, kept_t, dropped = pick.within_latency(rows, rows, 1.0)
    assert [r["method"] for r in kept_v] == [r["method"] for r in kept_t] == ["a", "c"]
    assert dropped == [{"code": "b 64d pq8", "latency_ms": 2.0}]
    assert pick.within_latency(rows, rows, None)[2] == []
    with pytest.raises(pick.CompressError, match=r"no code meets it on this machine; the fastest, a 64d pq8, takes 0.500 ms"):
        pick.within_latency(rows, rows, 0.1)
    good = write_npy(tmp_path / "good.npy", clustered(100), "d")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"quantizers": SETTINGS}))
    out = tmp_path / "out"
    assert pick.main([str(good), str(out), "--config", str(cfg), "--max-latency-ms", "1e-9", "--quiet"]) == 1
    assert "--max-latency-ms 1e-09: no code meets it on this machine; the fastest, " in capsys.readouterr().err
    assert not out.exists()


def test_an_index_budget_whose_codes_are_all_over_the_latency_limit_is_refused(tmp_path, capsys, monkeypatch):
    """Every code of at most 8 bytes measured at 10 ms, the others at 0.01: with a 1 ms limit there is no
    8-byte pick, so --index-budget 8 is refused naming the limit, and nothing is written."""
    monkeypatch.setattr(pick, "single_query_ms", lambda index, q, k: 10.0 if index.sa_code_size() <= 8 else 0.01)
    good = write_npy(tmp_path / "good.npy", clustered(300), "d")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"quantizers": SETTINGS}))
    out = tmp_path / "out"
    argv = [str(good), str(out), "--config", str(cfg), "--budgets", "8", "64", "--max-latency-ms", "1", "--quiet"]
    assert pick.main([*argv, "--index-budget", "8"]) == 1
    assert "--index-budget 8: no code of at most 8 bytes a vector is within --max-latency-ms 1" in capsys.readouterr().err
    assert not out.exists()
    assert pick.main(argv) == 0
    assert [e["budget"] for e in json.loads((out / "budget.json").read_text())["picks"]] == [64]
