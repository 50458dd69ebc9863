# The C ABI of libgpumem as Julia sees it: loading the library, the constants, the structs and one
# `ccall` per exported function, each named and typed as in include/gpumem/*.h. Names are the C
# names, so that scripts/abi/check_bindings.py can check every declaration here against the ABI
# description (abi/gpumem-abi.json).
# These functions return the status; the rest of the package passes it to `check`.

## Loading

const DEFAULT_LIBRARY = "libgpumem.so.0"
const REQUIRED_VERSION = v"0.4.0"

const LIBRARY_LOCK = ReentrantLock()
const LIBRARY_HANDLE = Ref{Ptr{Cvoid}}(C_NULL)

# The library is chosen when the package is used, not when it is precompiled: GPUMEM_LIBRARY may
# differ between the two, and a path or handle stored while precompiling would be stale on load.
# Julia 1.6 takes the `(name, library)` of `ccall` as a constant only, and a `const` path would be
# the precompiling process's, so each call goes through a function pointer instead: `ccall` takes
# one as its first argument when that argument is evaluated at run time ("Indirect Calls" in the
# manual). `@sym` resolves it with `dlsym` on first use and keeps it in a cache of its own call
# site; nothing is cached while precompiling, so no address outlives the process that found it.
generating_output() = ccall(:jl_generating_output, Cint, ()) != 0

macro sym(name)
    cache = Ref{Ptr{Cvoid}}(C_NULL)
    return quote
        let fptr = $cache[]
            if fptr == C_NULL
                fptr = lookup($(esc(name)))::Ptr{Cvoid}
                if !generating_output()
                    $cache[] = fptr
                end
            end
            fptr
        end
    end
end

"""
    library_path()

The file of the libgpumem that is loaded, loading it if it is not yet: the one named by the
environment variable `GPUMEM_LIBRARY`, else `libgpumem.so.0` from the dynamic loader's search.
Throws [`LibraryError`](@ref) when it cannot be loaded or is not a version this package can use.
"""
library_path() = Libdl.dlpath(library_handle())

# A handle stored while precompiling is harmless: `__init__` clears it when the package loads.
function library_handle()
    handle = LIBRARY_HANDLE[]
    handle == C_NULL || return handle
    return lock(LIBRARY_LOCK) do
        if LIBRARY_HANDLE[] == C_NULL
            LIBRARY_HANDLE[] = open_library()
        end
        LIBRARY_HANDLE[]
    end
end

function open_library()
    path = get(ENV, "GPUMEM_LIBRARY", "")
    if isempty(path)
        path = DEFAULT_LIBRARY
        tried = "$path (through the dynamic loader's search path)"
    else
        tried = "$path (from GPUMEM_LIBRARY)"
    end
    handle = try
        Libdl.dlopen(path)
    catch err
        throw(LibraryError("cannot load libgpumem: tried $tried: $(sprint(showerror, err)); set " *
                           "GPUMEM_LIBRARY to the library's path, or put its directory on LD_LIBRARY_PATH"))
    end
    try
        check_version(handle, tried)
    catch
        Libdl.dlclose(handle)
        rethrow()
    end
    return handle
end

# The version first: a library of another version may lack functions that later calls look up.
function check_version(handle::Ptr{Cvoid}, tried::AbstractString)
    has_version = try
        Libdl.dlsym(handle, :gpumem_version_number)
        true
    catch
        false
    end
    has_version || throw(LibraryError("$tried is not libgpumem: it has no gpumem_version_number"))
    have = version_from_number(ccall(Libdl.dlsym(handle, :gpumem_version_number), UInt32, ()))
    if !compatible(have)
        series = REQUIRED_VERSION.major == 0 ? "$(REQUIRED_VERSION.major).$(REQUIRED_VERSION.minor)" :
                 "$(REQUIRED_VERSION.major).x"
        throw(LibraryError("$tried is libgpumem $have; this GPUMem package needs $REQUIRED_VERSION or a later " *
                           "$series release"))
    end
    return nothing
end

# The same major version, not older; while the major version is 0 the ABI may change between
# minor versions, so the same minor version too.
function compatible(have::VersionNumber, need::VersionNumber = REQUIRED_VERSION)
    have.major == need.major || return false
    need.major == 0 && have.minor != need.minor && return false
    return have >= need
end

@noinline function lookup(name::Symbol)
    handle = library_handle()
    try
        return Libdl.dlsym(handle, name)::Ptr{Cvoid}
    catch
        have = version_from_number(ccall(Libdl.dlsym(handle, :gpumem_version_number), UInt32, ()))
        throw(LibraryError("$(Libdl.dlpath(handle)) (libgpumem $have) lacks $name"))
    end
end

version_from_number(n::Integer) = VersionNumber(div(n, 10000), rem(div(n, 100), 100), rem(n, 100))

## Constants (core.h and the enums of each header)

const GPUMEM_SUCCESS = Int32(0)
const GPUMEM_ERROR_INVALID_ARGUMENT = Int32(-1)
const GPUMEM_ERROR_OUT_OF_MEMORY = Int32(-2)
const GPUMEM_ERROR_NO_DRIVER = Int32(-3)
const GPUMEM_ERROR_NO_DEVICE = Int32(-4)
const GPUMEM_ERROR_INVALID_DEVICE = Int32(-5)
const GPUMEM_ERROR_NOT_SUPPORTED = Int32(-6)
const GPUMEM_ERROR_INVALID_POINTER = Int32(-7)
const GPUMEM_ERROR_INVALID_HANDLE = Int32(-8)
const GPUMEM_ERROR_ALREADY_REGISTERED = Int32(-9)
const GPUMEM_ERROR_STREAM_CAPTURE = Int32(-10)
const GPUMEM_ERROR_DRIVER = Int32(-11)
const GPUMEM_ERROR_INTERNAL = Int32(-12)
const GPUMEM_ERROR_NOT_OWNED = Int32(-13)
const GPUMEM_ERROR_BUSY = Int32(-14)
const GPUMEM_ERROR_IO = Int32(-15)

# Stream handles as integers: a `Ptr` constant would be null once loaded from a precompiled image.
const GPUMEM_STREAM_LEGACY = UInt(0x1)
const GPUMEM_STREAM_PER_THREAD = UInt(0x2)

const GPUMEM_HOST_ALLOC_PORTABLE = UInt32(0x1)
const GPUMEM_HOST_ALLOC_DEVICEMAP = UInt32(0x2)
const GPUMEM_HOST_ALLOC_WRITECOMBINED = UInt32(0x4)

const GPUMEM_HOST_REGISTER_PORTABLE = UInt32(0x1)
const GPUMEM_HOST_REGISTER_DEVICEMAP = UInt32(0x2)
const GPUMEM_HOST_REGISTER_IOMEMORY = UInt32(0x4)
const GPUMEM_HOST_REGISTER_READ_ONLY = UInt32(0x8)

const GPUMEM_MANAGED_ATTACH_GLOBAL = UInt32(0x1)
const GPUMEM_MANAGED_ATTACH_HOST = UInt32(0x2)

