# BHGBrain for Django — two commands: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test test-postgres lint bench bench-quick install clean

run: $(STAMP)  ## install if needed, migrate, start server + scheduler on 127.0.0.1:3721
	$(BIN)/bhgbrain server start

test: $(STAMP)  ## the whole test suite (SQLite; set DATABASE_URL for PostgreSQL)
	$(BIN)/pytest

test-postgres: $(STAMP)  ## the whole suite against PostgreSQL on 127.0.0.1:5432
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres} $(BIN)/pytest

lint: $(STAMP)  ## the import contracts (.importlinter) and ruff
	$(BIN)/lint-imports
	$(BIN)/ruff check .

bench: $(STAMP)  ## the standing benchmark suite, full sizes: bench/results/summary-latest.{json,md}
	$(BIN)/python bench/suite.py

bench-quick: $(STAMP)  ## the same suite at small sizes (a few minutes)
	$(BIN)/python bench/suite.py --quick

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
