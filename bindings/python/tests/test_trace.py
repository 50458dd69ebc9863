"""Traces of a pool over host memory, written to a temporary folder and read back: their records,
the frames that say where allocations came from, summaries, and GPUMEM_TRACE."""
import dataclasses
import inspect
import os
import shutil
import tempfile
import threading
import time
import unittest
import warnings
from unittest import mock

import gpumem
import gpumem.trace
from gpumem import TraceEvent
from gpumem.trace import TraceFrameKind


class TraceTest(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.folder)
        self.path = os.path.join(self.folder, "pool.trace")
        self.host = gpumem.Allocator.host()
        self.pool = gpumem.Pool(self.host, limit=4096)
        self.addCleanup(self.host.close)
        self.addCleanup(self.pool.close)

    def test_records_read_back(self):
        started = time.time_ns()
        with gpumem.trace_start(self.pool, self.path) as trace:
            self.assertFalse(trace.stopped)
            a = self.pool.alloc(1000, stream=0x40)
            b = self.pool.alloc(100)
            a.free()
            with self.assertRaises(gpumem.OutOfMemory):
                self.pool.alloc(8192)
            self.pool.release()
        self.assertTrue(trace.stopped)
        b.free()  # after the recording: not in the file

        with gpumem.TraceReader(self.path) as reader:
            self.assertEqual(reader.header.kind, "pool")
            self.assertEqual((reader.header.version, reader.header.device), (1, -1))
            self.assertGreaterEqual(reader.header.start_unix_ns, started - 10**9)
            records = list(reader)
        self.assertTrue(reader.closed)
        self.assertEqual(
            [(r.event, r.stream, r.address, r.size, r.mem_size, r.status) for r in records],
            [
                (TraceEvent.UPSTREAM_ALLOC, 0x40, a.ptr, 1024, 0, 0),
                (TraceEvent.ALLOC, 0x40, a.ptr, 1000, 1024, 0),
                (TraceEvent.UPSTREAM_ALLOC, 0, b.ptr, 512, 0, 0),
                (TraceEvent.ALLOC, 0, b.ptr, 100, 512, 0),
                (TraceEvent.FREE, 0x40, a.ptr, 0, 0, 0),
                (TraceEvent.ALLOC_FAILED, 0, 0, 8192, 0, gpumem.OutOfMemory.STATUS),
                (TraceEvent.UPSTREAM_FREE, 0x40, a.ptr, 1024, 0, 0),
            ],
        )
        self.assertEqual({r.thread for r in records}, {1})
        times = [r.time_ns for r in records]
        self.assertEqual(times, sorted(times))

    def test_read_trace(self):
        with gpumem.trace_start(self.host, self.path):
            self.host.alloc(64).free()
        header, records = gpumem.read_trace(self.path)
        self.assertEqual(header.kind, "host")
        self.assertEqual([(r.event, r.size) for r in records], [(TraceEvent.ALLOC, 64), (TraceEvent.FREE, 0)])

    def test_one_recording_per_allocator(self):
        with gpumem.trace_start(self.pool, self.path):
            with self.assertRaises(gpumem.Busy) as caught:
                gpumem.trace_start(self.pool, os.path.join(self.folder, "second.trace"))
            self.assertIn("is being traced already", caught.exception.detail)

    def test_stop_twice_does_nothing(self):
        trace = gpumem.trace_start(self.pool, self.path)
        trace.stop()
        trace.stop()
        self.assertEqual(gpumem.read_trace(self.path)[1], [])

    def test_a_collected_recording_completes_its_file(self):
        gpumem.trace_start(self.pool, self.path)  # dropped at once: stopped by its finalizer
        self.pool.alloc(64).free()
        self.assertEqual(gpumem.read_trace(self.path)[1], [])

    def test_a_file_that_cannot_be_created(self):
        with self.assertRaises(gpumem.IoError) as caught:
            gpumem.trace_start(self.pool, os.path.join(self.folder, "missing", "x.trace"))
        self.assertIn("cannot create the trace file", caught.exception.detail)

    def test_a_file_that_is_not_a_trace(self):
        path = os.path.join(self.folder, "not.trace")
        with open(path, "wb") as f:
            f.write(b"something else entirely")
        with self.assertRaises(gpumem.IoError) as caught:
            gpumem.TraceReader(path)
        self.assertIn("is not a gpumem trace", caught.exception.detail)

    def test_a_damaged_file_is_reported_at_its_first_bad_record(self):
        with gpumem.trace_start(self.pool, self.path):
            for _ in range(3):
                self.pool.alloc(64).free()
        with open(self.path, "rb") as f:
            data = f.read()
        with open(self.path, "wb") as f:
            f.write(data[:-3])
        with gpumem.TraceReader(self.path) as reader:
            with self.assertRaises(gpumem.IoError) as caught:
                list(reader)
        self.assertIn("is damaged at byte", caught.exception.detail)

    def test_a_closed_reader_refuses_to_read(self):
        with gpumem.trace_start(self.pool, self.path):
            self.pool.alloc(64).free()
        reader = gpumem.TraceReader(self.path)
        self.assertEqual(next(reader).event, TraceEvent.UPSTREAM_ALLOC)
        reader.close()
        reader.close()
        with self.assertRaises(ValueError):
            next(reader)


