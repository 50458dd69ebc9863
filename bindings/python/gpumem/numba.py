"""gpumem as Numba's CUDA memory manager, through Numba's External Memory Management (EMM) plugin
interface: the device arrays Numba allocates come from a Tenant "numba" (gpumem.Tenant) of each
device's pool (gpumem.device_pool), which gpumem.torch and gpumem.cupy share, with budgets of its
own (GPUMEM_NUMBA_LIMIT and GPUMEM_NUMBA_SOFT_LIMIT, or tenant()'s arguments).

    NUMBA_CUDA_MEMORY_MANAGER=gpumem.numba python app.py

or, before Numba makes its first CUDA context:

    import gpumem.numba
    gpumem.numba.use_gpumem_for_numba()

Numba is imported when the plugin class is first needed, never when gpumem is imported.

As with Numba's own memory, frees wait in Numba's queue of pending deallocations, flushed when it
grows past Numba's thresholds, when an allocation runs out of memory, and at a context reset; the
queue is held while `numba.cuda.defer_cleanup()` is active. Memory is allocated and freed on the
legacy default stream, and a freed block is handed out again at once: synchronize work of other
streams that uses an array before the array goes. Pinned and mapped host memory stay Numba's own.

Numba's IPC works as with Numba's own memory: `DeviceNDArray.get_ipc_handle()` gives a handle
that multiprocessing carries (a queue, a pipe, a new process's arguments) and the receiver opens
with `with handle as array:`. The handle is gpumem.ipc's, its file descriptors passed by
multiprocessing: it opens where it is unpickled (gpumem must be importable there), and its
memory is closed at the end of the with block or when the handle is collected. Synchronize
before sending: the receiver's reads are not ordered after the sender's writes.
"""
import ctypes
import inspect
import threading
import weakref

from . import ipc
from ._lib import call_quietly, library
from .allocator import Pool
from .device import query_memory
from .errors import OutOfMemory
from .tenant import kept_tenant

_lock = threading.Lock()
_tenants = {}  # device -> the Tenant "numba", kept for the process: frees may come at its exit
_manager = None  # the plugin class, made on first use


def tenant(device=0, limit=None, soft_limit=None):
    """The Tenant "numba" of `device`'s pool that Numba's arrays come from: made once per device,
    with budgets `limit` and `soft_limit` (bytes or text such as "8GiB"; None: GPUMEM_NUMBA_LIMIT
    and GPUMEM_NUMBA_SOFT_LIMIT, else none). Budgets given for one made already are set on it."""
    with _lock:
        return kept_tenant(_tenants, device, "numba", device, limit, soft_limit, lambda: None)


def _gpumem_free(item):
    """The destructor of Numba's pending deallocations: `item` is (Tenant, address)."""
    owner, ptr = item
    call_quietly("gpumem_free", owner._handle, ptr, 0)


def _finalizer(deallocations, owner, ptr, size):
    def core():
        deallocations.add_item(_gpumem_free, (owner, ptr), size)

    return core


def _nv_binding(driver):
    """Whether Numba drives CUDA through NVIDIA's cuda-python binding rather than its ctypes one."""
    flag = getattr(driver, "USE_NV_BINDING", None)
    if flag is None:
        config = getattr(driver, "config", None)
        flag = getattr(config, "CUDA_USE_NVIDIA_BINDING", None)
    return True if flag is None else bool(flag)  # newer numba-cuda has only NVIDIA's


def _device_pointer(driver, ptr):
    """The pointer object Numba's MemoryPointer holds: a CUdeviceptr with NVIDIA's binding, a
    ctypes integer with Numba's own."""
    # Numba's driver module imports NVIDIA's binding as `binding` exactly when it uses it (newer
    # numba-cuda always does, whatever its configuration flag says).
    binding = getattr(driver, "binding", None)
    if binding is not None and hasattr(binding, "CUdeviceptr"):
        return binding.CUdeviceptr(ptr)
    if _nv_binding(driver) and getattr(driver, "drvapi", None) is None:
        try:
            from cuda.bindings import driver as binding
        except ImportError:
            from cuda import cuda as binding
        return binding.CUdeviceptr(ptr)
    drvapi = getattr(driver, "drvapi", None)
    return drvapi.cu_device_ptr(ptr) if drvapi is not None else ctypes.c_uint64(ptr)


def _memory_pointer(driver, context, ptr, size, finalizer):
    pointer_type = driver.MemoryPointer
    pointer = _device_pointer(driver, ptr)
    if "context" in inspect.signature(pointer_type).parameters:
        return pointer_type(context, pointer, size, finalizer=finalizer)
    return pointer_type(pointer, size, finalizer=finalizer)


