"""The arrival study's index quantizers (issue: quantizers under arrival): the grid with fewer bits,
codebooks fitted on the known documents only, the comparator of each row and its per-stratum paired
tests by hand, and the plan's job and table inputs at the configured values."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from dive_core import config as dcfg
from dive_core import efficiency, plan, report
from dive_core import quantizers as Q
from dive_core.config import ConfigError
from dive_core.studies.arrival_codes import code_rows, codes_markdown, comparator
from dive_core.studies.shared import StudyContext

pytest.importorskip("faiss")
REPO = Path(__file__).resolve().parent.parent


def _plan(raw):
    return plan.resolve(raw, dcfg.load_registry(REPO / "config" / "datasets.yaml"), defaults=raw)


def test_the_arrival_grid_at_the_configured_values():
    """config.yaml: PQ at 8, 16, 32, 64 (x 8 bits), OPQ at 8, 16, 32, RaBitQ 1 and 4 bits, SQ4, then
    PQ at each of those M with 4 and 6 bits; at 64d no M above 32."""
    qs = dcfg.load_yaml(REPO / "config" / "config.yaml")["quantizers"]
    assert qs["arrival_bits"] == [4, 6]
    assert Q.arrival_grid(384, qs) == ["pq8", "pq16", "pq32", "pq64", "opq8", "opq16", "opq32", "rabitq", "rabitq4",
                                       "sq4", "pq8x4", "pq16x4", "pq32x4", "pq64x4", "pq8x6", "pq16x6", "pq32x6",
                                       "pq64x6"]
    assert Q.arrival_grid(64, qs)[-6:] == ["pq8x4", "pq16x4", "pq32x4", "pq8x6", "pq16x6", "pq32x6"]
    assert {n: Q.code_bytes(n, 384) for n in ("pq32x4", "pq16x6", "pq64x6")} == {"pq32x4": 16, "pq16x6": 12,
                                                                                  "pq64x6": 48}
    assert Q.centroids("pq16x6") == 64 and Q.centroids("rabitq") is None


def test_codes_are_fitted_on_the_known_documents_only():
    """300 documents, 100 of them arriving: every quantizer row trains on the 200 known ones (a PQ of
    256 centroids cannot and is left out, named); its search still covers all 300, and the index equals
    one fitted on those 200 rows by hand."""
    from synthetic import make_problem

    from test_quantizers import _manifest

    p = make_problem(d=16)
    manifest = _manifest(p)
    arriving = list(p.doc_ids[::3])
    arrival = {"arriving": arriving}
    rows, skipped = efficiency.arrival_code_rows("frozen", 16, p.docs, p.val_queries, p.doc_ids, manifest, arrival,
                                                 ["pq4x4", "pq4", "rabitq"], seed=3, opq_niter=2, top_k=10)
    known = [i for i, d in enumerate(p.doc_ids) if d not in set(arriving)]
    assert len(known) == 200 and len(p.doc_ids) == 300
    assert [r["encoding"] for r in rows] == ["float32", "pq4x4", "rabitq"]
    assert [r["train_rows"] for r in rows] == [None, 200, 200]
    assert skipped == [{"method": "frozen", "dim": 16, "encoding": "pq4", "centroids": 256, "known_docs": 200}]
    by_hand = efficiency.frontier_rows("frozen", 16, p.docs, p.val_queries, p.doc_ids, manifest, "final", 10,
                                       encodings=(), quantizers=["pq4x4"], quantizer_seed=3,
                                       fit_rows=np.array(known))
    assert rows[1]["per_query"] == by_hand[0]["per_query"]
    everything = efficiency.frontier_rows("frozen", 16, p.docs, p.val_queries, p.doc_ids, manifest, "final", 10,
                                          encodings=(), quantizers=["pq4x4"], quantizer_seed=3)
    assert everything[0]["train_rows"] == 300


def _row(method, mtype, enc, nbytes, scores):
    return {"method": method, "method_type": mtype, "supervised": mtype in ("mrl", "dive"), "dim": 64,
            "encoding": enc, "bytes_per_vector": nbytes, "train_rows": None if enc == "float32" else 40,
            "codebook_bytes": None, "fit_seconds": None, "per_query": {"ndcg@10": scores}}


def _record():
    rows = [_row("frozen", "frozen", "pq16", 16, [0.5, 0.4, 0.3, 0.2]),
            _row("frozen", "frozen", "pq32x4", 16, [0.6, 0.4, 0.1, 0.2]),
            _row("frozen", "frozen", "rabitq", 56, [0.5, 0.5, 0.5, 0.5]),
            _row("autoencoder-arrival", "autoencoder", "float32", 256, [0.3, 0.3, 0.3, 0.3]),
            _row("dive-arrival", "dive", "pq16", 16, [0.9, 0.8, 0.1, 0.0])]
    return {"backbone": "minilm", "dataset": "scifact", "seed": 2027, "query_ids": ["a", "b", "c", "d"],
            "strata": {"known": ["a", "b"], "new": ["c", "d"], "mixed": []}, "known_docs": 40, "rows": rows,
            "skipped": []}


def test_each_row_is_tested_against_frozen_pq_of_its_bytes_or_the_autoencoder_by_hand():
    """Frozen's 8-bit PQ and any row with no frozen PQ of its bytes: against the autoencoder's float32;
    a map's code and frozen's fewer-bit code of 16 bytes: against frozen pq16. DIVE's pq16 on `known`
    (a, b): (0.9 + 0.8) / 2 = 0.85, Δ 0.85 − 0.45 = +0.40; on `new` (c, d): 0.05, Δ −0.20."""
    rec = _record()
    rows = rec["rows"]
    assert [comparator(r, rows)["encoding"] if comparator(r, rows) else None for r in rows] == [
        "float32", "pq16", "float32", None, "pq16"]
    out = code_rows(rec)
    dive = out[-1]
    assert dive["vs"] == "frozen 64d pq16"
    assert dive["known"] == pytest.approx(0.85) and dive["known_diff"] == pytest.approx(0.40)
    assert dive["new"] == pytest.approx(0.05) and dive["new_diff"] == pytest.approx(-0.20)
    assert dive["all"] == pytest.approx(0.45) and dive["all_diff"] == pytest.approx(0.10)
    assert dive["known_p"] == report.paired_randomization([0.9, 0.8], [0.5, 0.4])
    assert dive["mixed_n"] == 0 and np.isnan(dive["mixed"]) and np.isnan(dive["mixed_p"])
    ae = out[3]
    assert ae["vs"] == "" and np.isnan(ae["all_diff"])
    assert out[0]["new_diff"] == pytest.approx(0.25 - 0.3)  # frozen pq16 against the autoencoder
    ctx = StudyContext(name="arrival", title="t", methods=[], datasets=["scifact"], backbones=["minilm"])
    lines, tsv = codes_markdown([rec], ctx, ["minilm"])
    table = "\n".join(lines)
    assert "| dive-arrival | 64 | pq16 | 16 | 40 | frozen 64d pq16 | 0.4500 (+0.1000, p " in table
    assert "rabitq" not in table and len(tsv) == 5  # 56 bytes is no budget of the page; the TSV has it
    # frozen pq32x4 against frozen pq16 (same 16 B): new (c, d) 0.15 - 0.25 = -0.10, p of two equal signs 0.5
    assert ("Fewer bits per sub-quantizer against 8 bits at the same bytes (the frozen vectors' codes, one seed, "
            "p < 0.05, no correction for the number of tests): above on new documents' queries: none; below: none. "
            "On known documents' queries above: none; below: none. The 8-bit codebooks were fitted on 40 rows, fewer "
            "than the 9984 that FAISS asks for (39 per centroid)") in table
    rec2 = copy.deepcopy(rec)
    rec2["rows"][1]["per_query"]["ndcg@10"] = [0.6, 0.4, 0.9, 0.8]  # pq32x4: new +0.60 over pq16 on c and d
    rows2 = code_rows(rec2)
    rows2[1]["new_p"] = 0.01  # two queries cannot reach p < 0.05: the sentence's test, not the sign flips
    from dive_core.studies.arrival_codes import fewer_bits_lines
    assert "above on new documents' queries: pq32x4 (16 B, +0.6000, p 0.0100); below: none" in fewer_bits_lines(rows2)[1]
    rows2[1]["vs_encoding"] = "float32"  # no 8-bit PQ of its bytes: not in the sentence
    rows2[1]["vs"] = "autoencoder-arrival 64d float32"
    assert fewer_bits_lines(rows2) == []
    bad = copy.deepcopy(rec)
    bad["strata"]["new"] = ["c", "z"]
    with pytest.raises(ValueError, match=r"stratum queries \['z'\] are not among the record's test queries"):
        code_rows(bad)


def test_the_code_panels_plot_each_code_against_its_bytes_per_stratum():
    """The figure's code panels: one point per code at (bytes, stratum mean), marker by encoding, and
    each method's best code of at most those bytes as a step line: on `new` (c, d) frozen's codes at
    16 B score 0.25 (pq16) and 0.15 (pq32x4), its envelope 0.25 at 16 B then 0.5 (rabitq) at 56 B."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dive_core.studies.arrival_codes import codes_legend, codes_panels

    rows = code_rows(_record())
    colors = {"frozen": "0.35", "autoencoder-arrival": "#2ca02c", "dive-arrival": "#e377c2"}
    fig, axes = plt.subplots(1, 2)
    codes_panels(axes, rows, colors, "scifact")
    known, new = axes
    assert known.get_title().endswith("known documents' queries (n=2)") and new.get_xscale() == "log"
    points = sorted(tuple(np.round(c.get_offsets()[0], 4)) for c in new.collections)
    assert points == sorted([(16, 0.25), (16, 0.15), (56, 0.5), (256, 0.3), (16, 0.05)])
    frozen = next(l for l in new.get_lines() if l.get_color() == "0.35")
    assert list(frozen.get_xdata()) == [16, 56, 256] and list(frozen.get_ydata()) == pytest.approx([0.25, 0.5, 0.5])
    labels = [h.get_label() for h in codes_legend(rows, colors)]
    assert labels[:3] == ["frozen (best code per byte)", "autoencoder-arrival (best code per byte)",
                          "dive-arrival (best code per byte)"] and {"pq", "rabitq", "float32"} <= set(labels)
    plt.close(fig)


