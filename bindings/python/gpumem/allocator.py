"""Allocators, pools and the buffers they hand out (allocator.h, pool.h, cuda_pool.h, vm.h).

Lifetimes follow the library's refusals: a Buffer keeps its allocator alive, a Pool its upstream,
and closing an allocator that still has live buffers raises Busy. Finalizers free what Python
collects and never raise, so an interpreter that exits with live objects exits quietly; they run
at exit in the reverse order of creation, buffers before the allocators they came from. An
allocator the library refuses to destroy from a finalizer (a default, a thread's override, one
with memory freed by address only) keeps what it relies on, callbacks included, for good.
"""
import ctypes
import dataclasses
import enum
import os
import sys
import threading
import traceback
import weakref

from . import _dlpack, _ptr, _types
from ._lib import call_quietly, library
from .errors import Error, InvalidHandle, error_for

CUDA_POOL_KEEP_THRESHOLD = 2**64 - 2  # GPUMEM_CUDA_POOL_KEEP_THRESHOLD


class HookEvent(enum.IntFlag):
    """Events a hook observes (gpumem_hook_event); combine them with |."""

    MALLOC_PRE = 0x1
    MALLOC_POST = 0x2
    UPSTREAM_ALLOC_PRE = 0x4
    UPSTREAM_ALLOC_POST = 0x8
    FREE_PRE = 0x10
    FREE_POST = 0x20
    ALL = 0x3F


class BlockState(enum.IntEnum):
    """States of a pool's blocks in a snapshot (gpumem_block_state)."""

    FREE = 0
    IN_USE = 1
    PENDING = 2
    UNMAPPED = 3


class StreamReuse(enum.IntEnum):
    """Whether a pool lends one stream's free memory to another stream (gpumem_stream_reuse)."""

    NEVER = 0
    FENCE = 1
    HOST_WAIT = 2


class PeerAccess(enum.IntEnum):
    """What another device may do with an allocator's memory (gpumem_peer_access)."""

    NONE = 0
    READ_WRITE = 1


class CudaPoolSource(enum.IntEnum):
    """Where a CUDA-pool allocator's pool comes from (gpumem_cuda_pool_source)."""

    CURRENT = 0
    DEFAULT = 1
    EXTERNAL = 2
    NEW = 3


@dataclasses.dataclass(frozen=True)
class AllocatorStats:
    """Statistics of an allocator (gpumem_allocator_stats_t)."""

    bytes_in_use: int
    peak_bytes_in_use: int
    bytes_requested: int
    bytes_reserved: int
    peak_bytes_reserved: int
    alloc_count: int
    free_count: int
    upstream_alloc_count: int
    upstream_free_count: int
    retry_count: int
    oom_count: int


@dataclasses.dataclass(frozen=True)
class PoolInfo:
    """What a pool holds (gpumem_pool_info_t)."""

    used_bytes: int
    free_bytes: int
    total_bytes: int
    free_block_count: int
    limit: int
    arena_count: int
    pending_bytes: int
    address_bytes: int


@dataclasses.dataclass(frozen=True)
class PoolGrowthInfo:
    """What a pool's growth has cost since it was made (gpumem_pool_growth_info_t)."""

    mapped_bytes: int
    map_calls: int
    moved_bytes: int
    move_calls: int
    returned_bytes: int
    fences_recorded: int
    driver_ns: int


@dataclasses.dataclass(frozen=True)
class CudaPoolInfo:
    """What a CUDA memory pool holds, from its attributes (gpumem_cuda_pool_info_t)."""

    reserved: int
    reserved_high: int
    used: int
    used_high: int
    release_threshold: int


@dataclasses.dataclass(frozen=True)
class VmInfo:
    """What a VM allocator holds (gpumem_vm_info_t)."""

    map_unit: int
    range_size: int
    reserved_bytes: int
    mapped_bytes: int


@dataclasses.dataclass(frozen=True)
class HookInfo:
    """What a hook is told (gpumem_hook_info_t); `allocator`, `ptr` and `stream` are ints."""

    event: HookEvent
    device: int
    allocator: int
    size: int
    mem_size: int
    ptr: int
    stream: int
    status: int


