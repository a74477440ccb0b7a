"""The records jobs pass to each other (dive_core.records): one format tag each, refused with the
file and the rule to rerun when it is another, every field a reader relies on present."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dive_core import records
from dive_core.records import FIELDS, FORMATS, RecordError


def body(kind):
    return {f: 0 for f in FIELDS[kind]}


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


def test_run_key_names_the_run():
    r = {"dataset": "d", "backbone": "b", "method": "m", "k": 64, "stage": "final", "seed": 2027, "metrics": {}}
    assert records.run_key(r) == ("d", "b", "m", 64, "final", 2027)
