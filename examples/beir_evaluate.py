"""Evaluate an exported model with BEIR's own dense retrieval and evaluator, on the workflow's
test queries of SciFact (the project's split, not BEIR's official test split):

    BEIR_DATA_DIR=/path/to/beir .venv/bin/python examples/beir_evaluate.py [EXPORT_DIR]

Compare the printed nDCG@10 with `metrics.ndcg@10` of the run's eval.json.
"""
import os
import sys
from pathlib import Path

from beir.retrieval.evaluation import EvaluateRetrieval
from beir.retrieval.search.dense import DenseRetrievalExactSearch

from dive_core import records
from dive_core.data import load_beir
from dive_core.export import BeirDenseModel
from dive_core.splits import eval_queries, role_qrels

run = Path("results/scifact/minilm/dive/k64/final/seed2027")
folder = sys.argv[1] if len(sys.argv) > 1 else str(run / "export")
corpus = load_beir(Path(os.environ.get("BEIR_DATA_DIR", "data/beir")) / "scifact").corpus
manifest = records.read("splits", "results/scifact/splits.json")
qids = eval_queries(manifest, "final")  # the workflow's test queries
queries = {q: text for q, text in load_beir(Path(os.environ.get("BEIR_DATA_DIR", "data/beir"))
                                            / "scifact").queries.items() if q in set(qids)}
qrels = role_qrels(manifest, ["test"])

retriever = EvaluateRetrieval(DenseRetrievalExactSearch(BeirDenseModel(folder), batch_size=64),
                              score_function="dot", k_values=[10, 100])
results = retriever.retrieve(corpus, queries)
ndcg, _map, recall, _p = retriever.evaluate(qrels, results, [10, 100])
print(f"BEIR: {len(queries)} queries, nDCG@10 {ndcg['NDCG@10']:.5f}, Recall@10 {recall['Recall@10']:.5f}, "
      f"Recall@100 {recall['Recall@100']:.5f} (BEIR rounds to 5 decimals)")
workflow = records.read("result", run / "eval.json")["metrics"]
print(f"workflow eval.json: nDCG@10 {workflow['ndcg@10']:.5f}, Recall@10 {workflow['recall@10']:.5f}, "
      f"Recall@100 {workflow['recall@100']:.5f}")
