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
    text = path.read_text(encoding="utf-8")
    if page == CITING_PAGE:  # the paper's own words (the first column of its claims table) are not ours
        text = "\n".join(t for lines, _ in citation_units(text) for _, t in lines)
    missing = unsupported(text, published_numbers())
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


# ------------------------------------------------------- numbers in the tables their row or section cites
# docs/results.md: a number is not only in *some* table, it is in a table that the same row (of a
# Markdown table) or the same section (the prose under one heading) links. A misplaced number (the
# frontier's 0.8208 in the heads row) is as wrong as a typed one. Integers count here too: "1 of 16",
# epochs, query counts are results. Not checked: code spans, link targets, the verdict thresholds the
# page defines (VERDICT_THRESHOLDS), and the first column of a table headed "the paper's claim" (the
# paper's words, quoted from dive_paper.tex, not ours).
CITING_PAGE = "docs/results.md"
VERDICT_THRESHOLDS = {Decimal("0.05"), Decimal("0.01")}
TABLE_LINK = re.compile(r"\]\(tables/(?P<name>[\w-]+)\.md(?:#[^)\s]*)?\)")
INTEGER = re.compile(r"(?<![\w.,@#/\u2212+-])(?P<number>\d{1,3}(?:,\d{3})+|\d+)(?![.,]\d|[^\Wx]|x\w|-[^\W\d])")
CODE_OR_TARGET = re.compile(r"`[^`\n]*`|\]\([^)\n]*\)")
PAPER_COLUMN = re.compile(r"^\|\s*the paper's claim", re.I)


def numbers_of(text: str) -> set[Decimal]:
    """Every number of ``text`` (decimals as :func:`decimal_numbers` reads them, and integers with or
    without thousands commas), by value, sign aside."""
    out = {value for _, _, value in decimal_numbers(text)}
    for line in text.splitlines():
        line = DECIMAL.sub(" ", line.replace(PLACEHOLDER, ""))
        out |= {Decimal(m.group("number").replace(",", "")) for m in INTEGER.finditer(line)}
    return out


def table_numbers(name: str, folder: Path = TABLES) -> set[Decimal]:
    path = folder / f"{name}.md"
    return numbers_of(path.read_text(encoding="utf-8")) if path.is_file() else set()


def citation_units(text: str) -> list[tuple[list[tuple[int, str]], set[str]]]:
    """([(line number, the text to check)], the tables it links) for each unit of ``text``: each
    row of a Markdown table on its own (its header and rule lines are not checked), and the prose
    of each section (the lines under one heading that are not table rows), code blocks left out.
    Code spans and link targets are blanked; in a table headed "the paper's claim" the first cell
    of each row is the paper's own words and is not checked."""
    units: list[tuple[list[tuple[int, str]], set[str]]] = []
    prose: list[tuple[int, str]] = []
    in_code, paper_table, table_line = False, False, 0

    def close_section():
        if prose:
            links = set().union(*(TABLE_LINK.findall(t) for _, t in prose))
            units.append(([(n, CODE_OR_TARGET.sub(" ", t)) for n, t in prose], links))
            prose.clear()

    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        if re.match(r"#{1,6} ", line):
            close_section()
            continue
        if line.startswith("|"):
            table_line += 1
            if table_line == 1:
                paper_table = bool(PAPER_COLUMN.match(line))
            if table_line <= 2:  # the header and its rule
                continue
            cells = line.split("|")
            checked = "|".join(cells[:1] + [""] + cells[2:]) if paper_table else line
            units.append(([(lineno, CODE_OR_TARGET.sub(" ", checked))], set(TABLE_LINK.findall(line))))
            continue
        table_line = 0
        if line.strip():
            prose.append((lineno, line))
    close_section()
    return units


