# Two commands do all the set-up on a fresh machine:
#   make run   - the system on the embedded control plane (no cluster needed)
#   make test  - lint, type checks and the whole test suite
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

.PHONY: venv run test lint bench
venv: $(BIN)/.installed

run: venv
	$(BIN)/koord-queue up --state-dir .koord-queue --example

lint: venv
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q

bench: venv
	$(BIN)/python bench/run_all.py
