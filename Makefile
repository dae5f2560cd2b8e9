# The whole set-up is `make demo` and `make test` on a fresh machine with Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint typecheck layers unit bench clean

$(STAMP): setup.cfg pyproject.toml scripts/bootstrap
	sh scripts/bootstrap "$(PYTHON)" "$(VENV)"
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --editable '.[test,audit]' --config-settings editable_mode=compat
	touch $(STAMP)

# The bridge scenario at a size that takes about a minute, audit included
# (python -m benchmarks demo is the transport demo: two peers over mutual TLS).
demo: $(STAMP)
	$(BIN)/python -m benchmarks run bridge --messages 20000

test: lint typecheck layers unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

layers: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m benchmarks transport

clean:
	rm -rf $(VENV) var .mypy_cache .pytest_cache .ruff_cache .hypothesis