const GPUMEM_LOCATION_HOST = Int32(-1)
const GPUMEM_LOCATION_NONE = Int32(-2)

const GPUMEM_ADVICE_SET_READ_MOSTLY = Int32(1)
const GPUMEM_ADVICE_UNSET_READ_MOSTLY = Int32(2)
const GPUMEM_ADVICE_SET_PREFERRED_LOCATION = Int32(3)
const GPUMEM_ADVICE_UNSET_PREFERRED_LOCATION = Int32(4)
const GPUMEM_ADVICE_SET_ACCESSED_BY = Int32(5)
const GPUMEM_ADVICE_UNSET_ACCESSED_BY = Int32(6)

const GPUMEM_MEMORY_UNREGISTERED = Int32(0)
const GPUMEM_MEMORY_HOST = Int32(1)
const GPUMEM_MEMORY_DEVICE = Int32(2)
const GPUMEM_MEMORY_MANAGED = Int32(3)

const GPUMEM_FORMAT_U8 = Int32(1)
const GPUMEM_FORMAT_U16 = Int32(2)
const GPUMEM_FORMAT_U32 = Int32(3)
const GPUMEM_FORMAT_I8 = Int32(4)
const GPUMEM_FORMAT_I16 = Int32(5)
const GPUMEM_FORMAT_I32 = Int32(6)
const GPUMEM_FORMAT_F16 = Int32(7)
const GPUMEM_FORMAT_F32 = Int32(8)

const GPUMEM_COPY_STAGING_LIMIT = UInt64(33554432)

const GPUMEM_HOOK_MALLOC_PRE = UInt32(0x1)
const GPUMEM_HOOK_MALLOC_POST = UInt32(0x2)
const GPUMEM_HOOK_UPSTREAM_ALLOC_PRE = UInt32(0x4)
const GPUMEM_HOOK_UPSTREAM_ALLOC_POST = UInt32(0x8)
const GPUMEM_HOOK_FREE_PRE = UInt32(0x10)
const GPUMEM_HOOK_FREE_POST = UInt32(0x20)
const GPUMEM_HOOK_ALL = UInt32(0x3f)

const GPUMEM_BLOCK_FREE = UInt32(0)
const GPUMEM_BLOCK_IN_USE = UInt32(1)
const GPUMEM_BLOCK_PENDING = UInt32(2)
const GPUMEM_BLOCK_UNMAPPED = UInt32(3)

const GPUMEM_POOL_RELEASE_ALL_STREAMS = UInt32(0x1)

const GPUMEM_STREAM_REUSE_NEVER = Int32(0)
const GPUMEM_STREAM_REUSE_FENCE = Int32(1)
const GPUMEM_STREAM_REUSE_HOST_WAIT = Int32(2)

const GPUMEM_CUDA_POOL_CURRENT = UInt32(0)
const GPUMEM_CUDA_POOL_DEFAULT = UInt32(1)
const GPUMEM_CUDA_POOL_EXTERNAL = UInt32(2)
const GPUMEM_CUDA_POOL_NEW = UInt32(3)
const GPUMEM_CUDA_POOL_KEEP_THRESHOLD = 0xfffffffffffffffe

const GPUMEM_PEER_ACCESS_NONE = UInt32(0)
const GPUMEM_PEER_ACCESS_READ_WRITE = UInt32(1)

const GPUMEM_PIN_NONE = Int32(0)
const GPUMEM_PIN_PARTIAL = Int32(1)
const GPUMEM_PIN_FULL = Int32(2)

const GPUMEM_TRACE_ALLOC = UInt32(1)
const GPUMEM_TRACE_FREE = UInt32(2)
const GPUMEM_TRACE_UPSTREAM_ALLOC = UInt32(3)
const GPUMEM_TRACE_UPSTREAM_FREE = UInt32(4)
const GPUMEM_TRACE_ALLOC_FAILED = UInt32(5)
const GPUMEM_TRACE_MAX_FRAMES = 64
const GPUMEM_TRACE_NATIVE_FRAMES = UInt32(0x1)
const GPUMEM_TRACE_FRAME_NATIVE = UInt32(1)
const GPUMEM_TRACE_FRAME_CALLER = UInt32(2)

## Types

const gpumem_status_t = Int32

# Opaque: only pointers to them cross the ABI.
mutable struct gpumem_allocator_t end
mutable struct gpumem_array_t end
mutable struct gpumem_trace_t end
mutable struct gpumem_trace_reader_t end
mutable struct CUstream_st end
mutable struct CUmemPoolHandle_st end

const gpumem_stream_t = Ptr{CUstream_st}
const gpumem_cuda_pool_t = Ptr{CUmemPoolHandle_st}

# Function pointers, from `@cfunction`.
const gpumem_alloc_fn = Ptr{Cvoid}
const gpumem_free_fn = Ptr{Cvoid}
const gpumem_context_destroy_fn = Ptr{Cvoid}
const gpumem_reserve_fn = Ptr{Cvoid}
const gpumem_map_fn = Ptr{Cvoid}
const gpumem_hook_fn = Ptr{Cvoid}
const gpumem_block_fn = Ptr{Cvoid}
const gpumem_reclaim_fn = Ptr{Cvoid}
const gpumem_trace_frames_fn = Ptr{Cvoid}
const gpumem_trace_text_fn = Ptr{Cvoid}

"""
    gpumem_device_info_t

What a device is (`device.h`); `name` is NUL-terminated. [`device_info`](@ref) gives it in Julia types.
"""
struct gpumem_device_info_t
    struct_size::Csize_t
    name::NTuple{256,Cchar}
    total_memory::Csize_t
    compute_capability_major::Int32
    compute_capability_minor::Int32
    unified_addressing::Bool
    managed_memory::Bool
    concurrent_managed_access::Bool
    memory_pools::Bool
    pageable_memory_access::Bool
    host_register::Bool
    can_map_host_memory::Bool
end

"""
    gpumem_managed_range_info_t

The advice and prefetch state of a managed range (`memory.h`), from [`range_info`](@ref).
"""
struct gpumem_managed_range_info_t
    struct_size::Csize_t
    read_mostly::Bool
    preferred_location::Int32
    last_prefetch_location::Int32
    accessed_by::UInt64
end

"""
    gpumem_pointer_info_t

What the driver knows about an address (`pointer.h`), from [`pointer_info`](@ref).
"""
struct gpumem_pointer_info_t
    struct_size::Csize_t
    memory_type::Int32
    device::Int32
    is_managed::Bool
    is_pinned::Bool
    host_ptr::Ptr{Cvoid}
    device_ptr::Ptr{Cvoid}
    base::Ptr{Cvoid}
    size::Csize_t
end

"""
    gpumem_array_desc_t

Shape and element type of a CUDA array (`array.h`).
"""
struct gpumem_array_desc_t
    struct_size::Csize_t
    device::Int32
    format::Int32
    channels::UInt32
    width::Csize_t
    height::Csize_t
    depth::Csize_t