def _build():
    from numba import cuda
    from numba.cuda.cudadrv import driver

    base = getattr(cuda, "HostOnlyCUDAMemoryManager", None) or driver.HostOnlyCUDAMemoryManager

    class GpumemMemoryManager(base):
        """Numba's EMM plugin over gpumem: device memory from tenant(device) of the context's device."""

        def _device(self):
            return int(self.context.device.id)

        def initialize(self):
            # As Numba's own manager: the pending frees are flushed past a share of this capacity.
            if not self.deallocations.memory_capacity:
                self.deallocations.memory_capacity = self.get_memory_info().total

        def memalloc(self, size):
            """`size` bytes from the tenant, as a MemoryPointer that queues their free."""
            if size == 0:  # gpumem refuses 0 bytes; Numba's empty arrays hold none
                return _memory_pointer(driver, weakref.proxy(self.context), 0, 0, None)
            owner = tenant(self._device())
            out = ctypes.c_void_p()
            try:
                library().gpumem_alloc(owner.handle, size, 0, ctypes.byref(out))
            except OutOfMemory:
                self.deallocations.clear()  # what Numba holds back from gpumem, then once more
                library().gpumem_alloc(owner.handle, size, 0, ctypes.byref(out))
            finalizer = _finalizer(self.deallocations, owner, out.value, size)
            return _memory_pointer(driver, weakref.proxy(self.context), out.value, size, finalizer)

        def get_memory_info(self):
            """(free, total): the device's free memory and what its pool caches, within the
            tenant's hard budget where it has one."""
            device = self._device()
            free, total = query_memory(device)
            owner = tenant(device)
            if isinstance(owner.upstream, Pool):
                free += owner.upstream.info().free_bytes
            info = owner.info()
            if info.limit:
                total = min(total, info.limit)
                free = min(free, max(0, info.limit - info.bytes_in_use))
            return driver.MemoryInfo(free=free, total=total)

        def get_ipc_handle(self, memory):
            """An IpcHandle of gpumem.ipc for the allocation `memory` (a MemoryPointer, or a view of one)."""
            owner = getattr(memory, "owner", None) or memory
            start = int(owner.device_pointer_value)
            handle = ipc.export(start, tenant(self._device()))
            return IpcHandle(handle, int(memory.device_pointer_value) - start, int(memory.size))

        def reset(self):
            """Numba's reset (its pending frees run), then the pool gives back what it caches."""
            super().reset()
            owner = _tenants.get(self._device()) if self.context is not None else None
            if owner is not None:
                owner.release()

        @property
        def interface_version(self):
            return 1

    GpumemMemoryManager.__module__ = __name__
    return GpumemMemoryManager


class IpcHandle:
    """What GpumemMemoryManager.get_ipc_handle() gives, in the place of Numba's IpcHandle: pickled by
    multiprocessing, it carries the handle's bytes and its descriptors; unpickled, it is open, and
    open(context) gives Numba a MemoryPointer of `size` bytes at `offset` into the memory."""

    def __init__(self, handle, offset, size, imported=None):
        self._handle, self.offset, self.size, self._imported = handle, offset, size, imported

    def __reduce__(self):
        if self._handle is None:
            raise ValueError("an opened IPC handle cannot be sent on; export the memory in the process that owns it")
        return (_open_ipc_handle, (self._handle.data, self._handle.fd_count, ipc.pickled_fds(self._handle),
                                   self.offset, self.size))

    def open(self, context):
        """The memory, in `context` (Numba's), as a MemoryPointer; close() ends it."""
        if self._imported is None or self._imported.closed:
            raise ValueError("this IPC handle is not open here: it opens in the process that receives it")
        from numba.cuda.cudadrv import driver

        return _memory_pointer(driver, weakref.proxy(context), self._imported.ptr + self.offset, self.size, None)

    def close(self):
        """Closes the memory here; the exporter may reuse it once every importer has."""
        if self._imported is not None and not self._imported.closed:
            self._imported.close()


def _open_ipc_handle(data, fd_count, passed, offset, size):
    """The receiver's half of IpcHandle's pickle; the pickle names it, so gpumem must be importable."""
    return IpcHandle(None, offset, size, ipc.open_pickled(data, fd_count, passed))


def _manager_class():
    global _manager
    if _manager is None:
        with _lock:
            if _manager is None:
                _manager = _build()
    return _manager


def __getattr__(name):
    # NUMBA_CUDA_MEMORY_MANAGER=gpumem.numba makes Numba read _numba_memory_manager.
    if name in ("GpumemMemoryManager", "_numba_memory_manager"):
        try:
            return _manager_class()
        except ImportError as error:
            raise AttributeError(f"{__name__}.{name} needs Numba's CUDA target: {error}") from error
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def use_gpumem_for_numba():
    """Makes GpumemMemoryManager Numba's memory manager (numba.cuda.set_memory_manager). Call it
    before Numba makes a CUDA context: a context made before keeps the manager it was made with."""
    from numba import cuda

    set_memory_manager = getattr(cuda, "set_memory_manager", None)
    if set_memory_manager is None:
        from numba.cuda.cudadrv.driver import set_memory_manager
    set_memory_manager(_manager_class())
