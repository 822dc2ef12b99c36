# Two commands from a bare clone (see README.md):
#   make bench   install everything, run the main job
#   make test    install everything, run ruff and the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install bench test lint clean-venv

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

bench: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" ./scripts/main-job

lint: $(STAMP)
	$(BIN)/ruff check .

test: lint
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)
