"""The job server: a local run's jobs that need torch start as forks of a warm process instead
of as fresh interpreters that each import torch again.

Every Snakemake job is a fresh Python process, and a training or evaluation job of a small run spends
most of its few seconds importing torch (docs/performance.md, "A job's start"). For a local run
(Snakemake's local executor, no conda, containers or environment modules), the Snakefile's
``onstart`` starts the run's server (:func:`start`), a process of the workflow's own interpreter
and checkout listening on a Unix socket whose path the environment variable :data:`ENV` gives every
job. A torch job's script calls :func:`delegate` right after its ``_dive_path`` import: the job's own
process (the *client*) hands the server its script, working directory, environment, ``sys.path``
and its standard input, output and error (the descriptors themselves), and waits; a *child* forked
from a warm process runs the script as ``python script`` would, with the client's environment and
descriptors, and the client exits with the child's status (killed by a signal: by the same signal).

The server is a *router* that imports nothing heavy. Snakemake gives each job ``OMP_NUM_THREADS``,
``MKL_NUM_THREADS`` and the like equal to its threads, and the math libraries read them when they
load, so the router keeps one *zygote* per math environment (:func:`import_time_env`), started with
the first such job's environment: it imports :data:`PRELOAD` once and forks a child per job. Jobs
that encode with sentence-transformers (embedding, export, CSR's fits) ask for zygotes that have
imported it too (:data:`SENTENCE_TRANSFORMERS`); no other job's fork has it.

Why the child's bytes are a fresh process's bytes (the smoke run's checkpoints and per-query files
are the same with and without the server, docs/performance.md):

- a zygote imports code and computes nothing: MKL's mode (set by ``import dive_core`` before torch
  loads, as in every job), its vector math's first call (:func:`dive_core.numerics.warm_vector_math`),
  PyTorch's and FAISS's thread pools, CUDA and every random generator start in the child, as in a
  fresh process, and the job sets its threads and seeds there (``runlog.setup``,
  ``training.set_seed``); its variables that the libraries read on load are the job's own;
- a job of another interpreter or checkout runs in its own process (the server refuses it);
- a child whose client dies (Snakemake cancels the job, ``kill -9`` of the run) is killed, and so is
  one whose zygote dies (``PR_SET_PDEATHSIG``); a zygote exits with the router, and the router with
  the Snakemake process that started it, or when ``onsuccess``/``onerror`` stop it (:func:`stop`).

A job's log says where it ran (``runlog``'s ``start:`` line, ``(in the job server)``), and the run's
server writes its own log beside Snakemake's (``.snakemake/log/<run>.job_server.log``: each
zygote's environment and imports, each job routed and forked). ``DIVE_JOB_SERVER=off`` in the
environment turns it off: every job then starts as a fresh process. Cluster jobs never use it.
tests/test_job_server.py checks the protocol, the routing, the refusals and the kills;
tests/test_workflow.py that the smoke run's torch jobs ran in the server and that a checkpoint
retrained in a fresh process has the weights and per-query bytes that the server's child wrote.

This module imports only the standard library (and dive_core.runlog's): clients import it before
anything heavy.
"""

from __future__ import annotations

import array
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time

#: the environment variable that carries the server's socket path to every job (``off``: no server)
ENV = "DIVE_JOB_SERVER"
#: what the server imports before it serves: what every job that delegates needs (its log's ``end:``
#: line names torch and h5py either way, tests/test_workflow.py), and nothing that computes on import
PRELOAD = ("torch", "h5py", "numpy", "dive_core.embeddings", "dive_core.methods", "dive_core.training",
           "dive_core.records", "dive_core.provenance", "dive_core.runlog", "dive_core.splits",
           "snakemake.logging", "snakemake.iocontainers", "snakemake.script")
