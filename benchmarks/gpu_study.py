"""The default study end to end on a GPU node, timed: one script for both ends of the trip.

Here (a checkout whose default run has embedded SciFact with MiniLM)::

    .venv/bin/python benchmarks/gpu_study.py carry [--results results] [--beir DIR] [--dest .gpucarry]

copies into ``--dest`` what the GPU node cannot make itself: SciFact's BEIR files (``--beir``, the
official layout) and MiniLM's embeddings of it (``results/scifact/minilm/embeddings.h5``; MiniLM's
weights, 88 MB in their wheel, do not fit the device's 64 MiB carry). Then::

    .venv/bin/python benchmarks/gpu_study.py wheels [--carry .gpucarry] [--python-version 3.12]

downloads from PyPI, for the node's Python (3.12 on the H100 and H200 machines so far) on Linux
x86_64, the wheels of what the study needs that the node's image lacks: :data:`NODE_ROOTS` and every
package they need, at ``requirements.lock``'s versions and checked against its sha256, less
:data:`NODE_HAS` (:func:`node_wheels`) and Snakemake's optional ``pulp`` (16 MB: the node runs
``--scheduler greedy``). Carry both with ``run(..., carry=[".gpucarry"])``: the command refuses a
carry that would take the working tree past the 64 MiB a call sends.

There (the GPU node, from the repository root)::

    python3 benchmarks/gpu_study.py run --carry .gpucarry --out $OUT [--cores 16] [--gpus 1] -- --scheduler greedy

installs the carried wheels that the node has no distribution of (``pip install --no-deps --target``;
one it has is used as it is, never shadowed; ``summary.json`` lists both, and the carried
requirements a kept version does not meet) and puts them on ``PYTHONPATH`` for Snakemake and its jobs
(:func:`install_missing`), stops before the study if Snakemake's or the jobs' imports
(:data:`NODE_IMPORTS`) fail, stages SciFact from the carried files (rule ``stage_beir``, a real job), puts the carried
embeddings in place and marks them up to date (``snakemake --touch``: the embedding is the one
step not rerun), then runs and times ``snakemake --cores N --resources gpu=G all`` (the config's
default study). It writes to ``--out``: ``timeline.tsv`` (one row per job: rule, job id,
wildcards, start and end in seconds from the start of the run, from Snakemake's log),
``summary.json`` (wall time, job count, jobs per rule, the busiest concurrency, the device),
``snakemake.log`` and the results as ``results-1.tar.gz`` (``-2``, ... when one would pass
``--archive-mib``): every run's record (``eval.json``), per-query TSV, training log and each study's
own records, the tables with their per-run lists, the figures and the selections; not the
checkpoints, embeddings, exports or compressed vectors (:func:`result_files`). That is at most 8 files
of at most 16 MiB each, what a device call brings back from ``$OUT``. The carry records the commit of
the checkout it was made in (``commit.txt``): the node's copy has no git history, so its runs record
that commit (``DIVE_GIT_COMMIT``, dive_core/provenance.py).

Back here, with the files of ``$OUT`` under FILES_AT::

    .venv/bin/python benchmarks/gpu_study.py unpack FILES_AT --results results_h100
    .venv/bin/python tools/publish_tables.py --results results_h100 --suffix _h100 \
        --command "python3 benchmarks/gpu_study.py run ..." [EXPERIMENT ...]

puts the results back in a results folder of their own and publishes its tables beside the CPU ones
(``docs/tables/main_h100.md``, ...), each header naming the GPU read from the runs' records.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from datetime import datetime
from pathlib import Path

EMBEDDINGS = Path("results/scifact/minilm/embeddings.h5")
STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?rule (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
WILDCARDS = re.compile(r"^\s+wildcards: (.*)$")
FINISHED = re.compile(r"^Finished job(?:id:)? (\d+)")


def timeline(log_text: str) -> list[dict]:
    """Jobs of a Snakemake log: ``{rule, jobid, wildcards, start, end}`` (datetimes; ``end`` None
    for a job that did not finish)."""
    jobs: dict[int, dict] = {}
    now = None
    rule = None
    for line in log_text.splitlines():
        if m := STAMP.match(line.strip()):
            now = datetime.strptime(re.sub(" +", " ", m.group(1)), "%a %b %d %H:%M:%S %Y")
        elif m := RULE.match(line.strip()):
            rule = m.group(1)
        elif (m := JOBID.match(line)) and rule is not None:
            jobs[int(m.group(1))] = {"rule": rule, "jobid": int(m.group(1)), "wildcards": "", "start": now,
                                     "end": None}
            last = int(m.group(1))
            rule = None
        elif (m := WILDCARDS.match(line)) and jobs:
            jobs[last]["wildcards"] = m.group(1)
        elif (m := FINISHED.match(line.strip())) and int(m.group(1)) in jobs:
            jobs[int(m.group(1))]["end"] = now
    return sorted(jobs.values(), key=lambda j: (j["start"] or datetime.min, j["jobid"]))


def peak_concurrency(jobs: list[dict], rules: set[str] | None = None) -> int:
    events = []
    for j in jobs:
        if j["start"] and j["end"] and (rules is None or j["rule"] in rules):
            events += [(j["start"], 1), (j["end"], -1)]
    peak = cur = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        cur += step
        peak = max(peak, cur)
    return peak


# what comes back: a run's record, per-query scores and log, the studies' records, tables and figures;
# not its checkpoint, the embeddings, exports, compressed vectors or embedding shards (large, and remade)
KEEP_SUFFIXES = (".json", ".tsv", ".md", ".png", ".txt")
SKIP_PARTS = ("embed_parts", "export", "compressed", ".snakemake")
ARCHIVE = "results-{}.tar.gz"


def result_files(results: Path) -> list[Path]:
    """The files of ``results`` that come back from the node (:data:`KEEP_SUFFIXES`, none under
    :data:`SKIP_PARTS`), sorted."""
    return sorted(p for p in results.rglob("*") if p.is_file() and p.suffix in KEEP_SUFFIXES
                  and not set(p.relative_to(results).parts) & set(SKIP_PARTS))


def pack(results: Path, out: Path, limit_mib: float = 12.0) -> list[Path]:
    """``result_files(results)`` into ``out/results-1.tar.gz``, ``-2``, ...: a new archive starts
    when the current one has taken in more than ``limit_mib`` (counted before compression, so an
    archive is at most that plus one file, compressed). Paths inside start with ``results/``.
    Returns the archives written."""
    files = result_files(results)
    archives: list[Path] = []
    tar = None
    for f in files:
        if tar is None or tar.fileobj.tell() > limit_mib * 2**20:
            if tar is not None:
                tar.close()
            archives.append(out / ARCHIVE.format(len(archives) + 1))
            tar = tarfile.open(archives[-1], "w:gz")
        tar.add(f, arcname=str(Path("results") / f.relative_to(results)))
    if tar is not None:
        tar.close()
    return archives


def unpack(a) -> int:
    """The archives of a run (``results-*.tar.gz`` under ``a.files``) into ``a.results``."""
    src, dest = Path(a.files), Path(a.results)
    archives = sorted(src.rglob("results-*.tar.gz"))
    if not archives:
        print(f"gpu_study unpack: no results-*.tar.gz under {src}", file=sys.stderr)
        return 2
    n = 0
    for path in archives:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar.getmembers():
                parts = Path(member.name).parts
                if not member.isfile() or parts[0] != "results" or ".." in parts:
                    print(f"gpu_study unpack: {path}: refusing {member.name!r}", file=sys.stderr)
                    return 2
                target = dest.joinpath(*parts[1:])
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as fh:
                    target.write_bytes(fh.read())
                n += 1
    for extra in ("summary.json", "timeline.tsv"):
        if (src / extra).is_file():
            shutil.copy(src / extra, dest / f"gpu_study_{extra}")
    print(f"{dest}: {n} files from {len(archives)} archive(s)")
    return 0


def carry(a) -> int:
    dest = Path(a.dest)
    src = Path(a.results) / EMBEDDINGS.relative_to("results")
    if not src.is_file():
        print(f"gpu_study carry: {src} not found: run `snakemake --cores 2 {EMBEDDINGS}` first", file=sys.stderr)
        return 2
    beir = Path(a.beir) / "scifact"
    if not (beir / "queries.jsonl").is_file():
        print(f"gpu_study carry: {beir}: no BEIR SciFact there (queries.jsonl, corpus.jsonl[.gz], qrels/)",
              file=sys.stderr)
        return 2
    for old in dest.iterdir() if dest.exists() else ():  # all but the wheels (gpu_study.py wheels)
        if old.is_dir() and old.name != "wheels":
            shutil.rmtree(old)
        elif not old.is_dir():
            old.unlink()
    shutil.copytree(beir, dest / "beir" / "scifact", copy_function=shutil.copy)  # files, not links
    shutil.copy(src, dest / "embeddings.h5")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from dive_core.provenance import git_commit

    (dest / "commit.txt").write_text(git_commit(Path.cwd()) + "\n")
    return 0 if carry_fits(dest) else 2


REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "requirements.lock"
# what the study imports that the GPU node's PyTorch stack (torch, sentence-transformers, h5py,
# safetensors, numpy, scipy, pytest) does not bring: the workflow, FAISS, trec_eval, the figures
NODE_ROOTS = ("snakemake", "faiss-cpu", "pytrec-eval-terrier", "matplotlib", "jsonschema", "pyyaml", "tqdm")
NODE_LEFT_OUT = ("pulp",)  # Snakemake's ILP scheduler, 16 MB: `--scheduler greedy` instead
# what the node has, never carried even where a root needs it: the device image's packages (the
# tool library's KINDS.md, 'cuda' image, read 2026-11-17) that the roots' closure meets. numpy is the
# one the node's PyTorch was built against; a carried one could shadow it. A package missing there
# after all stops `run` before its clock starts (:data:`NODE_IMPORTS`).
NODE_HAS = ("torch", "numpy", "scipy", "h5py", "safetensors", "sentence-transformers", "transformers", "tokenizers",
            "huggingface-hub", "pytest", "pillow", "tqdm", "typing-extensions", "scikit-learn", "matplotlib",
            "contourpy", "cycler", "fonttools", "kiwisolver", "pyparsing", "python-dateutil", "packaging", "pyyaml",
            "jinja2", "markupsafe", "requests", "urllib3", "idna", "certifi", "charset-normalizer", "attrs",
            "psutil", "tabulate", "wrapt")
# what Snakemake and the study's jobs import, checked on the node before the study starts
# (snakemake.cli: the scheduler, persistence, executors and their packages; utils: validate's jsonschema)
NODE_IMPORTS = ("torch", "numpy", "h5py", "snakemake.cli", "snakemake.utils", "faiss", "pytrec_eval",
                "matplotlib.pyplot", "PIL", "yaml", "jsonschema", "tqdm")
CARRY_LIMIT_MIB = 64  # what a device call sends: the working tree and the carried folders together
# pip matches a manylinux_2_N tag only where N is named
PLATFORMS = ("manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64",
             *(f"manylinux_2_{n}_x86_64" for n in range(5, 40)), "linux_x86_64")


def tree_bytes(repo: Path = REPO) -> int:
    """The bytes of the working tree that a device call sends: tracked files and untracked ones
    that git does not ignore."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                         capture_output=True, check=True).stdout
    return sum((repo / f).stat().st_size for f in out.decode().split("\0") if f and (repo / f).is_file())


