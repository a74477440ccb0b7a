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


LOCK = """# header
alpha==1.0 \\
    --hash=sha256:{a}
    # via root
beta==2.0 \\
    --hash=sha256:{b} \\
    --hash=sha256:{c}
    # via
    #   alpha
    #   other
numpy==9.9 \\
    --hash=sha256:{a}
    # via alpha
other==3.0 \\
    --hash=sha256:{b}
    # via -r requirements.txt
root==0.1 \\
    --hash=sha256:{c}
    # via -r requirements.txt
""".format(a="a" * 64, b="b" * 64, c="c" * 64)


def test_the_node_wheels_are_the_roots_and_what_they_need_from_the_lock(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text(LOCK)
    pins = gpu_study.read_lock(lock)
    assert pins["beta"]["via"] == {"alpha", "other"} and pins["beta"]["hashes"] == ["sha256:" + "b" * 64,
                                                                                   "sha256:" + "c" * 64]
    assert pins["root"]["via"] == {"-r"}  # requirements.txt: no package
    # root needs alpha, alpha needs beta and numpy (the node's: left out); other is nobody's
    assert gpu_study.node_wheels(pins, roots=("Root",), left_out=("numpy",)) == ["alpha", "beta", "root"]
    # the repository's lock: the workflow, FAISS, trec_eval, the schema check; not what the node has
    real = gpu_study.node_wheels(gpu_study.read_lock())
    assert {"snakemake", "connection-pool", "faiss-cpu", "pytrec-eval-terrier", "jsonschema", "rpds-py",
            "snakemake-interface-common", "yte", "smart-open"} <= set(real)
    assert not set(real) & {"pulp", "torch", "numpy", "pillow", "scipy", "pyarrow", "pandas", "transformers",
                            "matplotlib", "kiwisolver", "pyyaml", "packaging"}


def _wheel(folder, name, version, module, requires=()):
    """A minimal pure-Python wheel of distribution ``name``, holding ``module``."""
    import zipfile

    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    files = {f"{module}/__init__.py": "VALUE = 7\n",
             f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                            + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for f, text in files.items():
            z.writestr(f, text)
    return path


def test_the_node_installs_the_carried_wheels_it_lacks_and_keeps_its_own(tmp_path, monkeypatch):
    import subprocess
    import sys

    from importlib import metadata

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "dive-carried-probe", "0.1", "dive_carried_probe",
           requires=("numpy<1", "pytest>=1", "no-such-dist-dive>=1", 'tomli>=99; python_version < "3.0"'))
    _wheel(wheels, "numpy", "0.0.1", "numpy")  # the node's numpy must not be shadowed by a carried one
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setattr(sys, "path", list(sys.path))
    got = gpu_study.install_missing(wheels, tmp_path / "site")
    assert got["installed"] == ["dive-carried-probe==0.1"]
    assert got["kept"] == [f"numpy=={metadata.version('numpy')} (carried 0.0.1)"]
    # the carried wheel asks for a numpy the node does not have: said, not refused
    assert got["conflicts"] == [f"dive-carried-probe needs numpy<1, the node has {metadata.version('numpy')}"]
    assert not (tmp_path / "site" / "numpy").exists()
    assert sys.path[0] == str(tmp_path / "site")
    assert __import__("os").environ["PYTHONPATH"] == f"{tmp_path / 'site'}:/elsewhere"
    # a job started by Snakemake (a child process) imports it, and the node's numpy
    out = subprocess.run([sys.executable, "-c", "import dive_carried_probe, numpy; "
                          "print(dive_carried_probe.VALUE, numpy.__version__)"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["7", metadata.version("numpy")]


def test_a_new_carry_keeps_the_downloaded_wheels_and_replaces_the_rest(tmp_path):
    results, beir, dest = tmp_path / "results", tmp_path / "beir", tmp_path / ".gpucarry"
    (results / "scifact" / "minilm").mkdir(parents=True)
    (results / "scifact" / "minilm" / "embeddings.h5").write_bytes(b"new")
    (beir / "scifact" / "qrels").mkdir(parents=True)
    (beir / "scifact" / "queries.jsonl").write_text("{}\n")
    (dest / "wheels").mkdir(parents=True)
    (dest / "wheels" / "x-1-py3-none-any.whl").write_bytes(b"w")
    (dest / "beir" / "stale").mkdir(parents=True)
    (dest / "embeddings.h5").write_bytes(b"old")
    args = type("A", (), {"dest": str(dest), "results": str(results), "beir": str(beir)})
    assert gpu_study.carry(args) == 0
    assert (dest / "wheels" / "x-1-py3-none-any.whl").read_bytes() == b"w"
    assert (dest / "embeddings.h5").read_bytes() == b"new" and not (dest / "beir" / "stale").exists()
    assert (dest / "beir" / "scifact" / "queries.jsonl").is_file()
    assert (dest / "commit.txt").read_text().strip()  # this checkout's commit


def _fake_pip(made):
    """A stand-in for subprocess.call that, for ``pip wheel`` / ``pip download``, writes the wheels
    ``made[verb]`` into the command's folder and keeps each requirements file's text."""
    seen = []

    def call(cmd):
        verb = cmd[cmd.index("pip") + 2]
        seen.append((verb, Path(cmd[-1]).read_text()))
        folder = Path(cmd[cmd.index("-w" if verb == "wheel" else "-d") + 1])
        for name in made.get(verb, ()):
            (folder / name).write_bytes(b"")
        return 0
    return call, seen


PINS = {"alpha": {"version": "1.0", "hashes": ["sha256:" + "a" * 64], "via": set()},
        "beta": {"version": "2.0", "hashes": ["sha256:" + "b" * 64, "sha256:" + "c" * 64], "via": set()}}


def _wheels_call(tmp_path, monkeypatch, made, tree=0):
    monkeypatch.setattr(gpu_study, "read_lock", lambda: PINS)
    monkeypatch.setattr(gpu_study, "node_wheels", lambda pins: ["alpha", "beta"])
    monkeypatch.setattr(gpu_study, "tree_bytes", lambda: tree)
    call, seen = _fake_pip(made)
    monkeypatch.setattr(gpu_study.subprocess, "call", call)
    args = type("A", (), {"carry": str(tmp_path / "carry"), "python_version": "3.12"})
    return gpu_study.wheels(args), seen


def test_wheels_built_here_for_this_python_are_replaced_by_the_nodes(tmp_path, monkeypatch):
    rc, seen = _wheels_call(tmp_path, monkeypatch, {
        "wheel": ["alpha-1.0-py3-none-any.whl", "beta-2.0-cp311-cp311-manylinux_2_17_x86_64.whl"],
        "download": ["beta-2.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"]})
    assert rc == 0
    assert sorted(p.name for p in (tmp_path / "carry" / "wheels").iterdir()) == [
        "alpha-1.0-py3-none-any.whl", "beta-2.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"]
    # every file pinned by the lock's hashes; only beta fetched again, for the node's Python
    assert seen[0] == ("wheel", f"alpha==1.0 --hash=sha256:{'a' * 64}\n"
                                f"beta==2.0 --hash=sha256:{'b' * 64} --hash=sha256:{'c' * 64}\n")
    assert seen[1] == ("download", f"beta==2.0 --hash=sha256:{'b' * 64} --hash=sha256:{'c' * 64}\n")


def test_wheels_refuse_a_missing_or_unfit_wheel_and_a_carry_too_large_to_send(tmp_path, monkeypatch):
    built = ["alpha-1.0-py3-none-any.whl", "beta-2.0-cp311-cp311-manylinux_2_17_x86_64.whl"]
    assert _wheels_call(tmp_path, monkeypatch, {"wheel": built})[0] == 2  # beta: none for 3.12
    assert _wheels_call(tmp_path, monkeypatch, {"wheel": built, "download": [  # for another Python, platform
        "beta-2.0-cp313-cp313-manylinux_2_17_x86_64.whl"]})[0] == 2
    assert _wheels_call(tmp_path, monkeypatch, {"wheel": built, "download": [
        "beta-2.0-cp312-cp312-macosx_11_0_arm64.whl"]})[0] == 2
    fine = {"wheel": ["alpha-1.0-py311-none-any.whl", *built[1:]],  # py311 and cp310-abi3: 3.12 installs both
            "download": ["beta-2.0-cp310-abi3-manylinux_2_28_x86_64.whl"]}
    assert _wheels_call(tmp_path, monkeypatch, fine)[0] == 0
    assert _wheels_call(tmp_path, monkeypatch, fine, tree=64 * 2**20 + 1)[0] == 2  # one byte over


def test_run_stops_before_the_study_when_an_import_the_jobs_need_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_study, "NODE_IMPORTS", ("json", "no_such_module_dive"))
    monkeypatch.setattr(gpu_study, "snakemake", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    monkeypatch.setenv("BEIR_DATA_DIR", "unchanged")
    (tmp_path / "carry").mkdir()
    args = type("A", (), {"out": str(tmp_path / "out"), "carry": str(tmp_path / "carry"), "cores": 1, "gpus": 1,
                          "snakemake_args": [], "timeout": None, "archive_mib": 12.0})
    assert gpu_study.run(args) == 2
