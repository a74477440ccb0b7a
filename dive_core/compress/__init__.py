"""A trained compressor applied to a vector file: vectors in, vectors out, in bounded memory.

    dive-compress MODEL INPUT OUTPUT [--encoding float32|float16|int8] [--faiss PATH]
                  [--index FACTORY [--faiss-train-size ROWS] [--faiss-seed SEED]]
                  [--allow-zero-rows] [--allow-duplicate-ids]

MODEL is a trained compressor: a workflow checkpoint (``results/.../model.pt``) or an exported
folder (:mod:`dive_core.export`). INPUT holds raw backbone vectors (Parquet, ``.npy`` with its
``.ids.txt``, or HDF5: :mod:`dive_core.vectors`); each row is L2-normalised as the workflow
normalises embeddings, then compressed by ``Method.compress`` (which L2-normalises the output).
OUTPUT gets the compressed vectors in the format its extension names, rows and ids in the input's
order (Parquet: the input's id column and an ``embedding`` column). An HDF5 input in the workflow's
``embeddings.h5`` layout has groups (``corpus``, ``queries``): each is compressed into the same
group of an HDF5 output.

Encodings (``--encoding``): ``float32``; ``float16``; ``int8``: FAISS's SQ8 (``ScalarQuantizer``
``QT_8bit`` with its default per-coordinate min/max range, what the frontier study calls ``sq8``),
its ranges taken from the whole compressed input: a first streaming pass compresses every row to a
float32 spool beside the output and records each coordinate's min/max, the second encodes the
spool. The ranges are stored in the file's metadata (:func:`read_metadata`); :func:`decode` /
:func:`sq8_decode` turn the codes back into vectors, as FAISS reconstructs them. Codes are stored
as ``code - 128`` (int8).

The input must hold every id once, no NaN or Inf and no all-zero row, in the compressor's input
dimension: the one check of every reader of raw vectors (:mod:`dive_core.vector_checks`), the ids
first (:func:`check_input`), the rows as they are read; a refusal names file, row and id and
leaves nothing written. ``--allow-zero-rows`` / ``--allow-duplicate-ids`` (a ``compress:`` entry's
``allow_zero_rows`` / ``allow_duplicate_ids``) let such rows through on purpose, and the output's
record (``input.allowed``) says so.

Memory does not grow with the file: rows are read, normalised, compressed and written in chunks
(:func:`chunk_rows`); a compute batch never has fewer than :data:`MIN_BATCH` rows (a short last
chunk is padded), so every row's output is the same however the file is split into chunks or
shards. The output (and ``--faiss``'s index) is written under a temporary name and appears only
when complete.

The workflow (``rules/compress.smk``) applies a compressor to the files of the ``compress:``
config section, one job or ``shards`` row-range jobs (:func:`compress_part`) gathered by
:func:`gather` into the same bytes that ``dive-compress`` writes. This package imports torch only
where a compressor is loaded: the Snakefile reads its config helpers.

Modules
-------
errors  CompressError, what every part raises for what cannot be used as asked
model   the compressor: loaded from a checkpoint or an exported folder; its provenance
rows    compressing rows in chunks, in batches of at least MIN_BATCH rows; the written blocks
codec   SQ8 (FAISS QT_8bit): ranges, int8 codes, decoding
files   vector files in and out: input sets, the input check, writing an output, reading one back
jobs    part_range, compress_part, gather, compress_file
index   the FAISS index of a compressed file, written as a stream; a factory string's index (--index),
        trained on a seeded sample, filled chunk by chunk
config  the workflow's ``compress:`` entries (defaults, checks, outputs, job inputs)
cli     the command ``dive-compress`` (main)

Every public name is importable from ``dive_core.compress`` itself; the compress jobs' memory and
runtime are :func:`dive_core.resources.compress_resources`.
"""

from .cli import main
from .codec import sq8_decode, sq8_encode, sq8_ranges
from .config import ENTRY_DEFAULTS, check_config, entries, entry, job_inputs, output_files, part_dirs, targets
from .errors import CompressError
from .files import OutSet, check_input, decode, decode_chunks, open_sets, read_metadata, write_output
from .index import (TRAIN_SEED, TRAIN_SIZE, factory_index, faiss_index, index_options, index_record, indexed_set,
                    min_train_rows, option_names, sample_rows, training_sample, write_faiss_index)
from .jobs import SPOOL_SET, compress_file, compress_part, gather, part_range
from .model import RUN_KEYS, describe, job_model, load_model, provenance
from .rows import (COMPUTE_BYTES, MIN_BATCH, WRITE_BYTES, chunk_rows, compress_rows, compressed_chunks, rechunk,
                   write_rows)

__all__ = [
    "COMPUTE_BYTES", "ENTRY_DEFAULTS", "MIN_BATCH", "RUN_KEYS", "SPOOL_SET", "TRAIN_SEED", "TRAIN_SIZE", "WRITE_BYTES",
    "CompressError", "OutSet", "factory_index", "index_options", "index_record", "indexed_set", "min_train_rows",
    "option_names", "sample_rows", "training_sample",
    "check_config", "check_input", "chunk_rows", "compress_file", "compress_part", "compress_rows", "compressed_chunks",
    "decode", "decode_chunks", "describe", "entries", "entry", "faiss_index", "gather", "job_inputs",
    "job_model", "load_model", "main", "open_sets", "output_files", "part_dirs", "part_range", "provenance",
    "read_metadata", "rechunk", "sq8_decode", "sq8_encode", "sq8_ranges", "targets", "write_faiss_index",
    "write_output", "write_rows",
]