def carry_fits(carried: Path) -> bool:
    """Whether ``carried`` and the working tree fit what a device call sends; says how much either way."""
    size = sum(p.stat().st_size for p in carried.rglob("*") if p.is_file())
    tree = tree_bytes()
    fits = size + tree <= CARRY_LIMIT_MIB * 2**20
    print(f"{carried}: {size / 2**20:.1f} MiB; with the working tree {(size + tree) / 2**20:.1f} MiB"
          + ("" if fits else f", over the {CARRY_LIMIT_MIB} MiB a device call sends"),
          file=sys.stdout if fits else sys.stderr)
    return fits


def _dist(whl: Path) -> tuple[str, str]:
    """A wheel's distribution name (PEP 503-normalised) and version, from its file name."""
    from packaging.utils import parse_wheel_filename

    name, version, _, _ = parse_wheel_filename(whl.name)
    return str(name), str(version)


def read_lock(path: Path = LOCK) -> dict[str, dict]:
    """``requirements.lock`` (pip-compile's output): ``{name: {"line": the pin with its hashes,
    "via": {the packages that need it}}}``, names PEP 503-normalised (``canonicalize_name``)."""
    from packaging.utils import canonicalize_name

    pins: dict[str, dict] = {}
    name = None
    in_via = False
    for raw in path.read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", raw):
            name = canonicalize_name(m.group(1))
            pins[name] = {"line": raw.rstrip(" \\"), "version": m.group(2), "hashes": [], "via": set()}
            in_via = False
        elif name and (m := re.match(r"^\s+--hash=(sha256:[0-9a-f]{64})", raw)):
            pins[name]["hashes"].append(m.group(1))
        elif name and (m := re.match(r"^\s+# via\s*(\S*)", raw)):
            in_via = not m.group(1)
            if m.group(1):
                pins[name]["via"].add(canonicalize_name(m.group(1)))
        elif name and in_via and (m := re.match(r"^\s+#\s+(\S+)", raw)):
            pins[name]["via"].add(canonicalize_name(m.group(1)))
        else:
            in_via = False
    return pins


