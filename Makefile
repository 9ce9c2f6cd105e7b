# `make serve` and `make test` are all a newcomer needs: each creates the virtual environment
# .venv (from $(BASE_PYTHON)) if it is missing, installs what is needed into it (torch pinned
# first, then the project), and then serves the site or runs every test.
#   make test PYTHON=python   uses an interpreter you already have instead (conda, pyenv, ...).
#   Such an environment is yours: nothing is ever installed into it or replaced. If it lacks a
#   package, or its torch is outside the project's range, make says so in one line with the
#   command that fixes it, and stops.
BASE_PYTHON ?= python3
VENV ?= .venv
# what the project's own .venv gets: the pinned release (PyPI's CUDA build on Linux, or whatever
# torch 2.13.0 is already there, e.g. the CPU-only build); TORCH=torch takes the newest release
TORCH ?= torch==2.13.0
PYTHON ?= $(VENV)/bin/python
export NO_MKDOCS_2_WARNING := 1

.PHONY: install test test-hosts test-mutations serve build bench bench-site update-outputs test-gpu gpu-wheels

# the Python README names (pyproject.toml's requires-python): an older one gets one line, no .venv
$(VENV)/bin/python:
	@$(BASE_PYTHON) pagerun/envcheck.py --python
	$(BASE_PYTHON) -m venv $(VENV)

# One install per environment and checkout, again only when pyproject.toml changes: a stamp in
# the environment's own folder (sys.prefix) remembers it. Only the project's own .venv is ever
# installed into; any other PYTHON is checked (pagerun/envcheck.py), never changed.
STAMP = $$($(PYTHON) -c 'import sys; print(sys.prefix)')/.gpu-by-example-$$(cat pyproject.toml | cksum | cut -d' ' -f1)-$$(echo '$(CURDIR)' | cksum | cut -d' ' -f1)
ifeq ($(PYTHON),$(VENV)/bin/python)
install: $(VENV)/bin/python
	@$(PYTHON) pagerun/envcheck.py --python
	@stamp="$(STAMP)"; \
	if [ ! -f "$$stamp" ]; then \
	  $(PYTHON) -m pip install -q $(TORCH) numpy && \
	  $(PYTHON) -m pip install -q -e . && { touch "$$stamp" 2>/dev/null || true; }; \
	fi
else
install:
	@$(PYTHON) pagerun/envcheck.py
endif

test: install
	$(PYTHON) -m pytest --codeblocks

PORT ?= 8000
serve: install
	$(PYTHON) -m mkdocs serve -a 127.0.0.1:$(PORT)

build: install
	$(PYTHON) -m mkdocs build --strict

# The blocks that run on hosts of their own (network namespaces, a Slurm cluster): root only,
# and about 75 s on 2 cores, so they are a pass of their own (CONTRIBUTING.md, "Hosts with their own network")
test-hosts: install
	DOCS_HOSTS=1 $(PYTHON) -m pytest --codeblocks -p no:cacheprovider \
	  docs/en/ddp/multinode.md docs/zh/ddp/multinode.md tests/test_hosts.py $(PYTEST_ARGS)

# Every check bites: each program's parallel mechanism broken in a copy of it, and its own
# check must then fail (tests/test_mutations.py); about 50 s on 2 idle cores, which would put
# make test over its budget, so a pass of its own
# (CONTRIBUTING.md, "Every check bites")
test-mutations: install
	DOCS_MUTATIONS=1 $(PYTHON) -m pytest -p no:cacheprovider tests/test_mutations.py $(PYTEST_ARGS)

update-outputs: install
	$(PYTHON) -m pytest --codeblocks --update-outputs

# make bench BASE=DIR: a checkout of 41e7906 with its .venv, timed beside this one (by default
# /tmp/base41: tests/bench.py reads BASE; CONTRIBUTING.md, Benchmark)
bench: install
	$(PYTHON) tests/bench.py

# Lighthouse 12 from npm (npm install --global lighthouse@12), driving Debian's chromium
bench-site: install
	$(PYTHON) tests/bench_site.py --lighthouse

# On a GPU machine whose python3 already has CUDA torch but reaches no package registry: the
# other packages come as wheels from WHEELS (made by `make gpu-wheels` on a machine that reaches
# PyPI), and the suite runs against the GPU, recording missing GPU outputs.
GPU_PYTHON ?= python3
GPU_JOBS ?= 4
WHEELS ?= wheels
test-gpu: PYTHON = $(GPU_PYTHON)
test-gpu:
	$(GPU_PYTHON) -c "import torch, sys; torch.cuda.is_available() or sys.exit('make test-gpu: no CUDA GPU here (torch.cuda.is_available() is False); use make test')"
	@if [ -d $(WHEELS) ]; then $(GPU_PYTHON) -m pip install -q --no-index --find-links $(WHEELS) -r tests/gpu-requirements.txt; fi
	@$(GPU_PYTHON) pagerun/envcheck.py
	DOCS_JOBS=$(GPU_JOBS) $(GPU_PYTHON) -m pytest --codeblocks -p no:cacheprovider $(PYTEST_ARGS)

# torchao and torchft come without their dependencies (torchft's would download torch and its
# CUDA libraries, 2.9 GB, which the GPU machine has); torchft's own are named after them.
GPU_WHEEL_PLATFORM = --only-binary=:all: --python-version 3.12 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64
gpu-wheels: install
	$(PYTHON) -m pip wheel -q --no-deps -w $(WHEELS) jieba  # no wheel on PyPI: built here
	$(PYTHON) -m pip download -q -d $(WHEELS) $(GPU_WHEEL_PLATFORM) \
	  $$(grep -v -e '^#' -e '^jieba' -e '^torchao' -e '^torchft' tests/gpu-requirements.txt) \
	  opentelemetry-api opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
	$(PYTHON) -m pip download -q -d $(WHEELS) $(GPU_WHEEL_PLATFORM) --no-deps \
	  $$(grep -e '^torchao' -e '^torchft' tests/gpu-requirements.txt)
