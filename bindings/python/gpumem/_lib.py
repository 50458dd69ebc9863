"""Loading libgpumem and declaring every function it exports (lib/gpumem.map), from one table."""
import ctypes
import os
import threading
from ctypes import POINTER, c_bool, c_char_p, c_double, c_int32, c_size_t, c_ssize_t, c_uint32, c_uint64, c_void_p

from . import _types as t
from .errors import Error, LibraryError, error_for

REQUIRED_VERSION = (0, 4, 0)
DEFAULT_NAME = "libgpumem.so.0"
# Where a wheel built from this repository carries its library (_backend/gpumem_backend.py).
BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), DEFAULT_NAME)

_p = c_void_p  # handles, streams, CUDA pools and memory: ints in Python
_out_p = POINTER(c_void_p)
_status = t.status_t

# (name, argtypes, restype) for every exported function, in the order of the headers.
TABLE = [
    # core.h
    ("gpumem_version_number", [], c_uint32),
    ("gpumem_version_string", [], c_char_p),
    ("gpumem_status_name", [_status], c_char_p),
    ("gpumem_status_string", [_status], c_char_p),
    ("gpumem_last_error_detail", [], c_char_p),
    ("gpumem_last_cuda_result", [], c_int32),
    # device.h
    ("gpumem_driver_get_version", [POINTER(c_int32)], _status),
    ("gpumem_device_get_count", [POINTER(c_int32)], _status),
    ("gpumem_device_get_info", [c_int32, POINTER(t.DeviceInfo)], _status),
    ("gpumem_device_query_memory", [c_int32, POINTER(c_size_t), POINTER(c_size_t)], _status),
    ("gpumem_stream_wait", [_p, _p], _status),
    # memory.h
    ("gpumem_device_alloc", [c_int32, c_size_t, _out_p], _status),
    ("gpumem_device_free", [_p], _status),
    ("gpumem_device_alloc_async", [c_int32, c_size_t, _p, _out_p], _status),
    ("gpumem_device_alloc_from_pool", [_p, c_size_t, _p, _out_p], _status),
    ("gpumem_device_free_async", [_p, _p], _status),
    ("gpumem_host_alloc", [c_size_t, c_uint32, _out_p], _status),
    ("gpumem_host_free", [_p], _status),
    ("gpumem_host_register", [_p, c_size_t, c_uint32], _status),
    ("gpumem_host_unregister", [_p], _status),
    ("gpumem_host_get_device_pointer", [_p, _out_p], _status),
    ("gpumem_managed_alloc", [c_int32, c_size_t, c_uint32, _out_p], _status),
    ("gpumem_managed_free", [_p], _status),
    ("gpumem_managed_prefetch", [_p, c_size_t, c_int32, _p], _status),
    ("gpumem_managed_advise", [_p, c_size_t, c_int32, c_int32], _status),
    ("gpumem_managed_get_range_info", [_p, c_size_t, POINTER(t.ManagedRangeInfo)], _status),
    # pointer.h
    ("gpumem_pointer_get_info", [_p, POINTER(t.PointerInfo)], _status),
    # array.h
    ("gpumem_array_desc_init", [POINTER(t.ArrayDesc), c_size_t], _status),
    ("gpumem_array_create", [POINTER(t.ArrayDesc), _out_p], _status),
    ("gpumem_array_destroy", [_p], _status),
    ("gpumem_array_get_desc", [_p, POINTER(t.ArrayDesc)], _status),
    # copy.h
    ("gpumem_memset", [_p, c_uint32, c_uint32, c_size_t], _status),
    ("gpumem_memset_async", [_p, c_uint32, c_uint32, c_size_t, _p], _status),
    ("gpumem_copy", [_p, _p, c_size_t], _status),
    ("gpumem_copy_async", [_p, _p, c_size_t, _p], _status),
    ("gpumem_copy2d_init", [POINTER(t.Copy2D), c_size_t], _status),
    ("gpumem_copy3d_init", [POINTER(t.Copy3D), c_size_t], _status),
    ("gpumem_copy2d", [POINTER(t.Copy2D)], _status),
    ("gpumem_copy2d_async", [POINTER(t.Copy2D), _p], _status),
    ("gpumem_copy3d", [POINTER(t.Copy3D)], _status),
    ("gpumem_copy3d_async", [POINTER(t.Copy3D), _p], _status),
    ("gpumem_copy_staging_get_held", [POINTER(c_size_t)], _status),
    ("gpumem_copy_staging_release", [], _status),
    # allocator.h
    ("gpumem_allocator_create_device", [c_int32, _out_p], _status),
    ("gpumem_allocator_create_device_async", [c_int32, _p, _out_p], _status),
    ("gpumem_allocator_create_managed", [c_int32, c_uint32, _out_p], _status),
    ("gpumem_allocator_create_pinned", [c_uint32, _out_p], _status),
    ("gpumem_allocator_create_host", [c_size_t, _out_p], _status),
    ("gpumem_allocator_create_functions", [POINTER(t.AllocatorFunctions), _out_p], _status),
    ("gpumem_allocator_destroy", [_p], _status),
    ("gpumem_allocator_destroy_force", [_p], _status),
    ("gpumem_allocator_get_device", [_p, POINTER(c_int32)], _status),
    ("gpumem_alloc", [_p, c_size_t, _p, _out_p], _status),
    ("gpumem_free", [_p, _p, _p], _status),
    ("gpumem_allocator_set_default", [c_int32, _p], _status),
    ("gpumem_allocator_get_default", [c_int32, _out_p], _status),
    ("gpumem_allocator_set_thread", [_p, _out_p], _status),
    ("gpumem_allocator_get_thread", [_out_p], _status),
    ("gpumem_allocator_get_stats", [_p, POINTER(t.AllocatorStats)], _status),
    ("gpumem_allocator_reset_peaks", [_p], _status),
    ("gpumem_allocator_add_hook", [_p, c_uint32, t.hook_fn, _p, POINTER(c_uint64)], _status),
    ("gpumem_allocator_remove_hook", [_p, c_uint64], _status),
    # pool.h
    ("gpumem_pool_params_init", [POINTER(t.PoolParams), c_size_t], _status),
    ("gpumem_pool_create", [POINTER(t.PoolParams), _out_p], _status),
    ("gpumem_pool_get_device", [c_int32, _out_p], _status),
    ("gpumem_pool_release", [_p, _p, c_uint32], _status),
    ("gpumem_pool_get_info", [_p, POINTER(t.PoolInfo)], _status),
    ("gpumem_pool_get_growth_info", [_p, POINTER(t.PoolGrowthInfo)], _status),
    ("gpumem_pool_snapshot", [_p, t.block_fn, _p], _status),
    ("gpumem_pool_snapshot_json", [_p, c_char_p], _status),
    ("gpumem_pool_set_limit", [_p, c_uint64], _status),
    ("gpumem_pool_set_soft_limit", [_p, c_uint64], _status),
    ("gpumem_pool_set_limit_fraction", [_p, c_double], _status),
    ("gpumem_pool_set_stream_reuse", [_p, c_int32], _status),
    ("gpumem_pool_set_page_reclaim", [_p, c_int32], _status),
    ("gpumem_pool_set_device_config", [c_char_p], _status),
    ("gpumem_pool_record_stream", [_p, _p, _p], _status),
    ("gpumem_reclaim_add", [t.reclaim_fn, _p, POINTER(c_uint64)], _status),
    ("gpumem_reclaim_remove", [c_uint64], _status),
    # tenant.h
    ("gpumem_tenant_params_init", [POINTER(t.TenantParams), c_size_t], _status),
    ("gpumem_tenant_create", [POINTER(t.TenantParams), _out_p], _status),
    ("gpumem_tenant_set_limits", [_p, c_uint64, c_uint64], _status),
    ("gpumem_tenant_get_info", [_p, POINTER(t.TenantInfo)], _status),
    # cuda_pool.h
    ("gpumem_cuda_pool_params_init", [POINTER(t.CudaPoolParams), c_size_t], _status),
    ("gpumem_allocator_create_cuda_pool", [POINTER(t.CudaPoolParams), _out_p], _status),
    ("gpumem_cuda_pool_get", [_p, _out_p], _status),
    ("gpumem_cuda_pool_trim", [_p, c_uint64], _status),
    ("gpumem_cuda_pool_set_release_threshold", [_p, c_uint64], _status),
    ("gpumem_cuda_pool_get_info", [_p, POINTER(t.CudaPoolInfo)], _status),
    ("gpumem_cuda_pool_reset_peaks", [_p], _status),
    ("gpumem_allocator_set_peer_access", [_p, c_int32, c_uint32], _status),
    # vm.h
    ("gpumem_vm_params_init", [POINTER(t.VmParams), c_size_t], _status),
    ("gpumem_allocator_create_vm", [POINTER(t.VmParams), _out_p], _status),
    ("gpumem_vm_get_info", [_p, POINTER(t.VmInfo)], _status),
    # ipc.h (file descriptors and sockets are C ints)
    ("gpumem_ipc_export", [_p, _p, POINTER(t.IpcHandle), POINTER(c_size_t)], _status),
    ("gpumem_ipc_export_fds", [POINTER(t.IpcHandle), POINTER(c_int32), c_size_t], _status),
    ("gpumem_ipc_open", [POINTER(t.IpcHandle), POINTER(c_int32), c_size_t, _out_p, POINTER(c_size_t)], _status),
    ("gpumem_ipc_close", [_p], _status),
    ("gpumem_ipc_send", [c_int32, POINTER(t.IpcHandle)], _status),
    ("gpumem_ipc_receive", [c_int32, _out_p, POINTER(c_size_t)], _status),
    ("gpumem_ipc_collect", [POINTER(c_uint64)], _status),
    ("gpumem_ipc_get_info", [POINTER(t.IpcInfo)], _status),
    # cupy.h (int32_t is CuPy's int)
    ("gpumem_cupy_alloc", [_p, c_size_t, c_int32], c_void_p),
    ("gpumem_cupy_free", [_p, _p, c_int32], None),
    # torch.h (ptrdiff_t is ssize_t, PyTorch's type, on LP64 Linux)
    ("gpumem_torch_alloc", [c_ssize_t, c_int32, _p], c_void_p),
    # Throws C++ exceptions on failure: for PyTorch to load by name, never to call through ctypes.
    ("gpumem_torch_alloc_raising", [c_ssize_t, c_int32, _p], c_void_p),
    ("gpumem_torch_free", [_p, c_ssize_t, c_int32, _p], None),
    ("gpumem_torch_set_allocator", [c_int32, _p], _status),
    ("gpumem_torch_record_stream", [_p, _p], None),
    # pin.h
    ("gpumem_pin", [_p, c_size_t, c_uint32], _status),
    ("gpumem_unpin", [_p, c_size_t], _status),
    ("gpumem_pin_query", [_p, c_size_t, POINTER(c_int32)], _status),
    ("gpumem_pin_forget", [_p, c_size_t], _status),
    ("gpumem_pin_cache_flush", [], _status),
    ("gpumem_pin_cache_set_budget", [c_uint64], _status),
    ("gpumem_pin_get_stats", [POINTER(t.PinStats)], _status),
    # trace.h
    ("gpumem_trace_start", [_p, c_char_p, c_uint32, _out_p], _status),
    ("gpumem_trace_params_init", [POINTER(t.TraceParams), c_size_t], _status),
    ("gpumem_trace_start_with_params", [_p, c_char_p, POINTER(t.TraceParams), _out_p], _status),
    ("gpumem_trace_stop", [_p], _status),
    ("gpumem_trace_reader_open", [c_char_p, _out_p], _status),
    ("gpumem_trace_reader_get_header", [_p, POINTER(t.TraceHeader)], _status),
    ("gpumem_trace_reader_next", [_p, POINTER(t.TraceRecord), POINTER(c_bool)], _status),
    ("gpumem_trace_reader_get_frame", [_p, c_uint32, POINTER(t.TraceFrame)], _status),
    ("gpumem_trace_reader_close", [_p], _status),
    ("gpumem_trace_summarize",
     [c_char_p, c_uint32, t.trace_text_fn, c_void_p, POINTER(t.TraceSummary)], _status),
]

