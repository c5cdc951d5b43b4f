"""Shared test fixtures: the read-only assets in ../shared beside the checkout."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
ASSETS = SHARED / "assets"
COCO_MINI = ASSETS / "coco" / "coco-mini"
COCO_ANNOTATIONS = COCO_MINI / "annotations" / "instances_val2017.json"
COCO_IMAGES = COCO_MINI / "val2017"
TOKENIZERS = ASSETS / "tokenizers"


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"test asset missing: {path} (the tests expect ../shared beside the repository root)")
    return path


@pytest.fixture(scope="session")
def coco_annotations() -> Path:
    return _require(COCO_ANNOTATIONS)


@pytest.fixture(scope="session")
def coco_images() -> Path:
    return _require(COCO_IMAGES)


@pytest.fixture(scope="session")
def qwen25_assets() -> Path:
    return _require(TOKENIZERS / "qwen2_5_vl")


@pytest.fixture(scope="session")
def smolvlm_assets() -> Path:
    return _require(TOKENIZERS / "smolvlm_256m")


@pytest.fixture(scope="session")
def vocabulary(tmp_path_factory) -> Path:
    """The default simulated observer's calibrated vocabulary, saved once for every run test."""
    from runner_support import save_sim_vocabulary

    return save_sim_vocabulary(tmp_path_factory.mktemp("vocabulary") / "qwen3vl-like.vocab.json")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, qwen25_assets, smolvlm_assets):
    """`tiny_model(family)`: the folder of that family's plain tiny model, built once per session on first use."""
    from tiny_models import build_tiny

    root = tmp_path_factory.mktemp("tiny_models")

    @functools.cache
    def folder(family: str) -> Path:
        return build_tiny(family, root, tokenizers=qwen25_assets.parent)

    return folder


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium, one per test process: Playwright's sync API runs one instance in a process at a time."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not installed (.ci/run installs Debian's chromium package)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()
