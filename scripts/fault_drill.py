"""The fault drill: damage that must not spread, as a careful user would inflict it, counted.

Each case damages something and runs `convswap` on it the way a user would,
then judges what came back:

    clean one line    a non-zero exit naming the damage, no traceback
    traceback         an exception escaped (or a Python traceback was printed)
    accepted silently exit 0 on damaged input, or damage written on as if sound
    data lost         a record, a reply or a table that was there before is gone or changed

The cases, by area:

    image replies broken image-API replies (an HTML page, b64_json that is not base64, a
                  20000x20000 PNG, no image, a refused connection, a URL without http://)
                  through `run` and `audit-model`: api_error units, a rerun asking exactly those
    failed upload `run --batch` that cannot reach the API: the rerun at the right URL goes on
    protocols     damaged protocols.toml under the listing and under registration and the run
    pixel images  huge, truncated, non-image and 1x1 images as drawing, source and item image
    api replies   every malformed 200 reply on both API backends (through the real
                  clients, against loopback servers): an api_error record each, the
                  cache checked empty after, and a rerun against the repaired server
                  sends the requests again and succeeds
    two writers   a plain run and a shard run started on one folder
    full disk     `tables` and a run under a file-size limit (what a full disk does
                  to a write): one line, earlier tables kept, whole records kept
    links         a lock, a log and a dangling log that are symbolic links
    fuzz          damaged plans, convention declarations, observer files, items,
                  vocabularies, log lines and arguments, each run in-process
    kill -9       random kills of a simulated run, each resumed and compared with an
                  uninterrupted run (duplicates, gaps, differing records, torn lines)

    python scripts/fault_drill.py              # everything (a few minutes)
    python scripts/fault_drill.py --short      # the form CI runs (under a minute)

The last line reads `tried N / clean one line C / traceback T / accepted silently S /
data lost L`; the exit status is 1 unless T, S and L are all 0.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import random
import resource
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests"))  # the loopback API servers the tests use

from api_servers import GEMINI_MALFORMED, OPENAI_MALFORMED, LoopbackServer, gemini_reply, openai_reply  # noqa: E402

from convswap.cli import main  # noqa: E402

PLAN_DIR = REPO_ROOT / "convswap" / "analysis_plan"
EXPERIMENT = "synthetic_spatial"
MODEL = "sim:qwen3vl-like"
MODEL_FOLDER = Path(EXPERIMENT) / "sim-qwen3vl-like"
RUN_DETAILS = ("timestamp",)  # what legitimately differs between two runs of one unit
VERDICTS = ("clean one line", "traceback", "accepted silently", "data lost")


@dataclass
class Tally:
    counts: Counter = field(default_factory=Counter)
    by_area: dict[str, Counter] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)

    def add(self, area: str, case: str, verdict: str, detail: str = "") -> None:
        self.counts[verdict] += 1
        self.by_area.setdefault(area, Counter())[verdict] += 1
        if verdict != "clean one line":
            self.bad.append(f"{area}: {case}: {verdict}{': ' + detail if detail else ''}")

    def line(self, counts: Counter) -> str:
        return f"tried {sum(counts.values())} / " + " / ".join(f"{name} {counts[name]}" for name in VERDICTS)


# --- running the command ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    status: int | None  # None: an exception escaped
    out: str
    err: str

    @property
    def traceback(self) -> bool:
        return self.status is None or "Traceback (most recent call last)" in self.err


@contextlib.contextmanager
def environment(**variables: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def convswap(*argv: str, **variables: str) -> Ran:
    """`convswap ARGV` in this process, its output captured; an escaping exception is kept as a traceback."""
    out, err = io.StringIO(), io.StringIO()
    with environment(**variables), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status: int | None = main(list(argv))
        except SystemExit as exited:  # argparse's refusals
            status = exited.code if isinstance(exited.code, int) else 2
        except Exception:  # noqa: BLE001 (what the drill counts)
            traceback.print_exc(file=err)
            status = None
    return Ran(status, out.getvalue(), err.getvalue())


def subprocess_convswap(*argv: str, limit: int | None = None) -> Ran:
    """`python -m convswap ARGV` as a child, optionally with files capped at `limit` bytes (a full disk's EFBIG)."""

    def capped() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run([sys.executable, "-m", "convswap", *argv], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=600, preexec_fn=capped if limit is not None else None)  # fmt: skip
    return Ran(done.returncode, done.stdout, done.stderr)


ISOLATED_TIMEOUT_S = 60.0
ISOLATED_MEMORY = 2 << 30  # bytes a child may map beyond what it inherits


def isolated(*commands: tuple[str, ...], timeout: float = ISOLATED_TIMEOUT_S, **variables: str) -> Ran:
    """`convswap` in a forked child, one command after another until one does not exit 0, whose outcome is kept:
    damage that would take memory without bound (a 999999999-wide format field, an image's claimed size) or block
    (a FIFO) is bounded to that child.  A child that dies, or is still running after `timeout` seconds, is counted as a
    traceback, with what happened as its error."""
    context = multiprocessing.get_context("fork")  # the parent's imports, inherited: no interpreter start
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        mapped = _mapped_bytes()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + ISOLATED_MEMORY, mapped + ISOLATED_MEMORY))
        ran = Ran(0, "", "")
        for argv in commands:
            ran = convswap(*argv, **variables)
            if ran.status != 0:
                break
        send.send(Ran(ran.status, ran.out[-4000:], ran.err[-4000:]))

    process = context.Process(target=child)
    process.start()
    send.close()
    ran, hung = None, not receive.poll(timeout)
    if hung:
        process.kill()
    else:
        with contextlib.suppress(EOFError):  # the child died before it answered
            ran = receive.recv()
    process.join()
    receive.close()
    if ran is not None:
        return ran
    why = f"still running after {timeout:.0f} s" if hung else f"died with exit status {process.exitcode}"
    return Ran(None, "", f"{why} (convswap {' '.join(commands[-1])[:200]})")


def _mapped_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def judged(ran: Ran) -> str:
    if ran.traceback:
        return "traceback"
    return "accepted silently" if ran.status == 0 else "clean one line"


def snapshot(folder: Path, leave_out: tuple[Path, ...] = ()) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.is_symlink() and not any(path.is_relative_to(out) for out in leave_out)
    }