def miscited(text: str, folder: Path = TABLES) -> list[str]:
    """``line N: number (not in: a, b)`` for each number of a unit that none of the tables the unit
    links holds (``no table linked`` when it links none), in the order of the page's lines."""
    out = []
    cache: dict[str, set[Decimal]] = {}
    for lines, tables in citation_units(text):
        held = set().union(*(cache.setdefault(t, table_numbers(t, folder)) for t in tables))
        where = f"not in: {', '.join(sorted(tables))}" if tables else "no table linked"
        for lineno, line in lines:
            out += [(lineno, f"line {lineno}: {number} ({where})")
                    for number in sorted(numbers_of(line) - held - VERDICT_THRESHOLDS)]
    return [message for _, message in sorted(out, key=lambda x: x[0])]


def test_every_number_of_results_md_is_in_a_table_its_row_or_section_links():
    missing = miscited((REPO / CITING_PAGE).read_text(encoding="utf-8"))
    assert not missing, (f"{CITING_PAGE}: numbers that no table linked from the same row or section holds (cite "
                         "the table that holds them, in that row or section):\n" + "\n".join(missing))


def test_a_budget_number_planted_in_the_heads_row_is_caught():
    page = (REPO / CITING_PAGE).read_text(encoding="utf-8")
    lines = page.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("|") and "(tables/heads.md)" in line)
    budget, heads = table_numbers("budget"), table_numbers("heads")
    planted = next(v for v in sorted(budget) if v not in heads and v.as_tuple().exponent == -4
                   and v not in set().union(*(table_numbers(t) for t in TABLE_LINK.findall(lines[row]))))
    lines[row] = lines[row].replace(" |", f" (and {planted}) |", 2)
    assert miscited(page) == []
    assert [m for m in miscited("\n".join(lines)) if m.startswith(f"line {row + 1}: {planted} ")]


