"""gpumem as CuPy's memory allocator: device memory from a gpumem pool per device, on CuPy's
current stream, and pinned host memory from a gpumem pool over pinned memory.

    import gpumem.cupy

    gpumem.cupy.install()          # every CuPy device allocation now comes from gpumem
    ...
    gpumem.cupy.pool().stats()     # the current device's pool
    gpumem.cupy.memory_pool().used_bytes()   # what cupy.get_default_memory_pool() users call
    gpumem.cupy.uninstall()        # CuPy's own allocators again

    with gpumem.cupy.allocator():  # the same, for a block
        ...

    gpumem.cupy.install(shared=True, limit="8GiB")   # a Tenant "cupy" of gpumem.device_pool

By default each device has a pool of its own for CuPy (default_pool()), whose streams keep their
memory as in CuPy's pool: CuPy destroys a stream while arrays made on it live on, and a pool that
lends memory between streams would hand the driver the destroyed stream later. install(shared=True)
serves each device from a Tenant "cupy" (gpumem.Tenant) of the device's pool instead, which
gpumem.torch and gpumem.numba share, so that what one library frees serves the others: there,
free the arrays made on a cupy.cuda.Stream, and call memory_pool().free_all_blocks(stream),
before the stream goes. Budgets (install()'s `limit` and `soft_limit`, or GPUMEM_CUPY_LIMIT and
GPUMEM_CUPY_SOFT_LIMIT) make a Tenant "cupy" too, of the device's own CuPy pool unless shared.
GPUMEM_TRACE (gpumem.trace), read once when the CupyAllocator is made (install() raises ValueError for a
wrong one), records the allocator that serves each device from its first use.

CuPy is imported when these functions run, never when this module is imported.

Streams: CuPy's stream handles are gpumem's (`cupy.cuda.Stream.null.ptr` is 0, the legacy stream;
`cupy.cuda.Stream.ptds.ptr` is 2, GPUMEM_STREAM_PER_THREAD), so memory is allocated on CuPy's
current stream as it is, and freed on that same stream when CuPy lets go of it. As in CuPy's own
pool, that stream reuses it at once; the pool hands it to another stream only after a fence.

Where CuPy has `cupy.cuda.memory.CFunctionAllocatorMemory` (CuPy 8 and later), CuPy calls
libgpumem's gpumem_cupy_alloc and gpumem_cupy_free itself (include/gpumem/cupy.h), through one
`gpumem_cupy_target_t` per pool and stream, so that an allocation makes no call through ctypes and
no Buffer; failures take the slower path, which raises gpumem's errors.

Arrays of gpumem's memory are shared with other processes by export_array() and open_array(),
over gpumem.ipc.
"""
import collections.abc
import contextlib
import ctypes
import functools
import gc
import os
import threading
import weakref

from . import _types, ipc
from ._lib import library
from .allocator import Allocator, BlockState, Buffer, Pool, StreamReuse, _close_listeners, device_pool
from .device import query_memory
from .errors import Error, NotOwned, OutOfMemory
from .raw import HostAllocFlags
from .tenant import Tenant, kept_tenant, parse_size
from .trace import environment_setting, trace_from_environment

_lock = threading.Lock()
_installed = []  # _Installation, innermost last
_device_pools = {}  # device -> the Pool CuPy's memory comes from unless the caller gives one
_device_pools_lock = threading.Lock()
_tenants = {}  # (device, shared) -> the Tenant "cupy" install() serves the device from
_tenants_lock = threading.Lock()


def default_pool(device):
    """The pool of `device` for CuPy: made once over the device allocator, each stream keeping
    its memory as in CuPy's own pool. CuPy destroys a stream when its Stream object goes while
    arrays made on it live on, and a pool that lends memory between streams records events on the
    lending stream, which must then be a live one."""
    with _device_pools_lock:
        pool = _device_pools.get(device)
        if pool is None:
            pool = Pool(Allocator.device(device))
            pool.set_stream_reuse(StreamReuse.NEVER)
            _device_pools[device] = pool
        return pool


