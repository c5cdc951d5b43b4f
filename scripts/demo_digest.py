"""The demo's outputs as digests: a change to the code that should change no result shows here as no change.

Runs `convswap demo` (with the coco-mini photographs) and `convswap view` on its folder into a temporary folder,
then prints one line per file written, `sha256  path` in path order.  What differs from one run to the next on the
same code is normalized first, and nothing else:

    a record's timestamp      the time it was written
    a lock file's content     the id of the process that held it
    .figure-inputs.json's     the digests a figure page is redrawn by: they hash the drawing module's source, so
      digests                 any edit of it (an import path moved) changes them; the pages are digested themselves
    three absolute paths      the temporary folder, the package's folder and the COCO folder, as `<work>`,
                              `<convswap>` and `<coco>` (the tables and the site name where they read from)
    a number's last digits    every decimal of a text output to 8 significant digits: numpy's float64 exp
                              and log take other instructions where the processor has AVX-512 (its
                              X86_V4 dispatch) than where it has AVX2 alone, and a log-softmax over a
                              vocabulary differs in its last bits between them; no table prints 8 digits

What the demo and the viewer print is digested too, as `<stdout>` and `<view stdout>`.

    python scripts/demo_digest.py                      # print the digests
    python scripts/demo_digest.py > tests/data/demo_digest.txt
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import convswap

REPO_ROOT = Path(__file__).resolve().parents[1]
COCO_MINI = REPO_ROOT.parent / "shared" / "assets" / "coco" / "coco-mini"
LIMIT = 6
TIMESTAMP = re.compile(rb'"timestamp":"[^"]*"')
LOCK_SUFFIX = ".lock"
FIGURE_INPUTS = ".figure-inputs.json"
# A decimal of 9 or more significant digits, not inside a word, a hash or a dotted version.
DECIMAL = re.compile(rb"(?<![\w.])-?(?=(?:0\.0*)?[1-9](?:\.?\d){8})\d+\.\d+(?:[eE][-+]?\d+)?(?![\w.])")
TEXT_SUFFIXES = (".jsonl", ".json", ".js", ".csv", ".md", ".html", ".tex")


def convswap_command(arguments: list[str], cwd: Path) -> bytes:
    """stdout of `convswap ARGUMENTS`, run from `cwd` (so that no ./analysis_plan there is read), no plan folder
    from the environment and no record cache."""
    environ = {name: value for name, value in os.environ.items() if name != "CONVSWAP_PLAN_DIR"}
    environ["CONVSWAP_RECORD_CACHE"] = "off"
    done = subprocess.run([sys.executable, "-m", "convswap", *arguments], cwd=cwd, env=environ, capture_output=True)
    if done.returncode != 0:
        sys.exit(f"convswap {' '.join(arguments)} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return done.stdout


def rounded(data: bytes) -> bytes:
    """Every decimal of more than 8 significant digits written to 8."""
    return DECIMAL.sub(lambda found: format(float(found[0]), ".8g").encode(), data)


def normalized(data: bytes, path: Path, places: dict[str, Path]) -> bytes:
    if path.name.endswith(LOCK_SUFFIX):
        return b"<pid>"
    if path.name == FIGURE_INPUTS:
        return json.dumps(dict.fromkeys(json.loads(data), "<inputs and code>"), indent=1).encode()
    data = TIMESTAMP.sub(b'"timestamp":"<time>"', data) if path.suffix == ".jsonl" else data
    data = rounded(data) if path.suffix in TEXT_SUFFIXES else data
    # The longest path first: one may lie inside another.
    for name, place in sorted(places.items(), key=lambda item: -len(str(item[1]))):
        data = data.replace(str(place).encode(), f"<{name}>".encode())
    return data


def digests(coco: Path, limit: int) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="convswap-demo-digest-") as temporary:
        work = Path(temporary)
        out = work / "demo"
        places = {"work": work, "convswap": Path(convswap.__file__).resolve().parent, "coco": coco.resolve()}
        printed = convswap_command(["demo", "--out", str(out), "--limit", str(limit), "--coco", str(coco)], work)
        viewed = convswap_command(["view", str(out), "--out", str(work / "site")], work)
        lines = [
            f"{hashlib.sha256(normalized(printed, Path('stdout'), places)).hexdigest()}  <stdout>",
            f"{hashlib.sha256(normalized(viewed, Path('stdout'), places)).hexdigest()}  <view stdout>",
        ]
        for path in sorted(p for p in work.rglob("*") if p.is_file()):
            digest = hashlib.sha256(normalized(path.read_bytes(), path, places)).hexdigest()
            lines.append(f"{digest}  {path.relative_to(work).as_posix()}")
        return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coco", type=Path, default=COCO_MINI, help=f"COCO folder (default: {COCO_MINI})")
    parser.add_argument("--limit", type=int, default=LIMIT, help=f"the demo's --limit (default: {LIMIT})")
    args = parser.parse_args()
    print("\n".join(digests(args.coco, args.limit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
