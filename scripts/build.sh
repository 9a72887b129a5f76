#!/usr/bin/env bash
# build.sh BUILD_DIR [cmake options...]: configure (once) and build sparsert with Ninja.
set -euo pipefail
dir="$1"; shift
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs="${SPARSERT_JOBS:-$(nproc)}"
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$dir" -j "$jobs"
