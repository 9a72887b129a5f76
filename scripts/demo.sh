#!/usr/bin/env bash
# The main job, with no outside data and no GPU: generate a pruned 6-layer network (1024 x 1024 at 90% sparsity),
# inspect a layer and its work plan, compile every layer to PTX and cubins for sm_80 and sm_90 (nvJitLink, through
# the kernel cache), and run the package on the CPU executor (or the GPU where one is found), checked against the
# double-precision reference.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/bootstrap.sh
bash scripts/build.sh build
sparsert=./build/tools/sparsert/sparsert
demo=build/demo
mkdir -p "$demo"
"$sparsert" gen network --layers 6 --neurons 1024 --sparsity 0.9 --n 256 --seed 42 -o "$demo/net"
"$sparsert" inspect "$demo/net/layer0.mtx" --plan --m-blocks 8 --gy 4
"$sparsert" compile "$demo/net/net.json" -o "$demo/pkg" --target sm_80,sm_90
"$sparsert" run "$demo/pkg" --input "$demo/net/input.npy" --output "$demo/output.npy" --repeat 5 --check
