"""No number typed by hand: every decimal number on the pages that report results (README.md and
docs/results.md) is one that a published table holds.

A published table is a file under ``docs/tables/`` written by ``tools/publish_tables.py`` from a
run. Nothing else counts: a number that only a prose page, a benchmark note or a commit message
holds does not belong on these pages (it goes into a table first, or stays out).

What a *decimal number* is here (:data:`DECIMAL`): digits, a decimal point and digits (``0.8014``,
``1.9`` in ``1.9x``, ``8.2`` in ``8.2%``), or digits with an exponent (``1e-4``, ``2.5e-05``), with
an optional sign (``+``, ``-``, ``−``). Not numbers, so not checked:

- integers: years, seeds, counts, ``3 seeds``, ``1,109``, ``64d`` (a count is not a measurement
  that can drift between pages; the decimals are);
- a dotted token with more than one point (versions such as ``2.13.0``, file names);
- digits glued to a letter or a hash (``python3.11``, ``k64``, ``seed2027``, ``3fc382f``);
- the version after the word Python (``CPython 3.11``), the one named exception;
- the placeholder ``TODO(run52)`` of a number still to be filled in from a table.

Two numbers are the same when their exact decimal values are equal, sign aside: ``0.80`` is
``0.8``, ``1e-4`` is the table's ``0.0001``, ``−0.0049`` (a page's minus) is the table's
``-0.0049``, but ``0.46`` is not ``0.4601``: a page copies the table's digits, it does not round
them. The sign is not compared because a page may say "0.0049 below" for a table's ``-0.0049``.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/results.md")  # the pages whose numbers must come from published tables
TABLES = REPO / "docs" / "tables"

DECIMAL = re.compile(r"""
    (?<![\w.])                                   # not glued to a word, a hash or a dotted token
    [-+\u2212]?
    (?P<number>\d+\.\d+(?:[eE][-+]?\d+)? | \d+[eE][-+]?\d+)
    (?=x\b | [^\w.] | \.(?!\d) | $)              # then an `x` (a ratio), a non-word, or a full stop
    """, re.X)
PYTHON_VERSION = re.compile(r"\bC?Python\s+$")  # what may stand right before an exempt version
PLACEHOLDER = "TODO(run52)"


def decimal_numbers(text: str) -> list[tuple[int, str, Decimal]]:
    """(line number, the number as written, its value without sign) of each decimal number."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.replace(PLACEHOLDER, "")
        for m in DECIMAL.finditer(line):
            if PYTHON_VERSION.search(line[:m.start()]):
                continue
            out.append((lineno, m.group(0), Decimal(m.group("number"))))
    return out


def published_numbers(folder: Path = TABLES) -> set[Decimal]:
    """Every decimal number of every published table (its header included)."""
    return {value for path in sorted(folder.glob("*.md"))
            for _, _, value in decimal_numbers(path.read_text(encoding="utf-8"))}


def unsupported(text: str, published: set[Decimal]) -> list[str]:
    """``line N: number`` for each decimal number of ``text`` that no published table holds."""
    return [f"line {n}: {written}" for n, written, value in decimal_numbers(text) if value not in published]


@pytest.mark.parametrize("page", PAGES)
def test_every_decimal_number_on_the_page_is_in_a_published_table(page):
    path = REPO / page
    if not path.is_file():
        pytest.skip(f"{page} does not exist")
    missing = unsupported(path.read_text(encoding="utf-8"), published_numbers())
    assert not missing, (f"{page}: numbers that no table under docs/tables/ holds (copy them from a published "
                         f"table, digits as printed, or mark them TODO(run52)):\n" + "\n".join(missing))


def test_a_planted_number_is_caught_with_its_line():
    published = published_numbers()
    page = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    planted = next(f"0.{n:04d}" for n in range(8123, 9999) if Decimal(f"0.{n:04d}") not in published)
    lines = page.splitlines()
    lines.insert(3, f"DIVE reaches {planted} nDCG@10 on SciFact.")
    before = unsupported(page, published)
    after = unsupported("\n".join(lines), published)
    assert f"line 4: {planted}" in after and len(after) == len(before) + 1