#: what a job that encodes with sentence-transformers (embedding, export, CSR's fits) asks its zygote to
#: import too (:func:`delegate`'s ``extra``): a zygote of its own, since other jobs must not load it
SENTENCE_TRANSFORMERS = ("sentence_transformers",)
#: prefixes of the environment variables a math library or the interpreter reads when it loads (the
#: server has loaded them with its own values, so a client with other values runs its job itself)
IMPORT_TIME_ENV = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "GOTO", "BLIS_", "ONEDNN_", "DNNL_", "ATEN_",
                   "TORCH_", "PYTORCH_", "CUDA_", "CUBLAS_", "NVIDIA_", "LD_", "PYTHON", "NUMEXPR_", "HDF5_")
_MAX_REQUEST = 8 << 20


def import_time_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of ``env`` that a library or the interpreter reads when it loads."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_ENV)}


def _checkout() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _interpreter() -> str:
    return os.path.realpath(sys.executable)


def _send_line(conn: socket.socket, obj: dict) -> None:
    conn.sendall(json.dumps(obj).encode() + b"\n")


def _read_line(conn: socket.socket, first: bytes = b"") -> dict | None:
    buf = first
    while not buf.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            return None
        buf += chunk
        if len(buf) > _MAX_REQUEST:
            raise ValueError("request too long")
    return json.loads(buf)


# --- the client: a job's own process -------------------------------------------------------------


def delegate(extra: tuple[str, ...] = ()) -> None:
    """Run this job in the job server if one serves this run, and exit with its status; return (run
    the job here) where none does, or where it refuses this job (another interpreter, checkout or
    math environment). Called by a workflow script that needs torch, before its heavy imports;
    ``extra``: modules beyond :data:`PRELOAD` that its work imports and its zygote is to have
    imported (:data:`SENTENCE_TRANSFORMERS`)."""
    from . import runlog

    path = os.environ.get(ENV, "")
    if runlog.in_server() or not path.startswith("/"):  # in a job the server forked: run it here
        return
    main = sys.modules.get("__main__")
    script = getattr(main, "__real_file__", None)  # Snakemake's script file (its preamble sets __file__ to ours)
    if not script:
        return
    started = time.monotonic()
    for _ in range(2):  # the router, then the zygote of this job's environment it names
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            request = {"script": os.path.abspath(script), "argv": sys.argv, "cwd": os.getcwd(),
                       "env": dict(os.environ), "path": sys.path, "interpreter": _interpreter(),
                       "checkout": _checkout(), "started": _started(), "extra": sorted(extra)}
            data = json.dumps(request).encode() + b"\n"
            socket.send_fds(sock, [data[:1]], [0, 1, 2])  # the descriptors ride with the first byte
            sock.sendall(data[1:])
            reply = _read_line(sock)
        except (OSError, ValueError):
            sock.close()
            return  # no server (it stopped, or never bound): the job runs here
        if reply and reply.get("redirect"):
            sock.close()
            path = reply["redirect"]
            continue
        break
    if not reply or not reply.get("accepted"):
        sock.close()
        return
    done = _read_line(sock)  # the child's exit, sent when it ends; EOF: the server died
    sys.stdout.flush()
    sys.stderr.flush()
    if done is None:
        sys.stderr.write(f"dive job server: the server ended before the job (after {time.monotonic() - started:.1f} s)\n")
        os._exit(1)
    code = int(done["exit"])
    if code < 0:  # the child was killed by signal -code: so is this process, as if it had run the job
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


def _started() -> float | None:
    """When this process started (seconds since the epoch; None where /proc does not say)."""
    from .runlog import process_seconds  # the standard library only, like this module

    age = process_seconds()
    return None if age is None else time.time() - age


# --- starting and stopping (the Snakefile) --------------------------------------------------------


