//! Raw declarations of libgpumem's C ABI, as `include/gpumem/*.h` of gpumem 0.4 give it.
//!
//! One Rust item per C declaration, under the C name: the exported functions of
//! `lib/gpumem.map`, every struct that crosses the ABI (`#[repr(C)]`, field for field, each
//! starting with its `struct_size`), the opaque handle types, the status codes, flags and enum
//! values as plain integer constants, and the callback typedefs as nullable function pointers.
//! C enums stay integers: a status is an `i32`, never a Rust enum, so a value this crate does not
//! know (from a newer library) is still representable.
//!
//! The documentation is the headers': items come in sections named after the header that
//! declares them (`// pool.h`), in its order, and each one's meaning, contract, statuses and
//! thread-safety phrase are in that header's Doxygen, under the same name. Every function is
//! `unsafe`. The `gpumem` crate is the safe interface. `scripts/abi/check_bindings.py` (the
//! test `abi_bindings`) checks these declarations against the ABI description made from the
//! headers (`abi/gpumem-abi.json`), so a mismatch fails the build's tests.

#![allow(non_camel_case_types)]
// Each item's documentation is its header's, under the same name (see above).
#![allow(missing_docs)]

use std::marker::{PhantomData, PhantomPinned};
use std::os::raw::{c_char, c_int, c_void};

// gpumem_version.h

/// The major version of the headers these declarations mirror (`gpumem_version.h`).
pub const GPUMEM_VERSION_MAJOR: u32 = 0;
/// The minor version of the headers these declarations mirror.
pub const GPUMEM_VERSION_MINOR: u32 = 4;
/// The patch version of the headers these declarations mirror.
pub const GPUMEM_VERSION_PATCH: u32 = 0;
/// `major * 10000 + minor * 100 + patch`; compare with `gpumem_version_number()`.
pub const GPUMEM_VERSION_NUMBER: u32 = 400;
/// The version as "MAJOR.MINOR.PATCH".
pub const GPUMEM_VERSION_STRING: &str = "0.4.0";

// core.h

/// `gpumem_status_t` (core.h): 0 or a negative `GPUMEM_ERROR_*` code.
pub type gpumem_status_t = i32;

// enum gpumem_status (core.h)
pub const GPUMEM_SUCCESS: i32 = 0;
pub const GPUMEM_ERROR_INVALID_ARGUMENT: i32 = -1;
pub const GPUMEM_ERROR_OUT_OF_MEMORY: i32 = -2;
pub const GPUMEM_ERROR_NO_DRIVER: i32 = -3;
pub const GPUMEM_ERROR_NO_DEVICE: i32 = -4;
pub const GPUMEM_ERROR_INVALID_DEVICE: i32 = -5;
pub const GPUMEM_ERROR_NOT_SUPPORTED: i32 = -6;
pub const GPUMEM_ERROR_INVALID_POINTER: i32 = -7;
pub const GPUMEM_ERROR_INVALID_HANDLE: i32 = -8;
pub const GPUMEM_ERROR_ALREADY_REGISTERED: i32 = -9;
pub const GPUMEM_ERROR_STREAM_CAPTURE: i32 = -10;
pub const GPUMEM_ERROR_DRIVER: i32 = -11;
pub const GPUMEM_ERROR_INTERNAL: i32 = -12;
pub const GPUMEM_ERROR_NOT_OWNED: i32 = -13;
pub const GPUMEM_ERROR_BUSY: i32 = -14;
pub const GPUMEM_ERROR_IO: i32 = -15;

/// `struct CUstream_st`: what a CUDA stream handle points to; never dereferenced.
#[repr(C)]
pub struct CUstream_st {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

/// `gpumem_stream_t` (core.h): a `CUstream` / `cudaStream_t`; null is the legacy default stream.
pub type gpumem_stream_t = *mut CUstream_st;

/// `GPUMEM_STREAM_LEGACY` (core.h), as `CU_STREAM_LEGACY`.
pub const GPUMEM_STREAM_LEGACY: gpumem_stream_t = 0x1 as gpumem_stream_t;
/// `GPUMEM_STREAM_PER_THREAD` (core.h), as `CU_STREAM_PER_THREAD`.
pub const GPUMEM_STREAM_PER_THREAD: gpumem_stream_t = 0x2 as gpumem_stream_t;

// memory.h

/// `struct CUmemPoolHandle_st`: what a CUDA memory pool handle points to; never dereferenced.
#[repr(C)]
pub struct CUmemPoolHandle_st {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

/// `gpumem_cuda_pool_t` (memory.h): a `CUmemoryPool` / `cudaMemPool_t`.
pub type gpumem_cuda_pool_t = *mut CUmemPoolHandle_st;

// enum gpumem_host_alloc_flags (memory.h)
pub const GPUMEM_HOST_ALLOC_PORTABLE: u32 = 0x1;
pub const GPUMEM_HOST_ALLOC_DEVICEMAP: u32 = 0x2;
pub const GPUMEM_HOST_ALLOC_WRITECOMBINED: u32 = 0x4;

// enum gpumem_host_register_flags (memory.h)
pub const GPUMEM_HOST_REGISTER_PORTABLE: u32 = 0x1;
pub const GPUMEM_HOST_REGISTER_DEVICEMAP: u32 = 0x2;
pub const GPUMEM_HOST_REGISTER_IOMEMORY: u32 = 0x4;
pub const GPUMEM_HOST_REGISTER_READ_ONLY: u32 = 0x8;

// enum gpumem_managed_flags (memory.h)
pub const GPUMEM_MANAGED_ATTACH_GLOBAL: u32 = 0x1;
pub const GPUMEM_MANAGED_ATTACH_HOST: u32 = 0x2;

// enum gpumem_location (memory.h)
pub const GPUMEM_LOCATION_HOST: i32 = -1;
pub const GPUMEM_LOCATION_NONE: i32 = -2;

// enum gpumem_advice (memory.h)
pub const GPUMEM_ADVICE_SET_READ_MOSTLY: i32 = 1;
pub const GPUMEM_ADVICE_UNSET_READ_MOSTLY: i32 = 2;
pub const GPUMEM_ADVICE_SET_PREFERRED_LOCATION: i32 = 3;
pub const GPUMEM_ADVICE_UNSET_PREFERRED_LOCATION: i32 = 4;
pub const GPUMEM_ADVICE_SET_ACCESSED_BY: i32 = 5;
pub const GPUMEM_ADVICE_UNSET_ACCESSED_BY: i32 = 6;

/// `gpumem_managed_range_info_t` (memory.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_managed_range_info_t {
    pub struct_size: usize,
    pub read_mostly: bool,
    pub preferred_location: i32,
    pub last_prefetch_location: i32,
    pub accessed_by: u64,
}

// pointer.h

// enum gpumem_memory_type (pointer.h)
pub const GPUMEM_MEMORY_UNREGISTERED: i32 = 0;
pub const GPUMEM_MEMORY_HOST: i32 = 1;
pub const GPUMEM_MEMORY_DEVICE: i32 = 2;
pub const GPUMEM_MEMORY_MANAGED: i32 = 3;

/// `gpumem_pointer_info_t` (pointer.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_pointer_info_t {
    pub struct_size: usize,
    pub memory_type: i32,
    pub device: i32,
    pub is_managed: bool,
    pub is_pinned: bool,
    pub host_ptr: *mut c_void,
    pub device_ptr: *mut c_void,
    pub base: *mut c_void,
    pub size: usize,
}