end

"""
    gpumem_copy2d_t

A 2D copy (`copy.h`); [`unsafe_copy2d!`](@ref) fills it.
"""
struct gpumem_copy2d_t
    struct_size::Csize_t
    dst::Ptr{Cvoid}
    dst_array::Ptr{gpumem_array_t}
    dst_x::Csize_t
    dst_y::Csize_t
    dst_pitch::Csize_t
    src::Ptr{Cvoid}
    src_array::Ptr{gpumem_array_t}
    src_x::Csize_t
    src_y::Csize_t
    src_pitch::Csize_t
    width::Csize_t
    height::Csize_t
end

"""
    gpumem_copy3d_t

A 3D copy (`copy.h`); [`unsafe_copy3d!`](@ref) fills it.
"""
struct gpumem_copy3d_t
    struct_size::Csize_t
    dst::Ptr{Cvoid}
    dst_array::Ptr{gpumem_array_t}
    dst_x::Csize_t
    dst_y::Csize_t
    dst_z::Csize_t
    dst_pitch::Csize_t
    dst_height::Csize_t
    src::Ptr{Cvoid}
    src_array::Ptr{gpumem_array_t}
    src_x::Csize_t
    src_y::Csize_t
    src_z::Csize_t
    src_pitch::Csize_t
    src_height::Csize_t
    width::Csize_t
    height::Csize_t
    depth::Csize_t
end

"""
    gpumem_allocator_functions_t

An allocator given as C functions (`allocator.h`); [`function_allocator`](@ref) builds one from
Julia functions.
"""
struct gpumem_allocator_functions_t
    struct_size::Csize_t
    context::Ptr{Cvoid}
    device::Int32
    alloc::gpumem_alloc_fn
    free::gpumem_free_fn
    destroy::gpumem_context_destroy_fn
    reserve::gpumem_reserve_fn
    unreserve::gpumem_map_fn
    map::gpumem_map_fn
    unmap::gpumem_map_fn
    map_unit::UInt64
    range_size::UInt64
end

"""
    gpumem_allocator_stats_t

Statistics of an allocator (`allocator.h`), from [`stats`](@ref).
"""
struct gpumem_allocator_stats_t
    struct_size::Csize_t
    bytes_in_use::UInt64
    peak_bytes_in_use::UInt64
    bytes_requested::UInt64
    bytes_reserved::UInt64
    peak_bytes_reserved::UInt64
    alloc_count::UInt64
    free_count::UInt64
    upstream_alloc_count::UInt64
    upstream_free_count::UInt64
    retry_count::UInt64
    oom_count::UInt64
end

"""
    gpumem_hook_info_t

What a hook is told (`allocator.h`); see [`add_hook`](@ref).
"""
struct gpumem_hook_info_t
    struct_size::Csize_t
    event::UInt32
    device::Int32
    allocator::Ptr{gpumem_allocator_t}
    size::Csize_t
    mem_size::Csize_t
    ptr::Ptr{Cvoid}
    stream::gpumem_stream_t
    status::gpumem_status_t
end

"""
    gpumem_pool_params_t

How to build a pool (`pool.h`); [`pool`](@ref) fills it.
"""
struct gpumem_pool_params_t
    struct_size::Csize_t
    upstream::Ptr{gpumem_allocator_t}
    limit::UInt64
    limit_fraction::Cdouble
end

"""
    gpumem_pool_growth_info_t

What a pool's growth has cost (`pool.h`).
"""
struct gpumem_pool_growth_info_t
    struct_size::Csize_t
    mapped_bytes::UInt64
    map_calls::UInt64
    moved_bytes::UInt64
    move_calls::UInt64
    returned_bytes::UInt64
    fences_recorded::UInt64
    driver_ns::UInt64
end

"""
    gpumem_pool_info_t

What a pool holds (`pool.h`), from [`info`](@ref).
"""
struct gpumem_pool_info_t
    struct_size::Csize_t
    used_bytes::UInt64
    free_bytes::UInt64
    total_bytes::UInt64
    free_block_count::UInt64
    limit::UInt64
    arena_count::UInt32
    pending_bytes::UInt64
    address_bytes::UInt64
end

"""
    gpumem_block_info_t

One block of a pool (`pool.h`), from [`snapshot`](@ref).
"""
struct gpumem_block_info_t
    struct_size::Csize_t
    segment::Ptr{Cvoid}
    segment_size::Csize_t
    address::Ptr{Cvoid}
    size::Csize_t
    requested::Csize_t
    state::UInt32
    stream::gpumem_stream_t
end

"""
    gpumem_cuda_pool_params_t

How to build an allocator over a CUDA memory pool (`cuda_pool.h`); [`cuda_pool_allocator`](@ref)
fills it.
"""
struct gpumem_cuda_pool_params_t
    struct_size::Csize_t
    device::Int32
    source::UInt32
    pool::gpumem_cuda_pool_t
    max_size::UInt64
    release_threshold::UInt64
    flags::UInt32
end

"""
    gpumem_cuda_pool_info_t

What a CUDA memory pool holds (`cuda_pool.h`), from [`cuda_pool_info`](@ref).
"""
struct gpumem_cuda_pool_info_t
    struct_size::Csize_t
    reserved::UInt64
    reserved_high::UInt64
    used::UInt64
    used_high::UInt64
    release_threshold::UInt64
end

"""
    gpumem_cupy_target_t

Where CuPy's memory comes from (`cupy.h`); for CuPy's C-function allocator, not used from Julia.
"""
struct gpumem_cupy_target_t
    struct_size::Csize_t
    allocator::Ptr{gpumem_allocator_t}
    stream::gpumem_stream_t
end

"""
    gpumem_pin_stats_t

Statistics of the pinning service (`pin.h`), from [`pin_stats`](@ref).
"""
struct gpumem_pin_stats_t
    struct_size::Csize_t
    bytes_registered::UInt64
    bytes_pinned::UInt64
    bytes_cached::UInt64
    registrations::UInt64
    pins::UInt64
    unpins::UInt64
    hits::UInt64
    misses::UInt64
    evictions::UInt64
    cache_budget::UInt64
end

"""
    gpumem_trace_header_t

The header of a trace file (`trace.h`), from [`read_trace`](@ref); `kind` is NUL-terminated.
"""
struct gpumem_trace_header_t
    struct_size::Csize_t
    version::UInt32
    device::Int32
    start_unix_ns::UInt64
    kind::NTuple{32,Cchar}
end

"""
    gpumem_trace_record_t

One record of a trace (`trace.h`), from [`read_trace`](@ref).
"""
struct gpumem_trace_record_t
    struct_size::Csize_t
    event::UInt32
    thread::UInt32
    time_ns::UInt64
    stream::UInt64
    address::UInt64
    size::UInt64
    mem_size::UInt64
    status::gpumem_status_t
    stack::UInt64
    frame_count::UInt32
end