def _here():
    """The caller's line, and its function's name as a Python frame names it (qualified from 3.11)."""
    frame = inspect.currentframe().f_back
    return frame.f_lineno, getattr(frame.f_code, "co_qualname", frame.f_code.co_name)


class _PoolTestCase(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.folder)
        self.path = os.path.join(self.folder, "frames.trace")
        self.host = gpumem.Allocator.host()
        self.pool = gpumem.Pool(self.host)
        self.addCleanup(self.host.close)
        self.addCleanup(self.pool.close)


class FramesTest(_PoolTestCase):
    def allocations(self):
        header, records = gpumem.read_trace(self.path)
        self.assertEqual(header.version, 2)
        return [r for r in records if r.event == TraceEvent.ALLOC]

    def test_python_frames_name_the_line_that_allocated(self):
        with gpumem.trace_start(self.pool, self.path, stacks="python"):
            line, name = _here()
            self.pool.alloc(1000).free()
        (record,) = self.allocations()
        first = record.frames[0]
        self.assertEqual(first.kind, TraceFrameKind.CALLER)
        self.assertEqual(first.text, f"{__file__}:{line + 1} {name}")
        self.assertEqual((first.address, first.module, first.symbol), (0, "", ""))
        package = os.path.dirname(gpumem.__file__)
        self.assertFalse([f for f in record.frames if f.text.startswith(package)])  # gpumem's own left out
        self.assertNotEqual(record.stack, 0)

    def test_native_frames_come_before_the_python_ones(self):
        with gpumem.trace_start(self.pool, self.path, stacks="all", max_frames=4):
            self.pool.alloc(64).free()
        (record,) = self.allocations()
        kinds = [f.kind for f in record.frames]
        self.assertEqual(kinds, sorted(kinds))  # NATIVE (1) first, then CALLER (2)
        native = [f for f in record.frames if f.kind == TraceFrameKind.NATIVE]
        self.assertTrue(1 <= len(native) <= 4)
        for f in native:
            self.assertNotIn("libgpumem", f.module)  # the library's own frames are left out
            self.assertNotEqual(f.address, 0)
        self.assertEqual(len(record.frames) - len(native), 4)  # this test and unittest's callers, cut to 4

    def test_allocations_from_one_place_share_a_stack(self):
        with gpumem.trace_start(self.pool, self.path, stacks="python"):
            for _ in range(3):
                self.pool.alloc(64).free()
            self.pool.alloc(64).free()
        a, b, c, d = self.allocations()
        self.assertEqual(a.stack, b.stack)
        self.assertEqual(a.stack, c.stack)
        self.assertIs(a.frames, b.frames)  # read once
        self.assertNotEqual(a.stack, d.stack)

    def test_an_error_in_the_frames_callback_leaves_the_record_without_frames(self):
        with mock.patch.object(gpumem.trace, "python_frames", side_effect=RuntimeError("broken")):
            with gpumem.trace_start(self.pool, self.path, stacks="python"):
                self.pool.alloc(64).free()  # the error stays in the callback: the allocation succeeds
        (record,) = self.allocations()
        self.assertEqual((record.stack, record.frames), (0, ()))

    def test_no_stacks_is_version_1(self):
        with gpumem.trace_start(self.pool, self.path, stacks="none"):
            self.pool.alloc(64).free()
        header, records = gpumem.read_trace(self.path)
        self.assertEqual(header.version, 1)
        self.assertEqual({(r.stack, r.frames) for r in records}, {(0, ())})

    def test_bad_stacks_and_frame_counts(self):
        for stacks, max_frames in [("java", 16), ("python", 0), ("python", 65), ("native", "16")]:
            with self.subTest(stacks=stacks, max_frames=max_frames):
                with self.assertRaises(ValueError):
                    gpumem.trace_start(self.pool, self.path, stacks=stacks, max_frames=max_frames)
        self.assertFalse(os.path.exists(self.path))


