"""The README's picture of the HTML report (figures/report.png): three fixture models analysed
with the package, `asa-analyze report` of their results, opened in headless Chromium
(python/tests/cdp.py), layer 2 head 2 of the second grid clicked, a screenshot.

    python tools/report_screenshot.py figures/report.png   (needs the package and chromium)
"""
import subprocess, sys, tempfile
from pathlib import Path
sys.path.insert(0, "python/tests")
import cdp
import asa_analyze as asa  # the package built from this checkout
root = Path(".").resolve()
tmp = Path(tempfile.mkdtemp())
res = asa.analyze({"softmax": "tests/fixtures/models/llama_gqa", "sink": "tests/fixtures/models/sink",
                   "affine_scaled": "tests/fixtures/models/affine_scaled"}, seq_len=64, num_seqs=4, progress=False)
res.write(tmp / "results")
subprocess.run(["target/release/asa-analyze", "report", str(tmp / "results"), "--out", str(tmp / "report.html"), "--quiet"], check=True)
b = cdp.Browser()
b.open((tmp / "report.html").as_uri())
b.wait_for("document.body.dataset.ready")
x, y = b.eval("""(() => { const div = document.querySelectorAll('.grid')[1]; const c = echarts.getInstanceByDom(div);
  const [x, y] = c.convertToPixel({seriesIndex: 0}, [1, 1]); const box = div.getBoundingClientRect(); return [box.left + x, box.top + y]; })()""")
b.click(x, y)
b.wait_for("document.body.dataset.selected === '2/2'")
b.pump(0.5)
b.mouse("mouseMoved", 5, 5)
b.pump(0.3)
b.screenshot(sys.argv[1])
b.close()
