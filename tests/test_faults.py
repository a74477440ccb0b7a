"""Faults a user can cause, each answered by an error that names the file or key, with nothing
half-written: non-finite embeddings, an embedding file or split from other data, an empty split
role, a read-only or full output directory. (Corrupt inputs: tests/test_data.py; config values:
tests/test_workflow.py::test_bad_config_is_reported_with_its_key; kill -9 and rerun:
tests/test_workflow.py::test_kill_9_then_the_documented_rerun_gives_identical_outputs.)"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dive_core import splits
from dive_core.data import BeirDataset, DataError, check_same_source
from dive_core.embeddings import read_embeddings, write_embeddings

REPO = Path(__file__).resolve().parent.parent
SOURCE = {"corpus.jsonl": "a" * 64, "queries.jsonl": "b" * 64}


def _emb_file(path: Path, docs: np.ndarray, source=SOURCE) -> Path:
    rng = np.random.default_rng(0)
    write_embeddings(path, [f"d{i}" for i in range(len(docs))], docs, ["q0", "q1"],
                     rng.standard_normal((2, docs.shape[1])).astype(np.float32),
                     {"backbone": "toy", "source_fingerprint": source})
    return path


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_embeddings_are_refused_with_file_row_and_id(tmp_path, bad):
    docs = np.random.default_rng(1).standard_normal((10, 4)).astype(np.float32)
    docs[7, 2] = bad
    docs[9, 0] = bad
    path = _emb_file(tmp_path / "emb.h5", docs)
    with pytest.raises(ValueError) as err:
        read_embeddings(path)
    assert str(err.value) == (f"{path}: corpus/emb holds NaN or Inf in 2 row(s), first row 7 (id 'd7'); "
                              "re-embed (delete the file and rerun)")


def test_finite_check_spans_chunks():
    from dive_core.embeddings import check_finite

    x = np.zeros((10, 3), dtype=np.float32)
    x[[5, 8]] = np.nan
    with pytest.raises(ValueError, match=r"in 2 row\(s\), first row 5 \(id 'e5'\)"):
        check_finite("f.h5", "corpus", [f"e{i}" for i in range(10)], x, chunk=3)
    check_finite("f.h5", "corpus", [f"e{i}" for i in range(10)], np.zeros((10, 3), np.float32), chunk=3)


def test_embeddings_from_other_data_are_refused(tmp_path):
    docs = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    path = _emb_file(tmp_path / "emb.h5", docs)
    assert read_embeddings(path, expected_source=SOURCE).dim == 4  # the same data: accepted
    changed = {**SOURCE, "queries.jsonl": "c" * 64}
    with pytest.raises(DataError) as err:
        read_embeddings(path, expected_source=changed, against="results/x/splits.json")
    assert str(err.value) == (f"{path}: made from other data than results/x/splits.json describes (files that "
                              f"differ: queries.jsonl); delete {path} and rerun to re-embed the staged data")
    legacy = tmp_path / "legacy.h5"  # no fingerprint recorded
    write_embeddings(legacy, ["d0"], docs[:1], ["q0"], docs[:1], {"backbone": "toy"})
    with pytest.raises(DataError, match=f"{legacy}: records no source fingerprint"):
        read_embeddings(legacy, expected_source=SOURCE)


def test_a_split_from_other_data_is_refused():
    with pytest.raises(DataError, match=r"splits.json: made from other data than data/s/source.json describes "
                                        r"\(files that differ: corpus.jsonl, qrels/test.tsv\)"):
        check_same_source({"corpus.jsonl": "a", "qrels/test.tsv": "q"}, {"corpus.jsonl": "b"}, "splits.json",
                          "data/s/source.json", remedy="delete it")


def test_an_empty_split_role_is_refused_with_the_config_key():
    relevant = {f"q{i}": {f"d{i}": 1} for i in range(4)}
    ds = BeirDataset(Path("."), {f"d{i}": {"title": "", "text": f"t{i}"} for i in range(4)},
                     {q: q for q in relevant}, {"test": relevant}, {"corpus.jsonl": "c" * 64})
    # 4 queries at 60/20/20: floor(0.8) = 0 validation queries
    with pytest.raises(ValueError) as err:
        splits.make_manifest(ds, "toy", 2027)
    assert str(err.value) == (
        "toy: splitting its 4 judged queries with fractions [0.6, 0.2, 0.2] (config split.fractions) leaves "
        "role(s) validation empty; every role needs at least one query (train: fitting, validation: selection, "
        "test: held-out tables)")
    assert splits.make_manifest(ds, "toy", 2027, (0.5, 0.25, 0.25))["counts"] == {
        "train": 2, "validation": 1, "test": 1}


# -- read-only and full output directories: real file-system errors, in a child process --------

CHILD = textwrap.dedent("""
    import json, os, resource, signal, sys
    sys.path.insert(0, {repo!r})
    import numpy as np
    from dive_core.atomic import write_json
    from dive_core.embeddings import write_embeddings
    if {user} is not None:            # root ignores permissions: act as an unprivileged user
        os.setgid({user}); os.setuid({user})
    if {limit} is not None:           # a full disk: writes beyond the limit fail (EFBIG)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
    target = sys.argv[1]
    try:
        if target.endswith(".h5"):
            x = np.ones((5000, 64), np.float32)
            write_embeddings(target, [str(i) for i in range(5000)], x, ["q"], x[:1], {{"backbone": "toy"}})
        else:
            write_json(target, {{"values": list(range(100000))}})
    except OSError as exc:
        print("OSError:", exc)
        sys.exit(3)
