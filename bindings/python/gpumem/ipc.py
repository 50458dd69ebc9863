"""Sharing device memory between processes (ipc.h): a live allocation of a gpumem allocator is
exported as a Handle, opened in another process as an Imported, and closed there.

    # the exporting process: `sock` is a connected AF_UNIX stream socket (socket.socketpair())
    buf = gpumem.device_pool(0).alloc(1 << 20)
    gpumem.memset(buf, 0x5A)                          # synchronous: done before the send
    gpumem.ipc.send(sock, gpumem.ipc.export(buf))

    # the importing process
    with gpumem.ipc.receive(sock) as mem:             # mem.ptr, mem.size; closed at the end
        gpumem.copy(host_buffer, mem)

A handle is two things: its 192 bytes (`Handle.data`), which any channel carries (a pipe, a
queue, a pickle), and `fd_count` file descriptors, which only a Unix-domain socket carries.
send() and receive() move both; with a channel of its own, a program takes new descriptors from
Handle.fds(), sends them its own way (SCM_RIGHTS, multiprocessing.reduction.DupFd), closes them,
and the importer passes the ones it received to open(), then closes those.

The rules of include/gpumem/ipc.h hold:

- A handle is for the processes it is sent to: once every process that opened it has closed it,
  it is spent. Export again for each receiver. An export that is never opened keeps its memory,
  once freed here, until this process exits: export only what is sent.
- Memory freed here while open elsewhere, or sent and not opened yet, stays valid and out of
  reuse until its importers close it or exit; collect() returns it once they have.
- Ordering is the caller's: the exporter's writes must be complete (a synchronize) before the
  importer uses the memory. Closing an import synchronizes the importer's device first.

Sockets are given as socket objects or descriptors, and must be blocking (a socket with a timeout
is non-blocking underneath, and its sends and receives fail with IoError when they would wait).
"""
import ctypes
import dataclasses
import multiprocessing.context
import multiprocessing.reduction
import multiprocessing.util
import os
import weakref

from . import _ptr, _types
from ._lib import call_quietly, library
from .allocator import Allocator, Buffer
from .errors import NotOwned, error_for
from .memory import pointer_info

HANDLE_SIZE = ctypes.sizeof(_types.IpcHandle)  # GPUMEM_IPC_HANDLE_SIZE


@dataclasses.dataclass(frozen=True)
class IpcInfo:
    """What this process shares now (gpumem_ipc_info_t): its allocations with a handle not yet spent
    (`exported`), of them those freed here and kept for importers (`held`, `held_bytes`), its opens of other
    processes' memory (`imports`, each open counted), the segments they map (`open_segments`,
    `open_bytes`) and every segment mapped since the process started (`segment_opens`)."""

    exported: int
    held: int
    held_bytes: int
    imports: int
    open_segments: int
    open_bytes: int
    segment_opens: int


def _fileno(obj):
    """A descriptor from an int or an object with fileno() (a socket, a file)."""
    fd = obj if isinstance(obj, int) else obj.fileno()
    if fd < 0:
        raise ValueError(f"{obj!r} has no open descriptor")
    return fd


class Handle:
    """An exported allocation: `data`, its bytes, and `fd_count`, how many file descriptors go with
    it. Pickled, it is its bytes and count only: the descriptors never travel in a pickle."""

    __slots__ = ("data", "fd_count")

    def __init__(self, data, fd_count):
        if isinstance(data, int):  # bytes(192) would be 192 zero bytes
            raise TypeError("an IPC handle is bytes, not an int")
        data = bytes(data)
        if len(data) != HANDLE_SIZE:
            raise ValueError(f"an IPC handle is {HANDLE_SIZE} bytes, not {len(data)}")
        self.data, self.fd_count = data, _ptr.nonnegative("fd_count", int(fd_count))

    @classmethod
    def from_bytes(cls, data, fd_count):
        """A handle from bytes that came over some channel, with the count sent beside them."""
        return cls(data, fd_count)

    def __bytes__(self):
        return self.data

    def __reduce__(self):
        return (Handle, (self.data, self.fd_count))

    def __eq__(self, other):
        if not isinstance(other, Handle):
            return NotImplemented
        return (self.data, self.fd_count) == (other.data, other.fd_count)

    def __hash__(self):
        return hash((self.data, self.fd_count))

    def __repr__(self):
        return f"<gpumem.ipc.Handle fd_count={self.fd_count}>"

    def _struct(self):
        return _types.IpcHandle.from_buffer_copy(self.data)

    def fds(self):
        """New file descriptors for the handle (close-on-exec), in the order open() needs them: the
        caller's to send and then close. Only in the process that exported it, and only while the
        handle is not spent (InvalidArgument otherwise)."""
        out = (ctypes.c_int32 * self.fd_count)()
        library().gpumem_ipc_export_fds(ctypes.byref(self._struct()), out, self.fd_count)
        return list(out)


def _handle_struct(handle):
    return (handle if isinstance(handle, Handle) else Handle(handle, 0))._struct()


def export(ptr, allocator=None):
    """Exports the live allocation starting at `ptr` (a Buffer or an int address) for other
    processes, as a Handle. `allocator` is the Allocator (or handle) that handed it out; by default
    a Buffer's own allocator, and for an address the current default (what a NULL allocator means
    on this thread). NotOwned when `ptr` is not the start of one of its live allocations,
    NotSupported for memory that cannot be shared (host, managed, stream-ordered)."""
    if allocator is None and isinstance(ptr, Buffer):
        allocator = ptr.allocator
    handle = allocator.handle if isinstance(allocator, Allocator) else allocator
    address = _ptr.memory(ptr, writable=False).address
    out, count = _types.IpcHandle(), ctypes.c_size_t()
    library().gpumem_ipc_export(handle, address, ctypes.byref(out), ctypes.byref(count))
    return Handle(bytes(out), count.value)


