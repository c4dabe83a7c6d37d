#!/usr/bin/env bash
# Every GPU check of Zico in one run, for a GPU machine with no network and torch preinstalled, in under 8 minutes
# on one H200: the whole run, set-up included, has a deadline of ZICO_GPU_CHECK_BUDGET_S seconds (default 470; the
# report after it takes a second or two), each step runs under the smaller of its own limit and the time left, and a step that cannot have
# its minimum is not started (recorded "fail(no time left)"). A step past its limit is stopped with SIGABRT, so
# Python's faulthandler prints every thread's stack. Steps (limit in seconds):
#   1. build the allocator (CUDA upstream with nvcc) — python -m zico_allocator.build                        45
#   2. the gpu-marked tests but the crash-isolation file — pytest -m gpu                                       60
#   3. crash isolation: a sticky CUDA error (an illegal address from a bad kernel) and a SIGKILL, each in one
#      job process on the CUDA agent pool; only that job fails, its chunks are back within 1 s, the neighbour
#      and a job started after the faults succeed — pytest tests/workers/test_gpu_crash_isolation.py           55
#   4. two real co-located CUDA jobs (ResNet-50 batch 64 and GPT-2 small 8 x 1024), each its own process, under
#      0.8 x the sum of their solo peaks, 12 iterations — python -m tools.colocate                             50
#   5. the CUDA estimate against real CUDA allocator traces of every catalog workload (small sizes)
#      — python -m workers.curves.accuracy --device cuda:0 --steady 2                                           40
#   6. what a job process costs: a training step of ResNet-50 (batch 64) and GPT-2 small (8 x 1024) as a job
#      process through the device agent, in a plain process and in a worker thread, interleaved, 3 rounds of
#      5 steps — python -m tools.bench.job_overhead --device cuda:0                                           50
#   7. the real-run experiment: ResNet-50 + GPT-2 small and BERT-base + GPT-2 small run sequentially,
#      uncoordinated, time-sliced and with Zico at one budget halfway from the sum of their held peaks to the
#      floor, 6 iterations — python -m tools.bench.experiment --device cuda:0 --budget-at 0.5              150
#      (ZICO_GPU_EXPERIMENT_PAIRS: other pairs, e.g. "resnet50+gpt2-small bert-base+gpt2-small resnet50+resnet50")
#   8. a report: $OUT/gpu-check.json and $OUT/gpu-check.md (the same figures as the demo)
# The limits add up to 450 s. Not yet run on a GPU in this form: the limits are estimates (process start-up with
# CUDA 5-10 s each); the report's per-step seconds say where they were wrong. Usage: scripts/gpu-check.sh
# (OUT=dir to choose where reports go; ZICO_WHEELHOUSE=dir of wheels to install missing Python packages offline —
# scripts/gpu-wheels.sh fetches them on a machine with network access; PYTHON=interpreter).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/var/gpu-check}"
mkdir -p "$OUT"
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    PYTHON=.venv/bin/python
  else
    PYTHON=python3
  fi
fi
export PYTHONPATH="$ROOT/platform:$ROOT:$ROOT/allocator/python${PYTHONPATH:+:$PYTHONPATH}"
export DJANGO_SETTINGS_MODULE=zico.test_settings DEBUG=1 ZICO_VAR_DIR="$OUT/var" ZICO_DATA_DIR="$OUT/var/data"
START=$(date +%s)
log() { printf '[gpu-check %3ss] %s\n' "$(( $(date +%s) - START ))" "$*" | tee -a "$OUT/gpu-check.log" >&2; }
step_status() { echo "$1=$2" >> "$OUT/steps.env"; }
: > "$OUT/steps.env"; : > "$OUT/gpu-check.log"; : > "$OUT/step-seconds.env"
status_of() { grep "^$1=" "$OUT/steps.env" | tail -1 | cut -d= -f2-; }  # a step's last recorded status
BUDGET_S="${ZICO_GPU_CHECK_BUDGET_S:-470}"
[[ "$BUDGET_S" =~ ^[0-9]+$ ]] || { log "ZICO_GPU_CHECK_BUDGET_S must be a whole number of seconds, got '$BUDGET_S'"; exit 2; }
DEADLINE=$(( START + BUDGET_S ))
# run_step NAME LIMIT MIN LOG CMD...: CMD under timeout -s ABRT min(LIMIT, time left), its output to LOG; records
# NAME=ok | fail(RC) | fail(time limit) | fail(no time left) and the seconds it took; returns CMD's status.
run_step() {
  local name=$1 limit=$2 min=$3 log=$4; shift 4
  local left=$(( DEADLINE - $(date +%s) ))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt "$min" ]; then
    step_status "$name" "fail(no time left)"; log "   not started: ${left}s left of the ${BUDGET_S}s budget, it needs ${min}s"
    return 1
  fi
  local t0=$(date +%s) rc
  timeout -s ABRT "$limit" "$@" > "$log" 2>&1
  rc=$?
  echo "$name=$(( $(date +%s) - t0 ))" >> "$OUT/step-seconds.env"
  case $rc in
    0) step_status "$name" ok ;;
    124|134) step_status "$name" "fail(time limit ${limit}s)" ;;
    *) step_status "$name" "fail($rc)" ;;
  esac
  return $rc
}

