# Everything runs from a virtualenv this Makefile creates; only Python 3.10+
# and make are needed on the machine.
PYTHON ?= python3
VENV ?= .venv
DJANGO ?= Django>=5.2
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo load test lint docs dist bench clean

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

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pylint django_semaphore
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

clean:
	rm -rf $(VENV) .pytest_cache dist docs/_build
