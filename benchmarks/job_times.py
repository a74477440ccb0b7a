"""Where a run's time went: every job's benchmark table (``logs/**/*.bench.tsv``, written by Snakemake
beside each job's log, dive_core.paths.bench_path) summed per rule, and a training's per method.

    python benchmarks/job_times.py [LOGS_DIR] [--wall SECONDS]

Prints a Markdown table: jobs, seconds summed (the job's wall time as Snakemake measured it), CPU
seconds (the job's own, from its log's `end:` line, dive_core.runlog: a job run by the job server is
a fork whose CPU Snakemake's benchmark does not see; else the benchmark's), the share of the summed
seconds, the longest job. ``--wall`` (the run's own wall time, e.g.
from /usr/bin/time) adds the run's wall time and how many cores the jobs kept busy on average.
A rule's name is the first folder under logs/ (rule frontier_seed and frontier_validation share
logs/frontier/: told apart by their file names, seed*.bench.tsv and validation.bench.tsv).
"""
import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's dive_core
from dive_core.runlog import cpu_of_log  # noqa: E402


def kind_of(path: Path, root: Path) -> str:
    """The rule of one benchmark file; a training's with its method (logs/train/D/B/METHOD/...)."""
    parts = path.relative_to(root).parts
    rule = parts[0]
    if rule == "frontier":
        if path.name == "validation.bench.tsv":
            return "frontier_validation"
        if path.name.startswith("seed"):
            return "frontier_seed"
    if rule == "train" and len(parts) >= 4:
        return f"train: {parts[3]}"
    return rule


def read(path: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one job: its benchmark table's last row (the last try), the CPU
    from its log's last `end:` line where it has one."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if not rows:
        raise SystemExit(f"{path}: an empty benchmark table")
    row = rows[-1]
    try:
        wall, cpu = float(row["s"]), float(row.get("cpu_time") or 0.0)
    except (KeyError, ValueError) as err:
        raise SystemExit(f"{path}: not a Snakemake benchmark table ({err})") from None
    log = path.with_name(path.name[:-len(".bench.tsv")] + ".log")
    own = cpu_of_log(log.read_text(encoding="utf-8", errors="replace")) if log.exists() else None
    return wall, cpu if own is None else own


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="?", default="logs", help="the run's logs/ folder")
    ap.add_argument("--wall", type=float, help="the run's own wall time in seconds")
    args = ap.parse_args(argv)
    root = Path(args.logs)
    files = sorted(root.rglob("*.bench.tsv"))
    if not files:
        raise SystemExit(f"{root}: no *.bench.tsv files (a run's logs/ folder?)")
    jobs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for path in files:
        jobs[kind_of(path, root)].append(read(path))
    total = sum(s for rows in jobs.values() for s, _ in rows)
    cpu = sum(c for rows in jobs.values() for _, c in rows)
    print("| rule | jobs | seconds | CPU seconds | share | longest job (s) |")
    print("|---|---|---|---|---|---|")
    for kind, rows in sorted(jobs.items(), key=lambda kv: -sum(s for s, _ in kv[1])):
        secs = sum(s for s, _ in rows)
        print(f"| {kind} | {len(rows)} | {secs:.1f} | {sum(c for _, c in rows):.1f} | "
              f"{secs / total:.1%} | {max(s for s, _ in rows):.1f} |")
    print(f"| all | {sum(map(len, jobs.values()))} | {total:.1f} | {cpu:.1f} | 100% | |")
    if args.wall:
        print(f"\nrun wall time {args.wall:.0f} s; jobs' seconds summed / wall time = "
              f"{total / args.wall:.2f} jobs running on average")
    return 0


if __name__ == "__main__":
    sys.exit(main())