// device.h

/// `gpumem_device_info_t` (device.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_device_info_t {
    pub struct_size: usize,
    pub name: [c_char; 256],
    pub total_memory: usize,
    pub compute_capability_major: i32,
    pub compute_capability_minor: i32,
    pub unified_addressing: bool,
    pub managed_memory: bool,
    pub concurrent_managed_access: bool,
    pub memory_pools: bool,
    pub pageable_memory_access: bool,
    pub host_register: bool,
    pub can_map_host_memory: bool,
}

// array.h

/// `gpumem_array_t` (array.h): a CUDA array owned by gpumem.
#[repr(C)]
pub struct gpumem_array_t {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

// enum gpumem_format (array.h)
pub const GPUMEM_FORMAT_U8: i32 = 1;
pub const GPUMEM_FORMAT_U16: i32 = 2;
pub const GPUMEM_FORMAT_U32: i32 = 3;
pub const GPUMEM_FORMAT_I8: i32 = 4;
pub const GPUMEM_FORMAT_I16: i32 = 5;
pub const GPUMEM_FORMAT_I32: i32 = 6;
pub const GPUMEM_FORMAT_F16: i32 = 7;
pub const GPUMEM_FORMAT_F32: i32 = 8;

/// `gpumem_array_desc_t` (array.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_array_desc_t {
    pub struct_size: usize,
    pub device: i32,
    pub format: i32,
    pub channels: u32,
    pub width: usize,
    pub height: usize,
    pub depth: usize,
}

// copy.h

/// `gpumem_copy2d_t` (copy.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_copy2d_t {
    pub struct_size: usize,
    pub dst: *mut c_void,
    pub dst_array: *mut gpumem_array_t,
    pub dst_x: usize,
    pub dst_y: usize,
    pub dst_pitch: usize,
    pub src: *const c_void,
    pub src_array: *const gpumem_array_t,
    pub src_x: usize,
    pub src_y: usize,
    pub src_pitch: usize,
    pub width: usize,
    pub height: usize,
}

/// `gpumem_copy3d_t` (copy.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_copy3d_t {
    pub struct_size: usize,
    pub dst: *mut c_void,
    pub dst_array: *mut gpumem_array_t,
    pub dst_x: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub src: *const c_void,
    pub src_array: *const gpumem_array_t,
    pub src_x: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_pitch: usize,
    pub src_height: usize,
    pub width: usize,
    pub height: usize,
    pub depth: usize,
}

/// `GPUMEM_COPY_STAGING_LIMIT` (copy.h): most bytes of staging memory held at once.
pub const GPUMEM_COPY_STAGING_LIMIT: usize = 32 << 20;

// allocator.h

/// `gpumem_allocator_t` (allocator.h): anything that allocates.
#[repr(C)]
pub struct gpumem_allocator_t {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

/// `gpumem_alloc_fn` (allocator.h).
pub type gpumem_alloc_fn = Option<
    unsafe extern "C" fn(
        context: *mut c_void,
        size: usize,
        device: i32,
        stream: gpumem_stream_t,
        out_ptr: *mut *mut c_void,
    ) -> gpumem_status_t,
>;

/// `gpumem_free_fn` (allocator.h).
pub type gpumem_free_fn = Option<
    unsafe extern "C" fn(
        context: *mut c_void,
        ptr: *mut c_void,
        size: usize,
        device: i32,
        stream: gpumem_stream_t,
    ) -> gpumem_status_t,
>;

/// `gpumem_context_destroy_fn` (allocator.h).
pub type gpumem_context_destroy_fn = Option<unsafe extern "C" fn(context: *mut c_void)>;

/// `gpumem_reserve_fn` (allocator.h).
pub type gpumem_reserve_fn = Option<
    unsafe extern "C" fn(context: *mut c_void, size: usize, device: i32, out_ptr: *mut *mut c_void) -> gpumem_status_t,
>;

/// `gpumem_map_fn` (allocator.h).
pub type gpumem_map_fn =
    Option<unsafe extern "C" fn(context: *mut c_void, ptr: *mut c_void, size: usize, device: i32) -> gpumem_status_t>;

/// `gpumem_allocator_functions_t` (allocator.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_allocator_functions_t {
    pub struct_size: usize,
    pub context: *mut c_void,
    pub device: i32,
    pub alloc: gpumem_alloc_fn,
    pub free: gpumem_free_fn,
    pub destroy: gpumem_context_destroy_fn,
    pub reserve: gpumem_reserve_fn,
    pub unreserve: gpumem_map_fn,
    pub map: gpumem_map_fn,
    pub unmap: gpumem_map_fn,
    pub map_unit: u64,
    pub range_size: u64,
}

