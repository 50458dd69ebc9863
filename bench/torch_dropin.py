#!/usr/bin/env python3
"""gpumem's pool as PyTorch's CUDA allocator, against PyTorch's own: the memory each needs for
the same training runs as bench/torch_memory_runs.py (a GPT-style model and a ResNet, batch
shapes varying from step to step, the same seed), and the time a step takes.

    python3 bench/torch_dropin.py --library build/gpu/lib/libgpumem.so.0 \\
        [--steps N] [--runs gpt,resnet] [--configs torch,torch_expandable,gpumem_pool,gpumem_pool_vm]

Each (run, configuration) runs in a fresh process, since PyTorch's allocator can only be chosen
before CUDA is initialised:

    torch             PyTorch's caching allocator (PYTORCH_CUDA_ALLOC_CONF unset)
    torch expandable  the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    gpumem pool       a gpumem pool over cuMemAlloc made device 0's default allocator, which
                      libgpumem's gpumem_torch_alloc and gpumem_torch_free serve PyTorch from
                      (gpumem.torch.install(), through CUDAPluggableAllocator)
    gpumem pool vm    the same over virtual memory, segments growing in place (32 MiB units)
    gpumem default    the device pool as gpumem makes it (gpumem_pool_get_device): over virtual
                      memory in units of the device's granularity, with page reclaim

Each process prints one `DROPIN <run> <config> key=value ...` line; this script prints them as they
come and a table at the end. The gpumem configurations load the Python package from
bindings/python and the library given by --library (else GPUMEM_LIBRARY, else libgpumem.so.0). Without PyTorch it prints "no PyTorch: ..." and without a GPU
"no GPU: ...", and exits 0. bench/README.md says what each figure is.
"""
import argparse
import os
import subprocess
import sys
import threading
import time

CONFIGS = {  # id: (label, environment, gpumem's upstream or None for PyTorch's allocator)
    "torch": ("torch", {}, None),
    "torch_expandable": ("torch expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, None),
    "gpumem_pool": ("gpumem pool", {}, "device"),
    "gpumem_pool_vm": ("gpumem pool vm", {}, "vm"),
    "gpumem_default": ("gpumem default", {}, "default"),
}
PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bindings", "python")
RUNS = ("gpt", "resnet")
MiB = 1 << 20


def config_id(name):
    return name.strip().lower().replace(" ", "_").replace("-", "_")


# ---- The child: one run under one configuration ----


class DriverPoller(threading.Thread):
    """The highest device memory in use that the driver reports (total - free), polled as fast as
    the thread can. A peak shorter than one poll can be missed: the figure is a lower bound."""

    def __init__(self, torch, device):
        super().__init__(daemon=True)
        self.torch, self.device, self.stop, self.peak, self.samples = torch, device, threading.Event(), 0, 0

    def run(self):
        mem_get_info, device, stop = self.torch.cuda.mem_get_info, self.device, self.stop
        peak = samples = 0
        while not stop.is_set():
            free, total = mem_get_info(device)
            peak = max(peak, total - free)
            samples += 1
        self.peak, self.samples = peak, samples


def warm_up(torch):
    """Loads what every configuration needs alike and keeps: cuBLAS and cuBLASLt (their handles and
    workspaces, for this thread and the autograd thread that runs backward) and cuDNN."""
    import torch.nn.functional as F

    w = torch.ones(64, 64, device="cuda", requires_grad=True)
    F.linear(torch.ones(4, 64, device="cuda"), w, torch.ones(64, device="cuda")).sum().backward()
    k = torch.ones(8, 3, 3, 3, device="cuda", requires_grad=True)
    F.conv2d(torch.ones(2, 3, 16, 16, device="cuda"), k).sum().backward()
    torch.cuda.synchronize()


def child(run, cfg, steps):
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_memory_runs as runs

    pool = None
    upstream = CONFIGS[cfg][2]
    if upstream:  # before anything initialises CUDA in PyTorch, which fixes its allocator
        sys.path.insert(0, PACKAGE)
        import gpumem
        import gpumem.torch

        if upstream == "default":  # the device pool as it comes: over virtual memory, with page reclaim
            pool = gpumem.device_pool(0)
        else:
            pool = gpumem.Pool(gpumem.Allocator.vm(0) if upstream == "vm" else gpumem.Allocator.device(0))
            gpumem.library().gpumem_allocator_set_default(0, pool.handle)  # what gpumem_torch_alloc serves from
        gpumem.torch.install()

    def allocator_peaks():  # (peak reserved, peak live)
        if pool is None:
            return torch.cuda.max_memory_reserved(device), torch.cuda.max_memory_allocated(device)
        stats = pool.stats()
        return stats.peak_bytes_reserved, stats.peak_bytes_in_use

    torch.cuda.init()
    device = torch.cuda.current_device()
    print(f"# device {device}: {torch.cuda.get_device_name(device)}; torch {torch.__version__}", flush=True)
    warm_up(torch)
    free, total = torch.cuda.mem_get_info(device)
    baseline = total - free
    base_reserved = allocator_peaks()[0]  # no free memory has been given back yet: what it holds
    poller = DriverPoller(torch, device)
    poller.start()

    # As torch_memory_runs.main does: seed once, build GPT, and for the ResNet draw the GPT run's
    # batch shapes first, so that both the weights and the shapes are those of that script's runs.
    runs.random.seed(runs.SEED)
    torch.manual_seed(runs.SEED)
    model = runs.GPT()
    make_batch = runs.gpt_batch
    if run == "resnet":
        for _ in range(steps):
            runs.random.choice(runs.GPT_BATCHES)
            runs.random.choice(runs.GPT_LENGTHS)
        del model
        model, make_batch = runs.resnet(), runs.resnet_batch

    model = model.cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    growth0 = pool.growth_info() if pool is not None else None
    times = []
    for _ in range(steps):  # the step of torch_memory_runs.run, timed to its end on the GPU
        start = time.perf_counter()
        runs.train_step(model, opt, make_batch)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)

    poller.stop.set()
    poller.join()
    free, total = torch.cuda.mem_get_info(device)
    driver_peak = max(poller.peak, total - free) - baseline
    reserved, live = allocator_peaks()
    later = times[1:] or times
    growth = ""
    if pool is not None:  # the driver work of the pool's growth, per step
        g = pool.growth_info()
        growth = (f" driver_ms_per_step={(g.driver_ns - growth0.driver_ns) / 1e6 / steps:.3f}"
                  f" moved_mib_per_step={(g.moved_bytes - growth0.moved_bytes) / MiB / steps:.1f}"
                  f" mapped_mib_per_step={(g.mapped_bytes - growth0.mapped_bytes) / MiB / steps:.1f}")
    print(f"DROPIN {run} {cfg} peak_live={live} peak_reserved={reserved} reserved_ratio={reserved / live:.4f} "
          f"driver_peak={driver_peak} driver_ratio={driver_peak / live:.4f} "
          f"ms_per_step={1e3 * sum(later) / len(later):.2f} first_step_ms={1e3 * times[0]:.2f} steps={steps} "
          f"baseline={baseline} base_reserved={base_reserved} samples={poller.samples}{growth}", flush=True)
    return 0


