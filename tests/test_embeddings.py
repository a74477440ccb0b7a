"""The HDF5 embedding store (dive_core/embeddings.py): embed_dataset's length-sorted batches and
resumable work folder, write/read of embeddings.h5, content hashes, corpus shards and their gathering.

The encoder is a deterministic fake (vectors derived from a hash of the text), so no model is loaded.
"""

from __future__ import annotations

import hashlib
import json

import h5py
import numpy as np
import pytest

from dive_core.backbones import Backbone
from dive_core.embeddings import (
    batch_rows, embed_dataset, embed_part, gather_embeddings, parse_part, part_name, read_embeddings,
    shard_batches, write_embeddings)
from dive_core.records import RecordError


# ---------------------------------------------------------------------- embed_dataset and HDF5
def fake_vec(kind: str, text: str, dim: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(f"{kind}|{text}".encode()).digest()[:8], "little")
    return (np.random.default_rng(seed).standard_normal(dim) * (1 + len(text))).astype(np.float32)


class FakeBackbone(Backbone):
    def __init__(self, dim: int = 6, bad: str | None = None):
        super().__init__("fake-bb", dim, "cpu",
                         {"family": "fake", "instruction": "find:", "pooling": "none"})
        self.bad = bad
        self.calls: list[tuple[str, list[str]]] = []

    def _encode(self, kind, texts):
        self.calls.append((kind, list(texts)))
        if self.bad == f"raise-{kind}":
            raise RuntimeError("encoder exploded")
        out = np.stack([fake_vec(kind, t, self.dim) for t in texts])
        if self.bad == "shape":
            return out[:, :-1]
        if self.bad == "nan":
            out[-1, 0] = np.nan
        if self.bad == "overflow":
            return out.astype(np.float64) * 1e300
        return out

    def encode_docs(self, texts):
        return self._encode("doc", texts)

    def encode_queries(self, texts):
        return self._encode("query", texts)


DOC_IDS = ["d7", "d2", "é-1", "d10", "d3", "d0", "d5"]
DOC_TEXTS = ["short", "a much much longer document text here", "mid sized text",
             "x", "another fairly long document", "", "tiny doc"]
QUERY_IDS = ["q2", "q1", "q9"]
QUERY_TEXTS = ["what is mid", "q", "a long long question about documents"]
FINGERPRINT = {"corpus.jsonl": "ab" * 32, "queries.jsonl": "cd" * 32}
VERSIONS = {"python": "3.11", "torch": "2.x", "llm2vec": "0.2.3"}


def run_embed(bb, out, doc_texts=DOC_TEXTS, query_texts=QUERY_TEXTS, **kw):
    return embed_dataset(bb, DOC_IDS, doc_texts, QUERY_IDS, query_texts, out, batch_size=3,
                         extra_attrs={"dataset": "toy", "source_fingerprint": FINGERPRINT,
                                      "versions": VERSIONS, "note": "[1, 2]",
                                      "n_threads": np.int64(2), "runtime": {"cuda": None}},
                         progress=False, **kw)


