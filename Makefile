# Two commands do all the set-up: `make run` opens the app, `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test suite test-fast test-vision vision-left-out lint bench screenshots clean

# The suite runs in one process per core (pytest-xdist; at most 4, JOBS=1 for a single process). A module's
# tests stay in one process (--dist loadscope), so its fixtures are built once.
JOBS ?= auto
XDIST := $(if $(filter 1,$(JOBS)),,-n $(JOBS) --maxprocesses 4 --dist loadscope)
# -X dev: ResourceWarnings and asyncio/debug checks on; -X faulthandler: a fatal signal (SIGABRT, SIGSEGV,
# SIGBUS) prints every thread's stack, so a crash in CI is a red test with a trace, not a silent exit.
PYTEST = $(BIN)/python -X dev -X faulthandler -m pytest -q $(XDIST)

# pip says only what went wrong (-qq: errors): a machine's own pip configuration can add a warning for each
# package (an extra index folder it names is missing), and `make run` prints no warning of ours or pip's.
PIPQ := -qq

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(PIPQ) --upgrade pip
	$(BIN)/python -m pip install $(PIPQ) -c constraints.txt -e '.[test,remote,models,series,graph,cluster]'
	touch $(STAMP)

# The vision venv (timm, torchvision): its own torch, the build torchvision was made for (constraints-vision.txt
# over constraints.txt without its torch pin). The main venv never gets torchvision: the PyPI build does not
# import beside its CPU torch, and a torchvision that does not import breaks transformers' imports too.
VVENV := .venv-vision
VSTAMP := $(VVENV)/.installed

# After .venv, never beside it: both installs write the project's metadata (src/ckptview.egg-info).
$(VSTAMP): pyproject.toml constraints.txt constraints-vision.txt | $(STAMP)
	test -x $(VVENV)/bin/python || $(PYTHON) -m venv $(VVENV)
	$(VVENV)/bin/python -m pip install $(PIPQ) --upgrade pip
	sed '/^torch==/d' constraints.txt | cat - constraints-vision.txt > $(VVENV)/constraints.txt
	$(VVENV)/bin/python -m pip install $(PIPQ) -c $(VVENV)/constraints.txt -e '.[test,models,vision]'
	touch $(VSTAMP)

# `make test` leaves the vision tests out with NO_VISION=1, or while .venv-vision is not built and the disk has
# under 10 GB free (the venv takes ~7 GB).
ifneq ($(NO_VISION),)
VISION_LANE := vision-left-out
VISION_WHY := NO_VISION=1
else ifeq ($(wildcard $(VSTAMP))$(shell [ "$$(df -Pk . | awk 'NR==2 {print $$4}')" -lt 10000000 ] && echo low),low)
VISION_LANE := vision-left-out
VISION_WHY := .venv-vision needs ~7 GB and this disk has less than 10 GB free
else
VISION_LANE := test-vision
endif

run: $(STAMP)
	$(BIN)/ckptview $(ARGS)

# The whole suite, as CI runs it, in two lanes side by side (make -j2): the main lane
# runs the guardrails (each takes seconds but a cold mypy: lint, the layer contracts with import-linter, types)
# and then the suite; the vision lane builds .venv-vision once .venv is built (~2 min, while lint runs) and then
# runs the timm/torchvision tests (test-vision). On a fresh clone of a 2-core machine that takes the vision venv
# and the cold mypy off the critical path (docs/development.md: where CI's time goes).
LANES := $(if $(filter 1,$(JOBS)),1,2)
test:
	@$(MAKE) --no-print-directory -j$(LANES) suite $(VISION_LANE) VISION_AT_ONCE=1

suite: lint
	$(PYTEST) $(PYTEST_ARGS)

vision-left-out:
	@echo "vision tests left out: $(VISION_WHY)"

# The edit loop's lane (a few minutes): everything but the window's tests and the slow ones (worker processes,
# library models, long soaks). CI runs the whole suite (`make test`).
test-fast: $(STAMP)
	$(PYTEST) -m "not slow and not gui" $(PYTEST_ARGS)

# timm and torchvision forward passes checked against the libraries, and ckptview's copy of torch's weights-only
# allowlist held against this second torch release (tests marked `vision`), in .venv-vision. Only the modules that
# mark tests `vision` are collected (collecting the rest would import every library of the suite for nothing);
# VISION_ARGS adds pytest arguments of its own.
VISION_TESTS = $(shell grep -rlE 'mark\.vision' tests --include='test_*.py' | sort)
VISION_RUN = CKPTVIEW_REQUIRE_VISION=1 $(VVENV)/bin/python -X dev -X faulthandler -m pytest -q $(XDIST) -m vision \
  $(VISION_TESTS) $(VISION_ARGS)
# In `make test`'s lane (VISION_AT_ONCE=1) its output comes in one piece when it ends, not mixed into the suite's.
test-vision: $(VSTAMP)
ifeq ($(VISION_AT_ONCE),1)
	@echo '$(VISION_RUN) (its output when it ends)'; \
	$(VISION_RUN) > $(VVENV)/tests.log 2>&1; rc=$$?; cat $(VVENV)/tests.log; exit $$rc
else
	$(VISION_RUN)
endif

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
