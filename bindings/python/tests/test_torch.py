"""gpumem as PyTorch's allocator (gpumem.torch, over gpumem_torch_alloc and gpumem_torch_free).

PyTorch's allocator is fixed per process, so every run with PyTorch is a process of its own: the
same small convolutional network trains from the same seed on random data, once on PyTorch's
caching allocator and once on gpumem's after gpumem.torch.install(). With deterministic algorithms
the losses must match bit for bit: a difference means memory was handed out while still in use.
Those tests skip without PyTorch or without a CUDA device; the ones that need neither run anywhere.
"""
import ctypes
import json
import os
import pathlib
import subprocess
import sys
import unittest

import gpumem
import gpumem.torch
from gpumem import _lib

from .support import gpu_count

try:
    import torch

    _SKIP = None if torch.cuda.is_available() else "PyTorch sees no CUDA device"
except Exception as error:  # ImportError, or a PyTorch that cannot load its CUDA libraries
    _SKIP = f"PyTorch cannot run here: {error!r}"
if _SKIP is None and gpu_count() == 0:
    _SKIP = "gpumem sees no CUDA device"

STEPS = 300
WARMUP = 20  # steps left out of the mean step time: cuDNN and cuBLAS set up in the first ones

# Run as `python -c TRAIN MODE STEPS WARMUP`; prints one JSON line. MODE is "pytorch" (its own
# allocator), "gpumem" (gpumem.torch.install() first) or "late" (install() after CUDA is in use).
TRAIN = r"""
import json, sys, time
mode, steps, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import gpumem.torch
if mode == "gpumem":
    gpumem.torch.install()
import torch
if mode == "late":
    torch.zeros(1, device="cuda")
    try:
        gpumem.torch.install()
        print(json.dumps({"error": None}))
    except RuntimeError as error:
        print(json.dumps({"error": str(error)}))
    sys.exit(0)

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
device = torch.device("cuda", 0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.fc1 = torch.nn.Linear(64 * 16 * 16, 256)
        self.fc2 = torch.nn.Linear(256, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
# Batches of several sizes, so that freed blocks are reused for requests of other sizes.
generator = torch.Generator().manual_seed(1)
batches = []
for n in (64, 48, 32, 64, 17, 64, 40, 128):
    x = torch.randn(n, 3, 32, 32, generator=generator)
    y = torch.randint(0, 10, (n,), generator=generator)
    batches.append((x.to(device), y.to(device)))

losses = []
for step in range(steps):
    if step == warmup:
        torch.cuda.synchronize()
        start = time.perf_counter()
    x, y = batches[step % len(batches)]
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
torch.cuda.synchronize()
step_s = (time.perf_counter() - start) / (steps - warmup)

if mode == "gpumem":
    stats = gpumem.torch.pool(0).stats()
    peak_reserved, peak_in_use, alloc_count = stats.peak_bytes_reserved, stats.peak_bytes_in_use, stats.alloc_count
else:
    peak_reserved, peak_in_use = torch.cuda.max_memory_reserved(0), torch.cuda.max_memory_allocated(0)
    alloc_count = torch.cuda.memory_stats(0)["allocation.all.allocated"]
print(json.dumps({
    "mode": mode,
    "installed": gpumem.torch.installed(),
    "losses": [v.hex() for v in losses],
    "peak_reserved": peak_reserved,
    "peak_in_use": peak_in_use,
    "alloc_count": alloc_count,
    "step_s": step_s,
}))
"""