def test_the_plan_names_the_job_and_the_table_reads_its_records():
    """config.yaml's arrival_codes experiment: codes of frozen and of the arrival-fitted autoencoder, MRL
    and DIVE at seed 2027, 64d (frozen: 384d); its table declares one record per dataset; the arrival
    study has none."""
    raw = dcfg.load_yaml(REPO / "config" / "config.yaml")
    p = _plan(raw)
    assert p.arrival_code_runs("arrival_codes", "minilm") == [("frozen", 384), ("autoencoder-arrival", 64),
                                                       ("mrl-arrival", 64), ("dive-arrival", 64)]
    w = {"experiment": "arrival_codes", "dataset": "scifact", "backbone": "minilm"}
    inputs = p.arrival_codes_inputs(w)
    assert inputs["arrival"] == "results/scifact/arrival.json"
    assert inputs["checkpoints"][-1] == "results/scifact/minilm/dive-arrival/k64/final/seed2027/model.pt"
    assert p.table_inputs({"experiment": "arrival_codes"})["codes"] == [
        f"results/arrival_codes/arrival_codes/{ds}/minilm.json" for ds in p.experiment("arrival_codes")["datasets"]]
    assert "codes" not in p.table_inputs({"experiment": "arrival"})
    narrow = copy.deepcopy(raw)  # a config that narrows the study's methods keeps the default codes
    narrow["experiments"]["arrival_codes"].update(methods=["frozen", "dive"])
    assert _plan(narrow).arrival_code_runs("arrival_codes", "minilm") == [("frozen", 384), ("dive-arrival", 64)]


@pytest.mark.parametrize("change, message", [
    (lambda e: e["arrival_codes"].update(codes=["dvie"]), r"experiments.arrival_codes.codes\[0\] = 'dvie' is not defined"),
    (lambda e: e["main"].update(codes=["dive"]), r"experiments.main.codes: only an arrival study"),
    (lambda e: e["arrival"].update(codes=["dive"], seeds=[2030]), r"codes are of seed 2030"),
])
def test_a_bad_codes_setting_is_refused_naming_the_key(change, message):
    raw = copy.deepcopy(dcfg.load_yaml(REPO / "config" / "config.yaml"))
    change(raw["experiments"])
    with pytest.raises(ConfigError, match=message):
        _plan(raw)
