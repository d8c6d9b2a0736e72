"""`asa-analyze report` in a real browser (issue 39): Debian's headless Chromium opens the page
from file:// with every request blocked and recorded (cdp.py). The grid has layers x heads
cells per model; hovering a cell shows the value of attention.csv (read here with polars);
clicking a head draws its charts; a model labelled with markup shows as text and runs
nothing; no console error, no request. Screenshots go to $ASA_REPORT_SCREENSHOTS (default
a temporary folder)."""

import json
import os
import subprocess
from pathlib import Path

import polars as pl
import pytest

import asa_analyze as asa

cdp = pytest.importorskip("cdp")
if cdp.chromium_path() is None:
    pytest.skip("no Chromium (CI installs Debian's chromium)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "models"
BIN = Path(os.environ.get("ASA_ANALYZE_BIN", ROOT / "target" / "release" / "asa-analyze"))
HOSTILE = "</script><img src=x onerror=\"window.__pwned=1\"><b>sink</b>"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    res = asa.analyze({HOSTILE: FIXTURES / "sink", "asa": FIXTURES / "affine_scaled"}, seq_len=64, num_seqs=4,
                      progress=False)
    res.write(tmp / "results")
    out = subprocess.run([str(BIN), "report", str(tmp / "results"), "--out", str(tmp / "report.html")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    browser = cdp.Browser()
    browser.open((tmp / "report.html").as_uri())
    browser.wait_for("document.body.dataset.ready")
    shots = Path(os.environ.get("ASA_REPORT_SCREENSHOTS", tmp / "screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    yield browser, tmp, shots
    browser.close()


def cell_centre(browser, model_index, layer, head):
    """The page coordinates of the grid cell (layer, head) of the model_index-th grid."""
    return browser.eval(f"""(() => {{
        const div = document.querySelectorAll('.grid')[{model_index}];
        const chart = echarts.getInstanceByDom(div);
        const [x, y] = chart.convertToPixel({{seriesIndex: 0}}, [{head - 1}, {layer - 1}]);
        const box = div.getBoundingClientRect();
        return [box.left + x, box.top + y];
    }})()""")


def test_the_grid_has_a_cell_per_layer_and_head_and_hover_shows_the_tables_value(page):
    browser, tmp, shots = page
    att = pl.read_csv(tmp / "results" / "attention.csv")
    per_head = att.filter((pl.col("metric") == "entropy") & (pl.col("stat") == "mean") & pl.col("head").is_not_null())
    browser.eval("(() => { const s = document.getElementById('metric'); s.value = 'entropy'; s.dispatchEvent(new Event('change')); return 1; })()")
    models = browser.eval("[...document.querySelectorAll('.grid')].map(d => d.dataset.model)")
    assert sorted(models) == sorted(per_head["model"].unique().to_list())
    for i, model in enumerate(models):
        want = per_head.filter(pl.col("model") == model)
        cells = browser.eval(f"echarts.getInstanceByDom(document.querySelectorAll('.grid')[{i}]).getOption().series[0].data.length")
        assert cells == want.height == want["layer"].max() * want["head"].max()
    # hover layer 2, head 3 of the second model: the tooltip shows attention.csv's value
    x, y = cell_centre(browser, 1, 2, 3)
    browser.mouse("mouseMoved", x, y)
    text = browser.wait_for("""[...document.querySelectorAll('.grid')[1].querySelectorAll('div')]
        .map(d => d.textContent).find(t => t.includes('head 3') && t.includes('entropy =')) || ''""")
    value = float(text.split("entropy = ")[1])
    want = per_head.filter((pl.col("model") == models[1]) & (pl.col("layer") == 2) & (pl.col("head") == 3))["value"][0]
    assert value == pytest.approx(want, rel=1e-7), text
    browser.screenshot(str(shots / "overview.png"))


def test_clicking_a_head_draws_its_charts_for_every_model(page):
    browser, _, shots = page
    x, y = cell_centre(browser, 0, 1, 2)
    browser.click(x, y)
    browser.wait_for("document.body.dataset.selected === '1/2'")
    browser.pump(0.5)
    columns = browser.eval("[...document.querySelectorAll('.model-column h3')].map(h => h.textContent)")
    assert sorted(columns) == sorted([HOSTILE, "asa"])
    # the charts' canvases hold drawing, not blank pixels
    inked = browser.eval("""[...document.querySelectorAll('#head-models canvas')].map(c => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] < 200 || d[i+1] < 200 || d[i+2] < 200) n++;
        return n; })""")
    assert inked and all(n > 100 for n in inked), inked
    print("head switch drawn in", browser.eval("document.getElementById('head').dataset.drawnMs"), "ms")
    browser.screenshot(str(shots / "head.png"))


def test_markup_in_labels_shows_as_text_and_nothing_runs_or_is_fetched(page):
    browser, _, _ = page
    assert browser.eval("window.__pwned === undefined")
    assert browser.eval("document.querySelectorAll('img, b').length") == 0
    assert HOSTILE in browser.eval("document.body.innerText")
    browser.pump(0.5)
    assert browser.requests == []
    assert browser.errors == []
    print("first view drawn in", browser.eval("document.body.dataset.ready"), "ms")


@pytest.mark.skipif(not os.environ.get("ASA_REPORT_DEMO"), reason="the demo's report: set ASA_REPORT_DEMO (CI does, after its demo run)")
def test_the_demos_report_draws_every_model_with_no_error_and_no_request(tmp_path):
    demo = Path(os.environ["ASA_REPORT_DEMO"])
    att = pl.read_csv(demo.parent / "results" / "attention" / "attention.csv")
    per_head = att.filter((pl.col("metric") == "entropy") & (pl.col("stat") == "mean") & pl.col("head").is_not_null())
    browser = cdp.Browser()
    try:
        browser.open(demo.resolve().as_uri())
        print("demo report: first view drawn in", browser.wait_for("document.body.dataset.ready"), "ms")
        browser.eval("(() => { const s = document.getElementById('metric'); s.value = 'entropy'; s.dispatchEvent(new Event('change')); return 1; })()")
        models = browser.eval("[...document.querySelectorAll('.grid')].map(d => d.dataset.model)")
        assert sorted(models) == sorted(per_head["model"].unique().to_list())
        for i, model in enumerate(models):
            cells = browser.eval(f"echarts.getInstanceByDom(document.querySelectorAll('.grid')[{i}]).getOption().series[0].data.length")
            assert cells == per_head.filter(pl.col("model") == model).height
        x, y = cell_centre(browser, 0, 1, 1)
        browser.click(x, y)
        browser.wait_for("document.body.dataset.selected === '1/1'")
        assert browser.eval("document.querySelectorAll('#head-models .model-column').length") == len(models)
        browser.pump(0.5)
        shots = Path(os.environ.get("ASA_REPORT_SCREENSHOTS", tmp_path))
        shots.mkdir(parents=True, exist_ok=True)
        browser.screenshot(str(shots / "demo-overview.png"))
        assert browser.requests == [] and browser.errors == []
    finally:
        browser.close()


def test_python_report_is_the_clis_page_and_shows_inline(page):
    _, tmp, _ = page
    rep = asa.report(tmp / "results", out=tmp / "py.html")
    assert (tmp / "py.html").read_text() == rep.html
    cli = (tmp / "report.html").read_text()
    # the same page but for the embedded data (the same tables, compressed alike)
    assert rep.html == cli
    inline = rep._repr_html_()
    assert inline.startswith("<iframe srcdoc=") and "<script" not in inline
