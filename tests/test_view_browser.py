"""`convswap view` in headless Chromium: the site built from the demo's logs, clicked through and filtered.

Every expected figure is read from the JSONL files as plain JSON (view_support),
never from the viewer's own data; which records fail the audit, from the audit's own code.  One screenshot of each page kind is written
under the test's temporary folder.
"""

from __future__ import annotations

import json
import shutil
from urllib.parse import quote

import pytest
from demo_support import demo_of_fixture  # noqa: F401 (the fixture demo_of, shared)
from view_support import (
    LOW_MASS,
    PLANTED_LOG,
    SCRIPT_OUTPUT,
    Planted,
    count,
    disagree,
    log_records,
    mass_under,
    plant,
)

from convswap.audits.log_audit import audit_folder
from convswap.cli import main

pytestmark = pytest.mark.slow  # tiny transformers models, browsers or subprocess runs: see the README's fast tier


@pytest.fixture(scope="session")
def planted(tmp_path_factory, demo_of, coco_annotations) -> Planted:
    logs = tmp_path_factory.mktemp("view") / "logs"
    shutil.copytree(demo_of(coco_annotations.parent.parent, limit=6).out, logs)  # the demo test reads it unplanted
    return plant(logs)


@pytest.fixture(scope="session")
def site(planted, tmp_path_factory):
    out = tmp_path_factory.mktemp("view") / "site"
    assert main(["view", str(planted.logs), "--out", str(out)]) == 0
    return out


@pytest.fixture
def page(browser):
    opened = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    fetched: list[str] = []
    opened.on("request", lambda request: fetched.append(request.url))
    yield opened
    opened.close()
    assert not errors, f"script errors on the page: {errors}"
    # Self-contained: every page, script, data file and image comes from the site folder.
    assert fetched and all(address.startswith("file://") for address in fetched), fetched


def url(site, name: str) -> str:
    return (site / name).as_uri()


def run_row(page, experiment: str, condition: str, task: str | None = None):
    rows = page.locator("#runs tr.run").filter(has_text=experiment)
    rows = rows.filter(has=page.locator(f"td:text-is('{condition}')"))
    return rows.filter(has=page.locator(f"td:text-is('{task}')")) if task else rows.first


def image_loaded(page, selector: str) -> bool:
    return page.eval_on_selector(selector, "image => image.complete && image.naturalWidth > 0")


def records_count(page) -> tuple[int, int]:
    return int(page.inner_text("#count")), int(page.inner_text("#total"))


def right(record) -> bool:
    return record["answer_slot"] is not None and record["correct"].get("target", record["correct"].get("coord"))


def test_index_lists_every_run_with_its_counts_the_audit_and_the_tables(page, site, planted, tmp_path):
    logs = log_records(planted.logs)
    page.goto(url(site, "index.html"))
    groups = {(key, record["task"], record["readout"]) for key, records in logs.items() for record in records}
    assert page.locator("#runs tr.run").count() == len(groups)
    for (experiment, model, condition), task, readout in groups:
        records = [r for r in logs[experiment, model, condition] if (r["task"], r["readout"]) == (task, readout)]
        row = run_row(page, experiment, condition, task).filter(has_text=model.replace("sim-", "sim:"))
        row = row.filter(has=page.locator(f"td:text-is('{readout}')"))
        cells = row.locator("td").all_inner_texts()
        # Accuracy per task and readout, against the K of its own trials: never pooled across chance rates.
        assert {len(r["slots"]) for r in records} == {int(cells[5])}
        assert int(cells[6]) == len(records)
        scored = count(records, lambda record: record["answer_slot"] is not None)
        assert int(cells[7]) == scored
        correct = count(records, right)
        assert cells[9] == (f"{100 * correct / scored:.1f}% ({correct}/{scored})" if scored else "–")
    planted_row = run_row(page, "color_ladder", "visible", "color").filter(has_text="generate")
    assert "unparseable 1" in planted_row.locator("td").nth(8).inner_text()
    checks = page.locator("#audit tr.check")
    assert checks.count() == 11
    verdicts = dict(zip(checks.locator("td:first-child").all_inner_texts(),
                        checks.locator("td.verdict").all_inner_texts(), strict=True))  # fmt: skip
    assert verdicts["prompt-target"] == "FAIL" and verdicts["derangement"] == "pass"
    assert verdicts["ties"] == "pass (fails over 1%)"
    assert page.locator("#tables a", has_text="table1_color_ladder.md").count() == 1
    assert image_loaded(page, "#tables img[alt='figure1_locate.png']")
    page.screenshot(path=tmp_path / "index.png", full_page=True)


