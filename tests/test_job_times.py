"""benchmarks/job_times.py, where a run's time went: each job's benchmark table summed per rule (a
training's per method), its CPU taken from the job's own `end:` log line where it has one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def job(logs: Path, log: str, seconds: float, bench_cpu: float, end_cpu: float | None = None) -> None:
    path = logs / log
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_name(path.name[:-4] + ".bench.tsv").write_text(
        HEADER + f"{seconds}\t0:00:01\t1\t1\t1\t1\t0\t0\t0\t{bench_cpu}\n")
    if end_cpu is not None:
        path.write_text("x INFO dive.job: end: 1.00 s after the interpreter started, imported [torch]; "
                        f"max RSS 278 MiB, CPU 1.00 s\nx INFO dive.job: end: 9.00 s after the interpreter started, "
                        f"imported [torch]; max RSS 300 MiB, CPU {end_cpu:.2f} s\n")


def test_the_jobs_seconds_are_summed_per_rule_and_a_trainings_per_method(tmp_path):
    logs = tmp_path / "logs"
    job(logs, "train/scifact/minilm/dive/k64/select/seed2027.log", 80.0, 0.1, 150.5)  # run by the job server
    job(logs, "train/scifact/minilm/dive/k64/final/seed2027.log", 20.0, 0.1, 30.25)
    job(logs, "train/scifact/minilm/mrl/k64/final/seed2027.log", 50.0, 0.2, 90.0)
    job(logs, "frontier/scifact/minilm/validation.log", 40.0, 0.3, 70.0)
    job(logs, "frontier/scifact/minilm/seed2028.log", 5.0, 0.3, 8.0)
    job(logs, "frontier/scifact/minilm.log", 3.0, 0.3, 5.0)
    job(logs, "make_splits/scifact.log", 2.0, 1.5)  # no log: the benchmark's CPU
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "job_times.py"), str(logs), "--wall", "100"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[2:9] == ["| train: dive | 2 | 100.0 | 180.8 | 50.0% | 80.0 |",
                        "| train: mrl | 1 | 50.0 | 90.0 | 25.0% | 50.0 |",
                        "| frontier_validation | 1 | 40.0 | 70.0 | 20.0% | 40.0 |",
                        "| frontier_seed | 1 | 5.0 | 8.0 | 2.5% | 5.0 |",
                        "| frontier | 1 | 3.0 | 5.0 | 1.5% | 3.0 |",
                        "| make_splits | 1 | 2.0 | 1.5 | 1.0% | 2.0 |",
                        "| all | 7 | 200.0 | 355.2 | 100% | |"]
    assert out[-1] == "run wall time 100 s; jobs' seconds summed / wall time = 2.00 jobs running on average"


def test_a_folder_without_benchmark_tables_is_refused_by_name(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "job_times.py"), str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode != 0 and f"{tmp_path}: no *.bench.tsv files" in out.stderr