class SummaryTest(_PoolTestCase):
    def record(self):
        """Records 2 MiB and 4 KiB live at once, then a failure; where the 4 KiB came from."""
        with gpumem.trace_start(self.pool, self.path, stacks="python"):
            big = self.pool.alloc(2 << 20)
            line, name = _here()
            small = self.pool.alloc(4096)
            big.free()
            small.free()
            with self.assertRaises(gpumem.OutOfMemory):
                self.pool.alloc(1 << 62)
        return f"{__file__}:{line + 1} {name}"

    def test_summary_says_where_the_peak_came_from(self):
        where = self.record()
        text = gpumem.trace.summary(self.path, top=2)
        self.assertTrue(text.startswith(f"{self.path}: "))
        self.assertIn("Largest allocations live at the peak", text)
        self.assertIn(f"      at {where}\n", text)
        self.assertEqual(text, gpumem.trace.summarize(self.path, top=2).text)

    def test_summarize_gives_the_figures(self):
        self.record()
        s = gpumem.trace.summarize(self.path)
        self.assertEqual((s.allocated_bytes, s.allocated_bytes_peak), (0, (2 << 20) + 4096))
        self.assertEqual((s.large_alloc_count_total, s.small_alloc_count_total), (1, 1))
        self.assertEqual((s.alloc_count_total, s.free_count_total, s.alloc_count_peak), (2, 2, 2))
        self.assertEqual((s.failed_count, s.oom_count, s.first_failed_size), (1, 1, 1 << 62))
        self.assertEqual((s.kind, s.version, s.device), ("pool", 2, -1))
        header, records = gpumem.read_trace(self.path)
        self.assertEqual(s.records, len(records))
        reserved = sum(r.size for r in records if r.event == TraceEvent.UPSTREAM_ALLOC)
        self.assertEqual(s.reserved_bytes_total, reserved)

    def test_a_long_summary_comes_whole(self):
        with gpumem.trace_start(self.pool, self.path, stacks="python"):
            held = [self.pool.alloc(512) for _ in range(2000)]
            for b in held:
                b.free()
        text = gpumem.trace.summary(self.path, top=2000)
        self.assertGreater(len(text), 64 << 10)
        self.assertTrue(text.endswith("\n"))
        self.assertEqual(text.count("      at the frames of record "), 1999)

    def test_a_summary_from_a_pipe(self):
        # Read once: a FIFO, which can be read only once, gives the figures and a text over 64 KiB.
        with gpumem.trace_start(self.pool, self.path, stacks="python"):
            held = [self.pool.alloc(512) for _ in range(2000)]
            for b in held:
                b.free()
        want = gpumem.trace.summarize(self.path, top=2000)
        fifo = os.path.join(self.folder, "pipe")
        os.mkfifo(fifo)

        def feed():
            with open(self.path, "rb") as source, open(fifo, "wb") as sink:
                shutil.copyfileobj(source, sink)

        writer = threading.Thread(target=feed)
        writer.start()
        got = gpumem.trace.summarize(fifo, top=2000)
        writer.join()
        self.assertGreater(len(got.text), 64 << 10)
        self.assertEqual(got.text.partition("\n")[2], want.text.partition("\n")[2])
        self.assertEqual(dataclasses.replace(got, text=""), dataclasses.replace(want, text=""))

    def test_an_error_taking_the_text_is_raised_after_the_call(self):
        self.record()
        with mock.patch.object(gpumem.trace.ctypes, "string_at", side_effect=MemoryError("no room")):
            with self.assertRaises(MemoryError):
                gpumem.trace.summarize(self.path)
        self.assertIn("Largest allocations", gpumem.trace.summary(self.path))  # and nothing was left broken

    def test_a_file_that_is_not_a_trace(self):
        path = os.path.join(self.folder, "not.trace")
        with open(path, "wb") as f:
            f.write(b"something else entirely")
        with self.assertRaises(gpumem.IoError) as caught:
            gpumem.trace.summary(path)
        self.assertIn("is not a gpumem trace", caught.exception.detail)
        with self.assertRaises(ValueError):
            gpumem.trace.summary(path, top=-1)


