"""Evaluation (dive_core.evaluation): the share of training positives among the retrieved documents,
by hand."""

from __future__ import annotations


def test_train_positive_share_by_hand():
    from dive_core.evaluation import train_positive_share, training_positives

    manifest = {"qrels": {"train": {"a": {"d1": 1, "d2": 0}, "b": {"d3": 2}},
                          "validation": {"c": {"d4": 1}}, "test": {}}}
    assert training_positives(manifest, "select") == {"d1", "d3"}  # score 0 is not a positive
    assert training_positives(manifest, "final") == {"d1", "d3", "d4"}
    run = {"q": {"d1": 0.9, "d2": 0.8, "d3": 0.7, "d4": 0.1}, "r": {"d2": 1.0}}
    # q's top 2 = d1 (positive), d2 (not): 1/2; r: none of its top 2; s: no results at all
    assert train_positive_share(run, {"d1", "d3"}, ["q", "r", "s"], depth=2) == {"q": 0.5, "r": 0.0, "s": 0.0}
    assert train_positive_share(run, {"d1", "d3"}, ["q"], depth=10)["q"] == 0.2