def test_click_from_index_to_run_to_trial(page, site, planted, tmp_path):
    records = log_records(planted.logs)[("coco_locate_identify", "sim-qwen3vl-like", "visible")]
    page.goto(url(site, "index.html"))
    run_row(page, "coco_locate_identify", "visible", "locate").first.locator("a").click()
    page.wait_for_selector("#records tbody tr")
    # The row's link opens the run at its task.
    located = [r for r in records if r["task"] == "locate"]
    assert records_count(page) == (len(located), len(records))
    assert page.locator("#records tbody tr").count() == min(100, len(located))
    page.select_option("select[name=convention]", "pixels")
    wanted = [r for r in records if r["convention"] == "pixels" and r["task"] == "locate"]
    assert records_count(page) == (len(wanted), len(records))
    assert page.locator("#records tbody tr td.convention").all_inner_texts() == ["pixels"] * len(wanted)
    page.screenshot(path=tmp_path / "run.png", full_page=True)

    first = wanted[0]
    page.locator("a.trial-link", has_text=first["trial_id"]).first.click()
    page.wait_for_selector(".card")
    same_trial = [r for r in records if r["trial_id"] == first["trial_id"]]
    assert page.locator(".card h3").all_inner_texts() == [r["convention"] for r in same_trial]
    card = page.locator("[id='visible/pixels']")
    assert "selected" in card.get_attribute("class")
    assert card.locator("pre.prompt").inner_text() == first["prompt"]
    options = card.locator("table.options tr").all_inner_texts()[1:]
    assert [line.split("\t")[:3] for line in options] == [
        [str(slot), answer, referent]
        for slot, (answer, referent) in enumerate(zip(first["alphabet"], first["slots"], strict=True), start=1)
    ]
    target_row = card.locator("table.options tr").nth(first["keys"]["target"])
    assert target_row.locator(".key").all_inner_texts() == ["target"]
    assert card.locator(".candidate-mass").inner_text() == f"{first['first_token']['candidate_mass']:.3f}"
    assert image_loaded(page, "img.stimulus")
    assert page.inner_text(".image-check [data-verdict]") == "re-rendered pixels match the logged hash"
    assert f"outlined: {first['trial']['cell']}" in page.inner_text(".image-check")
    page.screenshot(path=tmp_path / "trial.png", full_page=True)


