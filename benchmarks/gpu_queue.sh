#!/usr/bin/env bash
# The GPU queue (issue 38): what a session lent a GPU runs FIRST, before its own work. Within at most 40 minutes of
# device time in all it records, under benchmarks/results/gpu/<device>/ (the device named in every file):
#   1. updates  per-update ms, FLOPs and % of peak of the three profiles (GC-BC cpu, GC-IQL cpu, GC-IQL paper) and
#               the GC-BC value pass (benchmarks/speed/update_flops.py --time)                     budget  240 s
#   2. episode  a paper-profile GC-IQL critic episode (rule episodes, N 100, K 100, all 10 rounds, 1M-row navigate
#               data) amortised over a batch of 50 episodes in one program                                 300 s
#               (benchmarks/speed/paper_episode.py)
#   3. batched  the same episode with every live episode of the batch adapted in one vmapped call per round
#               (--bucket 0; `ttt`'s default adapts them one at a time, which leaves a GPU mostly idle)    240 s
#   4. table1   paper-profile pointmaze Table-1 rows (pipelines/paper-main.toml --set profile=paper: 512x3,
#               batch 1024; base and critic GC-TTT, 150 episodes a row; GC-BC navigate, GC-IQL navigate, GC-BC
#               stitch, GC-IQL stitch: TABLE1_GROUPS),
#               as far as the 40 minutes go; pre-training's updates/s in pretrain/*.json; resumes where it
#               stopped while the machine stays warm. Pre-training length GPU_QUEUE_STEPS (default 200000): a
#               lease is now 15 minutes and a fresh machine starts without checkpoints, so a row must finish
#               within one lease (1M GC-BC updates alone take 15 min on an H200)                  the rest
#               Then TTGS beside them (issue 41; TTGS_GROUPS): pipelines/test-time-methods.toml's gciql-base and
#               gciql-ttgs-4000 (every published TTGS setting, 4000 vertices) on a paper-profile GC-IQL pointmaze-
#               medium navigate checkpoint, 150 episodes, the one base near the TTGS paper's (OGBench's 1M GC-IQL);
#               records in test-time-methods/.
#               Then GC-IQL on antmaze-medium stitch in the paper profile (pipelines/table1.toml's gciql rows with
#               TABLE1_SETS: 512x3, batch 1024, GPU_QUEUE_STEPS updates, 3 seeds, 150 episodes; ANT_GROUPS), the
#               paper's largest GC-IQL antmaze gain (0.24 -> 0.68), which the cpu profile reproduces at 100k (0.09 ->
#               0.39); SAW on antmaze ran on the CPU (sessions 27-29). The data stage generates the antmaze data on
#               the device with the committed ant expert (benchmarks/results/expert/ant-1m.npz); records in
#               table1-antmaze/.
# The device tool runs one command for at most 10 minutes, so the queue runs in calls: each call does the next
# steps within BUDGET_S and packs what it wrote into $OUT/results.tgz; queue.json (which travels with the working
# tree once unpacked) records each step's state and seconds, so the next call, or the next session, goes on.
#
# On the device machine (the lead's checkout, with the wheels in .whl/: ogbench, mujoco, gymnasium and what they
# need beyond the image's packages, as for benchmarks/gpu_pipeline.sh), from the session, again until it prints
# "queue: complete" (calls in quick succession keep the warm machine and its checkpoints):
#   run(command="bash benchmarks/gpu_queue.sh 570", carry=[".whl"], timeout_s=600)   (or carry=[".whlxz"], below)
# When the tree and the wheels pass the tool's 64 MiB, carry them packed (the queue rebuilds .whl/ from it):
#   python benchmarks/gpu_wheels.py pack .whl .whlxz/wheels.tar.xz --drop 'ogbench/manipspace/descriptions/*/assets/*'
#   (here, once; how to fetch the wheels: benchmarks/gpu_wheels.py's docstring), then carry=[".whlxz"]
#   then here: tar xzf <files_at>/results.tgz   (in the repository root), and commit benchmarks/results/gpu/
# GPU_QUEUE_ONLY="table1" runs only the named steps (a new kind of card would otherwise time the speed steps again
# before any Table-1 row); a row recorded on any device counts as done.
# Here, on a CPU, every step with tiny sizes in a scratch directory (what tests/test_gpu_queue.py runs):
#   bash benchmarks/gpu_queue.sh --dry-run [SCRATCH]
#   bash benchmarks/gpu_queue.sh --plan          # the steps, their budgets and what queue.json says is done
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
TOTAL_S=${GPU_QUEUE_TOTAL_S:-2400}  # device seconds for the whole queue (40 minutes)
mode=run budget=570
case "${1:-}" in
  --dry-run) mode=dry; scratch=${2:-$(mktemp -d)} ;;
  --plan) mode=plan ;;
  "") ;;
  *[!0-9]*) echo "usage: bash benchmarks/gpu_queue.sh [BUDGET_S | --dry-run [SCRATCH] | --plan]" >&2; exit 2 ;;
  *) budget=$1 ;;
