"""tools/publish_tables.py: the workflow's tables copied into docs/ with their provenance.

Each test builds a tiny results/ tree and a git repository in tmp_path and runs the command as a
user would (a subprocess, from the repository root). The run records behind each table are made
up here (only the fields the header reads: each job's runtime and versions), in the layout the
workflow writes them (results/<dataset>/<backbone>/<method>/k<k>/<stage>/seed<seed>/eval.json,
listed in results/tables/<experiment>_runs.tsv)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "publish_tables.py"
TABLE = "# main\n\n| method | nDCG@10 |\n|---|---|\n| dive | 0.8034 ± 0.0031 |\n"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))  # any bytes: the figure is copied, not read

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git command")

EPYC = {"cpu": "AMD EPYC", "cpu_flags": ["avx2", "fma", "avx512f", "avx512_bf16"], "torch_threads": 2,
        "torch_num_threads": 2, "mkl": {"mkl_cbwr": "AUTO,STRICT", "auto_branch": "AUTO"}, "cuda": None}
XEON = {"cpu": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "cpu_flags": ["avx2", "avx512f", "amx_bf16"],
        "torch_threads": 2, "torch_num_threads": 2, "mkl": {"mkl_cbwr": "AUTO,STRICT", "auto_branch": "AVX512"},
        "cuda": None}
RUNS_COLUMNS = ("dataset", "backbone", "method", "method_type", "k", "stage", "seed", "ndcg@10")


def run_record(runtime: dict, commit: str, torch: str = "2.13.0+cpu", trained: dict | None = None) -> dict:
    """An eval.json with what the header reads: the evaluation job's runtime and versions, and the
    training job's (``trained``: its runtime, if other than the evaluation's)."""
    rt = {**runtime, "git_commit": commit}
    return {"runtime": rt, "versions": {"torch": torch},
            "training": {"runtime": {**(trained or runtime), "git_commit": commit}, "versions": {"torch": torch}}}


def write_runs(root: Path, name: str, runs: list[tuple[str, str, int, dict]]) -> None:
    """``runs``: (dataset, method, seed, record) of the table's runs, backbone minilm, k 64, final."""
    lines = ["\t".join(RUNS_COLUMNS)]
    for dataset, method, seed, record in runs:
        lines.append("\t".join([dataset, "minilm", method, "dive", "64", "final", str(seed), "0.8"]))
        run = root / "results" / dataset / "minilm" / method / "k64" / "final" / f"seed{seed}"
        run.mkdir(parents=True, exist_ok=True)
        (run / "eval.json").write_text(json.dumps(record), encoding="utf-8")
    (root / "results" / "tables" / f"{name}_runs.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def git_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(GIT_AUTHOR_NAME="Test", GIT_AUTHOR_EMAIL="test@example.invalid", GIT_COMMITTER_NAME="Test",
               GIT_COMMITTER_EMAIL="test@example.invalid", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    return env


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=git_env(), check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A committed checkout with config files, a results/ tree (ignored, as in the workflow) holding
    two tables and one figure."""
    root = tmp_path / "checkout"
    (root / "config").mkdir(parents=True)
    (root / "config" / "config.yaml").write_text("datasets: [scifact]\n")
    (root / "config" / "paper.yaml").write_text("datasets: [scifact, nfcorpus]\n")
    (root / ".gitignore").write_text("/results/\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    (root / "results" / "tables").mkdir(parents=True)
    (root / "results" / "figures").mkdir(parents=True)
    (root / "results" / "tables" / "main.md").write_text(TABLE, encoding="utf-8")
    (root / "results" / "figures" / "main.png").write_bytes(PNG)
    (root / "results" / "tables" / "heads.md").write_text("# heads\n\n| H | nDCG@10 |\n|---|---|\n| 4 | 0.7238 |\n")
    commit = git(root, "rev-parse", "HEAD").strip()
    write_runs(root, "main", [("scifact", "dive", seed, run_record(EPYC, commit)) for seed in (2027, 2028)])
    write_runs(root, "heads", [("scifact", "dive-h2", 2027, run_record(EPYC, commit))])
    return root


def publish(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], cwd=repo, env=git_env(), capture_output=True,
                          text=True)


def provenance(text: str) -> dict[str, str]:
    """The header's `> - key: value` lines."""
    return dict(re.findall(r"^> - ([a-z ()A-Z]+): (.*)$", text, flags=re.M))


def test_the_copy_is_the_table_after_a_header_naming_commit_config_command_date_and_sha256(repo):
    command = "snakemake --cores 2 all --configfile config/config.yaml config/paper.yaml"
    done = publish(repo, "main", "--config", "config/config.yaml", "config/paper.yaml", "--command", command)
    assert done.returncode == 0, done.stderr
    out = repo / "docs" / "tables" / "main.md"
    text = out.read_text(encoding="utf-8")
    assert text.endswith(TABLE)  # the table itself, unchanged, after the header
    head = text[: -len(TABLE)]
    fields = provenance(head)
    commit = git(repo, "rev-parse", "HEAD").strip()
    assert fields["commit"] == f"`{commit}`"  # clean tree: no "+ uncommitted changes"
    assert fields["config"] == "`config/config.yaml`, `config/paper.yaml`"
    assert fields["command"] == f"`{command}`"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", fields["date (UTC)"])
    sha = hashlib.sha256(TABLE.encode("utf-8")).hexdigest()
    assert fields["source"] == f"`results/tables/main.md`, sha256 `{sha}`"
    # the figure is copied byte for byte and named in the header with its own sha256
    assert (repo / "docs" / "tables" / "main.png").read_bytes() == PNG
    assert hashlib.sha256(PNG).hexdigest() in fields["figure"]
    assert str(out.relative_to(repo)) in done.stdout
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_tracked_modifications_are_stated_but_the_publish_folder_itself_is_not_counted(repo):
    assert publish(repo, "main").returncode == 0
    git(repo, "add", "docs")
    git(repo, "commit", "-q", "-m", "tables")
    # a hand edit of a published copy is not a change of the code that made the tables
    (repo / "docs" / "tables" / "main.md").write_text("edited\n")
    assert publish(repo, "main").returncode == 0
    fields = provenance((repo / "docs" / "tables" / "main.md").read_text(encoding="utf-8"))
    assert fields["commit"] == f"`{git(repo, 'rev-parse', 'HEAD').strip()}`"
    assert fields["config"] == "not given" and fields["command"] == "not given"
    # a modified tracked file is
    (repo / "config" / "config.yaml").write_text("datasets: [nfcorpus]\n")
    assert publish(repo, "main").returncode == 0
    fields = provenance((repo / "docs" / "tables" / "main.md").read_text(encoding="utf-8"))
    assert fields["commit"] == f"`{git(repo, 'rev-parse', 'HEAD').strip()}` + uncommitted changes"


def test_a_missing_table_is_refused_naming_it_and_nothing_is_written(repo):
    done = publish(repo, "main", "nosuchstudy")
    assert done.returncode == 2
    assert "results/tables/nosuchstudy.md" in done.stderr
    assert not (repo / "docs").exists()  # not even the table that exists: all or nothing
    # a previous copy stays as it was
    assert publish(repo, "main").returncode == 0
    before = (repo / "docs" / "tables" / "main.md").read_bytes()
    assert publish(repo, "main", "nosuchstudy").returncode == 2
    assert (repo / "docs" / "tables" / "main.md").read_bytes() == before


def test_a_missing_config_file_is_refused_naming_it(repo):
    done = publish(repo, "main", "--config", "config/nosuch.yaml")
    assert done.returncode == 2
    assert "config/nosuch.yaml" in done.stderr
    assert not (repo / "docs").exists()


def test_a_suffix_names_the_copies_without_touching_the_tables_of_the_plain_name(repo):
    done = publish(repo, "main", "--suffix", "_scifact")
    assert done.returncode == 0, done.stderr
    out = repo / "docs" / "tables"
    assert sorted(p.name for p in out.iterdir()) == ["main_scifact.md", "main_scifact.png"]
    assert (out / "main_scifact.md").read_text(encoding="utf-8").endswith(TABLE)
    assert "`results/tables/main.md`" in provenance((out / "main_scifact.md").read_text(encoding="utf-8"))["source"]
    bad = publish(repo, "main", "--suffix", "/../x")
    assert bad.returncode != 0 and "--suffix '/../x': letters, digits" in bad.stderr


def test_without_names_every_table_is_copied(repo):
    done = publish(repo, "--docs", "site/tables")
    assert done.returncode == 0, done.stderr
    out = repo / "site" / "tables"
    assert sorted(p.name for p in out.iterdir()) == ["heads.md", "main.md", "main.png"]
    assert (out / "heads.md").read_text(encoding="utf-8").endswith("| 4 | 0.7238 |\n")
    assert "figure" not in provenance((out / "heads.md").read_text(encoding="utf-8"))  # heads has none


def test_no_tables_at_all_is_refused(repo, tmp_path):
    done = publish(repo, "--results", str(tmp_path / "empty"))
    assert done.returncode == 2
    assert "no tables" in done.stderr


def test_outside_a_git_checkout_the_commit_is_unknown_not_invented(tmp_path):
    root = tmp_path / "plain"
    (root / "results" / "tables").mkdir(parents=True)
    (root / "results" / "tables" / "main.md").write_text(TABLE, encoding="utf-8")
    write_runs(root, "main", [("scifact", "dive", 2027, run_record(EPYC, "f" * 40))])
    env = git_env()
    env["GIT_CEILING_DIRECTORIES"] = str(tmp_path)  # never find a repository above the test folder
    done = subprocess.run([sys.executable, str(TOOL), "main"], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    fields = provenance((root / "docs" / "tables" / "main.md").read_text(encoding="utf-8"))
    assert fields["commit"].startswith("unknown (git rev-parse HEAD failed")


# --------------------------------------------------------------------------- the machine header
def published(repo: Path, name: str = "main") -> dict[str, str]:
    done = publish(repo, name)
    assert done.returncode == 0, done.stderr
    return provenance((repo / "docs" / "tables" / f"{name}.md").read_text(encoding="utf-8"))


def test_the_machine_header_is_read_from_the_runs_records(repo):
    fields = published(repo)
    commit = git(repo, "rev-parse", "HEAD").strip()
    assert fields["runs"] == "2, listed in `results/tables/main_runs.tsv`; the lines below are read from their records"
    assert fields["machine"] == "AMD EPYC (SIMD flags: avx2 fma avx512f avx512_bf16) (2 runs)"
    assert fields["threads"] == "2 (2 runs)"
    assert fields["MKL mode"] == "AUTO,STRICT (auto branch AUTO) (2 runs)"
    assert fields["torch"] == "2.13.0+cpu (2 runs)"
    assert fields["commits"] == f"`{commit[:12]}` (2 runs)"


def test_runs_on_two_machines_and_commits_list_every_value_with_its_count_oldest_commit_first(repo):
    first = git(repo, "rev-parse", "HEAD").strip()
    (repo / "config" / "paper.yaml").write_text("datasets: [nfcorpus]\n")
    git(repo, "commit", "-q", "-am", "second")
    second = git(repo, "rev-parse", "HEAD").strip()
    write_runs(repo, "main", [("scifact", "dive", 2027, run_record(EPYC, second)),
                              ("scifact", "dive", 2028, run_record(EPYC, first)),
                              ("nfcorpus", "dive", 2027, run_record(XEON, second + "-dirty", torch="2.12.0+cpu")),
                              ("nfcorpus", "mrl", 2027, run_record({**EPYC, "torch_num_threads": 4}, second))])
    fields = published(repo)
    assert fields["machine"] == ("2 values: AMD EPYC (SIMD flags: avx2 fma avx512f avx512_bf16) (3 runs); "
                                 "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (SIMD flags: avx2 avx512f amx_bf16) "
                                 "(1 run)")
    assert fields["threads"] == "2 values: 2 (3 runs); 2 (torch used 4) (1 run)"
    assert fields["MKL mode"] == ("2 values: AUTO,STRICT (auto branch AUTO) (3 runs); "
                                  "AUTO,STRICT (auto branch AVX512) (1 run)")
    assert fields["torch"] == "2 values: 2.13.0+cpu (3 runs); 2.12.0+cpu (1 run)"
    f, s = first[:12], second[:12]
    assert fields["commits"] == (f"`{f}`..`{s}-dirty` (4 runs): `{f}` (1 run), `{s}` (2 runs), `{s}-dirty` (1 run)")


def test_runs_without_an_mkl_field_are_said_to_predate_the_reproducible_mode(repo):
    commit = git(repo, "rev-parse", "HEAD").strip()
    old = {k: v for k, v in EPYC.items() if k != "mkl"}
    write_runs(repo, "main", [("scifact", "dive", 2027, run_record(old, commit)),
                              ("scifact", "dive", 2028, run_record(old, commit))])
    assert published(repo)["MKL mode"] == ("none: the runs predate MKL's reproducible mode (their records have no "
                                           "`mkl` field) (2 runs)")
    write_runs(repo, "main", [("scifact", "dive", 2027, run_record(old, commit)),
                              ("scifact", "dive", 2028, run_record(EPYC, commit)),
                              ("scifact", "dive", 2029, run_record({**EPYC, "mkl": {"mkl_cbwr": "BRANCH_OFF",
                                                                                     "auto_branch": "AUTO"}}, commit))])
    assert published(repo)["MKL mode"] == (
        "3 values: AUTO,STRICT (auto branch AUTO) (1 run); BRANCH_OFF (MKL's default, not reproducible) (1 run); "
        "none: the runs predate MKL's reproducible mode (their records have no `mkl` field) (1 run)")


def test_a_run_trained_on_one_machine_and_evaluated_on_another_names_both(repo):
    commit = git(repo, "rev-parse", "HEAD").strip()
    write_runs(repo, "main", [("scifact", "dive", 2027, run_record(EPYC, commit, trained=XEON))])
    fields = published(repo)
    assert fields["machine"] == ("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (SIMD flags: avx2 avx512f "
                                 "amx_bf16) (training) / AMD EPYC (SIMD flags: avx2 fma avx512f avx512_bf16) "
                                 "(evaluation) (1 run)")
    assert fields["threads"] == "2 (1 run)"  # the same in both jobs: said once


def test_the_efficiency_and_frontier_tables_read_their_own_records(repo):
    commit = git(repo, "rev-parse", "HEAD").strip()
    tables = repo / "results" / "tables"
    for name, folder, row in (("efficiency", "efficiency", "latency_ms_median"), ("frontier", "frontier", "encoding")):
        (tables / f"{name}.md").write_text(f"# {name}\n", encoding="utf-8")
        (tables / f"{name}_runs.tsv").write_text(f"dataset\tbackbone\tmethod\t{row}\nscifact\tminilm\tdive\t1\n"
                                                 f"scifact\tminilm\tfrozen\t2\n", encoding="utf-8")
        (repo / "results" / folder / "scifact").mkdir(parents=True)
        record = {"runtime": {**XEON, "git_commit": commit}, "versions": {"torch": "2.13.0+cpu"}}
        (repo / "results" / folder / "scifact" / "minilm.json").write_text(json.dumps(record), encoding="utf-8")
    (tables / "efficiency_runs.tsv").write_text(tables.joinpath("efficiency_runs.tsv").read_text()
                                                + "synthetic\t\tdive\t3\n", encoding="utf-8")
    synthetic = {"runtime": {**EPYC, "git_commit": commit}, "versions": {"torch": "2.13.0+cpu"}}
    (repo / "results" / "efficiency" / "synthetic.json").write_text(json.dumps(synthetic), encoding="utf-8")
    fields = published(repo, "efficiency")
    assert fields["runs"].startswith("2, listed in `results/tables/efficiency_runs.tsv`")  # scifact's and synthetic's
    assert fields["machine"].startswith("2 values: AMD EPYC") and "Intel" in fields["machine"]
    fields = published(repo, "frontier")
    assert fields["runs"].startswith("1, ") and fields["machine"].startswith("Intel")
    # a frontier_seed record's rows (`repeat`) count as its own run, read from its own record
    (tables / "frontier_runs.tsv").write_text("dataset\tbackbone\tmethod\tencoding\tseed\trepeat\n"
                                              "scifact\tminilm\tdive\tpq8\t2027\t\n"
                                              "scifact\tminilm\tmrl\tpq8\t2028\tTrue\n", encoding="utf-8")
    (repo / "results" / "frontier" / "scifact" / "minilm").mkdir()
    (repo / "results" / "frontier" / "scifact" / "minilm" / "seed2028.json").write_text(
        json.dumps(synthetic), encoding="utf-8")  # run on the EPYC
    fields = published(repo, "frontier")
    assert fields["runs"].startswith("2, ") and fields["machine"].startswith("2 values: AMD EPYC")


def test_a_budget_table_reads_each_record_its_list_names(repo):
    """A budget study's per-run list names the records it read (the frontier's test record, its
    validation record, a frontier_seed record): each is a run whose machine the header states; a named
    record that is missing is refused."""
    commit = git(repo, "rev-parse", "HEAD").strip()
    tables, base = repo / "results" / "tables", repo / "results" / "frontier" / "scifact"
    (base / "minilm").mkdir(parents=True)
    for path, machine in (("minilm.json", XEON), ("minilm/validation.json", XEON), ("minilm/seed2028.json", EPYC)):
        (base / path).write_text(json.dumps({"runtime": {**machine, "git_commit": commit},
                                             "versions": {"torch": "2.13.0+cpu"}}), encoding="utf-8")
    (tables / "budget.md").write_text("# budget\n", encoding="utf-8")
    (tables / "budget_runs.tsv").write_text(
        "dataset\tbackbone\tstage\trecord\n" + "".join(f"scifact\tminilm\t{stage}\tresults/frontier/scifact/{p}\n"
        for stage, p in (("final", "minilm.json"), ("select", "minilm/validation.json"), ("final", "minilm/seed2028.json"))),
        encoding="utf-8")
    fields = published(repo, "budget")
    assert fields["runs"].startswith("3, ") and fields["machine"].startswith("2 values: Intel")
    assert "(2 runs); AMD EPYC" in fields["machine"]
    (base / "minilm" / "seed2028.json").unlink()
    done = publish(repo, "budget")
    assert done.returncode == 2 and "seed2028.json: the record of a run of table 'budget' is missing" in done.stderr


@pytest.mark.parametrize("remove, why", [("results/tables/main_runs.tsv", "no per-run list for table 'main'"),
                                         ("results/scifact/minilm/dive/k64/final/seed2028/eval.json",
                                          "the record of a run of table 'main' is missing")])
def test_a_table_whose_runs_cannot_be_read_is_refused_naming_what_is_missing(repo, remove, why):
    (repo / remove).unlink()
    done = publish(repo, "heads", "main")
    assert done.returncode == 2
    assert f"{remove}: {why}" in done.stderr
    assert not (repo / "docs").exists()  # not even heads, whose runs are there: all or nothing


MACHINE_FIELDS = ("> - runs:", "> - machine:", "> - threads:", "> - MKL mode:", "> - torch:", "> - commits:")


def as_published_before_the_machine_header(path: Path) -> bytes:
    """Strip a copy's machine lines, as copies published before the tool read the records were."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(line for line in lines if not line.startswith(MACHINE_FIELDS)), encoding="utf-8")
    return path.read_bytes()


def test_restate_says_what_an_old_copy_lacks_and_whether_its_commit_predates_mkls_mode(repo):
    """--restate gives a copy published before the machine header (its records not kept) the lines it
    lacks: its machine is not stated, and its MKL mode is read from git: none for a commit before MKL's
    reproducible mode, not stated for one at or after it. The table itself is untouched; a second call
    changes nothing; a file the tool did not write, or a commit git cannot order, is refused."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("publish_tables", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    old = git(repo, "rev-parse", "HEAD").strip()
    assert publish(repo, "main", "heads").returncode == 0
    out = repo / "docs" / "tables"
    (repo / "config" / "config.yaml").write_text("datasets: [nfcorpus]\n")
    git(repo, "commit", "-q", "-am", "MKL's reproducible mode")
    mkl = git(repo, "rev-parse", "HEAD").strip()

    main = out / "main.md"
    as_published_before_the_machine_header(main)
    assert tool.restate([main], repo, mkl) == [main]
    text = main.read_text(encoding="utf-8")
    fields = provenance(text)
    assert fields["machine"].startswith("not stated: published before this tool read the runs' records")
    assert fields["MKL mode"] == (f"none: commit `{old[:12]}` predates MKL's reproducible mode (`{mkl[:12]}`), "
                                  "so a rerun at a later commit may differ in the last digits")
    assert text.endswith(TABLE) and fields["commit"] == f"`{old}`"
    assert tool.restate([main], repo, mkl) == [] and main.read_text(encoding="utf-8") == text

    heads = out / "heads.md"
    as_published_before_the_machine_header(heads)
    heads.write_text(heads.read_text(encoding="utf-8").replace(old, mkl), encoding="utf-8")  # published at mkl
    assert tool.restate([heads], repo, mkl) == [heads]
    assert provenance(heads.read_text(encoding="utf-8"))["MKL mode"] == (
        f"not stated (records not kept); commit `{mkl[:12]}` comes after MKL's reproducible mode was turned on "
        f"(`{mkl[:12]}`)")

    plain = repo / "notes.md"
    plain.write_text("# notes\n", encoding="utf-8")
    done = publish(repo, "--restate", str(plain))
    assert done.returncode == 2 and f"{plain}: not a copy written by tools/publish_tables.py" in done.stderr
    before = as_published_before_the_machine_header(main)
    with pytest.raises(tool.Refused, match="not a copy written by"):  # all or nothing: main is not written either
        tool.restate([main, plain], repo, mkl)
    assert main.read_bytes() == before
    # the tool's own MKL commit is not in this repository
    done = publish(repo, "--restate", str(main))
    assert done.returncode == 2 and "git cannot order commit" in done.stderr and main.read_bytes() == before
