"""benchmarks/gpu_study.py reads the jobs' start and end out of Snakemake's log (the timeline of
the study on a GPU node)."""
import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("gpu_study", Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_study.py")
gpu_study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_study)

LOG = """Job stats:
job        count
-------  -------
train          2
total          3

Select jobs to execute...
Execute 2 jobs...

[Fri Nov 27 17:33:57 2026]
localrule make_splits:
    output: results/scifact/splits.json
    jobid: 3
    reason: Missing output files: results/scifact/splits.json
    wildcards: dataset=scifact
    threads: 1

[Fri Nov 27 17:34:01 2026]
Finished jobid: 3 (Rule: make_splits)
1 of 3 steps (33%) done

[Fri Nov 27 17:34:02 2026]
rule train:
    input: results/scifact/splits.json
    jobid: 7
    wildcards: dataset=scifact, backbone=minilm, method=dive, k=64, stage=final, seed=2027
    threads: 2

[Fri Nov 27 17:34:02 2026]
rule train:
    jobid: 8
    wildcards: dataset=scifact, backbone=minilm, method=mrl, k=64, stage=final, seed=2027

[Tue Dec  1 17:34:40 2026]
Finished jobid: 8 (Rule: train)
"""


def test_the_timeline_has_each_jobs_rule_wildcards_start_and_end():
    jobs = {j["jobid"]: j for j in gpu_study.timeline(LOG)}
    assert sorted(jobs) == [3, 7, 8]
    assert jobs[3]["rule"] == "make_splits" and jobs[3]["wildcards"] == "dataset=scifact"
    assert (jobs[3]["end"] - jobs[3]["start"]).total_seconds() == 4
    assert jobs[7]["rule"] == "train" and "method=dive" in jobs[7]["wildcards"] and jobs[7]["end"] is None
    assert jobs[8]["end"].day == 1  # a one-digit day is padded with a space in Snakemake's stamp
    assert gpu_study.peak_concurrency([jobs[3], jobs[8]]) == 1
