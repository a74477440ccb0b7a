"""The semantic checks of an expanded config before any job starts (:func:`check`): names that
must exist elsewhere, every method's hyperparameters at each dimension it runs at, the vectors
backbones, the selection."""

from __future__ import annotations

from typing import Iterable, Mapping

from .. import paths
from ..config import ConfigError
from ..methods.specs import spec
from .experiments import defined_backbone, enabled_experiments, experiment
from .grammar import SELECTION_STUDIES
from .methods import method_hparams, method_k, method_type
from .selection import selection_reference, selection_settings, selection_study


# --------------------------------------------------------------------------- checks
VECTORS = "vectors"  # the backbone family that reads embeddings from files (dive_core.vectors)
VECTOR_KEYS = ("corpus", "queries", "id_column", "vector_column", "sha256")


def check_vectors_backbone(name: str, bb: Mapping, datasets: Iterable[str]) -> None:
    """A ``family: vectors`` backbone: files, not a model; one ingest job per dataset; a path shared
    by several datasets must hold ``{dataset}``, and a pinned sha256 is per file."""
    other = [k for k in ("model", "base_model", "source", "shards", "peft_model") if k in bb]
    if other:
        raise ConfigError(f"config: backbones.{name}: {other} do not apply to a backbone of family {VECTORS!r} "
                          "(its vectors come from the files corpus: and queries:, ingested in one job)")
    from ..vectors import VectorFileError, vector_format

    datasets = list(datasets)
    for role in ("corpus", "queries"):
        path = str(bb[role])
        if "{" in path.replace("{dataset}", ""):
            raise ConfigError(f"config: backbones.{name}.{role} = {path!r}: the only placeholder is {{dataset}}")
        if len(datasets) > 1 and "{dataset}" not in path:
            raise ConfigError(f"config: backbones.{name}.{role} = {path!r} names one file for the datasets "
                              f"{datasets}; put {{dataset}} in the path")
        try:
            vector_format(path)
        except VectorFileError as exc:
            raise ConfigError(f"config: backbones.{name}.{role}: {exc}") from None
        pin = (bb.get("sha256") or {}).get(role)
        if isinstance(pin, str) and "{dataset}" in path and len(datasets) > 1:
            raise ConfigError(f"config: backbones.{name}.sha256.{role} is one sha256 for a file per dataset; give "
                              "a mapping dataset -> sha256")


def check_method(config: Mapping, mname: str, d: int, k: int, where: str) -> None:
    """Check a method as its jobs will build it (d, k, resolved hyperparameters): every value's
    type and range (a value given on the command line as a string, such as heads: '7', is
    refused, not multiplied), DIVE's k*H <= d. Errors name the key."""
    hp = method_hparams(config, mname)
    try:
        spec(method_type(config, mname)).validate(d, k, hp)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"config: methods.{mname} ({where}, d = {d}, k = {k}): {exc}") from None