_cupy_module = None


def _cupy():
    global _cupy_module
    if _cupy_module is None:
        import cupy  # on use only: gpumem itself never needs CuPy

        _cupy_module = cupy
    return _cupy_module


# (allocator handle, stream) -> the address of its gpumem_cupy_target_t. CuPy's memory holds only
# that address, to free through it, and may be freed as late as the interpreter's shutdown, after
# this module's objects: the targets are in memory from libc's malloc that nothing frees, one of
# 24 bytes per pool and stream that ever allocated, as a pool keeps an arena per stream.
_targets = {}
_targets_lock = threading.Lock()
_libc_malloc = None


def _target(allocator, stream):
    global _libc_malloc
    key = (allocator.handle, stream)
    address = _targets.get(key)
    if address is None:
        with _targets_lock:
            address = _targets.get(key)
            if address is None:
                if _libc_malloc is None:
                    _libc_malloc = ctypes.CDLL(None).malloc
                    _libc_malloc.argtypes, _libc_malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
                size = ctypes.sizeof(_types.CupyTarget)
                address = _libc_malloc(size)
                if not address:
                    raise MemoryError(f"out of host memory for a {size}-byte gpumem_cupy_target_t")
                target = _types.CupyTarget.from_address(address)
                target.struct_size, target.allocator, target.stream = size, key[0], stream
                _targets[key] = address
    return address


def _forget_targets(handle):
    # The allocator is about to be destroyed: its handle may name another allocator after that.
    # Memory that CuPy still holds through its targets (freed by a forced close) must then not be
    # freed through them, so each is made invalid (gpumem_cupy_free refuses it and changes
    # nothing). Returns what makes them valid again, should the library refuse the destruction.
    with _targets_lock:
        forgotten = {key: _targets.pop(key) for key in [key for key in _targets if key[0] == handle]}
        for address in forgotten.values():
            _types.CupyTarget.from_address(address).struct_size = 0

    def undo():
        with _targets_lock:
            for key, address in forgotten.items():
                _types.CupyTarget.from_address(address).struct_size = ctypes.sizeof(_types.CupyTarget)
                _targets[key] = address

    return undo


_close_listeners.append(_forget_targets)


# What CupyAllocator.malloc calls, looked up once by _look_up(): CuPy's functions and, where CuPy
# has CFunctionAllocatorMemory, that class and the addresses of gpumem_cupy_alloc and
# gpumem_cupy_free. CuPy's own class, not a subclass: a subclass's objects would be tracked by the
# garbage collector, a cost paid on every array.
_looked_up = False
_get_device = _get_stream = _memory_pointer = _cupy_alloc = _cupy_free = None
_single_device = False  # the process sees one device, so the current one is 0
_memory_type = None  # CFunctionAllocatorMemory, or None without the fast path
_served = weakref.WeakValueDictionary()  # allocator handle -> the Allocator, for buffer_of()


def _look_up(cupy):
    global _looked_up, _get_device, _get_stream, _memory_pointer, _cupy_alloc, _cupy_free, _memory_type
    global _single_device
    if _looked_up:
        return
    with _targets_lock:
        if _looked_up:
            return
        _single_device = cupy.cuda.runtime.getDeviceCount() == 1
        device = getattr(cupy.cuda, "device", None)
        _get_device = getattr(device, "get_device_id", None) or cupy.cuda.runtime.getDevice
        _get_stream, _memory_pointer = cupy.cuda.get_current_stream, cupy.cuda.MemoryPointer
        memory_type = getattr(getattr(cupy.cuda, "memory", None), "CFunctionAllocatorMemory", None)
        if memory_type is not None:
            lib = library()
            _cupy_alloc = ctypes.cast(lib.gpumem_cupy_alloc, ctypes.c_void_p).value
            _cupy_free = ctypes.cast(lib.gpumem_cupy_free, ctypes.c_void_p).value
            _memory_type = memory_type
        _looked_up = True


