# Two commands do all the set-up: `make run` opens the app, `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench screenshots clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test,remote,models,series]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/ckptview $(ARGS)

# -X dev: ResourceWarnings and asyncio/debug checks on; -X faulthandler: a fatal signal (SIGABRT, SIGSEGV,
# SIGBUS) prints every thread's stack, so a crash in CI is a red test with a trace, not a silent exit.
# The guardrails run first (each takes seconds): lint, the layer contracts (import-linter), types (mypy,
# strict flags for the core); then the suite.
test: lint
	$(BIN)/python -X dev -X faulthandler -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools resources
	$(BIN)/lint-imports
	$(BIN)/mypy

screenshots: $(STAMP)
	$(BIN)/python tools/screenshots.py --out docs/screenshots --size 1280x800

bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py

clean:
	rm -rf $(VENV) build *.egg-info