"How to record (`trace.h`): what to keep beside the events."
struct gpumem_trace_params_t
    struct_size::Csize_t
    flags::UInt32
    max_frames::UInt32
    frames::gpumem_trace_frames_fn
    frames_user_data::Ptr{Cvoid}
end

"One frame of a trace record (`trace.h`), from `gpumem_trace_reader_get_frame`; its strings are the reader's."
struct gpumem_trace_frame_t
    struct_size::Csize_t
    kind::UInt32
    address::UInt64
    module_offset::UInt64
    symbol_offset::UInt64
    module::Cstring
    symbol::Cstring
    text::Cstring
end

"What a trace says its allocator did (`trace.h`), from `gpumem_trace_summarize`."
struct gpumem_trace_summary_t
    struct_size::Csize_t
    records::UInt64
    peak_record::UInt64
    peak_record_alloc_count::UInt64
    allocated_bytes::UInt64
    allocated_bytes_peak::UInt64
    allocated_bytes_total::UInt64
    freed_bytes_total::UInt64
    large_allocated_bytes::UInt64
    large_allocated_bytes_peak::UInt64
    large_allocated_bytes_total::UInt64
    large_freed_bytes_total::UInt64
    small_allocated_bytes::UInt64
    small_allocated_bytes_peak::UInt64
    small_allocated_bytes_total::UInt64
    small_freed_bytes_total::UInt64
    requested_bytes::UInt64
    requested_bytes_peak::UInt64
    alloc_count::UInt64
    alloc_count_peak::UInt64
    alloc_count_total::UInt64
    free_count_total::UInt64
    large_alloc_count::UInt64
    large_alloc_count_peak::UInt64
    large_alloc_count_total::UInt64
    large_free_count_total::UInt64
    small_alloc_count::UInt64
    small_alloc_count_peak::UInt64
    small_alloc_count_total::UInt64
    small_free_count_total::UInt64
    reserved_bytes::UInt64
    reserved_bytes_peak::UInt64
    reserved_bytes_total::UInt64
    released_bytes_total::UInt64
    segment_count::UInt64
    segment_count_peak::UInt64
    segment_count_total::UInt64
    segment_release_count_total::UInt64
    upstream_record_count::UInt64
    failed_count::UInt64
    oom_count::UInt64
    first_failed_size::UInt64
    unknown_free_count::UInt64
    version::UInt32
    device::Int32
    kind::NTuple{32,Cchar}
end

"""
    gpumem_vm_params_t

How to build a VM allocator (`vm.h`); [`vm_allocator`](@ref) fills it.
"""
struct gpumem_vm_params_t
    struct_size::Csize_t
    device::Int32
    range_size::UInt64
    map_unit::UInt64
end

"""
    gpumem_vm_info_t

What a VM allocator holds (`vm.h`), from [`vm_info`](@ref).
"""
struct gpumem_vm_info_t
    struct_size::Csize_t
    map_unit::UInt64
    range_size::UInt64
    reserved_bytes::UInt64
    mapped_bytes::UInt64
end

const GPUMEM_IPC_HANDLE_SIZE = 192

"An exported allocation as plain bytes (`ipc.h`)."
struct gpumem_ipc_handle_t
    bytes::NTuple{192,UInt8}
end

"What this process shares (`ipc.h`), from `gpumem_ipc_get_info`."
struct gpumem_ipc_info_t
    struct_size::Csize_t
    exported::UInt64
    held::UInt64
    held_bytes::UInt64
    imports::UInt64
    open_segments::UInt64
    open_bytes::UInt64
    segment_opens::UInt64
end

const GPUMEM_TENANT_NAME_SIZE = 32

"How to make a tenant (`tenant.h`)."
struct gpumem_tenant_params_t
    struct_size::Csize_t
    upstream::Ptr{gpumem_allocator_t}
    device::Int32
    limit::UInt64
    soft_limit::UInt64
    name::Cstring
end

"A tenant's budgets and figures (`tenant.h`), from `gpumem_tenant_get_info`."
struct gpumem_tenant_info_t
    struct_size::Csize_t
    name::NTuple{32,Cchar}
    limit::UInt64
    soft_limit::UInt64
    bytes_in_use::UInt64
    peak_bytes_in_use::UInt64
    refused::UInt64
    soft_crossings::UInt64
end

## Functions, in the order of the headers

# core.h
gpumem_version_number() = ccall(@sym(:gpumem_version_number), UInt32, ())
gpumem_version_string() = ccall(@sym(:gpumem_version_string), Cstring, ())
gpumem_status_name(status) = ccall(@sym(:gpumem_status_name), Cstring, (gpumem_status_t,), status)
gpumem_status_string(status) = ccall(@sym(:gpumem_status_string), Cstring, (gpumem_status_t,), status)
gpumem_last_error_detail() = ccall(@sym(:gpumem_last_error_detail), Cstring, ())
gpumem_last_cuda_result() = ccall(@sym(:gpumem_last_cuda_result), Int32, ())

# device.h
gpumem_driver_get_version(out_version) =
    ccall(@sym(:gpumem_driver_get_version), gpumem_status_t, (Ptr{Int32},), out_version)
gpumem_device_get_count(out_count) =
    ccall(@sym(:gpumem_device_get_count), gpumem_status_t, (Ptr{Int32},), out_count)
gpumem_device_get_info(device, out_info) =
    ccall(@sym(:gpumem_device_get_info), gpumem_status_t, (Int32, Ptr{gpumem_device_info_t}), device, out_info)
gpumem_device_query_memory(device, out_free, out_total) =
    ccall(@sym(:gpumem_device_query_memory), gpumem_status_t, (Int32, Ptr{Csize_t}, Ptr{Csize_t}), device,
          out_free, out_total)
gpumem_stream_wait(stream, producer) =
    ccall(@sym(:gpumem_stream_wait), gpumem_status_t, (gpumem_stream_t, gpumem_stream_t), stream, producer)

# memory.h
gpumem_device_alloc(device, size, out_ptr) =
    ccall(@sym(:gpumem_device_alloc), gpumem_status_t, (Int32, Csize_t, Ptr{Ptr{Cvoid}}), device, size, out_ptr)
gpumem_device_free(ptr) = ccall(@sym(:gpumem_device_free), gpumem_status_t, (Ptr{Cvoid},), ptr)
gpumem_device_alloc_async(device, size, stream, out_ptr) =
    ccall(@sym(:gpumem_device_alloc_async), gpumem_status_t, (Int32, Csize_t, gpumem_stream_t, Ptr{Ptr{Cvoid}}),
          device, size, stream, out_ptr)
gpumem_device_alloc_from_pool(pool, size, stream, out_ptr) =
    ccall(@sym(:gpumem_device_alloc_from_pool), gpumem_status_t,
          (gpumem_cuda_pool_t, Csize_t, gpumem_stream_t, Ptr{Ptr{Cvoid}}), pool, size, stream, out_ptr)
gpumem_device_free_async(ptr, stream) =
    ccall(@sym(:gpumem_device_free_async), gpumem_status_t, (Ptr{Cvoid}, gpumem_stream_t), ptr, stream)
