"""The pinning service (pin.h): page-locks host ranges, counted, shared by the whole process.

Ranges are given as for copies (an int address with a size, a gpumem.Buffer, a ctypes object, a
writable buffer). Unpin before memory is freed, and call pin_forget() for a range about to be
freed, so that no cached registration outlives it; pinned() does both for Python's own buffers.
"""
import contextlib
import ctypes
import dataclasses
import enum

from . import _ptr, _types
from ._lib import library
from .errors import Busy


class PinState(enum.IntEnum):
    """How much of a range is pinned (gpumem_pin_state)."""

    NONE = 0
    PARTIAL = 1
    FULL = 2


@dataclasses.dataclass(frozen=True)
class PinStats:
    """Statistics of the pinning service (gpumem_pin_stats_t)."""

    bytes_registered: int
    bytes_pinned: int
    bytes_cached: int
    registrations: int
    pins: int
    unpins: int
    hits: int
    misses: int
    evictions: int
    cache_budget: int


def _range(obj, size, writable=True):
    mem = _ptr.memory(obj, writable)
    return mem, _ptr.sized("the range", mem, size)


def pin(obj, size=None):
    """Pins a host range (default: all of obj), registering what is not registered yet."""
    mem, size = _range(obj, size)
    library().gpumem_pin(mem.address, size, 0)


def unpin(obj, size=None):
    """Removes one pin from a range; NotOwned if part of it is not pinned."""
    mem, size = _range(obj, size)
    library().gpumem_unpin(mem.address, size)


def pin_query(obj, size=None):
    """How much of a range is pinned through the service, as a PinState."""
    mem, size = _range(obj, size, writable=False)
    out = ctypes.c_int32()
    library().gpumem_pin_query(mem.address, size, ctypes.byref(out))
    return PinState(out.value)


def pin_forget(obj, size=None):
    """Unregisters the cached registrations of a range about to be freed; Busy while it is pinned."""
    mem, size = _range(obj, size)
    library().gpumem_pin_forget(mem.address, size)


def pin_cache_flush():
    """Unregisters every cached registration (those no pin covers)."""
    library().gpumem_pin_cache_flush()


def pin_cache_set_budget(nbytes):
    """Sets the most bytes kept registered under no pin (0 turns the cache off)."""
    library().gpumem_pin_cache_set_budget(_ptr.nonnegative("nbytes", nbytes))


def pin_stats():
    """Statistics of the pinning service."""
    stats = _types.new(_types.PinStats)
    library().gpumem_pin_get_stats(ctypes.byref(stats))
    return PinStats(**{f.name: getattr(stats, f.name) for f in dataclasses.fields(PinStats)})


def _python_owned(obj):
    # Memory Python frees on its own (bytearray, ctypes objects), as opposed to addresses and
    # gpumem buffers, whose owner decides.
    return not isinstance(obj, int) and not hasattr(obj, "_gpumem_memory")


@contextlib.contextmanager
def pinned(obj, size=None, *, forget=None):
    """Pins a range for the with block, which gets its address; on exit unpins it and, if `forget`
    (by default for Python's own buffers, which may be freed any time after), forgets it."""
    mem, size = _range(obj, size)
    library().gpumem_pin(mem.address, size, 0)
    try:
        yield mem.address
    finally:
        library().gpumem_unpin(mem.address, size)
        if forget if forget is not None else _python_owned(obj):
            try:
                library().gpumem_pin_forget(mem.address, size)
            except Busy:
                pass  # pinned again elsewhere (an enclosing block): the last one out forgets
