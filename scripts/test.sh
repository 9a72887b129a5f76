#!/usr/bin/env bash
# Every test: the release build runs the whole suite; the AddressSanitizer + UndefinedBehaviorSanitizer build runs
# the tests labelled `fast`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/bootstrap.sh
bash scripts/build.sh build
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 1500
bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DSPARSERT_SANITIZE=ON -DSPARSERT_BUILD_BENCH=OFF
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -L fast --timeout 1500
