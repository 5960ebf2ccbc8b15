# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

# uv installs what pip would (the same versions) on both cores and compiles the bytecode, which
# a machine with PYTHONDONTWRITEBYTECODE set would otherwise compile at every import: 4.9 s
# on a clean clone here, against pip's 15.4 (its upgrade and the install, on one core). The
# venv depends on this file too: a change to how it is installed installs it again.
UV := uv==0.13.9

$(STAMP): pyproject.toml Makefile
	@echo "installing DevLoop and its dependencies into $(VENV) (about 15 s the first time)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(UV)
	$(BIN)/uv pip install --system-certs --python $(BIN)/python --compile-bytecode -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/devloop toolchain install node
	$(BIN)/devloop demo

LINT := $(BIN)/ruff check devloop workers tests bench
TYPES := $(BIN)/mypy

lint: $(STAMP)
	$(LINT)
	$(TYPES)

# The suite on parallel workers (tests/spread.py keeps tests that share a fixture on one and
# orders them: longest first, the `alone` group last; --no-loadscope-reorder keeps that order
# instead of xdist's largest-group-first). A fleet test partly waits (workers booting,
# polling), so more workers than the 2 cores. Measured on clean clones, pytest idle: 574 s on
# 3, 522 to 547 on 4, 499 on 5, 517 on 6; beside two busy loops, 789 s on 4. Since the alone
# group waits for the others and the collection pass came in: 443 s on 5 and 442 on 6 (one
# clone, back to back), 451 to 466 s on 5 from `.ci/run`, 651 to 687 s beside two busy loops.
# 2026-12-06, fork server and coverage reports cheaper, the alone group 45 s to 29: 424 to
# 432 s on 5 from `.ci/run` (make test 7:20 to 7:29), 602 s beside two busy loops (10:33).
TEST_WORKERS ?= 5

# Our code's bytecode is compiled once, before the suite: it starts some 400 Python processes
# (workers, the CLI), and where PYTHONDONTWRITEBYTECODE is set each compiled it all again.
# Likewise the tests' assertion-rewritten bytecode: pytest reads it even where it may not
# write it, so one collection writes it (beside mypy, each on one core) and each xdist
# worker's collection then takes 2.5 CPU-s instead of 5.6.
test: $(STAMP)
	$(LINT)
	$(BIN)/python -m compileall -q devloop workers
	$(TYPES) & types=$$!; \
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest -q --collect-only -p no:cacheprovider >/dev/null; \
	wait $$types
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
