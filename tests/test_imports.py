"""dive_core's modules import each other without a cycle (imports inside functions count too), and
`import dive_core` and the plan import no torch (the Snakefile imports them on every invocation)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "dive_core"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Line numbers of the imports under ``if TYPE_CHECKING:`` (never run)."""
    return {sub.lineno for node in ast.walk(tree)
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
            for sub in ast.walk(node) if isinstance(sub, (ast.Import, ast.ImportFrom))}


def import_graph() -> dict[str, set[str]]:
    """module -> the dive_core modules it imports, at any depth of its code, except under
    ``if TYPE_CHECKING:`` and except its own package (a package's __init__ re-exports its
    submodules; a submodule importing a sibling goes through that package without a cycle)."""
    modules = {module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_lines(tree)
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
                names = [f"{target}.{a.name}" for a in node.names]
                found = [n for n in names if n in modules] or ([target] if target in modules else [])
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names if a.name in modules]
            else:
                continue
            graph[mod].update(f for f in found if f != mod and not mod.startswith(f + "."))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return found


def test_dive_core_has_no_import_cycle():
    graph = import_graph()
    assert not cycles(graph), cycles(graph)


def test_the_snakefiles_imports_load_no_torch():
    code = "import sys, dive_core, dive_core.plan, dive_core.paths, dive_core.resources; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


def test_a_thread_budget_set_before_torch_and_faiss_are_imported_reaches_them():
    """runlog.set_threads imports neither package (a table job needs no torch); one imported later gets
    the job's thread count, and torch's import warms MKL's vector math first, as set_threads does
    where torch is already imported."""
    code = ("import sys; from dive_core import numerics, runlog\n"
            "runlog.set_threads(1); runlog.set_threads(3)\n"
            "assert 'torch' not in sys.modules and 'faiss' not in sys.modules\n"
            "import torch, faiss\n"
            "print(torch.get_num_threads(), faiss.omp_get_max_threads(), numerics._vector_math_warm)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "3", "True"]


def test_a_jobs_log_names_the_heavy_modules_it_imported(tmp_path):
    """runlog.setup writes a `start:` line (seconds since the interpreter started, the heavy modules
    imported before the work) and, at exit, an `end:` line; imports_of_log reads them back."""
    log = tmp_path / "job.log"
    code = (f"from dive_core import runlog\nrunlog.setup({str(log)!r})\nimport numpy, scipy.stats\n")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)
    from dive_core.runlog import imports_of_log

    text = log.read_text()
    assert imports_of_log(text) == {"start": [], "end": ["scipy"]}, text
    assert " s after the interpreter started" in text
