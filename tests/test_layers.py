"""Every import points down the layers of docs/architecture.md's table, and no modules import each other.

Imports are read from the source with `ast`, inside functions and `TYPE_CHECKING` blocks too, so neither an
upward arrow nor a circle can hide in a deferred import.  The layers are read from docs/architecture.md, so the
page and the code say the same.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "convswap"
ARCHITECTURE = REPO / "docs" / "architecture.md"
LAYER_ROW = re.compile(r"^\| (\d+) \| `([a-z_]+)` \|", re.M)
MAY_IMPORT = re.compile(r"^May import: (.+?)\.$", re.M)
# Top-level modules other than these (core.py, fileio.py, the package itself) belong to the core layer.
TOP_LEVEL_CLI = ("cli", "__main__")


def read_layers(page: Path) -> tuple[str, ...]:
    """The packages of the page's layer table, lowest first; the numbers must run 1, 2, 3, ..."""
    rows = LAYER_ROW.findall(page.read_text(encoding="utf-8"))
    assert [int(number) for number, _ in rows] == list(range(1, len(rows) + 1)), f"{page}: layers out of order"
    return tuple(name for _, name in rows)


LAYERS = read_layers(ARCHITECTURE)


def layer_of(module: str, layers: tuple[str, ...] = LAYERS) -> int | None:
    """The layer index of a `convswap` module; None for a module outside the package."""
    parts = module.split(".")
    if parts[0] != "convswap":
        return None
    if len(parts) == 1:
        return 0
    if parts[1] in TOP_LEVEL_CLI:
        return layers.index("cli")
    return layers.index(parts[1]) if parts[1] in layers else 0


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_of(root: Path) -> dict[str, Path]:
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def imported_modules(path: Path, module: str, known: set[str] | dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) for every import in the file, relative ones resolved; `from package import name` is an
    import of the module package.name where `known` holds one, else of the package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                named = f"{source}.{alias.name}"
                found.append((node.lineno, named if named in known else source))
    return sorted(set(found))


def upward_imports(root: Path, layers: tuple[str, ...] = LAYERS) -> list[str]:
    """'module (layer) imports target (layer) at file:line' for every import of a higher layer."""
    problems = []
    modules = modules_of(root)
    for module, path in modules.items():
        own = layer_of(module, layers)
        for line, target in imported_modules(path, module, modules):
            theirs = layer_of(target, layers)
            if theirs is not None and own is not None and theirs > own:
                problems.append(
                    f"{module} ({layers[own]}) imports {target} ({layers[theirs]}) at "
                    f"{path.relative_to(root.parent)}:{line}"
                )
    return problems


def import_circles(root: Path) -> list[str]:
    """Each circle of modules importing one another, as its arrows 'file:line imports module', in module order.

    A module's import of its own package (`from convswap.x import name` inside convswap.x.y) counts: the package's
    `__init__` is what it imports.  The circles are the strongly connected components of the import graph."""
    modules = modules_of(root)
    arrows: dict[str, dict[str, int]] = {module: {} for module in modules}
    for module, path in modules.items():
        for line, target in imported_modules(path, module, modules):
            if target in modules and target != module:
                arrows[module].setdefault(target, line)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in arrows[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for module in arrows:
        if module not in index:
            visit(module)
    return [
        "; ".join(
            f"{modules[module].relative_to(root.parent)}:{line} imports {target}"
            for module in component
            for target, line in arrows[module].items()
            if target in component
        )
        for component in sorted(components)
    ]


def test_no_module_imports_a_higher_layer():
    assert upward_imports(PACKAGE) == []


def test_no_modules_import_each_other():
    assert import_circles(PACKAGE) == []


def test_every_subpackage_has_a_layer():
    subpackages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert subpackages <= set(LAYERS), f"subpackages without a layer: {sorted(subpackages - set(LAYERS))}"


def test_every_subpackage_says_what_it_may_import():
    """Its `__init__` docstring names what it holds, and on a line of its own `May import: core, conventions.`:
    the layers below it in docs/architecture.md."""
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        layer = LAYERS.index(init.parent.name)
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        stated = MAY_IMPORT.findall(docstring)
        assert stated == [", ".join(LAYERS[:layer])], f"{init.relative_to(REPO)}: its docstring says {stated}"


def test_every_command_module_is_in_the_package():
    from convswap.cli import COMMANDS

    assert {module for module in COMMANDS.values() if f"{module}" not in modules_of(PACKAGE)} == set()


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def planted(tmp_path):
    """A small convswap tree with one upward import of each kind the scan must see, and two circles."""
    root = tmp_path / "convswap"
    write(root, "__init__.py", "")
    write(root, "core.py", "import json\n")
    write(root, "cli.py", "from convswap.analysis import loading\n")
    for package in ("readout", "calibration", "analysis", "runs"):
        write(root, f"{package}/__init__.py", "")
    write(root, "analysis/loading.py", "from convswap.runs import logs\n")
    write(root, "runs/logs.py", "from convswap.core import sha\n")
    write(root, "readout/sim.py", "def later():\n    from convswap.calibration.surfaces import Surface\n")
    write(root, "readout/first_token.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
          "    import convswap.calibration.surfaces\n")  # fmt: skip
    write(root, "runs/summary.py", "from ..analysis import stats\nfrom .. import analysis\n")
    write(root, "calibration/commands.py", "from convswap import cli\n")
    # A circle through a type name, and one through a package's __init__.
    write(root, "runs/plan.py", "from convswap.runs.rules import unapplied\n")
    write(root, "runs/rules.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
          "    from convswap.runs.plan import Design\n")  # fmt: skip
    write(root, "readout/__init__.py", "from convswap.readout.registry import BACKENDS\n")
    write(root, "readout/registry.py", "\n\ndef load():\n    from convswap.readout import base\n"
          "    from convswap.readout import BACKENDS\n")  # fmt: skip
    write(root, "readout/base.py", "")
    return root


PLANTED_LAYERS = ("core", "readout", "calibration", "runs", "analysis", "cli")


def test_the_scan_names_each_upward_import_with_its_place(planted):
    assert upward_imports(planted, PLANTED_LAYERS) == [
        "convswap.calibration.commands (calibration) imports convswap.cli (cli) at convswap/calibration/commands.py:1",
        "convswap.readout.first_token (readout) imports convswap.calibration.surfaces (calibration) at "
        "convswap/readout/first_token.py:3",
        "convswap.readout.sim (readout) imports convswap.calibration.surfaces (calibration) at "
        "convswap/readout/sim.py:2",
        "convswap.runs.summary (runs) imports convswap.analysis (analysis) at convswap/runs/summary.py:1",
        "convswap.runs.summary (runs) imports convswap.analysis (analysis) at convswap/runs/summary.py:2",
    ]


def test_the_scan_names_each_circle_by_the_files_and_lines_of_its_imports(planted):
    assert import_circles(planted) == [
        "convswap/readout/__init__.py:1 imports convswap.readout.registry; "
        "convswap/readout/registry.py:5 imports convswap.readout",
        "convswap/runs/plan.py:1 imports convswap.runs.rules; convswap/runs/rules.py:3 imports convswap.runs.plan",
    ]


def test_the_layers_are_read_from_the_page_in_order(tmp_path):
    page = tmp_path / "architecture.md"
    page.write_text("| layer | package |\n|---|---|\n| 1 | `core` | x |\n| 2 | `runs` | y |\n", encoding="utf-8")
    assert read_layers(page) == ("core", "runs")
    page.write_text("| 1 | `core` | x |\n| 3 | `runs` | y |\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="layers out of order"):
        read_layers(page)