class CupyMemory:
    """What buffer_of() says of memory that CuPy allocated through gpumem_cupy_alloc(): its `ptr`,
    `size`, the `stream` it was allocated on and the `allocator` it came from."""

    __slots__ = ("ptr", "size", "stream", "allocator")

    def __init__(self, ptr, size, stream, allocator):
        self.ptr, self.size, self.stream, self.allocator = ptr, size, stream, allocator

    def __repr__(self):
        return f"<gpumem.cupy.CupyMemory ptr={self.ptr:#x} size={self.size} stream={self.stream:#x}>"


class CupyAllocator:
    """CuPy allocators over gpumem pools: `malloc` for `cupy.cuda.set_allocator()` (or
    `cupy.cuda.using_allocator()`), `malloc_pinned` for `cupy.cuda.set_pinned_memory_allocator()`.

    `pools` picks the pool of each device: None for a pool of gpumem's over the device whose streams
    keep their memory, as CuPy's pool (made once per device, shared by every installation); an
    Allocator, for its own device; a mapping from device index to Allocator; or a function of the
    device index that returns an Allocator (or None), called once per device. Devices it does not
    name use the first. A pool that lends memory between streams (gpumem.device_pool) must not
    outlive, with memory cached, a stream CuPy has destroyed. `pinned` is True for a new pool over
    portable pinned memory, made on first use; an Allocator of host memory to use instead; or False
    to leave pinned memory alone.
    """

    def __init__(self, pools=None, pinned=True):
        self._lock = threading.Lock()
        self._pools = {}
        self._targets = []  # per device, stream -> the address of its pool's gpumem_cupy_target_t
        self.malloc = self._make_malloc()
        self._factory = None
        # GPUMEM_TRACE, read once here, where a wrong one raises ValueError to install()'s caller,
        # rather than at each device's first allocation, inside CuPy.
        self._trace_setting = environment_setting()
        if pools is None:
            pass
        elif isinstance(pools, Allocator):
            self._add(pools.device_id, pools)
        elif isinstance(pools, collections.abc.Mapping):
            for device, allocator in pools.items():
                self._add(device, allocator)
        elif callable(pools):
            self._factory = pools
        else:
            raise TypeError(f"pools must be None, an Allocator, a mapping or a function, not {type(pools).__name__}")
        if pinned is True or pinned is False:
            self._pinned, self._pinned_pool = pinned, None
        elif isinstance(pinned, Allocator):
            if pinned.device_id != -1:
                raise ValueError(f"{pinned!r} allocates on device {pinned.device_id}, not host memory")
            self._pinned, self._pinned_pool = True, pinned
        else:
            raise TypeError(f"pinned must be a bool or an Allocator, not {type(pinned).__name__}")

    def _add(self, device, allocator):
        if not isinstance(allocator, Allocator):
            raise TypeError(f"the pool of device {device} is a {type(allocator).__name__}, not a gpumem Allocator")
        found = allocator.device_id
        if found != device:
            where = "host memory" if found < 0 else f"device {found}"
            raise ValueError(f"{allocator!r} allocates {where}, not on device {device}")
        trace_from_environment(allocator, device, self._trace_setting)  # recorded from its first use by CuPy
        self._pools[device] = allocator

    @property
    def pinned(self):
        """Whether this serves CuPy's pinned memory too."""
        return self._pinned

    def pool(self, device=None):
        """The Allocator that serves `device` (None: CuPy's current device)."""
        if device is None:
            device = _cupy().cuda.runtime.getDevice()
        found = self._pools.get(device)
        if found is not None:
            return found
        with self._lock:
            found = self._pools.get(device)
            if found is None:
                made = self._factory(device) if self._factory is not None else None
                self._add(device, default_pool(device) if made is None else made)
                found = self._pools[device]
        return found

    def pinned_pool(self):
        """The Allocator that serves pinned memory, made now if not yet; None when pinned is False."""
        if not self._pinned:
            return None
        if self._pinned_pool is None:
            with self._lock:
                if self._pinned_pool is None:
                    # Portable: pinned for every device, as CuPy's own pinned memory is.
                    self._pinned_pool = Pool(Allocator.pinned(HostAllocFlags.PORTABLE))
        return self._pinned_pool

    def _make_malloc(self):
        # A closure rather than a method: CuPy calls it for every array, and each attribute and
        # global it does not look up, and each tuple it does not make, is time saved on that path.
        by_device, slow = self._targets, self._malloc

        def malloc(size):
            """CuPy's device allocator: `size` bytes from the current device's pool, on the current
            stream, as a cupy.cuda.MemoryPointer that frees them when CuPy drops it."""
            if _memory_type is not None and size:
                device = 0 if _single_device else _get_device()
                try:
                    target = by_device[device].get(_get_stream().ptr)
                except IndexError:  # a device not seen yet
                    target = None
                if target is not None:
                    memory = _memory_type(size, target, _cupy_alloc, _cupy_free, device)
                    if memory.ptr:
                        return _memory_pointer(memory, 0)
                    return slow(size, True)
            return slow(size)

        return malloc

    def _malloc(self, size, failed=False):
        # The first allocation on a device and stream, a CuPy without the fast path, or the fast
        # path `failed` (out of memory, most likely: the pool has tried all it can already).
        cupy = _cupy()
        _look_up(cupy)
        if size == 0:
            # As CuPy's own pool: empty arrays hold no memory (gpumem refuses size 0).
            return cupy.cuda.MemoryPointer(cupy.cuda.Memory(0), 0)
        device, stream = _get_device(), _get_stream().ptr
        pool = self.pool(device)
        targets = self._targets
        if _memory_type is not None and (device >= len(targets) or stream not in targets[device]):
            # Under the pool's lock too: close() invalidates the pool's targets under it, before
            # the destruction, and a target made meanwhile would escape.
            with self._lock, pool._lock:
                served = not pool.closed
                if served:
                    targets.extend({} for _ in range(device + 1 - len(targets)))  # in place: malloc holds it
                    targets[device][stream] = _target(pool, stream)
            if served:
                _served[pool._handle] = pool
                return self.malloc(size)
        buffer = _alloc(cupy, pool, size, stream, failed)
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(buffer.ptr, size, buffer, device), 0)

    def malloc_pinned(self, size):
        """CuPy's pinned-memory allocator: `size` bytes of pinned host memory, as a
        cupy.cuda.PinnedMemoryPointer that frees them when CuPy drops it."""
        cupy = _cupy()
        if size == 0:
            return cupy.cuda.PinnedMemoryPointer(cupy.cuda.PinnedMemory(0), 0)
        pool = self.pinned_pool()
        if pool is None:
            raise RuntimeError("this CupyAllocator was made with pinned=False")
        # Host code reads and writes pinned memory outside any stream's order, so no stream could
        # fence it: as in CuPy's PinnedMemoryPool, a freed buffer is handed out again at once (one
        # arena), and CuPy keeps a buffer alive while its own asynchronous copies use it. The
        # Buffer, with its ptr and size, is the memory object CuPy's pointer expects.
        return cupy.cuda.PinnedMemoryPointer(_alloc(cupy, pool, size, 0), 0)


