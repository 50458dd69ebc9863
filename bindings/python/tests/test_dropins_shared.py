"""PyTorch, CuPy and Numba in one process on one gpumem pool, each through its tenant; skipped
without a CUDA device, and each library's part without that library.

Every run is a process of its own: PyTorch's allocator and Numba's memory manager are fixed once
CUDA is in use. Results are checked against a run without gpumem (PyTorch's losses, bit for bit)
or against values known beforehand (CuPy's and Numba's).
"""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import unittest

import gpumem
from gpumem import _lib

from .support import gpu_count


def _available():
    """{library: None if usable here, else why not}."""
    found = {}
    if gpu_count() == 0:
        return {name: "gpumem sees no CUDA device" for name in ("torch", "cupy", "numba")}
    for name, probe in [
        ("torch", "import torch; assert torch.cuda.is_available(), 'PyTorch sees no CUDA device'"),
        ("cupy", "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0, 'CuPy sees no CUDA device'"),
        ("numba", "from numba import cuda; assert cuda.is_available(), 'Numba sees no CUDA device'"),
    ]:
        if importlib.util.find_spec(name) is None:
            found[name] = f"{name} is not installed"
            continue
        # In a process of its own: the probe must not fix this process's CUDA state.
        done = _run(probe, env={})
        found[name] = None if done.returncode == 0 else f"{name} cannot run here: {done.stderr.strip()[-300:]}"
    return found


