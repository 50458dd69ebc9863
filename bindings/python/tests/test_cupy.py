"""gpumem as CuPy's allocator (gpumem.cupy); skipped without CuPy or without a CUDA device.

The workload runs twice from the same seeded inputs, once on CuPy's own allocator and once on
gpumem's, and the results must match bit for bit: every operation used is deterministic for a
given input, so a difference means memory was handed out while still in use, or not ordered
between streams.
"""
import ctypes
import gc
import unittest
import weakref

import gpumem
import gpumem.cupy

from .support import gpu_count

try:
    import cupy
    import cupyx
    import numpy

    _DEVICES = cupy.cuda.runtime.getDeviceCount()
    _SKIP = None if _DEVICES > 0 else "CuPy sees no CUDA device"
except Exception as error:  # ImportError, or CuPy's CUDARuntimeError without a driver
    _DEVICES, _SKIP = 0, f"CuPy cannot run here: {error!r}"
if _SKIP is None and gpu_count() == 0:
    _SKIP = "gpumem sees no CUDA device"

MiB = 1 << 20
BIG = 1 << 24  # float32 elements: 64 MiB
SIZES = [0, 1, 2, 3, 100, 511, 512, 513, 4097, 1 << 16, MiB + 7, BIG]
STREAM_ROWS = [4096, 1000, 4096, 17, 4096, 2048, 1, 4096, 333]  # rows of 4096 float32: up to 64 MiB


def _inputs(seed):
    rng = numpy.random.default_rng(seed)

    def f32(*shape):
        return rng.standard_normal(shape, dtype=numpy.float32)

    def f64(*shape):
        return rng.standard_normal(shape)

    return {
        "x": f32(BIG),
        "y": f32(BIG),
        "z": f32(BIG),
        "m32": f32(517, 1031),
        "m64": f64(517, 1031),
        "fft_c": f64(1000) + 1j * f64(1000),
        "fft_r": f32(4096),
        "rfft2": f64(256, 384),
        "a32": f32(256, 384),
        "b32": f32(384, 200),
        "a64": f64(300, 500),
        "b64": f64(500, 257),
        "batch_a": f64(8, 64, 96),
        "batch_b": f64(8, 96, 32),
        "rows": f32(4096, 4096),
    }


def _elementwise(inputs, out):
    for n in SIZES:
        x, y, z = (cupy.asarray(inputs[k][:n]) for k in "xyz")
        out[f"axpy/{n}"] = cupy.asnumpy(x * y + z)
        out[f"exp/{n}"] = cupy.asnumpy(cupy.exp(x))
        out[f"where/{n}"] = cupy.asnumpy(cupy.where(x > y, x, z))
        out[f"sum/{n}"] = cupy.asnumpy(x.sum())
        if n:  # max and argmax of nothing are errors, in CuPy as in NumPy
            out[f"max/{n}"] = cupy.asnumpy(y.max())
            out[f"argmax/{n}"] = cupy.asnumpy(z.argmax())
        if n <= MiB + 7:
            x64 = x.astype(cupy.float64)
            out[f"axpy64/{n}"] = cupy.asnumpy(x64 * y + z)
        del x, y, z


def _reductions(inputs, out):
    for name in ("m32", "m64"):
        m = cupy.asarray(inputs[name])
        out[f"{name}/sum"] = cupy.asnumpy(m.sum())
        out[f"{name}/sum0"] = cupy.asnumpy(m.sum(axis=0))
        out[f"{name}/sum1"] = cupy.asnumpy(m.sum(axis=1))
        out[f"{name}/max0"] = cupy.asnumpy(m.max(axis=0))
        out[f"{name}/max1"] = cupy.asnumpy(m.max(axis=1))
        out[f"{name}/argmax0"] = cupy.asnumpy(m.argmax(axis=0))
        out[f"{name}/argmax1"] = cupy.asnumpy(m.argmax(axis=1))
        out[f"{name}/argmax"] = cupy.asnumpy(m.argmax())


def _fft(inputs, out):
    out["fft/c128"] = cupy.asnumpy(cupy.fft.fft(cupy.asarray(inputs["fft_c"])))
    out["fft/f32"] = cupy.asnumpy(cupy.fft.fft(cupy.asarray(inputs["fft_r"])))
    out["rfft2/f64"] = cupy.asnumpy(cupy.fft.rfft2(cupy.asarray(inputs["rfft2"])))