def lost(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    return [name for name, data in before.items() if after.get(name) != data]


# --- shared inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    root: Path
    vocabulary: Path  # the simulated observer's calibrated vocabulary
    runs: Path  # a finished simulated run of EXPERIMENT, 2 trials
    observer: Path  # a preset written as a file
    items_plans: Path  # a plan folder with an items plan, its items file and its conventions
    painter: Path  # the painting simulated observer, reading every convention it has no planted reading for


ITEMS_PLAN = """\
id = "my_items"
version = 1
title = "My benchmark under two conventions"
spec_section = "10"
exclusions = ["none"]
failure_conditions = ["none"]

[design]
stimuli = "items"
items = "items.jsonl"
tasks = ["choice"]
conventions = ["boxed", "said"]
conditions = ["visible"]
n = 2
seeds = [0]
readout = "generate"
k = 3
"""
# Names no shipped convention has: a plan folder's convention under a shipped name is refused, whatever else it holds.
CONVENTIONS = '[boxed]\ntasks = ["choice"]\noption = "{box}"\n\n[said]\ntasks = ["choice"]\noption = "{word}"\n'


def an_item(number: int) -> dict:
    return {
        "id": f"q{number}",
        "image": "img.png",
        "question": "Which box holds the cup? {options}",
        "referents": {name: {"box": f"[{i}, 0, {i + 9}, 9]", "word": name} for i, name in
                      enumerate(("left", "middle", "right"))},
        "target": "right",
    }  # fmt: skip


def prepare(root: Path) -> Inputs:
    from PIL import Image

    vocabulary = root / "qwen3vl-like.vocab.json"
    assert convswap("calibrate", "--model", MODEL, "--out", str(vocabulary)).status == 0
    runs = root / "runs"
    made = convswap("run", EXPERIMENT, "--model", MODEL, "--vocabulary", str(vocabulary), "--limit", "2",
                    "--out", str(runs), "--plan-dir", str(PLAN_DIR), "--no-progress")  # fmt: skip
    assert made.status == 0, made.err
    observer = root / "observer.toml"
    assert convswap("presets", "write", "qwen3vl-like", str(observer)).status == 0
    plans = root / "items_plans"
    plans.mkdir()
    (plans / "my_items.toml").write_text(ITEMS_PLAN)
    (plans / "conventions.toml").write_text(CONVENTIONS)
    (plans / "items.jsonl").write_text("".join(json.dumps(an_item(n)) + "\n" for n in range(3)))
    Image.new("RGB", (40, 30), (200, 10, 10)).save(plans / "img.png")
    (plans / "ledger.jsonl").write_text("")
    painter = root / "painter.toml"
    assert convswap("presets", "write", "painter-like", str(painter)).status == 0
    _append(painter, "\n[default_reading]\np_read = 0.8")
    return Inputs(root, vocabulary, runs, observer, plans, painter)


# --- api replies -------------------------------------------------------------------------------------


def api_cases(inputs: Inputs, tally: Tally, short: bool) -> None:
    backends = [("openai", "openai:gpt-4o", OPENAI_MALFORMED, "OPENAI_BASE_URL", "/v1", openai_reply),
                ("gemini", "gemini:gemini-flash-latest", GEMINI_MALFORMED, "GOOGLE_GEMINI_BASE_URL", "",
                 gemini_reply)]  # fmt: skip
    for api, spec, malformed, url_variable, suffix, good in backends:
        names = list(malformed)[:2] if short else list(malformed)
        for name in names:
            work = Path(tempfile.mkdtemp(dir=inputs.root))
            reply = malformed[name]
            with LoopbackServer(lambda seen, reply=reply: reply) as server:
                variables = {url_variable: server.url + suffix, "XDG_CACHE_HOME": str(work / "cache"),
                             "OPENAI_API_KEY": "sk-drill-0123456789", "GEMINI_API_KEY": "AIzaDRILL0123456789abcdef"}  # fmt: skip
                argv = ("run", EXPERIMENT, "--model", spec, "--vocabulary", str(inputs.vocabulary),
                        "--vocabulary-from-other-model", "--limit", "1", "--out", str(work / "out"),
                        "--plan-dir", str(PLAN_DIR), "--no-progress")  # fmt: skip
                first = convswap(*argv, **variables)
                cache = work / "cache" / "convswap" / "api.sqlite"
                cached = _rows(cache)
                server.respond = lambda seen, good=good: good("1")
                sent_before = len(server.requests)
                second = convswap(*argv, **variables)
                resent = len(server.requests) - sent_before
            case = f"{api} {name}"
            records = _records(work / "out")
            if first.traceback or second.traceback:
                tally.add("api replies", case, "traceback", (first.err + second.err)[-300:])
            elif cached:
                tally.add("api replies", case, "accepted silently", f"{cached} malformed replies cached")
            elif first.status == 0 or second.status != 0 or resent == 0:
                tally.add("api replies", case, "accepted silently", f"exit {first.status} then {second.status}, "
                          f"{resent} resent")  # fmt: skip
            elif len(records) != resent or {r["parse_status"] for r in records} != {"ok"}:
                tally.add("api replies", case, "data lost", f"{len(records)} records after the rerun")
            else:
                tally.add("api replies", case, "clean one line")


def _rows(cache: Path, table: str = "responses") -> int:
    if not cache.exists():
        return 0
    with contextlib.closing(sqlite3.connect(cache)) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            return 0
        return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(out.rglob("*.jsonl")) for line in path.read_text().splitlines()]


# --- protocols, pixel images, image replies ------------------------------------------------------------

# A plan folder's own protocol for the items plan's choice items, as the README declares one.
PROTOCOL = """\
[corner_code]
tasks = ["choice"]
guidance = "Answer: {question} Mark the corner of your option in solid magenta ({color}): {layout}"
primitive = "square"
color = "#FF00FF"
count = "one"
output = "slot"
layout = "corners4"
hsv = { hue = [140, 175], saturation = [80, 255], value = [80, 255] }
pipeline = [
    { op = "load_generated" }, { op = "load_source" }, { op = "hsv_mask" },
    { op = "subtract", guard = 7 },
    { op = "morphology", mode = "open", kernel = 3 },
    { op = "components" },
    { op = "filter", min_area = 30, min_fill = 0.4 },
    { op = "select_one", ambiguous_ratio = 0.6 },
    { op = "slot_of_point", min_inside = 0.8 },
]
"""


def _protocols_text(damaged: str) -> Callable[[Path], None]:
    return lambda plans: (plans / "protocols.toml").write_text(damaged, errors="surrogateescape")


