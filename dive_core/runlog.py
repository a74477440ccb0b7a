"""Logging set-up for workflow jobs: everything (logging, warnings, progress bars, stray
prints) goes to the rule's log file, and the job's thread budget is applied.

Each job's log also says what its start cost: the seconds from the interpreter's start to
:func:`setup` (the script's imports), whether it ran in the job server (:mod:`dive_core.job_server`,
whose modules are imported already) and which of :data:`HEAVY` were loaded then, and, when the
process exits, which of them its work loaded and its seconds in all (lines ``start:`` and ``end:``,
read by :func:`imports_of_log`; tests/test_workflow.py checks them against what each kind of job
needs)."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
from pathlib import Path

#: the packages whose import costs a job a second or more (torch's TorchDynamo among them), or that
#: only some kinds of job need; named in each job's ``start:`` and ``end:`` lines
HEAVY = ("torch", "torch._dynamo", "sentence_transformers", "transformers", "datasets", "sklearn",
         "faiss", "pytrec_eval", "scipy", "matplotlib", "h5py", "pandas", "pyarrow")


def loaded_heavy() -> list[str]:
    """Which of :data:`HEAVY` this process has imported."""
    return [m for m in HEAVY if m in sys.modules]


#: in a child of the job server (dive_core.job_server): when the job's own process started (seconds
#: since the epoch; None: unknown)
_client_started: float | None = None
_in_server = False  # the one flag: this process is a job server's child running a job


def in_server() -> bool:
    """Whether this process is a child of the job server running a job (set by
    :func:`started_in_server`)."""
    return _in_server


def started_in_server(client_started: float | None) -> None:
    """This process is the job server's child running a job whose own process started at
    ``client_started`` (time.time(); None: unknown): :func:`process_seconds` counts from then."""
    global _client_started, _in_server
    _client_started, _in_server = client_started, True


def process_seconds() -> float | None:
    """Seconds since this process started (Linux's /proc; None elsewhere); in the job server's child,
    since the job's own process started."""
    if _in_server:
        return None if _client_started is None else max(0.0, time.time() - _client_started)
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def _seconds(s: float | None) -> str:
    return "?" if s is None else f"{s:.2f}"


def imports_of_log(text: str) -> dict[str, list[str]]:
    """The heavy modules a job's log names: ``{"start": [...], "end": [...]}`` from its ``start:`` and
    ``end:`` lines (the last of each; a log several jobs appended to names the last job)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        for key in ("start", "end"):
            tag = f" dive.job: {key}: "
            if tag in line and " imported [" in line:
                names = line.split(" imported [", 1)[1].split("]", 1)[0]
                found[key] = [n.strip() for n in names.split(",") if n.strip()]
    return found


def setup(log_path: str | os.PathLike | None, threads: int | None = None) -> logging.Logger:
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        fh = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives with the job
        sys.stdout = sys.stderr = fh
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    logging.captureWarnings(True)
    job = logging.getLogger("dive.job")
    job.info("start: %s s after the interpreter started%s, imported [%s]", _seconds(process_seconds()),
             " (in the job server)" if _in_server else "", ", ".join(loaded_heavy()))
    atexit.register(_at_exit, job)
    if threads:
        set_threads(threads)
    return logging.getLogger("dive")


def _at_exit(job: logging.Logger) -> None:
    job.info("end: %s s after the interpreter started, imported [%s]; %s", _seconds(process_seconds()),
             ", ".join(loaded_heavy()), own_usage())


def own_usage() -> str:
    """This process's peak resident memory and CPU seconds (a job the job server ran is not a
    descendant of the process Snakemake's ``benchmark:`` measures: its log says what it used)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return f"max RSS {r.ru_maxrss / 1024:.0f} MiB, CPU {r.ru_utime + r.ru_stime:.2f} s"


def cpu_of_log(text: str) -> float | None:
    """The CPU seconds a job's log gives on its last ``end:`` line (:func:`own_usage`), or None."""
    cpu = None
    for line in text.splitlines():
        if " dive.job: end: " in line and ", CPU " in line:
            cpu = float(line.rsplit(", CPU ", 1)[1].split(" s", 1)[0])
    return cpu


def set_threads(threads: int) -> None:
    """The job's thread budget for PyTorch and FAISS; MKL's vector math warmed on this thread first
    (:func:`dive_core.numerics.warm_vector_math`: the same bytes in every process).

    Neither package is imported for it: one already imported is set now, one imported later is set
    the moment its import finishes (:func:`after_import`), so a job that never needs torch (a
    table, a selection, triplets) does not pay its import for a thread count."""
    threads = int(threads)

    def torch_threads(torch) -> None:
        from . import numerics

        numerics.warm_vector_math()
        torch.set_num_threads(threads)

    after_import("torch", torch_threads)
    after_import("faiss", lambda faiss: faiss.omp_set_num_threads(threads))


class _AfterImport:
    """A ``sys.meta_path`` finder that runs ``then(module)`` once ``name``'s import has finished."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        import importlib.util

        sys.meta_path.remove(self)  # once; and the search below must not find this finder again
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run, then = spec.loader.exec_module, self.then

        def exec_module(module):
            run(module)
            then(module)

        spec.loader.exec_module = exec_module
        return spec


def after_import(name: str, then) -> None:
    """``then(module)`` for the top-level package ``name``: now if it is imported, else when its
    import finishes (once; a later call before that import replaces ``then``)."""
    if name in sys.modules:
        then(sys.modules[name])
        return
    pending = [f for f in sys.meta_path if isinstance(f, _AfterImport) and f.name == name]
    if pending:
        pending[0].then = then
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))
