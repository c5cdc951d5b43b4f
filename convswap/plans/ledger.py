"""The plan ledger: an append-only, hash-chained record of registrations and amendments.

`<plan_dir>/ledger.jsonl` holds one JSON object per line::

    {"action": "register" | "amend", "file": "<path relative to the plan dir>",
     "sha256": "<the file's sha256>", "reason": null | "<why it was amended>",
     "timestamp": "<UTC ISO 8601>", "prev": "<entry_hash of the line before>",
     "version": <the file's version>,
     "conventions": "<sha256 of the declarations of the conventions and protocols it runs from the folder's own files>",
     "declarations": {"<convention or protocol>": "<sha256 of its declaration>", ...},
     "family": {"hypotheses": ["<hypothesis id>", ...], "multiplicity": "holm" | "bh" | "none"},
     "power": {"<hypothesis id>": {"n": ..., "alpha": ..., "discordance": ..., "detectable_difference": ...,
                                   "effect": ..., "needed_n": ...}, ...},
     "entry_hash": "<sha256 of the canonical JSON of this entry without entry_hash>"}

`conventions` is present only for a plan that runs conventions (or visual protocols) its folder declares: a
declaration edited after registration changes the registered experiment, so the plan must be amended before it runs
again.  `declarations` pins the same declarations one by one, so that the refusal names the one edited; entries
written before it was recorded lack it, and their refusal names the files.  `family` is present for a plan that
declares a confirmatory family, so that an amendment that changes which p values are adjusted together (or how)
shows in the ledger itself; `power` for a plan whose McNemar hypotheses declare their discordance: what each could
detect at the plan's n, as registered (`convswap.plans.power`).

The first entry's `prev` is 64 zeros.  An amendment must raise the file's
`version` above the version of its latest entry.  Entries written before
`version` was recorded lack it (and their hashes stay as written); for them the
last version is taken to be the number of entries the file has, since a file
is registered at version 1 and each of its amendments raised it by one (the
shipped plans' history does exactly this), or the highest version an entry of
the file records, whichever is greater.  A file may be run only while its bytes
equal those of its latest entry; that entry's hash is the `plan_hash` every
record of the run carries, so a record names the exact plan text it ran under.

An entry is appended under an exclusive lock with one `write` of the whole line
to a descriptor opened with O_APPEND, then synced: concurrent writers cannot
interleave or fork the chain, and a crash leaves whole lines.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import reprlib
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from convswap.conventions.declarations import FILE_NAME as CONVENTIONS_FILE_NAME
from convswap.core import ConvswapError, canonical_json, sha256_hex
from convswap.fileio import why_not_a_folder
from convswap.plan_folders import LEDGER_NAME, SHIPPED_PLAN_DIR
from convswap.plans.plan import (
    MULTIPLICITIES,
    Plan,
    declaration_sha256s,
    declared_conventions_sha256,
    load_plan,
    plan_files,
)
from convswap.plans.power import Sizing, declared_sizings
from convswap.protocols.declarations import FILE_NAME as PROTOCOLS_FILE_NAME
from convswap.validation import is_integer

GENESIS = "0" * 64
_CONVENTIONS_CHANGED = (
    f"a convention it runs was declared otherwise in {CONVENTIONS_FILE_NAME} (or a protocol in "
    f"{PROTOCOLS_FILE_NAME}) at its last ledger entry"
)  # an entry that pinned no declaration by name
ACTIONS = ("register", "amend")
_FIELDS = ("action", "file", "sha256", "reason", "timestamp", "prev", "entry_hash")
# Absent from older entries (version, declarations) and from plans that run shipped conventions only (conventions,
# declarations).
_OPTIONAL_FIELDS = ("version", "conventions", "declarations", "family", "power")


@dataclass(frozen=True)
class Entry:
    action: str
    file: str
    sha256: str
    reason: str | None
    timestamp: str
    prev: str
    entry_hash: str
    line: int  # 1-based line of the ledger file; not part of the hashed content
    version: int | None = None  # None: an entry from before versions were recorded
    conventions: str | None = None  # None: the plan runs shipped conventions only
    declarations: dict[str, str] | None = None  # name -> sha256 of its declaration; None: not pinned by name
    family: dict[str, Any] | None = None  # None: no confirmatory family declared
    power: dict[str, dict[str, Any]] | None = None  # None: no hypothesis declares its discordance

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"action": self.action, "file": self.file, "sha256": self.sha256, "reason": self.reason,
                                "timestamp": self.timestamp, "prev": self.prev}  # fmt: skip
        # Absent fields stay absent: the entry's hash was computed without them.
        if self.version is not None:
            body["version"] = self.version
        if self.conventions is not None:
            body["conventions"] = self.conventions
        for name in ("declarations", "family", "power"):
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        return body

    def sizings(self) -> list[Sizing]:
        return [Sizing(hypothesis, **values) for hypothesis, values in (self.power or {}).items()]


def entry_hash(body: dict[str, Any]) -> str:
    return sha256_hex(canonical_json(body))


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class Ledger:
    """The ledger of one plan folder."""

    def __init__(self, plan_dir: str | os.PathLike[str], clock: Callable[[], str] = utc_now) -> None:
        self.plan_dir = Path(plan_dir)
        if not self.plan_dir.is_dir():
            raise ConvswapError(f"plan folder {self.plan_dir} does not exist")
        self.path = self.plan_dir / LEDGER_NAME
        self.clock = clock

    # -- writing ---------------------------------------------------------------------

    def register(self, file: str | os.PathLike[str]) -> Entry:
        """Register a plan file that was never registered; it must load as a valid plan."""
        name = self.relative(file)
        return self._append("register", name, None)

    def amend(self, file: str | os.PathLike[str], reason: str) -> Entry:
        """Record a change to a registered plan file, with the reason for it."""
        name = self.relative(file)
        if reason is None or not reason.strip():
            raise ConvswapError(f"amending {name} needs a reason")
        return self._append("amend", name, reason.strip())

    def _append(self, action: str, name: str, reason: str | None) -> Entry:
        plan = load_plan(self.plan_dir / name)
        digest, declared = plan.sha256, declared_conventions_sha256(plan)
        sizings = declared_sizings(plan)  # before the lock: the exact sums take a moment at a large n
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held until close: read the chain's tip and extend it as one step
            entries, problems = self._read()
            if problems:
                raise ConvswapError(f"{self.path} is damaged, nothing appended: {problems[0]}")
            latest = _latest(entries).get(name)
            if action == "register" and latest is not None:
                raise ConvswapError(f"{name} is already registered (line {latest.line}); changes need an amendment")
            if action == "amend" and latest is None:
                raise ConvswapError(f"{name} is not registered; register it before amending it")
            if action == "amend" and latest is not None and (latest.sha256, latest.conventions) == (digest, declared):
                raise ConvswapError(f"{name} is unchanged since its last entry (line {latest.line}); nothing to amend")
            if action == "amend" and latest is not None:
                last = _last_version(entries, name)
                if plan.version <= last:
                    raise ConvswapError(
                        f"{name}: version: an amendment must raise it above {last}, the version of its last entry "
                        f"(line {latest.line}), got {plan.version}"
                    )
            timestamp = self.clock()
            if entries and timestamp < entries[-1].timestamp:
                raise ConvswapError(
                    f"the clock reads {timestamp}, before the last entry's {entries[-1].timestamp} "
                    f"(line {entries[-1].line}); nothing appended"
                )
            body: dict[str, Any] = {"action": action, "file": name, "sha256": digest, "reason": reason,
                                    "timestamp": timestamp, "prev": entries[-1].entry_hash if entries else GENESIS,
                                    "version": plan.version}  # fmt: skip
            if declared is not None:
                body["conventions"] = declared
                body["declarations"] = declaration_sha256s(plan)
            if plan.family:
                body["family"] = {"hypotheses": list(plan.family), "multiplicity": plan.multiplicity}
            if sizings:
                body["power"] = {sizing.hypothesis: sizing.to_json() for sizing in sizings}
            digest_of_entry = entry_hash(body)
            os.write(fd, (canonical_json({**body, "entry_hash": digest_of_entry}) + "\n").encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        return Entry(**body, entry_hash=digest_of_entry, line=len(entries) + 1)

    # -- reading ---------------------------------------------------------------------

    def entries(self) -> list[Entry]:
        """Every entry in order; refuses a damaged ledger, naming the first problem."""
        entries, problems = self._read()
        if problems:
            raise ConvswapError(f"{self.path} is damaged: {problems[0]}")
        return entries

    def latest(self, file: str | os.PathLike[str]) -> Entry | None:
        """The file's latest entry, or None for a file never registered."""
        return _latest(self.entries()).get(self.relative(file))

    def verify(self) -> list[str]:
        """Every problem found, each naming the ledger line or the plan file; empty when all is well."""
        entries, problems = self._read()
        latest = _latest(entries)
        for name, entry in sorted(latest.items()):
            path = self.plan_dir / name
            if not path.is_file():
                problems.append(f"{name}: registered (line {entry.line}) but missing")
            elif sha256_hex(path.read_bytes()) != entry.sha256:
                problems.append(f"{name}: edited since its last ledger entry (line {entry.line}) without an amendment")
            elif (changed := self._declarations_changed(path, entry)) is not None:
                problems.append(f"{name}: {changed} (line {entry.line}) without an amendment")
        for path in plan_files(self.plan_dir):
            if path.name not in latest:
                problems.append(f"{path.name}: not registered")
            try:
                load_plan(path)
            except ConvswapError as error:
                problems.append(str(error))
        return problems

    def status(self, file: str | os.PathLike[str], plan: Plan | None = None) -> tuple[str, Entry | None]:
        """("unregistered" | "registered" | "amended" | "modified" | "missing", latest entry); plan: the file as
        the caller loaded it, judged as loaded instead of read again."""
        name = self.relative(file)
        entry = _latest(self.entries()).get(name)
        if entry is None:
            return "unregistered", None
        path = self.plan_dir / name
        if not path.is_file():
            return "missing", entry
        if (plan.sha256 if plan is not None else sha256_hex(path.read_bytes())) != entry.sha256:
            return "modified", entry
        if self._declarations_changed(path, entry, plan) is not None:
            return "conventions changed", entry
        return ("amended" if entry.action == "amend" else "registered"), entry

    def _declarations_changed(self, path: Path, entry: Entry, plan: Plan | None = None) -> str | None:
        """What of the declarations the plan runs differs from those its entry pinned, naming each convention and
        protocol edited where the entry pinned them by name; None when none differs (a plan that no longer loads
        is not judged here: loading it names its own problem); plan: the file as the caller loaded it."""
        try:
            plan = plan if plan is not None else load_plan(path)
        except ConvswapError:
            return None
        if declared_conventions_sha256(plan) == entry.conventions:
            return None
        now, pinned = declaration_sha256s(plan), entry.declarations
        edited = sorted(name for name in {*now, *(pinned or {})} if now.get(name) != (pinned or {}).get(name))
        if pinned is None or not edited:
            return _CONVENTIONS_CHANGED
        named = [
            f"its protocol {name} ({PROTOCOLS_FILE_NAME})" if name in plan.protocols
            else f"its convention {name} ({CONVENTIONS_FILE_NAME})"
            for name in edited
        ]  # fmt: skip
        listed = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
        return f"{listed} {'was' if len(named) == 1 else 'were'} declared otherwise at its last ledger entry"

    def current_entry_hash(self, file: str | os.PathLike[str], plan: Plan | None = None) -> str:
        """The plan hash a run of this file records; refuses a file not registered as it now reads (as `plan`, where
        the caller loaded it)."""
        state, entry = self.status(file, plan)
        name = self.relative(file)
        if entry is None:  # unregistered
            raise ConvswapError(f"{name} is not registered in {self.path}; run `convswap plan register {name}`")
        if state == "missing":
            raise ConvswapError(f"{name} is registered (line {entry.line}) but missing from {self.plan_dir}")
        if state == "modified":
            raise ConvswapError(
                f"{name} changed since its last ledger entry (line {entry.line}); "
                f"record the change with `convswap plan amend {name} --reason ...` or restore the file"
            )
        if state == "conventions changed":
            raise ConvswapError(
                f"{name}: {self._declarations_changed(self.plan_dir / name, entry, plan)} (line {entry.line}); raise its "
                f"version and record the change with `convswap plan amend {name} --reason ...`, or restore the "
                "declarations"
            )
        return entry.entry_hash

    def relative(self, file: str | os.PathLike[str]) -> str:
        """A plan file as the ledger names it: its path relative to the plan folder, with '/'."""
        path = Path(file)
        if not path.is_absolute() and not path.exists() and (self.plan_dir / path).exists():
            path = self.plan_dir / path
        try:
            relative = path.resolve().relative_to(self.plan_dir.resolve())
        except ValueError as error:
            raise ConvswapError(
                f"{file} is not inside the plan folder {self.plan_dir}; pass --plan-dir with the folder that holds "
                "it, or start one with `convswap plan init DIR` and move the file into it"
            ) from error
        if relative.suffix != ".toml" or len(relative.parts) != 1:
            raise ConvswapError(f"{file} is not a plan file (a .toml directly inside {self.plan_dir})")
        return relative.as_posix()

    def _read(self) -> tuple[list[Entry], list[str]]:
        """The entries that chain correctly up to the first break, and every problem found."""
        if not self.path.exists():
            return [], []
        entries: list[Entry] = []
        problems: list[str] = []
        seen: set[str] = set()
        prev = GENESIS
        for number, text in enumerate(self.path.read_text(encoding="utf-8").splitlines(), start=1):
            where = f"{LEDGER_NAME} line {number}"
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                problems.append(f"{where}: not a JSON object")
                break
            if not isinstance(data, dict) or not set(_FIELDS) <= set(data) <= {*_FIELDS, *_OPTIONAL_FIELDS}:
                problems.append(
                    f"{where}: fields must be exactly {', '.join(_FIELDS)}, and optionally "
                    f"{', '.join(_OPTIONAL_FIELDS[:-1])} and {_OPTIONAL_FIELDS[-1]}"
                )
                break
            if "version" in data and not (is_integer(data["version"]) and data["version"] >= 1):
                problems.append(f"{where}: version must be an integer >= 1, got {data['version']!r}")
                break
            declarations = data.get("declarations", {})
            if not (isinstance(declarations, dict) and all(isinstance(v, str) for v in declarations.values())):
                problems.append(
                    f"{where}: declarations must map each name to a sha256, got {reprlib.repr(declarations)}"
                )
                break
            why = _not_a_family(data.get("family")) or _not_a_sizing(data.get("power"))
            if why is not None:
                problems.append(f"{where}: {why}")
                break
            entry = Entry(**data, line=number)
            if entry_hash(entry.body()) != entry.entry_hash:
                problems.append(f"{where}: entry_hash does not match the entry's content")
                break
            if entry.prev != prev:
                problems.append(f"{where}: prev does not match the hash of the entry before it (chain broken)")
                break
            if entry.action not in ACTIONS:
                problems.append(f"{where}: unknown action {entry.action!r}")
            elif entry.action == "register" and entry.file in seen:
                problems.append(f"{where}: {entry.file} registered a second time")
            elif entry.action == "amend" and entry.file not in seen:
                problems.append(f"{where}: amends {entry.file}, which was never registered")
            elif entry.action == "amend" and not entry.reason:
                problems.append(f"{where}: an amendment without a reason")
            if entries and entry.timestamp < entries[-1].timestamp:
                problems.append(f"{where}: timestamp earlier than the entry before it")
            seen.add(entry.file)
            entries.append(entry)
            prev = entry.entry_hash
        return entries, problems


