#!/usr/bin/env bash
# scripts/gpu_checks.sh on a fake bundle (no GPU): a failing step does not stop its stage, a failing stage does not
# stop `all`, and the run still exits 1 naming what failed; a skipped GPU test fails the tests stage.
#
#   bash tests/bench/gpu_checks_test.sh scripts/gpu_checks.sh
set -uo pipefail

script=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
errors=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if ! "$@"; then
    echo "FAIL: $what" >&2
    errors=$((errors + 1))
  fi
}

# The bundle layout gpu_checks.sh recognises: bin/sparsert, bin/real_gpu_tests, data/graphchallenge.
fake=$work/bundle
mkdir -p "$fake/bin" "$fake/lib" "$fake/data/graphchallenge/neuron1024" "$work/path"
# sparsert: logs its arguments; fails where they match $FAIL_PATTERN, else writes its -o file (as the real one does).
cat > "$fake/bin/sparsert" << 'EOF'
#!/usr/bin/env bash
echo "$*" >> "$CALLS"
[[ -n ${SPARSERT_CPU_ISA:-} ]] && echo "$SPARSERT_CPU_ISA $*" >> "$CALLS.isa"
if [[ -n ${FAIL_PATTERN:-} && "$*" =~ $FAIL_PATTERN ]]; then echo "sparsert: failed: scripted"; exit 1; fi
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; ++i)); do
  [[ ${args[i]} == --matrix ]] && { [[ -f ${args[i + 1]} ]] && echo found >> "$CALLS.matrix" || echo missing >> "$CALLS.matrix"; }