def node_wheels(pins: dict[str, dict], roots=NODE_ROOTS, left_out=NODE_LEFT_OUT + NODE_HAS) -> list[str]:
    """:data:`NODE_ROOTS` and every package of ``pins`` they need (the lock's ``# via`` read the
    other way), less ``left_out``; sorted."""
    needs: dict[str, set[str]] = {}
    for name, pin in pins.items():
        for parent in pin["via"]:
            needs.setdefault(parent, set()).add(name)
    from packaging.utils import canonicalize_name

    todo, found = [canonicalize_name(r) for r in roots], set()
    while todo:
        name = todo.pop()
        if name in found or name in left_out:
            continue
        if name not in pins:
            raise KeyError(f"{LOCK.name}: no pin of {name}")
        found.add(name)
        todo.extend(needs.get(name, ()))
    return sorted(found)


def fits_node(whl: Path, python_version: str, platforms=PLATFORMS) -> bool:
    """Whether CPython ``python_version`` on one of ``platforms`` installs wheel ``whl`` (its tags
    against the interpreter's, as pip reads them)."""
    from packaging.tags import compatible_tags, cpython_tags
    from packaging.utils import parse_wheel_filename

    version = tuple(int(x) for x in python_version.split(".")[:2])
    ok = {*cpython_tags(version, platforms=platforms), *compatible_tags(version, platforms=platforms)}
    return bool(parse_wheel_filename(whl.name)[3] & ok)


