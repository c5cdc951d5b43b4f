"""Simulated observers as TOML files: `sim:PATH.toml` reads one, `convswap presets write` starts one from a preset.

A file holds every parameter of a `Preset` (`ObserverTable` checks it, key by
key); the README's "Simulated observers" table gives each one's meaning and
unit.  The file's sha256 is the observer's revision, so a log folder refuses
records of a different file under the same name.
"""

from __future__ import annotations

from pathlib import Path

import tomli_w

from convswap.core import ConvswapError, sha256_hex
from convswap.fileio import atomic_write_text
from convswap.readout.sim_presets import ObserverTable, Preset, get_preset
from convswap.validation import read_toml, validate_file

OBSERVER_SUFFIX = ".toml"


def is_observer_file(name: str) -> bool:
    """Whether a `sim:` spec names a file (`sim:obs.toml`) rather than a preset."""
    return name.endswith(OBSERVER_SUFFIX)


def load_observer(path: Path) -> tuple[Preset, str]:
    """The observer a file describes, and the sha256 of the file's bytes."""
    data, raw = read_toml(path, "observer")
    return Preset.from_table(validate_file(ObserverTable, data, path)), sha256_hex(raw)


def observer_text(preset: Preset) -> str:
    """The observer file of a preset: a header saying how to use it, then its parameters."""
    header = (
        f"# A simulated observer, written from the preset {preset.name!r}: run it as --model sim:<this file>.\n"
        "# Every parameter, with its unit, is in the README's table of observer parameters. Its name seeds every\n"
        "# random draw: keep it to change one parameter of the preset and nothing else; change it for new draws.\n\n"
    )
    return header + tomli_w.dumps(preset.table())


def write_preset(name: str, path: Path) -> None:
    """Write preset `name` as an observer file at `path`, which must not exist yet."""
    preset = get_preset(name)
    if path.exists() or path.is_symlink():
        raise ConvswapError(f"{path} already exists; an observer file is never overwritten, give a new name")
    if not is_observer_file(path.name):
        raise ConvswapError(f"{path}: an observer file's name ends in {OBSERVER_SUFFIX} (sim: reads only those)")
    atomic_write_text(path, observer_text(preset))