def _alloc(cupy, pool, size, stream, failed=False):
    if pool.closed:
        raise ValueError(f"{pool!r} serves CuPy but is closed")
    if not failed:
        try:
            return pool.alloc(size, stream)
        except OutOfMemory:
            pass
    # As CuPy's own pool: arrays that only reference cycles keep alive go back to the pool first.
    gc.collect()
    try:
        return pool.alloc(size, stream)
    except OutOfMemory as error:
        translated = _translate(cupy, size, pool, error)
        if translated is error:
            raise
        raise translated from error


_oom_type = None  # what _out_of_memory_type() found: a class, False, or None before it looked


def _out_of_memory_type(cupy):
    # CuPy code catches cupy.cuda.memory.OutOfMemoryError (or MemoryError); gpumem code catches
    # gpumem.OutOfMemory. The exception is both, and its message keeps gpumem's detail. False when
    # this CuPy has no such type to combine with.
    global _oom_type
    if _oom_type is None:
        base = getattr(getattr(cupy.cuda, "memory", None), "OutOfMemoryError", None)
        try:
            _oom_type = _make_oom_type(base) if isinstance(base, type) and issubclass(base, MemoryError) else False
        except TypeError:  # a base that cannot be combined with gpumem's
            _oom_type = False
    return _oom_type


