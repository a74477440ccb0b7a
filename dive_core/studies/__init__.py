"""The study layer (docs/protocol.md#studies): one module per study turns result records into a Markdown
table, summary rows (TSV) and one figure (PNG). Every study has the same shape::

    study(results: list[dict], ctx: StudyContext) -> StudyOutput

``results`` are result records (:mod:`dive_core.records`, kind ``result``) or, for the efficiency
frontier and budget studies, their own measurement records (the budget study reads the
frontier's); ``ctx`` says which methods, datasets and
backbones the study covers and carries what a study needs beyond the results: the per-query and
train-log files its rule declares, the selection record of the learning-rate audit, the arrival
manifests, the dataset groups, notes. Each figure's caption is in ``report/figure.rst``.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from .ablation import ablation_study
from .arrival import arrival_study
from .budget import budget_study
from .dynamics import dynamics_study
from .efficiency import efficiency_study
from .frontier import frontier_study
from .heads import heads_study
from .lr_audit import lr_audit_study
from .main import main_study
from .shared import StudyContext, StudyOutput
from .tuned import tuned_study

STUDIES: dict[str, Callable[[Sequence[Mapping], StudyContext], StudyOutput]] = {
    "main": main_study,
    "tuned": tuned_study,
    "ablation": ablation_study,
    "heads": heads_study,
    "dynamics": dynamics_study,
    "lr_audit": lr_audit_study,
    "efficiency": efficiency_study,
    "frontier": frontier_study,
    "arrival": arrival_study,
    "budget": budget_study,
}

__all__ = ["STUDIES", "StudyContext", "StudyOutput"]