def _listening(path: str) -> socket.socket:
    """A Unix socket bound at ``path`` and listening: made by the process that starts a server and
    handed to it (its descriptor inherited), so that a job can connect, and wait in the backlog, the
    moment the server's process exists."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(64)
    return sock


def _spawn(path: str, log_path: str | None, zygote: bool, extra: list[str] = (), **popen) -> subprocess.Popen:
    """A server process (the router, or a zygote) listening at ``path``, a child of this process and
    ending with it."""
    listener = _listening(path)
    # this checkout's dive_core first, as _dive_path puts it for every job
    code = f"import sys; sys.path.insert(0, {_checkout()!r}); from dive_core.job_server import main; main()"
    cmd = [sys.executable, "-c", code, "--socket", path, "--fd", str(listener.fileno()), "--parent", str(os.getpid())]
    cmd += (["--log", str(log_path)] if log_path else []) + (["--zygote"] if zygote else [])
    cmd += ["--extra", ",".join(extra)] if extra else []
    try:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, pass_fds=[listener.fileno()], **popen)
    finally:
        listener.close()  # the server's copy listens


def start(log_path: str | None = None) -> subprocess.Popen | None:
    """Start the job server of this process's run (the Snakefile's ``onstart``) and put its socket
    into ``os.environ[ENV]`` for the jobs to come; None where the user turned it off (``ENV=off``)."""
    if os.environ.get(ENV, "").lower() in ("off", "0", "false", "no"):
        return None
    _sweep()
    folder = tempfile.mkdtemp(prefix=_PREFIX)  # short: a Unix socket's path is at most 107 bytes
    path = os.path.join(folder, "socket")
    proc = _spawn(path, log_path, zygote=False)
    os.environ[ENV] = path
    return proc


_PREFIX = "dive-jobs-"


def _sweep() -> None:
    """Remove the socket folders of servers that were killed with their run (``kill -9`` of its
    process group leaves them): a folder whose socket refuses a connection."""
    import glob
    import shutil

    for path in glob.glob(os.path.join(tempfile.gettempdir(), _PREFIX + "*", "socket")):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        except OSError:
            pass
        finally:
            probe.close()


def stop(proc: subprocess.Popen | None) -> None:
    """Stop a server :func:`start` started (the Snakefile's ``onsuccess`` and ``onerror``)."""
    import shutil

    path = os.environ.pop(ENV, "")
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if path.startswith("/"):
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


# --- the server --------------------------------------------------------------------------------


class Server:
    """The router (the run's one server, :func:`start`) or a zygote (one per environment the run's
    jobs have). The router imports nothing heavy: it checks a job's interpreter and checkout and sends
    it on to the zygote of the job's math environment (:func:`import_time_env`: Snakemake gives each
    job ``OMP_NUM_THREADS`` and the like = its threads, read when the libraries load), starting that
    zygote, with the job's own environment, the first time. A zygote imports :data:`PRELOAD` and forks
    one child per job. Both are single-threaded (a selector), so forking is safe; each exits when its
    parent does, killing what it started."""

    def __init__(self, path: str, parent: int | None, log_path: str | None = None, zygote: bool = False,
                 fd: int | None = None, extra: list[str] = ()):
        self.path, self.parent, self.log_path, self.zygote = path, parent, log_path, zygote
        self.extra = sorted(extra)  # a zygote's modules beyond PRELOAD
        self.log = open(log_path, "a", buffering=1, encoding="utf-8") if log_path else None  # noqa: SIM115
        # listening at path: the socket its starter made and handed over (fd), or one made here
        self.listener = socket.socket(fileno=fd) if fd is not None else _listening(path)
        self.env = import_time_env(dict(os.environ))
        self.server_pid = os.getpid()
        self.children: dict[int, tuple[socket.socket, int]] = {}  # pid -> (its client's connection, its pidfd)
        self.zygotes: dict[str, tuple[str, subprocess.Popen]] = {}  # environment -> (socket, process)
        self.stopping = False
        self.served = 0
        self.sel: selectors.BaseSelector | None = None
        self.parent_fd: int | None = None

    def note(self, text: str) -> None:
        if self.log is not None:
            role = "zygote" if self.zygote else "job server"
            self.log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {role} {os.getpid()}: {text}\n")

    def preload(self) -> None:
        import importlib
        import threading

        t0 = time.perf_counter()
        names = (*PRELOAD, *self.extra)
        for name in names:
            importlib.import_module(name)
        if threading.active_count() != 1:  # a fork copies only the forking thread
            raise RuntimeError(f"job server: importing {names} started Python threads: "
                               f"{[t.name for t in threading.enumerate()]}")
        self.note(f"imported {', '.join(names)} in {time.perf_counter() - t0:.2f} s, for the environment "
                  f"{json.dumps(self.env, sort_keys=True)}")

    def refusal(self, req: dict) -> str | None:
        """Why no child of this server may run ``req``'s job (None: one may)."""
        if req.get("interpreter") != _interpreter():
            return f"interpreter {req.get('interpreter')} is not the server's {_interpreter()}"
        if req.get("checkout") != _checkout():
            return f"checkout {req.get('checkout')} is not the server's {_checkout()}"
        theirs = import_time_env(req.get("env", {}))
        if self.zygote and theirs != self.env:
            keys = sorted(k for k in set(theirs) | set(self.env) if theirs.get(k) != self.env.get(k))
            return f"environment differs from the zygote's in {', '.join(keys)}"
        if self.zygote and sorted(req.get("extra", [])) != self.extra:
            return f"it asks for {req.get('extra')} imported, the zygote has {self.extra}"
        return None

    def serve(self) -> None:
        self.sel = sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ, ("accept", None))
        if self.parent:
            try:
                self.parent_fd = os.pidfd_open(self.parent)
            except ProcessLookupError:
                return
            sel.register(self.parent_fd, selectors.EVENT_READ, ("parent", None))
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        try:
            while not self.stopping:
                for key, _ in sel.select(timeout=1.0):
                    what, pid = key.data
                    if what == "accept":
                        self.accept()
                    elif what == "parent":
                        self.stopping = True
                    elif what == "exit":
                        self.reap(pid)
                    elif what == "client":
                        self.client_event(pid)
        finally:
            for pid in list(self.children):
                self.kill(pid)
            for _, proc in self.zygotes.values():
                proc.terminate()
                proc.wait()
            self.listener.close()
            self.note(f"stopped after {self.served} jobs")

    def accept(self) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(30)
        try:
            msg, fds, _, _ = socket.recv_fds(conn, _MAX_REQUEST, 3)
            req = _read_line(conn, msg)
        except (OSError, ValueError) as e:
            conn.close()
            self.note(f"a bad request: {e}")
            return
        if req is None or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        name = os.path.basename(req["script"])
        why = self.refusal(req)
        zygote = None if why or self.zygote else self.route(req)
        if zygote is None and not why and not self.zygote:
            why = "the zygote of its environment has died"
        if why or not self.zygote:  # refused, or the router: the job's descriptors stay with its process
            for fd in fds:
                os.close(fd)
            if why:
                self.note(f"{name}: runs in its own process: {why}")
                _send_line(conn, {"accepted": False, "why": why})
            else:  # the router hands the job to its zygote
                self.served += 1
                self.note(f"{name}: to {zygote}")
                _send_line(conn, {"accepted": False, "redirect": zygote})
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self.child(conn, req, fds)  # never returns
        for fd in fds:
            os.close(fd)
        self.served += 1
        pidfd = os.pidfd_open(pid)
        self.children[pid] = (conn, pidfd)
        self.sel.register(pidfd, selectors.EVENT_READ, ("exit", pid))
        self.sel.register(conn, selectors.EVENT_READ, ("client", pid))
        _send_line(conn, {"accepted": True, "pid": pid})
        self.note(f"{name}: child {pid}")

    def route(self, req: dict) -> str | None:
        """The socket of the zygote for ``req``'s environment, started now if there is none; None where
        it has died (its log says why; it is not started again: the jobs run in their own processes)."""
        extra = sorted(req.get("extra", []))
        key = json.dumps([import_time_env(req["env"]), extra], sort_keys=True)
        if key in self.zygotes:
            return self.zygotes[key][0] if self.zygotes[key][1].poll() is None else None
        path = f"{self.path}.{len(self.zygotes) + 1}"
        env = {k: v for k, v in req["env"].items() if k != ENV}
        proc = _spawn(path, self.log_path, zygote=True, extra=extra, env=env, cwd=req["cwd"])
        self.zygotes[key] = (path, proc)
        return path

    def client_event(self, pid: int) -> None:
        conn, _ = self.children[pid]
        try:
            data = conn.recv(1)
        except OSError:
            data = b""
        if not data:  # the client died (the job was cancelled or killed): so does the job
            self.note(f"child {pid}: its client went away; killing it")
            self.sel.unregister(conn)
            os.kill(pid, signal.SIGKILL)

    def reap(self, pid: int) -> None:
        conn, pidfd = self.children.pop(pid)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        self.sel.unregister(pidfd)
        os.close(pidfd)
        try:
            self.sel.unregister(conn)
        except KeyError:
            pass
        try:
            _send_line(conn, {"exit": code})
        except OSError:
            pass
        conn.close()

    def kill(self, pid: int) -> None:
        conn, pidfd = self.children.pop(pid)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(pidfd)
        conn.close()

    def child(self, conn: socket.socket, req: dict, fds: list[int]) -> None:
        """The forked job: the client's descriptors, directory, environment and path, then its script
        as ``python script`` runs it; exits with the script's status (never returns)."""
        code = 1
        try:
            _die_with(self.server_pid)
            for s in (signal.SIGTERM, signal.SIGCHLD):
                signal.signal(s, signal.SIG_DFL)
            self.sel.close()
            if self.parent_fd is not None:
                os.close(self.parent_fd)
            self.listener.close()
            for c, pidfd in self.children.values():
                c.close()
                os.close(pidfd)
            conn.close()
            if self.log is not None:
                self.log.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            _reopen_stdio()
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            sys.argv = list(req["argv"])
            sys.path[:] = req["path"]
            from . import runlog

            runlog.started_in_server(req.get("started"))  # delegate() in the script now returns
            code = _run_script(req["script"])
        except BaseException:  # noqa: BLE001 - the child must never return into the server's loop
            import traceback

            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)


