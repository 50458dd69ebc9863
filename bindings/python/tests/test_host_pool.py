"""A pool over plain host memory, which needs no GPU: buffers, statistics, hooks, lifetimes."""
import contextlib
import ctypes
import gc
import io
import json
import os
import pathlib
import tempfile
import textwrap
import unittest
import weakref
from unittest import mock

import gpumem
from gpumem import BlockState, HookEvent

from .support import run_python


class HostPoolTest(unittest.TestCase):
    def setUp(self):
        self.host = gpumem.Allocator.host()
        self.pool = gpumem.Pool(self.host)
        # Reverse order: the pool goes before its upstream.
        self.addCleanup(self.host.close)
        self.addCleanup(self.pool.close)

    def test_round_trip(self):
        data = bytes(range(256)) * 4
        with self.pool.alloc(1000) as b:
            self.assertEqual((b.size, b.stream, b.allocator), (1000, 0, self.pool))
            ctypes.memmove(b.ptr, data, 1000)
            self.assertEqual(ctypes.string_at(b.ptr, 1000), data[:1000])
            self.assertEqual(
                self.pool.stats(),
                gpumem.AllocatorStats(
                    bytes_in_use=1024,
                    peak_bytes_in_use=1024,
                    bytes_requested=1000,
                    bytes_reserved=1024,
                    peak_bytes_reserved=1024,
                    alloc_count=1,
                    free_count=0,
                    upstream_alloc_count=1,
                    upstream_free_count=0,
                    retry_count=0,
                    oom_count=0,
                ),
            )
            self.assertEqual(
                self.pool.info(),
                gpumem.PoolInfo(
                    used_bytes=1024,
                    free_bytes=0,
                    total_bytes=1024,
                    free_block_count=0,
                    limit=0,
                    arena_count=1,
                    pending_bytes=0,
                    address_bytes=1024,
                ),
            )
            self.assertEqual(self.host.stats().bytes_in_use, 1024)
        self.assertTrue(b.freed)
        info = self.pool.info()
        self.assertEqual(
            (info.used_bytes, info.free_bytes, info.total_bytes, info.free_block_count), (0, 1024, 1024, 1)
        )

        self.pool.release(all_streams=True)
        info = self.pool.info()
        self.assertEqual((info.total_bytes, info.free_bytes, info.address_bytes), (0, 0, 0))
        stats = self.pool.stats()
        self.assertEqual((stats.free_count, stats.upstream_free_count, stats.bytes_reserved), (1, 1, 0))
        self.assertEqual(self.host.stats().bytes_in_use, 0)

    def test_cached_memory_is_reused(self):
        first = self.pool.alloc(4096)
        ptr = first.ptr
        first.free()
        second = self.pool.alloc(4000)
        self.assertEqual(second.ptr, ptr)
        self.assertEqual(self.pool.stats().upstream_alloc_count, 1)
        second.free()

    def test_reset_peaks_and_limit(self):
        self.pool.alloc(2048).free()
        self.assertEqual(self.pool.stats().peak_bytes_in_use, 2048)
        self.pool.reset_peaks()
        self.assertEqual(self.pool.stats().peak_bytes_in_use, 0)
        self.pool.release()
        self.pool.set_limit(4096)
        self.assertEqual(self.pool.info().limit, 4096)
        with self.assertRaises(gpumem.OutOfMemory) as caught:
            self.pool.alloc(8192)
        self.assertIn("8192", caught.exception.detail.replace(",", ""))
        self.assertEqual(self.pool.stats().oom_count, 1)
        gpumem.Pool(self.host, limit=1 << 20).close()

    def test_snapshot(self):
        a, b = self.pool.alloc(512), self.pool.alloc(100)
        blocks = self.pool.snapshot()
        self.assertEqual(len(blocks), 2)
        by_address = {block["address"]: block for block in blocks}
        self.assertEqual(by_address[a.ptr]["size"], 512)
        self.assertEqual(by_address[b.ptr]["requested"], 100)
        for block in blocks:
            self.assertEqual(block["state"], BlockState.IN_USE)
            self.assertEqual(block["stream"], 0)
            self.assertEqual(block["segment"], block["address"])
            self.assertEqual(block["segment_size"], block["size"])
        a.free()
        states = {block["address"]: block["state"] for block in self.pool.snapshot()}
        self.assertEqual(states[a.ptr], BlockState.FREE)
        b.free()

    def test_collected_buffers_are_freed(self):
        self.pool.alloc(64)  # dropped at once
        gc.collect()
        self.assertEqual(self.pool.stats().free_count, 1)
        self.assertEqual(self.pool.info().used_bytes, 0)

    def test_a_buffer_keeps_its_allocator_alive(self):
        host = gpumem.Allocator.host()
        alive, finalizer = weakref.ref(host), host._finalizer
        b = host.alloc(64)
        del host
        gc.collect()
        self.assertIsNotNone(alive())
        self.assertTrue(finalizer.alive)
        del b
        gc.collect()
        self.assertIsNone(alive())
        self.assertFalse(finalizer.alive)

    def test_a_collected_allocator_is_destroyed(self):
        host = gpumem.Allocator.host()
        finalizer = host._finalizer
        del host
        gc.collect()
        self.assertFalse(finalizer.alive)

    def test_freeing_twice_does_nothing_the_second_time(self):
        b = self.pool.alloc(64)
        self.pool.free(b)
        b.free()
        self.assertEqual(self.pool.stats().free_count, 1)

    def test_free_by_address(self):
        b = self.host.alloc(64)
        b._finalizer.detach()  # freed below by address, as memory from elsewhere would be
        self.host.free(b.ptr)
        self.assertEqual(self.host.stats().free_count, 1)

    def test_free_by_the_address_of_a_live_buffer_frees_that_buffer(self):
        b = self.pool.alloc(64)
        self.pool.free(b.ptr)
        self.assertTrue(b.freed)
        c = self.pool.alloc(64)
        self.assertEqual(c.ptr, b.ptr)  # the cached block again
        del b
        gc.collect()  # b's finalizer must not free c's memory
        self.assertFalse(c.freed)
        self.assertEqual(self.pool.info().used_bytes, 512)
        with self.pool.alloc(64) as d:
            self.assertNotEqual(d.ptr, c.ptr)
        c.free()
        self.assertEqual(self.pool.stats().free_count, 3)

    def test_a_buffer_freed_by_two_callers_at_once_is_freed_once(self):
        b = self.pool.alloc(64)
        real = gpumem.library()
        calls = []

        class Library:
            def __getattr__(self, name):
                return getattr(real, name)

            def gpumem_free(self, *args):
                calls.append(args)
                if len(calls) == 1:
                    b.free()  # another thread's, between the first one's check and its free
                real.gpumem_free(*args)

        with mock.patch.object(gpumem.allocator, "library", Library):
            b.free()
        self.assertEqual(len(calls), 1)
        self.assertTrue(b.freed)
        self.assertEqual(self.pool.stats().free_count, 1)

    def test_int_of_a_freed_buffer_is_refused(self):
        b = self.pool.alloc(64)
        self.assertEqual(int(b), b.ptr)
        b.free()
        with self.assertRaises(ValueError):
            int(b)

    def test_device_of_host_memory(self):
        self.assertEqual(self.pool.device_id, -1)
        self.assertEqual(self.host.device_id, -1)

    def test_snapshot_json(self):
        a, b = self.pool.alloc(2048), self.pool.alloc(100)
        b.free()
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "snapshot.json")
            self.pool.snapshot_json(path)
            with open(path) as f:
                snapshot = json.load(f)
        self.assertEqual((snapshot["format"], snapshot["version"], snapshot["device"]), ("gpumem-pool-snapshot", 1, -1))
        self.assertEqual(
            (snapshot["used_bytes"], snapshot["free_bytes"], snapshot["total_bytes"], snapshot["limit"]),
            (2048, 512, 2560, 0),
        )
        blocks = {block["address"]: block for segment in snapshot["segments"] for block in segment["blocks"]}
        self.assertEqual(
            (blocks[a.ptr]["size"], blocks[a.ptr]["requested"], blocks[a.ptr]["state"], blocks[a.ptr]["stream"]),
            (2048, 2048, "in_use", 0),
        )
        self.assertEqual((blocks[b.ptr]["size"], blocks[b.ptr]["state"]), (512, "free"))
        a.free()

    def test_snapshot_json_to_a_path_that_cannot_be_written(self):
        with self.assertRaises(gpumem.IoError) as caught:
            self.pool.snapshot_json(pathlib.Path("/nonexistent/folder/snapshot.json"))
        self.assertIn("cannot create the snapshot file /nonexistent/folder/snapshot.json", caught.exception.detail)

    def test_a_limit_fraction_needs_a_device(self):
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            self.pool.set_limit_fraction(0.5)
        self.assertIn("this pool holds host memory", caught.exception.detail)

    def test_stream_reuse_and_record_stream(self):
        for reuse in gpumem.StreamReuse:
            self.pool.set_stream_reuse(reuse)
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            self.pool.set_stream_reuse(7)
        self.assertIn("stream reuse 7 is not one of", caught.exception.detail)
        with self.pool.alloc(64, stream=0x10) as b:
            self.pool.record_stream(b, 0x20)  # host memory: only the pointer is checked
            with self.assertRaises(gpumem.InvalidArgument):
                self.pool.record_stream(b, gpumem.STREAM_PER_THREAD)
        with self.assertRaises(gpumem.NotOwned):
            self.pool.record_stream(b.ptr, 0x20)

    def test_close_by_force_frees_live_buffers(self):
        pool = gpumem.Pool(self.host)
        buffers = [pool.alloc(n) for n in (100, 5000)]
        with self.assertRaises(gpumem.Busy):
            self.host.close(force=True)  # a pool relies on it: even force is refused
        pool.close(force=True)
        self.assertTrue(pool.closed)
        self.assertTrue(all(b.freed for b in buffers))
        self.assertEqual(self.host.stats().bytes_in_use, 0)
        with self.assertRaises(ValueError):
            gpumem.copy(buffers[0], b"x")
        buffers[0].free()
        del buffers
        gc.collect()

    def test_buffers_of_a_closed_allocator_do_not_free_through_it(self):
        a = gpumem.Allocator.host()
        b = a.alloc(64)
        gpumem.Allocator.from_handle(a.handle).free(b.ptr)  # through another object: the Buffer does not know
        a.close()
        self.assertTrue(b.freed)
        b.free()  # nothing: the handle may be another allocator's by now
        self.assertFalse(b._finalizer.alive)

    def test_a_borrowed_pool(self):
        borrowed = gpumem.Pool.from_handle(self.pool.handle)
        self.assertIsInstance(borrowed, gpumem.Pool)
        self.assertIsNone(borrowed.upstream)
        with self.pool.alloc(100):
            self.assertEqual(borrowed.info().used_bytes, 512)
        borrowed.close()  # borrowed: nothing happens
        self.assertFalse(borrowed.closed)

    def test_a_closed_allocator_has_no_handle(self):
        a = gpumem.Allocator.host()
        a.close()
        with self.assertRaises(ValueError):
            a.handle
        with self.assertRaises(ValueError):
            gpumem.Pool(a)
        with self.assertRaises(ValueError):
            gpumem.trace_start(a, os.devnull)
        with mock.patch.object(gpumem.allocator, "library") as library:
            with self.assertRaises(gpumem.InvalidHandle) as caught:
                a.close()
        library.assert_not_called()  # the handle may name another allocator by now
        self.assertIn("is closed already", caught.exception.detail)
        self.assertIn("closed", repr(a))

    def test_close_listeners_run_before_the_destruction_and_are_undone_when_it_is_refused(self):
        seen = []

        def listener(handle):
            # The allocator is still live here: its statistics can be read.
            seen.append(("listener", gpumem.Allocator.from_handle(handle).stats().bytes_in_use))
            return lambda: seen.append(("undo", handle))

        gpumem.allocator._close_listeners.append(listener)
        self.addCleanup(gpumem.allocator._close_listeners.remove, listener)
        a = gpumem.Allocator.host()
        b = a.alloc(64)
        with self.assertRaises(gpumem.Busy):
            a.close()
        self.assertEqual(seen, [("listener", 64), ("undo", a.handle)])
        b.free()
        a.close()
        self.assertEqual(seen[2:], [("listener", 0)])

    def test_negative_sizes_are_refused_before_the_library(self):
        for name, call in [
            ("limit", lambda: gpumem.Pool(self.host, limit=-1)),
            ("limit", lambda: self.pool.set_limit(-5)),
            ("alignment", lambda: gpumem.Allocator.host(alignment=-512)),
            ("keep_bytes", lambda: gpumem.CudaPoolAllocator.from_handle(self.host.handle).trim(-1)),
            ("nbytes", lambda: gpumem.CudaPoolAllocator.from_handle(self.host.handle).set_release_threshold(-1)),
            ("max_size", lambda: gpumem.Allocator.cuda_pool(max_size=-1)),
            ("map_unit", lambda: gpumem.Allocator.vm(map_unit=-1)),
            ("nbytes", lambda: gpumem.pin_cache_set_budget(-1)),
            ("size", lambda: self.pool.alloc(-1)),
        ]:
            with self.subTest(name), self.assertRaises(ValueError) as caught:
                call()
            self.assertRegex(str(caught.exception), rf"^{name} is -\d+; it cannot be negative$")
        self.assertEqual(self.pool.info().limit, 0)

    def test_peer_access_is_not_for_host_memory(self):
        with self.assertRaises(gpumem.NotSupported) as caught:
            self.pool.set_peer_access(1)
        self.assertIn("cannot be opened to device 1", caught.exception.detail)


