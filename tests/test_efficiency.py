"""Efficiency measurements: structure and exact byte counts (no timed assertion), the Pareto front
by hand."""

from __future__ import annotations

import numpy as np

from dive_core import efficiency as E

KEYS = {"method", "dim", "n_docs", "bytes_per_vector", "index_bytes", "latency_ms_median", "latency_ms_p99",
        "throughput_qps", "lower_bound_ms", "latency_ratio_to_bound", "read_ms_same_size",
        "memory_ratio_to_full", "latency_speedup_vs_full", "throughput_ratio_to_full"}


def test_measure_rows_have_exact_bytes_and_ratios():
    docs = E.unit_vectors(1000, 48, seed=0)
    small = docs[:, :16] / np.linalg.norm(docs[:, :16], axis=1, keepdims=True)
    q = E.unit_vectors(7, 48, seed=1)
    rows = E.measure([("frozen", 48, docs, q), ("dive", 16, small, q[:, :16])], bandwidth_gb_s=10.0,
                     n_single=5, repeats=2)
    assert KEYS <= set(rows[0]) and KEYS <= set(rows[1])
    assert rows[0]["index_bytes"] == 1000 * 48 * 4 and rows[0]["bytes_per_vector"] == 192
    assert rows[1]["index_bytes"] == 1000 * 16 * 4 and rows[1]["memory_ratio_to_full"] == 3.0
    assert rows[0]["lower_bound_ms"] == 192_000 / 10e9 * 1e3  # bytes / bandwidth
    assert rows[0]["batch_queries"] == 7 and rows[0]["n_single"] == 5 and rows[0]["repeats"] == 2
    assert rows[0]["latency_speedup_vs_full"] == 1.0
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)


def test_an_index_quantizer_is_timed_beside_the_flat_index_with_its_codes_and_faiss_memory():
    """PQ8 of 48d over 1,000 vectors: 8 bytes a vector, 8,000 bytes of codes (the DRAM bound reads
    them), FAISS's serialized index = the codes + its codebooks (256 x 48 floats = 49,152 bytes) + a
    header; the flat index's memory is its vectors; both rows hold throughput on all threads and on one."""
    from dive_core import quantizers as Q

    docs, q = E.unit_vectors(1000, 48, seed=0), E.unit_vectors(7, 48, seed=1)
    flat, pq = E.measure([("frozen", 48, docs, q), ("frozen", 48, docs, q, None, "pq8")], bandwidth_gb_s=10.0,
                         n_single=5, repeats=2, quantizer_seed=3)
    assert (flat["encoding"], pq["encoding"]) == ("float32", "pq8")
    assert pq["bytes_per_vector"] == 8 and pq["index_bytes"] == 8000 and pq["searched_bytes"] == 8000
    assert pq["lower_bound_ms"] == 8000 / 10e9 * 1e3 and pq["memory_ratio_to_full"] == 24.0
    index, _ = Q.build("pq8", docs, 3)
    assert pq["memory_bytes"] == Q.index_bytes(index)
    assert 8000 + 256 * 48 * 4 <= pq["memory_bytes"] < 8000 + 256 * 48 * 4 + 300
    assert flat["memory_bytes"] == 1000 * 48 * 4
    for row in (flat, pq):
        assert row["throughput_qps"] > 0 and row["throughput_qps_one_thread"] > 0 and row["latency_ms_median"] > 0


def test_bandwidth_record():
    bw = E.memory_bandwidth(megabytes=8, repeats=2)
    assert bw["bandwidth_bytes"] == 8 * 2 ** 20 and bw["bandwidth_gb_s"] > 0 and bw["bandwidth_threads"] == 1


def test_pareto_front_by_hand():
    rows = [{"bytes_per_vector": b, "ndcg@10": v} for b, v in
            ((8, 0.30), (64, 0.50), (64, 0.40), (256, 0.50), (1536, 0.60), (8, 0.30))]
    # 64/0.40 is beaten at the same size, 256/0.50 by 64/0.50; equal points both stay on the front
    assert E.pareto_front(rows) == [True, True, False, False, True, True]


def test_scale_benchmark_reports_every_stage_in_one_json_line(tmp_path):
    """benchmarks/scale.py on a small synthetic corpus: its last line is the JSON object the
    issue specifies (structure and exact sizes only; no timing is asserted)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "benchmarks.scale", "--docs", "2000", "--dim", "32", "--queries",
                           "100", "--threads", "1", "--workdir", str(tmp_path / "w")],
                          cwd=repo, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (out["docs"], out["dim"], out["queries"]) == (2000, 32, 100)
    assert out["matrix_mb"] == round(2000 * 32 * 4 / 2**20, 1)
    assert list(out["stages"]) == ["stage", "embed", "splits", "triplets", "train", "pca", "evaluate", "evaluate_dive"]
    for stage in out["stages"].values():
        assert stage["seconds"] > 0 and stage["peak_rss_mb"] > 0
    assert out["faiss_bare_seconds"] > 0 and out["stages"]["evaluate"]["n_queries"] == 20
    assert out["build"]["seconds"] > 0  # the synthetic data are written by a child: the parent stays small
    assert out["stages"]["splits"]["counts"] == {"train": 60, "validation": 20, "test": 20}
    assert set(out["goals"]) >= {"max_peak_over_matrix", "evaluate_search_over_bare", "evaluate_goal", "peak_goal"}
