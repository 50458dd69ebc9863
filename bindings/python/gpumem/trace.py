"""Recording an allocator's events to a file, and reading such files back (trace.h).

Reading needs no GPU: a trace recorded on one machine is read on any other.
"""
import ctypes
import dataclasses
import enum
import os
import threading
import weakref

from . import _types
from ._lib import call_quietly, library


class TraceEvent(enum.IntEnum):
    """Kinds of trace record (gpumem_trace_event); their values are the file format's."""

    ALLOC = 1
    FREE = 2
    UPSTREAM_ALLOC = 3
    UPSTREAM_FREE = 4
    ALLOC_FAILED = 5


@dataclasses.dataclass(frozen=True)
class TraceHeader:
    """The header of a trace file (gpumem_trace_header_t); `kind` is the traced allocator's kind."""

    version: int
    device: int
    start_unix_ns: int
    kind: str


@dataclasses.dataclass(frozen=True)
class TraceRecord:
    """One record of a trace (gpumem_trace_record_t). `event` is a TraceEvent, or a plain int for a
    kind this package does not know; `stream` and `address` are ints."""

    event: TraceEvent
    thread: int
    time_ns: int
    stream: int
    address: int
    size: int
    mem_size: int
    status: int


def _path(path):
    return os.fsencode(os.fspath(path))


class Trace:
    """A recording in progress, from trace_start(). stop(), the end of a with block, or collection
    stops it and completes the file."""

    def __init__(self, handle, allocator, path):
        self.handle, self.allocator, self.path = handle, allocator, path
        self._finalizer = weakref.finalize(self, call_quietly, "gpumem_trace_stop", handle)

    @property
    def stopped(self):
        """Whether stop() ended the recording."""
        return not self._finalizer.alive

    def stop(self):
        """Stops the recording and writes the rest of the file; IoError if a write failed at some
        point (the file then holds the records before it), the recording being stopped all the
        same. Stopping it again does nothing."""
        if not self._finalizer.alive:
            return
        try:
            library().gpumem_trace_stop(self.handle)
        finally:
            self._finalizer.detach()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        return f"<gpumem.Trace {os.fspath(self.path)!r} {'stopped' if self.stopped else 'recording'}>"


def trace_start(allocator, path):
    """Starts recording an allocator's events (None: the current default's) to a new file, which
    replaces any file there; Busy while the allocator is being recorded already. A pool's records
    include the blocks it takes from and gives back to its upstream. Returns a Trace."""
    out = ctypes.c_void_p()
    library().gpumem_trace_start(None if allocator is None else allocator.handle, _path(path), 0, ctypes.byref(out))
    return Trace(out.value, allocator, path)


class TraceReader:
    """An open trace file: `header`, then its records by iteration, as TraceRecord. close(), the
    end of a with block, or collection closes it. IoError names the byte offset of damage, at
    the first damaged record."""

    def __init__(self, path):
        lib = library()
        out = ctypes.c_void_p()
        lib.gpumem_trace_reader_open(_path(path), ctypes.byref(out))
        self.path = path
        self._handle = out.value
        self._finalizer = weakref.finalize(self, call_quietly, "gpumem_trace_reader_close", out.value)
        self._lock = threading.Lock()
        header = _types.new(_types.TraceHeader)
        lib.gpumem_trace_reader_get_header(self._handle, ctypes.byref(header))
        self.header = TraceHeader(
            version=header.version,
            device=header.device,
            start_unix_ns=header.start_unix_ns,
            kind=header.kind.decode("utf-8", "replace"),
        )

    @property
    def closed(self):
        """Whether close() closed the file."""
        return not self._finalizer.alive

    def close(self):
        """Closes the file; closing it again does nothing."""
        with self._lock:
            if not self._finalizer.alive:
                return
            self._finalizer.detach()
            library().gpumem_trace_reader_close(self._handle)

    def __iter__(self):
        return self

    def __next__(self):
        record, more = _types.new(_types.TraceRecord), ctypes.c_bool()
        # One handle is serialized by the caller, in the library's terms: the lock does it here.
        with self._lock:
            if not self._finalizer.alive:
                raise ValueError("the trace reader is closed")
            library().gpumem_trace_reader_next(self._handle, ctypes.byref(record), ctypes.byref(more))
        if not more.value:
            raise StopIteration
        try:
            event = TraceEvent(record.event)
        except ValueError:
            event = record.event
        return TraceRecord(
            event=event,
            thread=record.thread,
            time_ns=record.time_ns,
            stream=record.stream,
            address=record.address,
            size=record.size,
            mem_size=record.mem_size,
            status=record.status,
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<gpumem.TraceReader {os.fspath(self.path)!r} {'closed' if self.closed else 'open'}>"


def read_trace(path):
    """A trace file's header and all its records, as (TraceHeader, [TraceRecord, ...])."""
    with TraceReader(path) as reader:
        return reader.header, list(reader)
