"""Per-rule memory and runtime from the size of what a job reads (dive_core.resources.job_resources),
at the configured coefficients; the workflow-level check is in test_workflow.py."""

from __future__ import annotations

import math

import pytest

from dive_core import resources


def test_job_resources_hand_computed():
    # train reading 100 MB of text (split, triplets) and 1000 MB of matrices (embeddings):
    # 2500 + 3 * 100 + 1.5 * 1000 = 4300 MB; 60 + 240 * 1100 / 1024 = 317.8 -> 318 minutes
    assert resources.job_resources("train", 100, 1000) == {"mem_mb": 4300, "runtime": 318}
    # second attempt: 50% more of both
    assert resources.job_resources("train", 100, 1000, attempt=2) == {"mem_mb": 6450, "runtime": 477}
    # embed adds the backbone's own memory: configured, else the family default
    assert resources.job_resources("embed", 10, 0, {"family": "llm2vec", "mem_mb": 32000})["mem_mb"] == 1500 + 32000 + 80
    assert resources.job_resources("embed", 10, 0, {"family": "sentence_transformers"})["mem_mb"] == 1500 + 2000 + 80
    # evaluate reading 10 MB of text (split) and 400 MB of matrices (embeddings + checkpoint): the
    # corpus copy and what its search needs, 2.5x the matrices: 2000 + 3 * 10 + 2.5 * 400 = 3030 MB;
    # 30 + 60 * 410 / 1024 = 54.02 -> 55 minutes; a retry: 4545 MB, 81.03 -> 82 minutes
    assert resources.job_resources("evaluate", 10, 400) == {"mem_mb": 3030, "runtime": 55}
    assert resources.job_resources("evaluate", 10, 400, attempt=2) == {"mem_mb": 4545, "runtime": 82}
    # efficiency/frontier measure several indexes of one 1 GiB corpus: 2000 + 3.5 * 1024 = 5584 MB;
    # 60 + 120 * 1024 / 1024 = 180 minutes. Tables and selection: 1000 + 2 * 0.5 = 1001 MB, 10 + 0.005 -> 11
    assert resources.job_resources("measure", 0, 1024) == {"mem_mb": 5584, "runtime": 180}
    assert resources.job_resources("small", 0.5, 3) == {"mem_mb": 1001, "runtime": 11}
    with pytest.raises(ValueError, match="unknown job kind 'gpu'"):
        resources.job_resources("gpu", 1)


def test_compress_resources_hand_computed():
    # memory bounded by the chunking: 2000 + 4 * 10 MB of compressor = 2040 MB, whatever the input;
    # 15 + 10 * 1024 / 1024 = 25 minutes for 1 GiB in one job
    assert resources.compress_resources(1024, 10) == {"mem_mb": 2040, "runtime": 25}
    # 4 GiB in 4 shards: 1 GiB a job; a retry: 50% more of both (3060 MB, 37.5 -> 38 minutes)
    assert resources.compress_resources(4096, 10, 4, attempt=2) == {"mem_mb": 3060, "runtime": 38}
    # the FAISS index of a 1 GiB file: a fixed 1500 MB, even on a retry; a one-job compress's runtime
    assert resources.compress_index_resources(1024, attempt=2) == {"mem_mb": 1500, "runtime": 38}


def test_data_mb_counts_a_staged_folder_and_waits_for_missing_inputs(tmp_path):
    staged = tmp_path / "data" / "toy"
    (staged / "qrels").mkdir(parents=True)
    (staged / "corpus.jsonl").write_bytes(b"x" * 2**20)
    (staged / "qrels" / "test.tsv").write_bytes(b"x" * 2**19)
    (staged / "source.json").write_bytes(b"{}")
    emb = tmp_path / "embeddings.h5"
    emb.write_bytes(b"x" * 3 * 2**20)
    text, matrix = resources.data_mb([staged / "source.json", emb])
    assert math.isclose(text, 1.5 + 2 / 2**20) and matrix == 3.0
    assert resources.data_mb([emb, tmp_path / "not-yet.tsv"]) is None
    assert resources.data_mb([]) == (0.0, 0.0)