class Imported:
    """Another process's memory, opened here: `ptr` (a device address in this process) and `size`
    (as the exporter allocated it). close(), the end of a with block or collection closes it.

    Its `__cuda_array_interface__` is a 1-D array of `size` bytes with no stream to wait on (the
    exporter's writes are complete before it sends), so CuPy, Numba and PyTorch can view it; an
    object that views it must keep the Imported alive (torch.as_tensor() does)."""

    def __init__(self, ptr, size):
        self.ptr, self.size = ptr, size
        self._arm()

    def _arm(self):
        self._finalizer = weakref.finalize(self, call_quietly, "gpumem_ipc_close", self.ptr)

    @property
    def closed(self):
        """Whether close() closed it."""
        return not self._finalizer.alive

    def close(self):
        """Closes this open: the last close of its memory here synchronizes the device and unmaps it,
        and the exporter may then reuse it. Closing it again raises NotOwned, as the library does:
        the same address may be open here again by another open of the handle."""
        # Taken from the finalizer first, which only one caller gets.
        if self._finalizer.detach() is None:
            raise error_for(NotOwned.STATUS, f"{self.ptr:#x} is not open here: this import was closed already")
        try:
            library().gpumem_ipc_close(self.ptr)
        except NotOwned:
            raise
        except BaseException:
            self._arm()  # the driver refused (or a graph is being captured): still open
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.closed:
            self.close()

    def __int__(self):
        # A closed address may be another open's by now.
        if self.closed:
            raise ValueError(f"{self!r} is closed")
        return self.ptr

    def _gpumem_memory(self):
        # What copies and memsets take: the address, bounded by the size.
        return _ptr.Memory(int(self), self.size, self)

    @property
    def device(self):
        """The device the memory is on, as this process numbers it."""
        return pointer_info(self.ptr).device

    @property
    def __cuda_array_interface__(self):
        if self.closed:
            raise ValueError(f"{self!r} is closed")
        return _ptr.cuda_array_interface(self.ptr, self.size)

    def __repr__(self):
        state = "closed" if self.closed else "open"
        return f"<gpumem.ipc.Imported ptr={self.ptr:#x} size={self.size} {state}>"


def open(handle, fds):  # noqa: A001 (the library's name; builtins.open is not used here)
    """Opens another process's exported memory (or this one's) here, on the device that holds it,
    as an Imported. `handle` is a Handle or its bytes; `fds` the descriptors that came with it, in
    their order (ints, or objects with fileno()), which stay the caller's to close. InvalidArgument
    for bytes that are not a handle, descriptors it does not need, or a handle that is spent."""
    fds = [_fileno(fd) for fd in fds]
    if not isinstance(handle, Handle):
        handle = Handle(handle, len(fds))
    out, size, given = ctypes.c_void_p(), ctypes.c_size_t(), (ctypes.c_int32 * len(fds))(*fds)
    library().gpumem_ipc_open(ctypes.byref(handle._struct()), given, len(fds), ctypes.byref(out), ctypes.byref(size))
    return Imported(out.value, size.value)


def pickled_fds(handle):
    """New descriptors of `handle` (this process's export) as multiprocessing.reduction.DupFd
    objects, for a pickle that multiprocessing's ForkingPickler carries (a queue, a pipe, a new
    process's arguments); open_pickled() is the receiver's half."""
    fds = handle.fds()
    # While a process starts, the descriptors of its arguments go to the child as they are, after
    # the pickling: those stay open until the starting process object goes. Otherwise DupFd keeps
    # a copy of its own, and ours are closed at once.
    spawning = multiprocessing.context.get_spawning_popen()
    try:
        return [multiprocessing.reduction.DupFd(fd) for fd in fds]
    finally:
        for fd in fds:
            if spawning is None:
                os.close(fd)
            else:
                multiprocessing.util.Finalize(spawning, os.close, (fd,))


def open_pickled(data, fd_count, passed):
    """open() of a handle's bytes and the DupFd objects pickled_fds() made for it, in the receiving
    process; the descriptors they give are closed after."""
    fds = []
    try:
        for dup in passed:
            fds.append(dup.detach())
        return open(Handle(data, fd_count), fds)
    finally:
        for fd in fds:
            os.close(fd)


def send(sock, handle):
    """Sends a handle this process exported, with new descriptors for it, over a connected AF_UNIX
    stream socket (a socket object or its descriptor); the descriptors are closed here after the
    send. Serialize sends on one socket: two at once interleave."""
    library().gpumem_ipc_send(_fileno(sock), ctypes.byref(_handle_struct(handle)))


def receive(sock):
    """Receives a handle that send() sent over a connected AF_UNIX stream socket and opens it, as
    open() does: an Imported. IoError when the socket closes before a whole handle came."""
    out, size = ctypes.c_void_p(), ctypes.c_size_t()
    library().gpumem_ipc_receive(_fileno(sock), ctypes.byref(out), ctypes.byref(size))
    return Imported(out.value, size.value)


def collect():
    """Frees what this process freed while other processes held it, where every importer has
    closed it or exited since (PyTorch's torch.cuda.ipc_collect()); the bytes returned."""
    out = ctypes.c_uint64()
    library().gpumem_ipc_collect(ctypes.byref(out))
    return out.value


def info():
    """What this process shares now, as an IpcInfo."""
    out = _types.new(_types.IpcInfo)
    library().gpumem_ipc_get_info(ctypes.byref(out))
    return IpcInfo(**{field.name: getattr(out, field.name) for field in dataclasses.fields(IpcInfo)})
