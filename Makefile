# Two commands from a bare clone (see README.md):
#   make bench   install everything, run the main job
#   make test    install everything, run ruff and the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The JS libraries asv's published site loads from CDNs, pinned in package-lock.json and
# served beside the site so it works offline (mhabench.asvproject.asv_site).
NODE_STAMP := node_modules/.installed

.PHONY: install bench test lint clean-venv

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "make: npm not found: the offline asv site needs Node.js and npm (Debian: apt-get install npm)" >&2; exit 1; }
	npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $(NODE_STAMP)

install: $(STAMP) $(NODE_STAMP)

bench: install
	PATH="$(CURDIR)/$(BIN):$$PATH" ./scripts/main-job

lint: install
	$(BIN)/ruff check .

# Two phases: the tests that assert no timing on three workers (pytest-xdist, each file on
# one; many wait on subprocesses, Slurm or a browser, and two kept 2 cores 60 % busy), then
# the timing tests alone, so nothing else runs on the machine while they time. The groups
# go out longest first (tests/conftest.py), not in xdist's order (most tests first).
# Exit status 5 (no test selected, e.g. PYTEST_ARGS=-k of one phase's test) is not a failure.
test: lint
	$(BIN)/python -m pytest -q -n 3 --dist loadgroup --no-loadscope-reorder -m "not timing" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/python -m pytest -q -m timing $(PYTEST_ARGS) || [ $$? -eq 5 ]

clean-venv:
	rm -rf $(VENV)
