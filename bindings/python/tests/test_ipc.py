"""Sharing device memory between processes: gpumem.ipc, and torch.multiprocessing and CuPy arrays
over it (gpumem.torch.enable_ipc, gpumem.cupy.export_array / open_array).

What needs no device runs anywhere: handles as bytes, and the library's refusals of what is not a
handle or not open. Two processes (the second started by multiprocessing's "spawn", since a forked
child may not use its parent's CUDA) share memory over a socket and over multiprocessing's queues:
on a GPU, where each checks the bytes the other wrote; and over the fake CUDA driver of the C tests
(tests/driver, found beside the library's build), where the memory is bookkeeping only. The
PyTorch and CuPy tests skip without them; PyTorch's runs in a process of its own, since its
allocator must be installed before PyTorch initializes CUDA.
"""
import ctypes
import functools
import gc
import json
import multiprocessing
import multiprocessing.reduction
import os
import pathlib
import pickle
import queue
import socket
import subprocess
import sys
import time
import traceback
import unittest

import gpumem
from gpumem import _lib, _types, ipc

from .support import gpu_count

GPUS = gpu_count()
NO_GPU = "no CUDA device (gpumem.device_count() failed or is 0)"
SIZE = (3 << 20) + 4096  # across units of 2 MiB, over VM
TIMEOUT = 120


def _fake_driver():
    """The fake CUDA driver of the C tests, in the build that holds the library under test, or None."""
    found = pathlib.Path(_lib.library_path()).resolve().parents[1] / "tests" / "driver" / "libfake_cuda.so"
    return found if found.is_file() else None


