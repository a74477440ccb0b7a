"""The run plan: what the configured studies need, decided once and tested without Snakemake.

A *run* is one (dataset, backbone, method, k, stage, seed): a trained compressor and its
evaluation. This package generates the method variants the studies add to the config (selection
candidates, head counts, document-disjoint retrainings), lists the runs of every study, the
selection study a job reads its picked hyperparameters from, the triplet set a method trains on
(the ``negatives`` wildcard, encoded and decoded only here), the titles of the study tables, and
checks the whole plan before any job starts. It imports no torch: the method metadata comes from
:mod:`dive_core.methods.specs`, so the plan is the same in every environment that drives
Snakemake.

:func:`resolve` turns a validated config into one read-only :class:`Plan`: the runs, the method
variants with their resolved hyperparameters, the backbones with the one rule for what reaches a
job (:attr:`Backbone.job_spec`), and the input functions that turn a job's wildcards into the
artifact paths of :mod:`dive_core.paths`. The rules read the plan; nothing changes the config
after validation. ``rules/common.smk`` only wires the plan into Snakemake.

The modules, one responsibility each; each imports only from those listed above it:

- :mod:`.frozen`: freeze / thaw, the read-only copies of config values and their plain copies;
- :mod:`.grammar`: the names of the studies, stages, dimensions and triplet sets, the
  ``{negatives}`` wildcard (:func:`negatives_tag`, :func:`parse_negatives`) and the grammar of
  every path wildcard (:data:`WILDCARDS`);
- :mod:`.methods`: method entries, type, k, resolved hyperparameters, the triplet set a method
  trains on, the triplet and arrival settings;
- :mod:`.experiments`: the studies with their defaults and backbones, their runs, the table titles;
- :mod:`.selection`: the selection studies' settings, candidates, references and runs;
- :mod:`.variants`: the generated method variants (:func:`expand`);
- :mod:`.checks`: the semantic checks (:func:`check`);
- :mod:`.disk`: the scan of existing result files (:func:`check_default_backbone`);
- :mod:`.resolved`: :class:`MethodVariant`, :class:`Backbone`, the :class:`Plan` (rule inputs) and
  :func:`resolve`.

Every public name is re-exported here: callers use ``from dive_core import plan; plan.<name>``.
"""

from .checks import VECTOR_KEYS, VECTORS, check, check_method, check_vectors_backbone
from .disk import check_default_backbone, foreign_backbone_outputs
from .experiments import (arrival_code_runs, budget_candidates, budget_experiments, budget_seeds, dataset_groups,
                          defined_backbone, efficiency_runs, enabled_experiments, experiment, experiment_backbones,
                          experiment_runs, experiment_title, frontier_latency_queries, frontier_quantized,
                          frontier_runs, frontier_seed_runs, frontier_seeds, headline_run, method_seeds, picked_maps)
from .frozen import freeze, thaw
from .grammar import (ARRIVAL, DIMS, DOC_DISJOINT, EXPERIMENT_TRIPLETS, NEGATIVES, NEGATIVES_WILDCARD,
                      OWN_JSON_STUDIES, SELECTION_STUDIES, STAGES, TRIPLET_VARIANTS, WILDCARDS, negatives_tag,
                      parse_negatives)
from .methods import (arrival_settings, fits_on_documents, method_entry, method_hparams, method_k, method_negatives,
                      method_type, needs_triplets, triplet_cap)
from .resolved import SCHEDULING_KEYS, Backbone, MethodVariant, Plan, resolve
from .selection import (arrival_entry, arrival_references, selection_candidates, selection_reference, selection_runs,
                        selection_settings, selection_study)
from .variants import expand, heads_variants
