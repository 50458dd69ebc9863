"""
    GPUMem

GPU memory management through libgpumem: allocators of every kind of CUDA memory, caching pools
over them, pinning, and copies between any two kinds, shaped like CUDA.jl's memory API.

The library is `GPUMEM_LIBRARY` if set, else `libgpumem.so.0` from the dynamic loader's search;
it is loaded on first use. Every failing call throws [`GPUMemError`](@ref). The C functions are
here too, under their C names (`GPUMem.gpumem_alloc`, ...), returning the status.

Names as common as `alloc`, `free`, `pool`, `stats` or `info` are not exported, as CUDA.jl keeps
them under `Mem`: call `GPUMem.alloc`, or import them (`using GPUMem: alloc, free`).
"""
module GPUMem

using Libdl

# Not exported, being names that other packages use too: check, version, alloc, free, pool,
# stats, info, release, limit, limit!, register, unregister, snapshot, snapshot_json, and
# device (CUDA.jl exports a function of that name).
export GPUMemError, LibraryError
export library_path, status_name, status_string
export driver_version, device_count, has_device, device_info, memory_info
export Allocator, Buffer
export host_allocator, device_allocator, device_async_allocator, managed_allocator, pinned_allocator
export vm_allocator, cuda_pool_allocator, function_allocator, device_pool, tenant, tenant_limits!, tenant_info
export default_allocator, set_default_allocator!
export reset_peaks!, limit_fraction!, stream_reuse!
export record_stream, peer_access!, callback_errors, dropped_callback_errors
export cuda_pool, cuda_pool_trim!, cuda_pool_release_threshold!, cuda_pool_info, cuda_pool_reset_peaks!, vm_info
export Hook, add_hook, remove_hook, Reclaim, add_reclaim, remove_reclaim
export stream_handle
export device_alloc, device_alloc_async, host_alloc, managed_alloc, device_pointer
export memset!, unsafe_copy2d!, unsafe_copy3d!, staging_held, staging_release
export pointer_info, prefetch, advise, range_info
export ArrayBuffer, array_desc
export pin, unpin, pin_state, pin_forget, pin_stats, pin_cache_flush, pin_cache_budget!
export Trace, trace_start, trace_stop, read_trace

include("errors.jl")
include("libgpumem.jl")
include("devices.jl")
include("allocators.jl")
include("memory.jl")
include("pinning.jl")
include("traces.jl")

# The constants, under their C names.
for name in names(@__MODULE__; all = true)
    startswith(string(name), "GPUMEM_") && @eval export $name
end

function __init__()
    # Whatever was loaded while precompiling belongs to that process.
    LIBRARY_HANDLE[] = C_NULL
    init_callbacks()
    return nothing
end

end # module
