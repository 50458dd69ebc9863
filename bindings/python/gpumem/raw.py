"""Raw memory of every kind, one driver allocation each (memory.h): device memory (synchronous and
stream-ordered), pinned host memory, registered host ranges and managed memory.

Each allocation is a RawBuffer, freed by the function of its kind: by free(), at the end of a with
block, or when collected. Memory arguments are given as for copies (an int address, a Buffer or
RawBuffer, a ctypes object, a writable buffer), with the size where Python does not know it.
"""
import ctypes
import dataclasses
import enum
import weakref

from . import _ptr, _types
from ._lib import call_quietly, library
from .errors import Error
from .memory import pointer_info


class HostAllocFlags(enum.IntFlag):
    """Flags of host_alloc() and Allocator.pinned() (gpumem_host_alloc_flags)."""

    PORTABLE = 0x1
    DEVICEMAP = 0x2
    WRITECOMBINED = 0x4


class HostRegisterFlags(enum.IntFlag):
    """Flags of host_register() (gpumem_host_register_flags)."""

    PORTABLE = 0x1
    DEVICEMAP = 0x2
    IOMEMORY = 0x4
    READ_ONLY = 0x8


class ManagedFlags(enum.IntFlag):
    """Flags of managed_alloc() and Allocator.managed() (gpumem_managed_flags)."""

    ATTACH_GLOBAL = 0x1
    ATTACH_HOST = 0x2


class Location(enum.IntEnum):
    """Where managed memory lives or is wanted, besides a device index (gpumem_location)."""

    HOST = -1
    NONE = -2


class Advice(enum.IntEnum):
    """Advice for managed_advise() (gpumem_advice)."""

    SET_READ_MOSTLY = 1
    UNSET_READ_MOSTLY = 2
    SET_PREFERRED_LOCATION = 3
    UNSET_PREFERRED_LOCATION = 4
    SET_ACCESSED_BY = 5
    UNSET_ACCESSED_BY = 6


@dataclasses.dataclass(frozen=True)
class ManagedRangeInfo:
    """The advice and prefetch state of a managed range (gpumem_managed_range_info_t). Locations
    are device indices or Location members; bit d of `accessed_by` is device d's advice."""

    read_mostly: bool
    preferred_location: int
    last_prefetch_location: int
    accessed_by: int


def _location(value):
    return Location(value) if value < 0 else value


class RawKind(enum.Enum):
    """Which allocation function gave a RawBuffer, and so which frees it."""

    DEVICE = "device"  # device_alloc(): device_free, or device_free_async given a stream
    DEVICE_ASYNC = "device_async"  # device_alloc_async(), device_alloc_from_pool(): device_free_async
    PINNED = "pinned"  # host_alloc(): host_free
    MANAGED = "managed"  # managed_alloc(): managed_free


def _free_call(kind, ptr, stream):
    # The library function that frees memory of `kind`, and its arguments.
    if kind is RawKind.PINNED:
        return "gpumem_host_free", (ptr,)
    if kind is RawKind.MANAGED:
        return "gpumem_managed_free", (ptr,)
    if stream is None:
        return "gpumem_device_free", (ptr,)
    return "gpumem_device_free_async", (ptr, stream)


class RawBuffer(_ptr.Owned):
    """One raw allocation: `kind` (a RawKind), `ptr`, `size`, `device` (-1 for pinned host memory,
    None where the driver could not tell) and `stream` (that of a stream-ordered allocation, else
    None). Stream-ordered memory that is collected rather than freed is freed on that stream, which
    must then still exist: free() it before destroying its stream."""

    def __init__(self, kind, ptr, size, device, stream=None):
        self.kind, self.ptr, self.size, self.device, self.stream = kind, ptr, size, device, stream
        self._arm()

    def _arm(self):
        name, args = _free_call(self.kind, self.ptr, self.stream)
        self._finalizer = weakref.finalize(self, call_quietly, name, *args)

    @property
    def freed(self):
        """Whether free() gave the memory back."""
        return not self._finalizer.alive

    def free(self, stream=None):
        """Frees the memory with the function of its kind. Device memory is freed ordered on
        `stream` if given (device_free_async), stream-ordered memory else on its own stream;
        pinned and managed memory take no stream. Freeing it again does nothing."""
        if not self._finalizer.alive:
            return
        if stream is not None and self.kind in (RawKind.PINNED, RawKind.MANAGED):
            raise ValueError(f"{self.kind.value} memory is freed synchronously: pass no stream")
        # Taken from the finalizer first, which only one caller gets: of two threads freeing at
        # once, one frees, and the other does not free the address again.
        if self._finalizer.detach() is None:
            return
        name, args = _free_call(self.kind, self.ptr, self.stream if stream is None else stream)
        try:
            getattr(library(), name)(*args)
        except BaseException:
            self._arm()  # still live
            raise

    def __repr__(self):
        state = "freed" if self.freed else f"device={self.device}"
        return f"<gpumem.RawBuffer {self.kind.value} ptr={self.ptr:#x} size={self.size} {state}>"


def _alloc(fn, *args):
    out = ctypes.c_void_p()
    fn(*args, ctypes.byref(out))
    return out.value


def device_alloc(size, device=0):
    """Device memory, synchronously (cuMemAlloc); freed by device_free, or ordered on a stream."""
    ptr = _alloc(library().gpumem_device_alloc, device, _ptr.nonnegative("size", size))
    return RawBuffer(RawKind.DEVICE, ptr, size, device)