/// `gpumem_allocator_stats_t` (allocator.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_allocator_stats_t {
    pub struct_size: usize,
    pub bytes_in_use: u64,
    pub peak_bytes_in_use: u64,
    pub bytes_requested: u64,
    pub bytes_reserved: u64,
    pub peak_bytes_reserved: u64,
    pub alloc_count: u64,
    pub free_count: u64,
    pub upstream_alloc_count: u64,
    pub upstream_free_count: u64,
    pub retry_count: u64,
    pub oom_count: u64,
}

// enum gpumem_hook_event (allocator.h)
pub const GPUMEM_HOOK_MALLOC_PRE: u32 = 0x1;
pub const GPUMEM_HOOK_MALLOC_POST: u32 = 0x2;
pub const GPUMEM_HOOK_UPSTREAM_ALLOC_PRE: u32 = 0x4;
pub const GPUMEM_HOOK_UPSTREAM_ALLOC_POST: u32 = 0x8;
pub const GPUMEM_HOOK_FREE_PRE: u32 = 0x10;
pub const GPUMEM_HOOK_FREE_POST: u32 = 0x20;
pub const GPUMEM_HOOK_ALL: u32 = 0x3f;

/// `gpumem_hook_info_t` (allocator.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_hook_info_t {
    pub struct_size: usize,
    pub event: u32,
    pub device: i32,
    pub allocator: *mut gpumem_allocator_t,
    pub size: usize,
    pub mem_size: usize,
    pub ptr: *mut c_void,
    pub stream: gpumem_stream_t,
    pub status: gpumem_status_t,
}

/// `gpumem_hook_fn` (allocator.h).
pub type gpumem_hook_fn = Option<unsafe extern "C" fn(info: *const gpumem_hook_info_t, user_data: *mut c_void)>;

// pool.h

/// `gpumem_pool_params_t` (pool.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_pool_params_t {
    pub struct_size: usize,
    pub upstream: *mut gpumem_allocator_t,
    pub limit: u64,
    pub limit_fraction: f64,
}

/// `gpumem_pool_growth_info_t` (pool.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_pool_growth_info_t {
    pub struct_size: usize,
    pub mapped_bytes: u64,
    pub map_calls: u64,
    pub moved_bytes: u64,
    pub move_calls: u64,
    pub returned_bytes: u64,
    pub fences_recorded: u64,
    pub driver_ns: u64,
}

/// `gpumem_pool_info_t` (pool.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_pool_info_t {
    pub struct_size: usize,
    pub used_bytes: u64,
    pub free_bytes: u64,
    pub total_bytes: u64,
    pub free_block_count: u64,
    pub limit: u64,
    pub arena_count: u32,
    pub pending_bytes: u64,
    pub address_bytes: u64,
}

// enum gpumem_block_state (pool.h)
pub const GPUMEM_BLOCK_FREE: u32 = 0;
pub const GPUMEM_BLOCK_IN_USE: u32 = 1;
pub const GPUMEM_BLOCK_PENDING: u32 = 2;
pub const GPUMEM_BLOCK_UNMAPPED: u32 = 3;

/// `gpumem_block_info_t` (pool.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_block_info_t {
    pub struct_size: usize,
    pub segment: *mut c_void,
    pub segment_size: usize,
    pub address: *mut c_void,
    pub size: usize,
    pub requested: usize,
    pub state: u32,
    pub stream: gpumem_stream_t,
}

/// `gpumem_block_fn` (pool.h).
pub type gpumem_block_fn = Option<unsafe extern "C" fn(block: *const gpumem_block_info_t, user_data: *mut c_void)>;

// enum gpumem_pool_release_flags (pool.h)
pub const GPUMEM_POOL_RELEASE_ALL_STREAMS: u32 = 0x1;

/// `gpumem_reclaim_fn` (pool.h).
pub type gpumem_reclaim_fn = Option<unsafe extern "C" fn(device: i32, size: usize, user_data: *mut c_void)>;

// enum gpumem_stream_reuse (pool.h)
pub const GPUMEM_STREAM_REUSE_NEVER: i32 = 0;
pub const GPUMEM_STREAM_REUSE_FENCE: i32 = 1;
pub const GPUMEM_STREAM_REUSE_HOST_WAIT: i32 = 2;

// cuda_pool.h

// enum gpumem_cuda_pool_source (cuda_pool.h)
pub const GPUMEM_CUDA_POOL_CURRENT: u32 = 0;
pub const GPUMEM_CUDA_POOL_DEFAULT: u32 = 1;
pub const GPUMEM_CUDA_POOL_EXTERNAL: u32 = 2;
pub const GPUMEM_CUDA_POOL_NEW: u32 = 3;

