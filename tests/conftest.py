"""Shared test fixtures: the read-only assets in ../shared beside the checkout, and folders built once per run."""

from __future__ import annotations

import functools
import gc
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression
from filelock import FileLock

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
ASSETS = SHARED / "assets"
COCO_MINI = ASSETS / "coco" / "coco-mini"
COCO_ANNOTATIONS = COCO_MINI / "annotations" / "instances_val2017.json"
COCO_IMAGES = COCO_MINI / "val2017"
TOKENIZERS = ASSETS / "tokenizers"

# The tests speak plain HTTP to servers they start on 127.0.0.1 and to nothing else, so no client needs a trusted
# certificate; left to the environment, every API client the tests build (hundreds a run) would parse the system's
# whole CA bundle first.  SSL_CERT_FILE names one self-signed certificate whose key was thrown away: google-genai
# reads certifi's bundle unless SSL_CERT_FILE names a file, and a file must hold a certificate to load.  With none
# to trust, a stray HTTPS request would also fail.
os.environ["SSL_CERT_FILE"] = str(Path(__file__).parent / "data" / "untrusted-certificate.pem")
os.environ["SSL_CERT_DIR"] = str(Path(__file__).parent / "data" / "no-certificates")
# No record cache (convswap.analysis.record_cache) in the user's home, and none shared between tests: a test that
# patches how a record is read or checked must see its patch at work, not a reading an earlier test kept.  The
# cache's own tests name a folder of their own.
os.environ["CONVSWAP_RECORD_CACHE"] = "off"


SLOW_MODULE = re.compile(r"^pytestmark = pytest\.mark\.slow\s*(#.*)?$", re.M)


