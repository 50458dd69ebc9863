#!/usr/bin/env python3
"""`cupy.empty` and `torch.empty` with gpumem as the allocator, against each library's own pool.

    python3 bench/empty_dropin.py --library build/gpu/lib/libgpumem.so.0 \\
        [--sizes 512,64KiB,1MiB,64MiB] [--count 20000] [--rounds 5] [--only cupy,torch]

What is timed is what a user's code pays: `x = cupy.empty(n, dtype=cupy.uint8)` (or
`torch.empty(n, dtype=torch.uint8, device="cuda")`) then dropping `x`, `--count` times in a row,
as microseconds per pair; and the random pattern of bench/peers_alloc.py: 1000 arrays of
log-uniform sizes from 512 B to 64 MiB made, then dropped in a shuffled order, per array.

    CuPy      its MemoryPool (cupy.get_default_memory_pool()), its MemoryAsyncPool (the driver's
              stream-ordered pool), and gpumem.cupy's allocator: gpumem's pool per device, which
              CuPy calls through gpumem_cupy_alloc/gpumem_cupy_free. One process switches between
              them with cupy.cuda.using_allocator, taking turns at each size, each round starting
              with another.
    PyTorch   its caching allocator, and gpumem.torch.install(): PyTorch's pluggable allocator over
              gpumem_torch_alloc/gpumem_torch_free and each device's gpumem pool. PyTorch fixes its
              allocator per process, so each round runs one process per allocator, in turn.

Each figure is the median over the rounds; the ratio is gpumem's time over the library's own pool
(below 1: gpumem is faster). Without CuPy or PyTorch, their table says so; without a GPU the
script prints "no GPU: ..." and exits 0.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bindings", "python")
UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(text):
    text = text.strip()
    number = text.rstrip("KMGiB")
    return int(number) * UNITS[text[len(number) :]]


def show_size(n):
    for unit in ("GiB", "MiB", "KiB"):
        if n >= UNITS[unit] and n % UNITS[unit] == 0:
            return f"{n // UNITS[unit]} {unit}"
    return f"{n} B"


def pattern_sizes(seed=1234, count=1000):
    rng = random.Random(seed)
    sizes = [int(2 ** rng.uniform(9, 26)) for _ in range(count)]
    order = list(range(count))
    rng.shuffle(order)
    return sizes, order


def time_pairs(empty, size, count):
    """Microseconds per make-and-drop of one array of `size` bytes."""
    empty(size)  # the pool holds a block of this size from here on
    start = time.perf_counter_ns()
    for _ in range(count):
        empty(size)
    return (time.perf_counter_ns() - start) / count / 1000


def time_pattern(empty, sizes, order):
    """Microseconds per array of the random pattern: made, kept, then dropped shuffled."""
    arrays = [empty(n) for n in sizes]  # warm: the pool holds what the pattern needs
    del arrays
    start = time.perf_counter_ns()
    arrays = [empty(n) for n in sizes]
    for i in order:
        arrays[i] = None
    return (time.perf_counter_ns() - start) / len(sizes) / 1000


def measure(empty, synchronize, what, count):
    """Microseconds for `what`: a size in bytes, or "pattern"."""
    if what == "pattern":
        sizes, order = pattern_sizes()
        result = time_pattern(empty, sizes, order)
    else:
        result = time_pairs(empty, what, count)
    synchronize()
    return result


def measure_all(empty, synchronize, sizes, count):
    return {key(what): measure(empty, synchronize, what, count) for what in sizes + ["pattern"]}


def key(what):
    return what if what == "pattern" else show_size(what)


# ---- Children ----


def cupy_child(sizes, count, rounds):
    import cupy

    import gpumem.cupy

    def empty(n):
        return cupy.empty(n, dtype=cupy.uint8)

    cupy_pool = cupy.get_default_memory_pool()
    async_pool = cupy.cuda.MemoryAsyncPool() if hasattr(cupy.cuda, "MemoryAsyncPool") else None
    # What gpumem.cupy.install() hands cupy.cuda.set_allocator, here through using_allocator, as
    # CuPy's own pools are.
    configs = [("cupy pool", cupy_pool.malloc), ("gpumem", gpumem.cupy.CupyAllocator(pinned=False).malloc)]
    if async_pool is not None:
        configs.insert(1, ("cupy async pool", async_pool.malloc))
    synchronize = cupy.cuda.Device().synchronize
    results = {name: [{} for _ in range(rounds)] for name, _ in configs}
    # Configurations take turns at each size, each round starting with another one, so that a
    # machine whose speed drifts (a virtual one) weighs on all of them alike.
    for r in range(rounds):
        turns = configs[r % len(configs) :] + configs[: r % len(configs)]
        for what in sizes + ["pattern"]:
            for name, malloc in turns:
                with cupy.cuda.using_allocator(malloc):
                    results[name][r][key(what)] = measure(empty, synchronize, what, count)
    print("RESULT " + json.dumps(results), flush=True)


def torch_child(config, sizes, count):
    if config == "gpumem":
        import gpumem.torch

        gpumem.torch.install()
    import torch

    def empty(n):
        return torch.empty(n, dtype=torch.uint8, device="cuda")

    torch.cuda.init()
    print("RESULT " + json.dumps({config: [measure_all(empty, torch.cuda.synchronize, sizes, count)]}), flush=True)


# ---- The parent ----


def run_child(args, extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [PACKAGE, os.environ.get("PYTHONPATH")])))
    if args.library:
        env["GPUMEM_LIBRARY"] = os.path.abspath(args.library)
    command = [sys.executable, os.path.abspath(__file__), "--sizes", args.sizes, "--count", str(args.count)] + extra
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :]), None
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return None, " / ".join(tail) or f"exit status {done.returncode}"


def merge(into, results):
    for name, runs in results.items():
        into.setdefault(name, []).extend(runs)


def print_table(title, results, own, peers):
    print(f"\n### {title}\n")
    names = [own] + [p for p in peers if p in results] + ["gpumem"]
    header = "| what | " + " | ".join(f"{n} (µs)" for n in names) + f" | gpumem / {own} |"
    print(header)
    print("|" + "---|" * (len(names) + 2))
    for key in results[own][0]:
        median = {n: statistics.median(run[key] for run in results[n]) for n in names}
        what = "pattern, per array" if key == "pattern" else f"{key}, per pair"
        cells = " | ".join(f"{median[n]:.3f}" for n in names)
        print(f"| {what} | {cells} | {median['gpumem'] / median[own]:.2f} |")
    print(f"\n(medians of {len(results[own])} rounds)")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--library", help="libgpumem to load (else GPUMEM_LIBRARY, else libgpumem.so.0)")
    p.add_argument("--sizes", default="512,64KiB,1MiB,64MiB", help="array sizes, comma-separated")
    p.add_argument("--count", type=int, default=20000, help="pairs timed per size and round")
    p.add_argument("--rounds", type=int, default=5, help="rounds; the medians are reported")
    p.add_argument("--only", default="cupy,torch", help="cupy, torch or both")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.child == "cupy":
        return cupy_child(sizes, args.count, args.rounds)
    if args.child:
        return torch_child(args.child, sizes, args.count)

    if args.library:
        os.environ["GPUMEM_LIBRARY"] = os.path.abspath(args.library)
    sys.path.insert(0, PACKAGE)
    import gpumem

    try:
        count = gpumem.device_count()
    except gpumem.LibraryError as error:
        print(error, file=sys.stderr)
        return 2
    except gpumem.Error as error:
        print(f"no GPU: {error}")
        return 0
    if count < 1:
        print("no GPU: no CUDA device")
        return 0
    only = args.only.split(",")
    if "cupy" in only:
        results, failure = run_child(args, ["--child", "cupy", "--rounds", str(args.rounds)])
        if results:
            print_table("cupy.empty", results, "cupy pool", ["cupy async pool"])
        else:
            print(f"\n### cupy.empty\n\nnot measured: {failure}")
    if "torch" in only:
        results, failure = {}, None
        for _ in range(args.rounds):
            for config in ("torch", "gpumem"):
                found, failure = run_child(args, ["--child", config])
                if not found:
                    break
                merge(results, found)
            if failure:
                break
        if failure:
            print(f"\n### torch.empty\n\nnot measured: {failure}")
        else:
            print_table("torch.empty", results, "torch", [])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
