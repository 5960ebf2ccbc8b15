# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	@echo "installing DevLoop and its dependencies into $(VENV) (about a minute the first time)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/devloop toolchain install node
	$(BIN)/devloop demo

lint: $(STAMP)
	$(BIN)/ruff check devloop workers tests bench
	$(BIN)/mypy

# The suite on parallel workers: a fleet test mostly waits (workers booting, polling, sandboxes),
# so more workers than cores pays; tests/spread.py keeps tests that share a fixture on one.
TEST_WORKERS ?= 4

test: lint
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