def protocol_mistakes() -> Iterator[tuple[str, Callable[[Path], None]]]:
    """(what, how to damage a plan folder's protocols.toml): what a user gets wrong in a declaration."""
    text = _protocols_text
    edits = {
        "a 5000-digit kernel": ("kernel = 3", "kernel = " + "9" * 5000),
        "a 5000-digit min_area": ("min_area = 30", "min_area = " + "9" * 5000),
        "kernel = 100001": ("kernel = 3", "kernel = 100001"),
        "kernel = 0": ("kernel = 3", "kernel = 0"),
        "ambiguous_ratio = 1e308": ("ambiguous_ratio = 0.6", "ambiguous_ratio = 1e308"),
        "guidance {k:>999999999}": ('{layout}"', '{k:>999999999}"'),
        "guidance {k!r}": ('{layout}"', '{k!r}"'),
        "guidance {k:{k}}": ('{layout}"', '{k:{k}}"'),
        "guidance {target}": ('{layout}"', '{target}"'),
        "guidance {question.__class__}": ("{question}", "{question.__class__}"),
        "color with a trailing newline": ('color = "#FF00FF"', 'color = "#FF00FF\\n"'),
        "color outside its hue range": ('color = "#FF00FF"', 'color = "#00FF00"'),
        "a layout for no choice item": ('layout = "corners4"', 'layout = "grid3x3_outer"'),
        "an unknown operation": ('{ op = "components" }', '{ op = "flood" }'),
        "an unknown parameter": ("kernel = 3", "kernel = 3, radius = 2"),
        "hue [170, 200]": ("hue = [140, 175]", "hue = [170, 200]"),
        "hue [175, 140]": ("hue = [140, 175]", "hue = [175, 140]"),
        "saturation [-1, 255]": ("saturation = [80, 255]", "saturation = [-1, 255]"),
        "a shipped protocol's name": ("[corner_code]", "[label_code]"),
    }
    for what, (old, new) in edits.items():
        assert old in PROTOCOL, what
        yield what, text(PROTOCOL.replace(old, new, 1))
    yield "also in conventions.toml", lambda plans: (text(PROTOCOL)(plans), _append(
        plans / "conventions.toml", '\n[corner_code]\ntasks = ["choice"]\noption = "{word}"'))  # fmt: skip
    yield "a directory", lambda plans: (plans / "protocols.toml").mkdir()
    yield "a dangling link", lambda plans: (plans / "protocols.toml").symlink_to(plans / "nowhere.toml")
    yield "a FIFO", lambda plans: os.mkfifo(plans / "protocols.toml")


def protocol_plans(inputs: Inputs, folder: Path) -> Path:
    """The items plan answered under the folder's own protocol, unregistered."""
    plans = shutil.copytree(inputs.items_plans, folder / "plans")
    (plans / "my_items.toml").write_text(ITEMS_PLAN.replace('["boxed", "said"]', '["corner_code"]'))
    return plans


def protocol_cases(inputs: Inputs, tally: Tally, short: bool, seed: int) -> None:
    """Each damage to protocols.toml under the listing and under registration (then the run it would allow): one
    clear line from each, in a child bounded in memory and time."""
    damages = list(protocol_mistakes())
    if short:  # a sample of the mistakes; the generic TOML damage is the fuzz's kind
        damages = random.Random(seed).sample(damages, 6)
    else:
        damages = [(what, _protocols_text(text)) for what, text in toml_damages(PROTOCOL)] + damages
    sound = protocol_plans(inputs, Path(tempfile.mkdtemp(dir=inputs.root)))
    (sound / "protocols.toml").write_text(PROTOCOL)
    assert isolated(*protocol_commands(inputs, sound)).status == 0, "the undamaged protocol is refused"
    for what, damage in damages:
        for command in ("protocols", "register") if what != "empty" else ("register",):  # empty declares none
            folder = Path(tempfile.mkdtemp(dir=inputs.root))
            plans = protocol_plans(inputs, folder)
            damage(plans)
            ledger = (plans / "ledger.jsonl").read_bytes()
            argvs = protocol_commands(inputs, plans)
            ran = isolated(*(argvs[:1] if command == "protocols" else argvs[1:]), timeout=20)
            verdict = judged(ran)
            if command == "protocols" and (plans / "ledger.jsonl").read_bytes() != ledger:
                verdict = "data lost"
            tally.add("protocols.toml", f"{what} ({command})", verdict, (ran.err or ran.out)[-240:])
            shutil.rmtree(folder, ignore_errors=True)
    unanswerable_uses(inputs, tally)


def unanswerable_uses(inputs: Inputs, tally: Tally) -> None:
    """Protocols sound as declared that the COCO plan asks where they cannot answer: a grid3x3_outer protocol on
    identify, whose options are category names, not directions; a corners4 one on locate's nine cells.
    Registration must refuse each, where a run of it could only stop midway."""
    outer_for_identify = PROTOCOL.replace('["choice"]', '["identify"]').replace('"corners4"', '"grid3x3_outer"')
    corners_for_locate = PROTOCOL.replace('["choice"]', '["locate"]')
    for what, protocol in (("grid3x3_outer for identify", outer_for_identify),
                           ("corners4 for locate's 9 cells", corners_for_locate)):  # fmt: skip
        _unanswerable_use(inputs, tally, what, protocol)


def _unanswerable_use(inputs: Inputs, tally: Tally, what: str, protocol: str) -> None:
    from conftest import COCO_MINI

    folder = Path(tempfile.mkdtemp(dir=inputs.root))
    plan = (PLAN_DIR / "interface_swap.toml").read_text().split("[[hypotheses]]")[0]
    plan = plan.replace('id = "interface_swap"', 'id = "grid_swap"')
    conventions = '["cell_name", "pixels", "normalized", "point_marker", "label_code"]'
    assert conventions in plan
    (folder / "grid_swap.toml").write_text(plan.replace(conventions, '["cell_name", "asked_code"]'))
    (folder / "ledger.jsonl").write_text("")
    (folder / "protocols.toml").write_text(protocol.replace("[corner_code]", "[asked_code]"))
    ran = isolated(("plan", "register", str(folder / "grid_swap.toml"), "--plan-dir", str(folder)),
                   ("run", "grid_swap", "--model", f"sim:{inputs.painter}", "--coco", str(COCO_MINI), "--plan-dir",
                    str(folder), "--limit", "2", "--out", str(folder / "out"), "--no-progress"))  # fmt: skip
    registered = bool((folder / "ledger.jsonl").read_text())
    verdict = "accepted silently" if registered and not ran.traceback else judged(ran)
    tally.add("protocols.toml", f"{what} (register, then run)", verdict, (ran.err or ran.out)[-240:])


def protocol_commands(inputs: Inputs, plans: Path) -> tuple[tuple[str, ...], ...]:
    """The listing; registration; then the run a registration allows, on the painting simulated observer."""
    return (("protocols", "--plan-dir", str(plans)),
            ("plan", "register", str(plans / "my_items.toml"), "--plan-dir", str(plans)),
            ("run", "my_items", "--model", f"sim:{inputs.painter}", "--plan-dir", str(plans), "--out",
             str(plans.parent / "out"), "--no-progress"))  # fmt: skip


