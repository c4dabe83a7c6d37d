#!/usr/bin/env bash
# Every GPU check of Zico in one run, for a GPU machine with no network and torch preinstalled:
#   1. build the allocator (CUDA upstream with nvcc) — python -m zico_allocator.build
#   2. run the gpu-marked tests                       — pytest -m gpu
#   3. two real co-located CUDA jobs (ResNet-50 batch 64 and GPT-2 small) under a budget below the sum of
#      their solo peaks, through the shared allocator and the coordinator — python -m workers.colocate
#   4. the CUDA estimate against real CUDA allocator traces of every catalog workload (small sizes)
#      — python -m workers.curves.accuracy --device cuda:0
#   5. what a job process costs: a training step of ResNet-50 (batch 64) and GPT-2 small (8 x 1024) as a job
#      process through the device agent, in a plain process and in a worker thread, interleaved
#      — python -m workers.bench.job_overhead --device cuda:0
#   6. the real-run experiment: ResNet-50 + GPT-2 small run sequentially, uncoordinated, time-sliced and with Zico
#      at two budgets below the sum of their held peaks — python -m workers.bench.experiment --device cuda:0
#      (ZICO_GPU_EXPERIMENT_PAIRS: more pairs, e.g. "resnet50+gpt2-small bert-base+gpt2-small resnet50+resnet50")
#   7. a report: $OUT/gpu-check.json and $OUT/gpu-check.md (the same figures as the demo)
# A step past its time limit is stopped with SIGABRT, so Python's faulthandler prints every thread's stack.
# Budget: < 15 minutes on one H200 (each step's own limit: 120 + 150 + 200 + 150 + 240 + 300 s; step 6 is
# sized for its default pair and has not yet run on a GPU). Usage: scripts/gpu-check.sh   (OUT=dir to choose where reports go;
# ZICO_WHEELHOUSE=dir of wheels to install missing Python packages offline — scripts/gpu-wheels.sh fetches
# them on a machine with network access; PYTHON=interpreter).
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
: > "$OUT/steps.env"; : > "$OUT/gpu-check.log"

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

log "1/6 building the allocator with nvcc"
if timeout 120 $PYTHON -m zico_allocator.build >> "$OUT/build.log" 2>&1 \
   && $PYTHON -c "from zico_allocator import build; assert build.cuda_library(), 'no CUDA upstream built'" >> "$OUT/build.log" 2>&1; then
  step_status build ok; log "   built (log: $OUT/build.log)"
else
  step_status build fail; log "   BUILD FAILED — see $OUT/build.log"; tail -20 "$OUT/build.log" >&2
fi

log "2/6 gpu-marked tests"
if $PYTHON -c "import pytest" 2>/dev/null; then
  plugins=""; $PYTHON -c "import pytest_django" 2>/dev/null || plugins="-p no:django"
  # Only the files that hold gpu-marked tests: the rest of the suite needs the web stack's services.
  mapfile -t gpu_files < <(grep -rlE "mark\.gpu" tests --include='test_*.py')
  timeout 150 $PYTHON -m pytest -m gpu "${gpu_files[@]}" -q -rP -p no:cacheprovider $plugins --junitxml="$OUT/gpu-tests.xml" \
    > "$OUT/gpu-tests.log" 2>&1
  rc=$?
  step_status gpu_tests "$([ $rc = 0 ] && echo ok || echo "fail($rc)")"
  log "   $(tail -1 "$OUT/gpu-tests.log")"
else
  step_status gpu_tests "skipped(no pytest)"; log "   skipped: pytest is not installed"
fi

log "3/6 two co-located CUDA jobs under a budget below the sum of their solo peaks"
data=real
$PYTHON -c "import sklearn" 2>/dev/null || data=synthetic
timeout -s ABRT 200 $PYTHON -X faulthandler -m workers.colocate --device cuda:0 \
  --job "resnet50:batch_size=64,image_size=224,data=$data" \
  --job "gpt2-small:batch_size=8,seq_len=1024,data=$data" \
  --iterations "${ZICO_GPU_ITERATIONS:-30}" --budget-fraction 0.8 --data-dir "$ZICO_DATA_DIR" \
  --out "$OUT/colocate" > "$OUT/colocate.log" 2>&1
