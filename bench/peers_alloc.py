#!/usr/bin/env python3
"""The allocator benchmark's Python peers: CuPy's MemoryPool and PyTorch's caching allocator.

Measures what bench_alloc measures for gpumem and the CUDA runtime, from Python, and prints the
same `RESULT <allocator> <test> <ns> [key=value ...]` lines and the same `PATTERN` lines (the
random pattern must be identical in both programs; run_alloc.sh compares them). A missing module
or GPU gives `SKIP <allocator>: <why>` and exit status 0. Run it with PYTHONUNBUFFERED=1.

Usage: peers_alloc.py [--pattern]
"""
import gc
import itertools
import math
import statistics
import sys
import time

MASK64 = (1 << 64) - 1
PATTERN_SEED = 20251130
PATTERN_COUNT = 1000

# Effort, as bench_alloc's kCaching: every allocator here caches.
PAIRS = 100000
WARM_PAIRS = 10000
REPETITIONS = 7
ROUNDS = 50
PAIR_SIZES = ((512, "pair_512B"), (64 << 10, "pair_64KiB"), (1 << 20, "pair_1MiB"))


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


def make_pattern():
    """The sizes (allocated in order), the free order, their total and a digest over both."""
    rng = SplitMix64(PATTERN_SEED)
    sizes = []
    for _ in range(PATTERN_COUNT):
        u = (rng.next() >> 11) * 2.0**-53  # exact: the integer has 53 bits
        v = 2.0 ** (9.0 + 17.0 * u)  # float ** is the C library's pow, as in bench_alloc
        sizes.append(math.floor(v + 0.5))  # llround, for positive v
    order = list(range(PATTERN_COUNT))
    for i in range(PATTERN_COUNT - 1, 0, -1):
        j = rng.next() % (i + 1)
        order[i], order[j] = order[j], order[i]
    h = 0xCBF29CE484222325
    for value in itertools.chain(sizes, order):
        h = ((h ^ value) * 0x100000001B3) & MASK64
    return sizes, order, sum(sizes), h


def print_pattern(pattern):
    sizes, order, total, digest = pattern
    print("PATTERN sizes[0:5] " + " ".join(str(s) for s in sizes[:5]))
    print("PATTERN free[0:5] " + " ".join(str(i) for i in order[:5]))
    print("PATTERN total_bytes %d digest %016x" % (total, digest))


def report(allocator, test, ns, extra=""):
    print("RESULT %s %s %.1f%s" % (allocator, test, ns, extra), flush=True)


def loop_overhead_ns(n=PAIRS):
    """What an empty `for` over n items costs per item: part of every Python figure."""
    reps = []
    for _ in range(REPETITIONS):
        t0 = time.perf_counter_ns()
        for _ in itertools.repeat(None, n):
            pass
        reps.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(reps)


def bench_pairs(name, pairs, loop_ns):
    """(a) a cached alloc+free pair of one size. pairs(n, count) runs count pairs of n bytes; the
    loop is written out in each allocator's pairs(), so no wrapper call is charged to it."""
    for size, test in PAIR_SIZES:
        pairs(size, WARM_PAIRS)
        reps = []
        for _ in range(REPETITIONS):
            t0 = time.perf_counter_ns()
            pairs(size, PAIRS)
            reps.append((time.perf_counter_ns() - t0) / PAIRS)
        report(name, test, statistics.median(reps),
               " reps=%d pairs=%d loop_ns=%.1f" % (REPETITIONS, PAIRS, loop_ns))


def bench_random(name, pattern, alloc_all, free_all, reset, reserved, device_free):
    """(b) the random pattern. alloc_all(sizes) returns the handles, allocated in order;
    free_all(handles, order) frees them in that order; reserved() is what the allocator holds
    after the allocation phase of the first round."""
    sizes, order, total, _ = pattern
    reset()
    free_before = device_free()
    cold, warm = 0.0, []
    held = device_delta = 0
    for rnd in range(ROUNDS):
        t0 = time.perf_counter_ns()
        handles = alloc_all(sizes)
        t1 = time.perf_counter_ns()
        if rnd == 0:
            held = reserved()
            device_delta = free_before - device_free()
        t2 = time.perf_counter_ns()
        free_all(handles, order)
        t3 = time.perf_counter_ns()
        del handles
        ns = ((t1 - t0) + (t3 - t2)) / (2.0 * len(sizes))
        if rnd == 0:
            cold = ns
        else:
            warm.append(ns)
    report(name, "random_cold", cold, " requested=%d" % total)
    report(name, "random_warm", statistics.median(warm),
           " rounds=%d requested=%d reserved=%d device_delta=%d" % (ROUNDS - 1, total, held, device_delta))
    reset()


