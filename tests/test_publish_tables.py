"""tools/publish_tables.py: the workflow's tables copied into docs/ with their provenance.

Each test builds a tiny results/ tree and a git repository in tmp_path and runs the command as a
user would (a subprocess, from the repository root)."""

from __future__ import annotations

import hashlib
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
    env = git_env()
    env["GIT_CEILING_DIRECTORIES"] = str(tmp_path)  # never find a repository above the test folder
    done = subprocess.run([sys.executable, str(TOOL), "main"], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    fields = provenance((root / "docs" / "tables" / "main.md").read_text(encoding="utf-8"))
    assert fields["commit"].startswith("unknown (git rev-parse HEAD failed")
