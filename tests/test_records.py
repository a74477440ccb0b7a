"""The records jobs pass to each other (dive_core.records): one format tag each, refused with the
file and the rule to rerun when it is another, every field a reader relies on present; the TSV
files (columns, types, the exact bytes written) and the HDF5 layout of the embedding files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dive_core import records
from dive_core.records import FIELDS, FORMATS, RecordError


def body(kind):
    out = {f: 0 for f in FIELDS[kind]}
    if kind in records.ROW_FIELDS:  # a list of rows, each with every row field
        key, fields = records.ROW_FIELDS[kind]
        out[key] = [{f: 0 for f in fields}]
    return out


def test_every_kind_has_a_format_fields_and_a_rule():
    assert set(FORMATS) == set(FIELDS) == set(records.RULES) == set(records.VERSIONS)
    assert len(set(FORMATS.values())) == len(FORMATS)  # no two kinds share a tag


@pytest.mark.parametrize("kind", sorted(k for k in FORMATS if k not in ("checkpoint", "embeddings")))
def test_json_record_round_trip_and_refusals(tmp_path, kind):
    path = tmp_path / f"{kind}.json"
    written = records.write(kind, path, {**body(kind), "extra": [1, 2]})
    assert records.read(kind, path) == written and written["format"] == FORMATS[kind]
    # an older version of the same record: refused, with the file and the rule that rebuilds it
    old = FORMATS[kind].rsplit("/", 1)[0] + "/0"
    path.write_text(json.dumps({**written, "format": old}))
    with pytest.raises(RecordError, match=rf"{path}: {kind} record of format '{old}'; this version of the workflow "
                                          rf"reads '{FORMATS[kind]}'\. Delete it and rerun `snakemake {path}` "
                                          rf"\(rule {records.RULES[kind]}\)"):
        records.read(kind, path)
    # a file of the right tag without a field a reader relies on
    missing = FIELDS[kind][-1]
    path.write_text(json.dumps({k: v for k, v in written.items() if k != missing}))
    with pytest.raises(RecordError, match=rf"without field\(s\) \['{missing}'\]"):
        records.read(kind, path)
    path.write_text("{not json")
    with pytest.raises(RecordError, match=f"{path}: not a JSON {kind} record"):
        records.read(kind, path)
    with pytest.raises(RecordError, match=f"no such {kind} record"):
        records.read(kind, tmp_path / "absent.json")


def test_a_writer_cannot_leave_out_a_field_and_writes_nothing(tmp_path):
    path = tmp_path / "result.json"
    with pytest.raises(ValueError, match="needs field"):
        records.write("result", path, {"dataset": "x"})
    assert not path.exists()


def test_a_record_of_another_kind_is_refused(tmp_path):
    path = tmp_path / "splits.json"
    records.write("selection", path, body("selection"))
    with pytest.raises(RecordError, match="splits record of format 'dive-pipeline/selection/2'"):
        records.read("splits", path)


def test_embedding_files_carry_their_format_and_older_files_are_refused(tmp_path):
    import h5py

    from dive_core.embeddings import read_embeddings, write_embeddings

    path = tmp_path / "e.h5"
    x = np.eye(3, 4, dtype=np.float32)
    write_embeddings(path, ["a", "b", "c"], x, ["q"], x[:1], {"backbone": "toy"})
    emb = read_embeddings(path)
    assert emb.attrs["format"] == FORMATS["embeddings"] and emb.attrs["backbone"] == "toy"
    with pytest.raises(ValueError, match="'format' is reserved"):
        write_embeddings(path, ["a"], x[:1], ["q"], x[:1], {"format": "mine"})
    with h5py.File(path, "a") as f:
        del f.attrs["format"]  # as every file before the records had versions
    with pytest.raises(RecordError, match=rf"{path}: embeddings record of no format tag.*\(rule embed\)"):
        read_embeddings(path)


def test_checkpoint_meta_is_exactly_the_declared_fields():
    fields = {f: None for f in records.CHECKPOINT_META}
    assert list(records.checkpoint_meta(**fields)) == list(records.CHECKPOINT_META)
    with pytest.raises(ValueError, match=r"missing \['versions'\]"):
        records.checkpoint_meta(**{k: v for k, v in fields.items() if k != "versions"})
    with pytest.raises(ValueError, match=r"unknown \['artifacts'\]"):
        records.checkpoint_meta(**fields, artifacts={})


def test_files_for_use_outside_the_workflow_keep_their_tags_and_fields(tmp_path):
    from types import SimpleNamespace

    vectors = SimpleNamespace(path=tmp_path / "v.npy", group=None, n=3, dim=4, dtype="float32")
    rec = records.compressed({"type": "dive"}, vectors, "int8", ([0.0, 1.0], [2.0, 3.0]))
    assert set(rec) == {*records.COMPRESSED_FIELDS, "sq8"} and rec["format"] == "dive-compressed/1"
    assert set(records.compressed({}, vectors, "float32")) == set(records.COMPRESSED_FIELDS)
    assert records.read_compressed_metadata(records.compressed_metadata(rec)) == rec
    part = tmp_path / "set0.h5.json"
    fields = {f: 0 for f in records.COMPRESS_PART_FIELDS}
    assert list(records.write_compress_part(part, **fields)) == list(records.COMPRESS_PART_FIELDS)
    assert records.read_compress_part(part) == fields
    with pytest.raises(ValueError, match=r"missing \['vmax'\], unknown \['x'\]"):
        records.write_compress_part(part, **{k: v for k, v in fields.items() if k != "vmax"}, x=0)
    part.write_text(json.dumps({"part": None}))
    with pytest.raises(RecordError, match="compress part without field"):
        records.read_compress_part(part)
    config = records.compressor_config(type="truncate", d=4, k=2, seed=0, hparams={}, state_sha256="0")
    assert set(config) == set(records.COMPRESSOR_FIELDS) and config["format"] == "dive-compressor/2"
    assert records.check_compressor_config(config, "c.json") == config
    with pytest.raises(ValueError, match="c.json: .* do not match the recorded config_sha256"):
        records.check_compressor_config({**config, "k": 3}, "c.json")


def test_run_key_names_the_run():
    r = {"dataset": "d", "backbone": "b", "method": "m", "k": 64, "stage": "final", "seed": 2027, "metrics": {}}
    assert records.run_key(r) == ("d", "b", "m", 64, "final", 2027)


# --------------------------------------------------------------------------- efficiency records
def _index(method, dim, n_docs=5183, full_ms=0.8123):
    """One timed index as dive_core.efficiency.measure gives it (SciFact-sized, MiniLM)."""
    ms = full_ms * dim / 384
    return {"method": method, "dim": dim, "encoding": "float32", "n_docs": n_docs, "bytes_per_vector": 4 * dim,
            "index_bytes": n_docs * 4 * dim, "memory_bytes": n_docs * 4 * dim,
            "latency_ms_median": ms, "latency_ms_p99": 1.9 * ms, "throughput_qps": 61234.5 * 384 / dim,
            "throughput_qps_one_thread": 40123.0 * 384 / dim,
            "n_single": 300, "batch_queries": 300, "repeats": 5, "k": 10,
            "lower_bound_ms": n_docs * 4 * dim / 11.2e9 * 1e3, "latency_ratio_to_bound": 2.4,
            "read_ms_same_size": 0.31 * dim / 384, "latency_ratio_to_read": 2.6}


MACHINE = {"faiss_version": "1.8.0", "faiss_threads": 2, "device": "cpu", "cpu": "AMD EPYC 7B13",
           "cpu_count": 2, "bandwidth_gb_s": 11.2, "bandwidth_bytes": 2 ** 30, "bandwidth_threads": 1,
           "bandwidth_repeats": 5, "versions": {"faiss": "1.8.0"}, "runtime": {"threads": 2}}


def only_declared(kind, record):
    """``record`` cut down to what records declares a reader may rely on (FIELDS, ROW_FIELDS)."""
    out = {f: record[f] for f in FIELDS[kind]}
    if kind in records.ROW_FIELDS:
        key, fields = records.ROW_FIELDS[kind]
        out[key] = [{f: row[f] for f in fields} for row in record[key]]
    return out


def test_the_efficiency_study_reads_only_declared_fields_of_both_kinds(tmp_path):
    """The efficiency study (markdown and figure) runs on records holding nothing but the declared
    fields: FIELDS / ROW_FIELDS list everything it reads, of a dataset's record and of the synthetic one."""
    from dive_core.studies import STUDIES, StudyContext

    full = _index("frozen", 384)
    indexes = [full, _index("dive", 96), _index("dive", 64)]
    for x in indexes:
        x.update(memory_ratio_to_full=full["index_bytes"] / x["index_bytes"],
                 latency_speedup_vs_full=full["latency_ms_median"] / x["latency_ms_median"],
                 throughput_ratio_to_full=x["throughput_qps"] / full["throughput_qps"])
    real = {"dataset": "scifact", "backbone": "minilm", "stage": "final", "role": "test", "n_queries": 300,
            "seed": 2027, **MACHINE, "indexes": indexes, "checkpoints": ["a/model.pt"]}
    syn = {"dataset": "synthetic", **MACHINE,
           "indexes": [_index("synthetic", d, n) for n in (100_000, 1_000_000) for d in (384, 64)]}
    paths = [tmp_path / "scifact" / "minilm.json", tmp_path / "synthetic.json"]
    records.write("efficiency", paths[0], only_declared("efficiency", real))
    records.write("efficiency_synthetic", paths[1], only_declared("efficiency_synthetic", syn))
    read = [records.read_one_of(("efficiency", "efficiency_synthetic"), p) for p in paths]
    assert [r["format"] for r in read] == [FORMATS["efficiency"], FORMATS["efficiency_synthetic"]]
    ctx = StudyContext(name="efficiency", title="Efficiency", methods=["frozen", "dive"], datasets=["scifact"],
                       backbones=["minilm"])
    out = STUDIES["efficiency"](read, ctx)
    assert "FAISS 1.8.0 flat inner-product index on CPU (AMD EPYC 7B13, 2 threads)" in out.markdown
    assert "300 test queries" in out.markdown and "| 1,000,000 | 64 |" in out.markdown
    out.figure(tmp_path / "efficiency.png")
    assert (tmp_path / "efficiency.png").stat().st_size > 0