/// `GPUMEM_CUDA_POOL_KEEP_THRESHOLD` (cuda_pool.h): leave a pool's release threshold as it is.
pub const GPUMEM_CUDA_POOL_KEEP_THRESHOLD: u64 = 0xffff_ffff_ffff_fffe;

/// `gpumem_cuda_pool_params_t` (cuda_pool.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_cuda_pool_params_t {
    pub struct_size: usize,
    pub device: i32,
    pub source: u32,
    pub pool: gpumem_cuda_pool_t,
    pub max_size: u64,
    pub release_threshold: u64,
    pub flags: u32,
}

/// `gpumem_cuda_pool_info_t` (cuda_pool.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_cuda_pool_info_t {
    pub struct_size: usize,
    pub reserved: u64,
    pub reserved_high: u64,
    pub used: u64,
    pub used_high: u64,
    pub release_threshold: u64,
}

// enum gpumem_peer_access (cuda_pool.h)
pub const GPUMEM_PEER_ACCESS_NONE: u32 = 0;
pub const GPUMEM_PEER_ACCESS_READ_WRITE: u32 = 1;

// vm.h

/// `gpumem_vm_params_t` (vm.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_vm_params_t {
    pub struct_size: usize,
    pub device: i32,
    pub range_size: u64,
    pub map_unit: u64,
}

/// `gpumem_vm_info_t` (vm.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_vm_info_t {
    pub struct_size: usize,
    pub map_unit: u64,
    pub range_size: u64,
    pub reserved_bytes: u64,
    pub mapped_bytes: u64,
}

// ipc.h

pub const GPUMEM_IPC_HANDLE_SIZE: usize = 192;

/// `gpumem_ipc_handle_t` (ipc.h): an exported allocation as plain bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_ipc_handle_t {
    pub bytes: [u8; 192],
}

/// `gpumem_ipc_info_t` (ipc.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_ipc_info_t {
    pub struct_size: usize,
    pub exported: u64,
    pub held: u64,
    pub held_bytes: u64,
    pub imports: u64,
    pub open_segments: u64,
    pub open_bytes: u64,
    pub segment_opens: u64,
}

// tenant.h

pub const GPUMEM_TENANT_NAME_SIZE: usize = 32;

/// `gpumem_tenant_params_t` (tenant.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_tenant_params_t {
    pub struct_size: usize,
    pub upstream: *mut gpumem_allocator_t,
    pub device: i32,
    pub limit: u64,
    pub soft_limit: u64,
    pub name: *const c_char,
}

/// `gpumem_tenant_info_t` (tenant.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_tenant_info_t {
    pub struct_size: usize,
    pub name: [c_char; 32],
    pub limit: u64,
    pub soft_limit: u64,
    pub bytes_in_use: u64,
    pub peak_bytes_in_use: u64,
    pub refused: u64,
    pub soft_crossings: u64,
}

// cupy.h

/// `gpumem_cupy_target_t` (cupy.h): the allocator and stream behind CuPy's `param`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_cupy_target_t {
    pub struct_size: usize,
    pub allocator: *mut gpumem_allocator_t,
    pub stream: gpumem_stream_t,
}

// pin.h

// enum gpumem_pin_state (pin.h)
pub const GPUMEM_PIN_NONE: i32 = 0;
pub const GPUMEM_PIN_PARTIAL: i32 = 1;
pub const GPUMEM_PIN_FULL: i32 = 2;

/// `gpumem_pin_stats_t` (pin.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_pin_stats_t {
    pub struct_size: usize,
    pub bytes_registered: u64,
    pub bytes_pinned: u64,
    pub bytes_cached: u64,
    pub registrations: u64,
    pub pins: u64,
    pub unpins: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub cache_budget: u64,
}

// trace.h

/// `gpumem_trace_t` (trace.h): a recording in progress.
#[repr(C)]
pub struct gpumem_trace_t {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

/// `gpumem_trace_reader_t` (trace.h): an open trace file being read.
#[repr(C)]
pub struct gpumem_trace_reader_t {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

// enum gpumem_trace_event (trace.h)
pub const GPUMEM_TRACE_ALLOC: u32 = 1;
pub const GPUMEM_TRACE_FREE: u32 = 2;
pub const GPUMEM_TRACE_UPSTREAM_ALLOC: u32 = 3;
pub const GPUMEM_TRACE_UPSTREAM_FREE: u32 = 4;
pub const GPUMEM_TRACE_ALLOC_FAILED: u32 = 5;

/// `gpumem_trace_header_t` (trace.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_trace_header_t {
    pub struct_size: usize,
    pub version: u32,
    pub device: i32,
    pub start_unix_ns: u64,
    pub kind: [c_char; 32],
}

/// `gpumem_trace_record_t` (trace.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_trace_record_t {
    pub struct_size: usize,
    pub event: u32,
    pub thread: u32,
    pub time_ns: u64,
    pub stream: u64,
    pub address: u64,
    pub size: u64,
    pub mem_size: u64,
    pub status: gpumem_status_t,
    pub stack: u64,
    pub frame_count: u32,
}

pub const GPUMEM_TRACE_MAX_FRAMES: i32 = 64;

// enum gpumem_trace_flags (trace.h)
pub const GPUMEM_TRACE_NATIVE_FRAMES: u32 = 0x1;

/// `gpumem_trace_frames_fn` (trace.h).
pub type gpumem_trace_frames_fn =
    Option<unsafe extern "C" fn(buffer: *mut c_char, capacity: usize, user_data: *mut c_void) -> usize>;

