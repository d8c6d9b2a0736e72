"""`asa-analyze report` in a real browser (issue 39): Debian's headless Chromium opens the page
from file:// with every request blocked and recorded (cdp.py). The grid has layers x heads
cells per model; hovering a cell shows the value of attention.csv (read here with polars);
clicking a head draws its charts; a model labelled with markup shows as text and runs
nothing; no console error, no request. The tokens view of a short run shades the text by
heatmap.csv's weights, and a corpus holding markup shows as text. A synthetic 256 x 256
block_map goes through the compact encoding: a head switch moves the map's dark pixels to
where the new head's mass is, and hovering a cell shows the table's value within the
stated quantisation error. Screenshots go to $ASA_REPORT_SCREENSHOTS (default a temporary
folder)."""

import json
import os
import re
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
    # issue 55: the models' charts of one profile share one y axis, which holds every value
    axes = browser.eval("""(() => { const out = {}; for (const d of document.querySelectorAll('#head-models [data-profile]')) {
        const o = echarts.getInstanceByDom(d).getOption();
        const ys = o.series[0].data.map(p => p[1]).filter(Number.isFinite);
        (out[d.dataset.profile] = out[d.dataset.profile] || []).push([o.yAxis[0].min, o.yAxis[0].max, Math.min(...ys), Math.max(...ys)]);
        } return out; })()""")
    assert "distance" in axes, axes
    for key, charts in axes.items():
        assert len(charts) == 2 and charts[0][:2] == charts[1][:2], (key, charts)
        lo, hi = charts[0][:2]
        assert all(lo <= c[2] and c[3] <= hi for c in charts) and hi > 0, (key, charts)
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


