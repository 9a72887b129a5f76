#!/usr/bin/env bash
# Runs stages of gpu_checks.sh one after another inside one device call, under a deadline, and packs everything they
# wrote into one archive: a lent GPU comes for minutes (15 of device time a session, 10 a call, since 2026-11-26), and
# a call brings back at most 8 files, none of them from a process killed at the call's limit.
#
#   bash scripts/gpu_lease.sh SECONDS STAGE... [-- BUILD_DIR]
#
# SECONDS: the time the stages may take together; each stage gets what is left (a stage cut off loses only the step
# in flight: every finished step's log and JSON are kept). Leave the call's timeout_s 30 s above it for the packing.
# BUILD_DIR: as for gpu_checks.sh (default .gpu-bundle, as scripts/gpu_bundle.sh makes it).
# Writes $OUT/results.tar.gz (the stages' logs and files, and lease.log: each stage's exit status and seconds).
set -uo pipefail
budget=${1:?usage: gpu_lease.sh SECONDS STAGE... [-- BUILD_DIR]}
shift
stages=()
build=.gpu-bundle
while (( $# > 0 )); do
  if [[ $1 == -- ]]; then
    build=${2:?gpu_lease.sh: -- needs a build directory}
    break
  fi
  stages+=("$1")
  shift
done
(( ${#stages[@]} > 0 )) || { echo "gpu_lease.sh: no stage named" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-gpu-results}
work=$(mktemp -d)/results
mkdir -p "$work" "$out"
start=$(date +%s)
# The stages' tune steps stop assembling and timing in time to write their reports before this (gpu_checks.sh,
# tune_budget): a tune cut off by the deadline brings nothing back.
export SPARSERT_LEASE_DEADLINE=$(( start + budget ))
for s in "${stages[@]}"; do
  left=$(( budget - ($(date +%s) - start) ))
  if (( left < 15 )); then
    echo "$s: not started, $left s left" | tee -a "$work/lease.log"
    continue
  fi
  t0=$(date +%s)
  rc=0
  # timeout signals its whole process group, so a stage's sparsert and tee go with it.
  timeout -k 5 "$left" bash "$root/scripts/gpu_checks.sh" "$s" "$build" "$work" || rc=$?
  echo "$s: exit $rc after $(( $(date +%s) - t0 )) s$( (( rc == 124 || rc == 137 )) && echo ', cut off by the deadline')" \
    | tee -a "$work/lease.log"
done
tar czf "$out/results.tar.gz" -C "$(dirname "$work")" results
echo "gpu_lease.sh: $out/results.tar.gz ($(du -h "$out/results.tar.gz" | cut -f1))"
cat "$work/lease.log"
