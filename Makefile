# Everything runs from a virtualenv this Makefile creates; only Python 3.10+
# and make are needed on the machine.
PYTHON ?= python3
VENV ?= .venv
DJANGO ?= Django>=5.2
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo load test lint lint-ruff lint-format lint-duplicates lint-types docs dist bench ci clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10+ is required"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip
	$(BIN)/python -m pip install -q -e ".[test,demo,bench,docs,dist,drf,ninja,channels]" "$(DJANGO)"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python example_project/demo.py

# Against the running demo; LOAD_ARGS="--url ... --concurrency 32" to change it.
load: $(STAMP)
	$(BIN)/python example_project/loadgen.py $(LOAD_ARGS)

# In parallel (pytest-xdist): each worker starts its own server; the longest tests go first, a module whose
# tests share a fixture stays on one worker (pyproject.toml's addopts, tests/conftest.py).
# TEST_WORKERS=0 runs the suite in this one process. Bytecode is cached (__pycache__, ignored by git) even where
# PYTHONDONTWRITEBYTECODE is set: else every worker rewrites and compiles each test module again (7 CPU-s).
TEST_WORKERS ?= 8
test: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# Each part on its own too, for .pre-commit-config.yaml: the hooks run exactly these.
lint: lint-ruff lint-format lint-duplicates lint-types
lint-ruff: $(STAMP)
	$(BIN)/ruff check .
lint-format: $(STAMP)
	$(BIN)/ruff format --check .
lint-duplicates: $(STAMP)
	$(BIN)/python .ci/repeated_code.py --allowed .ci/repeated_code_allowed django_semaphore
lint-types: $(STAMP)
	$(BIN)/mypy

# The documentation in docs/_build/html; any warning (a broken link or anchor) fails it.
docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# sdist and wheel in dist/, checked as an index would check them.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --sdist --wheel --outdir dist .
	$(BIN)/twine check --strict dist/*

bench: $(STAMP)
	@$(BIN)/python -m benchmarks $(BENCH_ARGS)

# CI's jobs (.ci/run): all of them, or JOB="lint docs" for some; the GitHub workflow runs one a job.
ci:
	bash .ci/run $(JOB)

clean:
	rm -rf $(VENV) .pytest_cache dist docs/_build
