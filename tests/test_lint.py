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