def _matmul(inputs, out):
    # cuBLAS promises the same bits on every run for the same arguments on the same GPU only while
    # atomics stay off (cublasSetAtomicsMode's default, which CuPy keeps) and one stream is active:
    # with concurrent streams it may pick another kernel, which sums in another order. So the
    # products run alone on the default stream, after all other work has finished, in both runs;
    # float32 and float64 alike.
    cupy.cuda.Device().synchronize()
    a32, b32 = cupy.asarray(inputs["a32"]), cupy.asarray(inputs["b32"])
    out["matmul/f32"] = cupy.asnumpy(a32 @ b32)
    a64, b64 = cupy.asarray(inputs["a64"]), cupy.asarray(inputs["b64"])
    out["matmul/f64"] = cupy.asnumpy(cupy.matmul(a64, b64))
    batch = cupy.matmul(cupy.asarray(inputs["batch_a"]), cupy.asarray(inputs["batch_b"]))
    out["matmul/batch_f64"] = cupy.asnumpy(batch)


def _streams(inputs, out):
    # Each iteration makes temporaries on one stream and drops them while that stream's kernels may
    # still read them; the next iteration, on another stream, allocates the same sizes at once. A
    # pool that handed the memory over without ordering the streams would corrupt the sums.
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(3)]
    rows = inputs["rows"]
    acc = []
    for s in streams:
        with s:
            acc.append(cupy.zeros(rows.shape[1], dtype=cupy.float64))
    for i, n in enumerate(STREAM_ROWS):
        with streams[i % 3]:
            t = cupy.asarray(rows[:n])
            u = cupy.sin(t) * cupy.exp(t * 0.5) + t
            acc[i % 3] += u.astype(cupy.float64).sum(axis=0)
            del t, u
    done = [s.record() for s in streams[:2]]
    for event in done:
        streams[2].wait_event(event)
    with streams[2]:
        total = acc[0] + acc[1] * 2 + acc[2] * 3
    for s in streams:
        s.synchronize()
    out.update({f"streams/acc{i}": cupy.asnumpy(a) for i, a in enumerate(acc)})
    out["streams/total"] = cupy.asnumpy(total)
    del acc, total  # freed on their streams, which outlive them


def _empty(out):
    a = cupy.empty(0, dtype=cupy.float32)
    b = cupy.zeros((0, 7))
    c = cupy.asarray(numpy.empty((3, 0)))
    out["empty/a"] = cupy.asnumpy(a * 2 + 1)
    out["empty/b"] = cupy.asnumpy(b.sum(axis=0))
    out["empty/c"] = cupy.asnumpy(cupy.concatenate([c, cupy.ones((3, 2))], axis=1))


def _workload(inputs):
    out = {}
    _elementwise(inputs, out)
    _reductions(inputs, out)
    _fft(inputs, out)
    _streams(inputs, out)
    _empty(out)
    _matmul(inputs, out)
    return out


def _settle():
    """Lets go of everything the workload left: finished work, garbage, and CuPy's FFT plans, whose
    work areas come from the allocator."""
    cupy.cuda.Device().synchronize()
    cache = getattr(getattr(cupy.fft, "config", None), "get_plan_cache", None)
    if cache is not None:
        cache().clear()
    gc.collect()


def _differences(got, expected):
    """Why two host arrays are not the same bits (dtype, shape, or which elements), or None."""
    got, expected = numpy.ascontiguousarray(got), numpy.ascontiguousarray(expected)
    if (got.dtype, got.shape) != (expected.dtype, expected.shape):
        return f"{got.dtype}{got.shape} where {expected.dtype}{expected.shape} was expected"
    g, e = got.reshape(-1).view(numpy.uint8), expected.reshape(-1).view(numpy.uint8)
    if numpy.array_equal(g, e):
        return None
    differ = numpy.flatnonzero((g.reshape(got.size, -1) != e.reshape(got.size, -1)).any(axis=1))
    first = differ[0]
    return (
        f"{differ.size} of {got.size} elements differ; the first, at {first}, is "
        f"{got.reshape(-1)[first]!r} where {expected.reshape(-1)[first]!r} was expected"
    )