def test_what_counts_as_a_decimal_number():
    text = ("DIVE 0.8014 ± 0.0009, Δ −0.0049 (p 0.46), +0.0175; 1.9x faster, 8.2% active, lr 1e-4 and 2.5e-05.\n"
            "Not numbers: 3 seeds, 1,109 queries, 64d, seed2027, k64, commit 3fc382f, torch 2.13.0+cpu, "
            "python3.11, CPython 3.11, TODO(run52), file v1.2.3.\n"
            "End of a sentence at 0.5.")
    found = [(n, written) for n, written, _ in decimal_numbers(text)]
    assert found == [(1, "0.8014"), (1, "0.0009"), (1, "\u22120.0049"), (1, "0.46"), (1, "+0.0175"), (1, "1.9"),
                     (1, "8.2"), (1, "1e-4"), (1, "2.5e-05"), (3, "0.5")]


def test_numbers_match_by_exact_value_sign_aside_and_are_never_rounded():
    published = {Decimal("0.4601"), Decimal("0.0001"), Decimal("-0.0049").copy_abs(), Decimal("0.80")}
    assert unsupported("p 0.4601, lr 1e-4, −0.0049 and 0.0049 below, 0.8 and 0.80", published) == []
    assert unsupported("p 0.46 and 0.460", published) == ["line 1: 0.46", "line 1: 0.460"]


# --------------------------------------------------------------------------- links of the same pages
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
PAGES_WITH_LINKS = (*PAGES, "docs/changes.md")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens,
    repeats numbered (-1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        text = line.lstrip("#").strip().lower()
        slug = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN").replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path, tables: Path = TABLES) -> list[str]:
    """Each relative link of ``page`` whose file or heading does not exist. The one exception: a
    link into ``tables`` (docs/tables/) in a paragraph (or table row) holding the placeholder
    TODO(run52) may name a table that the run has not produced yet."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    out = []
    for block in re.split(r"\n\s*\n", text):
        for m in LINK.finditer(block):
            target = m.group("target")
            if re.match(r"[a-z]+:", target):  # https:, mailto:: not checked here
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                pending = PLACEHOLDER in block and dest.parent == tables.resolve()
                if not pending:
                    out.append(f"{target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
                shown = dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest
                out.append(f"{target}: no heading with that anchor in {shown}")
    return out


@pytest.mark.parametrize("page", PAGES_WITH_LINKS)
def test_every_relative_link_and_anchor_of_the_page_resolves(page):
    path = REPO / page
    if not path.is_file():
        pytest.skip(f"{page} does not exist")
    assert not broken_links(path), f"{page}:\n" + "\n".join(broken_links(path))


def test_the_link_check_catches_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## The `dive-pca` frame (3 seeds)\n## Repeat\n## Repeat\n")
    page = tmp_path / "page.md"
    page.write_text("[a](other.md#the-dive-pca-frame-3-seeds) [b](other.md#repeat-1) [c](nosuch.md) "
                    "[d](other.md#nosuch) [e](https://example.org/x.md#y)\n")
    assert broken_links(page) == ["nosuch.md: no such file",
                                  f"other.md#nosuch: no heading with that anchor in {(tmp_path / 'other.md')}"]


def test_only_a_table_link_beside_the_placeholder_may_wait_for_its_table(tmp_path):
    (tmp_path / "tables").mkdir()
    page = tmp_path / "page.md"
    page.write_text("Table [x](tables/nosuch_study.md) (TODO(run52)).\n\n"
                    "Table [y](tables/nosuch_study.md), no placeholder here.\n\n"
                    "Page [z](nosuch_page.md) (TODO(run52)).\n", encoding="utf-8")
    assert broken_links(page, tables=tmp_path / "tables") == ["tables/nosuch_study.md: no such file",
                                                               "nosuch_page.md: no such file"]
