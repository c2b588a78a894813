# Two commands do all the set-up: `make run` opens the app, `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast test-vision lint bench screenshots clean

# The suite runs in one process per core (pytest-xdist; at most 4, JOBS=1 for a single process). A module's
# tests stay in one process (--dist loadscope), so its fixtures are built once.
JOBS ?= auto
XDIST := $(if $(filter 1,$(JOBS)),,-n $(JOBS) --maxprocesses 4 --dist loadscope)
# -X dev: ResourceWarnings and asyncio/debug checks on; -X faulthandler: a fatal signal (SIGABRT, SIGSEGV,
# SIGBUS) prints every thread's stack, so a crash in CI is a red test with a trace, not a silent exit.
PYTEST = $(BIN)/python -X dev -X faulthandler -m pytest -q $(XDIST)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test,remote,models,series,graph,cluster]'
	touch $(STAMP)

# The vision venv (timm, torchvision): its own torch, the build torchvision was made for (constraints-vision.txt
# over constraints.txt without its torch pin). The main venv never gets torchvision: the PyPI build does not
# import beside its CPU torch, and a torchvision that does not import breaks transformers' imports too.
VVENV := .venv-vision
VSTAMP := $(VVENV)/.installed

$(VSTAMP): pyproject.toml constraints.txt constraints-vision.txt
	test -x $(VVENV)/bin/python || $(PYTHON) -m venv $(VVENV)
	$(VVENV)/bin/python -m pip install -q --upgrade pip
	sed '/^torch==/d' constraints.txt | cat - constraints-vision.txt > $(VVENV)/constraints.txt
	$(VVENV)/bin/python -m pip install -q -c $(VVENV)/constraints.txt -e '.[test,models,vision]'
	touch $(VSTAMP)

run: $(STAMP)
	$(BIN)/ckptview $(ARGS)

# The whole suite, as CI runs it. The guardrails run first (each takes seconds): lint, the layer contracts
# (import-linter), types (mypy, strict flags for the core); then the suite.
# Then the timm/torchvision tests in their own venv (test-vision; ~2 min to build it on a fresh clone, ~1 min to
# run); NO_VISION=1 leaves them out, and so does a disk with under 10 GB free (the venv takes ~7 GB).
test: lint
	$(PYTEST) $(PYTEST_ARGS)
	@if [ -n "$(NO_VISION)" ]; then echo "vision tests left out (NO_VISION=1)"; \
	elif [ ! -f $(VSTAMP) ] && [ "$$(df -Pk . | awk 'NR==2 {print $$4}')" -lt 10000000 ]; then \
	  echo "vision tests left out: .venv-vision needs ~7 GB and this disk has less than 10 GB free"; \
	else $(MAKE) --no-print-directory test-vision PYTEST_ARGS=; fi

# The edit loop's lane (a few minutes): everything but the window's tests and the slow ones (worker processes,
# library models, long soaks). CI runs the whole suite (`make test`).
test-fast: $(STAMP)
	$(PYTEST) -m "not slow and not gui" $(PYTEST_ARGS)

# timm and torchvision forward passes checked against the libraries, and ckptview's copy of torch's weights-only
# allowlist held against this second torch release (tests marked `vision`), in .venv-vision.
test-vision: $(VSTAMP)
	CKPTVIEW_REQUIRE_VISION=1 $(VVENV)/bin/python -X dev -X faulthandler -m pytest -q -m vision tests $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/lint-imports
	$(BIN)/mypy

screenshots: $(STAMP)
	$(BIN)/python tools/screenshots.py --out docs/screenshots --size 1280x800 --tour build/screenshots

bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py

clean:
	rm -rf $(VENV) $(VVENV) build *.egg-info
