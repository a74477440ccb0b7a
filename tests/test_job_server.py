"""The job server (dive_core/job_server.py): a job handed to it runs in a fork of a warm process with
its own descriptors, directory, environment and exit status; a job of another math environment goes
to another zygote; a job it must not run runs in its own process; a child dies with its client and
with the server. tests/test_workflow.py runs the smoke run through it and retrains in a fresh process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dive_core import job_server

REPO = Path(__file__).resolve().parent.parent

# A job as Snakemake runs it: its script file starts with a preamble that sets __real_file__, then our
# script's first lines (workflow_scripts/train.py's), then its work, here a report of where it ran.
JOB = """\
__real_file__ = __file__
import sys
sys.path.insert(0, {repo!r})
from dive_core import job_server

job_server.delegate({extra})
import os, json, sys
from dive_core import runlog
import torch

print(json.dumps({{"pid": os.getpid(), "parent": os.getppid(), "in_child": runlog.in_server(),
                  "cwd": os.getcwd(), "argv": sys.argv[1:], "marker": os.environ.get("JOB_MARKER"),
                  "threads": torch.get_num_threads(), "age": runlog.process_seconds(), "st": "sentence_transformers" in sys.modules}}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
{work}
"""


def write_job(folder: Path, work: str = "sys.exit(3)", extra: str = "", name: str = "job.py") -> Path:
    path = folder / name
    path.write_text(JOB.format(repo=str(REPO), work=work, extra=extra), encoding="utf-8")
    return path


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A job server of this test (the router), as the Snakefile's onstart starts one; its log."""
    monkeypatch.delenv(job_server.ENV, raising=False)
    log = tmp_path / "server.log"
    proc = job_server.start(str(log))
    assert proc is not None and os.environ[job_server.ENV].startswith("/")
    # listening the moment start() returns (the socket is made before the server's process runs)
    import socket

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.connect(os.environ[job_server.ENV])
    probe.close()
    yield proc, log
    job_server.stop(proc)


def run_job(script: Path, cwd: Path, threads: int = 1, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), **env)
    return subprocess.run([sys.executable, str(script), "an", "argument"], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=120)


def test_a_job_runs_in_a_fork_with_its_own_descriptors_directory_environment_and_status(server, tmp_path):
    proc, log = server
    script, cwd = write_job(tmp_path), tmp_path / "work"
    cwd.mkdir()
    out = run_job(script, cwd, JOB_MARKER="first")
    assert out.returncode == 3, out.stderr  # the script's own sys.exit(3)
    report = json.loads(out.stdout.splitlines()[0])  # its stdout is the client's pipe
    assert report["in_child"] is True
    assert report["cwd"] == str(cwd) and report["argv"] == ["an", "argument"] and report["marker"] == "first"
    assert report["threads"] == 1  # OMP_NUM_THREADS of its own environment, read when torch loaded
    assert 0 < report["age"] < 60  # counted from its own process's start, not the zygote's
    assert "to stderr" in out.stderr
    zygote = report["parent"]
    # a second job of the same environment: another fork of the same zygote
    again = json.loads(run_job(script, cwd, JOB_MARKER="second").stdout.splitlines()[0])
    assert again["parent"] == zygote and again["pid"] != report["pid"] and again["marker"] == "second"
    job_server.stop(proc)  # the fixture's stop then finds it stopped
    text = log.read_text()
    assert text.count("imported torch") == 1 and "job.py: child" in text
    # each counts the jobs it served: the router handed two to the zygote, which forked two
    assert re.search(r"job server \d+: stopped after 2 jobs", text), text
    assert re.search(r"zygote \d+: stopped after 2 jobs", text), text


def test_each_math_environment_gets_its_own_zygote(server, tmp_path):
    """OMP_NUM_THREADS and the like are read when the libraries load: a job whose values differ is
    never forked from a process that loaded them with others."""
    script = write_job(tmp_path)
    one = json.loads(run_job(script, tmp_path, threads=1).stdout.splitlines()[0])
    two = json.loads(run_job(script, tmp_path, threads=2).stdout.splitlines()[0])
    assert one["in_child"] and two["in_child"]
    assert one["parent"] != two["parent"]
    assert (one["threads"], two["threads"]) == (1, 2)


def test_a_dead_zygote_is_not_replaced_and_its_jobs_run_in_their_own_processes(server, tmp_path):
    _, log = server
    script = write_job(tmp_path, work="sys.exit(0)")
    first = json.loads(run_job(script, tmp_path).stdout.splitlines()[0])
    assert first["in_child"]
    os.kill(first["parent"], signal.SIGKILL)
    assert wait_gone(first["parent"])
    out = run_job(script, tmp_path)
    assert out.returncode == 0, out.stderr
    second = json.loads(out.stdout.splitlines()[0])
    assert second["in_child"] is False and second["parent"] != first["parent"]
    assert "the zygote of its environment has died" in log.read_text()


def test_a_job_that_encodes_gets_a_zygote_with_sentence_transformers_and_no_other_job_does(server, tmp_path):
    plain = json.loads(run_job(write_job(tmp_path), tmp_path).stdout.splitlines()[0])
    encodes = json.loads(run_job(write_job(tmp_path, extra="job_server.SENTENCE_TRANSFORMERS", name="enc.py"),
                                 tmp_path).stdout.splitlines()[0])
    assert plain["in_child"] and encodes["in_child"] and plain["parent"] != encodes["parent"]
    assert (plain["st"], encodes["st"]) == (False, True)
    again = json.loads(run_job(write_job(tmp_path), tmp_path).stdout.splitlines()[0])
    assert again["parent"] == plain["parent"] and again["st"] is False


def test_a_failing_job_exits_non_zero_with_its_traceback(server, tmp_path):
    out = run_job(write_job(tmp_path, work="raise ValueError('bad input in line 7')"), tmp_path)
    assert out.returncode == 1
    assert "ValueError: bad input in line 7" in out.stderr and "Traceback" in out.stderr


def test_a_job_killed_by_a_signal_ends_its_process_with_that_signal(server, tmp_path):
    out = run_job(write_job(tmp_path, work="import signal\nos.kill(os.getpid(), signal.SIGTERM)"), tmp_path)
    assert out.returncode == -signal.SIGTERM  # as for the job's own process killed so


def test_without_a_server_or_turned_off_the_job_runs_in_its_own_process(tmp_path, monkeypatch):
    script = write_job(tmp_path, work="sys.exit(0)")
    for value in ("off", f"{tmp_path}/no-such-socket", None):
        env = dict(os.environ)
        env.pop(job_server.ENV, None)
        if value is not None:
            env[job_server.ENV] = value
        out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout.splitlines()[0])
        assert report["in_child"] is False and report["parent"] == os.getpid()
    monkeypatch.setenv(job_server.ENV, "off")
    assert job_server.start() is None