def check(config: Mapping, registry: Mapping[str, dict]) -> None:
    """Raise :class:`ConfigError` naming the offending key: names that must exist elsewhere,
    every method's hyperparameters and values at each dimension it runs at, the selection."""
    for i, ds in enumerate(config["datasets"]):
        if ds not in registry:
            raise ConfigError(f"config: datasets[{i}] = {ds!r} is not in the dataset registry "
                              f"({config.get('dataset_registry')}); known: {sorted(registry)}")
    defined_backbone(config, config["backbone"], "backbone")
    fr = config["split"]["fractions"]
    if abs(sum(fr) - 1.0) > 1e-9:
        raise ConfigError(f"config: split.fractions {fr} must sum to 1")
    for bname, bb in config["backbones"].items():
        for which, k in bb["dims"].items():
            if k > bb["dim"]:
                raise ConfigError(f"config: backbones.{bname}.dims.{which} = {k} exceeds dim {bb['dim']}")
        if bb["family"] == VECTORS:  # every dataset a run may use
            used = list(config["datasets"]) + list(selection_settings(config)["datasets"]) + [
                ds for exp in (config.get("experiments") or {}).values() for ds in (exp or {}).get("datasets") or []]
            check_vectors_backbone(bname, bb, dict.fromkeys(used))
        elif any(k in bb for k in VECTOR_KEYS):
            raise ConfigError(f"config: backbones.{bname}: {sorted(k for k in VECTOR_KEYS if k in bb)} belong to a "
                              f"backbone of family {VECTORS!r}, not {bb['family']!r}")
        if "source" in bb and bb.get("model") != paths.model_dir(bname):
            raise ConfigError(f"config: backbones.{bname}.model = {bb.get('model')!r}: a backbone with source: is "
                              f"fetched by rule fetch_model into {paths.model_dir(bname)!r}; "
                              "set model: to that folder")
    for ename, exp in (config.get("experiments") or {}).items():
        for i, m in enumerate(exp.get("methods", [])):
            if m not in config["methods"]:
                raise ConfigError(f"config: experiments.{ename}.methods[{i}] = {m!r} is not defined under methods")
        for m in exp.get("method_seeds") or {}:
            if m in config["methods"] and exp.get("study") == "frontier":
                continue  # a config that narrows the frontier's methods keeps the default repeats (left out)
            if m not in exp.get("methods", []):
                raise ConfigError(f"config: experiments.{ename}.method_seeds.{m}: {m!r} is not one of the "
                                  f"experiment's methods {exp.get('methods', [])}")
        if exp.get("study") == "frontier" and exp.get("method_seeds"):
            first = experiment(config, ename)["seeds"][0]
            for m, seeds in exp["method_seeds"].items():
                if m not in exp.get("methods", []):
                    continue  # left out of this study: ignored
                if method_type(config, m) == "frozen":
                    raise ConfigError(f"config: experiments.{ename}.method_seeds.{m}: {m!r} has no map to retrain, "
                                      "its codes are the same at every seed")
                if first not in seeds:
                    raise ConfigError(f"config: experiments.{ename}.method_seeds.{m} = {seeds}: the frontier picks its "
                                      f"codes at seed {first} (the first of seeds), where every method runs; list it "
                                      "there too, beside the seeds that repeat the picked codes")
        if exp.get("codes") and exp.get("study", "main") != "arrival":
            raise ConfigError(f"config: experiments.{ename}.codes: only an arrival study fits the index quantizers "
                              f"on the known documents (this one is study {exp.get('study', 'main')!r})")
        for i, m in enumerate(exp.get("codes") or []):
            if m not in config["methods"]:
                raise ConfigError(f"config: experiments.{ename}.codes[{i}] = {m!r} is not defined under methods")
            if m not in exp.get("methods", []):
                continue  # not in this study (a config that narrows `methods` keeps the default `codes`)
            first = (exp.get("seeds") or [None])[0]
            if first not in ((exp.get("method_seeds") or {}).get(m) or exp.get("seeds") or []):
                raise ConfigError(f"config: experiments.{ename}.codes[{i}] = {m!r}: the codes are of seed {first} "
                                  f"(the experiment's first), which {m!r} does not run")
            if method_type(config, m) == "csr":
                raise ConfigError(f"config: experiments.{ename}.codes[{i}] = {m!r}: k-sparse codes are stored as "
                                  "they are, not through the index quantizers")
        if exp.get("versus") and exp.get("study", "main") not in ("main", "tuned"):
            raise ConfigError(f"config: experiments.{ename}.versus: only a main or tuned study draws its paired "
                              f"tests (this one is study {exp.get('study')!r})")
        for i, m in enumerate(exp.get("versus") or []):
            if m not in exp.get("methods", []):
                raise ConfigError(f"config: experiments.{ename}.versus[{i}] = {m!r} is not one of the "
                                  f"experiment's methods {exp.get('methods', [])}")
        for i, ds in enumerate(exp.get("datasets", []) or []):
            if ds not in registry:
                raise ConfigError(f"config: experiments.{ename}.datasets[{i}] = {ds!r} is not in the dataset registry")
    for mname in config["methods"]:
        try:
            method_hparams(config, mname)
        except (KeyError, ValueError) as exc:
            raise ConfigError(str(exc).strip("'\"")) from None
        selection_study(config, mname)
    for study in SELECTION_STUDIES:
        selection_reference(config, study)
    for ename in enabled_experiments(config):
        exp = experiment(config, ename)
        if exp["study"] == "efficiency":  # times config `efficiency.method` (and `sparse_method`) against frozen
            sparse = config["efficiency"].get("sparse_method")
            if sparse and sparse not in config["methods"]:
                raise ConfigError(f"config: efficiency.sparse_method = {sparse!r} is not defined under methods")
            if sparse and spec(method_type(config, sparse)).active is None:
                raise ConfigError(f"config: efficiency.sparse_method = {sparse!r} is of type "
                                  f"{method_type(config, sparse)!r}, whose vectors are dense (a k-sparse type: csr)")
            continue
        if exp["study"] == "budget":  # the frontier's codes (or an arrival study's): its methods, its runs
            (check_arrival_budget if exp["arrival"] else check_budget)(config, ename, exp)
            continue
        if not exp["methods"]:
            raise ConfigError(f"config: experiments.{ename} has no methods")
        for bname in exp["backbones"]:  # each defined (experiment_backbones)
            d = int(config["backbones"][bname]["dim"])
            for mname in exp["methods"]:
                check_method(config, mname, d, method_k(config, bname, mname, exp["dim"]),
                             f"experiments.{ename}, backbone {bname} at its {exp['dim']} dimension")
    from ..compress import check_config as check_compress

    check_compress(config)
    for base, values in (selection_settings(config).get("lr_audit") or {}).items():
        if len(values) != 3:
            raise ConfigError(f"config: selection.lr_audit.{base} has {len(values)} candidates; the audit "
                              f"gives every method exactly three (docs/protocol.md#validation-only-selection)")