done
for ((i = 0; i + 1 < ${#args[@]}; ++i)); do
  [[ ${args[i]} == -o ]] && echo '{}' > "${args[i + 1]}"
done
# A run prints its layer's time as the real one does.
[[ ${args[0]} == run ]] && echo "  layer0         16 x 2048        0.012 ms"
# A network the stage wrote for `tune`: kept, for the test to read its paths.
[[ ${args[0]} == tune && ${args[1]} == *.json && -f ${args[1]} ]] && cat "${args[1]}" >> "$CALLS.nets"
echo "sparsert: ok"
EOF
cat > "$fake/bin/real_gpu_tests" << 'EOF'
#!/usr/bin/env bash
echo "[       OK ] RealGpu.Fake (1 ms)"
[[ -n ${SKIP_ONE:-} ]] && echo "[  SKIPPED ] RealGpu.NoDriver (0 ms)"
exit "${TESTS_RC:-0}"
EOF
cat > "$work/path/nvidia-smi" << 'EOF'
#!/usr/bin/env bash
echo "name, driver_version"; echo "Fake GPU, 0"
EOF
chmod +x "$fake/bin/sparsert" "$fake/bin/real_gpu_tests" "$work/path/nvidia-smi"
: > "$fake/data/graphchallenge/neuron1024/n1024-l100.tsv"  # the tune stage unpacks this one layer
tar czf "$fake/data/graphchallenge/neuron1024.tar.gz" -C "$fake/data/graphchallenge" neuron1024
export PATH=$work/path:$PATH CALLS=$work/calls

# 1. Steps fail in two stages: every step of every stage still runs, and the run fails naming those two stages.
out=$work/out1
: > "$CALLS"
FAIL_PATTERN='^bench --suite rn50-0\.9 --device cuda --repeats 20 --choose measured --data|^graphchallenge .*--device cuda' \
  bash "$script" all "$fake" "$out" > "$work/log1" 2>&1
rc=$?
check "all exits 1 when a stage failed (got $rc)" test "$rc" -eq 1
for call in 'bench --suite rn50-0.9 --device cuda --repeats 20 --choose measured ' \
  'bench --suite rn50-0.95 --device cuda --repeats 20 --choose measured ' \
  'bench --suite transformer --device cuda --repeats 20 --choose measured ' \
  'bench --suite mobilenet --device cuda --repeats 20 --choose measured ' \
  'bench --suite graphchallenge --device cuda --repeats 20 --choose measured ' \
  'bench --suite rn50-conv3x3-0\.9 --device cuda --repeats 20 --choose measured ' \
  'bench --suite rn50-conv3x3-0\.95 --device cuda --repeats 20 --choose measured ' 'graphchallenge .*--device cuda' \
  'graphchallenge .*--device cpu' 'tune .*bottleneck_3_block_group4_2_1\.smtx --n 49 --row-align 1 --mode gpu --kernel baked ' \
  'tune .*bottleneck_3_block_group4_2_1\.smtx --n 49 --row-align 1 --mode model --kernel baked ' \
  'tune .*final_dense\.smtx --n 1 --mode gpu --kernel streamed' \
  'tune .*projection_block_group4\.smtx --n 49 --row-align 1 --mode gpu --kernel streamed' \
  'tune .*/0\.9/bottleneck_1_block_group4_1_1\.smtx --n 49 --mode gpu --kernel streamed --top 2 ' \
  'tune .*/0\.95/bottleneck_1_block_group4_1_1\.smtx --n 49 --mode gpu --kernel streamed --top 2 ' \
  'gen pruned --rows 512 --cols 2048 --sparsity 0\.9 --seed 100 ' \
  'tune .*nlp_512x2048\.mtx --n 256 --mode gpu --kernel streamed' \
  'graphchallenge .*--replicate 1 --device cuda --compaction fused' \
  'graphchallenge .*--replicate 1 --device cuda --compaction kernel' \
  'graphchallenge .*--replicate 1 --device cuda --max-entries 8' \
  'graphchallenge .*--replicate 1 --device cuda --dependent-launch off' 'tune --budget 200 .*n1024-l100\.tsv --n 950 --row-align 1 --mode gpu' \
  'graphchallenge .*--replicate 50 --device cuda --fold-duplicates' \
  'graphchallenge .*--replicate 1 --device cuda --fold-duplicates' \
  'tune --budget 200 .*n1024-l100\.tsv --n 60000 --row-align 1 --mode gpu' 'bench --suite rn50-0\.9 .*--max-entries 8 ' \
  'bench --suite rn50-0\.9 .*--max-entries 2 ' 'bench --suite transformer .*--max-entries 8 ' \
  'bench --suite rn50-0\.9 .*--block-functions off ' 'bench --suite transformer .*--block-functions off ' \
  'tune [^ ]+/g1\.json --mode gpu --top 2 ' 'tune [^ ]+/g3\.json --mode gpu --top 2 ' \
  'tune [^ ]+/g4s2\.json --mode gpu --top 1 '; do
  check "ran: $call" grep -q -E "^$call" "$CALLS"
done
# The model beside every measured file a step wrote (23), not beside one a failed step did not write; the reports on
# the layer the stage generated read that layer from the generated file (--matrix), and no other report does.
for f in rn50-0\.95-cuda transformer-cuda mobilenet-cuda graphchallenge-cuda rn50-conv3x3-0\.9-cuda \
  rn50-conv3x3-0\.95-cuda rn50-0\.9-cuda-e8 rn50-0\.9-cuda-e2 transformer-cuda-e8 rn50-0\.9-cuda-nofunc \
  transformer-cuda-nofunc tune-baked-n49-gpu tune-gemv-gpu tune-rows-cols-n49-gpu tune-rows-cols-n256-gpu \
  tune-baked-n256-gpu tune-conv-g1-gpu tune-conv-g3-gpu tune-conv-g4s2-gpu tune-gc-l100-n950-gpu \
  tune-gc-l100-n60000-gpu tune-long-rows-n49-0\.9-gpu tune-long-rows-n49-0\.95-gpu; do
  check "check-model on $f" grep -q -E "^check-model --data .* -q -o $out/$f-model\.json $out/$f\.json$" "$CALLS"
done
check "no check-model on a file a failed step did not write" \
  test "$(grep -c -E '^check-model .*/rn50-0\.9-cuda\.json$' "$CALLS")" -eq 0
for f in tune-rows-cols-n256-gpu tune-baked-n256-gpu; do
  check "the generated layer's report $f reads it from the generated file" \
    grep -q -E "^check-model --data [^ ]+ --matrix [^ ]+/nlp_512x2048\.mtx -q .*$f\.json$" "$CALLS"
done
check "the baked tiles at N = 256 are timed" \
  grep -q -E '^tune [^ ]+/nlp_512x2048\.mtx --n 256 --mode gpu --kernel baked --top 2 ' "$CALLS"
check "--matrix for those reports only" test "$(grep -c -E '^check-model .*--matrix' "$CALLS")" -eq 2
check "the generated file still there when check-model reads it" test "$(sort -u "$CALLS.matrix")" = found
check "twenty-three check-model calls" test "$(grep -c '^check-model ' "$CALLS")" -eq 23
check "fifty-nine sparsert calls" test "$(wc -l < "$CALLS")" -eq 59
check "one CPU run with AVX2 named" grep -q -E '^avx2 graphchallenge .*--replicate 50 --device cpu$' "$CALLS.isa"
check "only that one" test "$(wc -l < "$CALLS.isa")" -eq 1
check "all.log names bench-rn50" grep -q -E '^  - bench-rn50 \(exit 1' "$out/all.log"
check "all.log names graphchallenge" grep -q -E '^  - graphchallenge \(exit 1' "$out/all.log"
check "all.log names only the two failed stages" test "$(grep -c '^  - ' "$out/all.log")" -eq 2
check "bench-rn50.log names the failed step" \
  grep -q -E '^  - .*bench --suite rn50-0\.9 .*\(exit 1\)' "$out/bench-rn50.log"
check "bench-rest passed" grep -q 'gpu_checks.sh: bench-rest: passed' "$out/bench-rest.log"

check "no tune budget outside a lease but tune-gc's own" \
  test "$(grep -c -- '--budget' "$CALLS")" -eq "$(grep -c -E '^tune --budget 200 .*n1024-l100' "$CALLS")"

# tune-n256 under gpu_lease.sh's deadline (SPARSERT_LEASE_DEADLINE): each tune gets --budget, the seconds left less
# 30, so that it writes its report before the deadline; the baked tiles come first.
: > "$CALLS"
SPARSERT_LEASE_DEADLINE=$(( $(date +%s) + 200 )) bash "$script" tune-n256 "$fake" "$work/out11" > "$work/log11" 2>&1
rc=$?
check "tune-n256 exits 0 (got $rc)" test "$rc" -eq 0
budgets=$(grep -o -E '^tune --budget [0-9]+ ' "$CALLS" | awk '{print $3}')
check "both tunes of tune-n256 have a budget" test "$(echo "$budgets" | wc -w)" -eq 2
for b in $budgets; do
  check "a budget of the seconds left less 30 ($b)" test "$b" -ge 150 -a "$b" -le 170
done
check "the baked tiles are tuned before the streamed ones" test "$(grep -E '^tune ' "$CALLS" | head -1 | \
  grep -c -- '--kernel baked')" -eq 1
: > "$CALLS"
SPARSERT_LEASE_DEADLINE=$(( $(date +%s) + 10 )) bash "$script" tune-n256 "$fake" "$work/out12" > "$work/log12" 2>&1
check "past the deadline a tune still gets 5 s" test "$(grep -c -E '^tune --budget 5 ' "$CALLS")" -eq 2

# tune-n49 alone: the two 512 x 2048 layers of rn50 at N = 49, streamed, at compile's width, each beside the model.
: > "$CALLS"
bash "$script" tune-n49 "$fake" "$work/out15" > "$work/log15" 2>&1
rc=$?
check "tune-n49 exits 0 (got $rc)" test "$rc" -eq 0
check "tune-n49 tunes two layers streamed" \
  test "$(grep -c -E '^tune [^ ]+/bottleneck_1_block_group4_1_1\.smtx --n 49 --mode gpu --kernel streamed ' "$CALLS")" -eq 2
check "tune-n49 checks both against the model" test "$(grep -c -E '^check-model .*tune-long-rows-n49-' "$CALLS")" -eq 2

# tune-conv with the bundle named relative to the working directory, as gpu_lease.sh names it: the networks it writes
# in a folder of their own name their weights by absolute paths (a relative one is taken from the network's folder).
: > "$CALLS"
: > "$CALLS.nets"
(cd "$work" && bash "$script" tune-conv bundle "$work/out13") > "$work/log13" 2>&1
rc=$?
check "tune-conv exits 0 (got $rc)" test "$rc" -eq 0
check "tune-conv tunes three networks" test "$(grep -c -E '^tune [^ ]+\.json --mode gpu' "$CALLS")" -eq 3
check "their weights are absolute paths" test "$(grep -c '"weights": "/' "$CALLS.nets")" -eq 3

# fetch-grid: ten kernels (the same code and distinct code at five grids), each compiled with its tile pinned and
# run, their layer times gathered in fetch-grid.tsv; a run that fails is named and the others still run.
: > "$CALLS"
FAIL_PATTERN='^run [^ ]+/distinct-33/pkg ' bash "$script" fetch-grid "$fake" "$work/out14" > "$work/log14" 2>&1
rc=$?
check "fetch-grid exits 1 when a run failed (got $rc)" test "$rc" -eq 1
check "fetch-grid compiles ten kernels with their tiles" test "$(grep -c -E '^compile .* --baked ' "$CALLS")" -eq 10
check "the same code at 132 blocks: one row block, 132 x 64 columns" \
  grep -q -E '^compile [^ ]+/same-132/net\.json .*"m_blocks": 1, "gy": 4, "n_tile": 64' "$CALLS"
check "distinct code at 132 blocks: 132 row blocks" \
  grep -q -E '^compile [^ ]+/distinct-132/net\.json .*"m_blocks": 132, "gy": 4' "$CALLS"
check "fetch-grid.tsv holds the nine times measured" \
  test "$(grep -c -E $'\t0\\.012$' "$work/out14/fetch-grid.tsv")" -eq 9
check "the failed run is named" grep -q 'fetch-grid: distinct code at 33 blocks' "$work/out14/fetch-grid.log"

# bench-nlp and bench-other split bench-rest: the transformer and mobilenet suites (issue 12's goals) alone, then the
# Graph Challenge and the convolutions (the model's tile against codegen's rules); every suite chooses by measurement,
# and each suite's file is checked against the model.
check_bench_stage() {  # STAGE, the suites in order, how many of them choose by measurement
  : > "$CALLS"
  bash "$script" "$1" "$fake" "$work/out-$1" > "$work/log-$1" 2>&1
  local rc=$? suites
  check "$1 exits 0 (got $rc)" test "$rc" -eq 0
  suites=$(grep -E '^bench ' "$CALLS" | grep -o -E -- '--suite [^ ]+' | awk '{printf "%s ", $2}')
  check "$1 benchmarks $2" test "$suites" = "$2 "
  check "$1 chooses by measurement $3 times" test "$(grep -c -E '^bench .*--choose measured' "$CALLS")" -eq "$3"
  check "$1 checks each file against the model" \
    test "$(grep -c '^check-model ' "$CALLS")" -eq "$(echo "$2" | wc -w)"
}
check_bench_stage bench-nlp "transformer mobilenet" 2
check_bench_stage bench-other "graphchallenge rn50-conv3x3-0.9 rn50-conv3x3-0.95" 3

# 2. Nothing fails: exit 0.
: > "$CALLS"
bash "$script" all "$fake" "$work/out2" > "$work/log2" 2>&1
rc=$?
check "all exits 0 when every stage passed (got $rc)" test "$rc" -eq 0
check "all: passed" grep -q 'gpu_checks.sh: all: passed' "$work/out2/all.log"

# 3. A skipped GPU test is a failure, even when the test program exits 0; so is a failing test program.
SKIP_ONE=1 bash "$script" tests "$fake" "$work/out3" > "$work/log3" 2>&1
rc=$?
check "a skipped GPU test fails the tests stage (got $rc)" test "$rc" -eq 1
check "the skip is named" grep -q 'a GPU test was skipped' "$work/out3/tests.log"
TESTS_RC=1 bash "$script" tests "$fake" "$work/out4" > "$work/log4" 2>&1
rc=$?
check "a failing GPU test fails the tests stage (got $rc)" test "$rc" -eq 1

# 4. ncu-gc: both 1200-input runs under Nsight Compute, each to its own CSV; without ncu the stage fails naming it.
cat > "$work/path/ncu" << 'EOF'
#!/usr/bin/env bash
while [[ $1 == --* ]]; do  # ncu's options (--csv alone, the others with a value), then the program and its arguments
  if [[ $1 == --csv ]]; then shift; else shift 2; fi
done
echo '"ID","Kernel Name","Metric Value"'
exec "$@"
EOF
chmod +x "$work/path/ncu"
: > "$CALLS"
bash "$script" ncu-gc "$fake" "$work/out5" > "$work/log5" 2>&1
rc=$?
check "ncu-gc exits 0 with ncu (got $rc)" test "$rc" -eq 0
check "ncu-gc ran the fused run" grep -q -E '^graphchallenge .*--replicate 1 --device cuda --compaction fused' "$CALLS"
check "ncu-gc ran the filter-kernel run" grep -q -E '^graphchallenge .*--compaction kernel' "$CALLS"
check "ncu-gc wrote the fused CSV" grep -q 'Kernel Name' "$work/out5/gc1200-fused-ncu.csv"
check "ncu-gc wrote the kernel CSV" grep -q 'Kernel Name' "$work/out5/gc1200-kernel-ncu.csv"
# ncu-spmm: rn50's 512 x 2048 layer at N = 49 compiled baked and streamed at 90% and 95%, each kernel profiled by its
# entry's name to its own CSV.
: > "$CALLS"
cat > "$work/path/ncu" << 'EOF'
#!/usr/bin/env bash
echo "ncu $*" >> "$CALLS"
while [[ $1 == --* ]]; do
  if [[ $1 == --csv ]]; then shift; else shift 2; fi
done
echo '"ID","Kernel Name","Metric Value"'
exec "$@"
EOF
bash "$script" ncu-spmm "$fake" "$work/out7" > "$work/log7" 2>&1
rc=$?
check "ncu-spmm exits 0 with ncu (got $rc)" test "$rc" -eq 0
for sp in 0.9 0.95; do
  for kind in baked streamed; do
    check "ncu-spmm compiled the $sp layer $kind" grep -q -E \
      "^compile .*/net.json --target sm_90 --kernel $kind --no-tuning-db -o .*" "$CALLS"
  done
  check "ncu-spmm wrote the $sp baked CSV" grep -q 'Kernel Name' "$work/out7/ncu-spmm-$sp.csv"
  check "ncu-spmm wrote the $sp streamed CSV" grep -q 'Kernel Name' "$work/out7/ncu-spmm-$sp-streamed.csv"
done
# And the transformer's 512 x 2048 at N = 256: baked, and the staged kernel with one tile and double-buffered.
check "ncu-spmm made the transformer layer" grep -q -E '^gen pruned --rows 512 --cols 2048 .* -o .*/nlp/w.mtx$' "$CALLS"
check "ncu-spmm compiled the transformer layer baked" grep -q -E \
  '^compile .*/nlp/baked/net.json --target sm_90 --kernel baked --no-tuning-db -o .*' "$CALLS"
check "ncu-spmm compiled the staged kernel" grep -q -E \
  '^compile .*/nlp/staged/net.json --target sm_90 --stream \{"layout": "staged-rows".*"stage_rows": 256\} --no-tuning-db' \
  "$CALLS"
check "ncu-spmm compiled the double-buffered staged kernel" grep -q -E \
  '^compile .*/nlp/staged-db/net.json --target sm_90 --stream \{.*"stage_rows": 192, "double_buffer": 1\} --no-tuning-db' \
  "$CALLS"
for form in baked staged staged-db; do
  check "ncu-spmm wrote the transformer's $form CSV" grep -q 'Kernel Name' "$work/out7/ncu-spmm-nlp-$form.csv"
done
check "ncu-spmm profiled the baked entry three times" \
  test "$(grep -c -- '--kernel-name regex:sparsert_layer0 ' "$CALLS")" -eq 3
check "ncu-spmm profiled the streamed entry four times" \
  test "$(grep -c -- '--kernel-name regex:sparsert_stream ' "$CALLS")" -eq 4
check "ncu-spmm ran each package" test "$(grep -c -E '^run .*/pkg --input .*/x.npy --device cuda$' "$CALLS")" -eq 7
# ncu-nlp: the transformer layer alone, baked and as the row-split kernel timed fastest on 2026-11-27, each also run
# with --ptx (the driver's JIT of the same PTX).
: > "$CALLS"
bash "$script" ncu-nlp "$fake" "$work/out10" > "$work/log10" 2>&1
rc=$?
check "ncu-nlp exits 0 with ncu (got $rc)" test "$rc" -eq 0
check "ncu-nlp compiled the transformer layer baked" grep -q -E \
  '^compile .*/nlp/baked/net.json --target sm_90 --kernel baked --no-tuning-db -o .*' "$CALLS"
check "ncu-nlp compiled the row-split kernel" grep -q -E \
  '^compile .*/nlp/rows/net.json --target sm_90 --stream \{"layout": "rows", "rows_per_block": 16, .*"col_lanes": 32, .*\} --no-tuning-db' \
  "$CALLS"
for form in baked rows baked-jit rows-jit; do
  check "ncu-nlp wrote the transformer's $form CSV" grep -q 'Kernel Name' "$work/out10/ncu-spmm-nlp-$form.csv"
done
check "ncu-nlp compiled nothing else" test "$(grep -c '^compile ' "$CALLS")" -eq 4
check "ncu-nlp ran the -jit packages with --ptx" \
  test "$(grep -c -E '^run .*/nlp/(baked|rows)-jit/pkg --input .*/x.npy --device cuda --ptx$' "$CALLS")" -eq 2
check "ncu-nlp ran the others without" \
  test "$(grep -c -E '^run .*/nlp/(baked|rows)/pkg --input .*/x.npy --device cuda$' "$CALLS")" -eq 2
# ncu-lanes: rn50-0.95's 64 x 256 layer at N = 3136 as two row-split kernels, 8 and 4 floats a lane, each profiled.
: > "$CALLS"
bash "$script" ncu-lanes "$fake" "$work/out11" > "$work/log11" 2>&1
rc=$?
check "ncu-lanes exits 0 with ncu (got $rc)" test "$rc" -eq 0
check "ncu-lanes compiled 8 floats a lane" grep -q -E \
  '^compile .*/cpt8/net.json --target sm_90 --stream \{"layout": "rows", .*"col_lanes": 16, "cols_per_thread": 8\} --no-tuning-db -o .*/pkg$' \
  "$CALLS"
check "ncu-lanes compiled 4 floats a lane" grep -q -E \
  '^compile .*/cpt4/net.json --target sm_90 --stream \{"layout": "rows", .*"col_lanes": 32, "cols_per_thread": 4\} --no-tuning-db -o .*/pkg$' \
  "$CALLS"
for form in cpt8 cpt4; do
  check "ncu-lanes wrote the $form CSV" grep -q 'Kernel Name' "$work/out11/ncu-spmm-lanes-$form.csv"
done
check "ncu-lanes ran both packages" test "$(grep -c -E '^run .*/cpt[48]/pkg --input .*/x.npy --device cuda$' "$CALLS")" -eq 2
rm "$work/path/ncu"
bash "$script" ncu-gc "$fake" "$work/out6" > "$work/log6" 2>&1
rc=$?
check "ncu-gc without ncu exits 1 (got $rc)" test "$rc" -eq 1
check "the missing ncu is named" grep -q 'ncu (Nsight Compute) is not on PATH' "$work/out6/ncu-gc.log"

# 5. gc65536, gc65536-1920 and gc65536-folded: the synthetic 65536-neuron networks, made in memory; not part
#    of all.
: > "$CALLS"
bash "$script" gc65536 "$fake" "$work/out7" > "$work/log7" 2>&1
rc=$?
check "gc65536 exits 0 (got $rc)" test "$rc" -eq 0
bash "$script" gc65536-1920 "$fake" "$work/out7" > "$work/log8" 2>&1
rc=$?
check "gc65536-1920 exits 0 (got $rc)" test "$rc" -eq 0
bash "$script" gc65536-folded "$fake" "$work/out7" > "$work/log9" 2>&1
rc=$?
check "gc65536-folded exits 0 (got $rc)" test "$rc" -eq 0
for args in "--layers 120" "--layers 120 --compact-weights"; do
  check "gc65536 ran $args" grep -q -E \
    "^graphchallenge --synthetic 1 --neurons 65536 $args --images 60000 --device cuda$" "$CALLS"
done
# Compact named: the memory plan of a 141 GB H200 would take ELL and rank kernels over a CPU run of every layer.
check "gc65536-1920 ran 1920 layers compact" grep -q -E \
  "^graphchallenge --synthetic 1 --neurons 65536 --layers 1920 --images 60000 --device cuda --compact-weights$" "$CALLS"
check "gc65536-folded ran 120 layers" grep -q -E \
  "^graphchallenge --synthetic 1 --neurons 65536 --layers 120 --images 60000 --device cuda --fold-duplicates$" "$CALLS"
check "gc65536-folded ran 1920 layers streamed" grep -q -E "^graphchallenge --synthetic 1 --neurons 65536 --layers \
1920 --images 60000 --device cuda --fold-duplicates --kernel streamed$" "$CALLS"
check "gc65536 stages: five sparsert calls" test "$(wc -l < "$CALLS")" -eq 5

if (( errors > 0 )); then
  for f in "$work"/log*; do echo "---- $f" >&2; cat "$f" >&2; done
  exit 1
fi
echo "gpu_checks.sh: all checks passed"
