"""Plan folders of one's own: which folder a command reads, `plan init`, drafts that do not break the others, and
what registration refuses (unknown keys at every level, unknown analyses, an amendment that keeps its version)."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from plan_support import MINIMAL
from runner_support import SIM, copy_plan_dir, records_in, save_sim_vocabulary

from convswap.analysis.registration import Registry
from convswap.cli import main
from convswap.core import ConvswapError
from convswap.plans import ledger as ledger_module
from convswap.plans.ledger import Ledger
from convswap.plans.plan import load_plan

# Whole runs and commands through the CLI: out of the fast tier.
pytestmark = pytest.mark.slow

SHIPPED = Path(__file__).resolve().parents[1] / "convswap" / "analysis_plan"
SHIPPED_WHY = "the spec's plans shipped with convswap; `convswap plan init DIR` starts your own"
DRAFT = MINIMAL.replace('id = "demo"', 'id = "draft"').replace('readout = "both"', 'readout = "sometimes"')
DRAFT_PROBLEM = "design.readout: must be one of first_token, generate, both, got 'sometimes'"


def folder_line(capsys) -> str:
    """The plan folder line of a command's stderr (every command that reads plans prints exactly one)."""
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("plan folder: ")]
    assert len(lines) == 1
    return lines[0]


def own_folder(path: Path, *ids: str) -> Path:
    path.mkdir()
    (path / "ledger.jsonl").touch()
    for plan_id in ids:
        (path / f"{plan_id}.toml").write_text(MINIMAL.replace('id = "demo"', f'id = "{plan_id}"'))
    return path


# -- which folder ----------------------------------------------------------------------------------------------------