log "python: $PYTHON ($($PYTHON -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1))"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/gpu-check.log" >&2
if ! $PYTHON -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  log "torch sees no CUDA device: nothing to check"; step_status cuda fail; exit 1
fi

# Missing pure-Python dependencies (pytest, transformers, ...) can come from a local wheelhouse, offline.
need=()
for mod in pytest transformers jsonschema numpy redis celery django; do
  $PYTHON -c "import $mod" 2>/dev/null || need+=("$mod")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ -n "${ZICO_WHEELHOUSE:-}" ]; then
    # every wheel there (scripts/gpu-wheels.sh fetches a consistent set), not the missing names one by
    # one: a name with no wheel in the folder (numpy, say) would fail the whole install
    log "missing: ${need[*]}; installing the wheels in $ZICO_WHEELHOUSE (offline)"
    $PYTHON -m pip install --no-index --no-deps "$ZICO_WHEELHOUSE"/*.whl >> "$OUT/gpu-check.log" 2>&1 \
      || log "   wheel install failed (see $OUT/gpu-check.log)"
  else
    log "missing Python packages: ${need[*]} (set ZICO_WHEELHOUSE to install them offline)"
  fi
fi

log "1/7 building the allocator with nvcc"
if run_step build 45 10 "$OUT/build.log" $PYTHON -m zico_allocator.build \
   && ! $PYTHON -c "from zico_allocator import build; assert build.cuda_library(), 'no CUDA upstream built'" >> "$OUT/build.log" 2>&1; then
  step_status build "fail(no CUDA upstream)"
fi
[ "$(status_of build)" = ok ] && log "   built (log: $OUT/build.log)" \
  || { log "   BUILD FAILED — see $OUT/build.log"; tail -20 "$OUT/build.log" >&2; }

plugins=""; $PYTHON -c "import pytest_django" 2>/dev/null || plugins="-p no:django"
log "2/7 gpu-marked tests"
if $PYTHON -c "import pytest" 2>/dev/null; then
  # Only the files that hold gpu-marked tests (the rest of the suite needs the web stack's services), but the
  # crash-isolation file, which step 3 runs.
  mapfile -t gpu_files < <(grep -rlE "mark\.gpu" tests --include='test_*.py' | grep -v test_gpu_crash_isolation.py)
  run_step gpu_tests 60 20 "$OUT/gpu-tests.log" $PYTHON -m pytest -m gpu "${gpu_files[@]}" -q -rP -p no:cacheprovider \
    $plugins --junitxml="$OUT/gpu-tests.xml"
  log "   $(tail -1 "$OUT/gpu-tests.log")"
else
  step_status gpu_tests "skipped(no pytest)"; log "   skipped: pytest is not installed"
fi

log "3/7 crash isolation: a sticky CUDA error and a SIGKILL in one job process each, beside a neighbour"
[ -x /usr/bin/bwrap ] || log "   no /usr/bin/bwrap here: the test skips (its faulty project is not Zico's catalog project, so it runs only sandboxed)"
if $PYTHON -c "import pytest" 2>/dev/null; then
  run_step crash_isolation 55 25 "$OUT/crash-isolation.log" $PYTHON -m pytest -m gpu tests/workers/test_gpu_crash_isolation.py \
    -q -rsP -s -p no:cacheprovider $plugins --junitxml="$OUT/crash-isolation.xml"
  # a skip (an MPS daemon runs: docs/workers.md "MPS") is recorded as such, not as a pass
  grep -qE "^SKIPPED|[0-9]+ skipped" "$OUT/crash-isolation.log" && step_status crash_isolation "skipped(see crash-isolation.log)"
  grep -E "^(sticky error|job [0-9]+:)|passed|failed|skipped" "$OUT/crash-isolation.log" | tail -5 >&2
else
  step_status crash_isolation "fail(no pytest)"; log "   pytest is not installed"
fi

log "4/7 two co-located CUDA jobs under a budget below the sum of their solo peaks"
data=real
$PYTHON -c "import sklearn" 2>/dev/null || data=synthetic
run_step colocate 50 25 "$OUT/colocate.log" $PYTHON -X faulthandler -m tools.colocate --device cuda:0 \
  --job "resnet50:batch_size=64,image_size=224,data=$data" \
  --job "gpt2-small:batch_size=8,seq_len=1024,data=$data" \
  --iterations "${ZICO_GPU_ITERATIONS:-12}" --budget-fraction 0.8 --data-dir "$ZICO_DATA_DIR" --out "$OUT/colocate"
[ -f "$OUT/colocate.md" ] && cat "$OUT/colocate.md" >&2 || tail -30 "$OUT/colocate.log" >&2

log "5/7 CUDA estimate against real CUDA allocator traces"
run_step curve_accuracy 40 15 "$OUT/curve-accuracy-cuda.log" $PYTHON -X faulthandler -m workers.curves.accuracy \
  --device cuda:0 --steady 2 --data-dir "$ZICO_DATA_DIR" --out "$OUT/curve-accuracy-cuda.md"
tail -22 "$OUT/curve-accuracy-cuda.log" >&2

log "6/7 job-process overhead: ResNet-50 and GPT-2 small as job processes vs a plain process vs a worker thread"
run_step job_overhead 50 25 "$OUT/job-overhead.log" $PYTHON -X faulthandler -m tools.bench.job_overhead --device cuda:0 \
  --job "resnet50:batch_size=64,image_size=224,data=synthetic" \
  --job "gpt2-small:batch_size=8,seq_len=1024,data=synthetic" \
  --rounds "${ZICO_GPU_BENCH_ROUNDS:-3}" --steps 5 --threads 0 --out "$OUT/job-overhead"
tail -30 "$OUT/job-overhead.log" >&2

log "7/7 real-run experiment: sequential, uncoordinated, time slicing and Zico on the device"
pairs=()
for p in ${ZICO_GPU_EXPERIMENT_PAIRS:-resnet50+gpt2-small bert-base+gpt2-small}; do pairs+=(--pair "$p"); done
run_step experiment 150 60 "$OUT/experiment.log" $PYTHON -X faulthandler -m tools.bench.experiment --device cuda:0 \
  "${pairs[@]}" --iterations 6 --budget-at 0.5 --out "$OUT/experiment"
[ -f "$OUT/experiment.md" ] && cat "$OUT/experiment.md" >&2 || tail -30 "$OUT/experiment.log" >&2

$PYTHON - "$OUT" "$data" "$(( $(date +%s) - START ))" "$BUDGET_S" <<'PY'
import json, sys, pathlib, subprocess
out, data, seconds, budget = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
read = lambda name: dict(line.strip().split("=", 1) for line in (out / name).read_text().splitlines() if "=" in line)
steps, step_s = read("steps.env"), read("step-seconds.env")  # the last status of each step wins
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
colocate = json.loads((out / "colocate.json").read_text()) if (out / "colocate.json").exists() else None
overhead = json.loads((out / "job-overhead.json").read_text()) if (out / "job-overhead.json").exists() else None
report = {"gpu": gpu, "seconds": seconds, "budget_s": budget, "step_seconds": {k: int(v) for k, v in step_s.items()},
          "data": data, "steps": steps, "colocate": colocate,
          "job_overhead": overhead and {r["job"]: r["summary"] for r in overhead["results"]}}
(out / "gpu-check.json").write_text(json.dumps(report, indent=2))
md = [f"# Zico GPU check", "", f"- GPU: {gpu}", f"- took {seconds} s (deadline {budget} s); training data: {data}", ""]
md += [f"- {k}: {v}" + (f" ({step_s[k]} s)" if k in step_s else "") for k, v in steps.items()]
if (out / "colocate.md").exists():
    md += ["", (out / "colocate.md").read_text()]
if (out / "job-overhead.txt").exists():
    md += ["", "```", (out / "job-overhead.txt").read_text().rstrip(), "```"]
if (out / "experiment.md").exists():
    md += ["", "## Real-run experiment", "", (out / "experiment.md").read_text()]
(out / "gpu-check.md").write_text("\n".join(md) + "\n")
print("\n".join(md))
ok = all(v == "ok" or v.startswith("skipped") for v in steps.values())  # a skip says why in its log
sys.exit(0 if ok else 1)
PY
