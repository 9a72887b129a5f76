#!/usr/bin/env bash
# Packs what the GPU checks need into .gpu-bundle/ (ignored by git): the device machine has CUDA, CMake and ninja but
# none of the Debian packages sparsert builds against, and only the checkout (64 MiB at most) travels to it.
#
#   bash scripts/gpu_bundle.sh            # here, on the development machine (no GPU needed)
#   then, with the device tool:  run(command="bash scripts/gpu_checks.sh tests .gpu-bundle $OUT", carry=[".gpu-bundle"])
#
# Contents: bin/ (sparsert and the real-GPU test program, built without OpenBLAS, which the GPU checks do not use and
# which would take 37 MB), lib/ (the shared libraries they need beyond what any Linux has), data/ (the DLMC rn50 and
# Graph Challenge files from ../shared/data, which does not travel).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-gpu-bundle
bundle=$root/.gpu-bundle
data=${SPARSERT_DATA:-$root/../shared/data}

exclude=$(git -C "$root" rev-parse --git-path info/exclude)
[[ $exclude = /* ]] || exclude=$root/$exclude
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.gpu-bundle/' "$exclude" 2>/dev/null || echo '/.gpu-bundle/' >> "$exclude"
# No pkg-config: OpenBLAS (found through it) is left out; Eigen and every other dependency stay.
# Only the two programs that travel: the tests and benchmarks beside them would double the build on a small machine.
if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPARSERT_BUILD_BENCH=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON
fi
cmake --build "$build" -j "${SPARSERT_JOBS:-$(nproc)}" --target sparsert real_gpu_tests
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/data"
cp "$build/tools/sparsert/sparsert" "$build/tests/gpu/real_gpu_tests" "$bundle/bin/"
strip "$bundle/bin/"*
# Libraries outside the C and C++ runtimes (which the device's newer distribution provides).
for bin in "$bundle/bin/"*; do
  ldd "$bin" | awk '/=> \// {print $3}' | grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so' \
    | while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
done
if [[ -d $data ]]; then
  mkdir -p "$bundle/data/dlmc/rn50/magnitude_pruning"
  cp -r "$data/dlmc/rn50/magnitude_pruning/0.9" "$data/dlmc/rn50/magnitude_pruning/0.95" \
    "$bundle/data/dlmc/rn50/magnitude_pruning/"
  cp "$data/dlmc/rn50_batchsizes.txt" "$bundle/data/dlmc/"
  cp -r "$data/graphchallenge" "$bundle/data/"
  cp "$data/README.md" "$bundle/data/"
else
  echo "gpu_bundle.sh: $data is absent: the bundle has no data, so the benchmarks and data tests will skip" >&2
fi
du -sh "$bundle"
size=$(du -sm "$bundle" | cut -f1)
if (( size >= 60 )); then
  echo "gpu_bundle.sh: $bundle is $size MiB; with the checkout it must stay under 64 MiB" >&2
  exit 1
fi