gpumem_host_alloc(size, flags, out_ptr) =
    ccall(@sym(:gpumem_host_alloc), gpumem_status_t, (Csize_t, UInt32, Ptr{Ptr{Cvoid}}), size, flags, out_ptr)
gpumem_host_free(ptr) = ccall(@sym(:gpumem_host_free), gpumem_status_t, (Ptr{Cvoid},), ptr)
gpumem_host_register(ptr, size, flags) =
    ccall(@sym(:gpumem_host_register), gpumem_status_t, (Ptr{Cvoid}, Csize_t, UInt32), ptr, size, flags)
gpumem_host_unregister(ptr) = ccall(@sym(:gpumem_host_unregister), gpumem_status_t, (Ptr{Cvoid},), ptr)
gpumem_host_get_device_pointer(ptr, out_device_ptr) =
    ccall(@sym(:gpumem_host_get_device_pointer), gpumem_status_t, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), ptr,
          out_device_ptr)
gpumem_managed_alloc(device, size, flags, out_ptr) =
    ccall(@sym(:gpumem_managed_alloc), gpumem_status_t, (Int32, Csize_t, UInt32, Ptr{Ptr{Cvoid}}), device, size,
          flags, out_ptr)
gpumem_managed_free(ptr) = ccall(@sym(:gpumem_managed_free), gpumem_status_t, (Ptr{Cvoid},), ptr)
gpumem_managed_prefetch(ptr, size, location, stream) =
    ccall(@sym(:gpumem_managed_prefetch), gpumem_status_t, (Ptr{Cvoid}, Csize_t, Int32, gpumem_stream_t), ptr,
          size, location, stream)
gpumem_managed_advise(ptr, size, advice, location) =
    ccall(@sym(:gpumem_managed_advise), gpumem_status_t, (Ptr{Cvoid}, Csize_t, Int32, Int32), ptr, size, advice,
          location)
gpumem_managed_get_range_info(ptr, size, out_info) =
    ccall(@sym(:gpumem_managed_get_range_info), gpumem_status_t,
          (Ptr{Cvoid}, Csize_t, Ptr{gpumem_managed_range_info_t}), ptr, size, out_info)

# pointer.h
gpumem_pointer_get_info(ptr, out_info) =
    ccall(@sym(:gpumem_pointer_get_info), gpumem_status_t, (Ptr{Cvoid}, Ptr{gpumem_pointer_info_t}), ptr, out_info)

# array.h
gpumem_array_desc_init(desc, struct_size) =
    ccall(@sym(:gpumem_array_desc_init), gpumem_status_t, (Ptr{gpumem_array_desc_t}, Csize_t), desc, struct_size)
gpumem_array_create(desc, out_array) =
    ccall(@sym(:gpumem_array_create), gpumem_status_t, (Ref{gpumem_array_desc_t}, Ptr{Ptr{gpumem_array_t}}), desc,
          out_array)
gpumem_array_destroy(array) = ccall(@sym(:gpumem_array_destroy), gpumem_status_t, (Ptr{gpumem_array_t},), array)
gpumem_array_get_desc(array, out_desc) =
    ccall(@sym(:gpumem_array_get_desc), gpumem_status_t, (Ptr{gpumem_array_t}, Ptr{gpumem_array_desc_t}), array,
          out_desc)

# copy.h
gpumem_memset(dst, value, element_size, count) =
    ccall(@sym(:gpumem_memset), gpumem_status_t, (Ptr{Cvoid}, UInt32, UInt32, Csize_t), dst, value, element_size,
          count)
gpumem_memset_async(dst, value, element_size, count, stream) =
    ccall(@sym(:gpumem_memset_async), gpumem_status_t, (Ptr{Cvoid}, UInt32, UInt32, Csize_t, gpumem_stream_t), dst,
          value, element_size, count, stream)
gpumem_copy(dst, src, size) =
    ccall(@sym(:gpumem_copy), gpumem_status_t, (Ptr{Cvoid}, Ptr{Cvoid}, Csize_t), dst, src, size)
gpumem_copy_async(dst, src, size, stream) =
    ccall(@sym(:gpumem_copy_async), gpumem_status_t, (Ptr{Cvoid}, Ptr{Cvoid}, Csize_t, gpumem_stream_t), dst, src,
          size, stream)
gpumem_copy2d_init(copy, struct_size) =
    ccall(@sym(:gpumem_copy2d_init), gpumem_status_t, (Ptr{gpumem_copy2d_t}, Csize_t), copy, struct_size)
gpumem_copy3d_init(copy, struct_size) =
    ccall(@sym(:gpumem_copy3d_init), gpumem_status_t, (Ptr{gpumem_copy3d_t}, Csize_t), copy, struct_size)
gpumem_copy2d(copy) = ccall(@sym(:gpumem_copy2d), gpumem_status_t, (Ref{gpumem_copy2d_t},), copy)
gpumem_copy2d_async(copy, stream) =
    ccall(@sym(:gpumem_copy2d_async), gpumem_status_t, (Ref{gpumem_copy2d_t}, gpumem_stream_t), copy, stream)
gpumem_copy3d(copy) = ccall(@sym(:gpumem_copy3d), gpumem_status_t, (Ref{gpumem_copy3d_t},), copy)
gpumem_copy3d_async(copy, stream) =
    ccall(@sym(:gpumem_copy3d_async), gpumem_status_t, (Ref{gpumem_copy3d_t}, gpumem_stream_t), copy, stream)
gpumem_copy_staging_get_held(out_bytes) =
    ccall(@sym(:gpumem_copy_staging_get_held), gpumem_status_t, (Ptr{Csize_t},), out_bytes)
gpumem_copy_staging_release() = ccall(@sym(:gpumem_copy_staging_release), gpumem_status_t, ())

# allocator.h
gpumem_allocator_create_device(device, out_allocator) =
    ccall(@sym(:gpumem_allocator_create_device), gpumem_status_t, (Int32, Ptr{Ptr{gpumem_allocator_t}}), device,
          out_allocator)
gpumem_allocator_create_device_async(device, cuda_pool, out_allocator) =
    ccall(@sym(:gpumem_allocator_create_device_async), gpumem_status_t,
          (Int32, gpumem_cuda_pool_t, Ptr{Ptr{gpumem_allocator_t}}), device, cuda_pool, out_allocator)
gpumem_allocator_create_managed(device, flags, out_allocator) =
    ccall(@sym(:gpumem_allocator_create_managed), gpumem_status_t, (Int32, UInt32, Ptr{Ptr{gpumem_allocator_t}}),
          device, flags, out_allocator)
gpumem_allocator_create_pinned(flags, out_allocator) =
    ccall(@sym(:gpumem_allocator_create_pinned), gpumem_status_t, (UInt32, Ptr{Ptr{gpumem_allocator_t}}), flags,
          out_allocator)
gpumem_allocator_create_host(alignment, out_allocator) =
    ccall(@sym(:gpumem_allocator_create_host), gpumem_status_t, (Csize_t, Ptr{Ptr{gpumem_allocator_t}}), alignment,
          out_allocator)