def __getattr__(name):
    # OutOfMemoryError derives from CuPy's, so it exists only once CuPy is imported.
    if name == "OutOfMemoryError":
        try:
            found = _out_of_memory_type(_cupy())
        except ImportError as error:
            raise AttributeError(f"{__name__}.OutOfMemoryError needs CuPy: {error}") from error
        if found:
            return found
        raise AttributeError("this CuPy has no cupy.cuda.memory.OutOfMemoryError to derive from")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _translate(cupy, size, pool, error):
    oom_type = _out_of_memory_type(cupy)
    if not oom_type:
        return error
    total = limit = 0
    try:
        total = pool.stats().bytes_reserved
        if isinstance(pool, (Pool, Tenant)):
            limit = pool.info().limit
    except Error:
        pass
    try:
        translated = oom_type(size, total, limit, error.detail)
    except Exception:  # a CuPy whose OutOfMemoryError takes other arguments
        return error
    translated.cuda_result = getattr(error, "cuda_result", 0)
    return translated


def _make_oom_type(base):
    class OutOfMemoryError(base, OutOfMemory):
        """Out of memory in a gpumem pool serving CuPy: a cupy.cuda.memory.OutOfMemoryError and a
        gpumem.OutOfMemory."""

        def __init__(self, size, total, limit=0, detail=""):
            base.__init__(self, size, total, limit)
            message = str(self.args[0]) if self.args else f"Out of memory allocating {size:,} bytes"
            self.args = (f"{message} {OutOfMemory.NAME}: {detail}" if detail else message,)
            self.status, self.detail, self.cuda_result = OutOfMemory.STATUS, detail, 0

        def __str__(self):
            return self.args[0]

        def __reduce__(self):
            fields = (getattr(self, name, 0) for name in ("_size", "_total", "_limit"))
            return (type(self), (*fields, self.detail))

    OutOfMemoryError.__module__, OutOfMemoryError.__qualname__ = __name__, "OutOfMemoryError"
    return OutOfMemoryError


class _Installation:
    __slots__ = ("allocator", "previous", "previous_pinned")

    def __init__(self, allocator, previous, previous_pinned):
        self.allocator, self.previous, self.previous_pinned = allocator, previous, previous_pinned


def _current_pinned(cupy):
    get = getattr(cupy.cuda, "get_pinned_memory_allocator", None)
    if get is not None:
        return get()
    # CuPy cannot say which pinned allocator is set: the innermost one set here, else the one
    # CuPy sets when it is imported.
    for entry in reversed(_installed):
        if entry.allocator.pinned:
            return entry.allocator.malloc_pinned
    return cupy.get_default_pinned_memory_pool().malloc