def damaged_images() -> dict[str, bytes]:
    from image_servers import huge_png, png
    from PIL import Image

    whole = png(Image.new("RGB", (64, 48), (20, 120, 20)))
    return {
        "a 20000x20000 PNG": huge_png(20_000, 20_000),
        "a 9000x8000 PNG": huge_png(9_000, 8_000),  # under Pillow's limit, over the items' 64,000,000 pixels
        "a PNG header claiming 20000x20000": huge_png(20_000, 20_000)[:33],
        "a truncated PNG": whole[: len(whole) // 2],
        "a PNG header only": whole[:33],
        "not an image": b"hello, this is text\n",
        "an empty file": b"",
        "a 1x1 image": png(Image.new("RGB", (1, 1), (255, 0, 255))),
    }


IMAGES_THAT_ARE_SOUND = ("a 1x1 image",)  # an image a user may have: no traceback, any outcome but a crash


def pixel_cases(inputs: Inputs, tally: Tally, short: bool) -> None:
    """Damaged images as a drawing and as the source of `protocol parse`, and as the item image of an items plan
    run on the painting simulated observer."""
    from PIL import Image

    images = damaged_images()
    if short:
        images = {name: images[name] for name in ("a 20000x20000 PNG", "a truncated PNG", "not an image",
                                                  "a 1x1 image")}  # fmt: skip
    work = Path(tempfile.mkdtemp(dir=inputs.root))
    good = work / "good.png"
    Image.new("RGB", (64, 48), (20, 120, 20)).save(good)
    for name, data in images.items():
        damaged = work / f"damaged-{len(list(work.iterdir()))}.png"
        damaged.write_bytes(data)
        for role, drawing, source in (("drawing", damaged, good), ("source", good, damaged)):
            ran = isolated(("protocol", "parse", "label_code", str(drawing), "--source", str(source), "--k", "4"))
            verdict = _parse_verdict(ran, damaged, role, name in IMAGES_THAT_ARE_SOUND)
            tally.add("pixel images", f"{name} as the {role} of protocol parse", verdict, (ran.err or ran.out)[-240:])
        folder = Path(tempfile.mkdtemp(dir=inputs.root))
        plans = shutil.copytree(inputs.items_plans, folder / "plans")
        (plans / "my_items.toml").write_text(ITEMS_PLAN.replace('["boxed", "said"]', '["label_code"]'))
        (plans / "img.png").write_bytes(data)
        ran = isolated(*protocol_commands(inputs, plans)[1:])
        records = _records(folder / "out")
        verdict = judged(ran)
        if name in IMAGES_THAT_ARE_SOUND and verdict == "accepted silently":
            verdict = "clean one line" if records else "data lost"
        tally.add("pixel images", f"{name} as an item image on sim:painter-like", verdict, (ran.err or ran.out)[-240:])
        shutil.rmtree(folder, ignore_errors=True)


def _parse_verdict(ran: Ran, damaged: Path, role: str, sound_image: bool) -> str:
    """A damaged source must be refused; a damaged drawing may instead be parsed to `parser_failure` naming the
    file, as a run records a generated image that is no image; a sound image may have any outcome."""
    if ran.traceback or ran.status != 0 or (role == "source" and not sound_image):
        return judged(ran)
    try:
        parsed = json.loads(ran.out)
    except json.JSONDecodeError:
        return "accepted silently"
    if sound_image:
        return "clean one line" if parsed.get("status") in ("ok", "protocol_noncompliance", "parser_failure") else (
            "accepted silently")  # fmt: skip
    named = parsed.get("status") == "parser_failure" and str(damaged) in str(parsed.get("reason"))
    return "clean one line" if named else "accepted silently"


IMAGE_MODELS = {  # spec, the base URL's path, what the run needs beyond the plan
    "openai-image": ("openai-image:gpt-image-1", "/v1", ("--interface", "image")),
    "openai-chat-image": ("openai-chat-image:gateway/image-model-001", "/v1", ()),
    "gemini-image": ("gemini-image:gemini-2.5-flash-image", "", ()),
}
IMAGE_LIMIT = 1


def image_replies() -> dict[str, Callable[[str], object] | None]:
    """What is wrong with the reply, and a responder giving each endpoint its own form of it (None: no server)."""
    from api_servers import Reply
    from image_servers import chat_image_reply, gemini_image_reply, huge_png, image_edit_reply, image_edit_without_image

    page = Reply(200, raw=b"<html><body>502 Bad Gateway</body></html>", content_type="text/html")
    message = {"role": "assistant", "content": None,
               "images": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}]}  # fmt: skip
    chat_bad = Reply(200, {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
                           "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})  # fmt: skip
    gemini_bad = Reply(200, {"candidates": [{"content": {"role": "model", "parts": [{"inlineData": {
        "mimeType": "image/png", "data": "%%% not base64"}}]}, "finishReason": "STOP"}]})  # fmt: skip
    huge = huge_png(20_000, 20_000)
    by_kind = {
        "an HTML 200 page": {"edit": page, "chat": page, "gemini": page},
        "b64 that is not base64": {"edit": Reply(200, {"created": 1, "data": [{"b64_json": "iVBOR*not base64*"}]}),
                                   "chat": chat_bad, "gemini": gemini_bad},
        "a 20000x20000 PNG": {"edit": image_edit_reply(huge), "chat": chat_image_reply(huge),
                              "gemini": gemini_image_reply(huge)},
        "an empty data list": {"edit": image_edit_without_image(), "chat": chat_image_reply(None, text="No."),
                               "gemini": gemini_image_reply(None, text="No.")},
    }  # fmt: skip
    from image_servers import _endpoint

    replies: dict[str, Callable[[str], object] | None] = {
        what: (lambda seen, kinds=kinds: kinds[_endpoint(seen)]) for what, kinds in by_kind.items()
    }
    replies["connection refused"] = None
    replies["a base URL without http://"] = None
    return replies


def closed_port_url() -> str:
    """A loopback URL that refuses every connection: a port bound, learnt and closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@contextlib.contextmanager
def no_waits() -> Iterator[None]:
    """Every retry the CLI makes, made at once: a refused connection is tried as often, without the backoff."""
    from convswap.readout.api_common import RetryPolicy

    backoff = RetryPolicy.backoff
    RetryPolicy.backoff = lambda self, attempt, retry_after=None: 0.0  # type: ignore[method-assign]
    try:
        yield
    finally:
        RetryPolicy.backoff = backoff  # type: ignore[method-assign]


def image_api_cases(inputs: Inputs, tally: Tally, short: bool) -> None:
    """Broken image-API replies through `run` and `audit-model`: each unit that could not be read is an api_error,
    nothing of it cached, and a rerun against a healthy server asks exactly those again."""
    from conftest import COCO_MINI
    from image_servers import PlantedPainter, Rates
    from test_image_runs import asked_of

    replies = image_replies()
    models = ["openai-image"] if short else list(IMAGE_MODELS)
    for kind in models:
        spec, path, extra = IMAGE_MODELS[kind]
        for what, reply in replies.items():
            if short and kind != "openai-image" and what not in ("an HTML 200 page", "a 20000x20000 PNG"):
                continue
            work = Path(tempfile.mkdtemp(dir=inputs.root))
            out, cache = work / "runs", work / "cache" / "convswap" / "api.sqlite"
            variables = {"XDG_CACHE_HOME": str(work / "cache"), "OPENAI_API_KEY": "sk-drill-0123456789",
                         "GEMINI_API_KEY": "AIzaDRILL0123456789abcdef"}  # fmt: skip

            def argv(url: str, spec: str = spec, path: str = path, extra: tuple = extra, out: Path = out) -> tuple:
                return ("run", "interface_swap", "--model", spec, "--base-url", url + path, "--coco", str(COCO_MINI),
                        "--limit", str(IMAGE_LIMIT), "--out", str(out), "--no-progress", *extra)  # fmt: skip

            def audit(url: str, spec: str = spec, path: str = path) -> tuple:
                return ("audit-model", "--model", spec, "--base-url", url + path, "--coco", str(COCO_MINI))

            with no_waits(), LoopbackServer(reply or (lambda seen: None)) as server:
                url = server.url if reply is not None else closed_port_url()
                if what == "a base URL without http://":
                    url = url.removeprefix("http://")
                first = convswap(*argv(url), **variables)
                probed = convswap(*audit(url), **variables) if what != "an empty data list" else None
            cached = sum(_rows(cache, table) for table in ("responses", "images"))
            before = _records(out)
            drawn = [r for r in before if r.get("pixels")]
            final = sum(1 for r in before if r["parse_status"] != "api_error")
            with LoopbackServer(PlantedPainter(asked_of(IMAGE_LIMIT), Rates(p_right=1.0))) as healthy:
                second = convswap(*argv(healthy.url), **variables)
                resent = len(healthy.requests)
            after = _records(out)
            case = f"{kind}: {what} (run)"
            malformed = what != "an empty data list"
            if first.traceback or second.traceback:
                tally.add("image replies", case, "traceback", (first.err + second.err)[-300:])
            elif malformed and any(r["parse_status"] != "api_error" for r in drawn):
                tally.add("image replies", case, "accepted silently", f"{cached} replies or images cached, drawn "
                          f"units {sorted({r['parse_status'] for r in drawn})}")  # fmt: skip
            elif second.status != 0 or resent != len(after) - final:
                tally.add("image replies", case, "accepted silently", f"{len(after) - final} units not final, "
                          f"{resent} asked again, rerun exit {second.status}")  # fmt: skip
            elif len(after) < len(before) or any(r["parse_status"] == "api_error" for r in after):
                tally.add("image replies", case, "data lost", f"{len(before)} records, then {len(after)}")
            else:
                tally.add("image replies", case, "clean one line")
            if probed is not None:
                tally.add(
                    "image replies",
                    case.replace("(run)", "(audit-model)"),
                    judged(probed),
                    (probed.err or probed.out)[-240:],
                )
            shutil.rmtree(work, ignore_errors=True)


def failed_upload(inputs: Inputs, tally: Tally) -> None:
    """`run --batch` whose upload cannot reach the API: the rerun at the corrected URL goes on, and `batch cancel`
    has nothing to list."""
    from batch_servers import BatchServer
    from test_batch import MODELS, endpoint, responder

    for api in ("openai", "gemini"):
        work = Path(tempfile.mkdtemp(dir=inputs.root))
        out = work / "runs"
        variables = {"XDG_CACHE_HOME": str(work / "cache"), "OPENAI_API_KEY": "sk-drill-0123456789",
                     "GEMINI_API_KEY": "AIzaDRILL0123456789abcdef"}  # fmt: skip

        def argv(url: str, *extra: str, api: str = api, out: Path = out) -> tuple[str, ...]:
            return ("run", EXPERIMENT, "--model", MODELS[api], "--vocabulary", str(inputs.vocabulary),
                    "--vocabulary-from-other-model", "--limit", "1", "--out", str(out), "--base-url", url,
                    "--no-progress", *extra)  # fmt: skip

        with no_waits():
            first = convswap(*argv(closed_port_url() + ("/v1" if api == "openai" else ""), "--batch"), **variables)
            cancel = convswap("batch", "cancel", str(out), **variables)
            with BatchServer(api, responder(api)) as server:
                second = convswap(*argv(endpoint(server), "--batch", "--poll", "0.01"), **variables)
        records = _records(out)
        case = f"{api}: the rerun at the corrected URL, batch cancel"
        if first.traceback or cancel.traceback or second.traceback:
            tally.add("failed upload", case, "traceback", (first.err + cancel.err + second.err)[-300:])
        elif first.status == 0 or second.status != 0 or "no live batches" not in cancel.out:
            tally.add("failed upload", case, "accepted silently", f"exit {first.status}, then {second.status}; "
                      f"cancel: {(cancel.out + cancel.err).strip()[-200:]}")  # fmt: skip
        elif not records or {r["parse_status"] for r in records} != {"ok"}:
            tally.add("failed upload", case, "data lost", f"{len(records)} records after the rerun")
        else:
            tally.add("failed upload", case, "clean one line", first.err[-200:])


# --- two writers, full disk, links ----------------------------------------------------------------------


def run_argv(out: Path, vocabulary: Path, limit: int) -> list[str]:
    return ["run", EXPERIMENT, "--model", MODEL, "--vocabulary", str(vocabulary), "--limit", str(limit),
            "--out", str(out), "--plan-dir", str(PLAN_DIR), "--no-progress"]  # fmt: skip


def two_writers(inputs: Inputs, tally: Tally) -> None:
    out = Path(tempfile.mkdtemp(dir=inputs.root)) / "out"
    folder = out / MODEL_FOLDER
    command = [sys.executable, "-m", "convswap", *run_argv(out, inputs.vocabulary, 200)]
    for first_env, second_env, case in ((None, {"RANK": "0", "WORLD_SIZE": "2"}, "plain, then a shard"),
                                        ({"RANK": "1", "WORLD_SIZE": "2"}, None, "a shard, then plain")):  # fmt: skip
        shutil.rmtree(out, ignore_errors=True)
        first = subprocess.Popen(command, cwd=REPO_ROOT, env={**os.environ, **(first_env or {})},
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while not any(folder.glob("*.jsonl")) and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            second = convswap(*run_argv(out, inputs.vocabulary, 200), **(second_env or {}))  # another process
        finally:
            first.kill()
            first.wait()
        units = Counter(_unit(record) for record in _records(out))
        if second.traceback:
            tally.add("two writers", case, "traceback", second.err[-300:])
        elif second.status == 0:
            tally.add("two writers", case, "accepted silently", "both runs wrote")
        elif any(count > 1 for count in units.values()):
            tally.add("two writers", case, "data lost", "a unit written twice")
        else:
            tally.add("two writers", case, "clean one line")


def _unit(record: dict) -> tuple:
    return (record["model"], record["condition"], record["convention"], record["trial_id"])


def full_disk(inputs: Inputs, tally: Tally) -> None:
    tables = Path(tempfile.mkdtemp(dir=inputs.root)) / "tables"
    assert convswap("tables", str(inputs.runs), "--out", str(tables), "--plan-dir", str(PLAN_DIR)).status == 0
    before = snapshot(tables)
    ran = subprocess_convswap("tables", str(inputs.runs), "--out", str(tables), "--plan-dir", str(PLAN_DIR),
                              "--seed", "1", limit=2_000)  # fmt: skip
    gone = lost(before, snapshot(tables))
    verdict = "data lost" if gone else judged(ran)
    tally.add("full disk", "tables", verdict, ", ".join(gone) or ran.err[-300:])

    out = Path(tempfile.mkdtemp(dir=inputs.root)) / "out"
    ran = subprocess_convswap(*run_argv(out, inputs.vocabulary, 12), limit=inputs.vocabulary.stat().st_size + 40_000)
    logs = sorted((out / MODEL_FOLDER).glob("*.jsonl"))
    torn = [log.name for log in logs if log.read_bytes() and not log.read_bytes().endswith(b"\n")]
    resumed = convswap(*run_argv(out, inputs.vocabulary, 12))
    units = Counter(_unit(record) for record in _records(out))
    if ran.traceback or resumed.traceback:
        tally.add("full disk", "a run", "traceback", (ran.err + resumed.err)[-300:])
    elif ran.status == 0:
        tally.add("full disk", "a run", "accepted silently", "the limited run exited 0")
    elif torn or len(units) != _expected_units(out / MODEL_FOLDER) or max(units.values()) > 1:
        tally.add("full disk", "a run", "data lost", f"torn {torn}, {len(units)} units after resuming")
    else:
        tally.add("full disk", "a run", "clean one line")


def _expected_units(folder: Path) -> int:
    from convswap.runs.logs import read_expected

    return sum(len(read_expected(folder, path.name.split(".")[0]).units()) for path in folder.glob("*.expected.json"))


def links(inputs: Inputs, tally: Tally) -> None:
    for case, name in (("lock", ".run.lock"), ("log", "visible.jsonl"), ("dangling log", "visible.jsonl")):
        work = Path(tempfile.mkdtemp(dir=inputs.root))
        runs = shutil.copytree(inputs.runs, work / "runs")
        target = work / "outside"
        if case != "dangling log":
            target.write_bytes((runs / MODEL_FOLDER / name).read_bytes())
        (runs / MODEL_FOLDER / name).unlink()
        (runs / MODEL_FOLDER / name).symlink_to(target)
        kept = target.read_bytes() if target.exists() else None
        ran = convswap(*run_argv(runs, inputs.vocabulary, 3))
        now = target.read_bytes() if target.exists() else None
        if ran.traceback:
            tally.add("links", case, "traceback", ran.err[-300:])
        elif now != kept:
            tally.add("links", case, "data lost", f"{target} written through the link")
        else:
            tally.add("links", case, judged(ran), ran.err[-200:])


# --- fuzz --------------------------------------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


def toml_damages(text: str) -> Iterator[tuple[str, str]]:
    """(what, damaged text): each value line given a value of another kind, then damage to the whole file."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        key, equals, value = line.partition(" = ")
        if not equals or line.startswith("#") or line.startswith(" "):
            continue
        value = value.strip()
        if value.startswith('"'):
            poisons = ["7", "[]"]
        elif value.startswith("["):
            poisons = ["7", '"x"']
        elif value in ("true", "false"):
            poisons = ['"x"']
        elif value.startswith("{"):
            poisons = ["7"]
        else:
            poisons = ['"x"', "[]", "nan", "-inf"]
        for poison in poisons:
            yield f"{key.strip()} = {poison}", "\n".join([*lines[:number], f"{key} = {poison}", *lines[number + 1 :]])
    yield "cut in half", text[: len(text) // 2]
    yield "empty", ""
    yield "not UTF-8", text[:40] + "\udcff" + text[40:]
    yield "nested 100,000 deep", text + f"\ndeep = {'[' * 5000}{']' * 5000}\n"
    yield "binary", "\x00\x01\x02" * 50


def json_damages(data: object, where: str = "") -> Iterator[tuple[str, object]]:
    """(what, damaged copy): each leaf given a value of another kind, each list and object replaced by a number."""
    if isinstance(data, dict):
        for key, value in data.items():
            for what, damaged in json_damages(value, f"{where}.{key}"):
                yield what, {**data, key: damaged}
        yield f"{where or 'top'} as a number", 7
    elif isinstance(data, list):
        for index, value in enumerate(data[:2]):
            for what, damaged in json_damages(value, f"{where}[{index}]"):
                yield what, [*data[:index], damaged, *data[index + 1 :]]
        yield f"{where} as a number", 7
    elif isinstance(data, str):
        yield f"{where} as a number", 7
    elif isinstance(data, bool) or data is None:
        yield f"{where} as text", "x"
    else:
        yield f"{where} as text", "x"
        yield f"{where} as NaN", float("nan")


@dataclass(frozen=True)
class FuzzCase:
    area: str
    what: str
    write: Callable[[Path], None]  # writes the damaged input into a fresh copy of the case folder
    argv: Callable[[Path], tuple[str, ...]]  # the command, given that folder
    outputs: tuple[str, ...] = ()  # what the command may write or change, relative to the folder


def fuzz_cases(inputs: Inputs) -> Iterator[FuzzCase]:
    plan_text = (PLAN_DIR / f"{EXPERIMENT}.toml").read_text()

    def plan_case(text: str) -> Callable[[Path], None]:
        def write(folder: Path) -> None:
            shutil.copytree(PLAN_DIR, folder / "plans")
            (folder / "plans" / f"{EXPERIMENT}.toml").write_text(text, errors="surrogateescape")

        return write

    def run_on_plans(folder: Path) -> tuple[str, ...]:
        return ("run", EXPERIMENT, "--model", MODEL, "--vocabulary", str(inputs.vocabulary), "--limit", "1",
                "--plan-dir", str(folder / "plans"), "--out", str(folder / "out"), "--dry-run")  # fmt: skip

    for what, text in toml_damages(plan_text):
        yield FuzzCase("plans", what, plan_case(text), run_on_plans, ("out",))

    def items_folder(edit: Callable[[Path], None]) -> Callable[[Path], None]:
        def write(folder: Path) -> None:
            shutil.copytree(inputs.items_plans, folder / "plans")
            edit(folder / "plans")

        return write

    def register_items(folder: Path) -> tuple[str, ...]:
        plans = folder / "plans"
        return ("plan", "register", str(plans / "my_items.toml"), "--plan-dir", str(plans))

    for what, text in toml_damages(CONVENTIONS):
        yield FuzzCase("conventions", what, items_folder(lambda p, t=text: (p / "conventions.toml").write_text(
            t, errors="surrogateescape")), register_items, ("plans/ledger.jsonl",))  # fmt: skip
    for what, damaged in json_damages(an_item(1)):
        line = json.dumps(damaged)
        yield FuzzCase("items", what, items_folder(lambda p, line=line: _append(p / "items.jsonl", line)),
                       register_items, ("plans/ledger.jsonl",))  # fmt: skip
    for what, line in (("nested 100,000 deep", DEEP), ("not JSON", "{oops"), ("image /etc/hostname",
                       json.dumps({**an_item(9), "image": "/etc/hostname"})), ("image ../../x.png",
                       json.dumps({**an_item(9), "image": "../../x.png"}))):  # fmt: skip
        yield FuzzCase("items", what, items_folder(lambda p, line=line: _append(p / "items.jsonl", line)),
                       register_items, ("plans/ledger.jsonl",))  # fmt: skip

    observer_text = inputs.observer.read_text()
    for what, text in toml_damages(observer_text):
        yield FuzzCase("observers", what, lambda folder, t=text: (folder / "observer.toml").write_text(
            t, errors="surrogateescape"), lambda folder: ("run", EXPERIMENT, "--model", f"sim:{folder / 'observer.toml'}",
            "--vocabulary", str(inputs.vocabulary), "--vocabulary-from-other-model", "--limit", "1",
            "--plan-dir", str(PLAN_DIR), "--out", str(folder / "out"), "--no-progress"), ("out",))  # fmt: skip

    vocabulary = json.loads(inputs.vocabulary.read_text())
    skipped = ("runs", "discarded_names")  # stored results rebuilt from the answers: any damage to them is refused

    def vocabulary_case(damaged: object) -> Callable[[Path], None]:
        return lambda folder: (folder / "v.vocab.json").write_text(json.dumps(damaged))

    vocabulary_damages = [(what, damaged) for what, damaged in json_damages(vocabulary)
                          if not any(what.startswith(f".{name}[") for name in skipped)]  # fmt: skip
    vocabulary_damages.append(("nested 100,000 deep", None))
    for what, damaged in vocabulary_damages:
        write = vocabulary_case(damaged) if damaged is not None else (
            lambda folder: (folder / "v.vocab.json").write_text(DEEP))  # fmt: skip
        yield FuzzCase("vocabularies", what, write, lambda folder: ("run", "color_ladder", "--model", MODEL,
                       "--vocabulary", str(folder / "v.vocab.json"), "--limit", "1", "--plan-dir", str(PLAN_DIR),
                       "--out", str(folder / "out"), "--no-progress"), ("out",))  # fmt: skip

    record = json.loads((inputs.runs / MODEL_FOLDER / "visible.jsonl").read_text().splitlines()[1])

    def log_case(line: str) -> Callable[[Path], None]:
        def write(folder: Path) -> None:
            runs = shutil.copytree(inputs.runs, folder / "runs")
            log = runs / MODEL_FOLDER / "visible.jsonl"
            lines = log.read_text().splitlines()
            lines[1] = line
            log.write_text("".join(text + "\n" for text in lines))

        return write

    log_damages = [(what, json.dumps(damaged)) for what, damaged in json_damages(record)
                   if what.count(".") + what.count("[") <= 2]  # fmt: skip
    log_damages += [("nested 100,000 deep", DEEP), ("not JSON", "{oops"), ("another model", json.dumps(
        {**record, "model": "sim:other"})), ("parse_status great", json.dumps({**record, "parse_status": "great"})),
        ("answer_slot 99", json.dumps({**record, "answer_slot": 99})), ("shard [5, 2]", json.dumps(
        {**record, "shard": [5, 2]}))]  # fmt: skip
    commands = ("audit", "view", "tables")
    for index, (what, line) in enumerate(log_damages):
        command = commands[index % len(commands)]
        yield FuzzCase("log lines", f"{what} ({command})", log_case(line), lambda folder, c=command: _reader(c, folder),
                       ("site", "tables"))  # fmt: skip
    # A deleted line: a unit the run's expected units list and no log holds.
    yield FuzzCase("log lines", "a deleted line (audit)", lambda folder: _delete_line(inputs, folder),
                   lambda folder: _reader("audit", folder))  # fmt: skip

    def copied_runs(folder: Path) -> None:
        shutil.copytree(inputs.runs, folder / "runs")
        (folder / "a_file").write_text("a file\n")

    arguments = [
        ("--limit -1", lambda f: run_argv(f / "out", inputs.vocabulary, -1)),
        ("--limit x", lambda f: [*run_argv(f / "out", inputs.vocabulary, 1), "--limit", "x"]),
        ("--limit 0", lambda f: run_argv(f / "out", inputs.vocabulary, 0)),
        ("--max-new-tokens 0", lambda f: [*run_argv(f / "out", inputs.vocabulary, 1), "--max-new-tokens", "0"]),
        ("--max-new-tokens -5", lambda f: [*run_argv(f / "out", inputs.vocabulary, 1), "--max-new-tokens", "-5"]),
        ("--out ''", lambda f: [*run_argv(f / "out", inputs.vocabulary, 1), "--out", ""]),
        ("--out FILE/sub", lambda f: run_argv(f / "a_file" / "sub", inputs.vocabulary, 1)),
        ("--out FILE", lambda f: run_argv(f / "a_file", inputs.vocabulary, 1)),
        ("--model nope:x", lambda f: ["run", EXPERIMENT, "--model", "nope:x", "--out", str(f / "out")]),
        ("--model sim:missing.toml", lambda f: ["run", EXPERIMENT, "--model", "sim:missing.toml"]),
        ("--condition seen", lambda f: [*run_argv(f / "out", inputs.vocabulary, 1), "--condition", "seen"]),
        ("--plan-dir FILE", lambda f: ["run", EXPERIMENT, "--model", MODEL, "--plan-dir", str(f / "a_file")]),
        ("--plan-dir missing", lambda f: ["run", EXPERIMENT, "--model", MODEL, "--plan-dir", str(f / "none")]),
        ("--coco missing", lambda f: ["run", "coco_locate_identify", "--model", MODEL, "--coco", str(f / "none")]),
        ("--vocabulary missing", lambda f: ["run", "color_ladder", "--model", MODEL, "--vocabulary", str(f / "v")]),
        ("unknown experiment", lambda f: ["run", "nope", "--model", MODEL, "--plan-dir", str(PLAN_DIR)]),
        ("tables --resamples 0", lambda f: ["tables", str(f / "runs"), "--out", str(f / "t"), "--resamples", "0"]),
        ("tables --out ''", lambda f: ["tables", str(f / "runs"), "--out", ""]),
        ("tables --out FILE", lambda f: ["tables", str(f / "runs"), "--out", str(f / "a_file")]),
        ("tables on a file", lambda f: ["tables", str(f / "a_file"), "--out", str(f / "t")]),
        ("audit on a missing folder", lambda f: ["audit", str(f / "none")]),
        ("audit --vocabulary missing", lambda f: ["audit", str(f / "runs"), "--vocabulary", str(f / "none")]),
        ("view --out ''", lambda f: ["view", str(f / "runs"), "--out", ""]),
        ("view --out FILE", lambda f: ["view", str(f / "runs"), "--out", str(f / "a_file")]),
        ("merge a missing folder", lambda f: ["merge", str(f / "none")]),
        ("calibrate --out FILE/sub", lambda f: ["calibrate", "--model", MODEL, "--out", str(f / "a_file" / "v")]),
        ("presets write over a folder", lambda f: ["presets", "write", "qwen3vl-like", str(f / "runs")]),
        ("check-numbers missing", lambda f: ["check-numbers", str(f / "none.md"), str(f / "runs")]),
        ("plan register missing", lambda f: ["plan", "register", str(f / "none.toml"), "--plan-dir", str(f)]),
        ("no command", lambda f: []),
    ]
    for what, argv in arguments:
        yield FuzzCase("arguments", what, copied_runs, lambda folder, argv=argv: tuple(map(str, argv(folder))),
                       ("out", "t"))  # fmt: skip


def _append(path: Path, line: str) -> None:
    with open(path, "a") as handle:
        handle.write(line + "\n")


def _delete_line(inputs: Inputs, folder: Path) -> None:
    runs = shutil.copytree(inputs.runs, folder / "runs")
    log = runs / MODEL_FOLDER / "visible.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:3] + lines[4:]))


def _reader(command: str, folder: Path) -> tuple[str, ...]:
    runs, plans = str(folder / "runs"), ("--plan-dir", str(PLAN_DIR))
    if command == "tables":
        return ("tables", runs, "--out", str(folder / "tables"), *plans)
    if command == "view":
        return ("view", runs, "--out", str(folder / "site"), *plans)
    return ("audit", runs, *plans)


def fuzz(inputs: Inputs, tally: Tally, short: bool, seed: int) -> None:
    cases = list(fuzz_cases(inputs))
    if short:  # a few of every area, drawn by the seed
        by_area: dict[str, list[FuzzCase]] = {}
        for case in cases:
            by_area.setdefault(case.area, []).append(case)
        draw = random.Random(seed)
        cases = [case for members in by_area.values() for case in draw.sample(members, min(5, len(members)))]
    for case in cases:
        folder = Path(tempfile.mkdtemp(dir=inputs.root))
        case.write(folder)
        before = snapshot(folder, tuple(folder / name for name in case.outputs))
        ran = convswap(*case.argv(folder))
        after = snapshot(folder, tuple(folder / name for name in case.outputs))
        gone = lost(before, after)
        verdict = "data lost" if gone and not ran.traceback else judged(ran)
        if verdict == "accepted silently" and case.area == "log lines" and "view" in case.what:
            verdict = _site_names_damage(folder, ran)
        tally.add(f"fuzz {case.area}", case.what, verdict, ", ".join(gone) or (ran.err or ran.out)[-240:])
        shutil.rmtree(folder, ignore_errors=True)


def _site_names_damage(folder: Path, ran: Ran) -> str:
    """The viewer builds its site whatever it refuses: the damage must be named on its index and on stderr."""
    index = folder / "site" / "index.html"
    named = index.exists() and ("Refused records" in index.read_text() or "Missing units" in index.read_text())
    return "clean one line" if named and ran.err.strip() else "accepted silently"


# --- kill -9 ------------------------------------------------------------------------------------------


def kills(inputs: Inputs, tally: Tally, count: int, runs: int, limit: int, seed: int) -> None:
    """Random kills of simulated runs, each run resumed to the end and compared with an uninterrupted one."""
    draw = random.Random(seed)
    reference_out = inputs.root / "reference"
    start = time.monotonic()
    assert subprocess_convswap(*run_argv(reference_out, inputs.vocabulary, limit)).status == 0
    duration = time.monotonic() - start
    reference = {_unit(r): _content(r) for r in _records(reference_out / MODEL_FOLDER)}
    landed = 0
    for index in range(runs):
        out = inputs.root / f"killed{index}"
        for _ in range(count // runs + (index < count % runs)):
            process = subprocess.Popen([sys.executable, "-m", "convswap", *run_argv(out, inputs.vocabulary, limit)],
                                       cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            try:
                process.wait(timeout=draw.uniform(0, duration))
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
                process.wait()
                landed += 1
        resumed = convswap(*run_argv(out, inputs.vocabulary, limit))
        records = _records(out / MODEL_FOLDER)
        units = Counter(_unit(r) for r in records)
        torn = [p.name for p in (out / MODEL_FOLDER).glob("*.jsonl") if not p.read_bytes().endswith(b"\n")]
        differing = sum(1 for r in records if reference.get(_unit(r)) != _content(r))
        case = f"run {index}"
        if resumed.traceback:
            tally.add("kill -9", case, "traceback", resumed.err[-300:])
        elif torn or differing or len(units) != len(reference) or max(units.values(), default=0) > 1:
            tally.add("kill -9", case, "data lost", f"torn {torn}, {differing} differing, {len(units)} units")
        else:
            tally.add("kill -9", case, "clean one line")
    print(f"kill -9: {landed} of {count} kills landed while a run was going (reference run {duration:.1f} s)")


def _content(record: dict) -> str:
    return json.dumps({k: v for k, v in record.items() if k not in RUN_DETAILS}, sort_keys=True)


def main_drill() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="the CI form: a sample of every area, few kills")
    parser.add_argument("--kills", type=int, default=None, help="kill -9s in all (default 60; --short 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments and the sample (default 0)")
    parser.add_argument("--verbose", action="store_true", help="list every case that was not clean")
    args = parser.parse_args()
    kill_count = args.kills if args.kills is not None else (3 if args.short else 60)
    if kill_count < 0:
        parser.error("--kills must be at least 0")
    tally = Tally()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fault-drill-") as work:
        inputs = prepare(Path(work))
        api_cases(inputs, tally, args.short)
        image_api_cases(inputs, tally, args.short)
        failed_upload(inputs, tally)
        protocol_cases(inputs, tally, args.short, args.seed)
        pixel_cases(inputs, tally, args.short)
        two_writers(inputs, tally)
        full_disk(inputs, tally)
        links(inputs, tally)
        fuzz(inputs, tally, args.short, args.seed)
        if kill_count:
            kills(inputs, tally, kill_count, 1 if args.short else 8, 6 if args.short else 40, args.seed)
    for area, counts in tally.by_area.items():
        print(f"{area:<22} {tally.line(counts)}")
    for problem in tally.bad if args.verbose else tally.bad[:20]:
        print(f"  {problem}")
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(usage.ru_utime + usage.ru_stime for usage in used)
    print(f"({time.monotonic() - started:.0f} s, {cpu:.0f} CPU s)")
    print(tally.line(tally.counts))
    return 1 if any(tally.counts[name] for name in VERDICTS[1:]) else 0


if __name__ == "__main__":
    sys.exit(main_drill())