gpumem_allocator_create_functions(functions, out_allocator) =
    ccall(@sym(:gpumem_allocator_create_functions), gpumem_status_t,
          (Ref{gpumem_allocator_functions_t}, Ptr{Ptr{gpumem_allocator_t}}), functions, out_allocator)
gpumem_allocator_destroy(allocator) =
    ccall(@sym(:gpumem_allocator_destroy), gpumem_status_t, (Ptr{gpumem_allocator_t},), allocator)
gpumem_allocator_destroy_force(allocator) =
    ccall(@sym(:gpumem_allocator_destroy_force), gpumem_status_t, (Ptr{gpumem_allocator_t},), allocator)
gpumem_allocator_get_device(allocator, out_device) =
    ccall(@sym(:gpumem_allocator_get_device), gpumem_status_t, (Ptr{gpumem_allocator_t}, Ptr{Int32}), allocator,
          out_device)
gpumem_alloc(allocator, size, stream, out_ptr) =
    ccall(@sym(:gpumem_alloc), gpumem_status_t, (Ptr{gpumem_allocator_t}, Csize_t, gpumem_stream_t, Ptr{Ptr{Cvoid}}),
          allocator, size, stream, out_ptr)
gpumem_free(allocator, ptr, stream) =
    ccall(@sym(:gpumem_free), gpumem_status_t, (Ptr{gpumem_allocator_t}, Ptr{Cvoid}, gpumem_stream_t), allocator,
          ptr, stream)
gpumem_allocator_set_default(device, allocator) =
    ccall(@sym(:gpumem_allocator_set_default), gpumem_status_t, (Int32, Ptr{gpumem_allocator_t}), device, allocator)
gpumem_allocator_get_default(device, out_allocator) =
    ccall(@sym(:gpumem_allocator_get_default), gpumem_status_t, (Int32, Ptr{Ptr{gpumem_allocator_t}}), device,
          out_allocator)
gpumem_allocator_set_thread(allocator, out_previous) =
    ccall(@sym(:gpumem_allocator_set_thread), gpumem_status_t,
          (Ptr{gpumem_allocator_t}, Ptr{Ptr{gpumem_allocator_t}}), allocator, out_previous)
gpumem_allocator_get_thread(out_allocator) =
    ccall(@sym(:gpumem_allocator_get_thread), gpumem_status_t, (Ptr{Ptr{gpumem_allocator_t}},), out_allocator)
gpumem_allocator_get_stats(allocator, out_stats) =
    ccall(@sym(:gpumem_allocator_get_stats), gpumem_status_t,
          (Ptr{gpumem_allocator_t}, Ptr{gpumem_allocator_stats_t}), allocator, out_stats)
gpumem_allocator_reset_peaks(allocator) =
    ccall(@sym(:gpumem_allocator_reset_peaks), gpumem_status_t, (Ptr{gpumem_allocator_t},), allocator)
gpumem_allocator_add_hook(allocator, events, hook, user_data, out_hook_id) =
    ccall(@sym(:gpumem_allocator_add_hook), gpumem_status_t,
          (Ptr{gpumem_allocator_t}, UInt32, gpumem_hook_fn, Ptr{Cvoid}, Ptr{UInt64}), allocator, events, hook,
          user_data, out_hook_id)
gpumem_allocator_remove_hook(allocator, hook_id) =
    ccall(@sym(:gpumem_allocator_remove_hook), gpumem_status_t, (Ptr{gpumem_allocator_t}, UInt64), allocator,
          hook_id)

# pool.h
gpumem_pool_params_init(params, struct_size) =
    ccall(@sym(:gpumem_pool_params_init), gpumem_status_t, (Ptr{gpumem_pool_params_t}, Csize_t), params,
          struct_size)
gpumem_pool_create(params, out_pool) =
    ccall(@sym(:gpumem_pool_create), gpumem_status_t, (Ref{gpumem_pool_params_t}, Ptr{Ptr{gpumem_allocator_t}}),
          params, out_pool)
gpumem_pool_get_device(device, out_pool) =
    ccall(@sym(:gpumem_pool_get_device), gpumem_status_t, (Int32, Ptr{Ptr{gpumem_allocator_t}}), device, out_pool)
gpumem_pool_release(pool, stream, flags) =
    ccall(@sym(:gpumem_pool_release), gpumem_status_t, (Ptr{gpumem_allocator_t}, gpumem_stream_t, UInt32), pool,
          stream, flags)
gpumem_pool_get_info(pool, out_info) =
    ccall(@sym(:gpumem_pool_get_info), gpumem_status_t, (Ptr{gpumem_allocator_t}, Ptr{gpumem_pool_info_t}), pool,
          out_info)
gpumem_pool_get_growth_info(pool, out_info) =
    ccall(@sym(:gpumem_pool_get_growth_info), gpumem_status_t,
          (Ptr{gpumem_allocator_t}, Ptr{gpumem_pool_growth_info_t}), pool, out_info)
gpumem_pool_snapshot(pool, fn, user_data) =
    ccall(@sym(:gpumem_pool_snapshot), gpumem_status_t, (Ptr{gpumem_allocator_t}, gpumem_block_fn, Ptr{Cvoid}),
          pool, fn, user_data)
gpumem_pool_snapshot_json(pool, path) =
    ccall(@sym(:gpumem_pool_snapshot_json), gpumem_status_t, (Ptr{gpumem_allocator_t}, Cstring), pool, path)
gpumem_pool_set_limit(pool, limit) =
    ccall(@sym(:gpumem_pool_set_limit), gpumem_status_t, (Ptr{gpumem_allocator_t}, UInt64), pool, limit)
gpumem_pool_set_soft_limit(pool, soft_limit) =
    ccall(@sym(:gpumem_pool_set_soft_limit), gpumem_status_t, (Ptr{gpumem_allocator_t}, UInt64), pool, soft_limit)
gpumem_pool_set_limit_fraction(pool, fraction) =
    ccall(@sym(:gpumem_pool_set_limit_fraction), gpumem_status_t, (Ptr{gpumem_allocator_t}, Cdouble), pool,
          fraction)
gpumem_pool_set_stream_reuse(pool, reuse) =
    ccall(@sym(:gpumem_pool_set_stream_reuse), gpumem_status_t, (Ptr{gpumem_allocator_t}, Int32), pool, reuse)
gpumem_pool_set_page_reclaim(pool, enable) =
    ccall(@sym(:gpumem_pool_set_page_reclaim), gpumem_status_t, (Ptr{gpumem_allocator_t}, Int32), pool, enable)
gpumem_pool_set_device_config(config) =
    ccall(@sym(:gpumem_pool_set_device_config), gpumem_status_t, (Cstring,), config)
gpumem_pool_record_stream(pool, ptr, stream) =
    ccall(@sym(:gpumem_pool_record_stream), gpumem_status_t, (Ptr{gpumem_allocator_t}, Ptr{Cvoid}, gpumem_stream_t),
          pool, ptr, stream)
