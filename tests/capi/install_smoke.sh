#!/usr/bin/env bash
# `cmake --install` into a fresh prefix gives the command, libsparsert.so and sparsert/sparsert.h, and a C program built
# against the installed header and library alone (not the build tree) runs: c_api_smoke.c.
#   install_smoke.sh CMAKE BUILD_DIR C_COMPILER C_SOURCE SCRATCH_DIR
set -euo pipefail
cmake=$1 build=$2 cc=$3 source=$4 scratch=$5
rm -rf "$scratch"
mkdir -p "$scratch"
prefix="$scratch/prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$scratch/install.log"
test -x "$prefix/bin/sparsert" || { echo "install_smoke: no bin/sparsert under $prefix" >&2; exit 1; }
test -f "$prefix/include/sparsert/sparsert.h" || { echo "install_smoke: no include/sparsert/sparsert.h" >&2; exit 1; }
lib=$(dirname "$(find "$prefix" -name libsparsert.so | head -1)")
test -f "$lib/libsparsert.so" || { echo "install_smoke: no libsparsert.so under $prefix" >&2; exit 1; }
"$cc" -std=c11 -Wall -Wextra -Werror -I"$prefix/include" "$source" -L"$lib" -lsparsert -Wl,-rpath,"$lib" \
  -o "$scratch/smoke"
SPARSERT_LIBCUDA="$scratch/no-such-libcuda.so" "$scratch/smoke" "$scratch/no-such-package"
"$prefix/bin/sparsert" --version