def test_the_tokens_view_shades_the_text_by_the_heatmaps_weights(tmp_path):
    # the CLI's analyze: tokens.csv comes with heatmap on windows of <= 2048 tokens
    res = tmp_path / "results"
    for label, fixture in (("asa", "affine_scaled"), ("sink", "sink")):
        out = subprocess.run([str(BIN), "analyze", f"{label}={FIXTURES / fixture}", "--seq-len", "64", "--num-seqs", "4",
                              "--out", str(tmp_path / label), "-q"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
    out = subprocess.run([str(BIN), "report", str(tmp_path / "asa"), str(tmp_path / "sink"), "--out", str(tmp_path / "r.html")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    heat = pl.concat([pl.read_csv(tmp_path / m / "heatmap.csv") for m in ("asa", "sink")])
    tokens = pl.concat([pl.read_csv(tmp_path / m / "tokens.csv") for m in ("asa", "sink")])
    browser = cdp.Browser()
    browser.open((tmp_path / "r.html").as_uri())
    browser.wait_for("document.body.dataset.ready")
    shots = Path(os.environ.get("ASA_REPORT_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    views = browser.eval("[...document.querySelectorAll('.tokens-model')].map(d => d.dataset.model)")
    assert sorted(views) == sorted(tokens["model"].unique().to_list())
    i = views.index("asa")
    # click token 10 of the second model's text: it becomes the query
    x, y = browser.eval(f"""(() => {{ const s = document.querySelectorAll('.tokens-model')[{i}].querySelectorAll('.token')[10];
        s.scrollIntoView(); const r = s.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }})()""")
    browser.click(x, y)
    shown = browser.eval(f"""[...document.querySelectorAll('.tokens-model')[{i}].querySelectorAll('.token')]
        .map(s => [s.textContent, s.dataset.weight, s.classList.contains('query')])""")
    mine = tokens.filter(pl.col("model") == "asa").sort("position")
    assert [t for t, _, _ in shown] == mine["text"].to_list()
    assert [q for _, _, q in shown].index(True) == 10
    want = heat.filter((pl.col("model") == "asa") & (pl.col("query") == 10)).sort("key")
    for k, (_, w, _) in enumerate(shown):
        if k <= 10:
            assert float(w) == pytest.approx(want["value"][k], rel=1e-9, abs=1e-15), k
        else:
            assert w == ""
    assert browser.requests == [] and browser.errors == []
    browser.screenshot(str(shots / "tokens.png"))
    browser.close()


WORDS = {"<unk>": 0, "<s>": 1, "</s>": 2, "<img": 3, "src=x": 4, 'onerror="window.__pwned=2">': 5, "attention": 6, "sinks": 7}


def test_a_corpus_holding_markup_shows_as_text_in_the_tokens_view(tmp_path):
    # a word-level tokenizer whose words are markup, so the tokens' texts are markup
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
           "model": {"type": "WordLevel", "vocab": WORDS, "unk_token": "<unk>"}}
    (tmp_path / "tokenizer.json").write_text(json.dumps(tok))
    (tmp_path / "corpus.txt").write_text('attention <img src=x onerror="window.__pwned=2"> sinks\n' * 20)
    out = subprocess.run([str(BIN), "analyze", f"m={FIXTURES / 'sink'}", "--corpus", str(tmp_path / "corpus.txt"),
                          "--tokenizer", str(tmp_path / "tokenizer.json"), "--seq-len", "24", "--num-seqs", "1",
                          "--out", str(tmp_path / "results"), "-q"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    out = subprocess.run([str(BIN), "report", str(tmp_path / "results"), "--out", str(tmp_path / "r.html")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    browser = cdp.Browser()
    try:
        browser.open((tmp_path / "r.html").as_uri())
        browser.wait_for("document.body.dataset.ready")
        browser.pump(0.5)
        text = browser.eval("document.querySelector('.tokens-text').textContent")
        assert '<img src=x onerror="window.__pwned=2">' in text, text
        assert browser.eval("window.__pwned === undefined")
        assert browser.eval("document.querySelectorAll('img').length") == 0
        assert browser.requests == [] and browser.errors == []
    finally:
        browser.close()


def synthetic_block_map(folder, g=256, t=4096):
    """A block_map.parquet of 2 layers x 2 heads (+ over heads) at G = 256: head 1's mass on
    a band of 8 blocks along the diagonal, head 2's on the first 8 key blocks, small varied
    values elsewhere; and an attention.csv giving the grid its cells."""
    edges = [b * t // g for b in range(g + 1)]
    rows = []
    for layer in (1, 2):
        for head in (1, 2, None):
            for a in range(g):
                for b in range(a + 1):
                    heavy = (a - b < 8) if head == 1 else (b < 8) if head == 2 else False
                    mean = 0.5 if heavy else 1e-4 * (1 + ((7 * a + 3 * b + layer) % 50) / 10)
                    for stat, v in (("mean", mean), ("max", min(1.0, 3 * mean))):
                        rows.append(("syn", layer, head, edges[a], edges[a + 1], edges[b], edges[b + 1], stat, v))
    cols = ["model", "layer", "head", "q_lo", "q_hi", "k_lo", "k_hi", "stat", "value"]
    pl.DataFrame(rows, schema=cols, orient="row").write_parquet(folder / "block_map.parquet")
    pl.DataFrame([("syn", "entropy", l, h, "mean", 1.0 + l + h / 10) for l in (1, 2) for h in (1, 2)],
                 schema=["model", "metric", "layer", "head", "stat", "value"], orient="row").write_csv(folder / "attention.csv")
    return edges


def map_pixel(browser, key, query):
    """The RGB of the block map's canvas at (key, query) positions, and its page coordinates."""
    return browser.eval(f"""(() => {{
        const div = document.querySelector('.chart.map'); const c = echarts.getInstanceByDom(div);
        const [x, y] = c.convertToPixel({{gridIndex: 0}}, [{key}, {query}]);
        const d = div.querySelector('canvas').getContext('2d').getImageData(Math.round(x), Math.round(y), 1, 1).data;
        const r = div.getBoundingClientRect();
        return [[d[0], d[1], d[2]], [r.left + x, r.top + y]]; }})()""")


def test_a_large_block_map_is_decoded_per_head_and_hover_is_within_its_error(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    edges = synthetic_block_map(folder)
    table = pl.read_parquet(folder / "block_map.parquet")
    out = subprocess.run([str(BIN), "report", str(folder), "--out", str(tmp_path / "r.html")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    browser = cdp.Browser()
    try:
        browser.open((tmp_path / "r.html").as_uri())
        browser.wait_for("document.body.dataset.ready")
        x, y = cell_centre(browser, 0, 2, 1)
        browser.click(x, y)
        browser.wait_for("document.body.dataset.selected === '2/1'")
        browser.eval("document.getElementById('head').scrollIntoView()")
        browser.pump(0.3)
        dark = lambda rgb: sum(rgb) < 450
        # head 1: dark along the diagonal, light at the first keys far below it
        diag, _ = map_pixel(browser, 2950, 3000)
        col0, _ = map_pixel(browser, 40, 3000)
        assert dark(diag) and not dark(col0), (diag, col0)
        x, y = cell_centre(browser, 0, 2, 2)
        browser.click(x, y)
        browser.wait_for("document.body.dataset.selected === '2/2'")
        browser.pump(0.3)
        diag, _ = map_pixel(browser, 2950, 3000)
        col0, _ = map_pixel(browser, 40, 3000)
        assert dark(col0) and not dark(diag), (diag, col0)
        # hover a light cell: the table's value within the stated error
        _, (hx, hy) = map_pixel(browser, 1000, 2500)
        browser.mouse("mouseMoved", hx, hy)
        text = browser.wait_for("document.querySelector('.map-hover').textContent")
        a, b = (int(v) for v in browser.eval("document.querySelector('.map-hover').dataset.cell").split("/"))
        assert edges[a] <= 2500 < edges[a + 1] and edges[b] <= 1000 < edges[b + 1]
        for stat in ("mean", "max"):
            got, err = re.search(stat + r" ≈ ([0-9.e+-]+) \(± ([0-9.]+) %\)", text).groups()
            want = table.filter((pl.col("layer") == 2) & (pl.col("head") == 2) & (pl.col("stat") == stat)
                                & (pl.col("q_lo") == edges[a]) & (pl.col("k_lo") == edges[b]))["value"][0]
            # the shown value has 4 significant digits: its rounding on top of the stated error
            assert abs(float(got) / want - 1) <= float(err) / 100 + 1e-3, (text, want)
        assert browser.requests == [] and browser.errors == []
        shots = Path(os.environ.get("ASA_REPORT_SCREENSHOTS", tmp_path))
        shots.mkdir(parents=True, exist_ok=True)
        browser.screenshot(str(shots / "block-map.png"))
    finally:
        browser.close()
