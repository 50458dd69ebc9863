#!/usr/bin/env bash
# run_alloc.sh BUILD_DIR — the allocator benchmark, gpumem against its peers, in one run.
#
# Runs BUILD_DIR/bench/bench_alloc (gpumem's pools, cudaMalloc, cudaMallocAsync; through
# BUILD_DIR/.gpu/run when ../shared/gpu/pack made one) and bench/peers_alloc.py (CuPy, PyTorch),
# checks that both generated the same random pattern, and prints one Markdown table per test with
# each allocator's ns and its ratio to gpumem's device pool, then the memory each held, the
# thread-scaling and multi-stream tables, and whether gpumem met its targets.
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
  grep -h '^no GPU\|^SKIP\|^FAIL\|^# note: thread counts' "$tmp/cpp.txt" "$tmp/py.txt" | sed 's/^# //; s/^/- /'
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
      # Thread scaling: one table per test, threads_<n> (64 KiB) and threads_mix_<n> (8 sizes).
      kind[1] = "threads_"; kname[1] = "64 KiB"
      kind[2] = "threads_mix_"; kname[2] = "a mix of 8 sizes, 512 B to 8 MiB, taken in turn"
      for (k = 1; k <= 2; k++) {
        nt = 0
        for (i = 1; i <= n; i++) {
          if (index(test[i], kind[k]) != 1) continue
          rest = substr(test[i], length(kind[k]) + 1)
          if (rest !~ /^[0-9]+$/) continue
          t = rest + 0
          if (!((k, t) in seen)) { seen[k, t] = 1; tl[++nt] = t }
          rate[k, alloc[i], t] = extra[i, "ops_per_s"] + 0
          spd[k, alloc[i], t] = extra[i, "speedup"] + 0
        }
        if (nt == 0) continue
        for (i = 2; i <= nt; i++) {  # insertion sort by thread count
          r = tl[i]
          for (j = i - 1; j >= 1 && tl[j] > r; j--) tl[j + 1] = tl[j]
          tl[j + 1] = r
        }
        printf "### thread scaling, %s (Mops/s: million alloc+free pairs a second, all threads together;\n", kname[k]
        print "each thread on its own stream, one shared allocator; speedup: against 1 thread)\n"
        print "| threads | gpumem Mops/s | speedup | cudaMallocAsync Mops/s | speedup | gpumem/cudaMallocAsync |"
        print "|---:|---:|---:|---:|---:|---:|"
        for (i = 1; i <= nt; i++) {
          t = tl[i]
          hg = ((k, "gpumem_pool", t) in rate); hd = ((k, "cudaMallocAsync", t) in rate)
          g = hg ? rate[k, "gpumem_pool", t] : 0; d = hd ? rate[k, "cudaMallocAsync", t] : 0
          printf "| %d | %s | %s | %s | %s | %s |\n", t,
                 hg ? sprintf("%.2f", g / 1e6) : "-", hg ? sprintf("%.2f", spd[k, "gpumem_pool", t]) : "-",
                 hd ? sprintf("%.2f", d / 1e6) : "-", hd ? sprintf("%.2f", spd[k, "cudaMallocAsync", t]) : "-",
                 (hg && hd && d > 0) ? sprintf("%.2f", g / d) : "-"
        }
        print ""
      }
      # The multi-stream pattern: streams<N>_same and streams<N>_cross.
      m = 0
      for (i = 1; i <= n; i++)
        if (test[i] ~ /^streams[0-9]+_(same|cross)$/) {
          rows[++m] = i
          if (alloc[i] == "gpumem_pool") sbase[test[i]] = ns[i]
        }
      if (m > 0) {
        print "### multi-stream pattern (one host thread, N streams round-robin, a memset on each buffer;"
        print "ns per alloc+free pair, host time in the two calls; cross: freed on the next stream)\n"
        print "| test | allocator | ns/pair | vs gpumem_pool | loop ns/iter | peak live | reserved | reserved / live |"
        print "|---|---|---:|---:|---:|---:|---:|---:|"
        for (i = 1; i <= m; i++) {
          r = rows[i]; live = extra[r, "peak_live"] + 0; res = extra[r, "reserved"] + 0
          ratio = (test[r] in sbase && sbase[test[r]] > 0) ? sprintf("%.2f", ns[r] / sbase[test[r]]) : "-"
          printf "| %s | %s | %.1f | %s | %.1f | %s | %s | %s |\n", test[r], alloc[r], ns[r], ratio,
                 extra[r, "loop_ns"] + 0, human(live), human(res), (live > 0) ? sprintf("%.3f", res / live) : "-"
        }
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
      if ((1, "gpumem_pool", 16) in spd)
        printf "- threads_16 (64 KiB): %.2fx the 1-thread rate, target >= 8x: %s\n", spd[1, "gpumem_pool", 16],
               ((spd[1, "gpumem_pool", 16] >= 8) ? "met" : "MISSED")
      else
        print "- threads_16 (64 KiB): not measured (fewer than 16 CPUs usable, or the row failed: see above)"
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
