# `make test` and `make serve` each install what they need first (torch pinned, then the project).
PYTHON ?= python3
export NO_MKDOCS_2_WARNING := 1

.PHONY: install test serve build bench bench-site update-outputs

install:
	$(PYTHON) -m pip install -q torch==2.13.0 numpy
	$(PYTHON) -m pip install -q -e .

test: install
	$(PYTHON) -m pytest --codeblocks

serve: install
	$(PYTHON) -m mkdocs serve -a 127.0.0.1:8000

build: install
	$(PYTHON) -m mkdocs build --strict

update-outputs: install
	$(PYTHON) -m pytest --codeblocks --update-outputs

bench: install
	$(PYTHON) tests/bench.py

bench-site: install
	$(PYTHON) tests/bench_site.py
