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


def test_bandwidth_record():
    bw = E.memory_bandwidth(megabytes=8, repeats=2)
    assert bw["bandwidth_bytes"] == 8 * 2 ** 20 and bw["bandwidth_gb_s"] > 0 and bw["bandwidth_threads"] == 1


def test_pareto_front_by_hand():
    rows = [{"bytes_per_vector": b, "ndcg@10": v} for b, v in
            ((8, 0.30), (64, 0.50), (64, 0.40), (256, 0.50), (1536, 0.60), (8, 0.30))]
    # 64/0.40 is beaten at the same size, 256/0.50 by 64/0.50; equal points both stay on the front
    assert E.pareto_front(rows) == [True, True, False, False, True, True]