def test_the_synthetic_record_is_its_own_kind(tmp_path):
    path = tmp_path / "synthetic.json"
    syn = {"dataset": "synthetic", **MACHINE, "indexes": [_index("synthetic", 64, 100_000)]}
    records.write("efficiency_synthetic", path, syn)
    # read as a dataset's efficiency record: another format, the synthetic rule named
    with pytest.raises(RecordError, match=r"efficiency record of format 'dive-pipeline/efficiency_synthetic/2'"):
        records.read("efficiency", path)
    # a dataset's record needs the ratios to the full dimension in every index row; the synthetic one does not
    with pytest.raises(ValueError, match=r"needs row field\(s\) \['memory_ratio_to_full', 'latency_speedup_vs_full', "
                                         r"'throughput_ratio_to_full'\] in indexes\[0\]"):
        records.write("efficiency", tmp_path / "x.json", {**syn, "backbone": "minilm", "n_queries": 300})
    # an index row without a field the study reads, or no rows at all, is refused on read
    path.write_text(json.dumps({**records.stamp("efficiency_synthetic", syn),
                                "indexes": [{k: v for k, v in syn["indexes"][0].items() if k != "batch_queries"}]}))
    with pytest.raises(RecordError, match=rf"{path}: efficiency_synthetic record without row field\(s\) "
                                          r"\['batch_queries'\] in indexes\[0\]; .*\(rule efficiency_synthetic\)"):
        records.read("efficiency_synthetic", path)
    path.write_text(json.dumps({**records.stamp("efficiency_synthetic", syn), "indexes": []}))
    with pytest.raises(RecordError, match=r"without rows: indexes is \[\]"):
        records.read("efficiency_synthetic", path)
    # the synthetic record as written before it was its own kind: refused naming both kinds and rules
    path.write_text(json.dumps({**syn, "format": "dive-pipeline/efficiency/1"}))
    with pytest.raises(RecordError, match=r"a record of format 'dive-pipeline/efficiency/1'; this version of the "
                                          r"workflow reads 'dive-pipeline/efficiency/3' or "
                                          r"'dive-pipeline/efficiency_synthetic/2' here\. .*"
                                          r"\(rule efficiency or efficiency_synthetic\)"):
        records.read_one_of(("efficiency", "efficiency_synthetic"), path)


