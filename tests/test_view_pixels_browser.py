"""`convswap view` of pixel answers in headless Chromium: the drawn image beside the source, the parse outlined,
the colour mask on demand, the outcome, both at full size on a click, and the filter by outcome.

Expected values are read from the JSONL records as plain JSON; the drawn image is checked against the kept file's
own pixels (the outline is drawn where the stored kept component is)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image
from pixel_support import observer_file, swap_request

from convswap.cli import main
from convswap.runs.runner import run_experiment

pytestmark = pytest.mark.slow  # a browser


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("view_pixels")
    model = f"sim:{observer_file(root / 'obs.toml', p_no_image=0.2, p_no_mark=0.15, jitter=0.3)}"
    run_experiment(swap_request(root / "runs", model, limit=8), progress=False)
    assert main(["view", str(root / "runs"), "--out", str(root / "site")]) == 0
    records = [json.loads(line) for path in (root / "runs").rglob("*.jsonl") for line in path.read_text().splitlines()]
    return root / "site", records


@pytest.fixture
def page(browser):
    opened = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    opened.close()
    assert not errors, f"script errors on the page: {errors}"


def loaded(card, selector: str) -> bool:
    return card.locator(selector).evaluate("image => image.complete && image.naturalWidth > 0")


def open_run(page, site: Path) -> None:
    """The run's page with every record shown: the index links each task's row to the page filtered to it."""
    page.goto((site / "index.html").as_uri())
    href = page.locator("#runs tr.run").filter(has_text="interface_swap").locator("a").first.get_attribute("href")
    page.goto(f"{(site / 'run.html').as_uri()}?{href.split('?')[1].split('&')[0]}")
    page.wait_for_selector("#records tbody tr")


# ProVisE's five outcomes in its precedence, with a text answer's unscored beside the three that are unscored.
ONE_LIST = ["generation_failure", "protocol_noncompliance", "parser_failure", "unscored", "incorrect", "correct"]


def outcome(record: dict) -> str:
    """A record's one outcome, read from its JSON: a pixel answer's own, a text answer's from its answer and key."""
    if "pixels" in record:
        return record["pixels"]["outcome"]
    if record["answer_slot"] is None:
        return "unscored"
    return "correct" if record["correct"]["target"] else "incorrect"


def test_the_run_page_offers_each_outcome_once_and_filters_by_it(page, built):
    site, records = built
    open_run(page, site)
    outcomes = Counter(map(outcome, records))
    assert outcomes["generation_failure"] and outcomes["protocol_noncompliance"] and outcomes["correct"]
    offered = page.locator("select[name=outcome] option").all_inner_texts()
    assert offered == ["all", *(name for name in ONE_LIST if outcomes[name])]
    for name, number in outcomes.items():
        page.select_option("select[name=outcome]", name)
        assert int(page.inner_text("#count")) == number
        assert set(page.locator("#records tbody td[class^=outcome-]").all_inner_texts()) == {name}


def test_a_pixel_answer_shows_its_drawing_beside_the_source_its_mask_on_demand_and_its_outcome(page, built, tmp_path):
    site, records = built
    record = next(r for r in records if r["convention"] == "point_marker" and r["pixels"]["outcome"] == "correct")
    open_run(page, site)
    page.locator("a.trial-link", has_text=record["trial_id"]).first.click()
    card = page.locator("[id='visible/point_marker']")
    card.wait_for()
    assert card.locator(".pixel-outcome").inner_text() == "correct"
    assert f"slot {record['parsed_slot']}" in card.locator(".pixel-facts").inner_text()
    assert loaded(card, "img.source") and loaded(card, "img.drawn")
    kept = [c for c in record["pixels"]["parse"]["components"] if c["kept"]]
    assert card.locator("table.components tr.kept").count() == len(kept) == 1
    assert card.locator("img.mask").is_hidden()
    card.locator("button.show-mask").click()
    assert card.locator("img.mask").is_visible() and loaded(card, "img.mask")
    # The drawn file outlines the kept mark where the record says it is: the outline colour around its bbox.
    drawn = Image.open(site / card.locator("img.drawn").get_attribute("src")).convert("RGB")
    scale = drawn.width / record["trial"]["width"]
    x, y, w, h = kept[0]["bbox"]
    ring = [drawn.getpixel((int((x + w / 2) * scale), max(int((y - 3) * scale), 0))),
            drawn.getpixel((int((x + w / 2) * scale), min(int((y + h + 3) * scale), drawn.height - 1)))]  # fmt: skip
    assert any(r > 200 and g > 170 and b < 80 for r, g, b in ring), ring
    page.screenshot(path=tmp_path / "pixel-trial.png", full_page=True)


def shown_at_full_size(dialog, selector: str) -> tuple[int, int]:
    """The image's own size, asserted to be the size it is shown at."""
    size = dialog.locator(selector).evaluate(
        "image => [image.complete, image.naturalWidth, image.naturalHeight, image.clientWidth, image.clientHeight]"
    )
    assert size[0] and size[1:3] == size[3:5], size
    return size[1], size[2]


@pytest.mark.parametrize("clicked", ["img.drawn", "img.source"])
def test_a_click_on_the_drawing_or_the_source_shows_both_at_full_size(page, built, clicked):
    site, records = built
    record = next(r for r in records if r["convention"] == "point_marker" and r["pixels"]["outcome"] == "correct")
    open_run(page, site)
    page.locator("a.trial-link", has_text=record["trial_id"]).first.click()
    card = page.locator("[id='visible/point_marker']")
    card.wait_for()
    assert card.locator("img.drawn").evaluate("image => image.clientWidth") < record["trial"]["width"]
    card.locator(clicked).click()
    dialog = page.locator("dialog.full-size[open]")
    dialog.wait_for()
    size = (record["trial"]["width"], record["trial"]["height"])
    assert shown_at_full_size(dialog, "img.full-drawn") == shown_at_full_size(dialog, "img.full-source") == size
    # The source shown is the photograph the model was shown, pixel for pixel.
    shown = Image.open(site / dialog.locator("img.full-source").get_attribute("src")).convert("RGB")
    with Image.open(record["trial"]["image"]["params"]["path"]) as photograph:
        assert shown.tobytes() == photograph.convert("RGB").tobytes()
    page.keyboard.press("Escape")
    # The dialog's close event, which removes it, is dispatched as a task of its own after the key's.
    page.locator("dialog.full-size").wait_for(state="detached", timeout=5000)
    assert page.locator("dialog.full-size").count() == 0


def test_a_generation_failure_shows_why_no_image_came_back(page, built):
    site, records = built
    record = next(r for r in records if "pixels" in r and r["pixels"]["outcome"] == "generation_failure")
    open_run(page, site)
    page.select_option("select[name=outcome]", "generation_failure")
    page.locator("a.trial-link", has_text=record["trial_id"]).first.click()
    card = page.locator(f"[id='visible/{record['convention']}']")
    card.wait_for()
    assert card.locator(".pixel-outcome").inner_text() == "generation_failure"
    assert "no image came back" in card.locator(".warning").inner_text()
    assert card.locator("img.drawn").count() == 0