def wheels(a) -> int:
    """:func:`node_wheels` for the node's Python in ``a.carry``/wheels, every file checked against
    the lock's sha256: ``pip wheel`` of them all here (a package published as a source archive
    only, such as Snakemake's ``connection-pool``, becomes a pure-Python wheel), then each wheel
    the node's Python would not install replaced by the node's (``pip download`` for
    ``a.python_version``); refused when the carry and the working tree would not fit a call."""
    import tempfile

    pins = read_lock()
    names = node_wheels(pins)
    dest = Path(a.carry) / "wheels"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]

    def requirements(subset):
        fh = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
        with fh:
            for n in subset:
                fh.write(f"{n}=={pins[n]['version']} " + " ".join(f"--hash={h}" for h in pins[n]["hashes"]) + "\n")
        return fh.name

    def call(cmd) -> int:
        print("+", " ".join(cmd), flush=True)
        try:
            return subprocess.call(cmd)
        finally:
            os.unlink(cmd[-1])

    if rc := call([*pip, "wheel", "--no-deps", "--require-hashes", "-w", str(dest), "-r", requirements(names)]):
        return rc
    here = {_dist(w)[0]: w for w in dest.glob("*.whl") if not fits_node(w, a.python_version)}
    if here:
        for w in here.values():
            w.unlink()
        py = a.python_version.replace(".", "")
        if rc := call([*pip, "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
                       "--implementation", "cp", "--python-version", a.python_version,
                       "--abi", f"cp{py}", "--abi", "abi3", "--abi", "none",
                       *(x for plat in PLATFORMS for x in ("--platform", plat)), "-d", str(dest),
                       "-r", requirements(sorted(here))]):
            return rc
    got = sorted(dest.glob("*.whl"))
    missing = sorted(set(names) - {_dist(w)[0] for w in got})
    unfit = [w.name for w in got if not fits_node(w, a.python_version)]
    if missing or unfit:
        print(f"gpu_study wheels: in {dest}, no wheel of {missing}; not for Python {a.python_version}: {unfit}",
              file=sys.stderr)
        return 2
    size = sum(p.stat().st_size for p in got)
    print(f"{dest}: {len(got)} wheels ({len(here)} for Python {a.python_version} alone), {size / 2**20:.1f} MiB")
    return 0 if carry_fits(Path(a.carry)) else 2


