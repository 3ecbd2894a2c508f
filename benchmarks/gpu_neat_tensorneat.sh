#!/bin/bash
# NEAT beside TensorNEAT on one lent GPU, in one command (issues 13 and 14): the forward pass over
# (pop, max_nodes, max_conns) (benchmarks/neat_forward.py) and XOR seconds per generation at pop 1000
# in TensorNEAT's mode (benchmarks/neat_xor.py --timing), and gradient descent through the topologies
# (benchmarks/neat_grad.py), both engines on the same GPU, alternating.
#
# The GPU machine has no network: TensorNEAT's pinned source travels with the working tree. Once,
# on a machine with the fetched repository (fetch github:EMI-Group/tensorneat):
#
#     .venv/bin/python benchmarks/bench_venvs.py --export tensorneat .bench/tensorneat_src
#
# then, with the project's device tool:
#
#     run(command="bash benchmarks/gpu_neat_tensorneat.sh", carry=[".whl", ".bench/tensorneat_src"], timeout_s=520)
#
# TensorNEAT runs on the machine's own JAX, its package on PYTHONPATH (its imports at module level:
# jax, numpy, sympy); the benchmark scripts find it through a stand-in "venv" whose python is this
# machine's python3. Results go to $OUT (runs/gpu_neat_tensorneat here otherwise): forward.jsonl,
# xor.jsonl, grad.log and the logs. SIZES and TIMING_POP override the sizes; FWD, XOR and GRAD are
# time limits (s).
set -u
OUT=${OUT:-runs/gpu_neat_tensorneat}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PYTHON:-python3}
if [ ! -d .bench/tensorneat_src/src/tensorneat ]; then
    echo "no .bench/tensorneat_src: export it first (see the head of this script)"; exit 2
fi
if ls .whl/*.whl > /dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1 || { tail "$OUT/pip.log"; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/.bench/tensorneat_src/src
VENVS=$(mktemp -d)
mkdir -p "$VENVS/tensorneat/bin"
printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v "$PY")" > "$VENVS/tensorneat/bin/python"
chmod +x "$VENVS/tensorneat/bin/python"
export EVOTENSOR_BENCH_VENVS=$VENVS
nvidia-smi -L 2>/dev/null
$PY -c "import jax, tensorneat; print(jax.__version__, jax.devices())" 2>&1 | tail -1
cat .bench/tensorneat_src/COMMIT
# shellcheck disable=SC2086
timeout "${FWD:-200}" $PY benchmarks/neat_forward.py \
    --sizes ${SIZES:-1000x32x64 10000x32x64 10000x64x128 100000x32x64} --out "$OUT/forward.jsonl" \
    > "$OUT/forward.log" 2>&1
echo "forward rc=$?"; tail -12 "$OUT/forward.log"
timeout "${XOR:-180}" $PY benchmarks/neat_xor.py --timing --seeds 0 --timing-pop "${TIMING_POP:-1000}" \
    --timing-generations 20 --mode tensorneat --engines evotensor tensorneat --out "$OUT/xor.jsonl" \
    > "$OUT/xor.log" 2>&1
echo "xor rc=$?"; tail -6 "$OUT/xor.log"
# gradient descent through the topologies: TensorNEAT's xor_grad workload (benchmarks/neat_grad.py)
timeout "${GRAD:-100}" $PY benchmarks/neat_grad.py --rounds 1 --steps 200 > "$OUT/grad.log" 2>&1
echo "grad rc=$?"; tail -4 "$OUT/grad.log"