gpumem_reclaim_add(reclaim, user_data, out_id) =
    ccall(@sym(:gpumem_reclaim_add), gpumem_status_t, (gpumem_reclaim_fn, Ptr{Cvoid}, Ptr{UInt64}), reclaim,
          user_data, out_id)
gpumem_reclaim_remove(id) = ccall(@sym(:gpumem_reclaim_remove), gpumem_status_t, (UInt64,), id)

# cuda_pool.h
gpumem_cuda_pool_params_init(params, struct_size) =
    ccall(@sym(:gpumem_cuda_pool_params_init), gpumem_status_t, (Ptr{gpumem_cuda_pool_params_t}, Csize_t), params,
          struct_size)
gpumem_allocator_create_cuda_pool(params, out_allocator) =
    ccall(@sym(:gpumem_allocator_create_cuda_pool), gpumem_status_t,
          (Ref{gpumem_cuda_pool_params_t}, Ptr{Ptr{gpumem_allocator_t}}), params, out_allocator)
gpumem_cuda_pool_get(allocator, out_pool) =
    ccall(@sym(:gpumem_cuda_pool_get), gpumem_status_t, (Ptr{gpumem_allocator_t}, Ptr{gpumem_cuda_pool_t}),
          allocator, out_pool)
gpumem_cuda_pool_trim(allocator, keep_bytes) =
    ccall(@sym(:gpumem_cuda_pool_trim), gpumem_status_t, (Ptr{gpumem_allocator_t}, UInt64), allocator, keep_bytes)
gpumem_cuda_pool_set_release_threshold(allocator, bytes) =
    ccall(@sym(:gpumem_cuda_pool_set_release_threshold), gpumem_status_t, (Ptr{gpumem_allocator_t}, UInt64),
          allocator, bytes)
gpumem_cuda_pool_get_info(allocator, out_info) =
    ccall(@sym(:gpumem_cuda_pool_get_info), gpumem_status_t,
          (Ptr{gpumem_allocator_t}, Ptr{gpumem_cuda_pool_info_t}), allocator, out_info)
gpumem_cuda_pool_reset_peaks(allocator) =
    ccall(@sym(:gpumem_cuda_pool_reset_peaks), gpumem_status_t, (Ptr{gpumem_allocator_t},), allocator)
gpumem_allocator_set_peer_access(allocator, peer_device, access) =
    ccall(@sym(:gpumem_allocator_set_peer_access), gpumem_status_t, (Ptr{gpumem_allocator_t}, Int32, UInt32),
          allocator, peer_device, access)

# cupy.h (CuPy's C-function allocator; declared so that the package covers the whole ABI)
gpumem_cupy_alloc(target, size, device) =
    ccall(@sym(:gpumem_cupy_alloc), Ptr{Cvoid}, (Ptr{Cvoid}, Csize_t, Int32), target, size, device)
gpumem_cupy_free(target, ptr, device) =
    ccall(@sym(:gpumem_cupy_free), Cvoid, (Ptr{Cvoid}, Ptr{Cvoid}, Int32), target, ptr, device)

# vm.h
gpumem_vm_params_init(params, struct_size) =
    ccall(@sym(:gpumem_vm_params_init), gpumem_status_t, (Ptr{gpumem_vm_params_t}, Csize_t), params, struct_size)
gpumem_allocator_create_vm(params, out_allocator) =
    ccall(@sym(:gpumem_allocator_create_vm), gpumem_status_t,
          (Ref{gpumem_vm_params_t}, Ptr{Ptr{gpumem_allocator_t}}), params, out_allocator)
gpumem_vm_get_info(allocator, out_info) =
    ccall(@sym(:gpumem_vm_get_info), gpumem_status_t, (Ptr{gpumem_allocator_t}, Ptr{gpumem_vm_info_t}), allocator,
          out_info)

# ipc.h
gpumem_ipc_export(allocator, ptr, out_handle, out_fd_count) =
    ccall(@sym(:gpumem_ipc_export), gpumem_status_t,
          (Ptr{gpumem_allocator_t}, Ptr{Cvoid}, Ptr{gpumem_ipc_handle_t}, Ptr{Csize_t}), allocator, ptr, out_handle,
          out_fd_count)
gpumem_ipc_export_fds(handle, out_fds, count) =
    ccall(@sym(:gpumem_ipc_export_fds), gpumem_status_t, (Ptr{gpumem_ipc_handle_t}, Ptr{Cint}, Csize_t), handle,
          out_fds, count)
gpumem_ipc_open(handle, fds, fd_count, out_ptr, out_size) =
    ccall(@sym(:gpumem_ipc_open), gpumem_status_t,
          (Ptr{gpumem_ipc_handle_t}, Ptr{Cint}, Csize_t, Ptr{Ptr{Cvoid}}, Ptr{Csize_t}), handle, fds, fd_count, out_ptr,
          out_size)
gpumem_ipc_close(ptr) = ccall(@sym(:gpumem_ipc_close), gpumem_status_t, (Ptr{Cvoid},), ptr)
gpumem_ipc_send(socket, handle) =
    ccall(@sym(:gpumem_ipc_send), gpumem_status_t, (Cint, Ptr{gpumem_ipc_handle_t}), socket, handle)
gpumem_ipc_receive(socket, out_ptr, out_size) =
    ccall(@sym(:gpumem_ipc_receive), gpumem_status_t, (Cint, Ptr{Ptr{Cvoid}}, Ptr{Csize_t}), socket, out_ptr, out_size)
gpumem_ipc_collect(out_freed) = ccall(@sym(:gpumem_ipc_collect), gpumem_status_t, (Ptr{UInt64},), out_freed)
gpumem_ipc_get_info(out_info) =
    ccall(@sym(:gpumem_ipc_get_info), gpumem_status_t, (Ptr{gpumem_ipc_info_t},), out_info)

# tenant.h
gpumem_tenant_params_init(params, struct_size) =
    ccall(@sym(:gpumem_tenant_params_init), gpumem_status_t, (Ptr{gpumem_tenant_params_t}, Csize_t), params,
          struct_size)
gpumem_tenant_create(params, out_tenant) =
    ccall(@sym(:gpumem_tenant_create), gpumem_status_t, (Ref{gpumem_tenant_params_t}, Ptr{Ptr{gpumem_allocator_t}}),
          params, out_tenant)
gpumem_tenant_set_limits(tenant, limit, soft_limit) =
    ccall(@sym(:gpumem_tenant_set_limits), gpumem_status_t, (Ptr{gpumem_allocator_t}, UInt64, UInt64), tenant,
          limit, soft_limit)
gpumem_tenant_get_info(tenant, out_info) =
    ccall(@sym(:gpumem_tenant_get_info), gpumem_status_t, (Ptr{gpumem_allocator_t}, Ptr{gpumem_tenant_info_t}),
          tenant, out_info)