def test_filters_match_counts_read_from_the_logs(page, site, planted):
    records = log_records(planted.logs)[("color_ladder", "sim-qwen3vl-like", "visible")] + \
        log_records(planted.logs)[("color_ladder", "sim-qwen3vl-like", "cached")]  # fmt: skip
    page.goto(url(site, "index.html"))
    run_row(page, "color_ladder", "cached").locator("a").click()
    page.wait_for_selector("#records tbody tr")
    cached = count(records, lambda record: record["condition"] == "cached")
    assert records_count(page) == (cached, len(records))
    page.select_option("select[name=condition]", "")
    assert records_count(page) == (len(records), len(records))
    page.select_option("select[name=outcome]", "unscored")
    assert records_count(page) == (1, len(records))
    assert page.inner_text("#records tbody a.trial-link") == planted.script["trial_id"]
    page.select_option("select[name=outcome]", "incorrect")
    wrong = count(records, lambda r: r["answer_slot"] is not None and not r["correct"]["target"])
    assert records_count(page) == (wrong, len(records))
    # A text run offers its own outcomes, each once, in the order of the one list pixel answers share.
    offered = page.locator("select[name=outcome] option").all_inner_texts()
    assert offered == ["all", "unscored", "incorrect", "correct"]
    page.select_option("select[name=outcome]", "")
    page.check("input[name=disagree]")
    assert records_count(page) == (count(records, disagree), len(records)) and count(records, disagree) >= 1
    page.uncheck("input[name=disagree]")
    for threshold in ("0.5", "0.9905"):
        page.fill("input[name=mass]", threshold)
        assert records_count(page) == (count(records, mass_under(float(threshold))), len(records))
    page.fill("input[name=mass]", "")
    page.check("input[name=audit]")
    _, results = audit_folder(planted.logs)
    failing = {(f.record.trial_id, f.record.condition, f.record.convention) for result in results
               for f in result.failures if f.record.experiment == "color_ladder"}  # fmt: skip
    assert records_count(page) == (len(failing), len(records))
    assert planted.moved_key["trial_id"] in page.locator("#records tbody a.trial-link").all_inner_texts()
    # The filter is in the address, so the filtered list has a link of its own.
    page.reload()
    page.wait_for_selector("#records tbody tr")
    assert page.is_checked("input[name=audit]") and records_count(page) == (len(failing), len(records))


def trial_page(page, site, planted, record) -> None:
    page.goto(url(site, "index.html"))
    run_row(page, "color_ladder", "visible").locator("a").click()
    page.wait_for_selector("#records tbody tr")
    page.locator("a.trial-link", has_text=record["trial_id"]).first.click()
    page.wait_for_selector(".card")


def test_model_output_with_markup_is_shown_as_text_and_never_run(page, site, planted):
    trial_page(page, site, planted, planted.script)
    card = page.locator(f"[id='visible/{planted.script['convention']}']")
    assert card.locator("pre.generated").inner_text() == SCRIPT_OUTPUT
    assert page.evaluate("window.convswapPwned") is None
    assert page.locator("#injected").count() == 0 and page.locator(".card img").count() == 0
    assert card.locator(".outcome-unscored").inner_text() == "unscored"
    assert "parse unparseable" in card.inner_text()


def test_audit_failures_are_marked_on_the_records_that_cause_them(page, site, planted):
    trial_page(page, site, planted, planted.moved_key)
    card = page.locator(f"[id='visible/{planted.moved_key['convention']}']")
    assert "audit prompt-target:" in card.locator("ul.failures").inner_text()
    others = page.locator(".card").filter(has_not=page.locator("ul.failures"))
    assert others.count() == page.locator(".card").count() - 1


def test_an_image_whose_pixels_differ_from_the_logged_hash_is_warned_about(page, site, planted, tmp_path):
    trial_page(page, site, planted, planted.bad_hash)
    verdicts = page.locator(".image-check [data-verdict]")
    assert sorted(verdicts.evaluate_all("nodes => nodes.map(node => node.dataset.verdict)")) == ["match", "mismatch"]
    warning = page.locator(".warning[data-verdict=mismatch]")
    assert warning.is_visible() and "not the image the model saw" in warning.inner_text()
    assert f"outlined: {planted.bad_hash['trial']['subject']}" in page.inner_text(".trial-head")


def test_low_candidate_mass_and_disagreeing_readouts_are_shown(page, site, planted):
    trial_page(page, site, planted, planted.low_mass)
    card = page.locator(f"[id='visible/{planted.low_mass['convention']}']")
    assert card.locator(".candidate-mass.low-mass").inner_text() == f"{LOW_MASS:.3f}"
    assert "disagrees with the generation" in card.inner_text()
    # Every candidate as logged, the least likely among them (under 1e-4) included.
    top = planted.low_mass["first_token"]["top"]
    assert any(token["prob"] < 1e-4 for token in top)
    shown = [row.split("\t") for row in card.locator("table.top-tokens tr").all_inner_texts()[1:]]
    assert shown == [[json.dumps(t["text"], ensure_ascii=False), str(t["token_id"]), f"{t['prob']:.4f}"] for t in top]


