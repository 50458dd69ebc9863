#!/usr/bin/env bash
# run_alloc.sh BUILD_DIR — the allocator benchmark, gpumem against its peers, in one run.
#
# Runs BUILD_DIR/bench/bench_alloc (gpumem's pools, cudaMalloc, cudaMallocAsync; through
# BUILD_DIR/.gpu/run when ../shared/gpu/pack made one) and bench/peers_alloc.py (CuPy, PyTorch),
# checks that both generated the same random pattern, and prints one Markdown table per test with
# each allocator's ns and its ratio to gpumem's device pool, then the memory each held.
# Without a GPU both programs say so and exit 0, and so does this script.
# Where $OUT is a directory (the GPU machine's), the log and the tables are also written there.
set -uo pipefail

build=${1:?usage: run_alloc.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
bin_dir=$(cd "$build/bench" 2>/dev/null && pwd) || { echo "run_alloc: no $build/bench; build first" >&2; exit 2; }
bin="$bin_dir/bench_alloc"
[ -x "$bin" ] || { echo "run_alloc: no $bin; build first" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "## bench_alloc"
if [ -x "$build/.gpu/run" ]; then
  "$build/.gpu/run" "$bin" 2>&1 | tee "$tmp/cpp.txt"
else
  "$bin" 2>&1 | tee "$tmp/cpp.txt"
fi
cpp_rc=${PIPESTATUS[0]}

echo
echo "## peers_alloc.py"
py_rc=0
if command -v python3 >/dev/null; then
  PYTHONUNBUFFERED=1 python3 "$here/peers_alloc.py" 2>&1 | tee "$tmp/py.txt"
  py_rc=${PIPESTATUS[0]}
else
  echo "SKIP cupy: no python3" | tee "$tmp/py.txt"
  echo "SKIP torch: no python3" | tee -a "$tmp/py.txt"
fi

{
  echo
  echo "## Summary"
  echo
  grep '^PATTERN' "$tmp/cpp.txt" >"$tmp/pattern_cpp.txt"
  grep '^PATTERN' "$tmp/py.txt" >"$tmp/pattern_py.txt"
  if [ ! -s "$tmp/pattern_cpp.txt" ] || [ ! -s "$tmp/pattern_py.txt" ]; then
    echo "random pattern: NOT COMPARED (a program printed no PATTERN lines)"
  elif cmp -s "$tmp/pattern_cpp.txt" "$tmp/pattern_py.txt"; then
    echo "random pattern: C++ and Python agree ($(grep -c . "$tmp/pattern_cpp.txt") PATTERN lines, whole-sequence digest included)"
  else
    echo "random pattern: C++ and Python DISAGREE; their random_* rows are not comparable"
    diff "$tmp/pattern_cpp.txt" "$tmp/pattern_py.txt" | sed 's/^/    /'
  fi
  grep -h '^no GPU\|^SKIP\|^FAIL' "$tmp/cpp.txt" "$tmp/py.txt" | sed 's/^/- /'
  echo

  grep -h '^RESULT ' "$tmp/cpp.txt" "$tmp/py.txt" | awk '
    function human(b) { return sprintf("%.1f MiB", b / 1048576) }
    {
      n++; alloc[n] = $2; test[n] = $3; ns[n] = $4 + 0
      if ($3 == "pair_512B" || $3 == "pair_64KiB" || $3 == "pair_1MiB" || $3 == "random_warm" || $3 == "random_cold")
        if ($2 == "gpumem_pool") base[$3] = $4 + 0
      for (i = 5; i <= NF; i++) if (split($i, kv, "=") == 2) extra[n, kv[1]] = kv[2]
    }
    END {
      if (n == 0) { print "no RESULT lines: nothing was measured"; exit }
      ntests = split("pair_512B pair_64KiB pair_1MiB random_cold random_warm", tests, " ")
      unit["pair_512B"] = unit["pair_64KiB"] = unit["pair_1MiB"] = "ns per alloc+free pair, median of repetitions"
      unit["random_cold"] = "ns per operation (alloc or free), first round"
      unit["random_warm"] = "ns per operation (alloc or free), median of the later rounds"
      for (t = 1; t <= ntests; t++) {
        name = tests[t]; m = 0
        for (i = 1; i <= n; i++) if (test[i] == name) rows[++m] = i
        if (m == 0) continue
        for (i = 2; i <= m; i++) {  # insertion sort by ns
          r = rows[i]
          for (j = i - 1; j >= 1 && ns[rows[j]] > ns[r]; j--) rows[j + 1] = rows[j]
          rows[j + 1] = r
        }
        printf "### %s (%s)\n\n", name, unit[name]
        print "| allocator | ns/op | ratio vs gpumem pool |"
        print "|---|---:|---:|"
        for (i = 1; i <= m; i++) {
          r = rows[i]
          ratio = (name in base && base[name] > 0) ? sprintf("%.2f", ns[r] / base[name]) : "n/a"
          printf "| %s | %.1f | %s |\n", alloc[r], ns[r], ratio
        }
        print ""
      }
      # Memory held at the peak of the random pattern (every allocation live).
      m = 0
      for (i = 1; i <= n; i++) if (test[i] == "random_warm") rows[++m] = i
      if (m > 0) {
        print "### random pattern: memory at the peak (all 1000 allocations live)\n"
        print "reserved: what the allocator says it holds (gpumem: peak bytes_reserved; cudaMallocAsync: ReservedMemHigh;"
        print "cupy: total_bytes(); torch: memory_reserved()). device: the drop in cudaMemGetInfo free memory.\n"
        print "| allocator | requested | reserved | reserved / requested | device | device / requested |"
        print "|---|---:|---:|---:|---:|---:|"
        for (i = 1; i <= m; i++) {
          r = rows[i]; q = extra[r, "requested"] + 0
          res = ((r, "reserved") in extra) ? extra[r, "reserved"] + 0 : -1
          dev = ((r, "device_delta") in extra) ? extra[r, "device_delta"] + 0 : -1
          # Parenthesized: a bare ">" in print arguments is an output redirection.
          res_s = (res >= 0) ? human(res) : "-"
          res_r = (res >= 0 && q > 0) ? sprintf("%.4f", res / q) : "-"
          dev_s = (dev >= 0) ? human(dev) : "-"
          dev_r = (dev >= 0 && q > 0) ? sprintf("%.4f", dev / q) : "-"
          printf "| %s | %s | %s | %s | %s | %s |\n", alloc[r], human(q), res_s, res_r, dev_s, dev_r
        }
        print ""
        for (i = 1; i <= m; i++)
          if ((rows[i], "upstream_allocs") in extra)
            printf "- %s took %d blocks from its upstream over all rounds (1000: no growth after the cold round)\n",
                   alloc[rows[i]], extra[rows[i], "upstream_allocs"]
        print ""
      }
      print "### targets (gpumem_pool)\n"
      split("pair_512B:60 pair_64KiB:60 pair_1MiB:60 random_warm:100", goals, " ")
      for (g = 1; g <= 4; g++) {
        split(goals[g], tg, ":")
        if (tg[1] in base)
          printf "- %s: %.1f ns, target <= %d ns: %s\n", tg[1], base[tg[1]], tg[2], ((base[tg[1]] <= tg[2] + 0) ? "met" : "MISSED")
        else
          printf "- %s: not measured\n", tg[1]
      }
    }'
  echo
  echo "bench_alloc exit status $cpp_rc, peers_alloc.py exit status $py_rc"
} | tee "$tmp/summary.md"

if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  cat "$tmp/cpp.txt" "$tmp/py.txt" >"$OUT/bench_alloc.log"
  cp "$tmp/summary.md" "$OUT/bench_alloc.md"
fi
[ "$cpp_rc" -ne 0 ] && exit "$cpp_rc"
exit "$py_rc"