def smallest_code(config: Mapping, backbone: str) -> tuple[int, str]:
    """``(bytes, code)``: the fewest bytes a vector that any code of the frontier (``experiments.frontier``)
    needs with nothing outside the index, on ``backbone``: 1-bit codes, the index quantizers of
    ``quantizers:`` at the dimensions they apply to, k-sparse codes."""
    from ..methods.specs import spec
    from ..quantizers import grid, parse
    from ..retrieval import bytes_per_vector
    from ..sparse import code_bytes
    from .experiments import frontier_quantized, frontier_runs
    from .methods import method_hparams

    found = []
    quantized = frontier_quantized(config, backbone)
    for m, k in frontier_runs(config, backbone):
        active = spec(method_type(config, m)).active
        if active is not None:
            n = active(method_hparams(config, m))
            found.append((code_bytes(n, k), f"{m} {n} of {k} sparse"))
            continue
        found.append((bytes_per_vector("binary", k), f"{m} {k}d binary"))
        if (m, k) in quantized:
            for q in grid(k, config["quantizers"]):
                if parse(q).kind in ("pq", "opq"):
                    found.append((parse(q).m * parse(q).bits // 8, f"{m} {k}d {q}"))
    return min(found)


def check_budget_list(key: str, budgets, least: int, code: str, where: str) -> None:
    """A budget study's ``budgets``: a non-empty list, none below ``least`` bytes (``code``, the smallest
    code ``where``)."""
    if not budgets:
        raise ConfigError(f"config: {key}.budgets is empty: give the bytes per vector to pick a code for, "
                          "e.g. [8, 16, 32, 64, 256]")
    for i, b in enumerate(budgets):
        if int(b) < least:
            raise ConfigError(f"config: {key}.budgets[{i}] = {b}: below the smallest code {where}, {least} bytes "
                              f"a vector ({code})")


def check_arrival_budget(config: Mapping, ename: str, exp: Mapping) -> None:
    """A budget study over an arrival study's codes (``arrival: <name>``): that study enabled, of study
    arrival, with ``codes`` holding a frozen method (the uncompressed reference); its ``stratum`` one of
    all and the strata; its budgets; no ``index`` (its picks are not written out); its datasets, backbones
    and one seed, the arrival study's first."""
    from ..quantizers import arrival_grid, parse
    from ..retrieval import bytes_per_vector
    from ..splits import PICK_STRATA
    from .experiments import arrival_code_runs, enabled_experiments

    key, src = f"experiments.{ename}", exp["arrival"]
    if src not in (config.get("experiments") or {}):
        raise ConfigError(f"config: {key}.arrival = {src!r}: no such experiment")
    arr = experiment(config, src)
    if arr["study"] != "arrival" or src not in enabled_experiments(config):
        raise ConfigError(f"config: {key}.arrival = {src!r}: not an enabled arrival study (study "
                          f"{arr['study']!r}, enabled {arr['enabled']})")
    runs = {bb: arrival_code_runs(config, src, bb) for bb in exp["backbones"]}
    if not any(method_type(config, m) == "frozen" for rs in runs.values() for m, _ in rs):
        raise ConfigError(f"config: {key}.arrival = {src!r}: experiments.{src}.codes holds no method of type "
                          "frozen (among its methods), the uncompressed reference every pick is tested against")
    if exp["stratum"] not in PICK_STRATA:
        raise ConfigError(f"config: {key}.stratum = {exp['stratum']!r}: one of {list(PICK_STRATA)} (the "
                          "validation queries the pick weighs)")
    if exp.get("max_latency_ms") is not None:
        raise ConfigError(f"config: {key}.max_latency_ms: a latency limit applies to a budget study over the "
                          "frontier's codes (rule frontier_validation times them), not to an arrival study's")
    if exp.get("index"):
        raise ConfigError(f"config: {key}.index: an arrival budget study writes no index (its codebooks see only "
                          "the known documents); write one from a frontier budget study's index, or with "
                          "dive-compress --index")
    for bb in exp["backbones"]:
        if bb not in arr["backbones"]:
            raise ConfigError(f"config: {key}.backbones: {bb!r} is not among experiments.{src}'s backbones "
                              f"{arr['backbones']}")
        found = [(parse(q).m * parse(q).bits // 8, f"{m} {k}d {q}") for m, k in runs[bb]
                 for q in arrival_grid(k, config["quantizers"]) if parse(q).kind in ("pq", "opq")]
        found += [(bytes_per_vector("float32", k), f"{m} {k}d float32") for m, k in runs[bb]]
        check_budget_list(key, exp["budgets"], *min(found), f"experiments.{src} makes on backbone {bb}")
    for ds in exp["datasets"]:
        if ds not in arr["datasets"]:
            raise ConfigError(f"config: {key}.datasets: {ds!r} is not among experiments.{src}'s datasets "
                              f"{arr['datasets']}")
    if list(exp["seeds"]) != arr["seeds"][:1]:
        raise ConfigError(f"config: {key}.seeds = {exp['seeds']}: an arrival budget study scores its codes at "
                          f"experiments.{src}'s first seed only, [{arr['seeds'][0]}]")


def check_budget(config: Mapping, ename: str, exp: Mapping) -> None:
    """A budget study: its budgets (a non-empty list, none below the smallest code the frontier makes on
    any of its backbones) and its frontier (enabled, frozen among its methods: the uncompressed
    reference), each refusal naming its key; its seeds must start with the frontier's."""
    from .experiments import enabled_experiments

    key = f"experiments.{ename}"
    if "frontier" not in enabled_experiments(config):
        raise ConfigError(f"config: {key}: a budget study picks among the frontier's codes, and "
                          f"experiments.frontier is not enabled (enable it, or set {key}.enabled: false)")
    front = experiment(config, "frontier")
    if not any(method_type(config, m) == "frozen" for m in front["methods"]):
        raise ConfigError(f"config: {key}: experiments.frontier.methods holds no method of type frozen, the "
                          "uncompressed reference every pick is tested against")
    budgets = exp.get("budgets")
    check_budget_list(key, budgets, 0, "", "")
    for bb in exp["backbones"]:
        if bb not in front["backbones"]:
            raise ConfigError(f"config: {key}.backbones: {bb!r} is not among the frontier's backbones "
                              f"{front['backbones']}")
        check_budget_list(key, budgets, *smallest_code(config, bb), f"the frontier makes on backbone {bb}")
    for i, b in enumerate(exp.get("index") or []):
        if b not in budgets:
            raise ConfigError(f"config: {key}.index[{i}] = {b}: not one of {key}.budgets {list(budgets)}")
    for ds in exp["datasets"]:
        if ds not in front["datasets"]:
            raise ConfigError(f"config: {key}.datasets: {ds!r} is not among the frontier's datasets "
                              f"{front['datasets']}")
    if exp["seeds"][:1] != front["seeds"][:1]:
        raise ConfigError(f"config: {key}.seeds = {exp['seeds']}: the first must be the frontier's "
                          f"({front['seeds'][0]}), where every code is scored; the others rerun the picked maps")
