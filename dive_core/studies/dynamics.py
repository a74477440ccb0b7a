"""Training dynamics from DIVE's train logs: rho(t) and the weighted loss terms."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from .. import records
from .shared import StudyContext, StudyOutput, column_label, opening_lines, pyplot, save, suptitle


RHO_THRESHOLD = 0.10  # "rho(t) falling below 10%"
DIVE_TERMS = ("triplet", "view", "geo")  # DIVE's weighted loss terms in its train log


def first_below(values: Sequence[float], threshold: float = RHO_THRESHOLD) -> int | None:
    """1-based index of the first value below ``threshold``, or None (never)."""
    return next((i + 1 for i, v in enumerate(values) if v < threshold), None)


def loss_terms(logs: Sequence[Sequence[Mapping]]) -> dict[str, tuple[float, float, float]]:
    """Each of DIVE's weighted loss terms (``DIVE_TERMS``) that every log has: its value at the first
    and at the last epoch, each the mean over the logs (one per seed), and last / first (NaN when the
    first is 0)."""
    out = {}
    for term in DIVE_TERMS:
        if not all(term in log[0] and term in log[-1] for log in logs):
            continue
        first = sum(log[0][term] for log in logs) / len(logs)
        last = sum(log[-1][term] for log in logs) / len(logs)
        out[term] = (first, last, last / first if first else float("nan"))
    return out


def dynamics_study(results: Sequence[Mapping], ctx: StudyContext) -> StudyOutput:
    """Training dynamics from DIVE's final-stage train logs: rho(t) (share of the epoch's
    triplets whose hinge is active) and the weighted loss terms per epoch, per dataset; the table
    gives rho and each term at the first and the last epoch."""
    runs: dict[tuple[str, str], list[tuple[int, list[dict]]]] = {}
    for r in results:
        if r["method_type"] != "dive":
            continue
        runs.setdefault((r["backbone"], r["dataset"]), []).append((r["seed"], records.read_train_log(ctx.train_logs[records.run_key(r)])))
    terms = {key: loss_terms([log for _, log in seeds]) for key, seeds in runs.items()}
    lines = opening_lines(ctx, results) + [
             f"| backbone | dataset | seeds | first epoch with rho < {RHO_THRESHOLD:.0%} (per seed) | "
             "rho at the last epoch (mean) | epochs |", "|---|---|---|---|---|---|"]
    rows = []
    for (bb, ds), seeds in sorted(runs.items()):
        seeds.sort()
        firsts = [first_below([e["rho"] for e in log]) for _, log in seeds]
        last = [log[-1]["rho"] for _, log in seeds]
        shown = ", ".join("never" if f is None else str(f) for f in firsts)
        lines.append(f"| {bb} | {ds} | {','.join(str(s) for s, _ in seeds)} | {shown} | "
                     f"{sum(last) / len(last):.4f} | {len(seeds[0][1])} |")
        rows.append({"backbone": bb, "dataset": ds, "seeds": [s for s, _ in seeds],
                     "first_epoch_rho_below_10pct": ["never" if f is None else f for f in firsts],
                     "rho_last_epoch": sum(last) / len(last),
                     **{f"{term}_{col}": v for term, vals in terms[(bb, ds)].items()
                        for col, v in zip(("first_epoch", "last_epoch", "last_over_first"), vals)}})
    lines += ["", "rho(t) = share of the epoch's triplets with q·p - q·n < m on the first head "
              "(docs/methods.md#dive); the hinge stops pushing a triplet once it is satisfied."]
    lines += ["", "### DIVE's weighted loss terms at the first and the last epoch", "",
              "Each weighted term of DIVE's loss as its train log has it (the epoch's mean over batches: `triplet` the "
              "hinge term, `view` = λ · head-wise NT-Xent, `geo` = γ · geometry distillation), at the first and at "
              "the last epoch, mean over seeds; `last / first` < 1: the term shrank over training.", "",
              "| backbone | dataset | term | first epoch | last epoch | last / first |", "|---|---|---|---|---|---|"]
    for (bb, ds), by_term in sorted(terms.items()):
        lines += [f"| {bb} | {ds} | {term} | {first:.4g} | {last_:.4g} | "
                  f"{'–' if math.isnan(ratio) else f'{ratio:.4g}'} |" for term, (first, last_, ratio) in by_term.items()]

    def figure(path):
        plt = pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), dpi=120)
        colors = plt.get_cmap("tab10").colors
        styles = dict(zip(DIVE_TERMS, ("-", "--", ":")))
        for i, ((bb, ds), seeds) in enumerate(sorted(runs.items())):
            c = colors[i % len(colors)]
            label = column_label(ds, bb, len({b for b, _ in runs}) > 1)
            n = min(len(log) for _, log in seeds)
            ep = list(range(1, n + 1))
            for _, log in seeds:
                left.plot(ep, [e["rho"] for e in log[:n]], color=c, alpha=0.25, linewidth=0.8)
            left.plot(ep, [sum(log[t]["rho"] for _, log in seeds) / len(seeds) for t in range(n)], color=c,
                      linewidth=2, label=f"{label} (mean of {len(seeds)} seed{'s' if len(seeds) != 1 else ''})")
            for term in DIVE_TERMS:
                if term in seeds[0][1][0]:
                    right.plot(ep, [sum(log[t][term] for _, log in seeds) / len(seeds) for t in range(n)],
                               color=c, linestyle=styles[term], label=f"{label}: {term}")
        from matplotlib.ticker import MaxNLocator

        for ax in (left, right):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        left.axhline(RHO_THRESHOLD, color="0.4", linestyle="dashed", linewidth=1, label="10%")
        left.set_xlabel("epoch")
        left.set_ylabel("rho(t): share of active hinge triplets")
        left.set_ylim(0, 1)
        left.grid(alpha=0.3)
        left.legend(fontsize=8)
        left.set_title("rho(t)", fontsize=10)
        right.set_xlabel("epoch")
        right.set_ylabel("weighted loss term (mean over seeds)")
        right.set_yscale("log")
        right.grid(alpha=0.3)
        right.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        right.set_title("DIVE's weighted loss terms", fontsize=10)
        suptitle(fig, ctx.title)
        save(fig, path)

    return StudyOutput("\n".join(lines) + "\n", rows, figure)