class _Recorder:
    """A hook function that can be watched with weakref: keeps the events it sees, then calls `then`."""

    def __init__(self, then=None):
        self.seen, self.then = [], then

    def __call__(self, info):
        self.seen.append(info.event)
        if self.then is not None:
            self.then(info)


class HookTest(unittest.TestCase):
    def setUp(self):
        self.host = gpumem.Allocator.host()
        self.pool = gpumem.Pool(self.host)
        self.addCleanup(self.host.close)
        self.addCleanup(self.pool.close)

    def test_events_and_sizes(self):
        seen = []
        hook = self.pool.add_hook(HookEvent.ALL, seen.append)
        b = self.pool.alloc(1000)
        b.free()
        hook.remove()
        self.pool.alloc(8).free()
        self.assertEqual(
            [(i.event, i.size, i.mem_size, i.ptr, i.status) for i in seen],
            [
                (HookEvent.MALLOC_PRE, 1000, 0, 0, 0),
                (HookEvent.UPSTREAM_ALLOC_PRE, 1024, 1024, 0, 0),
                (HookEvent.UPSTREAM_ALLOC_POST, 1024, 1024, b.ptr, 0),
                (HookEvent.MALLOC_POST, 1000, 1024, b.ptr, 0),
                (HookEvent.FREE_PRE, 1000, 1024, b.ptr, 0),
                (HookEvent.FREE_POST, 1000, 1024, b.ptr, 0),
            ],
        )
        for info in seen:
            self.assertEqual((info.device, info.allocator, info.stream), (-1, self.pool.handle, 0))

    def test_a_mask_selects_events(self):
        seen = []
        with self.pool.add_hook(HookEvent.MALLOC_POST | HookEvent.FREE_PRE, seen.append):
            self.pool.alloc(100).free()
        self.pool.alloc(100).free()
        self.assertEqual([i.event for i in seen], [HookEvent.MALLOC_POST, HookEvent.FREE_PRE])

    def test_a_failed_allocation_is_seen_with_its_status(self):
        seen = []
        self.pool.set_limit(512)
        with self.pool.add_hook(HookEvent.MALLOC_POST, seen.append):
            with self.assertRaises(gpumem.OutOfMemory):
                self.pool.alloc(4096)
        self.assertEqual([(i.size, i.ptr, i.status) for i in seen], [(4096, 0, gpumem.OutOfMemory.STATUS)])

    def test_an_exception_in_a_hook_does_not_reach_the_call(self):
        def hook(info):
            raise RuntimeError(f"hook saw {info.event.name}")

        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            h = self.pool.add_hook(HookEvent.MALLOC_PRE, hook)
            b = self.pool.alloc(64)
        self.assertFalse(b.freed)
        b.free()
        self.assertEqual([str(e) for e in h.errors], ["hook saw MALLOC_PRE"])
        self.assertIn("Exception ignored in gpumem hook", stderr.getvalue())
        self.assertIn("RuntimeError: hook saw MALLOC_PRE", stderr.getvalue())
        h.remove()
        h.remove()

    def test_a_hook_needs_a_function(self):
        for fn in (None, "print", 42):
            with self.subTest(fn=fn), self.assertRaises(TypeError):
                self.pool.add_hook(HookEvent.ALL, fn)
        self.assertEqual(self.pool._callbacks, [])

    def test_removing_a_hook_of_a_closed_allocator_does_nothing(self):
        host = gpumem.Allocator.host()
        hook = host.add_hook(HookEvent.ALL, lambda info: None)
        host.close()
        hook.remove()
        self.assertIsNone(hook.id)

    def test_hooks_outlive_an_allocator_whose_destruction_is_refused(self):
        # The pool's object is collected while memory from it lives on (as CuPy's does): the
        # library refuses to destroy the pool, whose frees then still call the hook.
        done = run_python(
            textwrap.dedent(
                """
                import gc
                import gpumem
                seen = []
                pool = gpumem.Pool(gpumem.Allocator.host())
                pool.add_hook(gpumem.HookEvent.FREE_POST, seen.append)
                borrowed = gpumem.Allocator.from_handle(pool.handle)
                buffers = [borrowed.alloc(64) for _ in range(100)]
                del pool
                gc.collect()
                garbage = [bytearray(100) for _ in range(10000)]  # over what was freed
                for b in buffers:
                    b.free()
                print(len(seen))
                """
            )
        )
        self.assertEqual((done.returncode, done.stdout, done.stderr), (0, "100\n", ""))

    def test_hooks_added_through_a_borrowed_allocator_stay(self):
        # Python cannot see when a borrowed allocator is destroyed: its hooks stay for good.
        done = run_python(
            textwrap.dedent(
                """
                import gc
                import gpumem
                seen = []
                pool = gpumem.Pool(gpumem.Allocator.host())
                gpumem.Allocator.from_handle(pool.handle).add_hook(gpumem.HookEvent.MALLOC_POST, seen.append)
                gc.collect()
                garbage = [bytearray(100) for _ in range(10000)]
                buffers = [pool.alloc(64) for _ in range(100)]
                print(len(seen))
                """
            )
        )
        self.assertEqual((done.returncode, done.stdout, done.stderr), (0, "100\n", ""))

    def test_a_removed_hook_is_let_go(self):
        fn = _Recorder()
        alive = weakref.ref(fn)
        hook = self.pool.add_hook(HookEvent.MALLOC_PRE, fn)
        self.pool.alloc(8).free()
        hook.remove()
        self.pool.alloc(8).free()
        self.assertEqual(fn.seen, [HookEvent.MALLOC_PRE])
        del fn, hook
        gc.collect()
        self.assertIsNone(alive())

    def test_a_hook_that_removes_itself_is_let_go_when_its_call_returns(self):
        inside = []

        def remove_self(info):
            hook.remove()
            inside.append(alive() is not None)  # still running: still held

        fn = _Recorder(then=remove_self)
        alive = weakref.ref(fn)
        hook = self.pool.add_hook(HookEvent.MALLOC_PRE, fn)
        self.pool.alloc(8).free()
        self.pool.alloc(8).free()
        self.assertEqual((fn.seen, inside, hook.id), ([HookEvent.MALLOC_PRE], [True], None))
        del fn, hook, remove_self
        gc.collect()
        self.assertIsNone(alive())

    def test_the_hooks_of_a_collected_allocator_are_let_go(self):
        # Collected without close(): once its handle is destroyed, nothing can call its hooks.
        for kind in ("host", "pool"):
            with self.subTest(kind=kind):
                host = gpumem.Allocator.host()
                allocator = host if kind == "host" else gpumem.Pool(host)
                fn = _Recorder()
                alive = weakref.ref(fn)
                allocator.add_hook(HookEvent.MALLOC_PRE, fn)  # the Hook is dropped: the library holds fn
                gc.collect()
                allocator.alloc(8).free()
                self.assertEqual(fn.seen, [HookEvent.MALLOC_PRE])
                held = len(gpumem.allocator._held_callbacks)
                del fn, allocator, host
                gc.collect()
                self.assertIsNone(alive())
                self.assertEqual(len(gpumem.allocator._held_callbacks), held - 1)

    def test_hooks_on_the_upstream_see_the_pools_blocks(self):
        seen = []
        with self.host.add_hook(HookEvent.MALLOC_POST, seen.append):
            b = self.pool.alloc(100)
        self.assertEqual(
            [(i.size, i.mem_size, i.ptr, i.allocator) for i in seen], [(512, 512, b.ptr, self.host.handle)]
        )
        b.free()


class InterpreterExitTest(unittest.TestCase):
    def test_exit_with_live_objects_is_quiet(self):
        # Buffers, hooks, a pool and its upstream still alive at exit; finalizers must not raise.
        script = textwrap.dedent(
            """
            import gpumem
            host = gpumem.Allocator.host()
            pool = gpumem.Pool(host)
            hook = pool.add_hook(gpumem.HookEvent.ALL, lambda info: None)
            buffers = [pool.alloc(n) for n in (100, 5000, 70000)]
            raw = host.alloc(10)
            cycle = [pool]
            cycle.append(cycle)
            print("ok")
            """
        )
        done = run_python(script)
        self.assertEqual((done.returncode, done.stdout, done.stderr), (0, "ok\n", ""))


if __name__ == "__main__":
    unittest.main()
