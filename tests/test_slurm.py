"""The cluster path for real: profiles/slurm, as shipped, submitting to a one-node SLURM on this
machine (tools/slurm_localhost.sh; .ci/run starts it before the tests), and the embedding stage
scattered over jobs (a backbone's `shards:`). On SciFact-tiny (500 documents of the official
SciFact), so the real-data copy must be there (BEIR_DATA_DIR, or the CI machine's copy beside the repository).

Select them with `pytest -k slurm` (the cluster) and `pytest -k shard` (the sharded embedding).
Where `sbatch` is absent (a laptop) the cluster test skips and says why; in CI a skip fails the
run (tests/conftest.py)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import h5py
import pytest

from conftest import shared_beir_dir

pytestmark = pytest.mark.workflow

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "slurm"
TARGET = "results/scifact-tiny/minilm/dive/k64/final/seed2027/per_query.tsv"
EMBEDDINGS = "results/scifact-tiny/minilm/embeddings.h5"
THREE_SHARDS = "backbones={minilm: {shards: 3}}"
CPU_ONLY = "gpu=0"  # the documented switch for a cluster without GPUs (docs/cluster.md)


@functools.lru_cache(maxsize=None)
def tiny_beir_dir(root: Path) -> Path:
    """A local BEIR directory with scifact-tiny: ``root`` if it has it, else a temporary one beside
    ``root``'s SciFact where dive_core.data.derive writes it (a plain official BEIR copy has none)."""
    from dive_core.data import derive

    if (root / derive.SUBDIR).is_dir():
        return root
    out = Path(tempfile.mkdtemp(prefix="beir-scifact-tiny-"))
    (out / derive.SOURCE).symlink_to(root / derive.SOURCE)
    derive.write_beir_dir(out)
    return out


def beir_env() -> dict:
    root = shared_beir_dir()
    if not (root / "scifact").is_dir():
        pytest.skip(f"needs the official BEIR SciFact (scifact-tiny is cut from it); looked in {root / 'scifact'}")
    return dict(os.environ, BEIR_DATA_DIR=str(tiny_beir_dir(root)))


def snakemake_cmd(workdir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
            "--configfile", str(REPO / "config" / "test.yaml"), str(REPO / "tests" / "scifact-tiny.yaml"), *args]


def run(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(snakemake_cmd(workdir, *args), cwd=workdir, env=beir_env(), capture_output=True,
                          text=True, timeout=1500)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def content_sha256(path: Path) -> str:
    with h5py.File(path, "r") as f:
        return f.attrs["content_sha256"]


def file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def shards_attr(path: Path):
    with h5py.File(path, "r") as f:
        return f.attrs.get("shards")


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Path:
    """The target built locally, embedding unsharded: the reference for both tests."""
    wd = tmp_path_factory.mktemp("local")
    run(wd, "--cores", "2", "--", TARGET)
    return wd


@pytest.fixture(scope="module")
def cluster() -> None:
    if shutil.which("sbatch") is None:
        pytest.skip("needs a SLURM cluster: sbatch is not on PATH (a one-node one: sudo tools/slurm_localhost.sh)")
    proc = subprocess.run(["sinfo", "-h", "-o", "%a %D %T"], capture_output=True, text=True)
    if proc.returncode != 0 or " idle" not in proc.stdout and " mix" not in proc.stdout:
        pytest.skip(f"sbatch is here but no idle SLURM node answers (sinfo: {proc.stdout or proc.stderr!r}); "
                    "start one with sudo tools/slurm_localhost.sh")


def test_shard_embedding_locally_gathers_the_unsharded_file(local, tmp_path, ci_log):
    """3 corpus shards + the queries part, each its own job, gathered by rule embed: the same
    content_sha256 as the unsharded file; the parts are temporary and gone afterwards."""
    proc = run(tmp_path, "--cores", "2", "--config", THREE_SHARDS, "--", EMBEDDINGS)
    log = proc.stdout + proc.stderr
    assert log.count("rule embed_part:") == 4 and "wildcards: dataset=scifact-tiny, backbone=minilm, part=queries" in log
    for i in (1, 2, 3):
        assert f"part=corpus{i}of3" in log
    assert content_sha256(tmp_path / EMBEDDINGS) == content_sha256(local / EMBEDDINGS)
    assert shards_attr(tmp_path / EMBEDDINGS) == 3 and shards_attr(local / EMBEDDINGS) is None
    ci_log(f"shards: embeddings content_sha256 3 shards {content_sha256(tmp_path / EMBEDDINGS)}, unsharded "
           f"{content_sha256(local / EMBEDDINGS)}")
    assert not list((tmp_path / "results/scifact-tiny/minilm").glob("embed_parts/*.h5"))


def squeue() -> list[tuple[str, str, str]]:
    out = subprocess.run(["squeue", "-h", "-o", "%i|%k|%T"], capture_output=True, text=True).stdout
    return [tuple(line.split("|", 2)) for line in out.splitlines() if line.count("|") == 2]


def sacct(since: str) -> list[dict]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-S", since, "-o", "JobID,JobName,Comment,State,AllocCPUS"],
                         capture_output=True, text=True, check=True).stdout
    keys = ("id", "name", "comment", "state", "cpus")
    return [dict(zip(keys, line.split("|"))) for line in out.splitlines() if line.strip()]