# --------------------------------------------------------------------------- TSV files
PER_QUERY_TSV = ("query_id\tndcg@10\trecall@10\trecall@100\tmrr@10\tseen\n"
                 "PLAIN-1092\t0.630930\t1.000000\t1.000000\t0.500000\t1\n"
                 "q17\t0.000000\t0.000000\t0.333333\t0.090909\t0\n")


def test_per_query_tsv_bytes_and_round_trip(tmp_path):
    from dive_core.evaluation import read_per_query, write_per_query

    path = tmp_path / "run" / "per_query.tsv"
    scores = {"q17": {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 1 / 3, "mrr@10": np.float64(1 / 11), "seen": 0},
              "PLAIN-1092": {"ndcg@10": 0.6309297535714575, "recall@10": 1.0, "recall@100": 1,
                             "mrr@10": np.float32(0.5), "seen": 1}}
    write_per_query(path, scores, ["PLAIN-1092", "q17"])  # the manifest's order, not sorted
    assert path.read_bytes() == PER_QUERY_TSV.encode()
    assert read_per_query(path) == {
        "PLAIN-1092": {"ndcg@10": 0.63093, "recall@10": 1.0, "recall@100": 1.0, "mrr@10": 0.5, "seen": 1},
        "q17": {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.333333, "mrr@10": 0.090909, "seen": 0}}
    assert type(read_per_query(path)["q17"]["seen"]) is int
    write_per_query(path, {"q1": {"ndcg@10": 0.25, "recall@10": 0.5, "recall@100": 0.5, "mrr@10": 1.0}})
    header = PER_QUERY_TSV.splitlines(keepends=True)[0]
    assert path.read_text() == header + "q1\t0.250000\t0.500000\t0.500000\t1.000000\t\n"  # no seen: empty
    assert read_per_query(path) == {"q1": {"ndcg@10": 0.25, "recall@10": 0.5, "recall@100": 0.5, "mrr@10": 1.0}}