def leaves_out_slow(config: pytest.Config) -> bool:
    """Whether `-m` deselects the tests marked slow (the fast tier)."""
    expression = config.getoption("markexpr")
    return bool(expression) and not Expression.compile(expression).evaluate(lambda name, **kwargs: name == "slow")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A module marked slow as a whole is not even imported when `-m` leaves slow tests out.

    Importing those modules (torch and transformers, the batch clients, the browser) was most of what each worker of
    the fast tier spent before its first test; every test in them would be deselected anyway.
    """
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_") or not leaves_out_slow(config):
        return None
    return True if SLOW_MODULE.search(collection_path.read_text(encoding="utf-8")) else None


# The modules whose tests load real tokenizers and tiny models, or make torch's own bfloat16 numbers, importing
# transformers or torch with them: 3-4 CPU seconds in each process that does.
TRANSFORMERS_MODULES = frozenset({"test_audit_model.py", "test_calibration.py", "test_served_backend.py",
                                  "test_surfaces.py", "test_surfaces_first_token.py"})  # fmt: skip
# The modules whose tests share a folder `built_once` (runs of several experiments, a site): handed out one at a
# time, a test of theirs in the other worker waits on the build's lock, 1-3 s a module, where it could run others.
SHARED_BUILD_MODULES = frozenset({"test_audit_logs.py", "test_pixel_audit.py", "test_pixel_tables.py",
                                  "test_view.py", "test_analysis_check_numbers.py"})  # fmt: skip


# The real-engine tier: one vLLM server serves all of its tests, so they run in one process, first, beside the rest.
REAL_ENGINE_MODULE = "test_real_vllm.py"


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """In the fast tier under `-n`, the transformers modules run in one worker, which alone pays for the import, and
    each module of SHARED_BUILD_MODULES runs in one worker; every other test is handed out one at a time as by
    xdist's default.  With the slow tests every worker imports transformers anyway, and the whole suite ran slower
    with those modules kept together (508 s against 458 s, a run each), so every test is handed out alone but the
    real-engine tier's, which run in one worker: each worker would start a vLLM server of its own.
    (xdist's own `--dist loadgroup` relies on renaming test ids, which pytest 9 no longer allows.)"""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    fast = leaves_out_slow(config)

    class SharedWorkTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = _module(nodeid)
            if module == REAL_ENGINE_MODULE:
                return module
            if fast and module in TRANSFORMERS_MODULES:
                return "transformers"
            return module if fast and module in SHARED_BUILD_MODULES else nodeid

    return SharedWorkTogether(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The real-engine tier first (a minute of its server's start-up, then its tests), so that it does not run
    alone at the end of a run: a stable sort keeps every other test in its order."""
    items.sort(key=lambda item: _module(item.nodeid) != REAL_ENGINE_MODULE)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported and built lives until the session ends, so it is frozen out of the cyclic
    collector's passes; and a collection is run per 7,000 new objects instead of 700.  A worker holds scipy,
    matplotlib and every collected test (250,000 objects), torch and transformers too where it loads a processor:
    CPython's defaults ran the collector 2,500 times a worker, full passes over all of it about 10 times, 3.3 of
    the fast tier's 52 CPU s; 1.1 s with these."""
    gc.freeze()
    gc.set_threshold(7000, 10, 10)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Every object a test process still holds is frozen once the session is over, as `convswap` does before it
    exits: the interpreter's exit would otherwise run the cyclic collector over them all, torch's and
    transformers' included where a worker imported them (0.5 s of a process that only loaded a processor), while
    the controller waits for each worker to end before it ends the run."""
    gc.freeze()


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


BUILT_MARK = ".built"


@pytest.fixture(scope="session")
def built_once(tmp_path_factory) -> Callable[[str, Callable[[Path], object]], Path]:
    """`built_once(name, build)`: the folder `build(folder)` fills, built by the first test process that asks.

    Under xdist every worker's temporary folder lies in one folder of this run, so the first worker builds there
    under a file lock and the others read what it wrote; a build that failed halfway is done again.  Without
    xdist the folder is this session's own.  Tests read the folder and copy what they change.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = tmp_path_factory.getbasetemp().parent / "built"
        root.mkdir(exist_ok=True)
    else:
        root = tmp_path_factory.mktemp("built")

    def folder(name: str, build: Callable[[Path], object]) -> Path:
        target = root / name
        with FileLock(f"{target}.lock"):
            if not (target / BUILT_MARK).exists():
                shutil.rmtree(target, ignore_errors=True)
                target.mkdir()
                build(target)
                (target / BUILT_MARK).touch()
        return target

    return folder


@pytest.fixture(scope="session")
def vocabulary(built_once) -> Path:
    """The default simulated observer's calibrated vocabulary, saved once for every run test."""
    from runner_support import save_sim_vocabulary

    name = "qwen3vl-like.vocab.json"
    return built_once("vocabulary", lambda folder: save_sim_vocabulary(folder / name)) / name


@pytest.fixture(scope="session")
def tiny_model(built_once, qwen25_assets, smolvlm_assets):
    """`tiny_model(family)`: the folder of that family's plain tiny model, built once per run on first use."""
    from tiny_models import build_tiny

    @functools.cache
    def folder(family: str) -> Path:
        return (
            built_once(f"tiny-{family}", lambda root: build_tiny(family, root, tokenizers=qwen25_assets.parent))
            / family
        )

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


# One intra-op thread for torch (and the BLAS under numpy), in every test process and in the subprocesses the tests
# start, unless the environment says otherwise.  The tests' models are tiny: a second thread gains nothing on their
# matrices, and its spin-waits, on cores that xdist workers already share, cost about twice the CPU they save
# (the transformers modules took three times the CPU with two threads).  Set before any test module imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# OpenCV's own thread pool, which the protocol parser's operations run on, ignores OMP_NUM_THREADS.  Its second
# thread spin-waits in sched_yield (350,000 calls over the pixel run and parse tests alone): in one process it
# saved 1-2% of those tests' wall time for 5% more CPU, and beside a second worker it takes that worker's core.
os.environ.setdefault("OPENCV_FOR_THREADS_NUM", "1")