def _run_script(script: str) -> int:
    """``script`` as ``python script`` runs it, in this process: its exit status (atexit handlers
    run, as at an interpreter's exit)."""
    import atexit
    import runpy
    import traceback

    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - what the interpreter prints for an uncaught exception
        traceback.print_exc()
        code = 1
    import threading

    threading._shutdown()  # as at an interpreter's exit: wait for the job's own non-daemon threads
    atexit._run_exitfuncs()
    return code


def _reopen_stdio() -> None:
    """sys.stdin/stdout/stderr over descriptors 0, 1 and 2 (now the client's), buffered as a fresh
    interpreter buffers them."""
    import io

    def text(fd: int, old, line: bool):
        raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        buffered = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
        return io.TextIOWrapper(buffered, encoding=old.encoding, errors=old.errors, line_buffering=line)

    sys.stdin = sys.__stdin__ = text(0, sys.__stdin__, False)
    sys.stdout = sys.__stdout__ = text(1, sys.__stdout__, os.isatty(1))
    sys.stderr = sys.__stderr__ = text(2, sys.__stderr__, True)


def _die_with(server: int) -> None:
    """Linux's PR_SET_PDEATHSIG: this process is killed when the server dies (or is gone already)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass
    if os.getppid() != server:  # it died before the call above
        os._exit(1)


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--parent", type=int, default=None, help="exit when this process does")
    ap.add_argument("--fd", type=int, default=None, help="the listening socket at --socket, inherited")
    ap.add_argument("--log", default=None)
    ap.add_argument("--zygote", action="store_true", help="import PRELOAD and fork the jobs (else: route them)")
    ap.add_argument("--extra", default="", help="a zygote's modules to import beyond PRELOAD, comma-separated")
    a = ap.parse_args(argv)
    server = Server(a.socket, a.parent, a.log, a.zygote, a.fd, [m for m in a.extra.split(",") if m])  # listening already: jobs queue during the imports
    if a.zygote:
        server.preload()
    server.serve()


if __name__ == "__main__":  # run as dive_core.job_server, not as a second copy named __main__
    from dive_core.job_server import main as _main

    _main()
