"""The package's layers: no module imports a higher layer, no import cycles, no hidden imports.

The order is the one the design page of the documentation draws (docs/design.md,
"Layers"); a module may import its own layer and the layers below.  Imports inside
functions are allowed only with a reason written next to them (a comment on the line
or the line above), and imports under ``if TYPE_CHECKING:`` are exempt.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from daskdepth.runtime.keys import MAX_VERB_LETTERS, VERBS

PACKAGE = Path(__file__).resolve().parents[1] / "daskdepth"

#: Bottom-up layers, by module prefix (the longest matching prefix decides).
LAYERS: dict[str, int] = {
    "daskdepth._version": 0,
    "daskdepth.errors": 0,
    "daskdepth.kernels": 1,
    "daskdepth.summary": 2,
    "daskdepth.runtime": 3,
    "daskdepth.passes": 4,
    "daskdepth.covariance": 5,
    "daskdepth.fitting": 6,
    "daskdepth.storage": 7,
    "daskdepth.estimators": 8,
    "daskdepth.io": 9,
    "daskdepth.cli": 10,
    "daskdepth.plot": 10,
    "daskdepth.__main__": 10,
    "daskdepth": 11,  # the package's __init__: the public API, above everything
}


def layer_of(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom, known: set[str]) -> list[str]:
    """Absolute names of the modules an ``ImportFrom`` loads.

    ``from pkg import name`` loads the submodule ``pkg.name`` when there is one,
    and otherwise takes ``name`` from ``pkg`` itself.
    """
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        if not is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    subs = [f"{base}.{a.name}" for a in node.names]
    return [s if s in known else base for s in subs]


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in ast.walk(node):
                if hasattr(sub, "lineno"):
                    lines.add(sub.lineno)
    return lines


def imports_of(path: Path, root: Path, known: set[str]) -> list[tuple[str, int, bool]]:
    """(imported package module, line, inside a function) for every import in ``path``."""
    module = module_name(path, root)
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    nested: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(fn):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    nested.add(sub.lineno)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            names = _resolve(module, path.name == "__init__.py", node, known)
        for name in names:
            if name in known and name != module:
                out.append((name, node.lineno, node.lineno in nested))
    return out


def scan(root: Path) -> tuple[dict[str, list[tuple[str, int, bool]]], dict[str, Path]]:
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    known = set(files)
    return {m: imports_of(p, root, known) for m, p in files.items()}, files


def upward_imports(graph: dict[str, list[tuple[str, int, bool]]]) -> list[str]:
    return [f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)}) on line {line}"
            for m, edges in graph.items() for t, line, _ in edges if layer_of(t) > layer_of(m)]


def find_cycle(graph: dict[str, list[tuple[str, int, bool]]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t, _, _ in graph.get(m, []):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                found = visit(t)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def _said_why(lines: list[str], line: int) -> bool:
    """A comment on the import's line, or above the group of imports it belongs to."""
    if "#" in lines[line - 1]:
        return True
    i = line - 2
    while i >= 0 and (lines[i].strip().startswith(("from ", "import ")) or not lines[i].strip()):
        i -= 1
    return i >= 0 and lines[i].strip().startswith("#")


def unexplained_nested(graph: dict[str, list[tuple[str, int, bool]]],
                       files: dict[str, Path]) -> list[str]:
    bad = []
    for m, edges in graph.items():
        lines = files[m].read_text().splitlines()
        for _, line, inside in edges:
            if inside and not _said_why(lines, line):
                bad.append(f"{m}:{line}: {lines[line - 1].strip()}")
    return bad


def test_every_module_has_a_layer():
    graph, _ = scan(PACKAGE)
    assert all(layer_of(m) >= 0 for m in graph)


def test_no_module_imports_a_higher_layer():
    graph, _ = scan(PACKAGE)
    assert upward_imports(graph) == []


def test_no_import_cycle():
    graph, _ = scan(PACKAGE)
    assert find_cycle(graph) is None


def test_imports_inside_functions_say_why():
    graph, files = scan(PACKAGE)
    assert unexplained_nested(graph, files) == []


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    root = tmp_path / "daskdepth"
    for sub in ("kernels", "summary", "estimators"):
        (root / sub).mkdir(parents=True)
        (root / sub / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    return root


def test_the_checks_catch_violations(toy: Path):
    (toy / "kernels" / "a.py").write_text("from ..summary import b\n")
    (toy / "summary" / "b.py").write_text("from ..kernels import a\n")
    (toy / "estimators" / "c.py").write_text(
        "def f():\n    from ..kernels import a\n\n\ndef g():\n    # why: fine\n"
        "    from ..summary import b\n")
    graph, files = scan(toy)
    assert upward_imports(graph) == [
        "daskdepth.kernels.a (layer 1) imports daskdepth.summary.b (layer 2) on line 1"]
    assert set(find_cycle(graph) or []) == {"daskdepth.kernels.a", "daskdepth.summary.b"}
    assert unexplained_nested(graph, files) == [
        "daskdepth.estimators.c:2: from ..kernels import a"]


def test_type_checking_imports_are_exempt(toy: Path):
    (toy / "kernels" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..summary import b\n")
    (toy / "summary" / "b.py").write_text("x = 1\n")
    graph, _ = scan(toy)
    assert upward_imports(graph) == [] and find_cycle(graph) is None


def test_every_key_verb_is_used():
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py") if p.name != "keys.py")
    used = set(re.findall(r"key_name\(\s*\"([a-z]+)\"", source))
    # passed to key_name through a variable (covariance/mcd.py, passes/leaves.py)
    used |= {"cstep", "weigh", "count", "hone"}
    assert used == set(VERBS)


def test_key_verbs_are_short_alphabetic_words():
    """``daskdepth-<verb>`` fits the progress panel's 15 characters; key_split keeps it whole."""
    assert all(v.isalpha() and v.islower() and len(v) <= MAX_VERB_LETTERS for v in VERBS), \
        [v for v in VERBS if len(v) > MAX_VERB_LETTERS]