def install_missing(wheel_dir: Path, site: Path) -> dict[str, list[str]]:
    """Install into ``site`` (``pip install --no-deps --no-index --target``) the wheels of
    ``wheel_dir`` whose distribution this Python does not have, and put ``site`` first on
    ``PYTHONPATH`` (for Snakemake and its jobs) and ``sys.path``. Returns ``installed``, ``kept``
    (the node's own distributions, with their versions) and ``conflicts``: a carried wheel's
    requirement that a kept distribution's version does not meet (reported, not refused: the node
    runs it as it is)."""
    import zipfile
    from importlib import metadata

    from packaging.requirements import Requirement

    out: dict[str, list[str]] = {"installed": [], "kept": [], "conflicts": []}
    todo = []
    for whl in sorted(wheel_dir.glob("*.whl")):
        name, version = _dist(whl)
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            todo.append(whl)
            out["installed"].append(f"{name}=={version}")
        else:
            out["kept"].append(f"{name}=={have} (carried {version})")
            continue
        with zipfile.ZipFile(whl) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            requires = [line.split(":", 1)[1].strip() for line in z.read(meta).decode("utf-8").splitlines()
                        if line.startswith("Requires-Dist:")]
        for text in requires:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                node = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                continue  # carried (installed above) or missing: the import check finds the latter
            if req.specifier and not req.specifier.contains(node, prereleases=True):
                out["conflicts"].append(f"{name} needs {req}, the node has {node}")
    if todo:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
                               "--no-deps", "--no-index", "--target", str(site), *map(str, todo)])
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    sys.path.insert(0, str(site))
    return out


def snakemake(args: list[str], log=None, timeout: float | None = None) -> int | None:
    """Snakemake's exit status; None when it ran past ``timeout`` seconds (then it and its jobs are
    stopped, SIGTERM to the process group, and what finished stays in its log)."""
    import signal

    cmd = [sys.executable, "-m", "snakemake", *args]
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT if log else None, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        return None