def device_alloc_async(size, device=0, stream=0):
    """Device memory ordered on `stream`, from the device's current CUDA pool (cuMemAllocAsync);
    freed on that stream unless free() names another."""
    ptr = _alloc(library().gpumem_device_alloc_async, device, _ptr.nonnegative("size", size), stream)
    return RawBuffer(RawKind.DEVICE_ASYNC, ptr, size, device, stream)


def device_alloc_from_pool(cuda_pool, size, stream=0):
    """Device memory ordered on `stream` from a CUDA memory pool, a CUmemoryPool as an int or a
    CudaPoolAllocator (cuMemAllocFromPoolAsync); freed on that stream unless free() names another.
    The buffer's `device` is the one pointer_info() reports (None if it cannot tell)."""
    pool = getattr(cuda_pool, "cuda_pool", cuda_pool)
    ptr = _alloc(library().gpumem_device_alloc_from_pool, pool, _ptr.nonnegative("size", size), stream)
    return RawBuffer(RawKind.DEVICE_ASYNC, ptr, size, _device_of(ptr), stream)


def _device_of(ptr):
    try:
        return pointer_info(ptr).device
    except Error:
        return None


def host_alloc(size, flags=0):
    """Page-locked (pinned) host memory (cuMemHostAlloc), with HostAllocFlags."""
    ptr = _alloc(library().gpumem_host_alloc, _ptr.nonnegative("size", size), int(flags))
    return RawBuffer(RawKind.PINNED, ptr, size, -1)


def managed_alloc(size, device=0, flags=0):
    """Managed (unified) memory, reachable from the host and every device (cuMemAllocManaged);
    flags 0 (global) or one ManagedFlags."""
    ptr = _alloc(library().gpumem_managed_alloc, device, _ptr.nonnegative("size", size), int(flags))
    return RawBuffer(RawKind.MANAGED, ptr, size, device)


def _unregister_quietly(ptr, keep):
    # `keep` holds the registered memory until it is unregistered.
    call_quietly("gpumem_host_unregister", ptr)


class HostRegistration:
    """A host range page-locked by host_register(): `ptr`, `size`, `flags`. unregister(), the end
    of a with block, or collection ends it; the memory it names is kept alive until then."""

    def __init__(self, memory, size, flags):
        self.ptr, self.size, self.flags = memory.address, size, flags
        self._memory = memory
        self._finalizer = weakref.finalize(self, _unregister_quietly, memory.address, memory.keep)

    @property
    def registered(self):
        """Whether the range is still registered."""
        return self._finalizer.alive

    def unregister(self):
        """Ends the page-locking; doing it again does nothing."""
        if not self._finalizer.alive:
            return
        library().gpumem_host_unregister(self.ptr)
        self._finalizer.detach()
        self._memory = None  # a bytearray may be resized again

    def device_pointer(self):
        """The device address of the range's start, registered with HostRegisterFlags.DEVICEMAP
        (or on a device with unified addressing)."""
        return host_get_device_pointer(self.ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.unregister()

    def _gpumem_memory(self):
        if not self.registered:
            raise ValueError(f"{self!r} is unregistered: pass the memory itself")
        return _ptr.Memory(self.ptr, self.size, self)

    def __repr__(self):
        state = "registered" if self.registered else "unregistered"
        return f"<gpumem.HostRegistration ptr={self.ptr:#x} size={self.size} {state}>"


def host_register(obj, size=None, flags=0):
    """Page-locks an existing host range (default: all of obj) with HostRegisterFlags
    (cuMemHostRegister); AlreadyRegistered if it begins or ends in page-locked memory. Returns a
    HostRegistration. Ranges the pinning service (gpumem.pin) registered are not for this."""
    memory = _ptr.memory(obj)
    size = _ptr.sized("the range", memory, size)
    library().gpumem_host_register(memory.address, size, int(flags))
    return HostRegistration(memory, size, HostRegisterFlags(flags))


def host_get_device_pointer(obj):
    """The device address of mapped page-locked host memory, as an int; interior addresses map
    to interior device addresses."""
    out = ctypes.c_void_p()
    library().gpumem_host_get_device_pointer(_ptr.memory(obj, writable=False).address, ctypes.byref(out))
    return out.value or 0


def _range(obj, size, writable=True):
    memory = _ptr.memory(obj, writable)
    return memory, _ptr.sized("the range", memory, size)


def managed_prefetch(obj, location, size=None, stream=0):
    """Migrates a managed range (default: all of obj) to a device index or Location.HOST,
    ordered on `stream` (cuMemPrefetchAsync)."""
    memory, size = _range(obj, size)
    library().gpumem_managed_prefetch(memory.address, size, int(location), stream)


def managed_advise(obj, advice, location=Location.NONE, size=None):
    """Gives the driver an Advice about a managed range (default: all of obj) for a device index
    or Location.HOST (cuMemAdvise); the read-mostly advice takes no location."""
    memory, size = _range(obj, size)
    library().gpumem_managed_advise(memory.address, size, int(advice), int(location))


def managed_range_info(obj, size=None):
    """The advice and prefetch state of a managed range (default: all of obj), a ManagedRangeInfo."""
    memory, size = _range(obj, size, writable=False)
    info = _types.new(_types.ManagedRangeInfo)
    library().gpumem_managed_get_range_info(memory.address, size, ctypes.byref(info))
    return ManagedRangeInfo(
        read_mostly=bool(info.read_mostly),
        preferred_location=_location(info.preferred_location),
        last_prefetch_location=_location(info.last_prefetch_location),
        accessed_by=info.accessed_by,
    )
