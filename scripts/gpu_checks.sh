#!/usr/bin/env bash
# The checks that need a real GPU, in stages that each fit one device call (10 minutes):
#
#   bash scripts/gpu_checks.sh STAGE [BUILD_DIR] [OUT_DIR]
#
# STAGE: info | tests | bench-rn50 | bench-rest | graphchallenge | tune | all
# BUILD_DIR: a configured and built tree (default: build, as scripts/build.sh makes it), or the bundle that
#   scripts/gpu_bundle.sh makes (.gpu-bundle: bin/, lib/, data/) for a device machine without the build's packages
# OUT_DIR: where results and logs go (default: $OUT when set, as on the device machine, else gpu-results)
#
# Every stage writes STAGE.log with the date, the GPU (nvidia-smi) and each command; the benchmarks write their JSON
# beside it, ready for `sparsert bench --report` into docs/benchmarks.md. A stage fails (exit 1) when a GPU test is
# skipped instead of run, so a run without a working driver cannot pass for a GPU result.
set -euo pipefail

stage=${1:?usage: gpu_checks.sh info|tests|bench-rn50|bench-rest|graphchallenge|tune|all [BUILD_DIR] [OUT_DIR]}
build=${2:-build}
out=${3:-${OUT:-gpu-results}}
root=$(cd "$(dirname "$0")/.." && pwd)
data=${SPARSERT_DATA:-$root/../shared/data}
sparsert=$build/tools/sparsert/sparsert
bundle=0
if [[ -x $build/bin/sparsert ]]; then
  bundle=1
  sparsert=$build/bin/sparsert
  export LD_LIBRARY_PATH=$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  [[ -d $build/data/graphchallenge ]] && data=$build/data
fi
export SPARSERT_DATA_DIR=$data
mkdir -p "$out"

log() { echo "$*" | tee -a "$out/$stage.log"; }
run() {
  log "\$ $*"
  "$@" 2>&1 | tee -a "$out/$stage.log"
  return "${PIPESTATUS[0]}"
}

[[ -x $sparsert ]] || { echo "gpu_checks.sh: $sparsert is missing: build first (bash scripts/build.sh)" >&2; exit 2; }
: > "$out/$stage.log"
log "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
log "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if command -v nvidia-smi > /dev/null; then
  run nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
else
  log "nvidia-smi: not found"
fi

case $stage in
  info) ;;
  tests)
    # The real-driver tests and everything else that can use the GPU; none may be skipped.
    if (( bundle )); then
      run "$build/bin/real_gpu_tests"
    else
      run ctest --test-dir "$build" -R 'RealGpu|DriverApi|Gpu\.|CompileRun|Bench\.' --output-on-failure
    fi
    if grep -q -E 'Skipped|SKIPPED|\*\*\*Not Run' "$out/$stage.log"; then
      log "gpu_checks.sh: a GPU test was skipped: this is not a GPU result"
      exit 1
    fi
    if ! grep -q -E 'OK \] RealGpu\.|RealGpu\..*Passed' "$out/$stage.log"; then
      log "gpu_checks.sh: no RealGpu test ran (is $build fully built?)"
      exit 1
    fi
    ;;
  bench-rn50)
    for s in rn50-0.9 rn50-0.95; do
      run "$sparsert" bench --suite "$s" --device cuda --repeats 20 --data "$data" -o "$out/$s-cuda.json"
    done
    ;;
  bench-rest)
    for s in transformer mobilenet graphchallenge; do
      run "$sparsert" bench --suite "$s" --device cuda --repeats 20 --data "$data" -o "$out/$s-cuda.json"
    done
    ;;
  graphchallenge)
    gc=$data/graphchallenge
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    tar xzf "$gc/neuron1024.tar.gz" -C "$tmp"
    # --replicate 50 tiles the first 1200 images into the official 60000-input batch; the truth is tiled alike.
    run "$sparsert" graphchallenge --weights "$tmp/neuron1024" --neurons 1024 --layers 120 \
      --inputs "$gc/sparse-images-1024-first1200.tsv" --categories "$gc/neuron1024-l120-categories-first1200.tsv" \
      --replicate 50 --device cuda
    run "$sparsert" graphchallenge --weights "$tmp/neuron1024" --neurons 1024 --layers 120 \
      --inputs "$gc/sparse-images-1024-first1200.tsv" --categories "$gc/neuron1024-l120-categories-first1200.tsv" \
      --replicate 50 --device cpu
    ;;
  tune)
    # The model's ranking against measured times on one DLMC layer (docs/autotune.md).
    layer=$data/dlmc/rn50/magnitude_pruning/0.9/bottleneck_2_block_group3_2_1.smtx
    run "$sparsert" tune "$layer" --n 196 --mode gpu -o "$out/tune-gpu.json" --no-db
    run "$sparsert" tune "$layer" --n 196 --mode model -o "$out/tune-model.json" --no-db
    ;;
  all)
    for s in info tests bench-rn50 bench-rest graphchallenge tune; do bash "$0" "$s" "$build" "$out"; done
    ;;
  *)
    echo "gpu_checks.sh: unknown stage $stage" >&2
    exit 2
    ;;
esac
