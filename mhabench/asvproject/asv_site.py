"""asv's published HTML site, made to work with no network.

asv 0.6's ``index.html`` loads jQuery, flot, bootstrap and four more files from public CDNs;
offline (CI, an air-gapped lab, a GPU box) every one fails and the page redirects to
``error.html``: "Can not determine continental origin of swallow". :func:`vendor_site`
copies the same libraries, from the npm packages that ``package.json`` pins (``make install``
runs ``npm ci``), into ``<html_dir>/vendor/`` and points the tags at them. The main job runs
it after every ``asv publish`` (which recreates the folder); ``tests/test_browser.py`` runs
the same function and opens the site with the network off.

    python -m mhabench.asvproject.asv_site .asv/html [--node-modules DIR]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]  # the project: mhabench/asvproject/asv_site.py
NODE_MODULES = ROOT / "node_modules"
VENDOR = "vendor"


class Library(NamedTuple):
    url: str      # the address in asv 0.6.6's www/index.html
    package: str  # the npm package that holds the same library
    version: str  # pinned in package.json
    file: str     # the file inside the package


# flot's CDN files are cdnjs's own minified builds: npm's flot 0.8.3 ships the unminified
# sources. stupidtable 1.0.1 is not on npm; 1.1.3 keeps the API asv calls (stupidtable(),
# stupidsort(dir)). The other five files are byte-identical to the CDN's (their integrity
# hashes match and are kept).
LIBRARIES = (
    Library("https://code.jquery.com/jquery-3.3.1.min.js",
            "jquery", "3.3.1", "dist/jquery.min.js"),
    *(Library(f"https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.{name}.min.js",
              "flot", "0.8.3", f"jquery.{name}.js")
      for name in ("flot", "flot.time", "flot.selection", "flot.categories")),
    Library("https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js",
            "flot-orderbars", "1.0.0", "js/jquery.flot.orderBars.js"),
    Library("https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js",
            "stupid-table-plugin", "1.1.3", "stupidtable.min.js"),
    Library("https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js",
            "blueimp-md5", "2.19.0", "js/md5.min.js"),
    Library("https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js",
            "bootstrap", "3.1.1", "dist/js/bootstrap.min.js"),
    Library("https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css",
            "bootstrap", "3.1.1", "dist/css/bootstrap.min.css"),
)
# bootstrap.min.css loads its icon font from ../fonts/, relative to itself.
EXTRA_FILES = tuple(("bootstrap", f"dist/fonts/glyphicons-halflings-regular.{ext}")
                    for ext in ("eot", "svg", "ttf", "woff"))

_TAG = re.compile(r"<(?:script|link)\b[^>]*>", re.IGNORECASE)
_ADDRESS = re.compile(r'\b(src|href)="([^"]*)"')
_ATTR = r'\s+{}="[^"]*"'


class SiteError(Exception):
    """The site cannot be made to work offline (libraries not installed, unknown CDN tag)."""


def _integrity_matches(value: str, data: bytes) -> bool:
    algorithm, _, digest = value.partition("-")
    if algorithm not in ("sha256", "sha384", "sha512"):
        return False
    return base64.b64encode(hashlib.new(algorithm, data).digest()).decode() == digest


def _local_tag(tag: str, library: Library, data: bytes) -> str:
    tag = tag.replace(library.url, f"{VENDOR}/{library.package}/{library.file}")
    # Same-origin now: CORS attributes only break file:// pages. The integrity hash stays
    # where the npm file is the CDN's own bytes, and goes where it is another build.
    tag = re.sub(_ATTR.format("(?:crossorigin|referrerpolicy)"), "", tag)
    integrity = re.search(r'\sintegrity="([^"]*)"', tag)
    if integrity and not _integrity_matches(integrity.group(1), data):
        tag = re.sub(_ATTR.format("integrity"), "", tag)
    return tag


def _installed(node_modules: Path, package: str, version: str) -> Path:
    manifest = node_modules / package / "package.json"
    if not manifest.is_file():
        raise SiteError(f"{node_modules / package} is missing: run `make install` "
                        "(it needs npm) to install the asv site's pinned JS libraries")
    found = json.loads(manifest.read_text())["version"]
    if found != version:
        raise SiteError(f"{node_modules / package} is version {found}, the site needs "
                        f"{version}: run `make install`")
    return node_modules / package


def _remote(page: str) -> list[str]:
    """Scripts and stylesheets that a page still loads from another host."""
    return [tag for m in _TAG.finditer(page) if (address := _ADDRESS.search(tag := m.group(0)))
            and "://" in address.group(2)
            and (tag.lower().startswith("<script") or "stylesheet" in tag)]


def vendor_site(html_dir: str | Path, node_modules: str | Path = NODE_MODULES) -> list[str]:
    """Copy the CDN libraries of asv's site into ``html_dir/vendor/`` and point its pages at
    them. Idempotent; writes only ``vendor/`` and the top-level ``*.html`` pages, deletes
    nothing, and writes nothing at all when it fails. Returns the CDN addresses it replaced
    (empty on a second run)."""
    html_dir, node_modules = Path(html_dir), Path(node_modules)
    if not (html_dir / "index.html").is_file():
        raise SiteError(f"{html_dir} holds no index.html: run `asv publish` first")
    versions = {lib.package: lib.version for lib in LIBRARIES}
    content = {(package, name): (_installed(node_modules, package, versions[package]) / name)
               .read_bytes()
               for package, name in [(lib.package, lib.file) for lib in LIBRARIES]
               + list(EXTRA_FILES)}

    by_url = {lib.url: lib for lib in LIBRARIES}
    replaced: list[str] = []

    def rewrite(match: re.Match[str]) -> str:
        tag = match.group(0)
        address = _ADDRESS.search(tag)
        if not address or address.group(2) not in by_url:
            return tag
        library = by_url[address.group(2)]
        replaced.append(library.url)
        return _local_tag(tag, library, content[library.package, library.file])

    pages = {page: page.read_text(encoding="utf-8") for page in sorted(html_dir.glob("*.html"))}
    new = {page: _TAG.sub(rewrite, text) for page, text in pages.items()}
    for page, text in new.items():
        # A script or stylesheet still on the network (a newer asv) would break the site
        # offline again: say which, rather than publish a page that redirects to error.html.
        if remote := _remote(text):
            raise SiteError(f"{page} loads {remote[0]} from the network and "
                            "mhabench.asvproject.asv_site has no local copy of it")
    for (package, name), data in content.items():
        target = html_dir / VENDOR / package / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    for page, text in new.items():
        if text != pages[page]:
            page.write_text(text, encoding="utf-8")
    return replaced


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mhabench.asvproject.asv_site",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("html_dir", help="the folder `asv publish` wrote (html_dir)")
    parser.add_argument("--node-modules", default=str(NODE_MODULES),
                        help="where `npm ci` installed package.json's libraries")
    args = parser.parse_args(argv)
    try:
        replaced = vendor_site(args.html_dir, args.node_modules)
    except (SiteError, OSError) as err:
        print(f"mhabench.asvproject.asv_site: error: {err}", file=sys.stderr)
        return 2
    print(f"mhabench.asvproject.asv_site: {len(replaced)} CDN addresses now served from "
          f"{Path(args.html_dir) / VENDOR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
