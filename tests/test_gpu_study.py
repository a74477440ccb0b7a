"""benchmarks/gpu_study.py reads the jobs' start and end out of Snakemake's log (the timeline of
the study on a GPU node)."""
import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("gpu_study", Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_study.py")
gpu_study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_study)

LOG = """Job stats:
job        count
-------  -------
train          2
total          3

Select jobs to execute...
Execute 2 jobs...

[Fri Nov 27 17:33:57 2026]
localrule make_splits:
    output: results/scifact/splits.json
    jobid: 3
    reason: Missing output files: results/scifact/splits.json
    wildcards: dataset=scifact
    threads: 1

[Fri Nov 27 17:34:01 2026]
Finished jobid: 3 (Rule: make_splits)
1 of 3 steps (33%) done

[Fri Nov 27 17:34:02 2026]
rule train:
    input: results/scifact/splits.json
    jobid: 7
    wildcards: dataset=scifact, backbone=minilm, method=dive, k=64, stage=final, seed=2027
    threads: 2

[Fri Nov 27 17:34:02 2026]
rule train:
    jobid: 8
    wildcards: dataset=scifact, backbone=minilm, method=mrl, k=64, stage=final, seed=2027

[Tue Dec  1 17:34:40 2026]
Finished jobid: 8 (Rule: train)
"""


def test_the_timeline_has_each_jobs_rule_wildcards_start_and_end():
    jobs = {j["jobid"]: j for j in gpu_study.timeline(LOG)}
    assert sorted(jobs) == [3, 7, 8]
    assert jobs[3]["rule"] == "make_splits" and jobs[3]["wildcards"] == "dataset=scifact"
    assert (jobs[3]["end"] - jobs[3]["start"]).total_seconds() == 4
    assert jobs[7]["rule"] == "train" and "method=dive" in jobs[7]["wildcards"] and jobs[7]["end"] is None
    assert jobs[8]["end"].day == 1  # a one-digit day is padded with a space in Snakemake's stamp
    assert gpu_study.peak_concurrency([jobs[3], jobs[8]]) == 1


# ---- what comes back from the node, and its publication here -------------------------------------
H100 = {"cpu": "Intel(R) Xeon(R) Platinum 8480+", "cpu_flags": ["avx2", "avx512f", "amx_bf16"], "torch_threads": 16,
        "torch_num_threads": 16, "mkl": {"mkl_cbwr": "AUTO,STRICT", "auto_branch": "AVX512"},
        "cuda": "NVIDIA H100 80GB HBM3", "git_commit": "a" * 40}
RUN_DIR = "results/generated-tiny/minilm/{method}/k8/final/seed{seed}"


def _results_tree(root, big=b""):
    """A results/ tree in the workflow's layout (dive_core/paths.py): two trained runs with their
    record, per-query TSV, training log and checkpoint, the embeddings, a table with its per-run
    list and figure, the efficiency study's record, a selection."""
    import json

    from dive_core import paths

    runs = [("dive", 2027), ("mrl", 2027)]
    lines = ["dataset\tbackbone\tmethod\tmethod_type\tk\tstage\tseed\tndcg@10"]
    for method, seed in runs:
        w = dict(dataset="generated-tiny", backbone="minilm", method=method, k=8, stage="final", seed=seed)
        record = {"runtime": H100, "versions": {"torch": "2.11.0+cu130"},
                  "training": {"runtime": H100, "versions": {"torch": "2.11.0+cu130"}}}
        for template, data in ((paths.EVAL_JSON, json.dumps(record)), (paths.PER_QUERY, "qid\tndcg@10\nq1\t0.5\n"),
                               (paths.TRAIN_LOG, "epoch\tphase\ttotal\n1\ttrain\t0.3\n"), (paths.CHECKPOINT, big)):
            f = root / template.format(**w)
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(data if isinstance(data, bytes) else data.encode())
        lines.append(f"generated-tiny\tminilm\t{method}\t{method}\t8\tfinal\t{seed}\t0.8")
    for rel, data in (("results/tables/main.md", "# main\n\n| method | nDCG@10 |\n"),
                      ("results/tables/main_runs.tsv", "\n".join(lines) + "\n"),
                      ("results/figures/main.png", "png"), ("results/selection/minilm/lr_audit.json", "{}"),
                      ("results/efficiency/generated-tiny/minilm.json", json.dumps({"runtime": H100})),
                      ("results/generated-tiny/minilm/embeddings.h5", big),
                      ("results/compressed/x.npy", big),
                      ("results/generated-tiny/minilm/dive/k8/final/seed2027/export/model.json", "{}")):
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data if isinstance(data, bytes) else data.encode())