def run(a) -> int:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    carried = Path(a.carry).resolve()
    os.environ["BEIR_DATA_DIR"] = str(carried / "beir")
    if (carried / "commit.txt").is_file():  # the node's copy has no git history: the carry's commit
        os.environ.setdefault("DIVE_GIT_COMMIT", (carried / "commit.txt").read_text().strip())
    packages = {}
    if (carried / "wheels").is_dir():
        import tempfile

        packages = install_missing(carried / "wheels", Path(tempfile.mkdtemp(prefix="gpu_study-site-")))
        print(json.dumps({"packages": packages}, indent=1), flush=True)
    check = subprocess.run([sys.executable, "-c", f"import {', '.join(NODE_IMPORTS)}"], capture_output=True, text=True)
    if check.returncode:
        why = (check.stderr.strip().splitlines() or [f"exit status {check.returncode}"])[-1]
        print(f"gpu_study run: this Python cannot import what the study needs ({', '.join(NODE_IMPORTS)}): {why}",
              file=sys.stderr)
        return 2
    base = ["--cores", str(a.cores), "--resources", f"gpu={a.gpus}", *a.snakemake_args]
    source = "data/beir/scifact/source.json"
    with open(out / "prepare.log", "w") as log:
        if snakemake([*base, source], log):
            print(f"staging failed: {out / 'prepare.log'}", file=sys.stderr)
            return 1
        EMBEDDINGS.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(carried / "embeddings.h5", EMBEDDINGS)
        if snakemake([*base, "--touch", str(EMBEDDINGS)], log):
            print(f"--touch failed: {out / 'prepare.log'}", file=sys.stderr)
            return 1
    t0 = time.time()
    with open(out / "snakemake.log", "w") as log:
        rc = snakemake([*base, "--keep-going", "all"], log, timeout=a.timeout)
    wall = time.time() - t0
    jobs = timeline((out / "snakemake.log").read_text())
    start = min((j["start"] for j in jobs if j["start"]), default=None)
    rel = lambda t: "" if t is None or start is None else f"{(t - start).total_seconds():.0f}"  # noqa: E731
    with open(out / "timeline.tsv", "w") as fh:
        fh.write("rule\tjobid\tstart_s\tend_s\twildcards\n")
        for j in jobs:
            fh.write(f"{j['rule']}\t{j['jobid']}\t{rel(j['start'])}\t{rel(j['end'])}\t{j['wildcards']}\n")
    per_rule: dict[str, list[float]] = {}
    for j in jobs:
        if j["start"] and j["end"]:
            per_rule.setdefault(j["rule"], []).append((j["end"] - j["start"]).total_seconds())
    try:
        import torch
        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001 - a label only
        device = "unknown"
    summary = {"returncode": rc, "timed_out": rc is None, "wall_s": round(wall, 1), "jobs": len(jobs),
               "finished": sum(1 for j in jobs if j["end"]), "cores": a.cores, "gpus": a.gpus, "device": device,
               "peak_concurrent_jobs": peak_concurrency(jobs),
               "peak_concurrent_trainings": peak_concurrency(jobs, {"train"}),
               "per_rule": {r: {"jobs": len(v), "total_s": round(sum(v)), "max_s": max(v)}
                            for r, v in sorted(per_rule.items())}}
    summary["commit"] = os.environ.get("DIVE_GIT_COMMIT")
    summary["packages"] = packages
    summary["archives"] = [p.name for p in pack(Path("results"), out, a.archive_mib)]
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 1 if rc is None else rc


def main(argv=None) -> int:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=fmt)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("carry", help="here: copy SciFact and its MiniLM embeddings into --dest", formatter_class=fmt)
    c.add_argument("--results", default="results", help="the results folder whose SciFact MiniLM embeddings go")
    c.add_argument("--beir", default=os.environ.get("BEIR_DATA_DIR", "data/beir"),
                   help="a BEIR directory holding scifact/ ($BEIR_DATA_DIR where set)")
    c.add_argument("--dest", default=".gpucarry", help="the folder to carry (its wheels/ is kept)")
    w = sub.add_parser("wheels", help="here: download the wheels the node lacks into CARRY/wheels", formatter_class=fmt)
    w.add_argument("--carry", default=".gpucarry", help="the folder to carry")
    w.add_argument("--python-version", default="3.12", help="the node's Python (3.12 on the H100 and H200 machines)")
    r = sub.add_parser("run", help="there: stage, place the embeddings, run and time `all`", formatter_class=fmt)
    r.add_argument("--carry", default=".gpucarry", help="the carried folder")
    r.add_argument("--out", required=True, help="where the timeline, summary, logs and results archives go ($OUT)")
    r.add_argument("--cores", type=int, default=16, help="Snakemake's --cores")
    r.add_argument("--gpus", type=int, default=1, help="Snakemake's --resources gpu=")
    r.add_argument("--timeout", type=float, default=None, help="stop the study after this many seconds")
    r.add_argument("--archive-mib", type=float, default=12.0,
                   help="start another results archive past this size (a device call brings back 16 MiB a file)")
    r.add_argument("snakemake_args", nargs="*", help="more Snakemake arguments (after --)")
    u = sub.add_parser("unpack", help="here: the archives of a run's $OUT into a results folder", formatter_class=fmt)
    u.add_argument("files", help="the folder the run's files came back to")
    u.add_argument("--results", required=True, help="the results folder to fill (e.g. results_h100)")
    a = ap.parse_args(argv)
    return {"carry": carry, "wheels": wheels, "run": run, "unpack": unpack}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
