"""Traces of a pool over host memory, written to a temporary folder and read back."""
import os
import shutil
import tempfile
import time
import unittest

import gpumem
from gpumem import TraceEvent


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


if __name__ == "__main__":
    unittest.main()