def test_every_record_per_query_tsv_and_table_comes_back_and_publishes_naming_the_gpu(tmp_path):
    import re
    import subprocess
    import sys

    node, here = tmp_path / "node", tmp_path / "here"
    _results_tree(node, big=b"x" * 4096)
    out = tmp_path / "OUT"
    out.mkdir()
    archives = gpu_study.pack(node / "results", out)
    # what a device call brings back: at most 8 files of at most 16 MiB, plain names
    assert 1 <= len(archives) <= 4 and all(p.stat().st_size < 16 * 2**20 for p in archives)
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in archives)
    assert gpu_study.unpack(type("A", (), {"files": str(out), "results": str(here / "results_h100")})) == 0
    back = {p.relative_to(here / "results_h100").as_posix() for p in (here / "results_h100").rglob("*") if p.is_file()}
    sent = {p.relative_to(node / "results").as_posix() for p in (node / "results").rglob("*") if p.is_file()}
    left = {"generated-tiny/minilm/embeddings.h5", "compressed/x.npy",
            "generated-tiny/minilm/dive/k8/final/seed2027/export/model.json"} | {
        f"generated-tiny/minilm/{m}/k8/final/seed2027/model.pt" for m in ("dive", "mrl")}
    assert back == sent - left  # every record, per-query TSV, log, table, figure; no checkpoint or vectors
    for m in ("dive", "mrl"):
        for f in ("eval.json", "per_query.tsv", "train_log.tsv"):
            assert f"generated-tiny/minilm/{m}/k8/final/seed2027/{f}" in back
    # published from there beside the CPU tables, the GPU named in the header
    tool = Path(__file__).resolve().parent.parent / "tools" / "publish_tables.py"
    proc = subprocess.run([sys.executable, str(tool), "--results", str(here / "results_h100"), "--docs",
                           str(here / "docs"), "--suffix", "_h100", "main"], cwd=here, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (here / "docs" / "main_h100.md").read_text()
    assert "GPU NVIDIA H100 80GB HBM3" in text and "runs: 2" in text
    assert (here / "docs" / "main_h100.png").is_file()


def test_archives_are_split_to_fit_what_comes_back(tmp_path):
    import os

    _results_tree(tmp_path)
    for i in range(6):  # incompressible per-query files
        f = tmp_path / f"results/generated-tiny/minilm/pca/k8/final/seed{i}/per_query.tsv"
        f.parent.mkdir(parents=True)
        f.write_bytes(os.urandom(300_000))
    out = tmp_path / "OUT"
    out.mkdir()
    archives = gpu_study.pack(tmp_path / "results", out, limit_mib=0.5)
    assert len(archives) >= 3 and all(p.stat().st_size < 0.5 * 2**20 + 400_000 for p in archives)
    assert gpu_study.unpack(type("A", (), {"files": str(out), "results": str(tmp_path / "back")})) == 0
    assert len(list((tmp_path / "back").rglob("per_query.tsv"))) == 6 + 2


def test_a_copy_without_git_history_records_the_carried_commit(tmp_path, monkeypatch):
    from dive_core.provenance import git_commit

    monkeypatch.setenv("DIVE_GIT_COMMIT", "b" * 40)
    assert git_commit(tmp_path) == "b" * 40  # not a git checkout
    monkeypatch.delenv("DIVE_GIT_COMMIT")
    assert git_commit(tmp_path) == "unknown"