/// `gpumem_trace_text_fn` (trace.h).
pub type gpumem_trace_text_fn =
    Option<unsafe extern "C" fn(text: *const c_char, length: usize, user_data: *mut c_void)>;

/// `gpumem_trace_params_t` (trace.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_trace_params_t {
    pub struct_size: usize,
    pub flags: u32,
    pub max_frames: u32,
    pub frames: gpumem_trace_frames_fn,
    pub frames_user_data: *mut c_void,
}

// enum gpumem_trace_frame_kind (trace.h)
pub const GPUMEM_TRACE_FRAME_NATIVE: u32 = 1;
pub const GPUMEM_TRACE_FRAME_CALLER: u32 = 2;

/// `gpumem_trace_frame_t` (trace.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_trace_frame_t {
    pub struct_size: usize,
    pub kind: u32,
    pub address: u64,
    pub module_offset: u64,
    pub symbol_offset: u64,
    pub module: *const c_char,
    pub symbol: *const c_char,
    pub text: *const c_char,
}

/// `gpumem_trace_summary_t` (trace.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpumem_trace_summary_t {
    pub struct_size: usize,
    pub records: u64,
    pub peak_record: u64,
    pub peak_record_alloc_count: u64,
    pub allocated_bytes: u64,
    pub allocated_bytes_peak: u64,
    pub allocated_bytes_total: u64,
    pub freed_bytes_total: u64,
    pub large_allocated_bytes: u64,
    pub large_allocated_bytes_peak: u64,
    pub large_allocated_bytes_total: u64,
    pub large_freed_bytes_total: u64,
    pub small_allocated_bytes: u64,
    pub small_allocated_bytes_peak: u64,
    pub small_allocated_bytes_total: u64,
    pub small_freed_bytes_total: u64,
    pub requested_bytes: u64,
    pub requested_bytes_peak: u64,
    pub alloc_count: u64,
    pub alloc_count_peak: u64,
    pub alloc_count_total: u64,
    pub free_count_total: u64,
    pub large_alloc_count: u64,
    pub large_alloc_count_peak: u64,
    pub large_alloc_count_total: u64,
    pub large_free_count_total: u64,
    pub small_alloc_count: u64,
    pub small_alloc_count_peak: u64,
    pub small_alloc_count_total: u64,
    pub small_free_count_total: u64,
    pub reserved_bytes: u64,
    pub reserved_bytes_peak: u64,
    pub reserved_bytes_total: u64,
    pub released_bytes_total: u64,
    pub segment_count: u64,
    pub segment_count_peak: u64,
    pub segment_count_total: u64,
    pub segment_release_count_total: u64,
    pub upstream_record_count: u64,
    pub failed_count: u64,
    pub oom_count: u64,
    pub first_failed_size: u64,
    pub unknown_free_count: u64,
    pub version: u32,
    pub device: i32,
    pub kind: [c_char; 32],
}

