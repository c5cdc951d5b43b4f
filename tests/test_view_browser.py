"""`convswap view` in headless Chromium: the site built from the demo's logs, clicked through and filtered.

Every expected figure is read from the JSONL files as plain JSON (view_support),
never from the viewer's own data; which records fail the audit, from the audit's own code.  One screenshot of each page kind is written
under the test's temporary folder.
"""

from __future__ import annotations

import shutil
from urllib.parse import quote

import pytest
from playwright.sync_api import sync_playwright
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
    run_demo,
)

from convswap.audits.log_audit import audit_folder
from convswap.cli import main

pytestmark = pytest.mark.slow  # tiny transformers models, browsers or subprocess runs: see the README's fast tier


@pytest.fixture(scope="session")
def planted(tmp_path_factory, coco_annotations) -> Planted:
    logs = tmp_path_factory.mktemp("view") / "logs"
    run_demo(logs, coco_annotations.parent.parent, limit=6)
    return plant(logs)


@pytest.fixture(scope="session")
def site(planted, tmp_path_factory):
    out = tmp_path_factory.mktemp("view") / "site"
    assert main(["view", str(planted.logs), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def browser():
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not installed (.ci/run installs Debian's chromium package)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()


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


def run_row(page, experiment: str, condition: str):
    rows = page.locator("#runs tr.run").filter(has_text=experiment)
    return rows.filter(has=page.locator(f"td:text-is('{condition}')"))


def image_loaded(page, selector: str) -> bool:
    return page.eval_on_selector(selector, "image => image.complete && image.naturalWidth > 0")


def records_count(page) -> tuple[int, int]:
    return int(page.inner_text("#count")), int(page.inner_text("#total"))


def test_index_lists_every_run_with_its_counts_the_audit_and_the_tables(page, site, planted, tmp_path):
    logs = log_records(planted.logs)
    page.goto(url(site, "index.html"))
    assert page.locator("#runs tr.run").count() == len(logs)
    for (experiment, model, condition), records in logs.items():
        row = run_row(page, experiment, condition).filter(has_text=model.replace("sim-", "sim:"))
        cells = row.locator("td").all_inner_texts()
        assert int(cells[3]) == len(records)
        scored = count(records, lambda record: record["answer_slot"] is not None)
        assert int(cells[4]) == scored
        correct = count(
            records,
            lambda record: (
                record["answer_slot"] is not None and record["correct"].get("target", record["correct"].get("coord"))
            ),
        )
        assert cells[6] == f"{100 * correct / scored:.1f}% ({correct}/{scored})"
    planted_row = run_row(page, "color_ladder", "visible").locator("td").all_inner_texts()
    assert planted_row[5] == "unparseable 1"
    checks = page.locator("#audit tr.check")
    assert checks.count() == 11
    verdicts = dict(zip(checks.locator("td:first-child").all_inner_texts(),
                        checks.locator("td.verdict").all_inner_texts(), strict=True))  # fmt: skip
    assert verdicts["prompt-target"] == "FAIL" and verdicts["derangement"] == "pass" and verdicts["ties"] == "pass"
    assert page.locator("#tables a", has_text="table1_color_ladder.md").count() == 1
    assert image_loaded(page, "#tables img[alt='figure1_locate.png']")
    page.screenshot(path=tmp_path / "index.png", full_page=True)


def test_click_from_index_to_run_to_trial(page, site, planted, tmp_path):
    records = log_records(planted.logs)[("coco_locate_identify", "sim-qwen3vl-like", "visible")]
    page.goto(url(site, "index.html"))
    run_row(page, "coco_locate_identify", "visible").locator("a").click()
    page.wait_for_selector("#records tbody tr")
    assert records_count(page) == (len(records), len(records))
    assert page.locator("#records tbody tr").count() == min(100, len(records))
    page.select_option("select[name=convention]", "pixels")
    page.select_option("select[name=task]", "locate")
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
    page.select_option("select[name=outcome]", "wrong")
    wrong = count(records, lambda r: r["answer_slot"] is not None and not r["correct"]["target"])
    assert records_count(page) == (wrong, len(records))
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
