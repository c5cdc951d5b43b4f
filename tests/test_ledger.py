"""The plan ledger: hash chain, refusals, verification and the `convswap plan` command."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
from pathlib import Path

import pytest
from plan_support import MINIMAL

from convswap.cli import main
from convswap.core import ConvswapError
from convswap.plans.ledger import Ledger

ZEROS = "0" * 64
PLAN_DIR = Path(__file__).resolve().parents[1] / "convswap" / "analysis_plan"


def independent_hash(entry: dict) -> str:
    body = {k: v for k, v in entry.items() if k != "entry_hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def plan_folder(tmp_path: Path, *ids: str) -> Path:
    folder = tmp_path / "plan"
    folder.mkdir()
    for plan_id in ids:
        (folder / f"{plan_id}.toml").write_text(MINIMAL.replace('id = "demo"', f'id = "{plan_id}"'))
    return folder


def lines(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "ledger.jsonl").read_text().splitlines()]


def clock_from(*stamps: str):
    queue = list(stamps)
    return lambda: queue.pop(0)


def test_register_appends_a_chained_entry(tmp_path):
    folder = plan_folder(tmp_path, "alpha", "beta")
    ledger = Ledger(folder, clock=clock_from("2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00"))
    ledger.register(folder / "alpha.toml")
    ledger.register("beta.toml")  # a bare name is taken relative to the plan folder
    first, second = lines(folder)
    assert first == {
        "action": "register",
        "file": "alpha.toml",
        "sha256": hashlib.sha256((folder / "alpha.toml").read_bytes()).hexdigest(),
        "reason": None,
        "timestamp": "2026-01-01T00:00:00+00:00",
        "prev": ZEROS,
        "version": 1,  # recorded since issue 15, so that an amendment can be checked to raise it
        "entry_hash": independent_hash(first),
    }
    assert second["prev"] == first["entry_hash"] and second["entry_hash"] == independent_hash(second)
    assert ledger.current_entry_hash("beta.toml") == second["entry_hash"]
    assert ledger.verify() == []


def test_default_timestamps_are_utc_iso(tmp_path):
    folder = plan_folder(tmp_path, "alpha")
    entry = Ledger(folder).register("alpha.toml")
    assert entry.timestamp.endswith("+00:00") and entry.timestamp[10] == "T"


def test_amend_records_the_reason_and_moves_the_plan_hash(tmp_path):
    folder = plan_folder(tmp_path, "alpha")
    ledger = Ledger(folder)
    registered = ledger.register("alpha.toml")
    (folder / "alpha.toml").write_text((folder / "alpha.toml").read_text().replace("version = 1", "version = 2"))
    with pytest.raises(ConvswapError, match=r"alpha\.toml changed since its last ledger entry \(line 1\)"):
        ledger.current_entry_hash("alpha.toml")
    amended = ledger.amend("alpha.toml", "  the held-out rule now keeps away from discarded names ")
    entry = lines(folder)[1]
    assert entry["action"] == "amend" and entry["reason"] == "the held-out rule now keeps away from discarded names"
    assert entry["prev"] == registered.entry_hash
    assert ledger.current_entry_hash("alpha.toml") == amended.entry_hash == entry["entry_hash"]
    assert ledger.status("alpha.toml")[0] == "amended"


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (lambda ledger: ledger.register("alpha.toml"), r"alpha\.toml is already registered \(line 1\)"),
        (lambda ledger: ledger.amend("alpha.toml", "why"), r"alpha\.toml is unchanged since its last entry"),
        (lambda ledger: ledger.amend("beta.toml", "why"), r"beta\.toml is not registered"),
        (lambda ledger: ledger.amend("alpha.toml", "  "), r"amending alpha\.toml needs a reason"),
        (lambda ledger: ledger.current_entry_hash("beta.toml"), r"beta\.toml is not registered"),
        (lambda ledger: ledger.register("../outside.toml"), r"is not inside the plan folder"),
        (lambda ledger: ledger.register("notes.txt"), r"is not a plan file"),
    ],
)
def test_refusals_leave_the_ledger_untouched(tmp_path, action, message):
    folder = plan_folder(tmp_path, "alpha", "beta")
    (tmp_path / "outside.toml").write_text(MINIMAL)
    (folder / "notes.txt").write_text("notes")
    ledger = Ledger(folder)
    ledger.register("alpha.toml")
    before = (folder / "ledger.jsonl").read_bytes()
    with pytest.raises(ConvswapError, match=message):
        action(ledger)
    assert (folder / "ledger.jsonl").read_bytes() == before


def test_an_invalid_plan_is_never_registered(tmp_path):
    folder = plan_folder(tmp_path)
    (folder / "broken.toml").write_text(MINIMAL.replace('id = "demo"', 'id = "broken"').replace("n = 200", "n = 0"))
    with pytest.raises(ConvswapError, match=r"broken\.toml: design\.n: must be an integer >= 1, got 0"):
        Ledger(folder).register("broken.toml")
    assert not (folder / "ledger.jsonl").exists()


def test_verify_names_a_file_edited_without_amendment(tmp_path):
    folder = plan_folder(tmp_path, "alpha", "beta")
    ledger = Ledger(folder)
    ledger.register("alpha.toml")
    ledger.register("beta.toml")
    with open(folder / "beta.toml", "a") as handle:
        handle.write("# an edit\n")
    assert ledger.verify() == ["beta.toml: edited since its last ledger entry (line 2) without an amendment"]


def test_verify_names_unregistered_missing_and_invalid_files(tmp_path):
    folder = plan_folder(tmp_path, "alpha", "beta", "gamma")
    ledger = Ledger(folder)
    ledger.register("alpha.toml")
    ledger.register("gamma.toml")
    (folder / "alpha.toml").unlink()
    (folder / "delta.toml").write_text("id = 'delta'\n")
    problems = ledger.verify()
    assert problems[0] == "alpha.toml: registered (line 1) but missing"
    assert "beta.toml: not registered" in problems and "delta.toml: not registered" in problems
    assert f"{folder / 'delta.toml'}: design: must be a table, got None" in problems


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        (lambda e: e[0].update(sha256="f" * 64), "ledger.jsonl line 1: entry_hash does not match the entry's content"),
        (lambda e: e.pop(0), "ledger.jsonl line 1: prev does not match the hash of the entry before it (chain broken)"),
        (lambda e: e.pop(1), "ledger.jsonl line 2: prev does not match the hash of the entry before it (chain broken)"),
        (lambda e: e[1].update(reason="later"), "ledger.jsonl line 2: entry_hash does not match the entry's content"),
    ],
)
def test_verify_names_the_line_where_the_chain_breaks(tmp_path, tamper, problem):
    folder = plan_folder(tmp_path, "alpha", "beta", "gamma")
    ledger = Ledger(folder)
    for name in ("alpha.toml", "beta.toml", "gamma.toml"):
        ledger.register(name)
    entries = lines(folder)
    tamper(entries)
    (folder / "ledger.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    assert problem in ledger.verify()
    with pytest.raises(ConvswapError, match="is damaged"):
        ledger.current_entry_hash("alpha.toml")
    with pytest.raises(ConvswapError, match="is damaged, nothing appended"):
        ledger.register("alpha.toml")


def test_a_rehashed_forgery_still_breaks_the_chain_at_the_next_line(tmp_path):
    folder = plan_folder(tmp_path, "alpha", "beta")
    ledger = Ledger(folder)
    ledger.register("alpha.toml")
    ledger.register("beta.toml")
    entries = lines(folder)
    entries[0]["sha256"] = "f" * 64
    entries[0]["entry_hash"] = independent_hash(entries[0])
    (folder / "ledger.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    problems = ledger.verify()
    assert "ledger.jsonl line 2: prev does not match the hash of the entry before it (chain broken)" in problems


def test_verify_names_a_line_that_is_not_json(tmp_path):
    folder = plan_folder(tmp_path, "alpha")
    ledger = Ledger(folder)
    ledger.register("alpha.toml")
    with open(folder / "ledger.jsonl", "a") as handle:
        handle.write('{"action": "amend", "fi')
    assert ledger.verify()[0] == "ledger.jsonl line 2: not a JSON object"


def test_a_clock_running_backwards_is_refused(tmp_path):
    folder = plan_folder(tmp_path, "alpha", "beta")
    ledger = Ledger(folder, clock=clock_from("2026-01-02T00:00:00+00:00", "2026-01-01T00:00:00+00:00"))
    ledger.register("alpha.toml")
    with pytest.raises(ConvswapError, match=r"clock reads 2026-01-01T00:00:00\+00:00, before the last entry"):
        ledger.register("beta.toml")
    assert len(lines(folder)) == 1


def test_verify_names_an_out_of_order_timestamp(tmp_path):
    folder = plan_folder(tmp_path, "alpha", "beta")
    ledger = Ledger(folder)
    ledger.register("alpha.toml")
    ledger.register("beta.toml")
    entries = lines(folder)
    entries[1]["timestamp"] = "2000-01-01T00:00:00+00:00"
    entries[1]["entry_hash"] = independent_hash(entries[1])
    (folder / "ledger.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    assert ledger.verify() == ["ledger.jsonl line 2: timestamp earlier than the entry before it"]


def _register_in_child(folder: str, name: str) -> None:
    Ledger(folder).register(name)


def test_concurrent_registrations_keep_one_chain(tmp_path):
    names = [f"plan{i}" for i in range(8)]
    folder = plan_folder(tmp_path, *names)
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_register_in_child, args=(str(folder), f"{n}.toml")) for n in names]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    assert [p.exitcode for p in processes] == [0] * len(names)
    entries = lines(folder)
    assert sorted(e["file"] for e in entries) == sorted(f"{n}.toml" for n in names)
    assert Ledger(folder).verify() == []


def test_cli_register_verify_amend_show(tmp_path, capsys):
    folder = plan_folder(tmp_path, "alpha", "beta")
    assert main(["plan", "verify", "--plan-dir", str(folder)]) == 1
    assert "alpha.toml: not registered" in capsys.readouterr().err
    assert main(["plan", "register", "--plan-dir", str(folder), "alpha.toml", str(folder / "beta.toml")]) == 0
    out = capsys.readouterr().out
    assert "registered alpha.toml (ledger line 1," in out and "registered beta.toml (ledger line 2," in out
    assert main(["plan", "verify", "--plan-dir", str(folder)]) == 0
    # An amendment raises the version (refused otherwise since issue 15).
    (folder / "beta.toml").write_text((folder / "beta.toml").read_text().replace("version = 1", "version = 2"))
    assert main(["plan", "verify", "--plan-dir", str(folder)]) == 1
    assert "beta.toml: edited since its last ledger entry (line 2) without an amendment" in capsys.readouterr().err
    assert main(["plan", "amend", "--plan-dir", str(folder), "beta.toml", "--reason", "comment added"]) == 0
    assert main(["plan", "show", "--plan-dir", str(folder)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[-2].split()[:4] == ["alpha", "1", "1", "registered"]
    assert shown[-1].split()[:4] == ["beta", "2", "1", "amended"]
    assert main(["plan", "amend", "--plan-dir", str(folder), "beta.toml", "--reason", "again"]) == 2
    assert "beta.toml is unchanged since its last entry (line 3)" in capsys.readouterr().err


def test_cli_amend_requires_a_reason(tmp_path):
    folder = plan_folder(tmp_path, "alpha")
    with pytest.raises(SystemExit) as caught:
        main(["plan", "amend", "--plan-dir", str(folder), "alpha.toml"])
    assert caught.value.code == 2


def test_cli_refuses_a_missing_plan_folder(tmp_path, capsys):
    assert main(["plan", "show", "--plan-dir", str(tmp_path / "absent")]) == 2
    assert "plan folder" in capsys.readouterr().err


def test_the_shipped_plan_is_registered_unchanged_and_records_the_held_out_amendment():
    ledger = Ledger(PLAN_DIR)
    assert ledger.verify() == []
    history = [(e.action, e.file) for e in ledger.entries()]
    assert history[:2] == [("register", "calibration.toml"), ("register", "color_ladder.toml")]
    amendment = next(e for e in ledger.entries() if e.action == "amend" and e.file == "calibration.toml")
    assert amendment.reason.startswith("Spec section 8: the held-out rule")
    assert ("amend", "color_ladder.toml") in history and ("amend", "color_readership.toml") in history