class EnvironmentTest(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.folder)
        self.host = gpumem.Allocator.host()
        self.addCleanup(self.host.close)
        # The process's recordings from GPUMEM_TRACE, emptied for each test.
        for patch in (mock.patch.object(gpumem.trace, "_environment_traces", {}),
                      mock.patch.object(gpumem.trace, "_environment_paths", set())):
            patch.start()
            self.addCleanup(patch.stop)

    def test_setting_read(self):
        read = gpumem.trace.environment_setting
        self.assertIsNone(read(""))
        self.assertEqual(read(" run.trace "), ("run.trace", "none", 16))
        self.assertEqual(read("run.trace,stacks=all, max_frames = 8"), ("run.trace", "all", 8))
        for bad in ["run.trace,stacks=java", "run.trace,max_frames=0", "run.trace,depth=3", ",stacks=python",
                    "run.trace,max_frames=\u0664", "run.trace,max_frames=\u00b2", "run.trace,max_frames=1e1"]:
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError) as caught:
                    read(bad)
                self.assertIn("GPUMEM_TRACE", str(caught.exception))

    def test_unset_records_nothing(self):
        with mock.patch.dict(os.environ, {"GPUMEM_TRACE": ""}):
            self.assertIsNone(gpumem.trace.trace_from_environment(self.host, 0))

    def test_each_allocator_once_each_to_a_file_of_its_own(self):
        pool_a, pool_b = gpumem.Pool(self.host), gpumem.Pool(self.host)
        self.addCleanup(pool_a.close)
        self.addCleanup(pool_b.close)
        setting = os.path.join(self.folder, "run-{device}-{pid}.trace") + ",stacks=python"
        with mock.patch.dict(os.environ, {"GPUMEM_TRACE": setting}):
            a = gpumem.trace.trace_from_environment(pool_a, 3)
            self.assertIs(gpumem.trace.trace_from_environment(pool_a, 3), a)
            b = gpumem.trace.trace_from_environment(pool_b, 3)
        want = os.path.join(self.folder, f"run-3-{os.getpid()}.trace")
        self.assertEqual((a.path, b.path), (want, want + ".1"))
        pool_a.alloc(64).free()
        a.stop()
        b.stop()
        header, records = gpumem.read_trace(want)
        self.assertEqual(header.version, 2)
        self.assertTrue(records[-2].frames)

    def test_an_allocator_recorded_already_is_left_alone(self):
        path = os.path.join(self.folder, "mine.trace")
        with gpumem.trace_start(self.host, path):
            with mock.patch.dict(os.environ, {"GPUMEM_TRACE": os.path.join(self.folder, "env.trace")}):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    self.assertIsNone(gpumem.trace.trace_from_environment(self.host, 0))
        self.assertIn("is being traced already", str(caught[0].message))
        self.assertFalse(os.path.exists(os.path.join(self.folder, "env.trace")))


    def _torch_over_host(self):
        """gpumem.torch's setup over a pool of host memory, with PyTorch's entry point stubbed."""
        import gpumem.torch as gt  # imports no PyTorch

        pool = gpumem.Pool(self.host)
        self.addCleanup(pool.close)
        lib = mock.Mock(wraps=gpumem.library())
        lib.gpumem_torch_set_allocator = mock.Mock()
        for patch in (mock.patch.object(gt, "pool", return_value=pool),
                      mock.patch.object(gt, "library", return_value=lib)):
            patch.start()
            self.addCleanup(patch.stop)
        return gt, pool, lib

    def test_torch_refuses_a_wrong_setting_before_making_anything(self):
        gt, _, lib = self._torch_over_host()
        with mock.patch.dict(os.environ, {"GPUMEM_TRACE": "run.trace,stacks=java"}):
            with self.assertRaises(ValueError) as caught:
                gt._make_tenants((0,), None, None)
        self.assertIn("GPUMEM_TRACE", str(caught.exception))
        lib.gpumem_torch_set_allocator.assert_not_called()

    def test_torch_rollback_stops_and_forgets_its_recordings(self):
        gt, pool, _ = self._torch_over_host()
        path = os.path.join(self.folder, "torch.trace")
        with mock.patch.dict(os.environ, {"GPUMEM_TRACE": path}):
            made, traces = gt._make_tenants((0,), None, None)
        self.assertEqual([t.path for t in traces], [path])
        gt._drop_tenants(made, traces)
        self.assertTrue(traces[0].stopped)
        self.assertEqual((gpumem.trace._environment_traces, gpumem.trace._environment_paths), ({}, set()))
        with gpumem.trace_start(pool, path):  # recorded no more: it can be recorded again
            pass


if __name__ == "__main__":
    unittest.main()