TRAIN_LOG_TSV = ("epoch\tphase\ttriplet\tview\tgeo\trho\ttotal\tseconds\n"
                 "1\ttrain\t0.183457\t0.0123457\t0.00123457\t0.734375\t0.19703\t1.23457\n"
                 "2\ttrain\t0.0412\t1.5e-07\t0\t0.046875\t0.0412002\t12.5\n")


def test_train_log_tsv_bytes_and_round_trip(tmp_path):
    from dive_core.records import read_train_log as read_log_tsv
    from dive_core.training import TrainLog, write_log_tsv

    log = TrainLog()
    log.add({"epoch": 1, "phase": "train", "triplet": 0.183456789, "view": 0.0123456789, "geo": 0.00123456789,
             "rho": 0.734375, "total": 0.19703, "seconds": 1.23456789})
    log.add({"epoch": 2, "phase": "train", "triplet": 0.0412, "view": 1.5e-07, "geo": 0.0, "rho": 0.046875,
             "total": 0.04120024, "seconds": 12.5})
    path = tmp_path / "train_log.tsv"
    write_log_tsv(path, log)
    assert path.read_bytes() == TRAIN_LOG_TSV.encode()
    back = read_log_tsv(path)
    assert back == [{"epoch": 1, "phase": "train", "triplet": 0.183457, "view": 0.0123457, "geo": 0.00123457,
                     "rho": 0.734375, "total": 0.19703, "seconds": 1.23457},
                    {"epoch": 2, "phase": "train", "triplet": 0.0412, "view": 1.5e-07, "geo": 0.0, "rho": 0.046875,
                     "total": 0.0412002, "seconds": 12.5}]
    assert type(back[0]["epoch"]) is int
    # a method without training: the header alone; two phases, a term logged by the second only
    write_log_tsv(path, TrainLog())
    assert path.read_bytes() == b"epoch\tphase\ttotal\tseconds\n" and read_log_tsv(path) == []
    two = TrainLog()
    two.add({"epoch": 1, "phase": "unsupervised", "topk": 0.5, "total": 0.5, "seconds": 3.0})
    two.add({"epoch": 2, "phase": "supervised", "topk": 0.25, "total": 0.75, "seconds": 2.0, "rank": 0.5})
    write_log_tsv(path, two)
    assert path.read_text() == ("epoch\tphase\ttopk\ttotal\tseconds\trank\n1\tunsupervised\t0.5\t0.5\t3\t\n"
                                "2\tsupervised\t0.25\t0.75\t2\t0.5\n")
    assert read_log_tsv(path)[0] == {"epoch": 1, "phase": "unsupervised", "topk": 0.5, "total": 0.5, "seconds": 3.0}


