"""Crash-safe writes: a failure mid-write leaves neither a partial target nor a temp file."""

from __future__ import annotations

import json
import os
import stat

import pytest

from dive_core.atomic import atomic_open, atomic_path, read_json, write_json


class Boom(Exception):
    pass


def listing(d):
    return sorted(p.name for p in d.iterdir())


@pytest.mark.parametrize("exc", [Boom, KeyboardInterrupt])
def test_atomic_open_failure_leaves_nothing(tmp_path, exc):
    target = tmp_path / "out.tsv"
    with pytest.raises(exc):
        with atomic_open(target, "w") as fh:
            fh.write("half a file\n")
            fh.flush()
            assert listing(tmp_path) != []  # the temp file exists meanwhile
            assert not target.exists()
            raise exc()
    assert not target.exists()
    assert listing(tmp_path) == []


@pytest.mark.parametrize("exc", [Boom, KeyboardInterrupt])
def test_atomic_path_failure_leaves_nothing(tmp_path, exc):
    target = tmp_path / "sub" / "model.pt"
    with pytest.raises(exc):
        with atomic_path(target, suffix=".pt.tmp") as tmp:
            assert tmp.parent == target.parent and tmp != target
            tmp.write_bytes(b"\0" * 1000)
            raise exc()
    assert listing(target.parent) == []


@pytest.mark.parametrize("exc", [Boom, KeyboardInterrupt])
def test_previous_good_file_kept(tmp_path, exc):
    target = tmp_path / "result.json"
    write_json(target, {"ok": 1})
    before = target.read_bytes()
    with pytest.raises(exc):
        with atomic_open(target, "w") as fh:
            fh.write("{broken")
            raise exc()
    assert target.read_bytes() == before
    with pytest.raises(exc):
        with atomic_path(target) as tmp:
            tmp.write_text("garbage")
            raise exc()
    assert target.read_bytes() == before
    assert read_json(target) == {"ok": 1}
    assert listing(tmp_path) == ["result.json"]


def test_write_json_failure_midway(tmp_path):
    target = tmp_path / "r.json"
    write_json(target, {"a": 1})
    # json.dump streams: "a" is written before the unserialisable value raises
    with pytest.raises(TypeError):
        write_json(target, {"a": 2, "b": object()})
    assert read_json(target) == {"a": 1}
    with pytest.raises(ValueError):
        write_json(target, {"a": float("nan")})  # allow_nan=False
    assert read_json(target) == {"a": 1}
    assert listing(tmp_path) == ["r.json"]
    with pytest.raises(TypeError):
        write_json(tmp_path / "new.json", [1, 2, {3}])
    assert listing(tmp_path) == ["r.json"]


def test_write_json_keyboard_interrupt(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    write_json(target, {"a": 1})

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(json, "dump", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_json(target, {"a": 2})
    monkeypatch.undo()
    assert read_json(target) == {"a": 1}
    assert listing(tmp_path) == ["r.json"]


def test_success_writes_content_and_mode(tmp_path):
    target = tmp_path / "deep" / "x.json"
    write_json(target, {"b": [1, 2], "a": "é"})
    assert target.read_text(encoding="utf-8") == '{\n  "a": "\\u00e9",\n  "b": [\n    1,\n    2\n  ]\n}\n'
    assert listing(target.parent) == ["x.json"]
    mask = os.umask(0o022)
    os.umask(mask)
    # the same permissions a plain open() would give (mkstemp alone would leave 0600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    with atomic_path(tmp_path / "y.bin") as tmp:
        tmp.write_bytes(b"xyz")
    assert (tmp_path / "y.bin").read_bytes() == b"xyz"
    assert stat.S_IMODE((tmp_path / "y.bin").stat().st_mode) == 0o666 & ~mask


def test_read_only_modes_refused_and_bad_json_reported(tmp_path):
    with pytest.raises(ValueError, match="write modes"):
        with atomic_open(tmp_path / "x", "r"):
            pass
    assert listing(tmp_path) == []
    p = tmp_path / "bad.json"
    p.write_text('{\n  "a": 1,\n  oops\n}\n')
    with pytest.raises(ValueError, match=r"bad\.json:3: invalid JSON"):
        read_json(p)