def test_the_zygote_refuses_another_interpreter_checkout_or_math_environment(tmp_path):
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="dive-test-"))
    try:
        zygote = job_server.Server(str(folder / "s"), None, None, zygote=True)
        req = {"interpreter": job_server._interpreter(), "checkout": job_server._checkout(), "env": dict(os.environ)}
        assert zygote.refusal(req) is None
        assert "interpreter" in zygote.refusal(req | {"interpreter": "/opt/other/python"})
        assert "asks for" in zygote.refusal(req | {"extra": ["sentence_transformers"]})
        assert "checkout" in zygote.refusal(req | {"checkout": "/elsewhere"})
        other = dict(os.environ, OMP_NUM_THREADS="7")
        assert "OMP_NUM_THREADS" in zygote.refusal(req | {"env": other})
        # variables no library reads when it loads do not count
        assert zygote.refusal(req | {"env": dict(os.environ, JOB_MARKER="x")}) is None
        router = job_server.Server(str(folder / "r"), None, None, zygote=False)
        assert router.refusal(req | {"env": other}) is None  # the router sends it to another zygote
        zygote.listener.close()
        router.listener.close()
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def test_the_preloaded_modules_are_what_every_delegating_job_needs():
    """The zygote imports torch, h5py and our modules that import nothing heavier: no FAISS, no
    sentence-transformers, no TorchDynamo, and no Python thread (a fork copies only the forking
    thread). Every job's log names what it imported (tests/test_workflow.py checks them per kind)."""
    code = ("import sys, threading; sys.path.insert(0, %r)\n"
            "import importlib\nfrom dive_core import job_server, runlog\n"
            "[importlib.import_module(m) for m in job_server.PRELOAD]\n"
            "print(sorted(runlog.loaded_heavy()), threading.active_count())") % str(REPO)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[0] == "['h5py', 'torch'] 1"


def wait_gone(pid: int, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return True  # a zombie: dead, not yet reaped by its parent
        time.sleep(0.05)
    return False


SLEEPER = "open(os.environ['PID_FILE'], 'w').write(str(os.getpid()))\nimport time\ntime.sleep(120)"


def start_sleeper(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    pid_file = tmp_path / "child.pid"
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PID_FILE=str(pid_file))
    client = subprocess.Popen([sys.executable, str(write_job(tmp_path, work=SLEEPER))], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_file.exists(), client.communicate(timeout=5)
    time.sleep(0.1)
    return client, int(pid_file.read_text())


def test_a_job_whose_process_is_killed_is_killed(server, tmp_path):
    """Snakemake cancels a job, or `kill -9` ends the run: the child must not go on writing outputs."""
    client, child = start_sleeper(tmp_path)
    assert child != client.pid
    client.kill()
    client.wait()
    assert wait_gone(child), f"child {child} still runs after its client was killed"


def test_a_job_dies_with_the_server_and_its_process_fails(server, tmp_path):
    proc, _ = server
    client, child = start_sleeper(tmp_path)
    proc.send_signal(signal.SIGKILL)  # the router; its zygote dies with it, the child with the zygote
    proc.wait()
    assert client.wait(timeout=30) != 0
    assert wait_gone(child), f"child {child} still runs after the server was killed"


def test_the_server_exits_with_the_process_that_started_it(tmp_path):
    """kill -9 of Snakemake alone: its server and zygotes do not outlive it."""
    code = ("import sys, time; sys.path.insert(0, %r)\nfrom dive_core import job_server\n"
            "p = job_server.start(); print(p.pid, job_server.os.environ[job_server.ENV], flush=True)\n"
            "time.sleep(60)") % str(REPO)
    env = {k: v for k, v in os.environ.items() if k != job_server.ENV}
    starter = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    pid, folder = starter.stdout.readline().split()
    server_pid = int(pid)
    starter.kill()
    starter.wait()
    assert wait_gone(server_pid), "the job server outlived its Snakemake"
    assert Path(folder).exists()  # its socket is left behind, refusing connections: the next start removes it
    job_server.stop(job_server.start())
    assert not Path(folder).parent.exists()