SINFO = """gpu01|gpu|64|512000|gpu:a100:4(S:0-1)
gpu02|gpu|64|512000|gpu:h100:8
cpu01|cpu*|32|256000|(null)
cpu02|cpu*|16|128000|(null)
"""


def test_parse_sinfo_reads_cpus_memory_gpus_and_the_default_partition():
    nodes = resources.parse_sinfo(SINFO)
    assert [(n["node"], n["partition"], n["default"], n["cpus"], n["mem_mb"], n["gpus"]) for n in nodes] == [
        ("gpu01", "gpu", False, 64, 512000, 4), ("gpu02", "gpu", False, 64, 512000, 8),
        ("cpu01", "cpu", True, 32, 256000, 0), ("cpu02", "cpu", True, 16, 128000, 0)]
    # the one-node test cluster (tools/slurm_localhost.sh): `sinfo -h -N -o '%N|%P|%c|%m|%G'`
    assert resources.parse_sinfo("vm|debug*|2|24105|(null)\n") == [
        {"node": "vm", "partition": "debug", "default": True, "cpus": 2, "mem_mb": 24105, "gpus": 0}]


def test_unschedulable_names_each_job_that_no_node_of_its_partition_fits():
    nodes = resources.parse_sinfo(SINFO)

    def job(name, cpus=2, gpus=0, mem_mb=None, partition=None):
        return {"job": name, "cpus": cpus, "gpus": gpus, "mem_mb": mem_mb, "partition": partition}

    fits = [job("a", 32), job("b", 2, mem_mb=256000), job("c", 64, 8, 512000, "gpu"), job("d", 16, mem_mb=None)]
    assert resources.unschedulable(fits, nodes) == []
    out = resources.unschedulable([job("embed", 8, 1), job("train", 33), job("big", 2, mem_mb=300000),
                                   job("g", 2, 9, partition="gpu"), job("x", partition="nope")], nodes)
    assert out == [
        "embed: asks for 1 GPU(s); the nodes of partition 'cpu' have at most 32 CPU(s), 0 GPU(s), 256000 MB memory",
        "train: asks for 33 CPU(s); the nodes of partition 'cpu' have at most 32 CPU(s), 0 GPU(s), 256000 MB memory",
        "big: asks for 300000 MB memory; the nodes of partition 'cpu' have at most 32 CPU(s), 0 GPU(s), "
        "256000 MB memory",
        "g: asks for 9 GPU(s); the nodes of partition 'gpu' have at most 64 CPU(s), 8 GPU(s), 512000 MB memory",
        "x: partition 'nope' has no nodes (sinfo lists ['cpu', 'gpu'])"]
    # each resource on its own node is not enough: one node must hold them all
    assert resources.unschedulable([job("mix", 64, 0, 600000, "gpu")], nodes)
    two = resources.parse_sinfo("n1|p*|64|1000|(null)\nn2|p*|2|900000|(null)\n")
    assert resources.unschedulable([job("both", 64, mem_mb=2000)], two) == [
        "both: asks for 64 CPU(s), 2000 MB memory together, which no single node of partition 'p' has"]


def test_a_cluster_run_names_the_jobs_no_node_fits_before_submitting():
    """The SLURM onstart check (rules/common.smk wires it): one line per rule, from the jobs'
    resources, threads and partition; local jobs are never checked."""
    from types import SimpleNamespace as NS

    def job(rule, threads=2, local=False, **res):
        return NS(is_local=local, rule=NS(name=rule), resources=res, threads=threads, output=[f"out/{rule}"])

    jobs = [job("train", 4, gpu=1, mem_mb=4000), job("train", 4, gpu=1), job("table", 64, local=True),
            job("embed", cpus_per_task=64, slurm_partition="cpu")]
    assert resources.job_requests(jobs) == [
        {"job": "rule train (out/train)", "partition": None, "cpus": 4, "gpus": 1, "mem_mb": 4000},
        {"job": "rule embed (out/embed)", "partition": "cpu", "cpus": 64, "gpus": 0, "mem_mb": None}]
    with pytest.raises(resources.ClusterFitError) as err:
        resources.check_cluster_fit(jobs, sinfo=lambda: SINFO)
    assert str(err.value).splitlines()[1:3] == [
        "  rule train (out/train): asks for 1 GPU(s); the nodes of partition 'cpu' have at most 32 CPU(s), "
        "0 GPU(s), 256000 MB memory",
        "  rule embed (out/embed): asks for 64 CPU(s); the nodes of partition 'cpu' have at most 32 CPU(s), "
        "0 GPU(s), 256000 MB memory"]
    assert "--config gpu=0" in str(err.value)
    resources.check_cluster_fit([job("train", 4, gpu=1, slurm_partition="gpu")], sinfo=lambda: SINFO)


