"""dive_core: all the logic of the DIVE pipeline, importable without Snakemake.

Modules
-------
config      loading the configuration (YAML with file:line errors, key order, registry)
plan        the run plan: plan.resolve(config) -> one read-only Plan that every rule reads
paths       every artifact path template and the grammar of the path wildcards
records     every file one job writes and another reads: versioned formats, writers, readers
resources   the scheduler's memory / runtime model of each job
atomic      crash-safe file writes (temporary file + rename)
hashing     sha256 of bytes and files (imports nothing of dive_core)
data        BEIR download, staging and strict loaders with source fingerprints; the collection checker
splits      the SHA-256 rank split rule and split manifests
backbones   frozen encoders (MiniLM via sentence-transformers, LLM2Vec)
vectors     vector files (Parquet, .npy + ids, HDF5) in row chunks; the `vectors` backbone's ingest
vector_checks  what a vector file must hold (unique ids, finite non-zero rows, the dimension): one check
embeddings  HDF5 embedding store
embed_job   the embedding job of rules embed / embed_part, run in its backbone's environment
environments  software environments per backbone family (LLM2Vec's own), and running a job in one
triplets    shared deterministic training triplets
adapters    the residual MLP adapter and head slicing
losses      every loss term, one nn.Module each
training    the shared training loop (seeding, batching, logging) and its per-epoch log
methods     one file per compression method, behind one interface; specs: metadata without torch
retrieval   FAISS exact inner-product search
metrics     pytrec_eval wrapper (nDCG@10, Recall@10/100, MRR@10)
evaluation  compress -> search -> metrics
selection   picking hyperparameters on validation results
report      aggregation over seeds, TSV, paired significance
studies     one module per study: its declared inputs -> table + figure
efficiency  flat-index memory / latency / throughput against the bandwidth bound
export      a trained compressor outside the workflow (safetensors + JSON, sentence-transformers)
layers      a compressor's map as affine, ReLU and normalisation layers (what an export writes)
compress    dive-compress: a trained compressor applied to a vector file in bounded memory
provenance  library versions and fingerprints recorded in every output
generated   the generated BEIR-layout collection `generated-tiny` (make smoke, the end-to-end tests)
numerics    reproducible floating point: MKL's conditional numerical reproducibility, set on import
job_server  a local run's torch jobs started as forks of a warm process (the Snakefile's onstart)
"""

from . import numerics as _numerics

__version__ = "0.1.0"

# Before anything imports torch (MKL reads MKL_CBWR when torch loads it): every workflow script,
# dive-compress and the benchmarks import dive_core first (dive_core/numerics.py).
_numerics.configure()


def __getattr__(name):  # lazy: `import dive_core` must not import torch (the Snakefile imports it)
    if name == "load_compressor":
        from .export import load_compressor

        return load_compressor
    raise AttributeError(f"module 'dive_core' has no attribute {name!r}")
