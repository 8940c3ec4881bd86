"""The package's shape: folders are layers, nothing imports upward, no module
imports itself round a cycle, and no module or class outgrows what one person
reads at once."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "mdindex"
# Lowest first. Each layer may import those before it and itself, never later ones.
LAYERS = [
    ("errors", "config", "jsonfile", "outside", "retry"),
    ("documents",),
    ("embedding",),
    ("chunking",),
    ("sinks",),
    ("index",),
    ("runtime", "distributed"),
    ("versions",),
    ("query",),
    ("daemon",),
    ("answers", "api", "arguments"),
    ("cli", "__main__"),
]
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250


def layer_of(module: str) -> int:
    """The layer of ``mdindex.<top>...``."""
    if module == "mdindex":  # the package itself: its face, ``mdindex.Index``
        return len(LAYERS) - 1
    top = module.split(".")[1]
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module} belongs to no layer; add its folder to LAYERS")


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(path: Path, name: str) -> set[str]:
    """The mdindex modules ``path`` imports, anywhere in it (functions included,
    and those under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    known = modules()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mdindex")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            if not base.startswith("mdindex"):
                continue
            for alias in node.names:  # `from mdindex.x import y` may import module x.y
                child = f"{base}.{alias.name}"
                found.add(child if child in known else base)
    return {m for m in found if m != name}


def test_nothing_imports_upward() -> None:
    wrong = []
    for name, path in modules().items():
        for target in imports(path, name):
            if layer_of(target) > layer_of(name):
                wrong.append(f"{name} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle() -> None:
    """Imports made only for type checking count too: a cycle through them is
    still one class split across two modules."""
    graph = {name: imports(path, name) for name, path in modules().items()}
    # a package's __init__ importing its own modules is not a cycle with them
    for name in graph:
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            assert cycle is None, " -> ".join(cycle)


def test_modules_and_classes_stay_readable() -> None:
    big = []
    for name, path in modules().items():
        source = path.read_text()
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            big.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    big.append(f"{name}.{node.name}: {size} lines")
    assert not big, "\n".join(big)


def test_the_command_line_imports_nothing_heavy() -> None:
    """`import mdindex.cli` (every command's start) loads no model library, no
    numpy and no store engine: each command imports what it uses."""
    probe = (
        "import json, sys\nimport mdindex.cli\nprint(json.dumps(sorted(m for m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    heavy = {"torch", "numpy", "sentence_transformers", "qdrant_client", "qdrant_edge"}
    heavy |= {"onnxruntime", "transformers", "markdown_it", "yaml", "mcp"}
    assert not heavy & loaded, sorted(heavy & loaded)


def test_every_package_says_what_it_is() -> None:
    """Each folder's __init__ shows its face: a docstring, and no heavy import."""
    for init in sorted(SRC.rglob("__init__.py")):
        tree = ast.parse(init.read_text())
        assert ast.get_docstring(tree), f"{init} has no docstring"


def test_the_readme_layout_names_every_package_in_layer_order() -> None:
    """README's Layout table: each top-level package and module of src/mdindex
    once, in the order of LAYERS."""
    text = (SRC.parents[1] / "README.md").read_text()
    body = text[text.index("\n## Layout\n") + 1 :]
    body = body[: body.index("\n## ")]
    rows = [re.findall(r"`([^`]+)`", row) for row in re.findall(r"^\| (`[^|]*) \|", body, re.M)]
    listed = [name for row in rows for name in row]
    tree = {
        f"{p.name}/" if p.is_dir() else p.name
        for p in SRC.iterdir()
        if not p.name.startswith("__") and ((p / "__init__.py").is_file() or p.suffix == ".py")
    }
    assert sorted(listed) == sorted(tree)
    order = [layer_of("mdindex." + row[0].removesuffix("/").removesuffix(".py")) for row in rows]
    assert order == sorted(order), rows
