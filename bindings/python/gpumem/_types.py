"""The C types of include/gpumem/*.h as ctypes: every struct that crosses the ABI, and the callbacks.

Field order and types follow the headers exactly; `_c_name_` names the C typedef, which the tests
use to check both against the headers. Handles (allocators, arrays, streams, CUDA pools) are
`c_void_p`: Python sees them as ints.
"""
import ctypes
from ctypes import POINTER, c_bool, c_char, c_char_p, c_double, c_int32, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p

status_t = c_int32  # gpumem_status_t; statuses stay plain ints, never enums, at the boundary


class AllocatorFunctions(ctypes.Structure):
    _c_name_ = "gpumem_allocator_functions_t"


class AllocatorStats(ctypes.Structure):
    _c_name_ = "gpumem_allocator_stats_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("bytes_in_use", c_uint64),
        ("peak_bytes_in_use", c_uint64),
        ("bytes_requested", c_uint64),
        ("bytes_reserved", c_uint64),
        ("peak_bytes_reserved", c_uint64),
        ("alloc_count", c_uint64),
        ("free_count", c_uint64),
        ("upstream_alloc_count", c_uint64),
        ("upstream_free_count", c_uint64),
        ("retry_count", c_uint64),
        ("oom_count", c_uint64),
    ]


class HookInfo(ctypes.Structure):
    _c_name_ = "gpumem_hook_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("event", c_uint32),
        ("device", c_int32),
        ("allocator", c_void_p),
        ("size", c_size_t),
        ("mem_size", c_size_t),
        ("ptr", c_void_p),
        ("stream", c_void_p),
        ("status", status_t),
    ]


class ManagedRangeInfo(ctypes.Structure):
    _c_name_ = "gpumem_managed_range_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("read_mostly", c_bool),
        ("preferred_location", c_int32),
        ("last_prefetch_location", c_int32),
        ("accessed_by", c_uint64),
    ]


class ArrayDesc(ctypes.Structure):
    _c_name_ = "gpumem_array_desc_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("device", c_int32),
        ("format", c_int32),
        ("channels", c_uint32),
        ("width", c_size_t),
        ("height", c_size_t),
        ("depth", c_size_t),
    ]


class Copy2D(ctypes.Structure):
    _c_name_ = "gpumem_copy2d_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("dst", c_void_p),
        ("dst_array", c_void_p),
        ("dst_x", c_size_t),
        ("dst_y", c_size_t),
        ("dst_pitch", c_size_t),
        ("src", c_void_p),
        ("src_array", c_void_p),
        ("src_x", c_size_t),
        ("src_y", c_size_t),
        ("src_pitch", c_size_t),
        ("width", c_size_t),
        ("height", c_size_t),
    ]


class Copy3D(ctypes.Structure):
    _c_name_ = "gpumem_copy3d_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("dst", c_void_p),
        ("dst_array", c_void_p),
        ("dst_x", c_size_t),
        ("dst_y", c_size_t),
        ("dst_z", c_size_t),
        ("dst_pitch", c_size_t),
        ("dst_height", c_size_t),
        ("src", c_void_p),
        ("src_array", c_void_p),
        ("src_x", c_size_t),
        ("src_y", c_size_t),
        ("src_z", c_size_t),
        ("src_pitch", c_size_t),
        ("src_height", c_size_t),
        ("width", c_size_t),
        ("height", c_size_t),
        ("depth", c_size_t),
    ]


class CudaPoolParams(ctypes.Structure):
    _c_name_ = "gpumem_cuda_pool_params_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("device", c_int32),
        ("source", c_uint32),
        ("pool", c_void_p),
        ("max_size", c_uint64),
        ("release_threshold", c_uint64),
        ("flags", c_uint32),
    ]


class CudaPoolInfo(ctypes.Structure):
    _c_name_ = "gpumem_cuda_pool_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("reserved", c_uint64),
        ("reserved_high", c_uint64),
        ("used", c_uint64),
        ("used_high", c_uint64),
        ("release_threshold", c_uint64),
    ]


class CupyTarget(ctypes.Structure):
    _c_name_ = "gpumem_cupy_target_t"
    _fields_ = [("struct_size", c_size_t), ("allocator", c_void_p), ("stream", c_void_p)]


class DeviceInfo(ctypes.Structure):
    _c_name_ = "gpumem_device_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char * 256),
        ("total_memory", c_size_t),
        ("compute_capability_major", c_int32),
        ("compute_capability_minor", c_int32),
        ("unified_addressing", c_bool),
        ("managed_memory", c_bool),
        ("concurrent_managed_access", c_bool),
        ("memory_pools", c_bool),
        ("pageable_memory_access", c_bool),
        ("host_register", c_bool),
        ("can_map_host_memory", c_bool),
    ]


class IpcHandle(ctypes.Structure):
    _c_name_ = "gpumem_ipc_handle_t"
    _fields_ = [("bytes", c_uint8 * 192)]  # GPUMEM_IPC_HANDLE_SIZE


