"""Software environments per backbone family.

Every job runs in the main environment (``requirements.lock`` -> ``.venv``; conda:
``envs/*.yaml``) except the embedding of a backbone whose family needs libraries that cannot live
beside the main stack. Today that is LLM2Vec: ``llm2vec`` 0.2.3 hard-pins ``transformers<=4.44.2``,
while the main stack runs transformers 5 (EmbeddingGemma needs >= 4.56). Its environment is

* pip: ``requirements-llm2vec.txt`` -> ``requirements-llm2vec.lock`` -> ``.venv-llm2vec`` in the
  checkout (``make venv-llm2vec``; rule ``python_env`` runs it when a configured LLM2Vec backbone
  is embedded and the folder is missing);
* conda: ``envs/embed-llm2vec.yaml`` (rules embed and embed_part name it for LLM2Vec backbones).

A job that needs such an environment runs its own work in place when the environment's libraries
import here (conda's activated environment, or a user's single environment that has them), and
otherwise re-runs its work with the environment's interpreter (:func:`run_in`): the same
``dive_core`` of this checkout, the same job description, the same log file.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

CHECKOUT = Path(__file__).resolve().parent.parent  # the repository that holds this dive_core
MAIN_CONDA = "envs/embed-gpu.yaml"
INSIDE = "DIVE_ENVIRONMENT"  # set by run_in for the child: the environment it was started in


@dataclass(frozen=True)
class Environment:
    name: str
    families: tuple[str, ...]  # the backbone families whose embedding runs here
    probe: str  # a distribution installed only in this environment
    requirements: str  # direct pins (pip), relative to the checkout
    lock: str  # every package with its sha256 (pip), relative to the checkout
    conda: str  # the conda environment file, relative to the checkout
    venv: str  # the virtual environment `make venv-<name>` builds, relative to the checkout

    @property
    def venv_dir(self) -> Path:
        return CHECKOUT / self.venv

    @property
    def stamp(self) -> Path:
        """Written by ``make venv-<name>`` once the environment is installed and checked."""
        return self.venv_dir / ".installed"

    @property
    def python(self) -> Path:
        return self.venv_dir / "bin" / "python"


ENVIRONMENTS: dict[str, Environment] = {
    "llm2vec": Environment(name="llm2vec", families=("llm2vec",), probe="llm2vec",
                           requirements="requirements-llm2vec.txt", lock="requirements-llm2vec.lock",
                           conda="envs/embed-llm2vec.yaml", venv=".venv-llm2vec"),
}


def for_family(family: str) -> Environment | None:
    """The environment a backbone family's embedding needs; None = the main one."""
    for env in ENVIRONMENTS.values():
        if family in env.families:
            return env
    return None


def conda_file(family: str) -> str:
    """The conda environment file of a family's embedding jobs, relative to the checkout."""
    env = for_family(family)
    return env.conda if env else MAIN_CONDA


def runs_here(env: Environment) -> bool:
    """Whether this interpreter has the environment's libraries: the probe's distribution is
    installed (a folder of that name on ``sys.path`` does not count)."""
    try:
        importlib.metadata.distribution(env.probe)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def run_in(env: Environment, module: str, job: Mapping[str, Any]) -> None:
    """``python -m <module> <job.json>`` with the environment's interpreter and this checkout's
    ``dive_core``; raises naming the environment when it is not built or the run fails. The
    child appends to the job's log itself (``job["log"]``)."""
    if not env.python.is_file():
        raise RuntimeError(
            f"the {env.name} environment is not built ({env.python} does not exist): run `make venv-{env.name}` "
            f"in {CHECKOUT} (pip), or run snakemake with --software-deployment-method conda ({env.conda})")
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix=f"dive-{env.name}-job-", delete=False) as fh:
        json.dump(job, fh)
    try:
        path = os.environ.get("PYTHONPATH")
        child_env = {**os.environ, "PYTHONPATH": str(CHECKOUT) + (os.pathsep + path if path else ""),
                     INSIDE: env.name}
        proc = subprocess.run([str(env.python), "-m", module, fh.name], env=child_env)
    finally:
        os.unlink(fh.name)
    if proc.returncode != 0:
        raise RuntimeError(f"{module} in the {env.name} environment ({env.python}) failed with exit status "
                           f"{proc.returncode}; its log: {job.get('log')}")


def main(argv: list[str] | None = None) -> int:
    """``python -m dive_core.environments``: each environment's folder, stamp and whether it is built."""
    import argparse

    argparse.ArgumentParser(prog="python -m dive_core.environments",
                            description="Each separate environment's folder, families, and whether it is built."
                            ).parse_args(argv)
    for env in ENVIRONMENTS.values():
        print(f"{env.name}: families {', '.join(env.families)}; pip {env.venv_dir} "
              f"({'built' if env.stamp.is_file() else 'not built: make venv-' + env.name}); conda {env.conda}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