# The functions whose int32 result is not a status; every other int32 result is checked.
NOT_STATUS = {"gpumem_last_cuda_result"}


def version_number(major, minor, patch):
    """A version as GPUMEM_VERSION_NUMBER spells it."""
    return major * 10000 + minor * 100 + patch


def version_text(number):
    """GPUMEM_VERSION_NUMBER back to "MAJOR.MINOR.PATCH"."""
    return f"{number // 10000}.{number // 100 % 100}.{number % 100}"


def open_library(path=None):
    """Loads libgpumem (GPUMEM_LIBRARY, else the copy bundled in the package, else the dynamic
    loader's search), checks its version and declares the table on it. Raises LibraryError."""
    if path is None:
        path = os.environ.get("GPUMEM_LIBRARY") or None
        if path:
            tried = f"{path} (from GPUMEM_LIBRARY)"
        elif os.path.isfile(BUNDLED):
            path = BUNDLED
            tried = f"{path} (bundled with the gpumem package)"
        else:
            tried = f"{DEFAULT_NAME} (through the dynamic loader's search path)"
    else:
        tried = path
    if path and os.sep in path:
        # Absolute, so that library_path() names this file wherever the process goes next.
        path = os.path.abspath(path)
    try:
        lib = ctypes.CDLL(path or DEFAULT_NAME)
    except OSError as e:
        raise LibraryError(
            f"cannot load libgpumem: tried {tried}: {e}; set GPUMEM_LIBRARY to the library's path, "
            f"or put its directory on LD_LIBRARY_PATH"
        ) from e

    # The version first: an older library may lack functions of the table.
    try:
        lib.gpumem_version_number.argtypes, lib.gpumem_version_number.restype = [], c_uint32
    except AttributeError as e:
        raise LibraryError(f"{tried} is not libgpumem: it has no gpumem_version_number") from e
    have, need = lib.gpumem_version_number(), version_number(*REQUIRED_VERSION)
    if have < need:
        raise LibraryError(
            f"{tried} is libgpumem {version_text(have)}, older than {version_text(need)}, which this "
            f"gpumem package needs"
        )

    def check(status, func, args):
        if status != 0:
            detail = lib.gpumem_last_error_detail().decode("utf-8", "replace")
            raise error_for(status, detail, lib.gpumem_last_cuda_result())
        return status

    for name, argtypes, restype in TABLE:
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            raise LibraryError(f"{tried} (libgpumem {version_text(have)}) lacks {name}") from e
        fn.argtypes, fn.restype = argtypes, restype
        if restype is _status and name not in NOT_STATUS:
            fn.errcheck = check
    return lib