TRIPLETS_TSV = ("query_id\tpos_id\tneg_id\tpos_score\tneg_score\n"
                "1\t31715818\t4414547\t1\t0\n"
                '"q ""two"""\t"doc\twith a tab"\t14717500\t2\t-1\n')


def test_triplets_tsv_bytes_and_round_trip(tmp_path):
    from dive_core.triplets import Triplets, read_triplets, write_triplets

    t = Triplets(["1", 'q "two"'], ["31715818", "doc\twith a tab"], ["4414547", "14717500"],
                 np.array([1, 2], np.float32), np.array([0, -1], np.float32))
    path = tmp_path / "final-random.tsv"
    write_triplets(path, t)
    assert path.read_bytes() == TRIPLETS_TSV.encode()  # ids with a tab or a quote are quoted, as csv does
    back = read_triplets(path)
    assert (back.query_ids, back.pos_ids, back.neg_ids) == (t.query_ids, t.pos_ids, t.neg_ids)
    assert back.pos_scores.dtype == np.float32 and back.pos_scores.tolist() == [1.0, 2.0]
    assert back.neg_scores.tolist() == [0.0, -1.0]
    # a file of thousands of lines (read in chunks of lines) comes back line for line
    from dive_core.triplets import build_triplets

    docs = [f"MED-{i}" for i in range(3000)]
    qrels = {f"PLAIN-{q}": {docs[(q * 37 + j) % 3000]: 1 + j % 2 for j in range(8)} for q in range(60)}
    big = build_triplets(qrels, list(qrels), docs, seed=2027, num_negatives=10)
    write_triplets(path, big)
    back = read_triplets(path)
    assert len(big) == 4800 and (back.query_ids, back.pos_ids, back.neg_ids) == (big.query_ids, big.pos_ids,
                                                                                  big.neg_ids)
    assert back.pos_scores.tolist() == big.pos_scores.tolist() and back.neg_scores.tolist() == big.neg_scores.tolist()


def remedy(path, rule):
    return rf"delete it and rerun `snakemake {path}` \(rule {rule}\)"