def _from_struct(cls, struct):
    # c_void_p fields read as None for NULL; Python sees addresses as ints.
    values = {}
    for field in dataclasses.fields(cls):
        value = getattr(struct, field.name)
        values[field.name] = 0 if value is None else value
    return cls(**values)


def _report(error, where):
    # Nothing may propagate through C: say what was lost, as Python does for unraisable errors.
    print(f"Exception ignored in {where}:", file=sys.stderr)
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)


def _require_callable(name, fn):
    # Up front: a ctypes callback would otherwise fail only when the library first calls it.
    if not callable(fn):
        raise TypeError(f"{name} must be callable, not {type(fn).__name__}")


def _free_quietly(allocator, ptr, stream):
    if allocator._destroyed:
        return  # closed by force, which freed the memory; the handle may name another allocator now
    call_quietly("gpumem_free", allocator._handle, ptr, stream)


# What allocators the library would not destroy rely on: the library may still use them.
_kept_for_good = []
# Callbacks the library holds (hooks, reclaim callbacks): each stays here from its adding until its
# removal returns, which the library promises is once no call of it is running. Removed from
# inside itself, it is let go when that call returns instead (its ctypes thunk is still running).
_held_callbacks = set()
_running = threading.local()  # the callbacks this thread is inside, innermost last


class _Held:
    """A callback's ctypes function, held while the library may call it."""

    def __init__(self, cfunctype, fn):
        self.removed = False

        def call(*args):
            stack = _running.__dict__.setdefault("stack", [])
            stack.append(self)
            try:
                return fn(*args)
            finally:
                stack.pop()
                if self.removed and self not in stack:
                    _held_callbacks.discard(self)

        self.function = cfunctype(call)
        _held_callbacks.add(self)

    def release(self):
        """After the library's removal returned: lets it go now, or as its own call returns."""
        self.removed = True
        if self not in getattr(_running, "stack", ()):
            _held_callbacks.discard(self)
# Functions of the handle that close() is about to destroy, for what keeps handles elsewhere
# (gpumem.cupy). Each returns None, or a function that undoes its work should the library refuse.
_close_listeners = []


def _destroy_quietly(handle, keep, callbacks):
    # `keep` holds what must outlive the handle (a pool's upstream, a function allocator's
    # functions) until it is destroyed; `callbacks` are its hooks, which the library holds until then.
    if not call_quietly("gpumem_allocator_destroy", handle):
        _kept_for_good.append(keep)  # its hooks stay held too
        return
    for held in callbacks:  # the library dropped its hooks
        held.release()
    callbacks.clear()