def tenant(device, limit=None, soft_limit=None, shared=True):
    """The Tenant "cupy" that install() serves `device` from: of gpumem.device_pool(device) when
    `shared`, else of default_pool(device). Made once for each, with budgets `limit` and
    `soft_limit` (bytes or text such as "8GiB"; None: GPUMEM_CUPY_LIMIT and GPUMEM_CUPY_SOFT_LIMIT,
    else none); budgets given for one made already are set on it."""
    with _tenants_lock:
        upstream = (lambda: device_pool(device)) if shared else (lambda: default_pool(device))
        return kept_tenant(_tenants, (device, shared), "cupy", device, limit, soft_limit, upstream)


def _budgets_in_environment():
    return any(os.environ.get(name, "").strip() for name in ("GPUMEM_CUPY_LIMIT", "GPUMEM_CUPY_SOFT_LIMIT"))


def install(pools=None, pinned=True, *, shared=False, limit=None, soft_limit=None):
    """Makes gpumem CuPy's allocator of device memory (`cupy.cuda.set_allocator`) and, unless
    `pinned` is False, of pinned memory (`cupy.cuda.set_pinned_memory_allocator`); `pools` and
    `pinned` as CupyAllocator's. Without `pools`, `shared` or a budget (`limit`, `soft_limit`, or
    their environment variables) serves each device from tenant(device, ..., shared); `shared` or
    budgets given with `pools` raise TypeError. Returns the CupyAllocator. Installations nest:
    uninstall() puts back what the last install() replaced. Raises ValueError inside
    `cupy.cuda.using_allocator()`, as `cupy.cuda.set_allocator()` does."""
    budgets = limit is not None or soft_limit is not None
    if pools is None:
        if shared or budgets or _budgets_in_environment():
            pools = functools.partial(tenant, limit=limit, soft_limit=soft_limit, shared=bool(shared))
    elif shared or budgets:
        raise TypeError("shared, limit and soft_limit choose the tenants install() makes; with pools, set "
                        "the budgets of those allocators")
    cupy = _cupy()
    allocator = CupyAllocator(pools, pinned)
    with _lock:
        previous = cupy.cuda.get_allocator()
        previous_pinned = _current_pinned(cupy) if allocator.pinned else None
        cupy.cuda.set_allocator(allocator.malloc)
        if allocator.pinned:
            cupy.cuda.set_pinned_memory_allocator(allocator.malloc_pinned)
        _installed.append(_Installation(allocator, previous, previous_pinned))
    return allocator


def uninstall(allocator=None):
    """Puts back the allocators that the last install() replaced, and returns its CupyAllocator
    (None when none is installed). Given `allocator`, it must be the last one installed. Memory it
    handed out stays valid, and goes back to its pool when CuPy drops it."""
    cupy = _cupy()
    with _lock:
        if not _installed:
            if allocator is not None:
                raise RuntimeError(f"{allocator!r} is not installed")
            return None
        entry = _installed[-1]
        if allocator is not None and entry.allocator is not allocator:
            raise RuntimeError(f"{allocator!r} is not the last CupyAllocator installed: uninstall those after it first")
        cupy.cuda.set_allocator(entry.previous)
        if entry.previous_pinned is not None:
            cupy.cuda.set_pinned_memory_allocator(entry.previous_pinned)
        _installed.pop()
    return entry.allocator


@contextlib.contextmanager
def allocator(pools=None, pinned=True, *, shared=False, limit=None, soft_limit=None):
    """install() for the length of a with block, which gets the CupyAllocator; uninstall() at its end."""
    installed_now = install(pools, pinned, shared=shared, limit=limit, soft_limit=soft_limit)
    try:
        yield installed_now
    finally:
        uninstall(installed_now)


def installed():
    """The CupyAllocator installed last, or None."""
    with _lock:
        return _installed[-1].allocator if _installed else None


def _current():
    found = installed()
    if found is None:
        raise RuntimeError("gpumem is not CuPy's allocator: call gpumem.cupy.install() first")
    return found


def pool(device=None):
    """The pool that serves CuPy's allocations on `device` (None: the current device), for its
    stats() and info(); RuntimeError when gpumem is not installed."""
    return _current().pool(device)


