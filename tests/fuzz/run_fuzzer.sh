#!/bin/sh
# Builds the fuzzers with clang (libFuzzer, ASan, UBSan, the library instrumented too) in their own
# build directory and runs each in turn, the pools', the trace reader's, the RMM CSV reader's and the
# pickle reader's, sharing a bounded time. Exits non-zero when any finds a failure; the failing input is then in the
# artifacts directory, and the report ends with it in hex. Each fuzzer's own output goes to
# fuzz-<name>.log in the build directory; the last lines printed are one summary line per fuzzer.
#
#   tests/fuzz/run_fuzzer.sh [SECONDS] [LIBFUZZER_OPTION...]
#
# SECONDS (60 by default) is the fuzzing time of all of them together, split evenly (at least 1 s
# each); building comes on top. GPUMEM_FUZZ_BUILD_DIR overrides the build directory (build/fuzz);
# GPUMEM_FUZZ_CC and GPUMEM_FUZZ_CXX the compilers (clang, clang++). Corpora are kept in the build
# directory, so later runs start from what earlier ones found; the trace, CSV and pickle fuzzers also read
# the checked-in seeds (tests/fuzz/corpus_*), which they never write to.
set -eu

seconds=${1:-60}
[ $# -gt 0 ] && shift

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${GPUMEM_FUZZ_BUILD_DIR:-$root/build/fuzz}
fuzzers="pool pool_ranges trace_reader rmm_csv pickle"
each=$((seconds / $(echo $fuzzers | wc -w)))
[ "$each" -ge 1 ] || each=1

mkdir -p "$build"
# No copy kernels: the fuzzers copy nothing, and nvcc building them for every architecture would
# be most of the build.
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER="${GPUMEM_FUZZ_CC:-clang}" -DCMAKE_CXX_COMPILER="${GPUMEM_FUZZ_CXX:-clang++}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUMEM_FUZZ=ON -DGPUMEM_SANITIZE=address,undefined \
  -DGPUMEM_BUILD_TOOLS=OFF -DGPUMEM_BUILD_DOCS=OFF -DGPUMEM_BUILD_BENCH=OFF -DGPUMEM_COPY_KERNELS=OFF \
  >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" --target fuzz_pool fuzz_pool_ranges fuzz_trace_reader fuzz_rmm_csv fuzz_pickle >"$build/build.log" 2>&1 ||
  { tail -n 40 "$build/build.log"; exit 1; }

artifacts=$build/fuzz_artifacts
mkdir -p "$artifacts"
failed=""
summaries=""
for name in $fuzzers; do
  # The pool's corpus keeps its old place, so earlier runs' findings still seed it.
  if [ "$name" = pool ]; then corpus=$build/fuzz_corpus; else corpus=$build/fuzz_corpus_$name; fi
  seeds=""
  [ -d "$root/tests/fuzz/corpus_$name" ] && seeds=$root/tests/fuzz/corpus_$name
  mkdir -p "$corpus"
  log=$build/fuzz-$name.log
  # Pool inputs of at most 512 bytes: a hundred-odd operations each, enough to build up and tear
  # down state, few enough to run many inputs. Traces and logs get room for a few dozen records.
  max_len=512
  [ "$name" = pool ] || max_len=4096
  status=0
  # shellcheck disable=SC2086 # $seeds is one folder or none
  "$build/tests/fuzz/fuzz_$name" -max_total_time="$each" -max_len="$max_len" -timeout=30 -print_funcs=0 \
    -artifact_prefix="$artifacts/$name-" -print_final_stats=1 "$@" "$corpus" $seeds >"$log" 2>&1 || status=$?
  # One line per fuzzer, for callers that keep only the tail: its runs and its statistics.
  line=$(grep -E '^(Done|stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb))' "$log" |
    sed 's/^stat:://' | tr -s ' \n' ' ')
  if [ "$status" -ne 0 ]; then
    failed="$failed $name"
    echo "fuzz_$name failed (status $status); full output in $log"
    grep -E "^fuzz_$name:|^SUMMARY|Test unit written to" "$log" || tail -n 20 "$log"
    echo "rerun: $build/tests/fuzz/fuzz_$name <input>, or build/dev/tests/fuzz/fuzz_${name}_replay <input>"
    line="FAILED (status $status) $line"
  fi
  summaries="$summaries
fuzz_$name ($each s): $line"
done
echo "$summaries" | sed '/^$/d'
# libFuzzer exits 77 on a finding, which test drivers read as a skip: a finding is 1 here.
if [ -n "$failed" ]; then
  echo "fuzzers that found a failure:$failed"
  exit 1
fi
echo "fuzzers: all $(echo $fuzzers | wc -w) ran clean"
