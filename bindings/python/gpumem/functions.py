"""An allocator whose memory comes from Python functions (gpumem_allocator_create_functions).

The library calls the functions from whichever thread allocates or frees, concurrently, through
ctypes callbacks. No exception may unwind into C: each callback turns one into a status. A
MemoryError is the functions' way to say "no memory" (a pool above then returns cached memory and
retries) and becomes GPUMEM_ERROR_OUT_OF_MEMORY quietly; any other exception is printed to stderr,
kept in `errors`, and becomes the status of a gpumem.Error it is, else GPUMEM_ERROR_INTERNAL.
"""
import ctypes
import threading

from . import _ptr, _types
from ._lib import library
from .allocator import Allocator, _create, _report, _require_callable
from .errors import Error, InternalError, OutOfMemory


def _status_of(error, errors, where):
    if isinstance(error, MemoryError):
        return OutOfMemory.STATUS
    errors.append(error)
    _report(error, where)
    if isinstance(error, Error) and isinstance(error.status, int) and error.status < 0:
        return error.status
    return InternalError.STATUS


def _keep(table, lock, memory):
    with lock:
        # An address live already stays its first owner's: the library refuses the second one.
        table.setdefault(memory.address, memory)


def _drop(table, lock, address):
    with lock:
        table.pop(address, None)


class FunctionsAllocator(Allocator):
    """An allocator over Python functions (CuPy's CFunctionAllocator, with a stream).

    alloc(size, device, stream) returns the memory: an int address, or any object the copies take
    (a ctypes buffer, a bytearray, a gpumem Buffer), which is then kept alive until its free; it
    raises MemoryError when there is none. free(ptr, size, device, stream) gives memory back, by
    its int address; None frees nothing beyond dropping what alloc returned.

    With `reserve`, a pool over the allocator grows its segments in place: reserve(size, device)
    returns a range of addresses aligned to `map_unit` (kept alive as alloc's memory is, until
    unreserve), and unreserve, map and unmap(ptr, size, device) release a range and map or unmap
    part of it; None does nothing there (host memory is always mapped). `map_unit` is a power of
    two of at least 512, `range_size` a multiple of it.

    The functions must be thread-safe. Exceptions they raise other than MemoryError are printed
    to stderr and kept in `errors`. The allocator keeps its callbacks for as long as the library
    may call them.
    """

    def __init__(
        self,
        alloc,
        free=None,
        *,
        device=-1,
        reserve=None,
        unreserve=None,
        map=None,
        unmap=None,
        map_unit=0,
        range_size=0,
    ):
        _require_callable("alloc", alloc)
        optional = {"free": free, "reserve": reserve, "unreserve": unreserve, "map": map, "unmap": unmap}
        for name, fn in optional.items():
            if fn is not None:
                _require_callable(name, fn)
        if reserve is None and ((unreserve, map, unmap) != (None, None, None) or map_unit or range_size):
            raise TypeError("unreserve, map, unmap, map_unit and range_size need reserve")
        errors, lock = [], threading.Lock()
        live, ranges = {}, {}
        self.errors = errors

        # The callbacks refer to neither the allocator nor its object's finalizer, which keeps
        # them: no reference cycle.
        def alloc_cb(_context, size, device_, stream, out_ptr):
            try:
                memory = _ptr.memory(alloc(size, device_, stream or 0))
                if memory.size is not None and memory.size < size:
                    raise ValueError(f"alloc returned {memory.size} bytes for a request of {size}")
                _keep(live, lock, memory)
                out_ptr[0] = memory.address
                return 0
            except BaseException as error:  # nothing may unwind into C
                return _status_of(error, errors, f"gpumem alloc function {alloc!r}")

        def free_cb(_context, ptr, size, device_, stream):
            try:
                if free is not None:
                    free(ptr or 0, size, device_, stream or 0)
                _drop(live, lock, ptr or 0)
                return 0
            except BaseException as error:
                return _status_of(error, errors, f"gpumem free function {free!r}")

        def reserve_cb(_context, size, device_, out_ptr):
            try:
                memory = _ptr.memory(reserve(size, device_))
                if memory.size is not None and memory.size < size:
                    raise ValueError(f"reserve returned {memory.size} bytes for a range of {size}")
                _keep(ranges, lock, memory)
                out_ptr[0] = memory.address
                return 0
            except BaseException as error:
                return _status_of(error, errors, f"gpumem reserve function {reserve!r}")

        def range_cb(fn, name, release):
            def call(_context, ptr, size, device_):
                try:
                    if fn is not None:
                        fn(ptr or 0, size, device_)
                    if release:
                        _drop(ranges, lock, ptr or 0)
                    return 0
                except BaseException as error:
                    return _status_of(error, errors, f"gpumem {name} function {fn!r}")

            return call

        # The ctypes function objects themselves are kept: a field read back from the struct is
        # a new object that does not keep the trampoline alive.
        callbacks = [_types.alloc_fn(alloc_cb), _types.free_fn(free_cb)]
        functions = _types.AllocatorFunctions()
        functions.struct_size = ctypes.sizeof(functions)
        functions.device = device
        functions.alloc, functions.free = callbacks
        if reserve is not None:
            callbacks += [
                _types.reserve_fn(reserve_cb),
                _types.map_fn(range_cb(unreserve, "unreserve", True)),
                _types.map_fn(range_cb(map, "map", False)),
                _types.map_fn(range_cb(unmap, "unmap", False)),
            ]
            functions.reserve, functions.unreserve, functions.map, functions.unmap = callbacks[2:]
            functions.map_unit = _ptr.nonnegative("map_unit", map_unit)
            functions.range_size = _ptr.nonnegative("range_size", range_size)
        handle = _create(library().gpumem_allocator_create_functions, ctypes.byref(functions))
        # The memory handed out stays referenced until the library has no use for it.
        super().__init__(handle, keep=(callbacks, live, ranges))

    @classmethod
    def from_handle(cls, handle):
        """Not available: a borrowed handle has no Python functions behind it; use Allocator.from_handle()."""
        raise TypeError("FunctionsAllocator.from_handle(): use Allocator.from_handle() for a borrowed allocator")