# torch.h (PyTorch's pluggable allocator; declared so that the package covers the whole ABI)
gpumem_torch_alloc(size, device, stream) =
    ccall(@sym(:gpumem_torch_alloc), Ptr{Cvoid}, (Cptrdiff_t, Int32, gpumem_stream_t), size, device, stream)
# Throws C++ exceptions on failure: for PyTorch to load, never to call from Julia.
gpumem_torch_alloc_raising(size, device, stream) =
    ccall(@sym(:gpumem_torch_alloc_raising), Ptr{Cvoid}, (Cptrdiff_t, Int32, gpumem_stream_t), size, device,
          stream)
gpumem_torch_free(ptr, size, device, stream) =
    ccall(@sym(:gpumem_torch_free), Cvoid, (Ptr{Cvoid}, Cptrdiff_t, Int32, gpumem_stream_t), ptr, size, device,
          stream)
gpumem_torch_set_allocator(device, allocator) =
    ccall(@sym(:gpumem_torch_set_allocator), gpumem_status_t, (Int32, Ptr{gpumem_allocator_t}), device, allocator)
gpumem_torch_record_stream(ptr, stream) =
    ccall(@sym(:gpumem_torch_record_stream), Cvoid, (Ptr{Cvoid}, gpumem_stream_t), ptr, stream)

# pin.h
gpumem_pin(ptr, size, flags) =
    ccall(@sym(:gpumem_pin), gpumem_status_t, (Ptr{Cvoid}, Csize_t, UInt32), ptr, size, flags)
gpumem_unpin(ptr, size) = ccall(@sym(:gpumem_unpin), gpumem_status_t, (Ptr{Cvoid}, Csize_t), ptr, size)
gpumem_pin_query(ptr, size, out_state) =
    ccall(@sym(:gpumem_pin_query), gpumem_status_t, (Ptr{Cvoid}, Csize_t, Ptr{Int32}), ptr, size, out_state)
gpumem_pin_forget(ptr, size) = ccall(@sym(:gpumem_pin_forget), gpumem_status_t, (Ptr{Cvoid}, Csize_t), ptr, size)
gpumem_pin_cache_flush() = ccall(@sym(:gpumem_pin_cache_flush), gpumem_status_t, ())
gpumem_pin_cache_set_budget(bytes) =
    ccall(@sym(:gpumem_pin_cache_set_budget), gpumem_status_t, (UInt64,), bytes)
gpumem_pin_get_stats(out_stats) =
    ccall(@sym(:gpumem_pin_get_stats), gpumem_status_t, (Ptr{gpumem_pin_stats_t},), out_stats)

# trace.h
gpumem_trace_start(allocator, path, flags, out_trace) =
    ccall(@sym(:gpumem_trace_start), gpumem_status_t,
          (Ptr{gpumem_allocator_t}, Cstring, UInt32, Ptr{Ptr{gpumem_trace_t}}), allocator, path, flags, out_trace)
gpumem_trace_params_init(params, struct_size) =
    ccall(@sym(:gpumem_trace_params_init), gpumem_status_t, (Ptr{gpumem_trace_params_t}, Csize_t), params,
          struct_size)
gpumem_trace_start_with_params(allocator, path, params, out_trace) =
    ccall(@sym(:gpumem_trace_start_with_params), gpumem_status_t,
          (Ptr{gpumem_allocator_t}, Cstring, Ref{gpumem_trace_params_t}, Ptr{Ptr{gpumem_trace_t}}), allocator, path,
          params, out_trace)
gpumem_trace_stop(trace) = ccall(@sym(:gpumem_trace_stop), gpumem_status_t, (Ptr{gpumem_trace_t},), trace)
gpumem_trace_reader_open(path, out_reader) =
    ccall(@sym(:gpumem_trace_reader_open), gpumem_status_t, (Cstring, Ptr{Ptr{gpumem_trace_reader_t}}), path,
          out_reader)
gpumem_trace_reader_get_header(reader, out_header) =
    ccall(@sym(:gpumem_trace_reader_get_header), gpumem_status_t,
          (Ptr{gpumem_trace_reader_t}, Ptr{gpumem_trace_header_t}), reader, out_header)
gpumem_trace_reader_next(reader, out_record, out_has_record) =
    ccall(@sym(:gpumem_trace_reader_next), gpumem_status_t,
          (Ptr{gpumem_trace_reader_t}, Ptr{gpumem_trace_record_t}, Ptr{Bool}), reader, out_record, out_has_record)
gpumem_trace_reader_get_frame(reader, index, out_frame) =
    ccall(@sym(:gpumem_trace_reader_get_frame), gpumem_status_t,
          (Ptr{gpumem_trace_reader_t}, UInt32, Ptr{gpumem_trace_frame_t}), reader, index, out_frame)
gpumem_trace_reader_close(reader) =
    ccall(@sym(:gpumem_trace_reader_close), gpumem_status_t, (Ptr{gpumem_trace_reader_t},), reader)
gpumem_trace_summarize(path, top, write_text, user_data, out_summary) =
    ccall(@sym(:gpumem_trace_summarize), gpumem_status_t,
          (Cstring, UInt32, gpumem_trace_text_fn, Ptr{Cvoid}, Ptr{gpumem_trace_summary_t}), path, top, write_text,
          user_data, out_summary)

## Helpers for the structs

# An output struct for a call that fills it: `struct_size` set, the rest left for the library
# (which clears what it does not fill).
function out_struct(::Type{T}) where {T}
    ref = Ref{T}()
    GC.@preserve ref begin
        unsafe_store!(convert(Ptr{Csize_t}, Base.unsafe_convert(Ptr{T}, ref)), Csize_t(sizeof(T)))
    end
    return ref
end

# An input struct: the library's defaults from its `init` function (`gpumem_pool_params_init`,
# ...), then the given fields, by name.
function init_struct(init, ::Type{T}; fields...) where {T}
    ref = Ref{T}()
    check(init(ref, sizeof(T)))
    ref[] = with_fields(ref[]; fields...)
    return ref
end

# An input struct with no `init` function: zero but for `struct_size`, then the given fields, by name.
function c_struct(::Type{T}; fields...) where {T}
    bytes = zeros(UInt8, sizeof(T))
    zeroed = GC.@preserve bytes unsafe_load(convert(Ptr{T}, pointer(bytes)))
    return Ref(with_fields(zeroed; struct_size = sizeof(T), fields...))
end

# A copy of an immutable struct with some fields replaced, converted to the fields' types.
function with_fields(x::T; fields...) where {T}
    given = values(fields)
    for name in keys(given)
        name in fieldnames(T) || throw(ArgumentError("$T has no field $name"))
    end
    return T(ntuple(i -> haskey(given, fieldname(T, i)) ? getfield(given, fieldname(T, i)) : getfield(x, i),
                    fieldcount(T))...)
end

# A NUL-terminated C string kept in a fixed array field.
function c_string(chars::NTuple{N,Cchar}) where {N}
    bytes = UInt8[]
    for c in chars
        c == 0 && break
        push!(bytes, reinterpret(UInt8, c))
    end
    return String(bytes)
end
