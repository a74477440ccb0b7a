"""Every file one job writes and another reads, defined once: its format, the fields or columns a
reader may rely on, the rule that makes it, and how it is written and read. Writers and readers go
through this package only.

=====================  =============================================================  ======================
kind                   file                                                           made by rule
=====================  =============================================================  ======================
source                 ``data/beir/{dataset}/source.json``                            stage_beir
splits                 ``results/{dataset}/splits.json``                              make_splits
arrival                ``results/{dataset}/arrival.json``                             make_arrival
embeddings             ``results/{dataset}/{backbone}/embeddings.h5``: attributes,    embed
                       datasets :data:`LAYOUTS`
embedding_shard        ``results/{dataset}/{backbone}/embed_parts/{part}.h5``:        embed_part
                       attributes, datasets :data:`LAYOUTS`
triplets               ``.../triplets/{stage}-{negatives}.json`` (beside the TSV)     triplets
triplets_tsv           ``.../triplets/{stage}-{negatives}.tsv`` (:data:`TABLES`)      triplets
checkpoint             ``.../{method}/k{k}/{stage}/seed{seed}/model.pt``              train
train_log              ``.../seed{seed}/train_log.tsv`` (:data:`TABLES`)              train
result                 ``.../seed{seed}/eval.json`` (and its headline copy)           evaluate
per_query              ``.../seed{seed}/per_query.tsv`` (:data:`TABLES`)              evaluate
selection              ``results/selection/{backbone}/{study}.json``                  select
efficiency             ``results/efficiency/{dataset}/{backbone}.json``               efficiency
efficiency_synthetic   ``results/efficiency/synthetic.json``                          efficiency_synthetic
frontier               ``results/frontier/{dataset}/{backbone}.json``                 frontier
                       ``results/frontier/{dataset}/{backbone}/seed{seed}.json``      frontier_seed
arrival_codes          ``results/arrival_codes/{experiment}/{dataset}/{backbone}``    arrival_codes
                       ``.json``
                       ``.../{backbone}/validation.json``                             arrival_codes_validation
compressed             ``results/compressed/{name}.{ext}``: the metadata record of    compress
                       each vector set (:data:`COMPRESSED_META_KEY`)
compress_part          ``results/compressed/{name}.parts/{shard}/set{j}.h5.json``     compress_part
compressor             ``.../seed{seed}/export/compressor/config.json``               export
=====================  =============================================================  ======================

Four sorts of file:

* JSON records (and the attributes of the HDF5 files, and a checkpoint's dict) carry a versioned
  format tag (:data:`FORMATS`) and hold every field of :data:`FIELDS` (a list of rows, every field
  of :data:`ROW_FIELDS`). A file of another format (written by an older version of the workflow,
  or not a record at all) is refused with a :class:`RecordError` that names the file, both
  formats and what to rerun. Bump a kind's version whenever its fields change meaning or a reader
  starts to need a new field.
* TSV files (:data:`TABLES`: the columns in order, each one's type and how it is written) carry no
  tag: a TSV's kind is known from its header, and a file with another header, a row with another
  number of cells or a cell that is not of its column's type is refused naming ``file:line``.
  :func:`write_tsv` and :func:`read_tsv` are their only writer and reader.
* HDF5 files (:data:`LAYOUTS`: the datasets, their types and shapes) are checked by
  :func:`check_h5`, their datasets made by :func:`h5_dataset`; their attributes are the record of
  the same kind.
* Files made for use outside the workflow keep tags of their own, not ``dive-pipeline/<kind>/<v>``:
  the record in a compressed vector file's metadata (:data:`COMPRESSED_FORMAT`, written by
  ``dive-compress`` and rule compress alike) and an exported compressor's ``config.json``
  (:data:`COMPRESSOR_FORMAT`). A compress part's range file (:data:`COMPRESS_PART_FIELDS`), read
  only by the gather of its own entry, has no tag.

Modules, one sort of file each (:mod:`.base`: the JSON records, their errors and builders;
:mod:`.tsv`; :mod:`.h5`; :mod:`.exports`: the files for use outside the workflow). Every public
name is re-exported here, and the rest of the code imports it from here (``from dive_core import
records``; ``records.read``, ``records.write_tsv``).
"""

from .base import (CHECKPOINT_META, FIELDS, FORMATS, ROW_FIELDS, RULES, VERSIONS, RecordError, check,
                   checkpoint_meta, read, read_one_of, result, run_key, stamp, write)
from .exports import (COMPRESS_PART_FIELDS, COMPRESSED_FIELDS, COMPRESSED_FORMAT, COMPRESSED_META_KEY,
                      COMPRESSOR_DEFINING, COMPRESSOR_FIELDS, COMPRESSOR_FORMAT, check_compressor_config,
                      compressed, compressed_metadata, compressor_config, compressor_config_sha256,
                      read_compress_part, read_compressed_metadata, write_compress_part,
                      write_compressor_config)
from .h5 import LAYOUT_ATTRS, LAYOUTS, Dataset, check_h5, h5_dataset
from .tsv import TABLES, Column, Table, read_train_log, read_tsv, tsv_columns, tsv_header, tsv_rows, write_tsv

__all__ = [
    "CHECKPOINT_META",
    "FIELDS",
    "FORMATS",
    "ROW_FIELDS",
    "RULES",
    "VERSIONS",
    "RecordError",
    "check",
    "checkpoint_meta",
    "read",
    "read_one_of",
    "result",
    "run_key",
    "stamp",
    "write",
    "COMPRESS_PART_FIELDS",
    "COMPRESSED_FIELDS",
    "COMPRESSED_FORMAT",
    "COMPRESSED_META_KEY",
    "COMPRESSOR_DEFINING",
    "COMPRESSOR_FIELDS",
    "COMPRESSOR_FORMAT",
    "check_compressor_config",
    "compressed",
    "compressed_metadata",
    "compressor_config",
    "compressor_config_sha256",
    "read_compress_part",
    "read_compressed_metadata",
    "write_compress_part",
    "write_compressor_config",
    "LAYOUT_ATTRS",
    "LAYOUTS",
    "Dataset",
    "check_h5",
    "h5_dataset",
    "TABLES",
    "Column",
    "Table",
    "read_train_log",
    "read_tsv",
    "tsv_columns",
    "tsv_header",
    "tsv_rows",
    "write_tsv",
]
