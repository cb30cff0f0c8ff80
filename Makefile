# `make test` and `make demo` work on a fresh machine: they create .venv, install CPU torch
# through constraints.txt, install ncclean, and run.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-all lint demo clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check ncclean tests

test: $(STAMP) lint
	$(BIN)/pytest -m "not slow"

test-all: $(STAMP)
	$(BIN)/pytest

demo: $(STAMP)
	@mkdir -p demo
	$(BIN)/ncclean synth -o demo/shapes.parquet --n-images 200 --captions-per-image 5 --seed 0
	$(BIN)/ncclean inject-noise demo/shapes.parquet -o demo/shapes-noisy.parquet --ratio 0.5 --seed 0
	$(BIN)/ncclean inspect demo/shapes-noisy.parquet

clean:
	rm -rf $(VENV) demo .pytest_cache .ruff_cache
