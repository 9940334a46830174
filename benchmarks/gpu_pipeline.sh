#!/usr/bin/env bash
# Run `ttt run PIPELINE` on a GPU machine that has JAX but no network and no project install (the device tool's
# machines): install the carried wheels of ogbench/mujoco/mujoco-mjx/gymnasium, generate the pointmaze datasets with
# every core, run the pipeline inside a time budget, and pack what changed under OUTDIR (new evaluation records,
# results, trajectories) into $OUT/results.tgz. Checkpoints stay on the machine (12 MB each).
#   bash benchmarks/gpu_pipeline.sh BUDGET_S PIPELINE OUTDIR ONLY [ttt run options...]
#   e.g. bash benchmarks/gpu_pipeline.sh 540 learning-curves benchmarks/results/learning-curves "gcbc-*" --set chunk=30
set -u
budget=$1 pipeline=$2 outdir=$3 only=$4
shift 4
t0=$(date +%s)
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export MUJOCO_GL=disable PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TTT_CACHE=${TTT_CACHE:-/tmp/ttt-cache} XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -c "import jax, ogbench, mujoco; print('jax', jax.__version__, jax.devices(), 'mujoco', mujoco.__version__)" || exit 1
touch /tmp/stamp
for d in pointmaze-medium-navigate-v0 pointmaze-medium-stitch-v0; do
  python3 -m ttt.cli data generate "$d" --workers 8 >"$OUT/gen-$d.log" 2>&1 &
done
wait
echo "datasets ready after $(($(date +%s) - t0)) s"
left=$((budget - ($(date +%s) - t0) - 20))
timeout "$left" python3 -m ttt.cli run "$pipeline" --only "$only" --out "$outdir" "$@" 2>&1 | tee "$OUT/run.log"
find "$outdir" -newer /tmp/stamp -type f | tar czf "$OUT/results.tgz" -T -
echo "packed $(tar tzf "$OUT/results.tgz" | wc -l) files after $(($(date +%s) - t0)) s"
