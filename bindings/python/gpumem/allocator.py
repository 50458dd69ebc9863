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
import traceback
import weakref

from . import _ptr, _types
from ._lib import library
from .errors import Error, LibraryError

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


def _free_quietly(allocator, ptr, stream):
    if allocator._destroyed:
        return  # closed by force, which freed the memory; the handle may name another allocator now
    try:
        library().gpumem_free(allocator.handle, ptr, stream)
    except (Error, LibraryError):
        pass


# What allocators the library would not destroy rely on: their callbacks may still be called.
_kept_for_good = []
# Functions of the handle that close() has destroyed, for what keeps handles elsewhere (gpumem.cupy).
_close_listeners = []


def _destroy_quietly(handle, keep):
    # `keep` holds what must outlive the handle (a pool's upstream, callbacks) until it is destroyed.
    try:
        library().gpumem_allocator_destroy(handle)
    except (Error, LibraryError):
        _kept_for_good.append(keep)


class Buffer(_ptr.Owned):
    """Memory from an allocator: `ptr`, `size` and `stream`. Freed by free(), at the end of a
    with block, or when collected; it keeps its allocator alive until then."""

    def __init__(self, allocator, ptr, size, stream):
        self.allocator, self.ptr, self.size, self.stream = allocator, ptr, size, stream
        self._finalizer = weakref.finalize(self, _free_quietly, allocator, ptr, stream)

    @property
    def freed(self):
        """Whether the memory went back to the allocator (by free(), or by closing it with force)."""
        return not self._finalizer.alive or self.allocator._destroyed

    def free(self, stream=None):
        """Frees the memory, on `stream` if given, else on the stream it was allocated on. Freeing
        a freed buffer does nothing: the address may belong to another buffer by then."""
        if self.freed:
            self._finalizer.detach()
            return
        library().gpumem_free(self.allocator.handle, self.ptr, self.stream if stream is None else stream)
        self._finalizer.detach()

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

        self._callback = _types.hook_fn(call)

    def remove(self):
        """Removes the hook; removing it again does nothing."""
        if self.id is None:
            return
        library().gpumem_allocator_remove_hook(self.allocator.handle, self.id)
        self.id = None

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
        # Hook callbacks stay alive as long as the allocator object, removed or not: a call on
        # another thread may still run a hook it saw before the removal.
        self._callbacks = []
        self._finalizer = weakref.finalize(self, _destroy_quietly, handle, keep) if owned else None

    @property
    def handle(self):
        """The gpumem_allocator_t* as an int."""
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
        if force:
            library().gpumem_allocator_destroy_force(self._handle)
        else:
            library().gpumem_allocator_destroy(self._handle)
        self._destroyed = True
        self._finalizer.detach()
        for listener in _close_listeners:
            listener(self._handle)

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
        CudaPoolAllocator's, or None for the device's current one."""
        cuda_pool = getattr(cuda_pool, "cuda_pool", cuda_pool)
        return Allocator(_create(library().gpumem_allocator_create_device_async, device, cuda_pool))

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
        return Allocator(_create(library().gpumem_allocator_create_host, alignment))

    @classmethod
    def vm(cls, device=0, *, map_unit=0, range_size=0):
        """An allocator of device memory mapped into reserved addresses; a Pool over it grows in place."""
        lib = library()
        params = _types.VmParams()
        lib.gpumem_vm_params_init(ctypes.byref(params), ctypes.sizeof(params))
        params.device, params.map_unit, params.range_size = device, map_unit, range_size
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
        """An allocator over a CUDA memory pool (cuMemAllocFromPoolAsync on each call's stream)."""
        lib = library()
        params = _types.CudaPoolParams()
        lib.gpumem_cuda_pool_params_init(ctypes.byref(params), ctypes.sizeof(params))
        params.device, params.source, params.pool = device, source, pool
        params.max_size, params.release_threshold = max_size, release_threshold
        return CudaPoolAllocator(_create(lib.gpumem_allocator_create_cuda_pool, ctypes.byref(params)))

    @classmethod
    def functions(cls, alloc, free=None, **options):
        """An allocator whose memory comes from Python functions: see gpumem.FunctionsAllocator."""
        from .functions import FunctionsAllocator

        return FunctionsAllocator(alloc, free, **options)

    @property
    def device_id(self):
        """The device the memory is on, or -1 for host memory."""
        out = ctypes.c_int32()
        library().gpumem_allocator_get_device(self._handle, ctypes.byref(out))
        return out.value

    def alloc(self, size, stream=0):
        """Allocates `size` bytes for use on `stream` (a CUstream as an int; 0 is the legacy stream)."""
        if size < 0:
            raise ValueError(f"size {size} is negative")
        out = ctypes.c_void_p()
        library().gpumem_alloc(self._handle, size, stream, ctypes.byref(out))
        return Buffer(self, out.value, size, stream)

    def free(self, memory, stream=None):
        """Frees a Buffer of this allocator (as Buffer.free()), or memory given as an int address."""
        if isinstance(memory, Buffer):
            if memory.allocator is not self:
                raise ValueError(f"{memory!r} comes from another allocator")
            memory.free(stream)
        else:
            library().gpumem_free(self._handle, _ptr.memory(memory).address, stream or 0)

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

    def trace(self, path):
        """Starts recording this allocator's events to a file: see gpumem.trace_start()."""
        from .trace import trace_start

        return trace_start(self, path)

    def add_hook(self, events, fn):
        """Calls fn(HookInfo) on the given HookEvent events, on the thread of each call; returns a
        Hook, whose remove() (or with block) removes it."""
        hook = Hook(self, HookEvent(events), fn)
        out = ctypes.c_uint64()
        library().gpumem_allocator_add_hook(self._handle, int(events), hook._callback, None, ctypes.byref(out))
        self._callbacks.append(hook._callback)
        hook.id = out.value
        return hook


def _create(make, *args):
    out = ctypes.c_void_p()
    make(*args, ctypes.byref(out))
    return out.value


class Pool(Allocator):
    """A caching pool over an upstream allocator, which it keeps alive; `limit` is the most bytes it
    may hold (0: none), `limit_fraction` the same as a share of the device's memory."""

    def __init__(self, upstream, limit=0, *, limit_fraction=0.0):
        lib = library()
        params = _types.PoolParams()
        lib.gpumem_pool_params_init(ctypes.byref(params), ctypes.sizeof(params))
        params.upstream, params.limit, params.limit_fraction = upstream.handle, limit, limit_fraction
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

    @classmethod
    def from_handle(cls, handle):
        """Borrows a pool made elsewhere: never destroyed from Python; its upstream is not known."""
        pool = super().from_handle(handle)
        pool.upstream = None
        return pool

    def set_limit(self, limit):
        """Sets the most bytes the pool may hold from its upstream (0: no limit)."""
        library().gpumem_pool_set_limit(self._handle, limit)

    def set_limit_fraction(self, fraction):
        """Sets the limit as a fraction in (0, 1] of the device's memory; InvalidArgument for a
        pool of host memory."""
        library().gpumem_pool_set_limit_fraction(self._handle, fraction)

    def set_stream_reuse(self, reuse):
        """Sets whether the pool lends free memory across streams, as a StreamReuse."""
        library().gpumem_pool_set_stream_reuse(self._handle, int(reuse))

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
        library().gpumem_cuda_pool_set_release_threshold(self._handle, nbytes)

    def trim(self, keep_bytes=0):
        """Returns the CUDA pool's unused memory to the system until it holds about `keep_bytes`."""
        library().gpumem_cuda_pool_trim(self._handle, keep_bytes)


class VmAllocator(Allocator):
    """An allocator of device memory mapped into reserved addresses, from Allocator.vm()."""

    def info(self):
        """Its map unit and range size as in effect, and the addresses reserved and memory mapped now."""
        info = _types.new(_types.VmInfo)
        library().gpumem_vm_get_info(self._handle, ctypes.byref(info))
        return _from_struct(VmInfo, info)


def device_pool(device=0):
    """The pool of a device (gpumem_pool_get_device): it lives as long as the process, and Python
    never destroys it."""
    return Pool.from_handle(_create(library().gpumem_pool_get_device, device))
