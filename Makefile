# Two commands: `make run` (set up + the default experiment) and `make test` (set up + the test suite).
# Set-up is skipped when the virtual environment is already up to date with pyproject.toml and
# the pinned versions in constraints.txt.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TASK   ?= sr-pagie
ARGS   ?=
PYTEST_ARGS ?=

.PHONY: run test test-slow bench lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The install also builds the optional C extension evotensor.tree._speedups (setup.py), hence its
# source among the prerequisites: an edited .c file is rebuilt by the next `make test` / `make run`.
EXT := setup.py src/evotensor/tree/_speedups.c

# Runtime dependencies only.
$(VENV)/.installed-run: pyproject.toml constraints.txt $(EXT) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -c constraints.txt -e .
	touch $@

# Everything the tests need (test tools, pycma reference, control environments).
$(VENV)/.installed-test: pyproject.toml constraints.txt $(EXT) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,control]"
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/evotensor run $(TASK) $(ARGS)

# pytest's exit code 5 ("no tests collected") is not a failure of the code.
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n 2 --dist loadfile $(PYTEST_ARGS); s=$$?; [ $$s -eq 5 ] && exit 0; exit $$s

# The slow tier runs long computations, where XLA's full optimizations pay for their compile time.
test-slow: $(VENV)/.installed-test
	EVOTENSOR_TEST_DEFAULT_XLA=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile -m slow $(PYTEST_ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet -c constraints.txt ruff
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
