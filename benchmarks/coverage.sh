#!/usr/bin/env bash
# Line coverage of dive_core/, workflow_scripts/ and tools/ over the whole of `make test`, in every
# Python process the suite starts (pytest's workers, Snakemake, its jobs, the job server's zygotes and
# their forks, SLURM's jobs): coverage.py's `patch = subprocess, fork, _exit`. Used to compare two
# commits (docs/tests.md, "How long"); it changes nothing in the checkout but its .coverage* files.
#
#   benchmarks/coverage.sh CHECKOUT OUT_DIR [make test arguments...]
#
# CHECKOUT: a clone at the commit to measure whose .venv has coverage installed
# (`.venv/bin/pip install coverage==7.18.0`; coverage is not in requirements.lock: it measures,
# it is not needed to run or test the workflow). OUT_DIR gets the data files, report.txt (per file)
# and total.txt (the percentage of lines of the three folders run by at least one test).
# Snakemake runs a script from a copy (.snakemake/scripts/tmp*.py), so a workflow script's lines
# count only where a test runs the script file itself; that holds for any commit measured so.
# In each run at bd833fc and 15827a9 two data files, each naming nearly every measured file (110 of
# 111 at bd833fc, 114 of 115 at 15827a9), were left half-written (combine: "database disk image is
# malformed") and are not counted; which processes wrote them was not found (not the pytest
# workers: a plugin that saved their data at session end changed nothing); two runs of 15827a9
# gave the same total, 814 lines missed.
set -euo pipefail
checkout=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
py="$checkout/.venv/bin/python"
"$py" -c 'import coverage, sys, sysconfig, os; sys.exit(0 if coverage.version_info >= (7, 10) and os.path.exists(os.path.join(sysconfig.get_paths()["purelib"], "a1_coverage.pth")) else "coverage >= 7.10 with its a1_coverage.pth is needed (patch = fork, subprocess; every process)")'
rc="$out/coveragerc"
cat > "$rc" <<EOF
[run]
source =
    $checkout/dive_core
    $checkout/workflow_scripts
    $checkout/tools
parallel = true
data_file = $out/.coverage
patch =
    subprocess
    fork
    _exit
EOF
rm -f "$out"/.coverage*
cd "$checkout"
# every Python process of the venv starts coverage when COVERAGE_PROCESS_START names a configuration:
# coverage's own a1_coverage.pth (installed with it) reads the variable; without it, it does nothing
status=0
COVERAGE_PROCESS_START="$rc" make test "$@" || status=$?
"$py" -m coverage combine --rcfile "$rc" --quiet "$out" || true
"$py" -m coverage report --rcfile "$rc" --data-file "$out/.coverage" > "$out/report.txt"
tail -1 "$out/report.txt" | awk '{print $NF}' > "$out/total.txt"
echo "make test exit $status; line coverage $(cat "$out/total.txt") ($out/report.txt)"
exit $status
