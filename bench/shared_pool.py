"""One process, three libraries: CuPy preprocessing, a PyTorch training step and a Numba kernel
per step, run once on the libraries' own pools and once with all three as tenants of gpumem's
device pool. Prints the device memory the driver reports in use at its peak (sampled after each
phase) and the step time, side by side, checks the results are equal, and prints each tenant's
peak beside its budget (GPUMEM_TORCH_LIMIT, GPUMEM_CUPY_LIMIT, GPUMEM_NUMBA_LIMIT, if set).

    python3 bench/shared_pool.py --library build/gpu/lib/libgpumem.so.0 [--steps 30]

Each configuration runs in a process of its own (an allocator is chosen before CUDA starts).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(mode, steps):
    import torch

    if mode == "gpumem":
        import gpumem.cupy
        import gpumem.torch

        gpumem.torch.install()
        gpumem.cupy.install(shared=True)  # a tenant of the device pool, as torch and numba
    import cupy

    numba_kernel = None
    try:
        from numba import cuda

        if mode == "gpumem":
            import gpumem.numba

            gpumem.numba.use_gpumem_for_numba()

        @cuda.jit
        def scale(x, factor):  # the post-processing kernel
            i = cuda.grid(1)
            if i < x.size:
                x[i] = x[i] * factor

        numba_kernel = scale
    except ImportError:
        pass

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 4096)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    peak = 0
    checksum = 0.0

    def sample():
        nonlocal peak
        free, total = torch.cuda.mem_get_info()
        peak = max(peak, total - free)

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for step in range(steps):
        # CuPy: a large temporary working set, freed before the model runs.
        rs = cupy.random.RandomState(step)
        raw = rs.standard_normal((16384, 4096), dtype=cupy.float32)  # 256 MiB
        tmp = [raw * k for k in range(1, 5)]  # 1 GiB more, briefly
        batch = (sum(tmp) / 10.0)[:2048]
        batch = cupy.ascontiguousarray(batch)
        del raw, tmp
        sample()
        x = torch.from_dlpack(batch)
        # PyTorch: its own activations and gradients.
        out = model(x)
        loss = out.float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sample()
        if numba_kernel is not None:
            y = cuda.as_cuda_array(out.detach().reshape(-1))
            try:
                numba_kernel[(y.size + 255) // 256, 256](y, 0.5)
            except Exception as error:  # Numba that cannot compile here (its NumPy): the rest still runs
                print(f"numba kernel skipped: {type(error).__name__}: {error}", file=sys.stderr)
                numba_kernel = None
        checksum += float(out.detach().double().sum())
        del x, batch, out, loss
        sample()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    result = {"mode": mode, "peak_bytes": peak, "ms_per_step": 1000 * seconds / steps, "checksum": checksum}
    if mode == "gpumem":
        tenants = {"torch": gpumem.torch.tenant(0), "cupy": gpumem.cupy.pool(0)}
        if numba_kernel is not None or "gpumem.numba" in sys.modules:
            tenants["numba"] = sys.modules["gpumem.numba"].tenant(0)
        result["tenants"] = {name: [t.info().peak_bytes_in_use, t.info().limit, t.info().refused]
                             for name, t in tenants.items()}
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", help="libgpumem.so.0 to use (GPUMEM_LIBRARY)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(run(args.mode, args.steps)))
        return 0
    env = dict(os.environ)
    if args.library:
        env["GPUMEM_LIBRARY"] = os.path.abspath(args.library)
    env["PYTHONPATH"] = os.path.join(HERE, "..", "bindings", "python") + os.pathsep + env.get("PYTHONPATH", "")
    results = []
    for mode in ("own", "gpumem"):
        out = subprocess.run([sys.executable, __file__, "--mode", mode, "--steps", str(args.steps)], env=env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{mode}: failed\n{out.stderr[-3000:]}")
            return 1
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    own, shared = results
    print("| pools | peak device memory in use (GiB) | ms/step | ÷ own pools |")
    print("|---|---:|---:|---:|")
    for r in results:
        print(f"| {r['mode']} | {r['peak_bytes'] / 2**30:.2f} | {r['ms_per_step']:.1f} | "
              f"{r['peak_bytes'] / own['peak_bytes']:.3f} memory, {r['ms_per_step'] / own['ms_per_step']:.3f} time |")
    print("\n| tenant | peak in use (GiB) | budget (GiB) | refusals |")
    print("|---|---:|---:|---:|")
    for name, (peak, limit, refused) in shared["tenants"].items():
        budget = f"{limit / 2**30:.2f}" if limit else "none"
        print(f"| {name} | {peak / 2**30:.3f} | {budget} | {refused} |")
    same = abs(own["checksum"] - shared["checksum"]) <= 1e-6 * max(1.0, abs(own["checksum"]))
    print(f"results equal: {same} ({own['checksum']:.6g} and {shared['checksum']:.6g})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