def _run(script, *args, env=None):
    environment = dict(os.environ)
    package_dir = str(pathlib.Path(gpumem.__file__).resolve().parents[1])
    environment["GPUMEM_LIBRARY"] = _lib.library_path()
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (package_dir, environment.get("PYTHONPATH")) if p)
    environment["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # cuBLAS is deterministic only with a fixed workspace
    environment.update(env or {})
    return subprocess.run([sys.executable, "-c", script, *args], env=environment, capture_output=True, text=True,
                          timeout=300)


def _result(done):
    if done.returncode != 0:
        raise AssertionError(f"the run exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return json.loads([line for line in done.stdout.splitlines() if line.strip()][-1])


_AVAILABLE = _available()
_NONE = all(_AVAILABLE.values())

# `python -c SHARED MODE LIBRARIES`: MODE "gpumem" installs gpumem for each of LIBRARIES (comma
# separated) first, "plain" leaves them their own allocators. Prints one JSON line.
SHARED = r"""
import gc, json, sys
mode, libraries = sys.argv[1], set(sys.argv[2].split(","))
out = {}
import gpumem, gpumem.torch, gpumem.cupy, gpumem.numba
if mode == "gpumem":
    out["pool"] = gpumem.device_pool(0).handle
    if "numba" in libraries:
        gpumem.numba.use_gpumem_for_numba()  # before Numba makes its context
    if "torch" in libraries:
        gpumem.torch.install()

if "torch" in libraries:
    import torch
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(256, 64, generator=generator).cuda()
    y = torch.randn(256, 8, generator=generator).cuda()
    losses = []
    for _ in range(8):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    torch.cuda.synchronize()
    out["losses"] = [v.hex() for v in losses]
    if mode == "gpumem":
        out["torch_in_use"] = gpumem.torch.tenant(0).info().bytes_in_use
        out["torch_upstream"] = gpumem.torch.tenant(0).upstream.handle
        stats = gpumem.torch.memory_stats(0)
        out["torch_stats"] = {k: stats[k] for k in ("allocated_bytes.all.current", "reserved_bytes.all.current",
                                                    "gpumem.limit")}
        out["summary"] = gpumem.torch.memory_summary(0)
        try:
            torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # past GPUMEM_TORCH_LIMIT
            out["torch_oom"] = None
        except torch.OutOfMemoryError as error:
            out["torch_oom"] = type(error).__name__
            out["torch_oom_detail"] = str(error)
        out["torch_after_oom"] = float(torch.ones(1000, device="cuda").sum())
        torch.cuda.synchronize()  # no kernel ran on memory that was never there

if "cupy" in libraries:
    import cupy
    if mode == "gpumem":
        gpumem.cupy.install(pinned=False, shared=True)
    n = 1_000_000
    a = cupy.arange(n, dtype=cupy.int64)
    out["cupy_sum"] = int((a * 3).sum())
    big = cupy.ones(32 << 20, dtype=cupy.float32)  # 128 MiB: CuPy's budget is not PyTorch's
    out["cupy_big"] = float(big[::1 << 20].sum())
    if mode == "gpumem":
        try:
            cupy.empty(300 * 10**6, dtype=cupy.uint8)  # with `big`, past GPUMEM_CUPY_LIMIT
            out["cupy_oom"] = None
        except cupy.cuda.memory.OutOfMemoryError as error:
            out["cupy_oom"] = str(error)
        t = gpumem.cupy.pool(0)
        out["cupy_tenant"] = t.name
        out["cupy_in_use"] = t.info().bytes_in_use
        out["cupy_used_bytes"] = gpumem.cupy.memory_pool().used_bytes()
        out["cupy_upstream"] = t.upstream.handle
    del a, big

if "numba" in libraries:
    import numpy
    from numba import cuda
    host = numpy.arange(100_000, dtype=numpy.float32)
    d_in = cuda.to_device(host)
    d_out = cuda.device_array_like(d_in)
    try:
        @cuda.jit
        def axpb(x, y):
            i = cuda.grid(1)
            if i < x.size:
                y[i] = 2 * x[i] + 1

        axpb[(host.size + 255) // 256, 256](d_in, d_out)
        got = d_out.copy_to_host()
        out["numba_ok"] = bool((got == 2 * host + 1).all())
    except Exception as error:  # no NVVM to compile with, for one
        out["numba_skip"] = f"{type(error).__name__}: {error}"
    if mode == "gpumem":
        try:
            cuda.device_array(100 * 10**6, dtype=numpy.uint8)  # past GPUMEM_NUMBA_LIMIT
            out["numba_oom"] = None
        except MemoryError as error:
            out["numba_oom"] = str(error)
        t = gpumem.numba.tenant(0)
        out["numba_manager"] = type(cuda.current_context().memory_manager).__name__
        out["numba_in_use"] = t.info().bytes_in_use
        out["numba_upstream"] = t.upstream.handle
if {"torch", "cupy"} <= libraries:
    # DLPack both ways: the memory stays its allocator's, and goes back there when the last of
    # the two arrays goes, whichever that is.
    def in_use(name):
        return (gpumem.torch.tenant(0) if name == "torch" else gpumem.cupy.pool(0)).info().bytes_in_use \
            if mode == "gpumem" else 0
    exchanged = {}
    for producer in ("cupy", "torch"):
        before = in_use(producer)
        if producer == "cupy":
            made = cupy.arange(1 << 20, dtype=cupy.float32)
            other = torch.from_dlpack(made)
        else:
            made = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
            other = cupy.from_dlpack(made)
        held = in_use(producer) - before
        del made
        gc.collect()
        total = float(other.sum())
        kept = in_use(producer) - before
        del other
        gc.collect()
        torch.cuda.synchronize()
        exchanged[producer] = [total, held, kept, in_use(producer) - before]
    out["dlpack"] = exchanged
print(json.dumps(out))
"""

# Tensor.record_stream: without it the block x frees would be z's at once, and filled while the
# side stream, still sleeping, has yet to read x.
RECORD_STREAM = r"""
import json
import gpumem.torch
gpumem.torch.install()
import torch
if not gpumem.torch.record_stream_supported():
    print(json.dumps({"skip": "this PyTorch's pluggable allocator has no set_record_stream_fn"}))
    raise SystemExit(0)
n = 1 << 24
x = torch.full((n,), 1.0, device="cuda")
address = x.data_ptr()
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(5e8))  # about a quarter of a second
    else:
        m = torch.randn(2048, 2048, device="cuda")
        for _ in range(64):
            m = m @ m / 2048
    y = x * 1
x.record_stream(side)
del x
z = torch.full((n,), 7.0, device="cuda")
torch.cuda.synchronize()
print(json.dumps({"ok": bool((y == 1.0).all()), "z_ok": bool((z == 7.0).all()), "reused": z.data_ptr() == address}))
"""

# Numba's EMM plugin on its own: arrays round trip, memory info, frees through Numba's queue.
NUMBA = r"""
import gc, json
import numpy
import gpumem.numba
gpumem.numba.use_gpumem_for_numba()
from numba import cuda
ctx = cuda.current_context()
t = gpumem.numba.tenant(0)
out = {"manager": type(ctx.memory_manager).__name__}
host = numpy.arange(100_000, dtype=numpy.float64)
d = cuda.to_device(host)
e = cuda.device_array(1000, dtype=numpy.int32)
e.copy_to_device(numpy.arange(1000, dtype=numpy.int32))
out["round_trip"] = bool((d.copy_to_host() == host).all()) and bool((e.copy_to_host() == numpy.arange(1000)).all())
out["in_use"] = t.info().bytes_in_use
free, total = ctx.get_memory_info()
out["memory_info"] = [free, total]

def flush():
    gc.collect()
    ctx.deallocations.clear()
    ctx.memory_manager.deallocations.clear()

del d, e
flush()
out["after_free"] = t.info().bytes_in_use
with cuda.defer_cleanup():
    a = cuda.device_array(1 << 20, dtype=numpy.uint8)
    del a
    flush()
    out["deferred"] = t.info().bytes_in_use
flush()
out["after_defer"] = t.info().bytes_in_use
out["empty"] = cuda.device_array(0).size
print(json.dumps(out))
"""


@unittest.skipIf(_NONE, "; ".join(sorted(set(filter(None, _AVAILABLE.values())))) or "")
class SharedPoolTest(unittest.TestCase):
    def test_three_libraries_on_one_pool(self):
        libraries = [name for name, why in _AVAILABLE.items() if why is None]
        for name, why in _AVAILABLE.items():
            if why:
                print(f"\n{name}'s part skipped: {why}", file=sys.stderr)
        budgets = {"GPUMEM_TORCH_LIMIT": "512MB", "GPUMEM_CUPY_LIMIT": "256MB", "GPUMEM_NUMBA_LIMIT": "64MB"}
        ours = _result(_run(SHARED, "gpumem", ",".join(libraries), env=budgets))
        upstreams = {ours[f"{name}_upstream"] for name in libraries}
        self.assertEqual(upstreams, {ours["pool"]})  # every tenant is one of device 0's pool

        if "torch" in libraries:
            theirs = _result(_run(SHARED, "plain", "torch"))
            self.assertEqual(ours["losses"], theirs["losses"])
            losses = [float.fromhex(v) for v in ours["losses"]]
            self.assertLess(losses[-1], losses[0])
            self.assertGreater(ours["torch_in_use"], 0)
            self.assertEqual(ours["torch_stats"]["gpumem.limit"], 512 * 10**6)
            self.assertEqual(ours["torch_stats"]["allocated_bytes.all.current"], ours["torch_in_use"])
            self.assertGreaterEqual(ours["torch_stats"]["reserved_bytes.all.current"], ours["torch_in_use"])
            self.assertIn("tenant 'torch'", ours["summary"])
            self.assertEqual(ours["torch_oom"], "OutOfMemoryError", "1 GiB past a 512 MB budget was not refused")
            self.assertIn("tenant 'torch'", ours["torch_oom_detail"])
            self.assertIn("512,000,000", ours["torch_oom_detail"])
            self.assertEqual(ours["torch_after_oom"], 1000.0)
        if "cupy" in libraries:
            n = 1_000_000
            self.assertEqual(ours["cupy_sum"], 3 * n * (n - 1) // 2)
            self.assertEqual(ours["cupy_big"], 32.0)  # allocated past PyTorch's budget
            self.assertEqual(ours["cupy_tenant"], "cupy")
            self.assertGreater(ours["cupy_in_use"], 0)
            self.assertEqual(ours["cupy_used_bytes"], ours["cupy_in_use"])
            self.assertIsNotNone(ours["cupy_oom"], "300 MB more past a 256 MB budget was not refused")
            self.assertIn("tenant 'cupy'", ours["cupy_oom"])
        if "numba" in libraries:
            self.assertEqual(ours["numba_manager"], "GpumemMemoryManager")
            self.assertGreater(ours["numba_in_use"], 0)
            self.assertIsNotNone(ours["numba_oom"], "100 MB past a 64 MB budget was not refused")
            self.assertIn("tenant 'numba'", ours["numba_oom"])
            if "numba_skip" in ours:
                print(f"\nNumba's kernel skipped: {ours['numba_skip']}", file=sys.stderr)
            else:
                self.assertTrue(ours["numba_ok"])

        if {"torch", "cupy"} <= set(libraries):
            total = float(sum(range(1 << 20)))
            for producer, (got, held, kept, after) in ours["dlpack"].items():
                with self.subTest(producer=producer):
                    self.assertEqual(got, total)
                    self.assertEqual(held, 4 << 20)  # the producer's tenant holds the array
                    self.assertEqual(kept, 4 << 20)  # still, after the producer let go
                    self.assertEqual(after, 0)  # back when the consumer let go

    @unittest.skipIf(_AVAILABLE["torch"], _AVAILABLE["torch"] or "")
    def test_record_stream_fences_the_free(self):
        result = _result(_run(RECORD_STREAM))
        if "skip" in result:
            self.skipTest(result["skip"])
        self.assertTrue(result["z_ok"])
        self.assertTrue(result["ok"], "the side stream read memory handed out again before it was done")
        print(f"\nrecord_stream: z {'reused' if result['reused'] else 'did not reuse'} x's block", file=sys.stderr)

    @unittest.skipIf(_AVAILABLE["numba"], _AVAILABLE["numba"] or "")
    def test_numba_memory_manager(self):
        result = _result(_run(NUMBA))
        self.assertEqual(result["manager"], "GpumemMemoryManager")
        self.assertTrue(result["round_trip"])
        self.assertGreaterEqual(result["in_use"], 800_000 + 4000)
        free, total = result["memory_info"]
        self.assertGreater(total, 0)
        self.assertLessEqual(free, total)
        self.assertEqual(result["after_free"], 0)
        self.assertGreater(result["deferred"], 0)  # held while defer_cleanup() is active
        self.assertEqual(result["after_defer"], 0)
        self.assertEqual(result["empty"], 0)


if __name__ == "__main__":
    unittest.main()