esac
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }
STEPS=${GPU_QUEUE_ONLY:-updates episode batched table1}  # GPU_QUEUE_ONLY="table1": skip the speed steps (a new kind of
# device would otherwise time them again before any Table-1 row)
for s in $STEPS; do
  case $s in
    updates|episode|batched|table1) ;;
    *) echo "queue: unknown step $s in GPU_QUEUE_ONLY (valid: updates episode batched table1)" >&2; exit 2 ;;
  esac
done
declare -A CAP=([updates]=240 [episode]=300 [batched]=240 [table1]=$TOTAL_S)
# Table-1 rows in groups that share a checkpoint, in the order they run: GC-IQL navigate before the stitch rows (is
# GC-IQL's missing gain a matter of scale? issue 37). A group whose rows all have records is skipped before any
# pre-training (a fresh machine has no checkpoints; the pipeline would pre-train before finding the records). A row
# counts as done when any record of it exists, on any device: after changing GPU_QUEUE_STEPS, move the old records aside.
TABLE1_GROUPS="gcbc-base-navigate,gcbc-ttt-navigate gciql-base-navigate,gciql-ttt-navigate gcbc-base-stitch,gcbc-ttt-stitch gciql-base-stitch,gciql-ttt-stitch"
# Then TTGS on a paper-profile GC-IQL checkpoint (pipelines/test-time-methods.toml; its own pre-training, so paired
# with its own base row), then pipelines/table1.toml's GC-IQL antmaze stitch rows in the paper profile (their own
# folder: table1.toml's row names repeat paper-main's; SAW's antmaze rows, once here, ran on the CPU).
TTGS_GROUPS="gciql-base,gciql-ttgs-4000"
ANT_GROUPS="gciql-base-stitch,gciql-ttt-stitch"

if [ "$mode" = dry ]; then
  # Tiny sizes, a scratch home/cache/output: nothing under ~/.ogbench, ~/.cache/ttt or benchmarks/results is touched.
  mkdir -p "$scratch"/{home,cache,data,out}
  export HOME=$scratch/home TTT_CACHE=$scratch/cache OUT=$scratch/out
  export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
  device=cpu-dry-run
  R=$scratch/results/gpu/$device
  DATA_ARGS=(--dir "$scratch/data")
  UPDATE_STEPS=2 UPDATE_JOBS=gcbc-cpu  # the cpu profile only: it checks the wiring, not the sizes
  EPISODE_ARGS=(--batch 5 --N 2 --K 5 --max-steps 10 --profile cpu)
  TABLE1_SETS=(--set profile=cpu --set steps=4 --set train_chunk=2 --set seeds=1 --set episodes=1 --set tasks=[1]
               --set data_episodes=4 --set N=2 --set K=1000 --set chunk=5)
  TABLE1_GROUPS="gcbc-base-navigate gcbc-ttt-navigate"  # two groups: the loop and its skipping run here too
  TTGS_GROUPS="gciql-ttgs"  # the wiring: 500 vertices (a 4000 x 4000 value pass is a GPU's work)
  TTGS_SETS=("${TABLE1_SETS[@]}")
  ANT_GROUPS="saw-base-navigate"  # the antmaze data stage (4 episodes, the committed expert) and SAW, wired
  ANT_SETS=("${TABLE1_SETS[@]}")
else
  DATA_ARGS=()
  UPDATE_STEPS=100 UPDATE_JOBS=gcbc-cpu,gciql-cpu,gciql-paper,value
  EPISODE_ARGS=(--batch 50)
  # bucket 0: every live episode of a call fine-tunes in one vmapped update per round (step `batched`: 0.50 s per
  # paper-profile episode on an H200 against 0.97 s one at a time); speed only, not in any record's key
  TABLE1_SETS=(--set profile=paper --set chunk=50 --set bucket=0 --set train_chunk=10000 --set steps=${GPU_QUEUE_STEPS:-200000})
  TTGS_SETS=("${TABLE1_SETS[@]}" --set episodes=10)  # test-time-methods.toml's default is a 2-episode screen
  ANT_SETS=("${TABLE1_SETS[@]}")  # the paper profile and GPU_QUEUE_STEPS, as the pointmaze rows