def run_cupy(pattern, loop_ns):
    try:
        import cupy
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        print("SKIP cupy: import cupy failed: %s" % e, flush=True)
        return
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        print("SKIP cupy: no GPU: %s" % e, flush=True)
        return
    if count == 0:
        print("SKIP cupy: no GPU: getDeviceCount found 0 devices", flush=True)
        return
    cupy.cuda.Device(0).use()
    print("# cupy %s" % cupy.__version__, flush=True)
    pool = cupy.cuda.MemoryPool()
    malloc = pool.malloc

    def pairs(n, count):
        for _ in itertools.repeat(None, count):
            malloc(n)  # the MemoryPointer is dropped at once, which returns the memory to the pool

    def alloc_all(sizes):
        return [malloc(s) for s in sizes]

    def free_all(handles, order):
        for i in order:
            handles[i] = None  # the last reference to the MemoryPointer: the memory goes back

    def reset():
        cupy.cuda.Device(0).synchronize()
        pool.free_all_blocks()

    def device_free():
        return cupy.cuda.runtime.memGetInfo()[0]

    try:
        bench_pairs("cupy", pairs, loop_ns)
        bench_random("cupy", pattern, alloc_all, free_all, reset, pool.total_bytes, device_free)
    except Exception as e:
        print("FAIL cupy: %s: %s" % (type(e).__name__, e), flush=True)
    finally:
        pool.free_all_blocks()


def run_torch(pattern, loop_ns):
    try:
        import torch
    except Exception as e:
        print("SKIP torch: import torch failed: %s" % e, flush=True)
        return
    if not torch.cuda.is_available():
        print("SKIP torch: no GPU: torch.cuda.is_available() is False (torch %s, CUDA %s)"
              % (torch.__version__, torch.version.cuda), flush=True)
        return
    torch.cuda.set_device(0)
    torch.cuda.init()
    print("# torch %s (CUDA %s)" % (torch.__version__, torch.version.cuda), flush=True)

    def reset():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

    def device_free():
        return torch.cuda.mem_get_info()[0]

    # The documented calls, as a user writes them; each resolves the device and the stream.
    alloc = torch.cuda.caching_allocator_alloc
    delete = torch.cuda.caching_allocator_delete

    def pairs(n, count):
        for _ in itertools.repeat(None, count):
            delete(alloc(n))

    def alloc_all(sizes):
        return [alloc(s) for s in sizes]

    def free_all(handles, order):
        for i in order:
            delete(handles[i])

    try:
        bench_pairs("torch", pairs, loop_ns)
        bench_random("torch", pattern, alloc_all, free_all, reset, torch.cuda.memory_reserved, device_free)
    except Exception as e:
        print("FAIL torch: %s: %s" % (type(e).__name__, e), flush=True)
    reset()

    # The bindings those calls end in, with the stream looked up once: the allocator's own cost
    # plus one Python-to-C call each way, which is what a thin Python binding pays.
    raw_alloc = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_alloc", None)
    raw_delete = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_delete", None)
    if raw_alloc is None or raw_delete is None:
        print("SKIP torch_raw: torch._C has no _cuda_cudaCachingAllocator_raw_alloc/_raw_delete", flush=True)
        return
    stream = torch.cuda.current_stream(0).cuda_stream

    def raw_pairs(n, count):
        for _ in itertools.repeat(None, count):
            raw_delete(raw_alloc(n, stream))

    def raw_alloc_all(sizes):
        return [raw_alloc(s, stream) for s in sizes]

    def raw_free_all(handles, order):
        for i in order:
            raw_delete(handles[i])

    try:
        bench_pairs("torch_raw", raw_pairs, loop_ns)
        bench_random("torch_raw", pattern, raw_alloc_all, raw_free_all, reset, torch.cuda.memory_reserved,
                     device_free)
    except Exception as e:
        print("FAIL torch_raw: %s: %s" % (type(e).__name__, e), flush=True)
    reset()


def main(argv):
    pattern = make_pattern()
    print_pattern(pattern)
    if argv[1:] == ["--pattern"]:
        return 0
    if argv[1:]:
        print("usage: peers_alloc.py [--pattern]", file=sys.stderr)
        return 2
    print("# python %s" % sys.version.split()[0], flush=True)
    loop_ns = loop_overhead_ns()
    # A collection in the middle of a timed loop would be charged to whichever allocator ran.
    gc.disable()
    run_cupy(pattern, loop_ns)
    run_torch(pattern, loop_ns)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
