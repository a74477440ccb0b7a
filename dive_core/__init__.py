"""dive_core: all the logic of the DIVE pipeline, importable without Snakemake.

Modules
-------
atomic      crash-safe file writes (temporary file + rename)
data        BEIR download, staging and strict loaders with source fingerprints
splits      the SHA-256 rank split rule and split manifests
backbones   frozen encoders (MiniLM via sentence-transformers, LLM2Vec)
embeddings  HDF5 embedding store
triplets    shared deterministic training triplets
adapters    the residual MLP adapter and head slicing
losses      every loss term, one nn.Module each
training    the shared training loop (seeding, batching, logging)
methods     one file per compression method, behind one interface
retrieval   FAISS exact inner-product search
metrics     pytrec_eval wrapper (nDCG@10, Recall@10/100, MRR@10)
evaluation  compress -> search -> metrics -> result JSON
report      aggregation over seeds, TSV, paired significance
studies     one function per study: result JSONs -> table + figure; validation-only selection
efficiency  flat-index memory / latency / throughput against the bandwidth bound
export      a trained compressor outside the workflow (safetensors + JSON, sentence-transformers)
provenance  library versions and fingerprints recorded in every output
"""

__version__ = "0.1.0"


def __getattr__(name):  # lazy: `import dive_core` must not import torch (the Snakefile imports it)
    if name == "load_compressor":
        from .export import load_compressor

        return load_compressor
    raise AttributeError(f"module 'dive_core' has no attribute {name!r}")