rc=$?
step_status colocate "$([ $rc = 0 ] && echo ok || echo "fail($rc)")"
[ -f "$OUT/colocate.md" ] && cat "$OUT/colocate.md" >&2 || tail -30 "$OUT/colocate.log" >&2

log "4/6 CUDA estimate against real CUDA allocator traces"
timeout -s ABRT 150 $PYTHON -X faulthandler -m workers.curves.accuracy --device cuda:0 --steady 3 --data-dir "$ZICO_DATA_DIR" \
  --out "$OUT/curve-accuracy-cuda.md" > "$OUT/curve-accuracy-cuda.log" 2>&1
rc=$?
step_status curve_accuracy "$([ $rc = 0 ] && echo ok || echo "fail($rc)")"
tail -22 "$OUT/curve-accuracy-cuda.log" >&2

log "5/6 job-process overhead: ResNet-50 and GPT-2 small as job processes vs a plain process vs a worker thread"
timeout -s ABRT 240 $PYTHON -X faulthandler -m workers.bench.job_overhead --device cuda:0 \
  --job "resnet50:batch_size=64,image_size=224,data=synthetic" \
  --job "gpt2-small:batch_size=8,seq_len=1024,data=synthetic" \
  --rounds "${ZICO_GPU_BENCH_ROUNDS:-6}" --steps 8 --threads 0 --out "$OUT/job-overhead" > "$OUT/job-overhead.log" 2>&1
rc=$?
step_status job_overhead "$([ $rc = 0 ] && echo ok || echo "fail($rc)")"
tail -30 "$OUT/job-overhead.log" >&2

log "6/6 real-run experiment: sequential, uncoordinated, time slicing and Zico on the device"
pairs=()
for p in ${ZICO_GPU_EXPERIMENT_PAIRS:-resnet50+gpt2-small}; do pairs+=(--pair "$p"); done
timeout -s ABRT 300 $PYTHON -X faulthandler -m workers.bench.experiment --device cuda:0 "${pairs[@]}" \
  --iterations 8 --budgets 2 --out "$OUT/experiment" > "$OUT/experiment.log" 2>&1
rc=$?
step_status experiment "$([ $rc = 0 ] && echo ok || echo "fail($rc)")"
[ -f "$OUT/experiment.md" ] && cat "$OUT/experiment.md" >&2 || tail -30 "$OUT/experiment.log" >&2

$PYTHON - "$OUT" "$data" "$(( $(date +%s) - START ))" <<'PY'
import json, sys, pathlib, subprocess
out, data, seconds = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
steps = dict(line.strip().split("=", 1) for line in (out / "steps.env").read_text().splitlines() if "=" in line)
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
colocate = json.loads((out / "colocate.json").read_text()) if (out / "colocate.json").exists() else None
overhead = json.loads((out / "job-overhead.json").read_text()) if (out / "job-overhead.json").exists() else None
report = {"gpu": gpu, "seconds": seconds, "data": data, "steps": steps, "colocate": colocate,
          "job_overhead": overhead and {r["job"]: r["summary"] for r in overhead["results"]}}
(out / "gpu-check.json").write_text(json.dumps(report, indent=2))
md = [f"# Zico GPU check", "", f"- GPU: {gpu}", f"- took {seconds} s; training data: {data}", ""]
md += [f"- {k}: {v}" for k, v in steps.items()]
if (out / "colocate.md").exists():
    md += ["", (out / "colocate.md").read_text()]
if (out / "job-overhead.txt").exists():
    md += ["", "```", (out / "job-overhead.txt").read_text().rstrip(), "```"]
if (out / "experiment.md").exists():
    md += ["", "## Real-run experiment", "", (out / "experiment.md").read_text()]
(out / "gpu-check.md").write_text("\n".join(md) + "\n")
print("\n".join(md))
ok = all(v == "ok" for k, v in steps.items() if k != "gpu_tests" or not v.startswith("skipped"))
sys.exit(0 if ok else 1)
PY