def _run(mode, steps=STEPS):
    """Runs TRAIN in a new process with this process's libgpumem and package; its JSON result."""
    package_dir = str(pathlib.Path(gpumem.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["GPUMEM_LIBRARY"] = _lib.library_path()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_dir, env.get("PYTHONPATH")) if p)
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # cuBLAS is deterministic only with a fixed workspace
    done = subprocess.run(
        [sys.executable, "-c", TRAIN, mode, str(steps), str(WARMUP)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if done.returncode != 0:
        raise AssertionError(f"the {mode} run exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return json.loads(lines[-1])


class EntryPointsTest(unittest.TestCase):
    """What needs neither PyTorch nor a GPU."""

    def test_library_path_is_the_loaded_library(self):
        path = _lib.library_path()
        self.assertTrue(os.path.isabs(path), path)
        self.assertTrue(os.path.isfile(path), path)
        # A dlopen() of the path finds the library already loaded, as PyTorch's will.
        again = ctypes.CDLL(path)
        loaded = gpumem.library()
        self.assertEqual(
            ctypes.cast(again.gpumem_torch_alloc, ctypes.c_void_p).value,
            ctypes.cast(loaded.gpumem_torch_alloc, ctypes.c_void_p).value,
        )
        if os.environ.get("GPUMEM_LIBRARY"):
            self.assertTrue(os.path.samefile(path, os.environ["GPUMEM_LIBRARY"]))

    def test_failures_answer_null_and_leave_the_detail(self):
        lib = gpumem.library()
        self.assertIsNone(lib.gpumem_torch_alloc(-1, 0, None))
        self.assertIn(b"size is -1", lib.gpumem_last_error_detail())
        self.assertIsNone(lib.gpumem_torch_alloc(1024, -2, None))
        self.assertIn(b"device is -2", lib.gpumem_last_error_detail())
        self.assertIsNone(lib.gpumem_torch_free(None, 0, 0, None))
        lib.gpumem_torch_free(0x10000, 1024, -3, None)
        self.assertIn(b"device is -3", lib.gpumem_last_error_detail())

    def test_module_imports_without_torch(self):
        self.assertFalse(gpumem.torch.installed())
        self.assertNotIn("torch", vars(gpumem.torch))


@unittest.skipIf(gpu_count() == 0, "gpumem sees no CUDA device")
class PoolTest(unittest.TestCase):
    def test_pool_is_the_default_allocator(self):
        the_pool = gpumem.torch.pool(0)
        self.assertEqual(the_pool.handle, gpumem.device_pool(0).handle)
        self.assertFalse(the_pool.owned)
        lib = gpumem.library()
        before = the_pool.stats()
        ptr = lib.gpumem_torch_alloc(1000, 0, None)
        self.assertIsNotNone(ptr)
        self.assertEqual(the_pool.stats().alloc_count, before.alloc_count + 1)
        self.assertEqual(the_pool.stats().bytes_requested, before.bytes_requested + 1000)
        lib.gpumem_torch_free(ptr, 1000, 0, None)
        self.assertEqual(the_pool.stats().free_count, before.free_count + 1)
        self.assertEqual(the_pool.stats().bytes_requested, before.bytes_requested)


@unittest.skipIf(_SKIP, _SKIP)
class TrainingTest(unittest.TestCase):
    def test_training_matches_pytorchs_allocator(self):
        theirs = _run("pytorch")
        ours = _run("gpumem")
        print(
            f"\ntraining {STEPS} steps: PyTorch's allocator peak reserved {theirs['peak_reserved']:,} bytes "
            f"(peak allocated {theirs['peak_in_use']:,}), {theirs['step_s'] * 1e3:.3f} ms a step; "
            f"gpumem peak reserved {ours['peak_reserved']:,} bytes (peak in use {ours['peak_in_use']:,}), "
            f"{ours['step_s'] * 1e3:.3f} ms a step; {ours['alloc_count']:,} gpumem allocations",
            file=sys.stderr,
        )
        self.assertFalse(theirs["installed"])
        self.assertTrue(ours["installed"])
        self.assertGreater(ours["alloc_count"], 0)
        self.assertGreater(ours["peak_reserved"], 0)
        self.assertEqual(len(ours["losses"]), STEPS)
        self.assertEqual(ours["losses"], theirs["losses"])
        # The network learned something (it memorizes the 8 batches): the numbers compared are not
        # the same garbage twice.
        losses = [float.fromhex(v) for v in ours["losses"]]
        self.assertLess(sum(losses[-8:]), sum(losses[:8]))

    def test_install_after_cuda_is_initialized_is_refused(self):
        result = _run("late", steps=0)
        self.assertIsNotNone(result["error"])
        self.assertIn("before PyTorch initializes CUDA", result["error"])


if __name__ == "__main__":
    unittest.main()
