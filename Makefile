# Two commands: `make run` (set up + the default experiment) and `make test` (set up + the test suite).
# Set-up is skipped when the virtual environment is already up to date with pyproject.toml and
# the pinned versions in constraints.txt.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TASK   ?= sr-pagie
ARGS   ?=
PYTEST_ARGS ?=

.PHONY: run test test-slow gpu-check bench-venvs lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The install also builds the optional compiled extensions (setup.py), hence their sources among the
# prerequisites: an edited source is rebuilt by the next `make test` / `make run`. The GP evaluator
# is compiled against jaxlib's FFI headers, installed into pip's isolated build environment; the
# constraint file pins that jaxlib to the version the venv runs.
EXT := setup.py src/evotensor/tree/_speedups.c src/evotensor/gp/_native.cc
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt

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

# Two sessions (tests/conftest.py): the suite under XLA:CPU's classic emitters, which compile it
# ~40% faster, then the tests marked fusion_emitters (bit-for-bit comparisons of differently
# compiled programs) under the default emitters. pytest's exit code 5 ("no tests collected") is not
# a failure of the code.
# The second session collects only the files that use the mark, unless PYTEST_ARGS chooses tests.
FUSION_FILES = $(if $(PYTEST_ARGS),,$(shell grep -rl --include='test_*.py' 'mark.fusion_emitters' tests))
test: $(VENV)/.installed-test
	EVOTENSOR_TEST_CLASSIC_EMITTERS=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile $(PYTEST_ARGS); a=$$?; \
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "fusion_emitters and not slow" $(FUSION_FILES) $(PYTEST_ARGS); b=$$?; \
	for s in $$a $$b; do [ $$s -eq 0 ] || [ $$s -eq 5 ] || exit $$s; done

# The slow tier runs long computations, where XLA's full optimizations pay for their compile time.
test-slow: $(VENV)/.installed-test
	EVOTENSOR_TEST_DEFAULT_XLA=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile -m slow $(PYTEST_ARGS)

# The one-command GPU check (benchmarks/gpu_check.py): GPU tests with compiled kernels, then every
# family's benchmarks; writes gpu_check.json and gpu_check.md to $$OUT or runs/gpu_check. It runs with
# the venv's Python (install it with the cuda extra: pip install -e ".[test,cuda]"), or with
# GPU_PYTHON=python3 on a machine whose own Python has JAX with CUDA.
GPU_PYTHON ?= $(BIN)/python
gpu-check:
	PYTHONPATH=$(CURDIR)/src:$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) benchmarks/gpu_check.py $(ARGS)

# The anchors' own virtual environments for the side-by-side benchmarks (benchmarks/bench_venvs.py),
# under $$EVOTENSOR_BENCH_VENVS or .bench/venvs; VENVS="es qd" creates only those groups.
VENVS ?=
bench-venvs: | $(BIN)/python
	$(BIN)/python benchmarks/bench_venvs.py $(VENVS)

lint: $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet -c constraints.txt ruff
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