def test_a_record_permalink_opens_its_trial_at_that_record(page, site, planted):
    record = planted.low_mass
    page.goto(url(site, "index.html"))
    run_row(page, "color_ladder", "visible").locator("a").click()
    page.wait_for_selector("#records tbody tr")
    href = page.locator("a.trial-link", has_text=record["trial_id"]).first.get_attribute("href")
    assert href.endswith("#" + quote(f"visible/{record['convention']}", safe=""))
    page.goto(f"{site.as_uri()}/{href}")
    page.wait_for_selector(".card.selected")
    assert page.locator(".card.selected h3").inner_text() == record["convention"]
    assert PLANTED_LOG.parts[0] in page.inner_text("#title")


@pytest.fixture(scope="session")
def grid4_site(tmp_path_factory, coco_annotations):
    """A 4x4 COCO run, whose cell names ("upper-middle center-right") are the longest referents a card shows."""
    root = tmp_path_factory.mktemp("grid4")
    assert main(["run", "coco_4x4", "--model", "sim:qwen3vl-like", "--coco", str(coco_annotations.parent.parent),
                 "--limit", "2", "--out", str(root / "logs")]) == 0  # fmt: skip
    assert main(["view", str(root / "logs"), "--out", str(root / "site")]) == 0
    return root / "site"


# Measured in the DOM: every word of a card's table cells and key badges, and the lines each cell's text takes.
LAYOUT = """() => {
  const tops = (range) => new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
  const split = [];
  for (const cell of document.querySelectorAll(".card td, .card .key")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.textContent.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        if (tops(range).size > 1) split.push(word[0]);
      }
    }
  }
  const lines = [...document.querySelectorAll(".card table.options tr td:nth-child(3)")].map((cell) => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    return [cell.innerText, tops(range).size];
  });
  const cards = [...document.querySelectorAll(".card")].map((card) => card.scrollWidth - card.clientWidth);
  const page = document.documentElement.scrollWidth - document.documentElement.clientWidth;
  return { split, lines, cards, page };
}"""


def in_view(page, selector: str) -> dict:
    return page.eval_on_selector(selector, """(node) => {
      const box = node.getBoundingClientRect();
      return { left: box.left, right: box.right, width: window.innerWidth };
    }""")  # fmt: skip


@pytest.mark.parametrize("width", [1400, 1000, 700])
def test_trial_cards_break_only_between_words_and_fit_the_page(browser, grid4_site, tmp_path, width):
    page = browser.new_page(viewport={"width": width, "height": 900})
    try:
        page.goto(url(grid4_site, "index.html"))
        run_row(page, "coco_4x4", "visible").locator("a").click()
        page.wait_for_selector("#records tbody tr")
        page.locator("a.trial-link").first.click()
        page.wait_for_selector(".card")
        cards = page.locator(".card")
        assert cards.count() >= 2
        measured = page.evaluate(LAYOUT)
        assert measured["split"] == []  # no "targ|et", "coo|rd", "10.00|0", "upper-|middle"
        names = [(text, lines) for text, lines in measured["lines"] if " " in text]
        assert names and max(lines for _, lines in names) <= 2, names
        assert measured["page"] <= 0 and max(measured["cards"]) <= 0, measured
        page.screenshot(path=tmp_path / f"cards-{width}.png", full_page=True)

        # A permalink to the last card shows it, and the card before it, whole across the page.
        last = cards.nth(cards.count() - 1).get_attribute("id")
        previous = cards.nth(cards.count() - 2).get_attribute("id")
        page.goto(page.url.split("#")[0] + "#" + quote(last, safe=""))
        page.reload()
        page.wait_for_selector(".card.selected")
        assert page.locator(".card.selected").get_attribute("id") == last
        for name in (last, previous):
            box = in_view(page, f"[id='{name}']")
            assert 0 <= box["left"] and box["right"] <= box["width"], (name, box)
    finally:
        page.close()
