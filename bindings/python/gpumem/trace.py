"""Recording an allocator's events to a file, and reading such files back (trace.h).

Reading needs no GPU: a trace recorded on one machine is read on any other. A recording may keep,
for each allocation, where it came from: the Python stack (`stacks="python"`), the native one
(`"native"`), or both (`"all"`). summary() gives what `gpumem summary` prints.

GPUMEM_TRACE=PATH[,stacks=none|python|native|all][,max_frames=N] records, with no change to the
program, the allocators that gpumem.torch and gpumem.cupy allocate from (trace_from_environment()).
"""
import ctypes
import dataclasses
import enum
import os
import sys
import threading
import warnings
import weakref

from . import _types
from ._lib import call_quietly, library
from .errors import Busy


class TraceEvent(enum.IntEnum):
    """Kinds of trace record (gpumem_trace_event); their values are the file format's."""

    ALLOC = 1
    FREE = 2
    UPSTREAM_ALLOC = 3
    UPSTREAM_FREE = 4
    ALLOC_FAILED = 5


class TraceFlags(enum.IntFlag):
    """What a recording keeps beside the events (gpumem_trace_flags)."""

    NATIVE_FRAMES = 0x1


class TraceFrameKind(enum.IntEnum):
    """Kinds of frame (gpumem_trace_frame_kind)."""

    NATIVE = 1
    CALLER = 2


MAX_FRAMES = 64  # GPUMEM_TRACE_MAX_FRAMES: the most frames of each kind a record keeps
STACKS = ("none", "python", "native", "all")


@dataclasses.dataclass(frozen=True)
class TraceHeader:
    """The header of a trace file (gpumem_trace_header_t); `kind` is the traced allocator's kind."""

    version: int
    device: int
    start_unix_ns: int
    kind: str


@dataclasses.dataclass(frozen=True)
class TraceFrame:
    """One frame of a record (gpumem_trace_frame_t). `text` is the frame on one line: a Python
    frame's "file:line function", a native one's "symbol+0x1a (module+0x1234)". A native frame also
    has its `address`, its `module`'s path, `module_offset` (for `addr2line -e MODULE`), and its
    `symbol` ("" where the module does not export one) and `symbol_offset`."""

    kind: TraceFrameKind
    text: str
    address: int = 0
    module: str = ""
    module_offset: int = 0
    symbol: str = ""
    symbol_offset: int = 0


@dataclasses.dataclass(frozen=True)
class TraceRecord:
    """One record of a trace (gpumem_trace_record_t). `event` is a TraceEvent, or a plain int for a
    kind this package does not know; `stream` and `address` are ints. An allocation recorded with
    stacks has its `frames` (TraceFrame, native first, each kind innermost first) and a `stack`:
    records with the same nonzero stack have the same frames."""

    event: TraceEvent
    thread: int
    time_ns: int
    stream: int
    address: int
    size: int
    mem_size: int
    status: int
    stack: int = 0
    frames: tuple = ()


def _path(path):
    return os.fsencode(os.fspath(path))


def _text(data):
    return data.decode("utf-8", "replace") if data else ""


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


_OWN_FILES = os.path.dirname(os.path.abspath(__file__)) + os.sep


def python_frames(limit=16):
    """The calling thread's Python stack as "file:line function" lines, innermost first, at most
    `limit` of them, the gpumem package's own frames left out: what a recording with
    stacks="python" keeps for each allocation."""
    lines = []
    frame = sys._getframe(1)
    while frame is not None and len(lines) < limit:
        code = frame.f_code
        if not code.co_filename.startswith(_OWN_FILES):
            lines.append(f"{code.co_filename}:{frame.f_lineno} {getattr(code, 'co_qualname', code.co_name)}")
        frame = frame.f_back
    return lines


def _write_python_frames(buffer, capacity, limit):
    # The library's gpumem_trace_frames_fn, on the allocating thread, with the GIL (ctypes takes it).
    try:
        data = "\n".join(python_frames(limit or 16)).encode("utf-8", "replace")[:capacity]
        ctypes.memmove(buffer, data, len(data))
        return len(data)
    except BaseException:  # a callback must return normally: the record goes without its frames
        return 0


# The process's for good: a thread may be in it until the last recording that uses it stops.
_PYTHON_FRAMES = _types.trace_frames_fn(_write_python_frames)


