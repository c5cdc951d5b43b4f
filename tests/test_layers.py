"""Every import points down the layers: core -> conventions -> protocols -> stimuli -> readout -> calibration -> experiments ->
analysis -> audits -> cli.

Imports are read from the source with `ast`, inside functions and `TYPE_CHECKING` blocks too, so a cycle cannot
hide in a deferred import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "convswap"
LAYERS = (
    "core",
    "conventions",
    "protocols",
    "stimuli",
    "readout",
    "calibration",
    "experiments",
    "analysis",
    "audits",
    "view",
    "cli",
)
# Top-level modules other than these (core.py, fileio.py, the package itself) belong to the core layer.
TOP_LEVEL_CLI = ("cli", "__main__")


def layer_of(module: str) -> int | None:
    """The layer index of a `convswap` module; None for a module outside the package."""
    parts = module.split(".")
    if parts[0] != "convswap":
        return None
    if len(parts) == 1:
        return 0
    if parts[1] in TOP_LEVEL_CLI:
        return LAYERS.index("cli")
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else 0


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, module) for every import in the file, relative ones resolved."""
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
            if source == "convswap":  # `from convswap import cli` names the module it imports
                found += [(node.lineno, f"{source}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, source))
    return found


def upward_imports(root: Path) -> list[str]:
    """'module (layer) imports target (layer) at file:line' for every import of a higher layer."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        own = layer_of(module)
        for line, target in imported_modules(path, module):
            theirs = layer_of(target)
            if theirs is not None and own is not None and theirs > own:
                problems.append(
                    f"{module} ({LAYERS[own]}) imports {target} ({LAYERS[theirs]}) at "
                    f"{path.relative_to(root.parent)}:{line}"
                )
    return problems


def test_no_module_imports_a_higher_layer():
    assert upward_imports(PACKAGE) == []


def test_every_subpackage_has_a_layer():
    subpackages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert subpackages <= set(LAYERS), f"subpackages without a layer: {sorted(subpackages - set(LAYERS))}"


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def planted(tmp_path):
    """A small convswap tree with one upward import of each kind the scan must see."""
    root = tmp_path / "convswap"
    write(root, "__init__.py", "")
    write(root, "core.py", "import json\n")
    write(root, "cli.py", "from convswap.analysis import loading\n")
    for package in ("readout", "calibration", "analysis", "experiments"):
        write(root, f"{package}/__init__.py", "")
    write(root, "analysis/loading.py", "from convswap.experiments import logs\n")
    write(root, "experiments/logs.py", "from convswap.core import sha\n")
    write(root, "readout/sim.py", "def later():\n    from convswap.calibration.surfaces import Surface\n")
    write(root, "readout/first_token.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
          "    import convswap.calibration.surfaces\n")  # fmt: skip
    write(root, "experiments/summary.py", "from ..analysis import stats\nfrom .. import analysis\n")
    write(root, "calibration/commands.py", "from convswap import cli\n")
    return root


def test_the_scan_names_each_upward_import_with_its_place(planted):
    assert upward_imports(planted) == [
        "convswap.calibration.commands (calibration) imports convswap.cli (cli) at convswap/calibration/commands.py:1",
        "convswap.experiments.summary (experiments) imports convswap.analysis (analysis) at "
        "convswap/experiments/summary.py:1",
        "convswap.experiments.summary (experiments) imports convswap.analysis (analysis) at "
        "convswap/experiments/summary.py:2",
        "convswap.readout.first_token (readout) imports convswap.calibration.surfaces (calibration) at "
        "convswap/readout/first_token.py:3",
        "convswap.readout.sim (readout) imports convswap.calibration.surfaces (calibration) at "
        "convswap/readout/sim.py:2",
    ]