class IpcInfo(ctypes.Structure):
    _c_name_ = "gpumem_ipc_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("exported", c_uint64),
        ("held", c_uint64),
        ("held_bytes", c_uint64),
        ("imports", c_uint64),
        ("open_segments", c_uint64),
        ("open_bytes", c_uint64),
        ("segment_opens", c_uint64),
    ]


class PinStats(ctypes.Structure):
    _c_name_ = "gpumem_pin_stats_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("bytes_registered", c_uint64),
        ("bytes_pinned", c_uint64),
        ("bytes_cached", c_uint64),
        ("registrations", c_uint64),
        ("pins", c_uint64),
        ("unpins", c_uint64),
        ("hits", c_uint64),
        ("misses", c_uint64),
        ("evictions", c_uint64),
        ("cache_budget", c_uint64),
    ]


class PointerInfo(ctypes.Structure):
    _c_name_ = "gpumem_pointer_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("memory_type", c_int32),
        ("device", c_int32),
        ("is_managed", c_bool),
        ("is_pinned", c_bool),
        ("host_ptr", c_void_p),
        ("device_ptr", c_void_p),
        ("base", c_void_p),
        ("size", c_size_t),
    ]


class PoolParams(ctypes.Structure):
    _c_name_ = "gpumem_pool_params_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("upstream", c_void_p),
        ("limit", c_uint64),
        ("limit_fraction", c_double),
    ]


class PoolGrowthInfo(ctypes.Structure):
    _c_name_ = "gpumem_pool_growth_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("mapped_bytes", c_uint64),
        ("map_calls", c_uint64),
        ("moved_bytes", c_uint64),
        ("move_calls", c_uint64),
        ("returned_bytes", c_uint64),
        ("fences_recorded", c_uint64),
        ("driver_ns", c_uint64),
    ]


class PoolInfo(ctypes.Structure):
    _c_name_ = "gpumem_pool_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("used_bytes", c_uint64),
        ("free_bytes", c_uint64),
        ("total_bytes", c_uint64),
        ("free_block_count", c_uint64),
        ("limit", c_uint64),
        ("arena_count", c_uint32),
        ("pending_bytes", c_uint64),
        ("address_bytes", c_uint64),
    ]


class BlockInfo(ctypes.Structure):
    _c_name_ = "gpumem_block_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("segment", c_void_p),
        ("segment_size", c_size_t),
        ("address", c_void_p),
        ("size", c_size_t),
        ("requested", c_size_t),
        ("state", c_uint32),
        ("stream", c_void_p),
    ]


TENANT_NAME_SIZE = 32  # GPUMEM_TENANT_NAME_SIZE


class TenantParams(ctypes.Structure):
    _c_name_ = "gpumem_tenant_params_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("upstream", c_void_p),
        ("device", c_int32),
        ("limit", c_uint64),
        ("soft_limit", c_uint64),
        ("name", c_char_p),
    ]


class TenantInfo(ctypes.Structure):
    _c_name_ = "gpumem_tenant_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char * TENANT_NAME_SIZE),
        ("limit", c_uint64),
        ("soft_limit", c_uint64),
        ("bytes_in_use", c_uint64),
        ("peak_bytes_in_use", c_uint64),
        ("refused", c_uint64),
        ("soft_crossings", c_uint64),
    ]


class TraceHeader(ctypes.Structure):
    _c_name_ = "gpumem_trace_header_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("version", c_uint32),
        ("device", c_int32),
        ("start_unix_ns", c_uint64),
        ("kind", c_char * 32),
    ]


class TraceRecord(ctypes.Structure):
    _c_name_ = "gpumem_trace_record_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("event", c_uint32),
        ("thread", c_uint32),
        ("time_ns", c_uint64),
        ("stream", c_uint64),
        ("address", c_uint64),
        ("size", c_uint64),
        ("mem_size", c_uint64),
        ("status", status_t),
        ("stack", c_uint64),
        ("frame_count", c_uint32),
    ]


class TraceFrame(ctypes.Structure):
    _c_name_ = "gpumem_trace_frame_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("kind", c_uint32),
        ("address", c_uint64),
        ("module_offset", c_uint64),
        ("symbol_offset", c_uint64),
        ("module", c_char_p),
        ("symbol", c_char_p),
        ("text", c_char_p),
    ]


class TraceParams(ctypes.Structure):
    _c_name_ = "gpumem_trace_params_t"  # its callback field is set below, with the other callbacks


