"""The demo writes the same records, tables, figures and site, byte for byte, as the code the digests were taken on.

tests/data/demo_digest.txt is `python scripts/demo_digest.py` on that code; a change meant to change no result
must leave every digest as it is.  A change that means to change results rewrites the file, and its diff names
every output that changed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # tiny transformers models or whole runs: see the README's fast tier

REPO = Path(__file__).resolve().parents[1]
RECORDED = Path(__file__).parent / "data" / "demo_digest.txt"


def outputs(listing: str) -> dict[str, str]:
    """path -> sha256 of a digest listing."""
    return {path: digest for digest, path in (line.split("  ", 1) for line in listing.splitlines())}


def test_the_demo_writes_what_it_wrote_when_the_digests_were_taken(coco_images, tmp_path):
    # The photographs from a folder of another name: what is written must not depend on where they are kept.
    coco = tmp_path / "photographs-kept-elsewhere"
    shutil.copytree(coco_images.parent, coco)
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "demo_digest.py"), "--coco", str(coco)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    now, then = outputs(done.stdout), outputs(RECORDED.read_text(encoding="utf-8"))
    assert sorted(now.keys() - then.keys()) == [], "written now, not then"
    assert sorted(then.keys() - now.keys()) == [], "written then, not now"
    assert sorted(path for path in now if now[path] != then[path]) == [], "written otherwise"