_lock = threading.Lock()
_loaded = None


def library():
    """The loaded libgpumem, every function declared; statuses raise gpumem.Error. Loads it on first use."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = open_library()
    return _loaded


def call_quietly(name, *args):
    """Calls the library's function `name` where nothing may raise (finalizers, at interpreter exit
    too): True if it succeeded, False if it failed or libgpumem could not be loaded."""
    try:
        getattr(library(), name)(*args)
    except (Error, LibraryError):
        return False
    return True


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", c_char_p), ("dli_fbase", c_void_p), ("dli_sname", c_char_p), ("dli_saddr", c_void_p)]


def library_path():
    """The file of the loaded libgpumem (loaded first if need be), as the dynamic loader found it:
    a later dlopen() of that path, such as PyTorch's for its pluggable allocator, gets this same
    library and its state rather than a second copy."""
    lib = library()
    try:
        dladdr = ctypes.CDLL(None).dladdr
    except AttributeError:  # no dladdr in the process: the name it was loaded by will do
        return lib._name
    dladdr.argtypes, dladdr.restype = [c_void_p, POINTER(_DlInfo)], ctypes.c_int
    info = _DlInfo()
    if not dladdr(ctypes.cast(lib.gpumem_version_number, c_void_p), ctypes.byref(info)) or not info.dli_fname:
        return lib._name
    return os.path.abspath(os.fsdecode(info.dli_fname))
