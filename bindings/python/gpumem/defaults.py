"""What a NULL allocator means (allocator.h): each device's process default and each thread's
override; and the reclaim callbacks that pools run when out of memory (pool.h).

While the library relies on an allocator as a default or an override, Python holds it too, so
neither it nor the callbacks of a FunctionsAllocator are collected under the library. Restore a
thread's override before the thread ends (using_allocator() does): one left set at thread exit is
given up by the library, but stays held by Python for the life of the process.
"""
import contextlib
import ctypes
import threading

from . import _types
from ._lib import library
from .allocator import Allocator, _Held, _report, _require_callable, device_pool

_held_lock = threading.Lock()
_held = {}  # id(allocator) -> [allocator, how many defaults and overrides name it]
_defaults_lock = threading.Lock()
_defaults = {}  # device -> the Allocator set as its default from Python
_thread = threading.local()  # .allocator: the Allocator this thread set as its override


def _hold(allocator):
    if allocator is None:
        return
    with _held_lock:
        _held.setdefault(id(allocator), [allocator, 0])[1] += 1


def _let_go(allocator):
    if allocator is None:
        return
    with _held_lock:
        entry = _held.get(id(allocator))
        if entry is not None and entry[0] is allocator:
            entry[1] -= 1
            if entry[1] == 0:
                del _held[id(allocator)]


def _handle(allocator):
    return None if allocator is None else allocator.handle


def _known(handle, candidate):
    """The Allocator object for a handle: `candidate` if it is that allocator, else a borrowed one."""
    if not handle:
        return None
    if candidate is not None and candidate.handle == handle:
        return candidate
    return Allocator.from_handle(handle)


def set_default_allocator(device, allocator):
    """Sets the process-wide default allocator of a device (what a NULL allocator means on threads
    without an override when the device is current); None restores the device's pool. A thread's
    override keeps precedence on its thread. Needs a driver."""
    with _defaults_lock:
        _hold(allocator)
        try:
            library().gpumem_allocator_set_default(device, _handle(allocator))
        except BaseException:
            _let_go(allocator)
            raise
        previous = _defaults.pop(device, None)
        if allocator is not None:
            _defaults[device] = allocator
    _let_go(previous)


def default_allocator(device=0):
    """The process-wide default allocator of a device: the one set from Python, the device's pool
    (a borrowed Pool) unless another was set, or a borrowed Allocator for one set elsewhere."""
    out = ctypes.c_void_p()
    library().gpumem_allocator_get_default(device, ctypes.byref(out))
    candidate = _defaults.get(device)
    if candidate is not None and candidate.handle == out.value:
        return candidate
    pool = device_pool(device)
    return pool if pool.handle == out.value else Allocator.from_handle(out.value)


def thread_allocator():
    """The calling thread's override, or None if it has none."""
    out = ctypes.c_void_p()
    library().gpumem_allocator_get_thread(ctypes.byref(out))
    return _known(out.value, getattr(_thread, "allocator", None))


def set_thread_allocator(allocator):
    """Sets the calling thread's override, for every device (CuPy's using_allocator), or removes it
    with None; returns the override it replaces (None if none). Restore that one when done."""
    mine = getattr(_thread, "allocator", None)
    _hold(allocator)
    out = ctypes.c_void_p()
    try:
        library().gpumem_allocator_set_thread(_handle(allocator), ctypes.byref(out))
    except BaseException:
        _let_go(allocator)
        raise
    _thread.allocator = allocator
    previous = _known(out.value, mine)
    _let_go(mine)
    return previous


@contextlib.contextmanager
def using_allocator(allocator):
    """Makes `allocator` the calling thread's override for the with block, which gets it; the
    previous override comes back on exit."""
    previous = set_thread_allocator(allocator)
    try:
        yield allocator
    finally:
        set_thread_allocator(previous)


def current_allocator():
    """What a NULL allocator means on this thread now: its override, else the default of the
    current device (which needs a driver)."""
    override = thread_allocator()
    if override is not None:
        return override
    device = ctypes.c_int32()
    library().gpumem_allocator_get_device(None, ctypes.byref(device))
    return default_allocator(device.value)



class Reclaim:
    """A reclaim callback from reclaim_add(). Exceptions raised by its function cannot reach the
    allocation that ran out of memory; they are printed to stderr and kept in `errors`."""

    def __init__(self, fn):
        self.fn = fn
        self.id = None
        self.errors = []
        errors = self.errors

        def call(device, size, _user_data):
            try:
                fn(device, size)
            except BaseException as error:  # nothing may unwind into C
                errors.append(error)
                _report(error, f"gpumem reclaim callback {fn!r}")

        self._held = _Held(_types.reclaim_fn, call)
        self._callback = self._held.function

    def remove(self):
        """Removes the callback; removing it again does nothing. Returns once no other thread runs
        it (then fn is let go)."""
        if self.id is None:
            return
        library().gpumem_reclaim_remove(self.id)
        self.id = None
        self._held.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def reclaim_add(fn):
    """Registers fn(device, size), run by every pool that is out of memory (after returning its
    cached blocks) so that garbage holding gpumem memory can be dropped, gc.collect() for one; the
    pool retries once all have run. It runs on the allocating thread and may free gpumem memory.
    Returns a Reclaim, whose remove() (or with block) removes it; until then it stays registered."""
    _require_callable("fn", fn)
    reclaim = Reclaim(fn)
    out = ctypes.c_uint64()
    try:
        library().gpumem_reclaim_add(reclaim._callback, None, ctypes.byref(out))
    except BaseException:
        reclaim._held.release()
        raise
    reclaim.id = out.value
    return reclaim
