#!/usr/bin/env bash
# Installs what sparsert needs from Debian's packages, where missing. Safe to run again; prints what it does.
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config nlohmann-json3-dev libfmt-dev libcli11-dev libgtest-dev libgmock-dev
          libbenchmark-dev libopenblas-dev libeigen3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq || true
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Optional: headless Chromium renders the autotuner's HTML report in a test (which skips without it). A failed
# install must not stop the build.
if ! command -v chromium >/dev/null 2>&1; then
  echo "bootstrap: installing chromium (optional)"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 ||
    echo "bootstrap: chromium not installed; the HTML rendering test will report SKIPPED"
fi

cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ -e "$cuda/include/nvJitLink.h" ]; then
  echo "bootstrap: CUDA toolkit at $cuda"
else
  echo "bootstrap: no CUDA toolkit at $cuda (set CUDA_HOME); building without cubin output"
fi