def test_citation_units_rows_sections_code_and_the_papers_words(tmp_path):
    (tmp_path / "a.md").write_text("| x |\n|---|\n| 0.8014 | 16 | 2,590 |\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("Scores 0.7197, 50 epochs.\n", encoding="utf-8")
    page = ("# Page\n\nProse cites [a](tables/a.md): 0.8014 in 16 of 2,590, `0.1234 in code`, and 0.7197.\n\n"
            "| the paper's claim | here | table |\n|---|---|---|\n"
            "| in 9 of 9 at 0.6223 | 0.7197 after 50 epochs, p < 0.05 | [b](tables/b.md) |\n"
            "| another | 0.8014 | [b](tables/b.md) |\n\n"
            "## No citation\n\nThe nDCG@10 of 3 seeds\n")
    assert miscited(page, tmp_path) == ["line 3: 0.7197 (not in: a)", "line 8: 0.8014 (not in: b)",
                                        "line 12: 3 (no table linked)"]


def unstated_tables(folder: Path = TABLES) -> set[str]:
    """The published tables whose header says the machine of their runs is not known."""
    return {p.stem for p in folder.glob("*.md")
            if re.search(r"^> - machine: not stated", p.read_text(encoding="utf-8"), re.M)}


def silent_on_machine(text: str, folder: Path = TABLES) -> list[str]:
    """``line N: table`` for each row or section that links a table of unknown machine and does not
    say so ("not stated") in itself."""
    unstated = unstated_tables(folder)
    return [f"line {lines[0][0]}: {', '.join(sorted(tables & unstated))}"
            for lines, tables in citation_units(text)
            if tables & unstated and "not stated" not in " ".join(t for _, t in lines).lower()]


def test_every_row_resting_on_a_table_of_unknown_machine_says_so():
    silent = silent_on_machine((REPO / CITING_PAGE).read_text(encoding="utf-8"))
    assert not silent, (f"{CITING_PAGE}: rows or sections citing a table whose machine is not stated, without "
                        "saying so (\"machine not stated\") in the row or section itself:\n" + "\n".join(silent))


def test_the_machine_check_reads_each_row(tmp_path):
    (tmp_path / "old.md").write_text("> - machine: not stated: published before ...\n\n| x |\n", encoding="utf-8")
    (tmp_path / "new.md").write_text("> - machine: AMD EPYC (4 runs)\n\n| x |\n", encoding="utf-8")
    page = ("| a | b |\n|---|---|\n| from [o](tables/old.md) | x |\n| from [o](tables/old.md), machine not stated "
            "| x |\n| from [n](tables/new.md) | x |\n\n## S\n\nProse [o](tables/old.md).\n")
    assert silent_on_machine(page, tmp_path) == ["line 3: old", "line 9: old"]


# ------------------------------------------------------------------------- the report reads quickly
MAX_WORDS = 40  # no sentence of docs/results.md longer than this
README_FINDINGS_LINES = 8
MAX_PAGE_LINES = 300  # the findings page, not a data dump
FIRST_SCREEN_LINES = 15  # lines of findings before the page's first heading


def long_sentences(text: str, limit: int = MAX_WORDS) -> list[str]:
    """Each sentence of prose or of a table cell with more than ``limit`` words (link targets and
    code blocks left out), as ``N words: its start``."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    out = []
    for block in re.split(r"\n\s*\n", text):
        parts = [c for line in block.splitlines() for c in line.split("|")] if block.lstrip().startswith("|") \
            else re.split(r"\n- ", block)
        for part in parts:
            plain = re.sub(r"\]\([^)]*\)", "]", part).replace("**", "")
            for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z(`*])", plain):
                if len(sentence.split()) > limit:
                    out.append(f"{len(sentence.split())} words: {' '.join(sentence.split()[:12])} ...")
    return out


def test_no_sentence_of_the_report_is_over_40_words():
    assert long_sentences("A short one. Word " + "word " * 40 + "end. Another.") == [
        "42 words: Word " + "word " * 10 + "word ..."]
    long = long_sentences((REPO / CITING_PAGE).read_text(encoding="utf-8"))
    assert not long, f"{CITING_PAGE}: sentences over {MAX_WORDS} words:\n" + "\n".join(long)


def test_the_findings_come_first_and_the_readmes_are_short():
    page = (REPO / CITING_PAGE).read_text(encoding="utf-8").splitlines()
    assert len(page) <= MAX_PAGE_LINES, f"{CITING_PAGE}: {len(page)} lines; detail belongs in docs/tables/ or its own page"
    first_heading = next(i for i, line in enumerate(page[1:], 1) if line.startswith("#"))
    assert sum(1 for line in page[1:first_heading] if line.strip()) <= FIRST_SCREEN_LINES + 2  # + lead-in, pointer
    assert not any(w in "\n".join(page[:first_heading]).lower() for w in ("commit", "machine", "epyc"))
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    findings = readme.split("## Findings", 1)[1].split("\n## ", 1)[0]
    assert sum(1 for line in findings.splitlines() if line.strip()) <= README_FINDINGS_LINES
    for verdict in ("contradicted", "holds", "not reproduced"):
        assert verdict in findings.lower()


def test_the_provenance_table_says_what_each_published_header_says():
    """reproducibility.md's table of the published tables (table, commit, machine, MKL mode) agrees
    with every published table's header, and lists every published table."""
    page = (REPO / "docs" / "reproducibility.md").read_text(encoding="utf-8")
    listed = {}
    for line in page.split("| table | commit | machine | MKL mode |", 1)[1].splitlines()[2:]:
        if not line.startswith("|"):
            break
        name, commit, machine, mkl = (c.strip() for c in line.strip("|").split("|"))
        listed[re.search(r"tables/([\w-]+)\.md", name).group(1)] = (commit, machine, mkl)
    assert set(listed) == {p.stem for p in TABLES.glob("*.md")}
    for name, (commit, machine, mkl) in listed.items():
        header = (TABLES / f"{name}.md").read_text(encoding="utf-8").split("\n\n", 1)[0]
        assert re.search(rf"^> - commit: `{commit.strip('`').split('`')[0]}", header, re.M), name
        stated = re.search(r"^> - machine: (.*)$", header, re.M).group(1)
        assert (machine == "not stated") == stated.startswith("not stated"), name
        assert machine == "not stated" or stated.startswith(machine), name
        assert mkl.split(" ")[0] in re.search(r"^> - MKL mode: (.*)$", header, re.M).group(1), name