def test_embed_dataset_hdf5_round_trip(tmp_path):
    bb = FakeBackbone()
    out = tmp_path / "sub" / "emb.h5"
    info = run_embed(bb, out)
    want_d = np.stack([fake_vec("doc", t, 6) for t in DOC_TEXTS])
    want_q = np.stack([fake_vec("query", t, 6) for t in QUERY_TEXTS])

    raw = read_embeddings(out, normalize=False)
    assert raw.doc_ids == DOC_IDS and raw.query_ids == QUERY_IDS
    assert raw.docs.dtype == np.float32 and raw.dim == 6
    np.testing.assert_array_equal(raw.docs, want_d)
    np.testing.assert_array_equal(raw.queries, want_q)
    assert raw.query_rows(["q9", "q2"]).tolist() == want_q[[2, 0]].tolist()

    emb = read_embeddings(out)
    np.testing.assert_allclose(emb.docs, want_d / np.linalg.norm(want_d, axis=1, keepdims=True),
                               rtol=1e-6)
    np.testing.assert_allclose(emb.queries,
                               want_q / np.linalg.norm(want_q, axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(emb.docs, axis=1), 1.0, atol=1e-6)

    a = emb.attrs
    assert a["backbone"] == "fake-bb" and a["dim"] == 6 and a["batch_size"] == 3
    assert a["instruction"] == "find:" and a["family"] == "fake" and a["dataset"] == "toy"
    assert a["source_fingerprint"] == FINGERPRINT and a["versions"] == VERSIONS
    assert a["runtime"] == {"cuda": None}
    assert a["note"] == "[1, 2]"  # a plain string that looks like JSON stays a string
    assert a["n_threads"] == 2 and isinstance(a["n_threads"], int)
    assert a["content_sha256"] == info["content_sha256"]
    assert len(info["content_sha256"]) == 64
    assert isinstance(a["seconds_corpus"], float)


def test_embed_dataset_length_sorted_batches_rows_in_input_order(tmp_path):
    bb = FakeBackbone()
    run_embed(bb, tmp_path / "emb.h5")
    doc_calls = [texts for kind, texts in bb.calls if kind == "doc"]
    query_calls = [texts for kind, texts in bb.calls if kind == "query"]
    assert [len(b) for b in doc_calls] == [3, 3, 1]
    assert [len(b) for b in query_calls] == [3]
    flat = [t for b in doc_calls for t in b]
    assert sorted(flat) == sorted(DOC_TEXTS)  # every text encoded exactly once
    assert [len(t) for t in flat] == sorted((len(t) for t in DOC_TEXTS), reverse=True)
    assert doc_calls[0][0] == "a much much longer document text here"
    assert query_calls[0][0] == "a long long question about documents"
    # ... and yet row i is the vector of text i
    emb = read_embeddings(tmp_path / "emb.h5", normalize=False)
    for i, t in enumerate(DOC_TEXTS):
        np.testing.assert_array_equal(emb.docs[i], fake_vec("doc", t, 6))
    for i, t in enumerate(QUERY_TEXTS):
        np.testing.assert_array_equal(emb.queries[i], fake_vec("query", t, 6))


def test_content_sha256_depends_on_content_only(tmp_path):
    a = run_embed(FakeBackbone(), tmp_path / "a.h5")["content_sha256"]
    b = run_embed(FakeBackbone(), tmp_path / "b.h5")["content_sha256"]  # other timings
    assert a == b
    assert read_embeddings(tmp_path / "b.h5").attrs["content_sha256"] == a
    changed = list(DOC_TEXTS)
    changed[3] = "y"
    c = run_embed(FakeBackbone(), tmp_path / "c.h5", doc_texts=changed)["content_sha256"]
    assert c != a
    # same vectors under other ids -> different fingerprint too
    x = np.ones((2, 3), np.float32)
    s1 = write_embeddings(tmp_path / "x1.h5", ["a", "b"], x, ["q"], x[:1], {})
    s2 = write_embeddings(tmp_path / "x2.h5", ["a", "c"], x, ["q"], x[:1], {})
    s3 = write_embeddings(tmp_path / "x3.h5", ["a", "b"], x, ["q"], x[:1], {"other": "attrs"})
    assert s1 != s2 and s1 == s3


@pytest.mark.parametrize("bad, match", [
    ("shape", r"shape \(3, 5\), expected \(3, 6\)"),
    ("nan", "non-finite"),
    ("overflow", "non-finite"),
    ("raise-doc", "encoder exploded"),
    ("raise-query", "encoder exploded"),
])
def test_embed_dataset_bad_encoder_leaves_no_file(tmp_path, bad, match):
    out = tmp_path / "emb.h5"
    with pytest.raises(RuntimeError, match=match):
        run_embed(FakeBackbone(bad=bad), out)
    assert not out.exists()
    # no temporary file; only the resumable work folder of the completed batches
    assert [p.name for p in tmp_path.iterdir()] == ["emb.h5.partial"]

    # an existing good file is left untouched by a failed rerun
    run_embed(FakeBackbone(), out)
    assert [p.name for p in tmp_path.iterdir()] == ["emb.h5"]  # work folder removed on success
    before = out.read_bytes()
    with pytest.raises(RuntimeError, match=match):
        run_embed(FakeBackbone(bad=bad), out)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.h5", "emb.h5.partial"]


def test_failure_while_writing_is_atomic(tmp_path):
    out = tmp_path / "emb.h5"
    with pytest.raises(TypeError):
        embed_dataset(FakeBackbone(), DOC_IDS, DOC_TEXTS, QUERY_IDS, QUERY_TEXTS, out, 3,
                      extra_attrs={"bad": object()}, progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["emb.h5.partial"]  # no half-written emb.h5


class CrashingBackbone(FakeBackbone):
    """Dies (like a killed job) after ``after`` document batches."""

    def __init__(self, after: int):
        super().__init__()
        self.after = after

    def encode_docs(self, texts):
        if sum(kind == "doc" for kind, _ in self.calls) >= self.after:
            raise KeyboardInterrupt("killed")
        return super().encode_docs(texts)


def test_a_killed_embedding_resumes_and_gives_the_same_file_content(tmp_path):
    full = run_embed(FakeBackbone(), tmp_path / "full.h5")["content_sha256"]
    out = tmp_path / "emb.h5"
    with pytest.raises(KeyboardInterrupt):
        run_embed(CrashingBackbone(after=2), out)
    assert not out.exists() and (tmp_path / "emb.h5.partial" / "corpus.done").read_text().split() == ["0", "1"]
    again = FakeBackbone()
    info = run_embed(again, out)
    assert [len(t) for kind, t in again.calls if kind == "doc"] == [1]  # only the third batch
    assert info["content_sha256"] == full
    assert read_embeddings(out).attrs["content_sha256"] == full
    assert not (tmp_path / "emb.h5.partial").exists()
    # a work folder left by other inputs is discarded, not mixed in
    with pytest.raises(KeyboardInterrupt):
        run_embed(CrashingBackbone(after=1), tmp_path / "other.h5")
    changed = list(DOC_TEXTS)
    changed[0] = "changed text"
    fresh = FakeBackbone()
    run_embed(fresh, tmp_path / "other.h5", doc_texts=changed)
    assert len([1 for kind, _ in fresh.calls if kind == "doc"]) == 3


# ---------------------------------------------------------------------- sharded embedding
def run_part(bb, part, out, doc_texts=DOC_TEXTS):
    return embed_part(bb, part, DOC_IDS, doc_texts, QUERY_IDS, QUERY_TEXTS, out, batch_size=3,
                      extra_attrs={"dataset": "toy", "source_fingerprint": FINGERPRINT, "versions": VERSIONS,
                                   "runtime": {"host": part}},
                      progress=False)


def run_sharded(bb, folder, shards, **kw):
    paths = [folder / f"{part_name(i, shards)}.h5" for i in range(1, shards + 1)] + [folder / "queries.h5"]
    for p in paths:
        run_part(bb, p.stem, p, **kw)
    return paths


def test_shard_batches_cover_every_batch_once_in_contiguous_ranges():
    # 7 texts, batch size 3: batches 0 (3 longest), 1 (next 3), 2 (shortest)
    assert [list(shard_batches(3, i, 3)) for i in (1, 2, 3)] == [[0], [1], [2]]
    assert [list(shard_batches(3, i, 2)) for i in (1, 2)] == [[0], [1, 2]]
    assert [list(shard_batches(3, i, 5)) for i in range(1, 6)] == [[], [0], [], [1], [2]]
    for n_batches in (1, 7, 100):
        for shards in (1, 3, 8):
            got = [b for i in range(1, shards + 1) for b in shard_batches(n_batches, i, shards)]
            assert got == list(range(n_batches))
    with pytest.raises(ValueError, match="numbered 1..3"):
        shard_batches(3, 0, 3)
    assert list(batch_rows(DOC_TEXTS, 3, [2])) == [5]  # the empty text, alone in the last batch
    assert part_name(2, 3) == "corpus2of3" and parse_part("corpus2of3") == (2, 3)
    assert parse_part("queries") == (None, None)
    with pytest.raises(ValueError, match="expected 'queries' or 'corpus<i>of<n>'"):
        parse_part("corpus2")


@pytest.mark.parametrize("shards", [1, 2, 3, 5])
def test_shards_gather_to_the_unsharded_file(tmp_path, shards):
    full = run_embed(FakeBackbone(), tmp_path / "full.h5")["content_sha256"]
    bb = FakeBackbone()
    paths = run_sharded(bb, tmp_path / "parts", shards)
    # each document batch of the unsharded run is encoded exactly once, with the same texts
    unsharded = FakeBackbone()
    run_embed(unsharded, tmp_path / "again.h5")
    assert sorted(map(tuple, (t for k, t in bb.calls if k == "doc"))) == \
        sorted(map(tuple, (t for k, t in unsharded.calls if k == "doc")))
    out = tmp_path / "emb.h5"
    info = gather_embeddings(paths[::-1], out)  # the order of the inputs does not matter
    assert info == {"content_sha256": full, "shards": shards}
    e = read_embeddings(out, normalize=False)
    ref = read_embeddings(tmp_path / "full.h5", normalize=False)
    assert e.doc_ids == DOC_IDS and e.query_ids == QUERY_IDS
    assert np.array_equal(e.docs, ref.docs) and np.array_equal(e.queries, ref.queries)
    assert e.attrs["shards"] == shards and e.attrs["backbone"] == "fake-bb" and e.attrs["dataset"] == "toy"
    assert sorted(e.attrs["part_runtimes"]) == sorted(p.stem for p in paths)
    assert "inputs_key" not in e.attrs and "part" not in e.attrs


def test_gather_refuses_missing_duplicate_and_foreign_parts(tmp_path):
    paths = run_sharded(FakeBackbone(), tmp_path / "a", 3)
    out = tmp_path / "emb.h5"
    with pytest.raises(ValueError, match=r"expected shards 1..3 of 3"):
        gather_embeddings([paths[0], paths[2], paths[3]], out)
    with pytest.raises(ValueError, match="no queries part"):
        gather_embeddings(paths[:3], out)
    with pytest.raises(ValueError, match="the same part 'corpus1of3' twice"):
        gather_embeddings(paths + [paths[0]], out)
    changed = list(DOC_TEXTS)
    changed[1] = "another text"
    other = run_sharded(FakeBackbone(), tmp_path / "b", 3, doc_texts=changed)
    with pytest.raises(ValueError, match="embedded from other inputs"):
        gather_embeddings([other[0]] + paths[1:], out)
    two = run_sharded(FakeBackbone(), tmp_path / "c", 2)
    with pytest.raises(ValueError, match="expected shards 1..2 of 2|each once"):
        gather_embeddings([two[0], paths[1], paths[2], paths[3]], out)
    with h5py.File(paths[3], "r+") as f:
        f.attrs["format"] = "dive-pipeline/embedding_shard/0"
    with pytest.raises(RecordError, match="embedding_shard record of format"):
        gather_embeddings(paths, out)
    assert not out.exists()


def test_a_killed_shard_resumes_and_gives_the_same_part(tmp_path):
    folder = tmp_path / "parts"
    ref = run_sharded(FakeBackbone(), tmp_path / "ref", 2)
    out = folder / "corpus2of2.h5"  # batches 1 and 2
    with pytest.raises(KeyboardInterrupt):
        run_part(CrashingBackbone(after=1), "corpus2of2", out)
    assert not out.exists() and (folder / "corpus2of2.h5.partial" / "part.done").read_text().split() == ["1"]
    again = FakeBackbone()
    run_part(again, "corpus2of2", out)
    assert [len(t) for kind, t in again.calls if kind == "doc"] == [1]  # only batch 2
    with h5py.File(out) as a, h5py.File(ref[1]) as b:
        assert np.array_equal(a["emb"][()], b["emb"][()]) and np.array_equal(a["rows"][()], b["rows"][()])
    assert not (folder / "corpus2of2.h5.partial").exists()


def test_inconsistent_inputs_and_files_rejected(tmp_path):
    out = tmp_path / "emb.h5"
    with pytest.raises(ValueError, match="7 ids but 6 texts"):
        embed_dataset(FakeBackbone(), DOC_IDS, DOC_TEXTS[:-1], QUERY_IDS, QUERY_TEXTS, out, 3,
                      progress=False)
    with pytest.raises(ValueError, match="duplicate"):
        embed_dataset(FakeBackbone(), ["a", "a"], ["x", "y"], QUERY_IDS, QUERY_TEXTS, out, 3,
                      progress=False)
    with pytest.raises(ValueError, match="ids but embedding matrix"):
        write_embeddings(out, ["a", "b"], np.ones((3, 4)), ["q"], np.ones((1, 4)), {})
    with pytest.raises(ValueError, match="dim"):
        write_embeddings(out, ["a"], np.ones((1, 4)), ["q"], np.ones((1, 5)), {})
    assert not out.exists()
    (tmp_path / "junk.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(ValueError, match="not a valid embedding file"):
        read_embeddings(tmp_path / "junk.h5")
    # a file whose ids and rows disagree (written by hand) is refused on read
    import h5py

    with h5py.File(tmp_path / "bad.h5", "w") as f:
        f["corpus/ids"] = np.array([b"a", b"b"])
        f["corpus/emb"] = np.ones((3, 4), np.float32)
        f["queries/ids"] = np.array([b"q"])
        f["queries/emb"] = np.ones((1, 4), np.float32)
        f.attrs["meta"] = json.dumps({"k": 1})
    with pytest.raises(ValueError, match="2 doc ids"):
        read_embeddings(tmp_path / "bad.h5")


def test_in_place_normalisation_equals_l2_normalize():
    from dive_core.embeddings import l2_normalize, normalize_rows_

    x = np.random.default_rng(0).standard_normal((1000, 33)).astype(np.float32)
    x[5] = 0.0  # a zero row stays zero
    expected = l2_normalize(x)
    out = normalize_rows_(x, chunk=7)
    assert out is x and np.array_equal(out, expected)