@pytest.mark.parametrize("kind, text, line, message", [
    ("per_query", PER_QUERY_TSV.replace("\tseen\n", "\n", 1), 1,
     r"expected header \['query_id', 'ndcg@10', 'recall@10', 'recall@100', 'mrr@10', 'seen'\] of a per_query "
     r"file, found \['query_id', 'ndcg@10', 'recall@10', 'recall@100', 'mrr@10'\]"),
    ("per_query", PER_QUERY_TSV.replace("ndcg@10\trecall@10", "recall@10\tndcg@10"), 1,
     r"expected header \['query_id', 'ndcg@10', 'recall@10', 'recall@100', 'mrr@10', 'seen'\] of a per_query "
     r"file, found \['query_id', 'recall@10', 'ndcg@10', 'recall@100', 'mrr@10', 'seen'\]"),
    ("per_query", PER_QUERY_TSV.replace("0.333333", "0.33x"), 3,
     r"recall@100 values must be numbers, column recall@100 holds '0\.33x'"),
    ("per_query", PER_QUERY_TSV.replace("0.500000\t1\n", "0.500000\tyes\n"), 2,
     r"seen values must be whole numbers, column seen holds 'yes'"),
    ("per_query", PER_QUERY_TSV.replace("\t0.090909", ""), 3, r"expected 6 columns, got 5"),
    ("per_query", "", 1, r"expected header .* found nothing \(an empty file\)"),
    ("train_log", TRAIN_LOG_TSV.replace("\tseconds\n", "\n", 1), 1,
     r"expected header \['epoch', 'phase'\] then float columns among them \['total', 'seconds'\] of a train_log "
     r"file, found \['epoch', 'phase', 'triplet', 'view', 'geo', 'rho', 'total'\]"),
    ("train_log", TRAIN_LOG_TSV.replace("epoch\tphase", "phase\tepoch"), 1,
     r"expected header \['epoch', 'phase'\] then float columns among them \['total', 'seconds'\] of a train_log "
     r"file, found \['phase', 'epoch', 'triplet', 'view', 'geo', 'rho', 'total', 'seconds'\]"),
    ("train_log", TRAIN_LOG_TSV.replace("\n2\t", "\n2.0\t"), 3,
     r"epoch values must be whole numbers, column epoch holds '2\.0'"),
    ("train_log", TRAIN_LOG_TSV.replace("0.046875", "nope"), 3, r"rho values must be numbers, column rho holds 'nope'"),
    ("triplets_tsv", TRIPLETS_TSV.replace("pos_score", "score"), 1,
     r"expected header \['query_id', 'pos_id', 'neg_id', 'pos_score', 'neg_score'\] of a triplets_tsv file, "
     r"found \['query_id', 'pos_id', 'neg_id', 'score', 'neg_score'\]"),
    ("triplets_tsv", TRIPLETS_TSV.replace("\t2\t-1\n", "\ttwo\t-1\n"), 3,
     r"scores must be numbers, column pos_score holds 'two'"),
    ("triplets_tsv", TRIPLETS_TSV.replace("\t1\t0\n", "\t1\n"), 2, r"expected 5 columns, got 4"),
])
def test_a_tsv_of_another_shape_is_refused_naming_file_and_line(tmp_path, kind, text, line, message):
    path = tmp_path / f"{kind}.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RecordError, match=rf"^{path}:{line}: {message}; {remedy(path, records.TABLES[kind].rule)}"):
        records.read_tsv(kind, path)


def test_a_missing_tsv_names_the_rule(tmp_path):
    with pytest.raises(RecordError, match=r"absent\.tsv: no such train_log file; run `snakemake .*` \(rule train\)"):
        records.read_tsv("train_log", tmp_path / "absent.tsv")