def _not_a_family(family: Any) -> str | None:
    if family is None:
        return None
    hypotheses = family.get("hypotheses") if isinstance(family, dict) else None
    if not (
        isinstance(family, dict)
        and set(family) == {"hypotheses", "multiplicity"}
        and isinstance(hypotheses, list)
        and all(isinstance(name, str) for name in hypotheses)
        and family["multiplicity"] in MULTIPLICITIES
    ):
        return f"family must hold its hypotheses and multiplicity, got {reprlib.repr(family)}"  # fmt: skip
    return None


def _not_a_sizing(power: Any) -> str | None:
    fields = {field.name for field in dataclasses.fields(Sizing)} - {"hypothesis"}
    if power is None or (isinstance(power, dict) and all(isinstance(v, dict) and set(v) == fields
                                                         for v in power.values())):  # fmt: skip
        return None
    return f"power must give each hypothesis's {', '.join(sorted(fields))}, got {reprlib.repr(power)}"


def family_change(before: Entry | None, after: Entry) -> str | None:
    """What an amendment changed of the plan's confirmatory family, in words; None when it changed nothing of it."""
    old, new = (before.family if before is not None else None), after.family
    if old == new:
        return None

    def words(family: dict[str, Any] | None) -> str:
        return "none" if family is None else f"{', '.join(family['hypotheses'])} ({family['multiplicity']})"

    return f"its confirmatory family changed from {words(old)} to {words(new)}"