// The functions, in the order of the headers.
extern "C" {
    // core.h
    pub fn gpumem_version_number() -> u32;
    pub fn gpumem_version_string() -> *const c_char;
    pub fn gpumem_status_name(status: gpumem_status_t) -> *const c_char;
    pub fn gpumem_status_string(status: gpumem_status_t) -> *const c_char;
    pub fn gpumem_last_error_detail() -> *const c_char;
    pub fn gpumem_last_cuda_result() -> i32;

    // device.h
    pub fn gpumem_driver_get_version(out_version: *mut i32) -> gpumem_status_t;
    pub fn gpumem_device_get_count(out_count: *mut i32) -> gpumem_status_t;
    pub fn gpumem_device_get_info(device: i32, out_info: *mut gpumem_device_info_t) -> gpumem_status_t;
    pub fn gpumem_device_query_memory(device: i32, out_free: *mut usize, out_total: *mut usize) -> gpumem_status_t;
    pub fn gpumem_stream_wait(stream: gpumem_stream_t, producer: gpumem_stream_t) -> gpumem_status_t;

    // memory.h
    pub fn gpumem_device_alloc(device: i32, size: usize, out_ptr: *mut *mut c_void) -> gpumem_status_t;
    pub fn gpumem_device_free(ptr: *mut c_void) -> gpumem_status_t;
    pub fn gpumem_device_alloc_async(
        device: i32,
        size: usize,
        stream: gpumem_stream_t,
        out_ptr: *mut *mut c_void,
    ) -> gpumem_status_t;
    pub fn gpumem_device_alloc_from_pool(
        pool: gpumem_cuda_pool_t,
        size: usize,
        stream: gpumem_stream_t,
        out_ptr: *mut *mut c_void,
    ) -> gpumem_status_t;
    pub fn gpumem_device_free_async(ptr: *mut c_void, stream: gpumem_stream_t) -> gpumem_status_t;
    pub fn gpumem_host_alloc(size: usize, flags: u32, out_ptr: *mut *mut c_void) -> gpumem_status_t;
    pub fn gpumem_host_free(ptr: *mut c_void) -> gpumem_status_t;
    pub fn gpumem_host_register(ptr: *mut c_void, size: usize, flags: u32) -> gpumem_status_t;
    pub fn gpumem_host_unregister(ptr: *mut c_void) -> gpumem_status_t;
    pub fn gpumem_host_get_device_pointer(ptr: *mut c_void, out_device_ptr: *mut *mut c_void) -> gpumem_status_t;
    pub fn gpumem_managed_alloc(device: i32, size: usize, flags: u32, out_ptr: *mut *mut c_void) -> gpumem_status_t;
    pub fn gpumem_managed_free(ptr: *mut c_void) -> gpumem_status_t;
    pub fn gpumem_managed_prefetch(
        ptr: *mut c_void,
        size: usize,
        location: i32,
        stream: gpumem_stream_t,
    ) -> gpumem_status_t;
    pub fn gpumem_managed_advise(ptr: *mut c_void, size: usize, advice: i32, location: i32) -> gpumem_status_t;
    pub fn gpumem_managed_get_range_info(
        ptr: *const c_void,
        size: usize,
        out_info: *mut gpumem_managed_range_info_t,
    ) -> gpumem_status_t;

    // pointer.h
    pub fn gpumem_pointer_get_info(ptr: *const c_void, out_info: *mut gpumem_pointer_info_t) -> gpumem_status_t;

    // array.h
    pub fn gpumem_array_desc_init(desc: *mut gpumem_array_desc_t, struct_size: usize) -> gpumem_status_t;
    pub fn gpumem_array_create(
        desc: *const gpumem_array_desc_t,
        out_array: *mut *mut gpumem_array_t,
    ) -> gpumem_status_t;
    pub fn gpumem_array_destroy(array: *mut gpumem_array_t) -> gpumem_status_t;
    pub fn gpumem_array_get_desc(array: *const gpumem_array_t, out_desc: *mut gpumem_array_desc_t) -> gpumem_status_t;

    // copy.h
    pub fn gpumem_memset(dst: *mut c_void, value: u32, element_size: u32, count: usize) -> gpumem_status_t;
    pub fn gpumem_memset_async(
        dst: *mut c_void,
        value: u32,
        element_size: u32,
        count: usize,
        stream: gpumem_stream_t,
    ) -> gpumem_status_t;
    pub fn gpumem_copy(dst: *mut c_void, src: *const c_void, size: usize) -> gpumem_status_t;
    pub fn gpumem_copy_async(
        dst: *mut c_void,
        src: *const c_void,
        size: usize,
        stream: gpumem_stream_t,
    ) -> gpumem_status_t;
    pub fn gpumem_copy2d_init(copy: *mut gpumem_copy2d_t, struct_size: usize) -> gpumem_status_t;
    pub fn gpumem_copy3d_init(copy: *mut gpumem_copy3d_t, struct_size: usize) -> gpumem_status_t;
    pub fn gpumem_copy2d(copy: *const gpumem_copy2d_t) -> gpumem_status_t;
    pub fn gpumem_copy2d_async(copy: *const gpumem_copy2d_t, stream: gpumem_stream_t) -> gpumem_status_t;
    pub fn gpumem_copy3d(copy: *const gpumem_copy3d_t) -> gpumem_status_t;
    pub fn gpumem_copy3d_async(copy: *const gpumem_copy3d_t, stream: gpumem_stream_t) -> gpumem_status_t;
    pub fn gpumem_copy_staging_get_held(out_bytes: *mut usize) -> gpumem_status_t;
    pub fn gpumem_copy_staging_release() -> gpumem_status_t;

    // allocator.h
    pub fn gpumem_allocator_create_device(device: i32, out_allocator: *mut *mut gpumem_allocator_t) -> gpumem_status_t;
    pub fn gpumem_allocator_create_device_async(
        device: i32,
        cuda_pool: gpumem_cuda_pool_t,
        out_allocator: *mut *mut gpumem_allocator_t,
    ) -> gpumem_status_t;
    pub fn gpumem_allocator_create_managed(
        device: i32,
        flags: u32,
        out_allocator: *mut *mut gpumem_allocator_t,
    ) -> gpumem_status_t;
    pub fn gpumem_allocator_create_pinned(flags: u32, out_allocator: *mut *mut gpumem_allocator_t) -> gpumem_status_t;
    pub fn gpumem_allocator_create_host(
        alignment: usize,
        out_allocator: *mut *mut gpumem_allocator_t,
    ) -> gpumem_status_t;
    pub fn gpumem_allocator_create_functions(
        functions: *const gpumem_allocator_functions_t,
        out_allocator: *mut *mut gpumem_allocator_t,
    ) -> gpumem_status_t;
    pub fn gpumem_allocator_destroy(allocator: *mut gpumem_allocator_t) -> gpumem_status_t;
    pub fn gpumem_allocator_destroy_force(allocator: *mut gpumem_allocator_t) -> gpumem_status_t;
    pub fn gpumem_allocator_get_device(allocator: *mut gpumem_allocator_t, out_device: *mut i32) -> gpumem_status_t;
    pub fn gpumem_alloc(
        allocator: *mut gpumem_allocator_t,
        size: usize,
        stream: gpumem_stream_t,
        out_ptr: *mut *mut c_void,
    ) -> gpumem_status_t;
    pub fn gpumem_free(
        allocator: *mut gpumem_allocator_t,
        ptr: *mut c_void,
        stream: gpumem_stream_t,
    ) -> gpumem_status_t;
    pub fn gpumem_allocator_set_default(device: i32, allocator: *mut gpumem_allocator_t) -> gpumem_status_t;
    pub fn gpumem_allocator_get_default(device: i32, out_allocator: *mut *mut gpumem_allocator_t) -> gpumem_status_t;
    pub fn gpumem_allocator_set_thread(
        allocator: *mut gpumem_allocator_t,
        out_previous: *mut *mut gpumem_allocator_t,
    ) -> gpumem_status_t;
    pub fn gpumem_allocator_get_thread(out_allocator: *mut *mut gpumem_allocator_t) -> gpumem_status_t;
    pub fn gpumem_allocator_get_stats(
        allocator: *mut gpumem_allocator_t,
        out_stats: *mut gpumem_allocator_stats_t,
    ) -> gpumem_status_t;
    pub fn gpumem_allocator_reset_peaks(allocator: *mut gpumem_allocator_t) -> gpumem_status_t;
    pub fn gpumem_allocator_add_hook(
        allocator: *mut gpumem_allocator_t,
        events: u32,
        hook: gpumem_hook_fn,
        user_data: *mut c_void,
        out_hook_id: *mut u64,
    ) -> gpumem_status_t;
    pub fn gpumem_allocator_remove_hook(allocator: *mut gpumem_allocator_t, hook_id: u64) -> gpumem_status_t;

    // pool.h
    pub fn gpumem_pool_params_init(params: *mut gpumem_pool_params_t, struct_size: usize) -> gpumem_status_t;
    pub fn gpumem_pool_create(
        params: *const gpumem_pool_params_t,
        out_pool: *mut *mut gpumem_allocator_t,
    ) -> gpumem_status_t;
    pub fn gpumem_pool_get_device(device: i32, out_pool: *mut *mut gpumem_allocator_t) -> gpumem_status_t;
    pub fn gpumem_pool_release(pool: *mut gpumem_allocator_t, stream: gpumem_stream_t, flags: u32) -> gpumem_status_t;
    pub fn gpumem_pool_get_info(pool: *mut gpumem_allocator_t, out_info: *mut gpumem_pool_info_t) -> gpumem_status_t;
    pub fn gpumem_pool_get_growth_info(
        pool: *mut gpumem_allocator_t,
        out_info: *mut gpumem_pool_growth_info_t,
    ) -> gpumem_status_t;
    pub fn gpumem_pool_snapshot(
        pool: *mut gpumem_allocator_t,
        block_fn: gpumem_block_fn,
        user_data: *mut c_void,
    ) -> gpumem_status_t;
    pub fn gpumem_pool_snapshot_json(pool: *mut gpumem_allocator_t, path: *const c_char) -> gpumem_status_t;
    pub fn gpumem_pool_set_limit(pool: *mut gpumem_allocator_t, limit: u64) -> gpumem_status_t;
    pub fn gpumem_pool_set_soft_limit(pool: *mut gpumem_allocator_t, soft_limit: u64) -> gpumem_status_t;
    pub fn gpumem_pool_set_limit_fraction(pool: *mut gpumem_allocator_t, fraction: f64) -> gpumem_status_t;
    pub fn gpumem_pool_set_stream_reuse(pool: *mut gpumem_allocator_t, reuse: i32) -> gpumem_status_t;
    pub fn gpumem_pool_set_page_reclaim(pool: *mut gpumem_allocator_t, enable: i32) -> gpumem_status_t;
    pub fn gpumem_pool_set_device_config(config: *const c_char) -> gpumem_status_t;
    pub fn gpumem_pool_record_stream(
        pool: *mut gpumem_allocator_t,
        ptr: *mut c_void,
        stream: gpumem_stream_t,
    ) -> gpumem_status_t;
    pub fn gpumem_reclaim_add(reclaim: gpumem_reclaim_fn, user_data: *mut c_void, out_id: *mut u64) -> gpumem_status_t;
    pub fn gpumem_reclaim_remove(id: u64) -> gpumem_status_t;

    // cuda_pool.h
    pub fn gpumem_cuda_pool_params_init(params: *mut gpumem_cuda_pool_params_t, struct_size: usize) -> gpumem_status_t;
    pub fn gpumem_allocator_create_cuda_pool(
        params: *const gpumem_cuda_pool_params_t,
        out_allocator: *mut *mut gpumem_allocator_t,
    ) -> gpumem_status_t;
    pub fn gpumem_cuda_pool_get(
        allocator: *mut gpumem_allocator_t,
        out_pool: *mut gpumem_cuda_pool_t,
    ) -> gpumem_status_t;
    pub fn gpumem_cuda_pool_trim(allocator: *mut gpumem_allocator_t, keep_bytes: u64) -> gpumem_status_t;
    pub fn gpumem_cuda_pool_set_release_threshold(allocator: *mut gpumem_allocator_t, bytes: u64) -> gpumem_status_t;
    pub fn gpumem_cuda_pool_get_info(
        allocator: *mut gpumem_allocator_t,
        out_info: *mut gpumem_cuda_pool_info_t,
    ) -> gpumem_status_t;
    pub fn gpumem_cuda_pool_reset_peaks(allocator: *mut gpumem_allocator_t) -> gpumem_status_t;
    pub fn gpumem_allocator_set_peer_access(
        allocator: *mut gpumem_allocator_t,
        peer_device: i32,
        access: u32,
    ) -> gpumem_status_t;

    // vm.h
    pub fn gpumem_vm_params_init(params: *mut gpumem_vm_params_t, struct_size: usize) -> gpumem_status_t;
    pub fn gpumem_allocator_create_vm(
        params: *const gpumem_vm_params_t,
        out_allocator: *mut *mut gpumem_allocator_t,
    ) -> gpumem_status_t;
    pub fn gpumem_vm_get_info(allocator: *mut gpumem_allocator_t, out_info: *mut gpumem_vm_info_t) -> gpumem_status_t;

    // ipc.h (file descriptors are `c_int`)
    pub fn gpumem_ipc_export(
        allocator: *mut gpumem_allocator_t,
        ptr: *mut c_void,
        out_handle: *mut gpumem_ipc_handle_t,
        out_fd_count: *mut usize,
    ) -> gpumem_status_t;
    pub fn gpumem_ipc_export_fds(handle: *const gpumem_ipc_handle_t, out_fds: *mut c_int, count: usize) -> gpumem_status_t;
    pub fn gpumem_ipc_open(
        handle: *const gpumem_ipc_handle_t,
        fds: *const c_int,
        fd_count: usize,
        out_ptr: *mut *mut c_void,
        out_size: *mut usize,
    ) -> gpumem_status_t;
    pub fn gpumem_ipc_close(ptr: *mut c_void) -> gpumem_status_t;
    pub fn gpumem_ipc_send(socket: c_int, handle: *const gpumem_ipc_handle_t) -> gpumem_status_t;
    pub fn gpumem_ipc_receive(socket: c_int, out_ptr: *mut *mut c_void, out_size: *mut usize) -> gpumem_status_t;
    pub fn gpumem_ipc_collect(out_freed: *mut u64) -> gpumem_status_t;
    pub fn gpumem_ipc_get_info(out_info: *mut gpumem_ipc_info_t) -> gpumem_status_t;

    // tenant.h
    pub fn gpumem_tenant_params_init(params: *mut gpumem_tenant_params_t, struct_size: usize) -> gpumem_status_t;
    pub fn gpumem_tenant_create(
        params: *const gpumem_tenant_params_t,
        out_tenant: *mut *mut gpumem_allocator_t,
    ) -> gpumem_status_t;
    pub fn gpumem_tenant_set_limits(tenant: *mut gpumem_allocator_t, limit: u64, soft_limit: u64) -> gpumem_status_t;
    pub fn gpumem_tenant_get_info(tenant: *mut gpumem_allocator_t, out_info: *mut gpumem_tenant_info_t) -> gpumem_status_t;

    // torch.h (`ptrdiff_t` is `isize`, PyTorch's `ssize_t` on LP64 Linux)
    pub fn gpumem_torch_alloc(size: isize, device: i32, stream: gpumem_stream_t) -> *mut c_void;
    /// Throws C++ exceptions on failure: for PyTorch's pluggable allocator only, never to call from Rust.
    pub fn gpumem_torch_alloc_raising(size: isize, device: i32, stream: gpumem_stream_t) -> *mut c_void;
    pub fn gpumem_torch_free(ptr: *mut c_void, size: isize, device: i32, stream: gpumem_stream_t);
    pub fn gpumem_torch_set_allocator(device: i32, allocator: *mut gpumem_allocator_t) -> gpumem_status_t;
    pub fn gpumem_torch_record_stream(ptr: *mut c_void, stream: gpumem_stream_t);

    // cupy.h (`target` is a `*mut gpumem_cupy_target_t`, passed through CuPy as its `void*` param)
    pub fn gpumem_cupy_alloc(target: *mut c_void, size: usize, device: i32) -> *mut c_void;
    pub fn gpumem_cupy_free(target: *mut c_void, ptr: *mut c_void, device: i32);

    // pin.h
    pub fn gpumem_pin(ptr: *mut c_void, size: usize, flags: u32) -> gpumem_status_t;
    pub fn gpumem_unpin(ptr: *mut c_void, size: usize) -> gpumem_status_t;
    pub fn gpumem_pin_query(ptr: *const c_void, size: usize, out_state: *mut i32) -> gpumem_status_t;
    pub fn gpumem_pin_forget(ptr: *mut c_void, size: usize) -> gpumem_status_t;
    pub fn gpumem_pin_cache_flush() -> gpumem_status_t;
    pub fn gpumem_pin_cache_set_budget(bytes: u64) -> gpumem_status_t;
    pub fn gpumem_pin_get_stats(out_stats: *mut gpumem_pin_stats_t) -> gpumem_status_t;

    // trace.h
    pub fn gpumem_trace_start(
        allocator: *mut gpumem_allocator_t,
        path: *const c_char,
        flags: u32,
        out_trace: *mut *mut gpumem_trace_t,
    ) -> gpumem_status_t;
    pub fn gpumem_trace_params_init(params: *mut gpumem_trace_params_t, struct_size: usize) -> gpumem_status_t;
    pub fn gpumem_trace_start_with_params(
        allocator: *mut gpumem_allocator_t,
        path: *const c_char,
        params: *const gpumem_trace_params_t,
        out_trace: *mut *mut gpumem_trace_t,
    ) -> gpumem_status_t;
    pub fn gpumem_trace_stop(trace: *mut gpumem_trace_t) -> gpumem_status_t;
    pub fn gpumem_trace_reader_open(
        path: *const c_char,
        out_reader: *mut *mut gpumem_trace_reader_t,
    ) -> gpumem_status_t;
    pub fn gpumem_trace_reader_get_header(
        reader: *mut gpumem_trace_reader_t,
        out_header: *mut gpumem_trace_header_t,
    ) -> gpumem_status_t;
    pub fn gpumem_trace_reader_next(
        reader: *mut gpumem_trace_reader_t,
        out_record: *mut gpumem_trace_record_t,
        out_has_record: *mut bool,
    ) -> gpumem_status_t;
    pub fn gpumem_trace_reader_get_frame(
        reader: *mut gpumem_trace_reader_t,
        index: u32,
        out_frame: *mut gpumem_trace_frame_t,
    ) -> gpumem_status_t;
    pub fn gpumem_trace_reader_close(reader: *mut gpumem_trace_reader_t) -> gpumem_status_t;
    pub fn gpumem_trace_summarize(
        path: *const c_char,
        top: u32,
        write_text: gpumem_trace_text_fn,
        user_data: *mut c_void,
        out_summary: *mut gpumem_trace_summary_t,
    ) -> gpumem_status_t;
}