""")


def _child(target: Path, user: int | None = None, limit: int | None = None) -> subprocess.CompletedProcess:
    code = CHILD.format(repo=str(REPO), user=user, limit=limit)
    return subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, timeout=120)


@pytest.fixture
def shared_dir():
    """A directory an unprivileged user can reach (pytest's tmp_path is private to its user)."""
    d = Path(tempfile.mkdtemp(prefix="dive-faults-"))
    os.chmod(d, 0o755)
    yield d
    for p in sorted(d.rglob("*"), reverse=True):
        os.chmod(p.parent, 0o755)
        p.unlink() if p.is_file() else p.rmdir()
    d.rmdir()


@pytest.mark.parametrize("name", ["result.json", "emb.h5"])
def test_a_read_only_output_directory_is_named_and_nothing_is_written(shared_dir, name):
    out = shared_dir / "ro"
    out.mkdir()
    (out / name).write_bytes(b"previous good file")
    os.chmod(out, 0o555)
    proc = _child(out / name, user=65534 if os.geteuid() == 0 else None)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.strip() == (
        f"OSError: [Errno 13] cannot write {out / name}: its directory {out} is not writable (read-only file "
        f"system or no permission); nothing was written there and a previous {name}, if any, is unchanged")
    assert sorted(p.name for p in out.iterdir()) == [name]
    assert (out / name).read_bytes() == b"previous good file"


@pytest.mark.parametrize("name", ["result.json", "emb.h5"])
def test_a_full_disk_is_named_and_the_previous_file_is_kept(shared_dir, name):
    (shared_dir / name).write_bytes(b"previous good file")
    proc = _child(shared_dir / name, limit=64 * 1024)
    assert proc.returncode == 3, proc.stderr
    # EFBIG (27) from a plain write; HDF5 passes on only the message, restated as ENOSPC (28)
    assert proc.stdout.startswith((f"OSError: [Errno 27] cannot write {shared_dir / name}: no space left (disk "
                                   "full, quota or file-size limit)", f"OSError: [Errno 28] cannot write "
                                   f"{shared_dir / name}: no space left (disk full, quota or file-size limit)")),\
        proc.stdout
    assert sorted(p.name for p in shared_dir.iterdir()) == [name]  # no temporary file left
    assert (shared_dir / name).read_bytes() == b"previous good file"


def test_an_unreadable_input_inside_a_write_is_not_blamed_on_the_output(tmp_path):
    from dive_core.atomic import atomic_path

    with pytest.raises(PermissionError, match="input.txt"):
        with atomic_path(tmp_path / "out.json"):
            raise PermissionError(13, "Permission denied", str(tmp_path / "input.txt"))
    assert list(tmp_path.iterdir()) == []


def test_a_default_backbone_switch_that_would_overwrite_results_is_refused(tmp_path):
    """Headline results and default tables carry no backbone in their path: a config whose
    default backbone differs from theirs is refused with the file named (workflow-level:
    tests/test_workflow.py::test_switching_the_default_backbone_never_overwrites_another_backbones_results)."""
    import json

    from dive_core import plan
    from dive_core.config import ConfigError

    cfg = {"backbone": "llm2vec-mistral-7b", "experiments": {"main": {}, "second_backbone": {"backbones": ["x"]}}}
    paths = {"headline": "results/{dataset}/{method}/seed{seed}.json", "runs_table": "results/tables/{experiment}_runs.tsv"}
    assert plan.foreign_backbone_outputs(cfg, paths, tmp_path) == []
    (tmp_path / "results/scifact/dive").mkdir(parents=True)
    (tmp_path / "results/scifact/dive/seed2027.json").write_text(json.dumps({"backbone": "minilm"}))
    (tmp_path / "results/tables").mkdir(parents=True)
    (tmp_path / "results/tables/main_runs.tsv").write_text("dataset\tbackbone\nscifact\tminilm\nscifact\tllm2vec-mistral-7b\n")
    (tmp_path / "results/tables/second_backbone_runs.tsv").write_text("dataset\tbackbone\nscifact\tx\n")
    assert plan.foreign_backbone_outputs(cfg, paths, tmp_path) == [
        ("results/scifact/dive/seed2027.json", "minilm"), ("results/tables/main_runs.tsv", "minilm")]
    with pytest.raises(ConfigError, match=r"backbone = 'llm2vec-mistral-7b'.*results/scifact/dive/seed2027.json \(minilm\)"):
        plan.check_default_backbone(cfg, paths, tmp_path)
    # the backbone those outputs hold is accepted (tables of no configured experiment are not read)
    plan.check_default_backbone({**cfg, "backbone": "minilm", "experiments": {}}, paths, tmp_path)
