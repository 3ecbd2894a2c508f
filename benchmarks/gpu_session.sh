#!/bin/bash
# The whole default test suite, then GPU-check sections, on a lent GPU machine, in one command.
#
# For the project's `device` tool (a machine with JAX+CUDA, no network): run it from the repository
# root with the wheels the suite needs beside the working tree,
#
#     run(command="bash benchmarks/gpu_session.sh", carry=[".whl"], timeout_s=560)
#
# where `.whl/` (git-ignored) holds Python 3.12 manylinux wheels, fetched once on a machine with a
# network:
#
#     python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#         --platform manylinux_2_28_x86_64 -d .whl cma evosax dotmap gymnax gymnasium \
#         farama-notifications brax mujoco mujoco-mjx jaxopt ml_collections tensorboardx trimesh \
#         flask flask-cors itsdangerous blinker glfw pyopengl
#
# (mujoco 4 also needs its mujoco_core and mujoco_studio wheels; pip download brings them.)
# Results go to $OUT (the device tool's output folder; runs/gpu_session here otherwise):
# full_pytest.log (every test's PASS/FAIL with -v, tracebacks at the end), gpu_check.{json,md}.
# Time limits (seconds) for the two stages: PYT (default 330) and BEN (default 150); the sections
# run are SECT (default "gp,neat"; see benchmarks/gpu_check.py --help).
set -u
OUT=${OUT:-runs/gpu_session}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
(python3 setup.py build_ext --inplace -q > "$OUT/build.log" 2>&1; echo "build rc=$?" >> "$OUT/build.log") &
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1 || { tail "$OUT/pip.log"; exit 1; }
else
    echo "no .whl/: tests that need gymnax, brax, evosax or cma will fail to import"
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD
wait
tail -3 "$OUT/build.log"; echo "setup $(( $(date +%s) - T0 ))s"
nvidia-smi -L 2>/dev/null
python3 -c "import jax, evotensor.gp.native as n, evotensor.tree as t; print(jax.devices(), n.AVAILABLE, t.SPEEDUPS)" 2>&1 | tail -2
# Constant fitting on the GPU: a helper's screening runs on an H100 (session 13, JAX 0.11.2) died with
# CUDA_ERROR_ILLEGAL_ADDRESS whenever trees had constant leaves (no log kept). Likely cause, fixed in
# session 14 without a GPU: the Pallas kernel loaded a row of X addressed by a constant leaf's value
# (pallas_kernel.variable_row). These fits confirm it. Each setting in its own process, so one crash
# does not hide the others; the first has constant leaves without constant optimization.
for KW in '{}' '{"constant_optimization": "auto"}' \
          '{"survival": "nsga2", "constant_optimization": "auto", "refine_top": 64}'; do
    EVOTENSOR_CACHE_DIR=off timeout 120 python3 -c "
import json, sys, numpy as np
from evotensor.gp import SymbolicRegressor
kw = json.loads(sys.argv[1])
X = np.random.default_rng(0).uniform(-1, 1, (200, 1)).astype('float32')
y = X[:, 0] ** 3 + X[:, 0] ** 2 + X[:, 0]
est = SymbolicRegressor(population_size=500, generations=10, random_state=0, **kw).fit(X, y)
print('sr-constants', kw, 'R2', est.score(X, y), est.best_.expression)" "$KW" > "$OUT/sr_constants.log" 2>&1
    echo "sr-constants $KW rc=$?"; grep -E "^sr-constants|Error|ILLEGAL" "$OUT/sr_constants.log" | tail -3
done
NPROC=$(nproc)
# Ray's wheel alone is larger than what the device tool carries (64 MiB): without it, its two test
# files are left out here, said so, and run in CI (which installs the distributed extra).
IGNORE=""
if ! python3 -c "import ray" > /dev/null 2>&1; then
    IGNORE="--ignore tests/distributed/test_ray_evaluator.py --ignore tests/es/test_ray_gradient.py"
    echo "ray not importable: left out $IGNORE"
fi
timeout "${PYT:-330}" python3 -m pytest -q -v -rf -n $(( NPROC > 2 ? NPROC - 1 : 1 )) --timeout 240 $IGNORE tests \
    > "$OUT/full_pytest.log" 2>&1
echo "pytest rc=$? after $(( $(date +%s) - T0 ))s"
grep -cE " PASSED" "$OUT/full_pytest.log" | sed 's/^/passed: /'
grep -E " FAILED| ERROR" "$OUT/full_pytest.log" | sed 's/^.*\] //' | sort -u | head -60
tail -3 "$OUT/full_pytest.log"
timeout "${BEN:-150}" python3 benchmarks/gpu_check.py --sections "${SECT:-gp,neat}" --out "$OUT" > "$OUT/bench.log" 2>&1
echo "bench rc=$? after $(( $(date +%s) - T0 ))s"
head -80 "$OUT/gpu_check.md" 2>/dev/null || tail -20 "$OUT/bench.log"
# Several GPUs: evaluations per second of every family on 1, 2, ... devices (benchmarks/results_scale.md).
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$NGPU" -gt 1 ]; then
    timeout "${SCALE:-120}" python3 benchmarks/scale_devices.py --devices "1,$NGPU" --rounds 1 --no-append \
        > "$OUT/scale.log" 2>&1
    echo "scale rc=$?"; tail -12 "$OUT/scale.log"
fi
