#!/bin/sh
# Builds the pool fuzzer with clang (libFuzzer, ASan, UBSan, the library instrumented too) in its
# own build directory and runs it for a bounded time. Exits non-zero when it finds a failure; the
# failing input is then in the artifacts directory, and the report ends with it in hex. The
# fuzzer's own output goes to fuzz.log in the build directory.
#
#   tests/fuzz/run_fuzzer.sh [SECONDS] [LIBFUZZER_OPTION...]
#
# SECONDS defaults to 60. GPUMEM_FUZZ_BUILD_DIR overrides the build directory (build/fuzz);
# GPUMEM_FUZZ_CC and GPUMEM_FUZZ_CXX the compilers (clang, clang++). The corpus is kept in the
# build directory, so later runs start from what earlier ones found.
set -eu

seconds=${1:-60}
[ $# -gt 0 ] && shift

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${GPUMEM_FUZZ_BUILD_DIR:-$root/build/fuzz}

mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER="${GPUMEM_FUZZ_CC:-clang}" -DCMAKE_CXX_COMPILER="${GPUMEM_FUZZ_CXX:-clang++}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUMEM_FUZZ=ON -DGPUMEM_SANITIZE=address,undefined \
  -DGPUMEM_BUILD_TOOLS=OFF -DGPUMEM_BUILD_DOCS=OFF >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" --target fuzz_pool

corpus=$build/fuzz_corpus
artifacts=$build/fuzz_artifacts
log=$build/fuzz.log
mkdir -p "$corpus" "$artifacts"
# Inputs of at most 512 bytes: a hundred-odd operations each, enough to build up and tear down
# state, few enough to run many inputs.
status=0
"$build/tests/fuzz/fuzz_pool" -max_total_time="$seconds" -max_len=512 -timeout=30 -print_funcs=0 \
  -artifact_prefix="$artifacts/" -print_final_stats=1 "$@" "$corpus" >"$log" 2>&1 || status=$?

# The last lines say what matters, for callers that keep only the tail: the statistics, or the
# failed check, the input in hex and where it was saved (a crash report runs to many lines).
grep -E '^(Done|stat::)' "$log" || true
if [ "$status" -ne 0 ]; then
  echo "pool fuzzer failed (status $status); full output in $log"
  grep -E '^fuzz_pool:|^SUMMARY|Test unit written to' "$log" || tail -n 20 "$log"
  echo "rerun: $build/tests/fuzz/fuzz_pool <input>, or build/dev/tests/fuzz/fuzz_pool_replay <input>"
  # libFuzzer exits 77 on a finding, which test drivers read as a skip.
  exit 1
fi
