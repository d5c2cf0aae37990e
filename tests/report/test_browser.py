"""The run report in a real headless Chromium: curves and advantages render, a click on a
turn highlights its GiGPO step group, and a screenshot is saved.

Driven by Selenium with Debian's chromedriver (package chromium-driver), which is built
from the same source as /usr/bin/chromium, so driver and browser versions always match
and nothing is downloaded. Without a browser the test skips and says how to get one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cairn.report.html import build_report, read_payload

CHROMIUM = os.environ.get("CAIRN_CHROMIUM", "/usr/bin/chromium")
DRIVER = os.environ.get("CAIRN_CHROMEDRIVER", "/usr/bin/chromedriver")
HOW = "apt-get install chromium chromium-driver; pip install selenium"


def _browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason=f"selenium missing ({HOW})")
    for path in (CHROMIUM, DRIVER):
        if not (Path(path).exists() or shutil.which(path)):
            pytest.skip(f"{path} not found: no headless Chromium here ({HOW})")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1600",
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(DRIVER), options=opts)


@pytest.fixture(scope="module")
def driver():
    """One headless Chromium for the module (starting it is most of the test's time)."""
    drv = _browser()
    yield drv
    drv.quit()


def test_report_renders_and_a_click_highlights_the_step_group(driver, tiny_run, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = build_report(tiny_run[0], tmp_path / "report.html")
    data = read_payload(page)
    group = data["iterations"][-1]["groups"][0]
    first = group["episodes"][0]["steps"][0]
    same = sum(s["a"] == first["a"] for e in group["episodes"] for s in e["steps"])
    assert same >= 4  # every episode's first turn at least: one start state per group

    driver.get(page.as_uri())
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script("return document.body.dataset.ready === '1'")
    )
    logs = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not logs, logs
    lines = driver.find_elements(By.CSS_SELECTOR, "#curve-grid svg polyline.series")
    assert len(lines) >= 6 and all(ln.get_attribute("points") for ln in lines[:6])
    turns = driver.find_elements(By.CSS_SELECTOR, '.turn[data-grp="0"]')
    assert len(turns) == sum(len(e["steps"]) for e in group["episodes"])
    cell = turns[0]
    assert float(cell.get_attribute("data-adv")) == first["A"]
    assert cell.value_of_css_property("background-color") != "rgba(235, 235, 235, 1)"
    assert f"advantage A = {first['A']}" in cell.get_attribute("title")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    cell.click()
    lit = driver.find_elements(By.CSS_SELECTOR, ".turn.same")
    assert len(lit) == same
    assert {c.get_attribute("data-anc") for c in lit} == {str(first["a"])}
    assert "sel" in cell.get_attribute("class")
    detail = driver.find_element(By.ID, "detail")
    assert detail.is_displayed() and f"{same} turns" in detail.text
    prompt = detail.find_element(By.CSS_SELECTOR, "details.prompt")  # what the model saw
    assert prompt.get_attribute("open") is None and "prompt the model saw" in prompt.text
    shot = tmp_path / "report.png"
    driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 20_000
    search = driver.find_element(By.ID, "f-search")
    search.send_keys(data["strings"][first["x"]])  # the first turn's action text
    assert driver.find_elements(By.CSS_SELECTOR, ".turn.hit")
    for row in driver.find_elements(By.CSS_SELECTOR, ".episode:not(.hidden)"):
        assert row.find_elements(By.CSS_SELECTOR, ".turn.hit")
    search.clear()
    driver.execute_script("arguments[0].dispatchEvent(new Event('input'))", search)
    driver.find_element(By.ID, "f-success").send_keys("failure")
    n_fail = sum(not e["success"] for g in data["iterations"][-1]["groups"] for e in g["episodes"])
    shown = driver.find_elements(By.CSS_SELECTOR, ".episode:not(.hidden)")
    assert len(shown) == n_fail


def test_compare_report_renders_without_errors(driver, tmp_path):
    from selenium.webdriver.common.by import By

    from cairn.report.html import compare_payload, render

    cfg = {
        "seeds": 2,
        "curves": [[[0, 0.0], [32, 0.5], [64, 0.9]], [[0, 0.1], [64, 0.7]]],
        "final_success": [0.9, 0.7],
        "final_success_ci95": 0.2,
    }
    page = tmp_path / "compare.html"
    page.write_text(render(compare_payload({"target": 0.8, "configs": {"a": cfg, "b": cfg}})))
    driver.get(page.as_uri())
    assert driver.execute_script("return document.body.dataset.ready") == "1"
    assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert len(driver.find_elements(By.CSS_SELECTOR, "#curve-grid .chart")) == 2
    assert len(driver.find_elements(By.CSS_SELECTOR, "#curve-grid polygon")) == 2  # bands
    rows = driver.find_elements(By.CSS_SELECTOR, "#table tr")
    assert len(rows) == 3 and "0.800 ± 0.200" in rows[1].text
    driver.save_screenshot(str(tmp_path / "compare.png"))