class Buffer(_ptr.Owned):
    """Memory from an allocator: `ptr`, `size` and `stream`. Freed by free(), at the end of a
    with block, or when collected; it keeps its allocator alive until then."""

    def __init__(self, allocator, ptr, size, stream):
        self.allocator, self.ptr, self.size, self.stream = allocator, ptr, size, stream
        self._arm()

    def _arm(self):
        self._finalizer = weakref.finalize(self, _free_quietly, self.allocator, self.ptr, self.stream)

    @property
    def freed(self):
        """Whether the memory went back to the allocator (by free(), or by closing it with force)."""
        return not self._finalizer.alive or self.allocator._destroyed

    def free(self, stream=None):
        """Frees the memory, on `stream` if given, else on the stream it was allocated on. Freeing
        a freed buffer does nothing: the address may belong to another buffer by then."""
        # Taken from the finalizer first, which only one caller gets: of two threads freeing at
        # once, one frees, and the other does not free the address again.
        if self._finalizer.detach() is None or self.allocator._destroyed:
            return
        try:
            library().gpumem_free(self.allocator._handle, self.ptr, self.stream if stream is None else stream)
        except BaseException:
            self._arm()  # still live
            raise

    @property
    def __cuda_array_interface__(self):
        """The memory as a 1-D uint8 CUDA array, ordered after its stream, for CuPy, Numba and
        PyTorch (`torch.as_tensor(buffer, device="cuda")`), which hold the buffer while they use it.
        Device memory only: host memory has none (hasattr() is False)."""
        if self.allocator.device_id < 0:
            raise AttributeError("host memory has no __cuda_array_interface__")
        if self.freed:
            raise AttributeError(f"{self!r} is freed")
        return _ptr.cuda_array_interface(self.ptr, self.size, self.stream)

    def __dlpack_device__(self):
        """(DLPack device type, device): CUDA (2) or managed (13) memory of its device, pinned host
        memory (3, 0), or other host memory (1, 0)."""
        from .memory import MemoryType, pointer_info

        if self.freed:
            raise BufferError(f"{self!r} is freed")
        try:
            kind = pointer_info(self.ptr).memory_type
        except Error:  # no driver: host memory, of no device's
            kind = MemoryType.UNREGISTERED
        if self.allocator.device_id >= 0:
            return (_dlpack.CUDA_MANAGED if kind == MemoryType.MANAGED else _dlpack.CUDA, self.allocator.device_id)
        return (_dlpack.CUDA_HOST if kind in (MemoryType.HOST, MemoryType.MANAGED) else _dlpack.CPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """The memory as a DLPack capsule of a 1-D uint8 tensor (torch.from_dlpack, cupy.from_dlpack,
        numpy.from_dlpack), which keeps the buffer alive until its consumer lets it go. For device
        memory, `stream` is the consumer's (None or 1: the legacy stream, 2: the per-thread stream,
        -1: no ordering), ordered after the buffer's stream (gpumem_stream_wait). No copy is ever
        made: copy=True, or a `dl_device` other than the buffer's, raises BufferError."""
        device = self.__dlpack_device__()
        if copy:
            raise BufferError("gpumem's buffers are shared by DLPack, never copied: copy=True is refused")
        if dl_device is not None and tuple(dl_device) != device:
            raise BufferError(f"the buffer is on DLPack device {device}, not {tuple(dl_device)}; no copy is made")
        if device[0] in (_dlpack.CUDA, _dlpack.CUDA_MANAGED) and stream != -1:
            consumer = 0 if stream in (None, 1) else stream  # 1 is DLPack's name for the legacy stream
            if consumer != self.stream:
                library().gpumem_stream_wait(consumer, self.stream)
        elif device[0] in (_dlpack.CPU, _dlpack.CUDA_HOST) and stream not in (None, -1):
            raise BufferError(f"stream is {stream!r}; host memory takes none")
        return _dlpack.capsule(self.ptr, self.size, device[0], device[1], self)

    def __repr__(self):
        state = "freed" if self.freed else f"stream={self.stream:#x}"
        return f"<gpumem.Buffer ptr={self.ptr:#x} size={self.size} {state}>"


class Hook:
    """A hook added by Allocator.add_hook(). Exceptions raised by its function cannot reach the
    allocating call; they are printed to stderr and kept in `errors`."""

    def __init__(self, allocator, events, fn):
        self.allocator, self.events, self.fn = allocator, events, fn
        self.id = None
        self.errors = []
        errors = self.errors

        # Refers to neither the hook nor the allocator, which keeps it: no reference cycle.
        def call(info, _user_data):
            try:
                info = _from_struct(HookInfo, info.contents)
                fn(dataclasses.replace(info, event=HookEvent(info.event)))
            except BaseException as error:  # nothing may unwind into C
                errors.append(error)
                _report(error, f"gpumem hook {fn!r}")

        self._held = None
        self._call = call

    @property
    def _callback(self):
        if self._held is None:
            self._held = _Held(_types.hook_fn, self._call)
        return self._held.function

    def remove(self):
        """Removes the hook; removing it again, or once its allocator is closed, does nothing.
        Returns once no other thread runs it (then fn is let go)."""
        if self.id is None:
            return
        if not self.allocator.closed:
            library().gpumem_allocator_remove_hook(self.allocator.handle, self.id)
        self.id = None
        if self._held is not None:
            if self._held in self.allocator._callbacks:
                self.allocator._callbacks.remove(self._held)
            self._held.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class Allocator:
    """A gpumem allocator. Make one with the class methods (host(), device(), ...), Pool or
    device_pool(). close(), the end of a with block, or collection destroys an owned one."""

    def __init__(self, handle, *, owned=True, keep=()):
        """Wraps a handle; `owned` ones are destroyed by close() or when collected, with `keep`
        (objects that must outlive the handle) released only then."""
        self._handle = handle
        self.owned = owned
        self._destroyed = False  # by close(): buffers still referring to it must not free through it
        self._lock = threading.Lock()  # one close() at a time
        self._buffers = weakref.WeakValueDictionary()  # address -> Buffer, for free() by address
        # The hooks not removed yet, released when the handle is destroyed (by close() or
        # collection); an allocator the library refuses to destroy once its object is collected
        # calls them for good.
        self._callbacks = []
        self._finalizer = weakref.finalize(self, _destroy_quietly, handle, keep, self._callbacks) if owned else None

    @property
    def handle(self):
        """The gpumem_allocator_t* as an int; ValueError once closed."""
        if self._destroyed:
            raise ValueError(f"{self!r} is closed")
        return self._handle

    @property
    def closed(self):
        """Whether close() destroyed the allocator."""
        return self.owned and not self._finalizer.alive

    def close(self, force=False):
        """Destroys the allocator: Busy while buffers are live or a pool relies on it, InvalidHandle
        when closed already. With `force`, live buffers are freed first (gpumem_allocator_destroy_force)
        and become freed; Busy still while something relies on it. A borrowed allocator
        (device_pool(), from_handle()) is left alone."""
        if not self.owned:
            return
        with self._lock:
            if not self._finalizer.alive:
                # Not through the library: the handle may name another allocator by now.
                raise error_for(
                    InvalidHandle.STATUS, f"{self._handle:#x} is not a live gpumem allocator: it is closed already"
                )
            # Before the destruction, so that nothing reaches the handle through them after it.
            undo = [listener(self._handle) for listener in _close_listeners]
            try:
                if force:
                    library().gpumem_allocator_destroy_force(self._handle)
                else:
                    library().gpumem_allocator_destroy(self._handle)
            except BaseException:
                for restore in reversed(undo):
                    if restore is not None:
                        restore()
                raise
            self._destroyed = True
            self._finalizer.detach()
            for held in self._callbacks:  # the library dropped its hooks
                held.release()
            self._callbacks.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.closed:
            self.close()

    def __repr__(self):
        state = "closed" if self.closed else ("borrowed" if not self.owned else "open")
        return f"<gpumem.{type(self).__name__} {self._handle:#x} {state}>"

    @classmethod
    def from_handle(cls, handle):
        """Borrows an allocator made elsewhere, as this class (CudaPoolAllocator.from_handle() for
        a CUDA-pool allocator's calls): never destroyed from Python."""
        allocator = cls.__new__(cls)
        Allocator.__init__(allocator, handle, owned=False)
        return allocator

    @classmethod
    def device(cls, device=0):
        """An allocator of device memory (cuMemAlloc)."""
        return Allocator(_create(library().gpumem_allocator_create_device, device))

    @classmethod
    def device_async(cls, device=0, cuda_pool=None):
        """An allocator of stream-ordered device memory from a CUDA pool: a CUmemoryPool as an int, a
        CudaPoolAllocator's (kept alive as long as this allocator, since it may own the pool), or
        None for the device's current one."""
        keep = _keep_cuda_pool(cuda_pool)
        cuda_pool = getattr(cuda_pool, "cuda_pool", cuda_pool)
        return Allocator(_create(library().gpumem_allocator_create_device_async, device, cuda_pool), keep=keep)

    @classmethod
    def managed(cls, device=0, flags=0):
        """An allocator of managed memory (cuMemAllocManaged); flags 0 or one gpumem.ManagedFlags."""
        return Allocator(_create(library().gpumem_allocator_create_managed, device, int(flags)))

    @classmethod
    def pinned(cls, flags=0):
        """An allocator of pinned host memory (cuMemHostAlloc), with gpumem.HostAllocFlags."""
        return Allocator(_create(library().gpumem_allocator_create_pinned, int(flags)))

    @classmethod
    def host(cls, alignment=0):
        """An allocator of plain host memory, aligned (0: 512 bytes); needs no GPU."""
        return Allocator(_create(library().gpumem_allocator_create_host, _ptr.nonnegative("alignment", alignment)))

    @classmethod
    def vm(cls, device=0, *, map_unit=0, range_size=0):
        """An allocator of device memory mapped into reserved addresses; a Pool over it grows in place."""
        lib = library()
        params = _types.VmParams()
        lib.gpumem_vm_params_init(ctypes.byref(params), ctypes.sizeof(params))
        params.device = device
        params.map_unit = _ptr.nonnegative("map_unit", map_unit)
        params.range_size = _ptr.nonnegative("range_size", range_size)
        return VmAllocator(_create(lib.gpumem_allocator_create_vm, ctypes.byref(params)))

    @classmethod
    def cuda_pool(
        cls,
        device=0,
        *,
        source=CudaPoolSource.CURRENT,
        pool=None,
        max_size=0,
        release_threshold=CUDA_POOL_KEEP_THRESHOLD,
    ):
        """An allocator over a CUDA memory pool (cuMemAllocFromPoolAsync on each call's stream). With
        CudaPoolSource.EXTERNAL, `pool` is a CUmemoryPool as an int or a CudaPoolAllocator's (kept
        alive as long as this allocator, since it may own the pool)."""
        lib = library()
        params = _types.CudaPoolParams()
        lib.gpumem_cuda_pool_params_init(ctypes.byref(params), ctypes.sizeof(params))
        keep = _keep_cuda_pool(pool)
        params.device, params.source, params.pool = device, source, getattr(pool, "cuda_pool", pool)
        params.max_size = _ptr.nonnegative("max_size", max_size)
        params.release_threshold = _ptr.nonnegative("release_threshold", release_threshold)
        return CudaPoolAllocator(_create(lib.gpumem_allocator_create_cuda_pool, ctypes.byref(params)), keep=keep)

    @property
    def device_id(self):
        """The device the memory is on, or -1 for host memory."""
        out = ctypes.c_int32()
        library().gpumem_allocator_get_device(self._handle, ctypes.byref(out))
        return out.value

    def alloc(self, size, stream=0):
        """Allocates `size` bytes for use on `stream` (a CUstream as an int; 0 is the legacy stream)."""
        _ptr.nonnegative("size", size)
        out = ctypes.c_void_p()
        library().gpumem_alloc(self._handle, size, stream, ctypes.byref(out))
        buffer = Buffer(self, out.value, size, stream)
        self._buffers[buffer.ptr] = buffer
        return buffer

    def free(self, memory, stream=None):
        """Frees a Buffer of this allocator (as Buffer.free()), or memory given as an int address:
        that of a live Buffer from this object's alloc() frees that Buffer."""
        if isinstance(memory, Buffer):
            if memory.allocator is not self:
                raise ValueError(f"{memory!r} comes from another allocator")
            memory.free(stream)
            return
        address = _ptr.memory(memory).address
        buffer = self._buffers.get(address)
        if buffer is not None and not buffer.freed:
            # Through the Buffer, whose finalizer would otherwise free the address again later,
            # when it may be another allocation's.
            buffer.free(stream)
        else:
            library().gpumem_free(self._handle, address, stream or 0)

    def stats(self):
        """The allocator's statistics."""
        stats = _types.new(_types.AllocatorStats)
        library().gpumem_allocator_get_stats(self._handle, ctypes.byref(stats))
        return _from_struct(AllocatorStats, stats)

    def reset_peaks(self):
        """Sets the peaks of the statistics to the current values."""
        library().gpumem_allocator_reset_peaks(self._handle)

    def set_peer_access(self, peer_device, access=PeerAccess.READ_WRITE):
        """Lets another device's kernels reach this allocator's memory (PeerAccess.NONE: stops them,
        where the kind allows); NotSupported for kinds that cannot share their memory."""
        library().gpumem_allocator_set_peer_access(self._handle, peer_device, int(access))

    def add_hook(self, events, fn):
        """Calls fn(HookInfo) on the given HookEvent events, on the thread of each call; returns a
        Hook, whose remove() (or with block) removes it. fn is kept as long as the library may call
        it: a fn that refers to its allocator keeps that allocator from being collected."""
        _require_callable("fn", fn)
        hook = Hook(self, HookEvent(events), fn)
        out = ctypes.c_uint64()
        try:
            library().gpumem_allocator_add_hook(self._handle, int(events), hook._callback, None, ctypes.byref(out))
        except BaseException:
            hook._held.release()
            raise
        self._callbacks.append(hook._held)
        hook.id = out.value
        return hook


def _create(make, *args):
    out = ctypes.c_void_p()
    make(*args, ctypes.byref(out))
    return out.value


def _keep_cuda_pool(pool):
    # A CudaPoolAllocator's pool may be its own (CudaPoolSource.NEW), destroyed with it.
    return () if pool is None or isinstance(pool, int) else (pool,)


class Pool(Allocator):
    """A caching pool over an upstream allocator, which it keeps alive; `limit` is the most bytes it
    may hold (0: none), `limit_fraction` the same as a share of the device's memory."""

    def __init__(self, upstream, limit=0, *, limit_fraction=0.0):
        lib = library()
        params = _types.PoolParams()
        lib.gpumem_pool_params_init(ctypes.byref(params), ctypes.sizeof(params))
        params.upstream, params.limit_fraction = upstream.handle, limit_fraction
        params.limit = _ptr.nonnegative("limit", limit)
        super().__init__(_create(lib.gpumem_pool_create, ctypes.byref(params)), keep=(upstream,))
        self.upstream = upstream

    def release(self, stream=0, all_streams=True):
        """Returns cached whole blocks to the upstream: of every arena, or of `stream`'s only."""
        library().gpumem_pool_release(self._handle, stream, 1 if all_streams else 0)

    def info(self):
        """What the pool holds now."""
        info = _types.new(_types.PoolInfo)
        library().gpumem_pool_get_info(self._handle, ctypes.byref(info))
        return _from_struct(PoolInfo, info)

    def growth_info(self):
        """What the pool's growth has cost: bytes mapped and moved, and the driver time."""
        info = _types.new(_types.PoolGrowthInfo)
        library().gpumem_pool_get_growth_info(self._handle, ctypes.byref(info))
        return _from_struct(PoolGrowthInfo, info)

    @classmethod
    def from_handle(cls, handle):
        """Borrows a pool made elsewhere: never destroyed from Python; its upstream is not known."""
        pool = super().from_handle(handle)
        pool.upstream = None
        return pool

    def set_limit(self, limit):
        """Sets the most bytes the pool may hold from its upstream (0: no limit)."""
        library().gpumem_pool_set_limit(self._handle, _ptr.nonnegative("limit", limit))

    def set_soft_limit(self, soft_limit):
        """Before the pool grows past `soft_limit` bytes (0: none) it gives back what it caches; it
        never refuses an allocation for it."""
        library().gpumem_pool_set_soft_limit(self._handle, _ptr.nonnegative("soft_limit", soft_limit))

    def set_limit_fraction(self, fraction):
        """Sets the limit as a fraction in (0, 1] of the device's memory; InvalidArgument for a
        pool of host memory."""
        library().gpumem_pool_set_limit_fraction(self._handle, fraction)

    def set_stream_reuse(self, reuse):
        """Sets whether the pool lends free memory across streams, as a StreamReuse."""
        library().gpumem_pool_set_stream_reuse(self._handle, int(reuse))

    def set_page_reclaim(self, enable):
        """Sets whether the pool, over address ranges, moves the whole free units of any stream's
        arena to where memory is needed before it maps new memory (on by default)."""
        library().gpumem_pool_set_page_reclaim(self._handle, 1 if enable else 0)

    def record_stream(self, memory, stream):
        """Marks a live allocation (a Buffer or an address) as used on another stream too, so that
        once freed it is handed out again only after that stream's work up to the free (PyTorch's
        record_stream)."""
        library().gpumem_pool_record_stream(self._handle, _ptr.memory(memory, writable=False).address, stream)

    def snapshot_json(self, path):
        """Writes the pool's snapshot as JSON to a file (created or replaced): its totals, then its
        segments with their blocks (docs/pool.md gives the shape)."""
        library().gpumem_pool_snapshot_json(self._handle, os.fsencode(os.fspath(path)))

    def snapshot(self):
        """Every block the pool holds, as dicts (segment, segment_size, address, size, requested,
        state, stream), in order of segment and address."""
        blocks, errors = [], []

        def collect(block, _user_data):
            try:
                b = block.contents
                blocks.append(
                    {
                        "segment": b.segment or 0,
                        "segment_size": b.segment_size,
                        "address": b.address or 0,
                        "size": b.size,
                        "requested": b.requested,
                        "state": BlockState(b.state),
                        "stream": b.stream or 0,
                    }
                )
            except BaseException as error:  # raised again once the call returns
                errors.append(error)

        library().gpumem_pool_snapshot(self._handle, _types.block_fn(collect), None)
        if errors:
            raise errors[0]
        return blocks


class CudaPoolAllocator(Allocator):
    """An allocator over a CUDA memory pool, from Allocator.cuda_pool(): the pool's own counters
    and settings, beside the allocator's statistics."""

    @property
    def cuda_pool(self):
        """The CUDA memory pool (a CUmemoryPool / cudaMemPool_t) as an int, for calls gpumem does not
        wrap; it lives as long as the allocator."""
        out = ctypes.c_void_p()
        library().gpumem_cuda_pool_get(self._handle, ctypes.byref(out))
        return out.value or 0

    def info(self):
        """What the CUDA pool holds: its numbers, counting any other user of a shared pool."""
        info = _types.new(_types.CudaPoolInfo)
        library().gpumem_cuda_pool_get_info(self._handle, ctypes.byref(info))
        return _from_struct(CudaPoolInfo, info)

    def reset_pool_peaks(self):
        """Restarts the CUDA pool's high watermarks (reserved_high, used_high) from now; reset_peaks()
        resets the allocator's statistics."""
        library().gpumem_cuda_pool_reset_peaks(self._handle)

    def set_release_threshold(self, nbytes):
        """Sets the bytes the CUDA pool keeps reserved at a synchronize (2**64 - 1: everything)."""
        library().gpumem_cuda_pool_set_release_threshold(self._handle, _ptr.nonnegative("nbytes", nbytes))

    def trim(self, keep_bytes=0):
        """Returns the CUDA pool's unused memory to the system until it holds about `keep_bytes`."""
        library().gpumem_cuda_pool_trim(self._handle, _ptr.nonnegative("keep_bytes", keep_bytes))


class VmAllocator(Allocator):
    """An allocator of device memory mapped into reserved addresses, from Allocator.vm()."""

    def info(self):
        """Its map unit and range size as in effect, and the addresses reserved and memory mapped now."""
        info = _types.new(_types.VmInfo)
        library().gpumem_vm_get_info(self._handle, ctypes.byref(info))
        return _from_struct(VmInfo, info)


def set_device_pool_config(config):
    """Sets how the device pools not made yet are built, in the syntax of GPUMEM_POOL_CONF
    ("backend:classic", "backend:vm,map_unit:2MiB,page_reclaim:false"); Busy once one is made."""
    library().gpumem_pool_set_device_config(config.encode() if config is not None else None)


def device_pool(device=0):
    """The pool of a device (gpumem_pool_get_device): it lives as long as the process, and Python
    never destroys it."""
    return Pool.from_handle(_create(library().gpumem_pool_get_device, device))