def pinned_pool():
    """The pool that serves CuPy's pinned memory (None if installed with pinned=False);
    RuntimeError when gpumem is not installed."""
    return _current().pinned_pool()


def buffer_of(memory):
    """The gpumem memory behind a CuPy array or cupy.cuda.MemoryPointer that gpumem allocated, with
    its `ptr`, `size`, `stream` and `allocator`: a Buffer, or a CupyMemory for memory that CuPy
    allocated through libgpumem itself, found in the snapshots of the pools that served CuPy (for
    inspection, not for a hot path). None for other memory."""
    data = getattr(memory, "data", memory)  # an ndarray's MemoryPointer
    mem = getattr(data, "mem", None)
    owner = getattr(mem, "_owner", None)
    if isinstance(owner, Buffer):
        return owner
    if _memory_type is None or not isinstance(mem, _memory_type) or not mem.ptr:
        return None
    for pool in list(_served.values()):
        # A tenant's blocks are its pool's; of tenants sharing one pool, the first that served CuPy
        # is named.
        blocks = pool.upstream if isinstance(pool, Tenant) else pool
        if not isinstance(blocks, Pool) or pool.closed or blocks.closed:
            continue
        for block in blocks.snapshot():
            if block["address"] == mem.ptr and block["state"] == BlockState.IN_USE:
                return CupyMemory(mem.ptr, mem.size, block["stream"], pool)
    return None


def record_stream(memory, stream):
    """Marks memory of a CuPy array (or MemoryPointer) that gpumem allocated as used on another
    stream too (a cupy.cuda.Stream, or its ptr): when CuPy frees it, the pool hands it out again
    only after the work queued there until then. Needed when an array made on one stream is used
    on another and freed before that work is done; as CuPy's own pool, gpumem otherwise reuses it
    on its stream at once. Not the per-thread default stream (InvalidArgument)."""
    buffer = buffer_of(memory)
    if buffer is None:
        raise ValueError(f"{memory!r} is not memory that gpumem allocated")
    library().gpumem_pool_record_stream(buffer.allocator.handle, buffer.ptr, getattr(stream, "ptr", stream))


def export_array(array):
    """Exports the memory of a CuPy array that gpumem allocated, for another process: (Handle,
    meta), where meta, a dict of plain values (shape, dtype as its str, strides, and the array's
    byte offset in the allocation), goes to open_array() beside the handle. The handle's
    descriptors travel as gpumem.ipc says (send(), or Handle.fds()). Synchronizes the current
    stream of the array's device first, so that the writes queued there are done before the other
    process reads. ValueError for an empty array or memory gpumem did not allocate."""
    cupy = _cupy()
    data = array.data
    mem = data.mem
    if not mem.ptr:
        raise ValueError("an empty array has no memory to share")
    owner = getattr(mem, "_owner", None)
    # The allocation's allocator: a Buffer's, else one of the pools CuPy called itself.
    candidates = [owner.allocator] if isinstance(owner, Buffer) else [p for p in list(_served.values()) if not p.closed]
    for allocator in candidates:
        try:
            handle = ipc.export(mem.ptr, allocator)
            break
        except NotOwned:
            continue
    else:
        raise ValueError(f"the memory at {mem.ptr:#x} is not memory that gpumem allocated for CuPy")
    with array.device:
        cupy.cuda.get_current_stream().synchronize()
    meta = {
        "shape": tuple(array.shape),
        "dtype": array.dtype.str,
        "strides": tuple(array.strides),
        "offset": data.ptr - mem.ptr,
    }
    return handle, meta


