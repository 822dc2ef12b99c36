"""The generated report and asv's published site, looked at in a real browser.

Debian's Chromium (installed by .ci/run), driven by Playwright, with the network off: the
resolver maps every host but 127.0.0.1 to NOTFOUND, and every request that is not to the
local server is aborted and counted, so a page that needs the internet fails here. Both
pages are built in a temporary folder from the checked-in asv runs: the report by
`mhabench report` over the CPU run (tests/fixtures/asv_results) merged with the H200 run
(tests/fixtures/gpu_results), the site by `asv publish` of the CPU run followed by
mhabench.asvproject.asv_site.vendor_site, the same steps as the main job. Screenshots go to
$MHABENCH_ARTIFACTS (default artifacts/, not committed).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Route, sync_playwright

from mhabench.asvproject.asv_site import vendor_site
from mhabench.cli import main as mhabench_main
from mhabench.cluster.merge import merge

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "asv_results"
GPU_FIXTURE = Path(__file__).parent / "fixtures" / "gpu_results"
FIRST_SCREEN = {"width": 1400, "height": 900}  # the findings must fit in it
ARTIFACTS = Path(os.environ.get("MHABENCH_ARTIFACTS") or ROOT / "artifacts")
CHROMIUM = os.environ.get("MHABENCH_CHROMIUM") or shutil.which("chromium")
SWALLOW = "continental origin of swallow"  # asv's error.html: a script failed to load
# Playwright's default flags already turn off Chromium's background traffic (component
# updates, sync, safe browsing); these take the network away from the pages too.
OFFLINE_ARGS = ["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--disable-quic"]


def publish(results: Path, html: Path, home: Path) -> None:
    """`asv publish` of `results` into `html`, with a private HOME and this checkout as the
    repository (asv reads commit dates from it; the fixture's commit is in its history)."""
    conf = {"version": 1, "project": "mhabench", "project_url": "https://example.invalid/",
            "repo": str(ROOT), "dvcs": "git", "branches": ["HEAD"],
            "environment_type": "existing", "benchmark_dir": str(ROOT / "benchmarks"),
            "results_dir": str(results), "html_dir": str(html),
            "env_dir": str(home / "env")}
    (home / "asv.conf.json").write_text(json.dumps(conf))
    done = subprocess.run([sys.executable, "-m", "asv", "publish"], cwd=home, text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, "HOME": str(home)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (html / "index.html").is_file()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The report at /report.html, the vendored site at /site/, the site as asv publishes
    it at /bare/, served from 127.0.0.1 on a free port; yields (base URL, folder)."""
    root = tmp_path_factory.mktemp("browser")
    home = root / "home"
    home.mkdir()
    shutil.copytree(FIXTURE, root / "results")
    publish(root / "results", root / "site", home)
    shutil.copytree(root / "site", root / "bare")
    assert vendor_site(root / "site")  # the main job's step after asv publish
    shutil.copytree(FIXTURE, root / "both")  # a CPU machine and a GPU one, side by side
    merge(GPU_FIXTURE, root / "both")
    assert mhabench_main(["report", "--results", str(root / "both"),
                          "--out", str(root / "report.html")]) == 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=root))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM:
        message = "Chromium not found: apt-get install chromium (.ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=OFFLINE_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@dataclass
class Visit:
    """One page in its own browser context, with what it asked for and what went wrong."""

    page: Page
    local: list[str] = field(default_factory=list)     # requests to the local server
    external: list[str] = field(default_factory=list)  # any other request (aborted)
    errors: list[str] = field(default_factory=list)    # console errors, page errors, 4xx/5xx

    def check_offline_and_clean(self) -> None:
        assert self.local, "the page made no request to the local server"
        assert self.external == [], f"{len(self.external)} external requests: {self.external}"
        assert self.errors == []


@pytest.fixture
def visit(browser: Browser, served: tuple[str, Path]) -> Iterator[Visit]:
    base = served[0]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    visit = Visit(context.new_page())

    def route(route: Route) -> None:
        url = route.request.url
        if url.startswith(base + "/"):
            visit.local.append(url)
            route.continue_()
        else:
            visit.external.append(url)
            route.abort("internetdisconnected")

    context.route("**/*", route)
    page = visit.page
    page.on("console", lambda m: m.type == "error" and visit.errors.append(
        f"console: {m.text} ({m.location.get('url')})"))
    page.on("pageerror", lambda e: visit.errors.append(f"page error: {e}"))
    page.on("response", lambda r: r.status >= 400 and visit.errors.append(
        f"HTTP {r.status}: {r.url}"))
    try:
        yield visit
    finally:
        context.close()


def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def test_report_images_decode_and_every_section_is_in_the_toc(
        visit: Visit, served: tuple[str, Path]) -> None:
    base, root = served
    page = visit.page
    page.goto(f"{base}/report.html", wait_until="load")
    # decode() rejects for an image the browser cannot decode; naturalWidth is 0 for one
    # that did not load.
    images = page.eval_on_selector_all("img", """els => Promise.all(els.map(e => e.decode()
        .then(() => [e.alt, e.naturalWidth], () => [e.alt, 0])))""")
    assert len(images) == (root / "report.html").read_text().count("<img ") > 0
    assert [alt for alt, width in images if width <= 0] == []

    toc = page.eval_on_selector_all("nav a", "els => els.map(e => e.getAttribute('href'))")
    headed = page.eval_on_selector_all("section > h2", "els => els.map(e => e.parentNode.id)")
    assert headed and "" not in headed  # every section heading has an anchor
    assert [f"#{i}" for i in headed] == toc  # each linked, in the page's order, nothing else
    for href in toc:  # following the link brings the section into view
        page.click(f'nav a[href="{href}"]')
        page.wait_for_function("h => location.hash === h", arg=href)
        top = page.eval_on_selector(href, "e => e.getBoundingClientRect().top")
        assert -1 < top < page.viewport_size["height"], (href, top)  # subpixel scroll
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "report.png")
    visit.check_offline_and_clean()


def test_report_answers_on_the_first_screen(visit: Visit, served: tuple[str, Path]) -> None:
    """The findings are the first section and fit the first screen; each links to a section
    there is; no two lines of a plot share colour and marker; every <details> opens."""
    page = visit.page
    page.set_viewport_size(FIRST_SCREEN)
    page.goto(f"{served[0]}/report.html", wait_until="load")
    sid, top, bottom = page.eval_on_selector("section", """e => [e.id,
        e.getBoundingClientRect().top, e.getBoundingClientRect().bottom]""")
    assert sid == "findings" and 0 < top < bottom <= FIRST_SCREEN["height"], (top, bottom)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report-first-screen.png"))  # the first 900 px

    rows, targets = page.eval_on_selector("#findings", """e => [
        e.querySelectorAll('tbody tr').length,
        [...e.querySelectorAll('tbody tr th a')].map(a => a.getAttribute('href'))]""")
    assert rows == len(targets) >= 8
    missing = page.evaluate("""hs => hs.filter(h => !h.startsWith('#')
        || !document.getElementById(h.slice(1)))""", targets)
    assert missing == []

    styles = page.eval_on_selector_all("figure", """els => els.map(e => [
        e.querySelector('img').alt, e.dataset.style, JSON.parse(e.dataset.styles)])""")
    assert styles
    for title, kind, series in styles:
        assert len(series) and all(colour and marker for _, colour, marker in series), title
        drawn = [(colour, marker) for _, colour, marker in series]
        # stacked bars: one colour per component; lines and points: colour and marker
        keys = [c for c, _ in drawn] if kind == "stacked" else drawn
        assert len(set(keys)) == len(keys), (title, series)

    count = page.eval_on_selector_all("details", "els => els.length")
    assert count > 0
    for i in range(count):
        handle = page.query_selector_all("details")[i]
        handle.query_selector("summary").click()
        opened, height = handle.evaluate("e => [e.open, e.querySelector('table').offsetHeight]")
        assert opened and height > 0, i
    visit.check_offline_and_clean()


def test_asv_site_works_offline_and_lists_the_suite(visit: Visit,
                                                    served: tuple[str, Path]) -> None:
    base, root = served
    names = {k for k, v in json.loads((root / "results" / "benchmarks.json").read_text())
             .items() if isinstance(v, dict)}
    page = visit.page
    page.goto(f"{base}/site/index.html", wait_until="load")
    # A script that fails to load sends asv to error.html: wait for that or for the grid.
    page.wait_for_function("""() => location.pathname.endsWith('/error.html')
        || document.querySelector('#summarygrid-display a.benchmark-container')""")
    assert SWALLOW not in page.content(), visit.errors + visit.external
    assert page.url.endswith("/site/index.html")
    grid = page.eval_on_selector_all("#summarygrid-display a.benchmark-container",
                                     "els => els.map(e => e.getAttribute('href').slice(1))")
    assert sorted(grid) == sorted(names)
    screenshot(page, "asv-site.png")

    page.goto(f"{base}/site/index.html#summarylist")  # the sortable list (stupidtable)
    page.wait_for_selector("#summarylist-body table tbody tr")
    listed = page.eval_on_selector_all("#summarylist-body tbody tr td:first-child",
                                       "els => els.map(e => e.innerText.split(' ')[0])")
    assert set(listed) == names

    graph = sorted(n for n in names if ".time_" in n)[0]  # a benchmark's graph (flot)
    page.goto(f"{base}/site/index.html#{graph}")
    page.wait_for_selector("#main-graph canvas.flot-base")
    assert SWALLOW not in page.content()
    visit.check_offline_and_clean()


def test_site_as_asv_publishes_it_fails_offline(visit: Visit,
                                                served: tuple[str, Path]) -> None:
    """The harness really is offline: without vendor_site the page wants the CDNs, is
    refused, and lands on asv's error page."""
    page = visit.page
    page.goto(f"{served[0]}/bare/index.html")
    page.wait_for_url("**/bare/error.html")
    assert SWALLOW in page.content()
    assert any("code.jquery.com" in url for url in visit.external)