def test_slurm_profile_as_shipped_runs_like_local_and_survives_a_lost_job(cluster, local, tmp_path, ci_log):
    """The target through profiles/slurm unchanged (plus `--config gpu=0`: this node has no GPU),
    with the embedding in 3 shard jobs. While the training job runs it is killed through SLURM
    (scancel); the profile's `retries` resubmits it and the run finishes with per-query results
    byte-identical to the local run, and the same embeddings."""
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    t0 = time.perf_counter()
    proc = subprocess.Popen(snakemake_cmd(tmp_path, "--profile", str(PROFILE), "--config", CPU_ONLY, THREE_SHARDS,
                                          "--", TARGET),
                            cwd=tmp_path, env=beir_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed: list[str] = []

    def kill_first_running_train() -> None:
        deadline = time.time() + 1200
        while proc.poll() is None and time.time() < deadline:
            running = [jid for jid, comment, state in squeue() if comment.startswith("rule_train") and state == "RUNNING"]
            if running:
                time.sleep(2)  # inside the job by now: Snakemake started, the training under way
                subprocess.run(["scancel", running[0]], check=True)
                killed.append(running[0])
                return
            time.sleep(0.5)

    watcher = threading.Thread(target=kill_first_running_train, daemon=True)
    watcher.start()
    try:
        out, _ = proc.communicate(timeout=1500)
    finally:
        if proc.poll() is None:
            proc.kill()
    watcher.join(timeout=5)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, out[-8000:]
    assert killed, f"no training job was seen running:\n{out[-4000:]}"

    jobs = sacct(since)
    by_id = {j["id"]: j for j in jobs}
    assert by_id[killed[0]]["state"].startswith("CANCELLED"), jobs
    ours = [j for j in jobs if j["name"] == by_id[killed[0]]["name"]]  # this run's jobs (the run's uuid)
    rules = sorted(j["comment"].split("_wildcards")[0] for j in ours)
    assert rules.count("rule_train") == 2 and rules.count("rule_embed_part") == 4, rules
    assert {j["state"] for j in ours if j["id"] != killed[0]} == {"COMPLETED"}, ours
    assert all(int(j["cpus"]) <= 2 for j in ours)  # cpus-per-task = the job's threads (2), never more
    ci_log(f"SLURM: {len(ours)} jobs submitted, {len(ours) - 1} COMPLETED, train job {killed[0]} cancelled "
           f"and resubmitted, {wall:.0f} s; rules: {rules}")

    assert (tmp_path / TARGET).read_bytes() == (local / TARGET).read_bytes()
    assert content_sha256(tmp_path / EMBEDDINGS) == content_sha256(local / EMBEDDINGS)
    assert shards_attr(tmp_path / EMBEDDINGS) == 3
    ci_log(f"SLURM: per_query.tsv sha256 {file_sha256(tmp_path / TARGET)} (local "
           f"{file_sha256(local / TARGET)}); embeddings content_sha256 3 shards "
           f"{content_sha256(tmp_path / EMBEDDINGS)} (local, unsharded {content_sha256(local / EMBEDDINGS)})")


def test_slurm_job_no_node_can_run_is_reported_before_submission(cluster, tmp_path):
    """A job that asks for more than any node has (here a GPU on a CPU-only cluster, and 64 CPUs)
    is named with what it asks and what the nodes have, and nothing is submitted."""
    before = {jid for jid, _, _ in squeue()}
    proc = run(tmp_path, "--profile", str(PROFILE), "--set-threads", "train=64", "--", TARGET, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "these jobs fit no node of the cluster and would wait for ever" in out
    assert "rule embed (results/scifact-tiny/minilm/embeddings.h5): asks for 1 GPU(s)" in out
    assert "rule train (" in out and "asks for 64 CPU(s), 1 GPU(s)" in out
    assert "On a CPU-only cluster: --config gpu=0" in out
    assert {jid for jid, _, _ in squeue()} <= before and not (tmp_path / "data").exists()


def test_slurm_compress_target_runs_row_shards_as_jobs_and_matches_the_cli(cluster, tmp_path, ci_log):
    """A `compress:` entry (tests/test_compress.py's tiny setup: int8 Parquet in 3 row shards, with
    its FAISS index) through profiles/slurm as shipped: 3 compress_part jobs, the gather and the
    index, each its own SLURM job, write the bytes `dive-compress` writes. Needs no BEIR data."""
    from test_compress import cli_outputs, compress_setup

    config, entries = compress_setup(tmp_path)
    expected = cli_outputs({"pq8": entries["pq8"]}, tmp_path / "cli")["pq8"]
    wd = tmp_path / "wd"
    wd.mkdir()
    targets = ["results/compressed/pq8.parquet", "results/compressed/pq8.faiss"]
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
                           str(wd), "--configfile", str(config), "--profile", str(PROFILE), "--", *targets],
                          cwd=wd, capture_output=True, text=True, timeout=1500)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    jobs = sacct(since)
    parts = [j for j in jobs if j["comment"].startswith("rule_compress_part")]
    assert parts, jobs
    ours = [j for j in jobs if j["name"] == parts[0]["name"]]  # this run's jobs (the run's uuid)
    rules = sorted(j["comment"].split("_wildcards")[0] for j in ours)
    assert rules == ["rule_compress", "rule_compress_index"] + ["rule_compress_part"] * 3, rules
    assert {j["state"] for j in ours} == {"COMPLETED"}, ours
    assert (wd / targets[0]).read_bytes() == expected.read_bytes()
    assert (wd / targets[1]).read_bytes() == (tmp_path / "cli" / "pq8.faiss").read_bytes()
    assert not (wd / "results" / "compressed" / "pq8.parts").exists()  # temporary
    ci_log(f"SLURM compress: {len(ours)} jobs COMPLETED ({rules}), {wall:.0f} s; pq8.parquet sha256 "
           f"{file_sha256(wd / targets[0])} = dive-compress's {file_sha256(expected)}")