class TraceSummary(ctypes.Structure):
    _c_name_ = "gpumem_trace_summary_t"
    _fields_ = (
        [("struct_size", c_size_t)]
        + [
            (name, c_uint64)
            for name in (
                "records", "peak_record", "peak_record_alloc_count",
                "allocated_bytes", "allocated_bytes_peak", "allocated_bytes_total", "freed_bytes_total",
                "large_allocated_bytes", "large_allocated_bytes_peak", "large_allocated_bytes_total",
                "large_freed_bytes_total",
                "small_allocated_bytes", "small_allocated_bytes_peak", "small_allocated_bytes_total",
                "small_freed_bytes_total",
                "requested_bytes", "requested_bytes_peak",
                "alloc_count", "alloc_count_peak", "alloc_count_total", "free_count_total",
                "large_alloc_count", "large_alloc_count_peak", "large_alloc_count_total", "large_free_count_total",
                "small_alloc_count", "small_alloc_count_peak", "small_alloc_count_total", "small_free_count_total",
                "reserved_bytes", "reserved_bytes_peak", "reserved_bytes_total", "released_bytes_total",
                "segment_count", "segment_count_peak", "segment_count_total", "segment_release_count_total",
                "upstream_record_count", "failed_count", "oom_count", "first_failed_size", "unknown_free_count",
            )
        ]
        + [("version", c_uint32), ("device", c_int32), ("kind", c_char * 32)]
    )


class VmParams(ctypes.Structure):
    _c_name_ = "gpumem_vm_params_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("device", c_int32),
        ("range_size", c_uint64),
        ("map_unit", c_uint64),
    ]


class VmInfo(ctypes.Structure):
    _c_name_ = "gpumem_vm_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("map_unit", c_uint64),
        ("range_size", c_uint64),
        ("reserved_bytes", c_uint64),
        ("mapped_bytes", c_uint64),
    ]


# Callbacks. Each carries `_c_name_` too, for the tests.
alloc_fn = ctypes.CFUNCTYPE(status_t, c_void_p, c_size_t, c_int32, c_void_p, POINTER(c_void_p))
free_fn = ctypes.CFUNCTYPE(status_t, c_void_p, c_void_p, c_size_t, c_int32, c_void_p)
context_destroy_fn = ctypes.CFUNCTYPE(None, c_void_p)
reserve_fn = ctypes.CFUNCTYPE(status_t, c_void_p, c_size_t, c_int32, POINTER(c_void_p))
map_fn = ctypes.CFUNCTYPE(status_t, c_void_p, c_void_p, c_size_t, c_int32)
hook_fn = ctypes.CFUNCTYPE(None, POINTER(HookInfo), c_void_p)
block_fn = ctypes.CFUNCTYPE(None, POINTER(BlockInfo), c_void_p)
reclaim_fn = ctypes.CFUNCTYPE(None, c_int32, c_size_t, c_void_p)
trace_frames_fn = ctypes.CFUNCTYPE(c_size_t, POINTER(ctypes.c_char), c_size_t, c_void_p)
trace_text_fn = ctypes.CFUNCTYPE(None, POINTER(ctypes.c_char), c_size_t, c_void_p)
for _fn, _name in [
    (alloc_fn, "gpumem_alloc_fn"),
    (free_fn, "gpumem_free_fn"),
    (context_destroy_fn, "gpumem_context_destroy_fn"),
    (reserve_fn, "gpumem_reserve_fn"),
    (map_fn, "gpumem_map_fn"),
    (hook_fn, "gpumem_hook_fn"),
    (block_fn, "gpumem_block_fn"),
    (reclaim_fn, "gpumem_reclaim_fn"),
    (trace_frames_fn, "gpumem_trace_frames_fn"),
    (trace_text_fn, "gpumem_trace_text_fn"),
]:
    _fn._c_name_ = _name
del _fn, _name

TraceParams._fields_ = [
    ("struct_size", c_size_t),
    ("flags", c_uint32),
    ("max_frames", c_uint32),
    ("frames", trace_frames_fn),
    ("frames_user_data", c_void_p),
]

AllocatorFunctions._fields_ = [
    ("struct_size", c_size_t),
    ("context", c_void_p),
    ("device", c_int32),
    ("alloc", alloc_fn),
    ("free", free_fn),
    ("destroy", context_destroy_fn),
    ("reserve", reserve_fn),
    ("unreserve", map_fn),
    ("map", map_fn),
    ("unmap", map_fn),
    ("map_unit", c_uint64),
    ("range_size", c_uint64),
]

STRUCTS = [
    PoolGrowthInfo,
    AllocatorFunctions,
    AllocatorStats,
    HookInfo,
    ManagedRangeInfo,
    ArrayDesc,
    Copy2D,
    Copy3D,
    CudaPoolParams,
    CupyTarget,
    CudaPoolInfo,
    DeviceInfo,
    IpcHandle,
    IpcInfo,
    PinStats,
    PointerInfo,
    PoolParams,
    PoolInfo,
    BlockInfo,
    TenantParams,
    TenantInfo,
    TraceHeader,
    TraceRecord,
    TraceFrame,
    TraceParams,
    TraceSummary,
    VmParams,
    VmInfo,
]


def new(struct_type):
    """A zeroed struct with `struct_size` set, ready to be filled by the library."""
    value = struct_type()
    value.struct_size = ctypes.sizeof(struct_type)
    return value