fi
PY=${PYTHON:-python3}

if [ "$mode" = run ]; then
  OUT=${OUT:-/tmp/gpu-out}
  mkdir -p "$OUT"
  if ! ls .whl/*.whl >/dev/null 2>&1 && [ -f .whlxz/wheels.tar.xz ]; then  # the wheels travelled packed
    $PY benchmarks/gpu_wheels.py unpack .whlxz/wheels.tar.xz .whl || exit 1
  fi
  if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
  else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  fi
  export MUJOCO_GL=disable TTT_CACHE=${TTT_CACHE:-$PWD/.gpu-queue/cache} XLA_PYTHON_CLIENT_PREALLOCATE=false
  device=$($PY -c "import jax; print(jax.devices()[0].device_kind)" 2>/dev/null) || { echo "queue: JAX does not start" >&2; exit 1; }
  device=$(echo "$device" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9.-')
  R=benchmarks/results/gpu/$device
elif [ "$mode" = plan ]; then
  R=benchmarks/results/gpu/'*'
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1

# queue.json: {"device": ..., "steps": {name: {"state": "done" | "partial", "seconds": s}}}
state() {  # state STEP -> done / partial / todo, and the seconds spent so far (all steps) on stdout's 2nd line
  $PY - "$R/queue.json" "$1" <<'EOF'
import glob, json, sys
files = glob.glob(sys.argv[1])
q = json.load(open(files[0])) if files else {"steps": {}}
s = q["steps"].get(sys.argv[2], {})
print(s.get("state", "todo"))
print(int(sum(v.get("seconds", 0) for v in q["steps"].values())))
EOF
}
record() {  # record STEP STATE SECONDS
  mkdir -p "$R"
  $PY - "$R/queue.json" "$1" "$2" "$3" "$device" "$mode" <<'EOF'
import json, os, sys, time
path, step, st, sec, device, mode = sys.argv[1:]
q = json.load(open(path)) if os.path.exists(path) else {"device": device, "mode": mode, "steps": {}}
s = q["steps"].setdefault(step, {"seconds": 0})
s.update(state=st, seconds=s["seconds"] + int(sec), updated=time.strftime("%FT%TZ", time.gmtime()))
tmp = path + ".tmp"
json.dump(q, open(tmp, "w"), indent=1)
os.replace(tmp, path)
EOF
}

if [ "$mode" = plan ]; then
  for s in $STEPS; do
    read -r st spent < <(state "$s" | paste -sd' ')
    echo "$s: budget ${CAP[$s]} s, $st (queue seconds so far: $spent of $TOTAL_S)"
  done
  exit 0
fi

mkdir -p "$R" .gpu-queue
if [ "$mode" = run ] && [ -d .gpu-queue/results ]; then
  # A warm machine keeps .gpu-queue/ (ignored) but takes the results folder from the tree just sent: restore what
  # an earlier call wrote and the session has not unpacked yet, without overwriting the tree's files.
  cp -rn .gpu-queue/results/. "$R"/
  # queue.json is the exception: per step, the entry updated last wins (a committed, older queue.json in the tree
  # must not hide the seconds and states an earlier call on this machine recorded).
  [ -f .gpu-queue/results/queue.json ] && $PY benchmarks/gpu_queue_merge.py .gpu-queue/results/queue.json "$R/queue.json"
fi
touch .gpu-queue/stamp
"$PY" -c "import jax, ogbench, mujoco; print('queue on', jax.devices(), 'jax', jax.__version__, 'mujoco', mujoco.__version__)" || exit 1

# The data: full-size pointmaze-medium navigate and stitch into OGBench's directory (dry run: 4 episodes each).
gen_pids=()
for d in pointmaze-medium-navigate-v0 pointmaze-medium-stitch-v0; do
  if [ "$mode" = dry ]; then
    $PY -m ttt.cli data generate "$d" --episodes 4 --workers 1 "${DATA_ARGS[@]}" >"$OUT/gen-$d.log" 2>&1 &
  else
    $PY -m ttt.cli data generate "$d" --workers 8 >"$OUT/gen-$d.log" 2>&1 &
  fi
  gen_pids+=($!)
done
for p in "${gen_pids[@]}"; do wait "$p" || { echo "queue: data generation failed (see $OUT/gen-*.log)" >&2; cat "$OUT"/gen-*.log >&2; exit 1; }; done
echo "queue: data ready after $(($(date +%s) - t0)) s"

run_step() {  # run_step NAME: within min(its cap, the call's time left, the queue's time left)
  local name=$1 st spent cap t rc=1
  read -r st spent < <(state "$name" | paste -sd' ')
  if [ "$st" = done ]; then echo "queue: $name done before"; return 0; fi
  cap=${CAP[$name]}
  [ "$name" = table1 ] && cap=$((TOTAL_S - spent))
  [ "$(left)" -lt "$cap" ] && cap=$(($(left) - 15))
  if [ "$cap" -lt 30 ]; then echo "queue: no time left for $name in this call"; return 0; fi
  echo "queue: $name (up to $cap s)"
  t=$(date +%s)
  case $name in
    updates) timeout "$cap" $PY benchmarks/speed/update_flops.py --time "$UPDATE_STEPS" --jobs "$UPDATE_JOBS" "${DATA_ARGS[@]}" \
               --out "$R/update_flops.json"; rc=$? ;;
    episode) timeout "$cap" $PY benchmarks/speed/paper_episode.py "${EPISODE_ARGS[@]}" "${DATA_ARGS[@]}" \
               --out "$R/paper_episode.json"; rc=$? ;;
    batched) timeout "$cap" $PY benchmarks/speed/paper_episode.py "${EPISODE_ARGS[@]}" --bucket 0 "${DATA_ARGS[@]}" \
               --out "$R/paper_episode_batched.json"; rc=$? ;;
    table1) rc=0
            # PIPELINE:FOLDER:ROWS, one per checkpoint group, in order
            for entry in $(for g in $TABLE1_GROUPS; do echo "paper-main:table1:$g"; done) \
                         $(for g in $TTGS_GROUPS; do echo "test-time-methods:test-time-methods:$g"; done) \
                         $(for g in $ANT_GROUPS; do echo "table1:table1-antmaze:$g"; done); do
              IFS=: read -r pipe folder group <<<"$entry"
              case $pipe in
                table1) sets=("${ANT_SETS[@]}") ;;
                test-time-methods) sets=("${TTGS_SETS[@]}") ;;
                *) sets=("${TABLE1_SETS[@]}") ;;
              esac
              # a row recorded on any device is done (the records do not depend on the card)
              todo=$(for r in ${group//,/ }; do ls "$(dirname "$R")"/*/"$folder"/evals/"$r"-*.json >/dev/null 2>&1 || echo "$r"; done | paste -sd,)
              [ -n "$todo" ] || { echo "queue: $folder rows $group done before"; continue; }
              g=$((cap - ($(date +%s) - t)))
              [ "$g" -ge 30 ] || { rc=124; break; }
              timeout "$g" $PY -m ttt.cli run "$pipe" --only "$todo" "${sets[@]}" \
                --out "$R/$folder" --cache "$TTT_CACHE" && continue
              rc=$?  # the step stays partial; 124: out of time (resumed next call), else the next group goes on
              [ $rc -eq 124 ] && break
            done
            for m in "$TTT_CACHE"/ckpt/*/*/meta.json; do  # pre-training's updates/s, per checkpoint
              [ -f "$m" ] || continue
              mkdir -p "$R/pretrain"
              cp "$m" "$R/pretrain/$(basename "$(dirname "$(dirname "$m")")")-$(basename "$(dirname "$m")").json"
            done ;;
  esac
  if [ $rc -eq 0 ]; then st=done; else st=partial; fi
  record "$name" "$st" $(($(date +%s) - t))
  echo "queue: $name $st (exit $rc) after $(($(date +%s) - t)) s"
}

for s in $STEPS; do run_step "$s" 2>&1 | tee -a "$OUT/queue.log"; done
if [ "$mode" = run ]; then
  find "$R" -newer .gpu-queue/stamp -type f | tar czf "$OUT/results.tgz" -T -
  mkdir -p .gpu-queue/results && cp -r "$R"/. .gpu-queue/results/  # for the next call on this machine
  echo "queue: packed $(tar tzf "$OUT/results.tgz" | wc -l) files into results.tgz after $(($(date +%s) - t0)) s"
fi
all=1
for s in $STEPS; do [ "$(state "$s" | sed -n 1p)" = done ] || all=0; done
[ $all = 1 ] && echo "queue: complete ($R)" || echo "queue: not complete; run it again ($R/queue.json)"
