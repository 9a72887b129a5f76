#!/usr/bin/env bash
# Writes the PTX that this build emits for every DLMC rn50 layer (0.9 and 0.95, at its real N) into OUTDIR, so that a
# restructuring can be checked to change no byte: run it before and after, then `cmp`/`diff -r` the two directories.
#   bash scripts/ptx_snapshot.sh OUTDIR [SPARSERT_BINARY]
# Per layer: `emit` with codegen's heuristic tiles (immediates and constant bank), and `compile --ptx-only` of a
# one-layer network with the model's tiles (baked where compile bakes, and streamed), in a private kernel cache so that
# every kernel is emitted afresh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: ptx_snapshot.sh OUTDIR [SPARSERT_BINARY]}"
sparsert="${2:-$root/build/tools/sparsert/sparsert}"
data="$root/../shared/data/dlmc"
[[ -d "$data" ]] || { echo "ptx_snapshot: $data not found" >&2; exit 2; }
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export SPARSERT_CACHE_DIR="$work/cache"
for sparsity in 0.9 0.95; do
  while IFS=, read -r name n; do
    [[ -n "$name" ]] || continue
    file="$data/rn50/magnitude_pruning/$sparsity/$name.smtx"
    [[ -f "$file" ]] || continue
    dest="$out/$sparsity/$name"
    mkdir -p "$dest"
    "$sparsert" emit "$file" --n "$n" --target sm_90 --relu --bias -0.1 -o "$dest/emit-imm.ptx" > /dev/null
    "$sparsert" emit "$file" --n "$n" --target sm_80 --weights const -o "$dest/emit-const.ptx" > /dev/null
    for kernel in auto streamed; do
      printf '{"format": "sparsert-network/1", "layers": [{"name": "%s", "weights": "%s", "n": %s, "activation": "relu"}]}\n' \
        "$name" "$file" "$n" > "$work/net.json"
      # --row-align 1: at the layer's real N, as the snapshots before compile aligned rows by default (2026-11-27).
      "$sparsert" compile "$work/net.json" -o "$work/pkg" --target sm_90 --ptx-only --no-tuning-db -q \
        --kernel "$kernel" --row-align 1 > /dev/null
      for f in "$work/pkg"/*.ptx "$work/pkg"/*/*.ptx; do
        [[ -f "$f" ]] && cp "$f" "$dest/compile-$kernel-$(basename "$f")"
      done
      rm -rf "$work/pkg"
    done
  done < "$data/rn50_batchsizes.txt"
done
rm -f "$out"/*/*/*.json
echo "ptx_snapshot: $(find "$out" -name '*.ptx' | wc -l) PTX files in $out"
