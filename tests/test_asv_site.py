"""mhabench.asvproject.asv_site: the published asv site's CDN libraries served from vendor/ (fast
checks on asv's own page template and stand-in npm packages; tests/test_browser.py opens
the real thing with the network off)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import asv
import pytest

from mhabench.asvproject.asv_site import EXTRA_FILES, LIBRARIES, SiteError, main, vendor_site

ROOT = Path(__file__).resolve().parents[1]
ASV_WWW = Path(asv.__file__).parent / "www"


def fake_node_modules(folder: Path, skip: str = "", version: str = "") -> Path:
    """Every file LIBRARIES and EXTRA_FILES name, each holding its own path."""
    versions = {lib.package: lib.version for lib in LIBRARIES}
    for package, name in {(lib.package, lib.file) for lib in LIBRARIES} | set(EXTRA_FILES):
        if package == skip:
            continue
        (folder / package / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / package / name).write_text(f"/* {package}/{name} */\n")
        (folder / package / "package.json").write_text(
            json.dumps({"name": package, "version": version or versions[package]}))
    return folder


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """asv's page template as `asv publish` copies it, plus a stand-in results file."""
    shutil.copytree(ASV_WWW, tmp_path / "html")
    (tmp_path / "html" / "index.json").write_text('{"benchmarks": {}}')
    return tmp_path / "html"


def test_package_json_pins_the_libraries_the_code_serves() -> None:
    pinned = json.loads((ROOT / "package.json").read_text())["dependencies"]
    assert pinned == {lib.package: lib.version for lib in LIBRARIES}
    locked = json.loads((ROOT / "package-lock.json").read_text())["packages"]
    assert {p: locked[f"node_modules/{p}"]["version"] for p in pinned} == pinned


def test_every_cdn_address_is_replaced_once_and_a_rerun_changes_nothing(
        site: Path, tmp_path: Path) -> None:
    modules = fake_node_modules(tmp_path / "node_modules")
    before = {p.name: p.read_bytes() for p in site.iterdir() if p.is_file()}
    replaced = vendor_site(site, modules)
    assert sorted(replaced) == sorted(lib.url for lib in LIBRARIES)
    index = (site / "index.html").read_text()
    assert "https://cdn" not in index and "code.jquery.com" not in index
    assert 'href="vendor/bootstrap/dist/css/bootstrap.min.css"' in index
    for lib in LIBRARIES:
        assert (site / "vendor" / lib.package / lib.file).read_bytes() == \
            (modules / lib.package / lib.file).read_bytes()
    after = {p.name: p.read_bytes() for p in site.iterdir() if p.is_file()}
    assert {n for n in before if before[n] != after[n]} == {"index.html"}  # nothing else

    files = {p: p.read_bytes() for p in site.rglob("*") if p.is_file()}
    assert vendor_site(site, modules) == []
    assert {p: p.read_bytes() for p in site.rglob("*") if p.is_file()} == files


def test_integrity_kept_only_where_the_npm_file_has_the_cdn_bytes(tmp_path: Path) -> None:
    modules = fake_node_modules(tmp_path / "node_modules")
    jquery, md5 = LIBRARIES[0], next(lib for lib in LIBRARIES if lib.package == "blueimp-md5")
    digest = base64.b64encode(hashlib.sha256(
        (modules / jquery.package / jquery.file).read_bytes()).digest()).decode()
    (tmp_path / "html").mkdir()
    (tmp_path / "html" / "index.html").write_text(
        f'<script src="{jquery.url}" integrity="sha256-{digest}" crossorigin="anonymous">'
        f'</script>\n<script src="{md5.url}" integrity="sha512-AAAA" '
        'crossorigin="anonymous" referrerpolicy="no-referrer"></script>\n')
    vendor_site(tmp_path / "html", modules)
    assert (tmp_path / "html" / "index.html").read_text() == (
        f'<script src="vendor/jquery/dist/jquery.min.js" integrity="sha256-{digest}">'
        '</script>\n<script src="vendor/blueimp-md5/js/md5.min.js"></script>\n')


def test_a_script_it_cannot_serve_is_named(tmp_path: Path) -> None:
    (tmp_path / "html").mkdir()
    (tmp_path / "html" / "index.html").write_text(
        '<script src="https://cdn.example.invalid/newlib.js"></script>')
    with pytest.raises(SiteError, match="newlib.js"):
        vendor_site(tmp_path / "html", fake_node_modules(tmp_path / "node_modules"))


@pytest.mark.parametrize(("skip", "version", "message"), [
    ("flot", "", "node_modules/flot is missing: run `make install`"),
    ("", "0.0.1", "is version 0.0.1, the site needs"),
])
def test_libraries_not_installed_fail_in_one_line(
        site: Path, tmp_path: Path, capsys: pytest.CaptureFixture, skip: str, version: str,
        message: str) -> None:
    modules = fake_node_modules(tmp_path / "node_modules", skip=skip, version=version)
    index = (site / "index.html").read_text()
    assert main([str(site), "--node-modules", str(modules)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and message in err[0]
    assert err[0].startswith("mhabench.asvproject.asv_site: error:")
    assert (site / "index.html").read_text() == index  # left as asv wrote it,
    assert not (site / "vendor").exists()  # and nothing written beside it


def test_main_job_vendors_the_site_it_publishes() -> None:
    text = (ROOT / "scripts" / "main-job").read_text()
    assert text.index("asv publish") < text.index('python -m mhabench.asvproject.asv_site "$html"')


def test_main_job_prints_a_command_that_serves_the_site(tmp_path: Path) -> None:
    """asv's pages need a server (opened as files they show asv's error page): the main
    job prints the command that serves the site, and that command serves it."""
    text = (ROOT / "scripts" / "main-job").read_text()
    echo = re.search(r'^echo "main-job: HTML site.*?(?<!\\)\n', text, re.S | re.M).group(0)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<title>asv</title>")
    said = subprocess.run(["bash", "-c", f"html=site\n{echo}"], cwd=tmp_path, text=True,
                          capture_output=True, timeout=30, check=True).stdout
    command = re.search(r"(python3 -m http\.server .*?) and open (http://\S+)", said)
    assert command, said
    with socket.socket() as s:  # a free port for the printed command's
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = shlex.split(command.group(1).replace("python3", sys.executable, 1))
    argv[-1] = str(port)
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = command.group(2).replace(":8080/", f":{port}/") + "index.html"
        for _ in range(100):
            try:
                with urllib.request.urlopen(url, timeout=2) as page:
                    assert page.read() == b"<title>asv</title>"
                    break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail(f"{url} never answered")
    finally:
        server.terminate()
        server.wait(timeout=10)