def test_a_writer_cannot_write_what_the_reader_refuses_and_writes_nothing(tmp_path):
    from dive_core.evaluation import write_per_query
    from dive_core.training import TrainLog, write_log_tsv
    from dive_core.triplets import Triplets, write_triplets

    path = tmp_path / "out.tsv"
    row = {"ndcg@10": 0.5, "recall@10": 0.5, "recall@100": 0.5, "mrr@10": 0.5, "seen": 1}
    with pytest.raises(ValueError, match=r"out\.tsv:3: query_id values must be strings without tabs or line "
                                         r"breaks, column query_id got 'q\\t2'"):
        write_per_query(path, {"q1": row, "q\t2": row}, ["q1", "q\t2"])
    with pytest.raises(ValueError, match=r"out\.tsv:2: ndcg@10 values must be numbers, column ndcg@10 got None"):
        write_per_query(path, {"q1": {**row, "ndcg@10": None}})
    with pytest.raises(ValueError, match=r"out\.tsv:2: seen values must be whole numbers, column seen got 0\.5"):
        write_per_query(path, {"q1": {**row, "seen": 0.5}})
    log = TrainLog()
    log.add({"epoch": 1, "total": 0.5, "seconds": 1.0})  # no phase
    with pytest.raises(ValueError, match=r"a train_log file has the header \['epoch', 'phase'\] then float columns "
                                         r"among them \['total', 'seconds'\], not \['epoch', 'total', 'seconds'\]"):
        write_log_tsv(path, log)
    t = Triplets(["q1"], ["d1"], ["d2"], np.array([1.5], np.float32), np.array([0.0], np.float32))
    with pytest.raises(ValueError, match=r"out\.tsv:2: scores must be whole numbers, column pos_score got 1\.5"):
        write_triplets(path, t)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- HDF5 layout
def _embeddings(path, n_docs=50, n_queries=7, dim=384):
    from dive_core.embeddings import write_embeddings

    rng = np.random.default_rng(0)
    write_embeddings(path, [f"doc{i}" for i in range(n_docs)], rng.standard_normal((n_docs, dim), np.float32),
                     [f"PLAIN-{i}" for i in range(n_queries)], rng.standard_normal((n_queries, dim), np.float32),
                     {"backbone": "minilm", "dim": dim})
    return path


def test_embedding_file_layout_is_checked(tmp_path):
    import h5py

    path = _embeddings(tmp_path / "embeddings.h5")
    with h5py.File(path, "r") as f:
        assert records.check_h5("embeddings", f, path) == {"n_docs": 50, "dim": 384, "n_queries": 7}
        assert [f[d.name].dtype.kind for d in records.LAYOUTS["embeddings"]] == ["O", "f", "O", "f"]


def _edit(path, fn):
    import h5py

    with h5py.File(path, "a") as f:
        fn(f)


def _replace(name, data):
    def fn(f):
        del f[name]
        f[name] = data
    return fn


@pytest.mark.parametrize("edit, message", [
    (lambda x: _replace("corpus/emb", x.astype(np.float64)), r"corpus/emb holds float64 values, float32 expected"),
    (lambda x: _replace("queries/ids", np.arange(7)), r"queries/ids holds int64 values, strings expected"),
    (lambda x: _replace("corpus/emb", x.reshape(-1)), r"corpus/emb has shape \(19200,\), a 2-D array "
                                                      r"\(n_docs x dim\) expected"),
    (lambda x: _replace("corpus/emb", x[:49]), r"50 doc ids but 49 doc vectors \(corpus/ids: \(50,\), "
                                               r"corpus/emb: \(49, 384\)\)"),
    (lambda x: _replace("queries/emb", np.zeros((7, 256), np.float32)),
     r"doc vectors of dim 384 but query vectors of dim 256 \(corpus/emb: \(50, 384\), queries/emb: \(7, 256\)\)"),
    (lambda x: lambda f: f.__delitem__("queries/ids"), r"no dataset queries/ids"),
    (lambda x: lambda f: f.attrs.__setitem__("dim", 768), r"attribute dim = 768 but the vectors have dim 384"),
])
def test_an_embedding_file_of_another_layout_is_refused(tmp_path, edit, message):
    import h5py

    from dive_core.embeddings import read_embeddings

    path = _embeddings(tmp_path / "embeddings.h5")
    with h5py.File(path, "r") as f:
        x = f["corpus/emb"][()]
    _edit(path, edit(x))
    with pytest.raises(RecordError, match=rf"^{path}: not a valid embeddings file: {message}; "
                                          rf"{remedy(path, 'embed')}"):
        read_embeddings(path)