def trace_start(allocator, path, stacks="none", max_frames=16):
    """Starts recording an allocator's events (None: the current default's) to a new file, which
    replaces any file there; Busy while the allocator is being recorded already. A pool's records
    include the blocks it takes from and gives back to its upstream. Returns a Trace.

    `stacks` says what each allocation keeps of where it came from: "none", "python" (the Python
    stack of the allocating thread, python_frames()), "native" (the native call stack, with each
    return address's module and exported symbol) or "all" (both), at most `max_frames` (1 to
    MAX_FRAMES) of each. With stacks the file is of format version 2, which gpumem 0.4 reads."""
    if stacks not in STACKS:
        raise ValueError(f"stacks is {stacks!r}; it is one of {', '.join(STACKS)}")
    if not isinstance(max_frames, int) or not 1 <= max_frames <= MAX_FRAMES:
        raise ValueError(f"max_frames is {max_frames!r}; it is 1 to {MAX_FRAMES}")
    lib, out = library(), ctypes.c_void_p()
    handle = None if allocator is None else allocator.handle
    if stacks == "none":
        lib.gpumem_trace_start(handle, _path(path), 0, ctypes.byref(out))
        return Trace(out.value, allocator, path)
    params = _types.TraceParams()
    lib.gpumem_trace_params_init(ctypes.byref(params), ctypes.sizeof(params))
    params.max_frames = max_frames
    if stacks in ("native", "all"):
        params.flags = TraceFlags.NATIVE_FRAMES
    if stacks in ("python", "all"):
        params.frames, params.frames_user_data = _PYTHON_FRAMES, max_frames
    lib.gpumem_trace_start_with_params(handle, _path(path), ctypes.byref(params), ctypes.byref(out))
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
        self._stacks = {}  # stack -> its frames, read once
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
            frames = self._frames(record) if more.value else ()
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
            stack=record.stack,
            frames=frames,
        )

    def _frames(self, record):
        # Under self._lock, right after the record was read: its frames are the reader's until then.
        frames = self._stacks.get(record.stack)
        if frames is None:
            out, lib, found = _types.new(_types.TraceFrame), library(), []
            for i in range(record.frame_count):
                lib.gpumem_trace_reader_get_frame(self._handle, i, ctypes.byref(out))
                found.append(TraceFrame(TraceFrameKind(out.kind), _text(out.text), out.address, _text(out.module),
                                        out.module_offset, _text(out.symbol), out.symbol_offset))
            frames = self._stacks[record.stack] = tuple(found)
        return frames

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


# The figures of gpumem_trace_summary_t, by name, and `text`: what `gpumem summary` prints.
TraceSummary = dataclasses.make_dataclass(
    "TraceSummary",
    [("text", str)] + [(name, str if name == "kind" else int) for name, _ in _types.TraceSummary._fields_[1:]],
    frozen=True,
)
TraceSummary.__module__ = __name__
TraceSummary.__doc__ = """What a trace says the traced allocator did (gpumem_trace_summarize()): `text`, as
`gpumem summary` prints it, and the figures of torch.cuda.memory_stats() under the names of
gpumem_trace_summary_t: allocated_bytes, allocated_bytes_peak, allocated_bytes_total,
freed_bytes_total and the same for large_ (1 MiB or more) and small_ allocations; requested_bytes;
alloc_count, alloc_count_peak, alloc_count_total, free_count_total (and large_, small_);
reserved_bytes and segment_count with their peaks and totals (a pool's: its upstream records);
failed_count, oom_count, first_failed_size, unknown_free_count; records, peak_record,
peak_record_alloc_count; version, device, kind."""


