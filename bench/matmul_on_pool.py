#!/usr/bin/env python3
"""Kernels on pool memory: an fp16 matmul and a device copy on memory from gpumem's default device
pool (virtual memory mapped in units of the device's granularity) against the same on memory from
cudaMalloc (CuPy's allocator with its pool off), in one run, alternating, medians of each.

    GPUMEM_LIBRARY=build/gpu/lib/libgpumem.so.0 python3 bench/matmul_on_pool.py [--n 8192] [--reps 20]

Prints one `MATMUL` line per memory kind and the ratio; needs CuPy and a GPU.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bindings", "python"))


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args(argv)
    try:
        import cupy
    except ImportError as e:
        print(f"no CuPy: {e}")
        return 0
    import gpumem

    n, nbytes = a.n, a.n * a.n * 2
    pool = gpumem.device_pool(0)
    held = []

    def from_pool(shape):
        buf = pool.alloc(nbytes)
        held.append(buf)
        mem = cupy.cuda.UnownedMemory(buf.ptr, nbytes, buf)
        return cupy.ndarray(shape, dtype=cupy.float16, memptr=cupy.cuda.MemoryPointer(mem, 0))

    cupy.cuda.set_allocator(None)  # plain cudaMalloc for the other kind
    # The pool's memory is first fragmented, as a training run leaves it, so the matrices are
    # stitched from units that were moved, not one fresh run of them.
    scraps = [pool.alloc(3 << 20) for _ in range(64)]
    for s in scraps[::2]:
        s.free()
    kinds = {
        "cudaMalloc": [cupy.empty((n, n), dtype=cupy.float16) for _ in range(3)],
        "gpumem_default": [from_pool((n, n)) for _ in range(3)],
    }
    for arrays in kinds.values():
        arrays[0][...] = cupy.random.random((n, n)).astype(cupy.float16)
        arrays[1][...] = cupy.random.random((n, n)).astype(cupy.float16)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = {k: {"matmul": [], "copy": []} for k in kinds}
    for _ in range(a.reps):
        for k, (x, y, z) in kinds.items():
            start.record()
            cupy.matmul(x, y, out=z)
            end.record()
            end.synchronize()
            times[k]["matmul"].append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
            start.record()
            z[...] = x
            end.record()
            end.synchronize()
            times[k]["copy"].append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    rates = {}
    for k, t in times.items():
        tflops = 2 * n**3 / statistics.median(t["matmul"]) / 1e12
        tbs = 2 * nbytes / statistics.median(t["copy"]) / 1e12
        rates[k] = (tflops, tbs)
        print(f"MATMUL {k} n={n} tflops={tflops:.1f} copy_tbs={tbs:.3f}", flush=True)
    base, pooled = rates["cudaMalloc"], rates["gpumem_default"]
    print(f"MATMUL ratio gpumem_default/cudaMalloc matmul={pooled[0] / base[0]:.4f} copy={pooled[1] / base[1]:.4f} "
          f"(target: matmul >= 0.99)", flush=True)
    for s in scraps[1::2]:
        s.free()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
