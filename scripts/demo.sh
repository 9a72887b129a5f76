#!/usr/bin/env bash
# The main job, with no outside data and no GPU: generate a pruned layer, inspect it, print its work plan.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/bootstrap.sh
bash scripts/build.sh build
mkdir -p build/demo
./build/tools/sparsert/sparsert gen pruned --rows 512 --cols 1024 --sparsity 0.9 --seed 42 -o build/demo/layer.mtx
./build/tools/sparsert/sparsert inspect build/demo/layer.mtx --plan --m-blocks 8 --gy 4
