#!/usr/bin/env bash
# Checks docs/architecture.md's layer table against the sources: every `#include "sparsert/LAYER/..."` (or <...>) in a
# layer's directory must name that layer or one it may include. Prints each violation as FILE:LINE and exits 1.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
declare -A allowed=(
  [runtime]="runtime"
  [ptxsim]="ptxsim runtime"
  [inspector]="inspector runtime"
  [codegen]="codegen inspector runtime"
  [autotune]="autotune codegen inspector ptxsim runtime"
  [compiler]="compiler autotune codegen inspector runtime"
  [graphchallenge]="graphchallenge compiler autotune codegen inspector ptxsim runtime"
)
status=0
for layer in "${!allowed[@]}"; do
  [[ -d "$root/$layer" ]] || { echo "check_layering: $root/$layer is missing" >&2; exit 2; }
  while IFS=: read -r file line included; do
    ok=0
    for a in ${allowed[$layer]}; do [[ "$included" == "$a" ]] && ok=1; done
    if (( ! ok )); then
      echo "${file#"$root"/}:$line: layer $layer includes sparsert/$included/ (allowed: ${allowed[$layer]})"
      status=1
    fi
  done < <(grep -rnoE '#include [<"]sparsert/[a-z_]+/' "$root/$layer" --include='*.cpp' --include='*.hpp' --include='*.h' |
           sed -E 's|#include [<"]sparsert/([a-z_]+)/$|\1|')
done
(( status == 0 )) && echo "check_layering: every include follows docs/architecture.md"
exit $status