def _call_in_subprocess(name, **env):
    """Runs this module's function `name` in a new interpreter (with `env` added to the
    environment) and returns what it returned, through JSON."""
    top = pathlib.Path(__file__).resolve().parents[len(__name__.split(".")) - 1]  # where this module's import starts
    package_root = str(pathlib.Path(gpumem.__file__).resolve().parents[1])
    env = dict(os.environ, **env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(top), package_root, env.get("PYTHONPATH")) if p)
    env["GPUMEM_LIBRARY"] = _lib.library_path()
    script = "import importlib, json, sys\nmodule = importlib.import_module(sys.argv[1])\n"
    script += "print(json.dumps(getattr(module, sys.argv[2])()))"
    done = subprocess.run(
        [sys.executable, "-c", script, __name__, name], env=env, capture_output=True, text=True, timeout=4 * TIMEOUT
    )
    if done.returncode != 0:
        raise AssertionError(f"{name} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return json.loads([line for line in done.stdout.splitlines() if line.strip()][-1])


def _reporting(body):
    """The body of another process, whose last argument is the queue it reports on: an exception
    goes there too, with its traceback, for _get() to raise."""

    @functools.wraps(body)
    def run(*args):
        try:
            body(*args)
        except BaseException:
            args[-1].put({"error": traceback.format_exc()})

    return run


def _start(target, *args):
    process = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
    process.start()
    return process


def _get(results, process):
    """The next report of the other process; AssertionError, with its traceback, if it failed."""
    deadline = time.monotonic() + TIMEOUT
    while process.is_alive() or not results.empty():  # a crash is noticed within a second
        try:
            item = results.get(timeout=min(1, max(0, deadline - time.monotonic())))
        except queue.Empty:
            if time.monotonic() < deadline:
                continue
            raise AssertionError("the other process did not report in time") from None
        if isinstance(item, dict) and "error" in item:
            raise AssertionError(f"the other process failed:\n{item['error']}")
        return item
    raise AssertionError(f"the other process exited with {process.exitcode}")


def _finish(process, wait=TIMEOUT):
    """The exit code of the other process, stopped if it has not ended within `wait` seconds."""
    process.join(wait)
    if process.is_alive():
        process.kill()
        process.join(TIMEOUT)
    return process.exitcode


def _pass_fds(handle):
    """DupFd objects for new descriptors of a handle: they hold copies, so ours are closed."""
    fds = handle.fds()
    try:
        return [multiprocessing.reduction.DupFd(fd) for fd in fds]
    finally:
        for fd in fds:
            os.close(fd)


def _open_passed(opener, handle, passed, *args):
    """opener(handle, fds, *args) over the descriptors passed, which are closed after it."""
    fds = [dup.detach() for dup in passed]
    try:
        return opener(handle, fds, *args)
    finally:
        for fd in fds:
            os.close(fd)


def _holds(memory, byte):
    """Whether every byte of device memory is `byte`."""
    back = bytearray(memory.size)
    gpumem.copy(back, memory)
    return back.count(byte) == len(back)


# ---- Two processes, over gpumem.ipc alone --------------------------------------------------------


@_reporting
def _importer(sock, inbox, may_close, check, results):
    """Receives one allocation over the socket and one as a pickled handle with descriptors passed
    by multiprocessing, reads and writes both (with `check`), and closes them when told."""
    first = ipc.receive(sock)
    second = _open_passed(ipc.open, *inbox.get(timeout=TIMEOUT))
    cai = first.__cuda_array_interface__
    cai = [list(cai["shape"]), cai["typestr"], cai["data"] == (first.ptr, False), cai["version"], cai["stream"]]
    report = {"sizes": [first.size, second.size], "imports": ipc.info().imports, "cai": cai}
    if check:
        report["read"] = [_holds(first, 0x5A), _holds(second, 0x3C)]
        gpumem.memset(first, 0xC3)
        gpumem.memset(second, 0x96)
    results.put(report)
    if not may_close.wait(TIMEOUT):
        raise TimeoutError("never told to close")
    with first:
        pass
    second.close()
    try:
        second.close()
        again = None
    except gpumem.NotOwned as error:
        again = error.detail
    info = ipc.info()
    results.put({"closed": [first.closed, second.closed], "again": again, "imports": info.imports,
                 "open_segments": info.open_segments})


def _share(check):
    """Shares an allocation of the device pool and one of a pool over the VM allocator with a new
    process, frees both while it holds them, then lets it close them; what both sides saw."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = socket.socketpair()
    inbox, results, may_close = ctx.Queue(), ctx.Queue(), ctx.Event()
    child = _start(_importer, theirs, inbox, may_close, check, results)
    theirs.close()
    report = {}
    try:
        before = ipc.info()
        vm = gpumem.Pool(gpumem.Allocator.vm(0))
        first, second = gpumem.device_pool(0).alloc(SIZE), vm.alloc(SIZE)
        if check:
            gpumem.memset(first, 0x5A)  # synchronous: done before the other process reads
            gpumem.memset(second, 0x3C)
        sent = ipc.export(first)
        ipc.send(ours, sent)
        handle = ipc.export(second)
        inbox.put((handle, _pass_fds(handle)))
        report.update(fd_counts=[sent.fd_count, handle.fd_count], opened=_get(results, child))
        if check:
            report["written"] = [_holds(first, 0xC3), _holds(second, 0x96)]
        first.free()
        second.free()
        held = ipc.info()
        report.update(held=held.held - before.held, held_bytes=held.held_bytes - before.held_bytes)
        report["collected_while_open"] = ipc.collect()
        may_close.set()
        report["closed"] = _get(results, child)
        report["collected"] = ipc.collect()
        after = ipc.info()
        report.update(exported_after=after.exported - before.exported, held_after=after.held - before.held)
        try:
            handle.fds()
        except gpumem.InvalidArgument as error:
            report["spent"] = error.detail
        vm.close()
        report["exitcode"] = _finish(child)
        return report
    finally:
        ours.close()
        _finish(child, 0)  # stopped at once when something failed


def _share_over_the_fake_driver():
    return _share(False)


# ---- PyTorch: torch.multiprocessing over gpumem.torch.enable_ipc --------------------------------


@_reporting
def _torch_importer(inbox, installs, results):
    """Gets tensors through a torch.multiprocessing queue, with gpumem as its allocator too or not,
    reports what it sees, writes one element, and lets them go when told."""
    import gpumem.torch

    if installs:
        gpumem.torch.install()
    import torch

    view, weight, cpu, empty = inbox.get(timeout=TIMEOUT)
    results.put({
        "installed": gpumem.torch.installed(),
        "view": [view.sum().item(), list(view.shape), list(view.stride()), view.storage_offset(), str(view.dtype),
                 view.device.type],
        "weight": [type(weight) is torch.nn.Parameter, weight.requires_grad, weight.sum().item()],
        "cpu": cpu.tolist(),
        "empty": [list(empty.shape), empty.device.type],
        "imports": gpumem.ipc.info().imports,
    })
    view[0, 0] = -1.0
    torch.cuda.synchronize()
    results.put("written")
    inbox.get(timeout=TIMEOUT)
    del view, weight
    gc.collect()
    results.put({"imports_after": gpumem.ipc.info().imports})


def _torch_share():
    """In a process of its own (gpumem installed before PyTorch initializes CUDA): tensors to a
    child without gpumem's allocator, then to one with it."""
    import gpumem.torch

    gpumem.torch.install()
    import torch

    reports = []
    for installs in (False, True):
        ctx = torch.multiprocessing.get_context("spawn")
        inbox, results = ctx.Queue(), ctx.Queue()
        child = _start(_torch_importer, inbox, installs, results)
        report = {}
        try:
            before = gpumem.ipc.info()
            base = torch.arange(1000, dtype=torch.float32, device="cuda")
            view = base[10:].view(10, 99)
            weight = torch.nn.Parameter(torch.full((4, 5), 2.0, device="cuda"))
            inbox.put((view, weight, torch.arange(3), torch.empty(0, device="cuda")))
            report.update(_get(results, child))
            _get(results, child)
            report.update(written=base[10].item(), exported=gpumem.ipc.info().exported - before.exported)
            inbox.put("close")
            report.update(_get(results, child))
            del base, view, weight
            gc.collect()
            after = gpumem.ipc.info()
            report.update(exported_after=after.exported - before.exported, held_after=after.held - before.held)
            report["exitcode"] = _finish(child)
        finally:
            _finish(child, 0)
        reports.append(report)
    return reports


# ---- Numba: DeviceNDArray.get_ipc_handle over gpumem.numba ---------------------------------------


@_reporting
def _numba_importer(inbox, results):
    """Opens the array Numba's way (with handle as array), reads it, writes its first element."""
    from numba import cuda

    import gpumem

    handle = inbox.get(timeout=TIMEOUT)
    with handle as array:
        got = array.copy_to_host()
        report = {"sum": float(got.sum()), "shape": list(got.shape), "dtype": got.dtype.str,
                  "imports": gpumem.ipc.info().imports}
        array[0:1].copy_to_device(got[:1] * 0 - 1)
        cuda.synchronize()
    report["imports_after"] = gpumem.ipc.info().imports
    results.put(report)


def _numba_share():
    """In a process of its own (Numba's memory manager is gpumem's): a view of an array to a child."""
    import gpumem.numba

    gpumem.numba.use_gpumem_for_numba()
    import numpy
    from numba import cuda

    results, inbox = multiprocessing.get_context("spawn").Queue(), multiprocessing.get_context("spawn").Queue()
    child = _start(_numba_importer, inbox, results)
    try:
        array = cuda.to_device(numpy.arange(1000, dtype=numpy.float32))
        cuda.synchronize()
        inbox.put(array[10:].get_ipc_handle())
        report = _get(results, child)
        report["written"] = float(array.copy_to_host()[10])  # the child's write, seen here
        report["exitcode"] = _finish(child)
    finally:
        _finish(child, 0)
    return report


# ---- CuPy: export_array / open_array -------------------------------------------------------------


@_reporting
def _cupy_importer(data, passed, meta, results):
    """Opens the array, sums it, writes its first element and lets it go."""
    import cupy

    import gpumem.cupy

    array = _open_passed(gpumem.cupy.open_array, data, passed, meta)
    report = {"sum": float(array.sum()), "shape": list(array.shape), "strides": list(array.strides),
              "dtype": array.dtype.str}
    array[0] = -1.0
    cupy.cuda.Device().synchronize()
    del array
    gc.collect()
    results.put(dict(report, imports_after=gpumem.ipc.info().imports))


# ---- The tests -----------------------------------------------------------------------------------


class HandleTest(unittest.TestCase):
    """What needs no device."""

    def test_a_handle_is_its_bytes_and_count(self):
        sizes = ipc.HANDLE_SIZE, ctypes.sizeof(_types.IpcHandle), ctypes.sizeof(_types.IpcInfo)
        self.assertEqual(sizes, (192, 192, 64))
        data = bytes(range(192))
        handle = ipc.Handle.from_bytes(data, 3)
        self.assertEqual((handle.data, handle.fd_count, bytes(handle)), (data, 3, data))
        again = pickle.loads(pickle.dumps(handle))
        self.assertIsInstance(again, gpumem.IpcHandle)
        self.assertEqual((again, hash(again)), (handle, hash(handle)))
        self.assertNotEqual(ipc.Handle(data, 2), handle)
        for bad, count in ((data[:-1], 3), (data, -1)):
            with self.assertRaises(ValueError):
                ipc.Handle(bad, count)

    def test_a_forged_handle_is_refused(self):
        a, b = socket.socketpair()
        with a, b:
            for what, call in [
                ("open bytes", lambda: ipc.open(bytes(192), [])),
                ("open a Handle", lambda: ipc.open(ipc.Handle(os.urandom(192), 0), [])),
                ("send", lambda: ipc.send(a, bytes(192))),
            ]:
                with self.subTest(what), self.assertRaises(gpumem.InvalidArgument) as caught:
                    call()
                self.assertIn("not a gpumem IPC handle", caught.exception.detail)

    def test_receive_refuses_what_is_not_a_handle(self):
        a, b = socket.socketpair()
        with a, b:
            a.sendall(b"\x01" * ipc.HANDLE_SIZE)
            with self.assertRaises(gpumem.InvalidArgument) as caught:
                ipc.receive(b.fileno())
            self.assertIn("not a gpumem IPC handle", caught.exception.detail)
            a.close()
            with self.assertRaises(gpumem.IoError) as caught:
                ipc.receive(b)
            self.assertIn("the other end closed it", caught.exception.detail)

    def test_closing_what_is_not_open_is_not_owned(self):
        with self.assertRaises(gpumem.NotOwned) as caught:
            gpumem.library().gpumem_ipc_close(0x10000)
        self.assertIn("is not open here", caught.exception.detail)
        imported = ipc.Imported(0x10000, 4096)  # never opened: the library refuses its close
        with self.assertRaises(gpumem.NotOwned):
            imported.close()
        self.assertTrue(imported.closed)
        with self.assertRaises(gpumem.NotOwned) as caught:
            imported.close()
        self.assertIn("closed already", caught.exception.detail)
        with self.assertRaises(ValueError):
            imported.__cuda_array_interface__
        with self.assertRaises(ValueError):
            int(imported)

    def test_host_memory_is_not_shared(self):
        with gpumem.Allocator.host() as host:
            with host.alloc(4096) as buffer:
                with self.assertRaises(gpumem.NotSupported):
                    ipc.export(buffer)
            with self.assertRaises(ValueError):
                ipc.export(buffer)  # freed

    def test_info_and_collect(self):
        info = ipc.info()
        self.assertIsInstance(info, gpumem.IpcInfo)
        self.assertLessEqual(info.held, info.exported)
        self.assertGreaterEqual(ipc.collect(), 0)


class _ShareChecks:
    def check_share(self, report, check):
        opened, closed = report["opened"], report["closed"]
        self.assertEqual(report["exitcode"], 0)
        self.assertEqual(opened["sizes"], [SIZE, SIZE])
        self.assertGreaterEqual(opened["imports"], 2)
        self.assertEqual(opened["cai"], [[SIZE], "|u1", True, 3, None])
        self.assertGreaterEqual(report["fd_counts"][1], 2)  # over VM: the ledger's, then one per unit
        if check:
            self.assertEqual(opened["read"], [True, True])
            self.assertEqual(report["written"], [True, True])
        self.assertEqual(report["held"], 2)  # freed here while open there: kept
        self.assertGreaterEqual(report["held_bytes"], 2 * SIZE)
        self.assertEqual(report["collected_while_open"], 0)
        self.assertEqual(closed["closed"], [True, True])
        self.assertIn("closed already", closed["again"])
        self.assertEqual((closed["imports"], closed["open_segments"]), (0, 0))
        self.assertEqual(report["collected"], report["held_bytes"])
        self.assertEqual((report["exported_after"], report["held_after"]), (0, 0))
        self.assertIn("memory is gone", report["spent"])


@unittest.skipUnless(GPUS > 0, NO_GPU)
class ShareTest(unittest.TestCase, _ShareChecks):
    def test_two_processes_read_and_write_each_others_bytes(self):
        self.check_share(_share(True), check=True)


@unittest.skipIf(_fake_driver() is None, "the fake CUDA driver of the C tests is not built beside the library")
class FakeDriverShareTest(unittest.TestCase, _ShareChecks):
    def test_two_processes_share_over_the_fake_driver(self):
        report = _call_in_subprocess("_share_over_the_fake_driver", GPUMEM_CUDA_DRIVER=str(_fake_driver()))
        self.check_share(report, check=False)


def _skip_without(module, devices):
    """A reason to skip the tests of a package (devices(module) counts what it sees), or None."""
    try:
        found = devices(__import__(module))
    except Exception as error:  # ImportError, or a package that cannot load its CUDA libraries
        return f"{module} cannot run here: {error!r}"
    return None if found else f"{module} sees no CUDA device"


@unittest.skipUnless(GPUS > 0, NO_GPU)
class TorchShareTest(unittest.TestCase):
    def test_torch_multiprocessing_shares_gpumem_tensors(self):
        skip = _skip_without("torch", lambda torch: torch.cuda.is_available())
        if skip:
            self.skipTest(skip)
        for report, installs in zip(_call_in_subprocess("_torch_share"), (False, True)):
            with self.subTest(receiver_installs=installs):
                self.assertEqual(report["installed"], installs)
                self.assertEqual(report["view"], [sum(range(10, 1000)), [10, 99], [99, 1], 10, "torch.float32", "cuda"])
                self.assertEqual(report["weight"], [True, True, 40.0])  # still a Parameter
                self.assertEqual(report["cpu"], [0, 1, 2])  # through PyTorch's own reducer
                self.assertEqual(report["empty"], [[0], "cuda"])
                self.assertEqual((report["imports"], report["exported"]), (2, 2))
                self.assertEqual(report["written"], -1.0)  # the receiver's write, seen here
                self.assertEqual(report["imports_after"], 0)
                self.assertEqual((report["exported_after"], report["held_after"]), (0, 0))
                self.assertEqual(report["exitcode"], 0)


@unittest.skipUnless(GPUS > 0, NO_GPU)
class NumbaShareTest(unittest.TestCase):
    def test_numba_ipc_handle_opens_in_another_process(self):
        skip = _skip_without("numba", lambda numba: __import__("numba.cuda").cuda.is_available())
        if skip:
            self.skipTest(skip)
        report = _call_in_subprocess("_numba_share")
        self.assertEqual(report["sum"], float(sum(range(10, 1000))))
        self.assertEqual((report["shape"], report["dtype"]), ([990], "<f4"))
        self.assertEqual(report["imports"], 1)
        self.assertEqual(report["imports_after"], 0)
        self.assertEqual(report["written"], -1.0)
        self.assertEqual(report["exitcode"], 0)


@unittest.skipUnless(GPUS > 0, NO_GPU)
class CupyShareTest(unittest.TestCase):
    def test_an_array_opened_in_another_process(self):
        skip = _skip_without("cupy", lambda cupy: cupy.cuda.runtime.getDeviceCount())
        if skip:
            self.skipTest(skip)
        import cupy

        import gpumem.cupy

        with gpumem.cupy.allocator(pinned=False):
            whole = cupy.arange(10000, dtype=cupy.float64)
        view = whole[5::3]
        expected = float(view.sum())
        handle, meta = gpumem.cupy.export_array(view)
        self.assertEqual(meta["offset"], 5 * 8)
        results = multiprocessing.get_context("spawn").Queue()
        child = _start(_cupy_importer, handle.data, _pass_fds(handle), meta, results)
        try:
            report = _get(results, child)
        finally:
            exitcode = _finish(child)
        self.assertEqual(exitcode, 0)
        self.assertEqual(report, {"sum": expected, "shape": list(view.shape), "strides": list(view.strides),
                                  "dtype": "<f8", "imports_after": 0})
        self.assertEqual(float(whole[5]), -1.0)  # the other process's write, seen here


if __name__ == "__main__":
    unittest.main()