def open_array(handle, fds, meta):
    """The CuPy array another process exported with export_array(): `handle` (a Handle or its
    bytes) and the descriptors that came with it (still the caller's to close), or an Imported
    that gpumem.ipc.receive() opened (fds None); `meta` as export_array() gave it. The array
    holds the import, which closes when CuPy frees the memory."""
    cupy = _cupy()
    imported = handle if isinstance(handle, ipc.Imported) else ipc.open(handle, fds)
    dtype, shape, strides = cupy.dtype(meta["dtype"]), tuple(meta["shape"]), tuple(meta["strides"])
    low = high = meta["offset"]
    if 0 not in shape:  # the bytes the array reaches must lie in the import
        high += dtype.itemsize
        for n, stride in zip(shape, strides):
            if stride > 0:
                high += (n - 1) * stride
            else:
                low += (n - 1) * stride
    if low < 0 or high > imported.size:
        raise ValueError(f"the array ({meta}) reaches bytes {low} to {high}; the import holds {imported.size}")
    memory = cupy.cuda.UnownedMemory(imported.ptr, imported.size, imported, imported.device)
    pointer = cupy.cuda.MemoryPointer(memory, meta["offset"])
    return cupy.ndarray(shape, dtype=dtype, memptr=pointer, strides=strides)


class MemoryPool:
    """What `cupy.get_default_memory_pool()` users call, answered by the allocators gpumem serves
    CuPy from (memory_pool() makes one): `device` None means CuPy's current device at each call."""

    def __init__(self, cupy_allocator, device=None):
        self._allocator, self._device = cupy_allocator, device

    def _serving(self):
        allocator = self._allocator.pool(self._device)
        shared = allocator.upstream if isinstance(allocator, Tenant) else allocator
        return allocator, shared if isinstance(shared, Pool) else None

    def used_bytes(self):
        """Bytes of CuPy's live allocations on the device (the tenant's, or the pool's)."""
        return self._serving()[0].stats().bytes_in_use

    def total_bytes(self):
        """Bytes the device's pool holds from the device, for all its users."""
        allocator, shared = self._serving()
        return (shared or allocator).stats().bytes_reserved

    def free_bytes(self):
        """Bytes the device's pool caches, free for any of its users."""
        shared = self._serving()[1]
        return shared.info().free_bytes if shared is not None else 0

    def n_free_blocks(self):
        """How many free blocks the device's pool caches."""
        shared = self._serving()[1]
        return shared.info().free_block_count if shared is not None else 0

    def free_all_blocks(self, stream=None):
        """Has the device's pool give back what it caches: of every stream, or of `stream`'s (a
        cupy.cuda.Stream or its ptr) only. The cache is shared with the pool's other users."""
        shared = self._serving()[1]
        if shared is not None:
            if stream is None:
                shared.release(all_streams=True)
            else:
                shared.release(getattr(stream, "ptr", stream), all_streams=False)

    def set_limit(self, size=None, fraction=None):
        """Sets the most bytes CuPy may hold on the device (0: none), as bytes, text such as
        "8GiB", or a `fraction` of the device's memory: the tenant's hard budget (a soft budget
        above it is lowered to it), or the pool's limit when CuPy has a pool of its own."""
        allocator, shared = self._serving()
        device = allocator.device_id
        if fraction is not None:
            if size is not None:
                raise ValueError("give size or fraction, not both")
            size = int(query_memory(device)[1] * fraction)
        size = parse_size(0 if size is None else size, "size", device)
        if isinstance(allocator, Tenant):
            soft = allocator.soft_limit
            allocator.set_limits(size, min(soft, size) if size else soft)
        elif isinstance(allocator, Pool):
            allocator.set_limit(size)
        else:
            raise TypeError(f"{allocator!r} has no limit to set")

    def get_limit(self):
        """The most bytes CuPy may hold on the device; 0 for none."""
        allocator = self._serving()[0]
        return allocator.info().limit if isinstance(allocator, (Tenant, Pool)) else 0


def memory_pool(device=None):
    """A MemoryPool over what serves CuPy now, for code written against
    `cupy.get_default_memory_pool()`; RuntimeError when gpumem is not installed."""
    return MemoryPool(_current(), device)
