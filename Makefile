# Two commands set up a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SUM    := $(shell cat pyproject.toml tests/plugin_dist/pyproject.toml | cksum | cut -d' ' -f1)
# The demo needs only the core, OCR and the report's plots (a faster first run); the tests need every extra.
DEMO   := $(VENV)/.demo-$(SUM)
STAMP  := $(VENV)/.installed-$(SUM)
PIP    := $(BIN)/python -m pip install -q --disable-pip-version-check

.PHONY: demo test lint bench

$(DEMO): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -e ".[ocr,report]"
	touch $(DEMO)

# [server] builds llama.cpp from source (about 10 minutes on 2 cores the first time; pip caches the wheel).
# The tests also install tests/plugin_dist, a plugin distribution found only through its entry points.
$(STAMP): $(DEMO) tests/plugin_dist/pyproject.toml
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(PIP) -e ".[hf,ocr,embed,ray,chat,report,dev,server,datasets,channels]"
	$(PIP) --no-deps -e tests/plugin_dist
	touch $(STAMP)

demo: $(DEMO)
	$(BIN)/mmaudit demo

# The suite runs in a random order (pytest-randomly); the seed is printed first, and `make test SEED=N` repeats it.
test: $(STAMP)
	@seed=$${SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; echo "test order: --randomly-seed=$$seed (repeat: make test SEED=$$seed)"; \
	$(BIN)/python -m pytest -q -p randomly --randomly-seed=$$seed

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/zoo_throughput.py