def _last_version(entries: list[Entry], name: str) -> int:
    """The version of a file's latest entry; for entries that predate recorded versions, see the module's rule."""
    own = [entry for entry in entries if entry.file == name]
    if own[-1].version is not None:
        return own[-1].version
    return max([len(own), *(entry.version for entry in own if entry.version is not None)])


def init_plan_folder(target: str | os.PathLike[str], empty: bool, source: Path = SHIPPED_PLAN_DIR) -> list[str]:
    """A new plan folder: `source`'s plan files with their ledger (their registrations stay valid), or, `empty`,
    an empty ledger; returns the plan files copied.

    The folder is built beside `target` and renamed into place once it verifies, so a failure leaves nothing.
    """
    target = Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConvswapError(f"{target} exists and is not an empty folder; name a new folder for the plans")
    parent = target.absolute().parent
    if not parent.is_dir():
        raise ConvswapError(f"cannot create plan folder {target}: {why_not_a_folder(parent)}")
    building = parent / f".{target.name}.{secrets.token_hex(4)}.partial"
    names = [] if empty else [path.name for path in plan_files(source)]
    try:
        building.mkdir()
        for name in names:
            shutil.copyfile(source / name, building / name)
        if empty:
            (building / LEDGER_NAME).touch()
        else:
            shutil.copyfile(source / LEDGER_NAME, building / LEDGER_NAME)
        problems = Ledger(building).verify()
        if problems:
            raise ConvswapError(f"the plans copied from {source} do not verify: {problems[0]}")
        building.rename(target)  # replaces an empty target folder in one step
    except OSError as error:
        shutil.rmtree(building, ignore_errors=True)
        raise ConvswapError(f"cannot create plan folder {target}: {error.strerror or error}") from error
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return names


def _latest(entries: list[Entry]) -> dict[str, Entry]:
    latest: dict[str, Entry] = {}
    for entry in entries:
        latest[entry.file] = entry
    return latest
