"""`snakemake --lint` is clean on the default, paper and smoke configurations (make test also runs
it on the default one, and snakefmt on every rule file)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("configfile", [None, "config/paper.yaml", "config/test.yaml"])
def test_snakemake_lint_is_clean(configfile):
    cmd = [str(BIN / "snakemake"), "--lint"] + (["--configfile", configfile] if configfile else [])
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "Lints for" not in text, text
    assert "Congratulations, your workflow is in a good condition!" in text, text


def test_rule_files_name_no_path_of_their_own():
    """Every path lives in dive_core/paths.py: the Snakefile and rules/*.smk hold no string literal
    that starts with results/, data/ or logs/ (comments and docstrings aside)."""
    import io
    import re
    import tokenize

    found = []
    for f in [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]:
        for tok in tokenize.generate_tokens(io.StringIO(f.read_text(encoding="utf-8")).readline):
            if tok.type == tokenize.STRING and not tok.string.startswith(('"""', "'''")) \
                    and re.match(r"""^[rbf]*["'](results|data|logs)/""", tok.string):
                found.append(f"{f.relative_to(REPO)}:{tok.start[0]}: {tok.string}")
    assert not found, "\n".join(found)