# ---- The parent: one child per (run, configuration), then the table ----


def parse_row(line):
    fields = line.split()
    row = {"run": fields[1], "config": fields[2]}
    row.update(f.split("=", 1) for f in fields[3:])
    return row


def schedule(run_names, configs, repeat):
    """(run, configuration) in the order the children run: for each run, `repeat` rounds over the
    configurations, round k starting at the k-th, so that no configuration always runs first (step
    times on the lent machine drift by 10% between processes; a ratio of one round is noise)."""
    for run in run_names:
        for k in range(repeat):
            for i in range(len(configs)):
                yield run, configs[(k + i) % len(configs)]


def merge_repeats(rows):
    """One row per (run, configuration): the round with the median step time, with every round's
    step time in `ms_runs` and the largest memory figures of any round."""
    merged = {}
    for r in rows:
        merged.setdefault((r["run"], r["config"]), []).append(r)
    out = []
    for group in merged.values():
        ordered = sorted(group, key=lambda r: float(r["ms_per_step"]))
        row = dict(ordered[(len(ordered) - 1) // 2])
        for key in ("peak_reserved", "driver_peak"):
            row[key] = str(max(int(r[key]) for r in group))
        for key in ("reserved_ratio", "driver_ratio"):
            row[key] = str(max(float(r[key]) for r in group))
        row["ms_runs"] = " / ".join(f"{float(r['ms_per_step']):.1f}" for r in group)
        out.append(row)
    return out


def print_table(rows):
    print()
    print("| run | configuration | peak live MiB | peak reserved MiB | reserved/live | driver peak MiB | driver/live "
          "| ms/step | step ÷ torch | ms/step, each round | first step ms | pool driver ms/step | moved MiB/step |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    torch_ms = {r["run"]: float(r["ms_per_step"]) for r in rows if r["config"] == "torch"}
    for r in rows:
        print(f"| {r['run']} | {CONFIGS[r['config']][0]} | {int(r['peak_live']) / MiB:.1f} "
              f"| {int(r['peak_reserved']) / MiB:.1f} | {float(r['reserved_ratio']):.3f} "
              f"| {int(r['driver_peak']) / MiB:.1f} | {float(r['driver_ratio']):.3f} "
              f"| {float(r['ms_per_step']):.1f} | {step_ratio(r, torch_ms)} | {r['ms_runs']} "
              f"| {float(r['first_step_ms']):.1f} "
              f"| {r.get('driver_ms_per_step', '-')} | {r.get('moved_mib_per_step', '-')} |")
    print()
    for note in (
            "peak live: torch.cuda.max_memory_allocated, or the gpumem pool's peak_bytes_in_use; both count sizes "
            "rounded up to 512 B. The pool's may be over by up to 16 MiB: the autograd thread shares it "
            "(docs/pool.md, 'Statistics under many threads').",
            "peak reserved: torch.cuda.max_memory_reserved, or the pool's peak_bytes_reserved.",
            "driver peak: the most device memory in use (cudaMemGetInfo, polled) beyond what was in use once CUDA, "
            "cuBLAS and cuDNN were loaded; a lower bound, and it counts kernels loaded during the run.",
            "ms/step: the mean of the steps after the first, each timed to a synchronize, in the round with the "
            "median (--repeat rounds, each in another order); step ÷ torch: that over PyTorch's allocator's; "
            "first step: the first, in that round. Memory figures: the largest of any round.",
            "pool driver ms/step, moved MiB/step: gpumem_pool_get_growth_info over the run, per step: the time the "
            "pool spent in its upstream's calls and its events, and the bytes page reclaim moved."):
        print(f"- {note}")


def step_ratio(row, torch_ms):
    base = torch_ms.get(row["run"])
    return f"{float(row['ms_per_step']) / base:.3f}" if base else "-"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--library", help="libgpumem.so.0 for the gpumem configurations (default: GPUMEM_LIBRARY, "
                   "else the dynamic loader's search)")
    p.add_argument("--steps", type=int, default=12, help="training steps a run (default 12, as torch_memory_runs.py)")
    p.add_argument("--runs", default=",".join(RUNS), help="comma-separated: gpt, resnet")
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help="comma-separated: torch, torch expandable, gpumem pool, gpumem pool vm (or with _)")
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds over the configurations, each round in another order (default 1); the table "
                   "gives each configuration's median step time and every round's")
    p.add_argument("--timeout", type=float, default=600, help="seconds a run may take (default 600)")
    p.add_argument("--child", nargs=2, metavar=("RUN", "CONFIG"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error("--steps must be at least 1")
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    run_names = [r.strip() for r in a.runs.split(",") if r.strip()]
    configs = [config_id(c) for c in a.configs.split(",") if c.strip()]
    for r in run_names:
        if r not in RUNS:
            p.error(f"unknown run {r!r}: the runs are {', '.join(RUNS)}")
    for c in configs:
        if c not in CONFIGS:
            p.error(f"unknown configuration {c!r}: the configurations are {', '.join(CONFIGS)}")
    if a.child:
        return child(a.child[0], a.child[1], a.steps)

    try:
        import torch
    except ImportError as e:
        print(f"no PyTorch: {e}; torch_dropin.py compares allocators inside PyTorch and needs it")
        return 0
    if not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is False")
        return 0
    library = os.path.abspath(a.library) if a.library else None
    if library and not os.path.exists(library):
        p.error(f"--library {a.library}: no such file")

    rows, failed, device_line = [], 0, None
    for run, cfg in schedule(run_names, configs, a.repeat):
        env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
        env.update(CONFIGS[cfg][1])
        if library:
            env["GPUMEM_LIBRARY"] = library
        cmd = [sys.executable, os.path.abspath(__file__), "--child", run, cfg, "--steps", str(a.steps)]
        try:
            done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            print(f"FAIL {run} {cfg}: no result within {a.timeout:g} s", flush=True)
            failed += 1
            continue
        row = None
        for line in done.stdout.splitlines():
            if line.startswith("DROPIN "):
                row = parse_row(line)
                print(line, flush=True)
            elif line.startswith("# device"):
                if device_line is None:
                    device_line = line
                    print(line, flush=True)
            else:
                print(line, flush=True)
        if row is None:
            print(f"FAIL {run} {cfg}: exit status {done.returncode} and no DROPIN line (its stderr is above)",
                  flush=True)
            failed += 1
            continue
        if done.returncode != 0:
            print(f"# note: {run} {cfg} exited with status {done.returncode} after its DROPIN line", flush=True)
        rows.append(row)
    if rows:
        print_table(merge_repeats(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