def test_shard_layout_is_checked(tmp_path):
    import h5py

    path = tmp_path / "corpus1of2.h5"
    with h5py.File(path, "w") as f:
        records.h5_dataset("embedding_shard", f, "ids", data=["doc3", "doc0", "doc1"])
        records.h5_dataset("embedding_shard", f, "rows", data=np.array([3, 0, 1]))
        records.h5_dataset("embedding_shard", f, "emb", data=np.ones((3, 384)))
        f.attrs["dim"] = 384
        assert records.check_h5("embedding_shard", f, path) == {"n_rows": 3, "dim": 384}
        assert f["rows"].dtype == np.int64 and f["emb"].dtype == np.float32  # the layout's types, whatever given
        with pytest.raises(ValueError, match=r"a embedding_shard file has no dataset 'corpus/emb'"):
            records.h5_dataset("embedding_shard", f, "corpus/emb", data=np.ones((3, 384)))
        del f["rows"]
        f["rows"] = np.array([3, 0, 1], np.int32)
        with pytest.raises(RecordError, match=rf"^{path}: not a valid embedding_shard file: rows holds int32 values, "
                                              rf"int64 expected; {remedy(path, 'embed_part')}"):
            records.check_h5("embedding_shard", f, path)
        del f["rows"]
        f["rows"] = np.array([3, 0], np.int64)
        with pytest.raises(RecordError, match=r"3 ids but 2 row numbers"):
            records.check_h5("embedding_shard", f, path)


def test_an_embedding_file_is_checked_before_it_is_renamed_into_place(tmp_path):
    from dive_core.embeddings import write_embeddings

    path = tmp_path / "embeddings.h5"
    x = np.ones((3, 384), np.float32)
    with pytest.raises(RecordError, match=rf"{path}: not a valid embeddings file: attribute dim = 768 but the "
                                          r"vectors have dim 384"):
        write_embeddings(path, ["a", "b", "c"], x, ["q"], x[:1], {"backbone": "mpnet", "dim": 768})
    assert list(tmp_path.iterdir()) == []


def test_gather_refuses_a_shard_of_another_layout(tmp_path):
    import h5py

    from dive_core.backbones import Backbone
    from dive_core.embeddings import embed_part, gather_embeddings

    class Toy(Backbone):  # deterministic vectors, no model
        def encode_docs(self, texts):
            return np.stack([np.full(self.dim, len(t), np.float32) for t in texts])

        encode_queries = encode_docs

    docs = [f"document {i} " * (i % 5 + 1) for i in range(12)]
    parts = ["corpus1of2", "corpus2of2", "queries"]
    paths = [tmp_path / f"{p}.h5" for p in parts]
    for part, path in zip(parts, paths):
        embed_part(Toy("minilm", 384, "cpu"), part, [f"d{i}" for i in range(12)], docs, ["q0", "q1"],
                   ["what is x", "why"], path, batch_size=4, progress=False)
    with h5py.File(paths[1], "a") as f:
        rows = f["rows"][()]
        del f["rows"]
        f["rows"] = rows.astype(np.int32)
    out = tmp_path / "embeddings.h5"
    with pytest.raises(RecordError, match=rf"^{paths[1]}: not a valid embedding_shard file: rows holds int32 values, "
                                          r"int64 expected"):
        gather_embeddings(paths, out)
    assert not out.exists()