class CupyArgumentsTest(unittest.TestCase):
    """What needs neither CuPy nor a device: arguments, and the targets CuPy frees through."""

    def test_pinned_is_a_bool_or_an_allocator(self):
        with self.assertRaises(TypeError):
            gpumem.cupy.CupyAllocator(pinned=None)

    def test_targets_are_invalid_from_a_close_on_and_valid_again_when_it_is_refused(self):
        host = gpumem.Allocator.host()
        key = (host.handle, 0x10)
        target = gpumem.cupy._types.CupyTarget.from_address(gpumem.cupy._target(host, 0x10))
        size = target.struct_size
        b = host.alloc(64)
        with self.assertRaises(gpumem.Busy):
            host.close()
        self.assertEqual(target.struct_size, size)
        self.assertEqual(gpumem.cupy._targets[key], ctypes.addressof(target))
        b.free()
        host.close()
        self.assertEqual(target.struct_size, 0)  # gpumem_cupy_alloc and gpumem_cupy_free refuse it
        self.assertNotIn(key, gpumem.cupy._targets)


@unittest.skipIf(_SKIP is not None, _SKIP or "")
class CupyTest(unittest.TestCase):
    def setUp(self):
        self.assertIsNone(gpumem.cupy.installed())
        self.device = cupy.cuda.runtime.getDevice()

    def tearDown(self):
        while gpumem.cupy.uninstall() is not None:
            pass

    def test_stream_handles_are_gpumem_streams(self):
        self.assertEqual(cupy.cuda.Stream.null.ptr, 0)  # NULL: the legacy stream
        ptds = getattr(cupy.cuda.Stream, "ptds", None)
        if ptds is not None:
            self.assertEqual(ptds.ptr, 2)  # GPUMEM_STREAM_PER_THREAD
        s = cupy.cuda.Stream(non_blocking=True)
        with gpumem.cupy.allocator(pinned=False):
            on_null = cupy.arange(100)
            with s:
                on_s = cupy.arange(100)
            self.assertEqual(gpumem.cupy.buffer_of(on_null).stream, 0)
            self.assertEqual(gpumem.cupy.buffer_of(on_s).stream, s.ptr)
            self.assertEqual(gpumem.cupy.buffer_of(on_s[10:]).stream, s.ptr)  # a view: the same memory
            if ptds is not None:
                with ptds:
                    on_ptds = cupy.arange(100)
                self.assertEqual(gpumem.cupy.buffer_of(on_ptds).stream, 2)
                ptds.synchronize()
                del on_ptds
            s.synchronize()
            del on_null, on_s

    def test_memory_outliving_its_stream(self):
        # CuPy destroys a stream when its Stream object goes; arrays made on it live on, and are
        # freed later into the arena of a stream that no longer exists.
        n = MiB
        with gpumem.cupy.allocator(pinned=False) as allocator:
            s = cupy.cuda.Stream(non_blocking=True)
            with s:
                kept = cupy.full(n, 3.0, dtype=cupy.float32)
            s.synchronize()
            del s
            gc.collect()
            self.assertEqual(float(kept.sum()), 3.0 * n)
            del kept
            fresh = [cupy.zeros(n, dtype=cupy.float32) for _ in range(4)]
            other = cupy.cuda.Stream(non_blocking=True)
            with other:
                more = [cupy.ones(n, dtype=cupy.float32) for _ in range(4)]
            other.synchronize()
            self.assertEqual([float(f.sum()) for f in fresh], [0.0] * 4)
            self.assertEqual([float(m.sum()) for m in more], [float(n)] * 4)
            del fresh, more
            allocator.pool().release()

    def test_workload_matches_cupy_allocator(self):
        inputs = _inputs(20240611)
        expected = _workload(inputs)
        _settle()
        cupy.get_default_memory_pool().free_all_blocks()

        pool = gpumem.cupy.default_pool(self.device)
        used_before = pool.info().used_bytes
        allocs_before = pool.stats().alloc_count
        with gpumem.cupy.allocator(pinned=False) as allocator:
            self.assertEqual(cupy.cuda.get_allocator(), allocator.malloc)
            self.assertEqual(allocator.pool().handle, pool.handle)
            self.assertIs(gpumem.cupy.pool(), allocator.pool())
            default_before = cupy.get_default_memory_pool().used_bytes()
            got = _workload(inputs)
            self.assertEqual(cupy.get_default_memory_pool().used_bytes(), default_before)
            _settle()
        stats = pool.stats()

        self.assertEqual(sorted(got), sorted(expected))
        for name in expected:
            with self.subTest(result=name):
                self.assertIsNone(_differences(got[name], expected[name]))
        self.assertGreater(stats.alloc_count - allocs_before, len(SIZES))
        pool.release()
        info = pool.info()
        self.assertEqual(info.used_bytes, used_before, [b for b in pool.snapshot() if b["state"] == 1])
        self.assertEqual(info.pending_bytes, 0)

    def test_empty_arrays_take_no_memory(self):
        with gpumem.cupy.allocator(pinned=False) as allocator:
            pool = allocator.pool()
            before = pool.stats().alloc_count
            arrays = [cupy.empty(0), cupy.zeros((0, 7)), cupy.asarray(numpy.empty((3, 0))), cupy.ones((5, 0, 2))]
            self.assertEqual(pool.stats().alloc_count, before)
            for a in arrays:
                self.assertEqual(a.data.ptr, 0)
                self.assertEqual(a.size, 0)
                self.assertIsNone(gpumem.cupy.buffer_of(a))
            self.assertEqual(cupy.asnumpy(arrays[1].sum(axis=0)).tolist(), [0.0] * 7)
            del arrays

    def test_uninstall_restores_cupy_allocators(self):
        before = cupy.cuda.get_allocator()
        allocator = gpumem.cupy.install()
        pool, pinned = allocator.pool(), allocator.pinned_pool()
        self.assertEqual(cupy.cuda.get_allocator(), allocator.malloc)
        kept = cupy.arange(1000)
        self.assertIsNotNone(gpumem.cupy.buffer_of(kept))
        self.assertIs(gpumem.cupy.uninstall(), allocator)
        self.assertIsNone(gpumem.cupy.installed())
        self.assertIs(cupy.cuda.get_allocator(), before)

        count, pinned_count = pool.stats().alloc_count, pinned.stats().alloc_count
        after = cupy.arange(1000)
        host = cupy.cuda.alloc_pinned_memory(4096)
        self.assertIsNone(gpumem.cupy.buffer_of(after))
        self.assertNotIsInstance(host.mem, gpumem.Buffer)
        self.assertEqual(pool.stats().alloc_count, count)
        self.assertEqual(pinned.stats().alloc_count, pinned_count)
        # What gpumem handed out stays valid, and goes back to its pool when CuPy drops it.
        self.assertEqual(int(cupy.asnumpy(kept).sum()), 999 * 1000 // 2)
        frees = pool.stats().free_count
        del kept
        self.assertEqual(pool.stats().free_count, frees + 1)
        with self.assertRaises(RuntimeError):
            gpumem.cupy.pool()
        self.assertIsNone(gpumem.cupy.uninstall())

    def test_installations_nest(self):
        before = cupy.cuda.get_allocator()
        with gpumem.cupy.allocator(pinned=False) as outer:
            with gpumem.cupy.allocator(pinned=False) as inner:
                self.assertIs(gpumem.cupy.installed(), inner)
                self.assertEqual(cupy.cuda.get_allocator(), inner.malloc)
                with self.assertRaises(RuntimeError):
                    gpumem.cupy.uninstall(outer)
            self.assertIs(gpumem.cupy.installed(), outer)
            self.assertEqual(cupy.cuda.get_allocator(), outer.malloc)
        self.assertIs(cupy.cuda.get_allocator(), before)

    def test_out_of_memory_reaches_cupy(self):
        with gpumem.cupy.allocator(pinned=False) as allocator:
            oom_before = allocator.pool().stats().oom_count
            with self.assertRaises(cupy.cuda.memory.OutOfMemoryError) as caught:
                cupy.empty(1 << 50, dtype=cupy.uint8)  # 1 PiB
            error = caught.exception
            self.assertIsInstance(error, MemoryError)
            self.assertIsInstance(error, gpumem.OutOfMemory)
            self.assertIsInstance(error, gpumem.cupy.OutOfMemoryError)
            self.assertEqual(error.status, gpumem.OutOfMemory.STATUS)
            self.assertTrue(error.detail)
            self.assertIn("1,125,899,906,842,624 bytes", str(error))
            self.assertIn("GPUMEM_ERROR_OUT_OF_MEMORY: " + error.detail, str(error))
            self.assertIsInstance(error.__cause__, gpumem.OutOfMemory)
            self.assertGreater(allocator.pool().stats().oom_count, oom_before)
            self.assertEqual(int(cupy.asnumpy(cupy.arange(10).sum())), 45)  # still working

    def test_own_pool_and_its_limit(self):
        with gpumem.Allocator.device(self.device) as upstream, gpumem.Pool(upstream, limit=8 * MiB) as mine:
            with gpumem.cupy.allocator(pools=mine, pinned=False) as allocator:
                self.assertIs(allocator.pool(), mine)
                self.assertIs(gpumem.cupy.pool(self.device), mine)
                a = cupy.ones(MiB // 4, dtype=cupy.float32)
                self.assertEqual(mine.stats().alloc_count, 1)
                self.assertIs(gpumem.cupy.buffer_of(a).allocator, mine)
                with self.assertRaises(cupy.cuda.memory.OutOfMemoryError) as caught:
                    cupy.empty(16 * MiB, dtype=cupy.uint8)
                self.assertIn("limit set to: 8,388,608 bytes", str(caught.exception))
                self.assertEqual(float(a.sum()), MiB // 4)
                del a
            mine.release()
        with self.assertRaises(ValueError):
            gpumem.cupy.CupyAllocator(pools={self.device + 1: gpumem.device_pool(self.device)})
        with self.assertRaises(TypeError):
            gpumem.cupy.CupyAllocator(pools=42)

    def test_pool_dropped_before_its_arrays(self):
        upstream = gpumem.Allocator.device(self.device)
        mine = gpumem.Pool(upstream)
        with gpumem.cupy.allocator(pools=mine, pinned=False):
            a = cupy.full(1000, 7, dtype=cupy.int32)
        memory = gpumem.cupy.buffer_of(a)
        self.assertIs(memory.allocator, mine)
        self.assertEqual((memory.ptr, memory.size, memory.stream), (a.data.ptr, 4000, 0))
        if hasattr(cupy.cuda.memory, "CFunctionAllocatorMemory"):
            # CuPy called gpumem_cupy_alloc itself: no Buffer in between.
            self.assertIsInstance(memory, gpumem.cupy.CupyMemory)
        handle, kept_before = mine.handle, len(gpumem.allocator._kept_for_good)
        collected = weakref.ref(mine)
        del mine, upstream, memory
        gc.collect()
        # The pool's object is gone, and its destruction refused while the array holds its memory:
        # the pool is kept, and the array's memory stays valid.
        self.assertIsNone(collected())
        self.assertEqual(len(gpumem.allocator._kept_for_good), kept_before + 1)
        kept = gpumem.Allocator.from_handle(handle)
        self.assertEqual(kept.stats().bytes_in_use, 4096)
        self.assertEqual(int(a.sum()), 7000)
        del a
        gc.collect()
        self.assertEqual(kept.stats().bytes_in_use, 0)  # freed through its target all the same

    def test_forced_close_while_cupy_holds_memory(self):
        # A forced close frees the array's memory; CuPy's later free must not reach whatever
        # allocator the handle names by then.
        with gpumem.Allocator.device(self.device) as upstream:
            first = gpumem.Pool(upstream)
            with gpumem.cupy.allocator(pools=first, pinned=False) as allocator:
                a = cupy.arange(1000)
                first.close(force=True)
                with self.assertRaises(ValueError):
                    cupy.arange(10)  # through a closed pool
            with gpumem.Pool(upstream) as second, gpumem.cupy.allocator(pools=second, pinned=False):
                b = cupy.arange(1000)
                del a  # its free is refused, and changes nothing
                gc.collect()
                self.assertEqual(second.stats().bytes_in_use, 8192)
                self.assertEqual(int(b.sum()), 999 * 1000 // 2)
                del b
            del allocator, first

    def test_buffer_path(self):
        # The path a CuPy without CFunctionAllocatorMemory takes, and that failures take: a Buffer
        # per array, through ctypes.
        gpumem.cupy._look_up(cupy)
        saved = gpumem.cupy._memory_type
        gpumem.cupy._memory_type = None
        try:
            with gpumem.cupy.allocator(pinned=False) as allocator:
                pool = allocator.pool()
                before = pool.stats().bytes_in_use
                a = cupy.full(1000, 3, dtype=cupy.int64)
                self.assertIsInstance(gpumem.cupy.buffer_of(a), gpumem.Buffer)
                self.assertEqual(pool.stats().bytes_in_use, before + 8192)
                self.assertEqual(int(a.sum()), 3000)
                del a
                gc.collect()
                self.assertEqual(pool.stats().bytes_in_use, before)
        finally:
            gpumem.cupy._memory_type = saved

    @unittest.skipUnless(_DEVICES > 1, "needs two CUDA devices")
    def test_each_device_has_its_pool(self):
        with gpumem.cupy.allocator(pinned=False) as allocator:
            with cupy.cuda.Device(1):
                on_1 = cupy.arange(1000)
                self.assertEqual(on_1.device.id, 1)
                self.assertEqual(gpumem.cupy.buffer_of(on_1).allocator.device_id, 1)
                self.assertEqual(allocator.pool().device_id, 1)
                self.assertEqual(int(on_1.sum()), 999 * 1000 // 2)
                del on_1
            with cupy.cuda.Device(0):
                self.assertEqual(allocator.pool().device_id, 0)

    def test_record_stream(self):
        s1, s2 = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
        with gpumem.cupy.allocator(pinned=False):
            with s1:
                a = cupy.arange(1 << 20, dtype=cupy.float32)
            s2.wait_event(s1.record())
            with s2:
                b = a * 2
            gpumem.cupy.record_stream(a, s2)
            gpumem.cupy.record_stream(a.data, s2.ptr)
            del a  # freed on s1; not handed out again before s2's work so far
            with self.assertRaises(gpumem.InvalidArgument):
                gpumem.cupy.record_stream(b, 2)  # the per-thread default stream
            with self.assertRaises(ValueError):
                gpumem.cupy.record_stream(cupy.asarray(numpy.empty(0)), s2)
            s2.synchronize()
            self.assertEqual(float(b[-1]), 2.0 * ((1 << 20) - 1))
            del b
            s1.synchronize()

    def test_pinned_memory(self):
        rng = numpy.random.default_rng(7)
        with gpumem.cupy.allocator() as allocator:
            pinned = allocator.pinned_pool()
            self.assertIs(gpumem.cupy.pinned_pool(), pinned)
            before = pinned.stats().alloc_count
            src = cupyx.empty_pinned((MiB,), dtype=numpy.float32)
            dst = cupyx.empty_pinned((MiB,), dtype=numpy.float32)
            self.assertEqual(pinned.stats().alloc_count, before + 2)
            self.assertGreaterEqual(pinned.info().used_bytes, 2 * 4 * MiB)
            self.assertTrue(gpumem.pointer_info(src.ctypes.data).is_pinned)
            src[...] = rng.standard_normal(MiB, dtype=numpy.float32)
            dst[...] = 0
            s = cupy.cuda.Stream(non_blocking=True)
            with s:
                d = cupy.empty(src.shape, dtype=src.dtype)
                d.set(src, stream=s)  # asynchronous: from pinned memory
                (d * 1).get(stream=s, out=dst)  # asynchronous: into pinned memory
            s.synchronize()
            self.assertIsNone(_differences(dst, src))

            raw = cupy.cuda.alloc_pinned_memory(4096)
            self.assertIsInstance(raw.mem, gpumem.Buffer)
            self.assertIs(raw.mem.allocator, pinned)
            self.assertEqual(raw.size(), 4096)
            none = cupyx.empty_pinned((0,), dtype=numpy.float32)
            self.assertEqual(none.size, 0)
            self.assertEqual(pinned.stats().alloc_count, before + 3)
            del src, dst, d, raw, none
            gc.collect()
            self.assertEqual(pinned.info().used_bytes, 0)
            pinned.release()
            self.assertEqual(pinned.info().total_bytes, 0)


if __name__ == "__main__":
    unittest.main()