def summarize(path, top=10):
    """Reads the trace at `path` once and sums it up: a TraceSummary, whose text lists the `top`
    largest allocations live at the peak, each with its frames where the trace has them."""
    if not isinstance(top, int) or not 0 <= top <= 0xFFFFFFFF:
        raise ValueError(f"top is {top!r}; it is a count of allocations")
    pieces, failures = [], []

    def write_text(text, length, _user_data):
        # Called by the library before gpumem_trace_summarize() returns: nothing may unwind into C,
        # so a failure is kept and raised once the call is back.
        try:
            pieces.append(ctypes.string_at(text, length))
        except BaseException as error:
            failures.append(error)

    # Kept in a local for the length of the call: the library holds only its address.
    callback = _types.trace_text_fn(write_text)
    figures = _types.new(_types.TraceSummary)
    library().gpumem_trace_summarize(_path(path), top, callback, None, ctypes.byref(figures))
    if failures:
        raise failures[0]
    values = {name: getattr(figures, name) for name, _ in _types.TraceSummary._fields_[1:]}
    values["kind"] = values["kind"].decode("utf-8", "replace")
    return TraceSummary(text=b"".join(pieces).decode("utf-8", "replace"), **values)


def summary(path, top=10):
    """What `gpumem summary PATH --top TOP` prints, as text (summarize()'s `text`)."""
    return summarize(path, top).text


# ---- GPUMEM_TRACE: recording with no change to the program ----------------------------------------

ENVIRONMENT = "GPUMEM_TRACE"
_environment_lock = threading.Lock()
_environment_traces = {}  # allocator handle -> the Trace recording it, for the process
_environment_paths = set()


def environment_setting(text=None):
    """GPUMEM_TRACE (or `text`) read: (path, stacks, max_frames), or None when it is unset or
    empty. Its form is PATH[,stacks=none|python|native|all][,max_frames=N]; ValueError says what
    is wrong with another."""
    text = (os.environ.get(ENVIRONMENT, "") if text is None else text).strip()
    if not text:
        return None
    path, *options = text.split(",")
    stacks, max_frames = "none", 16
    for option in options:
        key, _, value = (part.strip() for part in option.partition("="))
        if key == "stacks" and value in STACKS:
            stacks = value
        # isdigit() alone takes other scripts' digits and "²", which int() refuses or reads otherwise.
        elif key == "max_frames" and value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_FRAMES:
            max_frames = int(value)
        else:
            raise ValueError(f"{ENVIRONMENT}={text!r}: {option.strip()!r} is not stacks=none|python|native|all "
                             f"or max_frames=1..{MAX_FRAMES}")
    if not path.strip():
        raise ValueError(f"{ENVIRONMENT}={text!r} names no file")
    return path.strip(), stacks, max_frames


_FROM_ENVIRONMENT = object()  # trace_from_environment()'s default: GPUMEM_TRACE as it is now


def trace_from_environment(allocator, device, setting=_FROM_ENVIRONMENT):
    """Starts recording `allocator`, of device `device`, as GPUMEM_TRACE asks, once for each
    allocator, for the rest of the process (the file is completed at exit); gpumem.torch and
    gpumem.cupy call it for the allocators they allocate from. `setting` is an
    environment_setting() read before (None: no recording), so that a caller that reads it once,
    where its error is clear, need not read it again. In PATH, "{device}" becomes the device's
    number and "{pid}" the process's; a path that another allocator of this process records to
    already gets ".1", ".2", ... after it. Returns the Trace, or None when GPUMEM_TRACE is unset or
    the allocator is being recorded already (which a warning says)."""
    if setting is _FROM_ENVIRONMENT:
        setting = environment_setting()
    if setting is None:
        return None
    path, stacks, max_frames = setting
    with _environment_lock:
        trace = _environment_traces.get(allocator.handle)
        if trace is not None:
            return trace
        path = path.replace("{device}", str(device)).replace("{pid}", str(os.getpid()))
        chosen, n = path, 1
        while chosen in _environment_paths:
            chosen, n = f"{path}.{n}", n + 1
        try:
            trace = trace_start(allocator, chosen, stacks=stacks, max_frames=max_frames)
        except Busy as error:
            warnings.warn(f"{ENVIRONMENT}: {allocator!r} is not recorded to {chosen}: {error}", RuntimeWarning,
                          stacklevel=2)
            return None
        _environment_traces[allocator.handle] = trace
        _environment_paths.add(chosen)
        return trace


def _stop_environment_trace(trace):
    """Stops a recording that trace_from_environment() started and forgets it, so that the
    allocator can be recorded again: for a caller whose setup failed after the recording started.
    The file stays, complete, with what was recorded."""
    with _environment_lock:
        for handle, found in list(_environment_traces.items()):
            if found is trace:
                del _environment_traces[handle]
        _environment_paths.discard(trace.path)
    trace.stop()
