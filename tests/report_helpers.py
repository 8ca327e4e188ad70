"""Open a `mazegym report` page in headless Chromium and check it renders: no errors, every image loaded."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

PROBE = """<script>
window.__errors = [];
window.addEventListener('error', function (e) {
  var src = e.target && e.target.src ? String(e.target.src).slice(0, 40) : '';
  window.__errors.push(e.message ? String(e.message) : 'failed to load ' + src);
}, true);
['error', 'warn'].forEach(function (level) {
  var original = console[level];
  console[level] = function () {
    window.__errors.push(level + ': ' + [].join.call(arguments, ' '));
    original.apply(console, arguments);
  };
});
window.addEventListener('load', function () {
  var images = [].slice.call(document.images);
  var broken = images.filter(function (i) { return !(i.complete && i.naturalWidth > 0); })
    .map(function (i) { return i.alt; });
  var out = document.createElement('pre');
  out.id = 'mazegym-probe';
  out.textContent = JSON.stringify({images: images.length, broken: broken, errors: window.__errors});
  document.body.appendChild(out);
});
</script>"""
"""Injected into a copy of the report (which has no script of its own): records errors, then checks every image."""


def chromium() -> str | None:
    """The Chromium (or Chrome) executable on PATH, if any."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def assert_renders_in_chromium(report: Path, workdir: Path) -> dict:
    """Load ``report`` in headless Chromium; assert no console output or errors and every <img> decoded."""
    page = report.read_text()
    probed = workdir / "probed.html"
    probed.write_text(page.replace("<head>", "<head>" + PROBE, 1))
    argv = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={workdir / 'profile'}",
        "--virtual-time-budget=10000",
        "--dump-dom",
        probed.as_uri(),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r'<pre id="mazegym-probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, "the page did not finish loading: " + proc.stderr[-2000:]
    probe = json.loads(html.unescape(found.group(1)))
    assert probe["images"] == page.count("<img "), probe
    assert probe["broken"] == [] and probe["errors"] == [], probe
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], "the page wrote to the console:\n" + "\n".join(console)
    return probe


NO_CHROMIUM = "no chromium on PATH: MAZEGYM_BROWSER=1 bash scripts/install.sh installs it with apt-get when run as root"