def test_the_folder_is_the_option_else_the_variable_else_a_local_ledger_else_the_shipped_one(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CONVSWAP_PLAN_DIR", raising=False)
    assert main(["plan", "show"]) == 0
    assert folder_line(capsys) == f"plan folder: {SHIPPED} ({SHIPPED_WHY})"
    (tmp_path / "analysis_plan").mkdir()  # without a ledger it is not a plan folder
    assert main(["plan", "show"]) == 0
    assert folder_line(capsys) == f"plan folder: {SHIPPED} ({SHIPPED_WHY})"
    (tmp_path / "analysis_plan" / "ledger.jsonl").touch()
    assert main(["plan", "show"]) == 0
    assert folder_line(capsys) == "plan folder: analysis_plan (./analysis_plan holds a ledger.jsonl)"
    from_env = own_folder(tmp_path / "env", "alpha")
    monkeypatch.setenv("CONVSWAP_PLAN_DIR", str(from_env))
    assert main(["plan", "show"]) == 0
    captured = capsys.readouterr()
    assert f"plan folder: {from_env} (from CONVSWAP_PLAN_DIR)" in captured.err
    assert captured.out.splitlines()[1].split()[:4] == ["alpha", "1", "1", "unregistered"]
    assert main(["plan", "show", "--plan-dir", str(SHIPPED)]) == 0
    assert folder_line(capsys) == f"plan folder: {SHIPPED} (from --plan-dir)"


@pytest.mark.parametrize(
    "command",
    [
        ["plan", "verify"],
        ["run", "synthetic_spatial", "--model", SIM, "--limit", "1"],
        ["tables", "LOGS", "--out", "OUT"],
        ["audit", "LOGS"],
    ],
)
def test_a_named_folder_that_does_not_exist_is_an_error_naming_it(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "LOGS").mkdir()
    monkeypatch.setenv("CONVSWAP_PLAN_DIR", str(tmp_path / "nowhere"))
    assert main(command) == 2
    assert (
        capsys.readouterr().err
        == f"convswap {command[0]}: error: CONVSWAP_PLAN_DIR: plan folder {tmp_path / 'nowhere'} does not exist\n"
    )
    assert main([*command, "--plan-dir", "absent"]) == 2
    assert capsys.readouterr().err == f"convswap {command[0]}: error: --plan-dir: plan folder absent does not exist\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["LOGS"]  # nothing written


def test_registering_a_file_outside_the_folder_says_how_to_fix_it(tmp_path, capsys):
    folder = own_folder(tmp_path / "plans")
    outside = tmp_path / "elsewhere.toml"
    outside.write_text(MINIMAL.replace('id = "demo"', 'id = "elsewhere"'))
    assert main(["plan", "register", str(outside), "--plan-dir", str(folder)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"convswap plan: error: {outside} is not inside the plan folder {folder}; pass --plan-dir with the folder "
        "that holds it, or start one with `convswap plan init DIR` and move the file into it"
    )
    assert (folder / "ledger.jsonl").read_text() == ""


# -- plan init -------------------------------------------------------------------------------------------------------


def test_init_copies_the_spec_plans_with_registrations_that_stay_valid(tmp_path, capsys):
    target = tmp_path / "mine"
    assert main(["plan", "init", str(target)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{target}: new plan folder with the spec's 9 registered plans and their ledger"
    assert f"convswap plan register {target}/<experiment>.toml --plan-dir {target}" in out
    assert f"export CONVSWAP_PLAN_DIR={target}" in out
    shipped_plans = sorted(path.name for path in SHIPPED.glob("*.toml"))
    assert sorted(path.name for path in target.iterdir()) == sorted([*shipped_plans, "ledger.jsonl"])
    assert (target / "ledger.jsonl").read_bytes() == (SHIPPED / "ledger.jsonl").read_bytes()
    copy, original = Ledger(target), Ledger(SHIPPED)
    assert copy.verify() == []
    for name in shipped_plans:  # a run in the copy records the same plan hash as a run of the shipped plans
        assert copy.current_entry_hash(name) == original.current_entry_hash(name)
    assert main(["plan", "verify", "--plan-dir", str(target)]) == 0


def test_init_empty_is_a_folder_with_an_empty_ledger_found_as_analysis_plan(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CONVSWAP_PLAN_DIR", raising=False)
    assert main(["plan", "init", "analysis_plan", "--empty"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "analysis_plan: new plan folder with an empty ledger"
    assert [path.name for path in (tmp_path / "analysis_plan").iterdir()] == ["ledger.jsonl"]
    assert (tmp_path / "analysis_plan" / "ledger.jsonl").read_text() == ""
    (tmp_path / "analysis_plan" / "mine.toml").write_text(MINIMAL.replace('id = "demo"', 'id = "mine"'))
    assert main(["plan", "register", "analysis_plan/mine.toml"]) == 0
    captured = capsys.readouterr()
    assert "plan folder: analysis_plan (./analysis_plan holds a ledger.jsonl)" in captured.err
    assert captured.out.startswith("registered mine.toml (ledger line 1,")


def test_init_refuses_a_folder_that_is_not_empty_and_accepts_an_empty_one(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    assert main(["plan", "init", str(taken)]) == 2
    assert capsys.readouterr().err == (
        f"convswap plan: error: {taken} exists and is not an empty folder; name a new folder for the plans\n"
    )
    assert [path.name for path in taken.iterdir()] == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["plan", "init", str(empty), "--empty"]) == 0
    assert [path.name for path in empty.iterdir()] == ["ledger.jsonl"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["empty", "taken"]  # no building folder left


def test_init_that_fails_midway_leaves_nothing(tmp_path, monkeypatch, capsys):
    copied = []

    def failing_copy(source, destination):
        if len(copied) == 3:
            raise OSError(28, "No space left on device")
        copied.append(destination)
        return shutil.copyfile(source, destination)

    monkeypatch.setattr(ledger_module.shutil, "copyfile", failing_copy)
    assert main(["plan", "init", str(tmp_path / "mine")]) == 2
    assert capsys.readouterr().err == (
        f"convswap plan: error: cannot create plan folder {tmp_path / 'mine'}: No space left on device\n"
    )
    assert list(tmp_path.iterdir()) == []


# -- an invalid draft does not break the others ---------------------------------------------------------------------


@pytest.fixture()
def folder_with_a_draft(tmp_path):
    plans = copy_plan_dir(tmp_path / "plans")
    (plans / "draft.toml").write_text(DRAFT)
    return plans


def test_tables_leave_out_an_invalid_draft_naming_it_and_write_the_rest(folder_with_a_draft, tmp_path, capsys):
    plans = folder_with_a_draft
    vocabulary = save_sim_vocabulary(tmp_path / "vocab.json")
    logs, out = tmp_path / "logs", tmp_path / "out"
    run = ["run", "synthetic_spatial", "--model", SIM, "--vocabulary", str(vocabulary), "--limit", "2"]
    assert main([*run, "--out", str(logs), "--plan-dir", str(plans), "--no-progress"]) == 0
    assert len(records_in(logs / "synthetic_spatial" / "sim-qwen3vl-like")) == 20  # the other experiment runs
    assert capsys.readouterr().err == f"plan folder: {plans} (from --plan-dir)\n"
    assert main(["tables", str(logs), "--out", str(out), "--plan-dir", str(plans)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"plan folder: {plans} (from --plan-dir)"
    assert f"left out an invalid plan file: {plans / 'draft.toml'}: {DRAFT_PROBLEM}" in err
    with (out / "table8_synthetic_spatial.csv").open(encoding="utf-8") as handle:
        statuses = [row["status"] for row in csv.DictReader(handle)]
    assert statuses == ["registered"] * 5  # one row per convention, each still registered


def test_run_of_an_invalid_draft_refuses_with_its_problem(folder_with_a_draft, tmp_path, capsys):
    command = ["run", "draft", "--model", SIM, "--out", str(tmp_path / "logs"), "--plan-dir", str(folder_with_a_draft)]
    assert main(command) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"convswap run: error: {folder_with_a_draft / 'draft.toml'}: {DRAFT_PROBLEM}"
    )
    assert not (tmp_path / "logs").exists()


def test_plan_show_lists_an_invalid_draft_as_invalid(folder_with_a_draft, capsys):
    assert main(["plan", "show", "--plan-dir", str(folder_with_a_draft)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("draft "))
    assert row.split()[1:4] == ["-", "-", "unregistered,"]
    assert row.endswith(f"{folder_with_a_draft / 'draft.toml'}: {DRAFT_PROBLEM}")


# -- what registration refuses ---------------------------------------------------------------------------------------

KNOWN_TOP = (
    "calibration, design, exclusions, failure_conditions, family, gate, held_out, hypotheses, id, multiplicity, "
    "post_hoc, registered_analyses, spec_section, title, version"
)


@pytest.mark.parametrize(
    ("anchor", "added", "message"),
    [
        ('title = "A demo experiment"', 'colour = "red"', f"colour: unknown field (known: {KNOWN_TOP}), got 'red'"),
        ('readout = "both"', "seed = 3", "design.seed: unknown field (known: angles, conditions, conventions, "
         "crossover, grid, image_root, items, k, models, n, readout, seeds, stimuli, tasks), got 3"),
        ('threshold_points = 20', "margin = 1", "gate.margin: unknown field (known: control, readout, "
         "threshold_points), got 1"),
        ('alpha = 0.05', 'tail = "left"', "hypotheses[0].tail: unknown field (known: alpha, condition, contrast, "
         "direction, discordance, effect, endpoint, id, key, null, statement, task, test), got 'left'"),
    ],
)  # fmt: skip
def test_registration_refuses_an_unknown_key_at_every_level(tmp_path, anchor, added, message):
    folder = own_folder(tmp_path / "plans")
    assert MINIMAL.count(anchor) == 1
    (folder / "demo.toml").write_text(MINIMAL.replace(anchor, f"{anchor}\n{added}"))
    with pytest.raises(ConvswapError) as caught:
        Ledger(folder).register("demo.toml")
    assert str(caught.value) == f"{folder / 'demo.toml'}: {message}"
    assert (folder / "ledger.jsonl").read_text() == ""


@pytest.mark.parametrize(
    ("table", "old", "new", "message"),
    [
        ("held_out", "off_calibration_grid = true", "off_calibration_grid = true\nwiden = 2",
         "held_out.widen: unknown field (known: max_from_own_anchor_deg, min_from_other_anchor_deg, "
         "min_from_other_name_deg, min_from_own_anchor_deg, off_calibration_grid), got 2"),
        ("calibration", "step_deg = 5", "step_deg = 5\nretries = 2",
         "calibration.retries: unknown field (known: min_anchor_separation_deg, min_anchors, min_candidate_mass, "
         "renders_per_angle, step_deg), got 2"),
    ],
)  # fmt: skip
def test_registration_refuses_an_unknown_key_in_the_calibration_tables(tmp_path, table, old, new, message):
    folder = own_folder(tmp_path / "plans")
    text = (SHIPPED / "calibration.toml").read_text()
    assert text.count(old) == 1
    (folder / "calibration.toml").write_text(text.replace(old, new))
    with pytest.raises(ConvswapError) as caught:
        Ledger(folder).register("calibration.toml")
    assert str(caught.value) == f"{folder / 'calibration.toml'}: {message}"


@pytest.mark.parametrize("field", ["registered_analyses", "post_hoc"])
def test_registration_refuses_an_analysis_that_does_not_exist(tmp_path, capsys, field):
    folder = own_folder(tmp_path / "plans")
    text = MINIMAL.replace('registered_analyses = ["accuracy_table"]', 'registered_analyses = ["accuracy_table"]')
    text = text.replace(f"{field} = [", f'{field} = ["acuracy_table", ')
    (folder / "demo.toml").write_text(text)
    assert main(["plan", "register", "demo.toml", "--plan-dir", str(folder)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"convswap plan: error: {folder / 'demo.toml'}: {field}: unknown analysis (`convswap plan analyses` lists "
        "the known ones), got 'acuracy_table'"
    )
    assert (folder / "ledger.jsonl").read_text() == ""


def test_plan_analyses_lists_every_name_a_plan_may_register(capsys):
    from convswap.plans.analyses import ANALYSES

    assert main(["plan", "analyses"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(ANALYSES) and "accuracy_table" in listed and "grid_transforms" in listed


def test_an_amendment_must_raise_the_version(tmp_path, capsys):
    folder = own_folder(tmp_path / "plans", "demo")
    ledger = Ledger(folder)
    ledger.register("demo.toml")
    path = folder / "demo.toml"
    path.write_text(path.read_text().replace("n = 200", "n = 150"))
    with pytest.raises(ConvswapError) as caught:
        ledger.amend("demo.toml", "fewer photographs")
    assert str(caught.value) == (
        "demo.toml: version: an amendment must raise it above 1, the version of its last entry (line 1), got 1"
    )
    path.write_text(path.read_text().replace("version = 1", "version = 2"))
    ledger.amend("demo.toml", "fewer photographs")
    assert [json.loads(line)["version"] for line in (folder / "ledger.jsonl").read_text().splitlines()] == [1, 2]
    path.write_text(path.read_text().replace("n = 150", "n = 100").replace("version = 2", "version = 1"))
    with pytest.raises(ConvswapError, match=r"must raise it above 2, .*\(line 2\), got 1$"):
        ledger.amend("demo.toml", "fewer again")


def test_entries_from_before_versions_were_recorded_count_one_version_each(tmp_path):
    plans = copy_plan_dir(tmp_path / "plans")  # the shipped ledger: no entry of color_readership records a version
    entries = [json.loads(line) for line in (plans / "ledger.jsonl").read_text().splitlines()]
    assert [("version" in entry) for entry in entries if entry["file"] == "color_readership.toml"] == [False] * 3
    path = plans / "color_readership.toml"  # registered, then amended twice: version 3
    assert load_plan(path).version == 3
    path.write_text(path.read_text().replace("alpha = 0.05", "alpha = 0.01", 1))
    ledger = Ledger(plans)
    with pytest.raises(ConvswapError, match=r"^color_readership\.toml: version: an amendment must raise it above 3, "):
        ledger.amend("color_readership.toml", "a stricter alpha")
    path.write_text(path.read_text().replace("version = 3", "version = 4"))
    assert ledger.amend("color_readership.toml", "a stricter alpha").version == 4
    assert ledger.verify() == []  # the older entries verify as they always did


def test_a_version_that_is_not_a_positive_integer_is_named_even_when_rehashed(tmp_path):
    folder = own_folder(tmp_path / "plans", "demo")
    Ledger(folder).register("demo.toml")
    entry = json.loads((folder / "ledger.jsonl").read_text())
    body = {key: value for key, value in entry.items() if key != "entry_hash"} | {"version": "two"}
    rehashed = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    (folder / "ledger.jsonl").write_text(json.dumps({**body, "entry_hash": rehashed}) + "\n")
    assert Ledger(folder).verify()[0] == "ledger.jsonl line 1: version must be an integer >= 1, got 'two'"


def test_the_registry_keeps_every_valid_plan_and_names_the_invalid_one(folder_with_a_draft, capsys):
    registry = Registry(folder_with_a_draft)
    assert registry.invalid == [f"{folder_with_a_draft / 'draft.toml'}: {DRAFT_PROBLEM}"]
    assert sorted(plan.id for plan in registry.plans) == sorted(path.stem for path in SHIPPED.glob("*.toml"))
    assert capsys.readouterr().err == f"left out an invalid plan file: {registry.invalid[0]}\n"
    assert registry.status("synthetic_spatial", "accuracy_table") == "registered"
    assert registry.status("draft", "accuracy_table") == "post hoc"  # an experiment without a loadable plan


def test_the_registry_leaves_out_a_valid_draft_its_ledger_does_not_register(tmp_path, capsys):
    plans = copy_plan_dir(tmp_path / "plans")
    (plans / "unfiled.toml").write_text(MINIMAL.replace('id = "demo"', 'id = "unfiled"'))
    registry = Registry(plans)
    assert registry.invalid == [f"{plans / 'unfiled.toml'}: not registered in {plans / 'ledger.jsonl'}"]
    assert capsys.readouterr().err == (
        f"left out an unregistered plan file: {plans / 'unfiled.toml'} (`convswap plan register` registers it)\n"
    )
    assert "unfiled" not in {plan.id for plan in registry.plans}
    assert registry.status("unfiled", "accuracy_table") == "post hoc"  # its analyses were never registered
    assert registry.status("synthetic_spatial", "accuracy_table") == "registered"
    Ledger(plans).register("unfiled.toml")
    assert Registry(plans).status("unfiled", "accuracy_table") == "registered"


def test_a_folders_convention_declarations_are_not_a_plan(tmp_path, capsys):
    folder = own_folder(tmp_path / "plans", "demo")
    (folder / "conventions.toml").write_text('[mine]\ntasks = ["locate"]\noption = "{pixel_x}"\n')
    Ledger(folder).register("demo.toml")
    assert Ledger(folder).verify() == []
    assert main(["plan", "show", "--plan-dir", str(folder)]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["experiment", "demo"]


# -- a plan's own conventions are registered with it ----------------------------------------------------------------

DECLARED = """\
[thousandths]
tasks = ["locate"]
option = "({normalized_x}, {normalized_y})"
"""


def test_a_declaration_edited_after_registration_stops_the_run_until_the_plan_is_amended(tmp_path, capsys):
    plans = own_folder(tmp_path / "plans")
    (plans / "conventions.toml").write_text(DECLARED)
    (plans / "demo.toml").write_text(MINIMAL.replace('"pixels_mispaired"]', '"pixels_mispaired", "thousandths"]'))
    Ledger(plans).register("demo.toml")
    entry = json.loads((plans / "ledger.jsonl").read_text())
    declared = {"thousandths": {"name": "thousandths", "tasks": ["locate"], "option": "({normalized_x}, {normalized_y})",
                                "preamble": "", "gloss_field": None, "mispaired": False, "legend": False,
                                "output": "integer"}}  # fmt: skip
    # The declaration as registered, hashed here from the declared values.
    assert (
        entry["conventions"]
        == hashlib.sha256(
            json.dumps(declared, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        ).hexdigest()
    )
    assert Ledger(plans).verify() == []

    (plans / "conventions.toml").write_text(DECLARED.replace("normalized_x}, {normalized_y", "percent_x}, {percent_y"))
    changed = "its convention thousandths (conventions.toml) was declared otherwise at its last ledger entry (line 1)"
    assert Ledger(plans).verify() == [f"demo.toml: {changed} without an amendment"]
    assert main(["plan", "show", "--plan-dir", str(plans)]) == 0
    assert "conventions changed" in capsys.readouterr().out
    run = ["run", "demo", "--model", SIM, "--coco", "unused", "--out", str(tmp_path / "logs"), "--plan-dir", str(plans)]
    assert main(run) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"convswap run: error: demo.toml: {changed}; raise its version and record the change with "
        "`convswap plan amend demo.toml --reason ...`, or restore the declarations"
    )
    assert not (tmp_path / "logs").exists()

    (plans / "demo.toml").write_text((plans / "demo.toml").read_text().replace("version = 1", "version = 2"))
    Ledger(plans).amend("demo.toml", "thousandths are shown as percentages")
    assert Ledger(plans).verify() == []
    assert Ledger(plans).status("demo.toml")[0] == "amended"


SHIPPED_PROTOCOLS = Path(__file__).resolve().parents[1] / "convswap" / "protocols" / "protocols.toml"


def protocol_folder(path: Path) -> Path:
    """A plan folder declaring two protocols (the shipped point marker's table under two names), one plan running
    both beside a declared convention, registered."""
    shipped = SHIPPED_PROTOCOLS.read_text()
    point_marker = shipped[shipped.index("[point_marker]") : shipped.index("\n# Table 8, Fixed-Slot Coding")]
    plans = own_folder(path)
    (plans / "protocols.toml").write_text(
        point_marker.replace("[point_marker]", "[my_dot]") + point_marker.replace("[point_marker]", "[their_dot]")
    )
    (plans / "conventions.toml").write_text(DECLARED)
    conventions = '"pixels", "thousandths", "my_dot", "their_dot"]'
    (plans / "demo.toml").write_text(MINIMAL.replace('"pixels", "pixels_mispaired"]', conventions))
    Ledger(plans).register("demo.toml")
    return plans


def test_a_protocol_edited_after_registration_is_named_by_verify_and_run(tmp_path, capsys):
    plans = protocol_folder(tmp_path / "plans")
    assert main(["plan", "verify", "--plan-dir", str(plans)]) == 0
    declarations = plans / "protocols.toml"
    text = declarations.read_text()
    at = text.index("[their_dot]")  # the second protocol's guidance alone is edited
    declarations.write_text(text[:at] + text[at:].replace("change nothing else", "change nothing at all", 1))
    changed = "its protocol their_dot (protocols.toml) was declared otherwise at its last ledger entry (line 1)"
    capsys.readouterr()
    assert main(["plan", "verify", "--plan-dir", str(plans)]) == 1
    assert f"demo.toml: {changed} without an amendment" in capsys.readouterr().err.splitlines()
    run = ["run", "demo", "--model", SIM, "--coco", "unused", "--out", str(tmp_path / "logs"), "--plan-dir", str(plans)]
    assert main(run) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"convswap run: error: demo.toml: {changed}; raise its version and record the change with "
        "`convswap plan amend demo.toml --reason ...`, or restore the declarations"
    )
    assert not (tmp_path / "logs").exists()
    # Both files edited: each declaration changed is named, in name order, and no other.
    declarations.write_text(declarations.read_text().replace("Add no other cyan marks.", "Add no cyan marks."))
    (plans / "conventions.toml").write_text(DECLARED.replace("normalized", "percent"))
    assert Ledger(plans).verify() == [
        "demo.toml: its protocol my_dot (protocols.toml), its protocol their_dot (protocols.toml) and its convention "
        "thousandths (conventions.toml) were declared otherwise at its last ledger entry (line 1) without an "
        "amendment"
    ]


def test_an_entry_that_pinned_the_declarations_as_one_hash_is_still_judged_by_it(tmp_path):
    # A ledger written before declarations were pinned one by one: its entry holds their one hash alone.
    plans = protocol_folder(tmp_path / "plans")
    entry = json.loads((plans / "ledger.jsonl").read_text())
    del entry["declarations"], entry["entry_hash"]
    entry["entry_hash"] = hashlib.sha256(
        json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    (plans / "ledger.jsonl").write_text(json.dumps(entry) + "\n")
    assert Ledger(plans).verify() == []
    declarations = plans / "protocols.toml"
    declarations.write_text(declarations.read_text().replace("change nothing else", "change nothing at all"))
    assert Ledger(plans).verify() == [
        "demo.toml: a convention it runs was declared otherwise in conventions.toml (or a protocol in protocols.toml) "
        "at its last ledger entry (line 1) without an amendment"
    ]


def test_a_ledger_entry_whose_declarations_are_not_hashes_is_damaged(tmp_path):
    plans = protocol_folder(tmp_path / "plans")
    entry = json.loads((plans / "ledger.jsonl").read_text())
    entry["declarations"] = {"my_dot": 7}
    (plans / "ledger.jsonl").write_text(json.dumps(entry) + "\n")
    assert Ledger(plans).verify()[0] == (
        "ledger.jsonl line 1: declarations must map each name to a sha256, got {'my_dot': 7}"
    )


def test_a_plan_of_shipped_conventions_pins_no_declarations(tmp_path):
    plans = own_folder(tmp_path / "plans", "demo")
    (plans / "conventions.toml").write_text(DECLARED)  # declared, but not run by the plan
    Ledger(plans).register("demo.toml")
    assert "conventions" not in json.loads((plans / "ledger.jsonl").read_text())
    (plans / "conventions.toml").write_text(DECLARED.replace("normalized", "percent"))
    assert Ledger(plans).status("demo.toml")[0] == "registered"