def test_a_cluster_without_sinfo_is_named():
    def missing():
        raise FileNotFoundError("sinfo")

    with pytest.raises(resources.ClusterFitError, match="cannot list the cluster's nodes with sinfo"):
        resources.check_cluster_fit([], sinfo=missing)


def test_gpu_resources_share_one_gpu_between_trainings_only():
    # a training at trainings_per_gpu = 8: no whole GPU, one share, and gres for SLURM
    assert resources.gpu_resources(1, 8, shared=True) == {"gpu": 0, "gpu_share": 1, "gres": "gpu:1"}
    # a whole-GPU job takes every share of its GPU, so it never runs beside trainings on it
    assert resources.gpu_resources(1, 8) == {"gpu": 1, "gpu_share": 8, "gres": ""}
    assert resources.gpu_resources(2, 8, shared=True) == {"gpu": 2, "gpu_share": 16, "gres": ""}
    assert resources.gpu_resources(1, 1, shared=True) == {"gpu": 1, "gpu_share": 1, "gres": ""}  # sharing off
    assert resources.gpu_resources(0, 8, shared=True) == {"gpu": 0, "gpu_share": 0, "gres": ""}  # gpu=0: CPU
    assert resources.gpu_share_capacity(1, 8) == 8
    with pytest.raises(ValueError, match="trainings_per_gpu"):
        resources.gpu_resources(1, 0)


def test_gres_gpus_counts_gpus_in_slurm_gres_strings():
    for gres, n in [("gpu:2", 2), ("gpu:a100:2", 2), ("gpu", 1), ("gpu:a100", 1), ("shard:8", 0),
                    ("gpu:1,shard:8", 1), ("gpu:h100:4(S:0-1)", 4), ("", 0), ("(null)", 0)]:
        assert resources.gres_gpus(gres) == n, gres


def test_a_group_of_shared_trainings_asks_slurm_for_one_gpu():
    """Snakemake sums a group job's integer resources over its parallel members but passes a string
    once: eight trainings grouped into one SLURM job ask for --gres=gpu:1, eight shares, 16 CPUs."""
    from types import SimpleNamespace

    from snakemake.resources import GroupResources, Resources

    one = {"_cores": 2, "_nodes": 1, "mem_mb": 1000, "runtime": 10, **resources.gpu_resources(1, 8, shared=True)}
    group = GroupResources.basic_layered([[SimpleNamespace(resources=dict(one), is_pipe=False, pipe_group=None,
                                                           is_service=False) for _ in range(8)]],
                                         Resources(), run_local=False)
    assert (group["gres"], group["gpu"], group["gpu_share"], group["_cores"]) == ("gpu:1", 0, 8, 16)


def test_a_shared_training_on_a_cpu_partition_is_refused_by_its_gres():
    from types import SimpleNamespace

    job = SimpleNamespace(is_local=False, rule=SimpleNamespace(name="train"), threads=2, output=["m.pt"],
                          resources={"gres": "gpu:1", "gpu": 0, "mem_mb": 1000})
    [request] = resources.job_requests([job])
    assert request["gpus"] == 1
    problems = resources.unschedulable([request], resources.parse_sinfo("n1|cpu*|8|16000|(null)"))
    assert problems and "1 GPU(s)" in problems[0]
