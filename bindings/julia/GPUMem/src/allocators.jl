# Allocators, pools and the buffers they hand out (allocator.h, pool.h, cuda_pool.h, vm.h).
#
# Lifetimes follow the library's refusals. The library refuses to destroy an allocator that has
# live allocations or a pool built on it, and Julia finalizes unreachable objects in no particular
# order, so an allocator whose finalizer runs before its buffers' would be refused and leaked.
# Each allocator therefore counts what needs it: itself, each live buffer, each pool over it. Its
# handle is destroyed when the count reaches zero, by whichever finalizer (or free) drops the last.

"""
    Allocator

A gpumem allocator: a raw allocator of one kind of memory, a pool over another allocator, or one
made of Julia functions. Make one with [`host_allocator`](@ref), [`device_allocator`](@ref),
[`device_async_allocator`](@ref), [`managed_allocator`](@ref), [`pinned_allocator`](@ref),
[`vm_allocator`](@ref), [`cuda_pool_allocator`](@ref), [`function_allocator`](@ref) or
[`pool`](@ref); [`device_pool`](@ref) and [`default_allocator`](@ref) give borrowed ones, which
Julia never destroys.

An allocator that Julia owns is destroyed once it is unreachable and its buffers and the pools
over it are gone, or by `close`. Buffers keep their allocator alive, and a pool its upstream.

Thread-safe: any thread, concurrently, including on the same handle; but `close` is per handle:
concurrent calls on different handles; one handle is serialized by the caller.
"""
mutable struct Allocator
    handle::Ptr{gpumem_allocator_t}
    owned::Bool
    upstream::Union{Allocator,Nothing}
    refs::Threads.Atomic{Int}
    closed::Bool
    # Julia objects whose addresses the library holds (hooks, a function allocator's state): a
    # call in progress on another thread may still use one after its removal, so they stay.
    callbacks::Vector{Any}
    callback_errors::Vector{Any}
    callbacks_lock::ReentrantLock

    function Allocator(handle::Ptr{gpumem_allocator_t}; owned::Bool = true,
                       upstream::Union{Allocator,Nothing} = nothing, callbacks::Vector{Any} = Any[])
        a = new(handle, owned, upstream, Threads.Atomic{Int}(1), false, callbacks, Any[], ReentrantLock())
        owned && finalizer(finalize_allocator, a)
        return a
    end
end

# Passing the Allocator itself to a ccall keeps it rooted, so no finalizer destroys it mid-call.
Base.unsafe_convert(::Type{Ptr{gpumem_allocator_t}}, a::Allocator) = a.handle

function Base.show(io::IO, a::Allocator)
    state = a.closed ? "closed" : a.owned ? "owned" : "borrowed"
    print(io, "GPUMem.Allocator(", a.handle, ", ", state, ")")
end

retain!(a::Allocator) = (Threads.atomic_add!(a.refs, 1); nothing)

function drop!(a::Allocator)
    Threads.atomic_sub!(a.refs, 1) == 1 && destroy_unchecked(a)
    return nothing
end

finalize_allocator(a::Allocator) = a.closed ? nothing : drop!(a)

# From finalizers: nothing may throw. A refusal leaves the allocator to the library, which is
# only memory lost; its upstream then stays needed.
function destroy_unchecked(a::Allocator)
    (a.owned && !a.closed) || return nothing
    a.closed = true
    if gpumem_allocator_destroy(a) == GPUMEM_SUCCESS && a.upstream !== nothing
        drop!(a.upstream)
    end
    return nothing
end

function ensure_open(a::Allocator)
    a.closed && throw(ArgumentError("$a is closed"))
    return a
end

"""
    close(a::Allocator; force = false)

Destroys an allocator now. Throws `GPUMemError` with `GPUMEM_ERROR_BUSY` while it has live
buffers, a pool is built on it, or it is a default; with `force = true` live buffers are freed
with it (their pointers become invalid, and their `free` does nothing). Closing a closed or
borrowed allocator does nothing.
"""
function Base.close(a::Allocator; force::Bool = false)
    (a.owned && !a.closed) || return nothing
    check(force ? gpumem_allocator_destroy_force(a) : gpumem_allocator_destroy(a))
    a.closed = true
    Threads.atomic_sub!(a.refs, 1)
    a.upstream === nothing || drop!(a.upstream)
    return nothing
end

"""
    callback_errors(a::Allocator)

The exceptions thrown by Julia functions that the library called for this allocator (its hooks,
the functions of a [`function_allocator`](@ref)): they cannot unwind through C, so they are kept
here, oldest first.
"""
callback_errors(a::Allocator) = lock(() -> copy(a.callback_errors), a.callbacks_lock)

function keep_error!(a::Allocator, err)
    lock(a.callbacks_lock)
    try
        push!(a.callback_errors, err)
    finally
        unlock(a.callbacks_lock)
    end
    return nothing
end

## Streams

"""
    stream_handle(stream)

A stream as the library takes it: `nothing` is the legacy default stream (NULL); a `Ptr` (such as
a `CUstream` of CUDA.jl, `stream.handle`) or an integer handle value are taken as they are.
[`GPUMEM_STREAM_LEGACY`](@ref) and [`GPUMEM_STREAM_PER_THREAD`](@ref) name the default streams.
"""
stream_handle(::Nothing) = convert(gpumem_stream_t, C_NULL)
stream_handle(stream::Ptr) = convert(gpumem_stream_t, stream)
stream_handle(stream::Integer) = reinterpret(gpumem_stream_t, UInt(stream))

## Buffers

"""
    Buffer

Memory from gpumem: `pointer(buf)` is its address (a device address for device memory),
`sizeof(buf)` its size in bytes. A buffer from an allocator keeps the allocator alive; [`free`](@ref)
frees it, and so does its finalizer if it is collected first. Raw allocations
([`device_alloc`](@ref), [`host_alloc`](@ref), ...) and registrations ([`register`](@ref)) are
buffers too; `Buffer(ptr, bytes)` borrows memory that gpumem did not allocate, for the copy
functions, and never frees it.

Thread-safe: any thread, concurrently, including on the same handle; but `free` is per handle:
concurrent calls on different handles; one handle is serialized by the caller.
"""
mutable struct Buffer
    ptr::Ptr{Cvoid}
    bytes::Int
    stream::gpumem_stream_t
    allocator::Union{Allocator,Nothing}
    kind::Symbol  # how it is freed: :allocator, :device, :device_async, :pinned, :managed, :registered, :borrowed
    root::Any     # what must outlive the memory, such as a registered Array
    freed::Bool
end

Buffer(ptr::Ptr, bytes::Integer) = Buffer(ptr, bytes, stream_handle(nothing), nothing, :borrowed, nothing, false)

function new_buffer(ptr::Ptr{Cvoid}, bytes::Integer, stream::gpumem_stream_t, allocator, kind::Symbol, root = nothing)
    buf = Buffer(ptr, bytes, stream, allocator, kind, root, false)
    finalizer(finalize_buffer, buf)
    return buf
end

Base.pointer(buf::Buffer) = buf.ptr
Base.sizeof(buf::Buffer) = buf.bytes
Base.unsafe_convert(::Type{Ptr{Cvoid}}, buf::Buffer) = buf.ptr

function Base.show(io::IO, buf::Buffer)
    print(io, "GPUMem.Buffer(", buf.ptr, ", ", buf.bytes, " bytes, ", buf.kind, buf.freed ? ", freed)" : ")")
end

function free_status(buf::Buffer, stream::gpumem_stream_t)
    kind = buf.kind
    if kind === :allocator
        a = buf.allocator::Allocator
        # Closed with force = true, which freed this memory with the allocator.
        a.closed && return GPUMEM_SUCCESS
        return gpumem_free(a, buf.ptr, stream)
    elseif kind === :device
        return gpumem_device_free(buf.ptr)
    elseif kind === :device_async
        return gpumem_device_free_async(buf.ptr, stream)
    elseif kind === :pinned
        return gpumem_host_free(buf.ptr)
    elseif kind === :managed
        return gpumem_managed_free(buf.ptr)
    elseif kind === :registered
        return gpumem_host_unregister(buf.ptr)
    end
    return GPUMEM_SUCCESS
end

function mark_freed!(buf::Buffer)
    buf.freed = true
    buf.root = nothing
    buf.allocator === nothing || drop!(buf.allocator)
    return nothing
end

function finalize_buffer(buf::Buffer)
    buf.freed && return nothing
    free_status(buf, buf.stream)
    mark_freed!(buf)
    return nothing
end

"""
    free(buf::Buffer; stream = nothing)

Gives a buffer's memory back: to its allocator on `stream` if given, else on the stream it was
allocated on; a raw allocation to the driver; a registration ends. Freeing a freed buffer does
nothing. A borrowed buffer (`Buffer(ptr, bytes)`) cannot be freed.
"""
function free(buf::Buffer; stream = nothing)
    buf.freed && return nothing
    buf.kind === :borrowed && throw(ArgumentError("$buf is borrowed: gpumem did not allocate it"))
    check(free_status(buf, stream === nothing ? buf.stream : stream_handle(stream)))
    mark_freed!(buf)
    return nothing
end

"""
    alloc(a::Allocator, bytes; stream = nothing)
    alloc(bytes; device = 0, stream = nothing)

Allocates `bytes` bytes (not 0) from `a`, or from the default allocator of `device`, for use on
`stream` (see [`stream_handle`](@ref)): a pool keeps one arena per stream, a stream-ordered
allocator allocates on it. Returns a [`Buffer`](@ref). Throws `GPUMemError`, with
`GPUMEM_ERROR_OUT_OF_MEMORY` once every retry has failed.
"""
function alloc(a::Allocator, bytes::Integer; stream = nothing)
    ensure_open(a)
    s = stream_handle(stream)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(gpumem_alloc(a, bytes, s, out))
    retain!(a)
    return new_buffer(out[], bytes, s, a, :allocator)
end

alloc(bytes::Integer; device::Integer = 0, stream = nothing) = alloc(default_allocator(device), bytes; stream = stream)

## Making allocators

function created(create)
    out = Ref{Ptr{gpumem_allocator_t}}(C_NULL)
    check(create(out))
    return Allocator(out[])
end

"""
    host_allocator(; alignment = 0)

An allocator of plain host memory, aligned to `alignment` (a power of two from 8 to 1 MiB; 0 for
512 bytes). Needs no GPU: a [`pool`](@ref) over it is the way to try pools anywhere.
"""
host_allocator(; alignment::Integer = 0) = created(out -> gpumem_allocator_create_host(alignment, out))

"""
    device_allocator(device = 0)

An allocator of device memory (`cuMemAlloc`, `cuMemFree`); the stream is ignored.
"""
device_allocator(device::Integer = 0) = created(out -> gpumem_allocator_create_device(device, out))

"""
    device_async_allocator(device = 0; cuda_pool = C_NULL)

An allocator of stream-ordered device memory (`cuMemAllocAsync`, `cuMemFreeAsync`) on the stream of
each call, from `cuda_pool` (a `CUmemoryPool`) or the device's current pool.
"""
device_async_allocator(device::Integer = 0; cuda_pool::Ptr = C_NULL) =
    created(out -> gpumem_allocator_create_device_async(device, cuda_pool, out))

"""
    managed_allocator(device = 0; flags = GPUMEM_MANAGED_ATTACH_GLOBAL)

An allocator of managed (unified) memory (`cuMemAllocManaged`); the stream is ignored.
"""
managed_allocator(device::Integer = 0; flags::Integer = GPUMEM_MANAGED_ATTACH_GLOBAL) =
    created(out -> gpumem_allocator_create_managed(device, flags, out))

"""
    pinned_allocator(; flags = 0)

An allocator of pinned host memory (`cuMemHostAlloc`, with `GPUMEM_HOST_ALLOC_*` flags); a
[`pool`](@ref) over it is the pinned-memory pool.
"""
pinned_allocator(; flags::Integer = 0) = created(out -> gpumem_allocator_create_pinned(flags, out))

"""
    vm_allocator(device = 0; range_size = 0, map_unit = 0)

An allocator of device memory mapped into reserved addresses (`cuMemCreate`, `cuMemMap`): a
[`pool`](@ref) over it grows its segments in place. 0 takes the library's defaults (docs/vm.md).
"""
function vm_allocator(device::Integer = 0; range_size::Integer = 0, map_unit::Integer = 0)
    params = Ref{gpumem_vm_params_t}()
    check(gpumem_vm_params_init(params, sizeof(gpumem_vm_params_t)))
    params[] = with_fields(params[]; device = device, range_size = range_size, map_unit = map_unit)
    return created(out -> gpumem_allocator_create_vm(params, out))
end

"""
    cuda_pool_allocator(device = 0; source = GPUMEM_CUDA_POOL_CURRENT, pool = C_NULL, max_size = 0,
                        release_threshold = GPUMEM_CUDA_POOL_KEEP_THRESHOLD)

An allocator over a CUDA memory pool (`cuMemAllocFromPoolAsync` on each call's stream): the
device's current or default pool, the caller's `pool` (`GPUMEM_CUDA_POOL_EXTERNAL`), or a new
one of at most `max_size` bytes (`GPUMEM_CUDA_POOL_NEW`), destroyed with the allocator.
"""
function cuda_pool_allocator(device::Integer = 0; source::Integer = GPUMEM_CUDA_POOL_CURRENT, pool::Ptr = C_NULL,
                             max_size::Integer = 0, release_threshold::Integer = GPUMEM_CUDA_POOL_KEEP_THRESHOLD)
    params = Ref{gpumem_cuda_pool_params_t}()
    check(gpumem_cuda_pool_params_init(params, sizeof(gpumem_cuda_pool_params_t)))
    params[] = with_fields(params[]; device = device, source = source, pool = pool, max_size = max_size,
                           release_threshold = release_threshold)
    return created(out -> gpumem_allocator_create_cuda_pool(params, out))
end

"""
    pool(upstream::Allocator; limit = 0, limit_fraction = 0.0)

A caching pool over `upstream`, which it keeps alive: best-fit, split and coalesce, one arena per
stream. `limit` is the most bytes it may hold from its upstream (0: none), `limit_fraction` the
same as a share of the device's memory; with neither, `GPUMEM_GPU_MEMORY_LIMIT` may set one for
device memory.
"""
function pool(upstream::Allocator; limit::Integer = 0, limit_fraction::Real = 0.0)
    ensure_open(upstream)
    params = Ref{gpumem_pool_params_t}()
    check(gpumem_pool_params_init(params, sizeof(gpumem_pool_params_t)))
    params[] = with_fields(params[]; upstream = upstream.handle, limit = limit, limit_fraction = limit_fraction)
    out = Ref{Ptr{gpumem_allocator_t}}(C_NULL)
    GC.@preserve upstream check(gpumem_pool_create(params, out))
    retain!(upstream)
    return Allocator(out[]; upstream = upstream)
end

"""
    device_pool(device = 0)

The pool of a device, over its device allocator: made on first use, it lives as long as the
process, and is the device's default allocator until another is set. Borrowed: never destroyed.
"""
function device_pool(device::Integer = 0)
    out = Ref{Ptr{gpumem_allocator_t}}(C_NULL)
    check(gpumem_pool_get_device(device, out))
    return Allocator(out[]; owned = false)
end

## Defaults

# A default is used through its handle by anyone in the process: its Julia object stays here,
# alive, while it is one.
const DEFAULTS = Dict{Int,Allocator}()
const DEFAULTS_LOCK = ReentrantLock()

"""
    default_allocator(device = 0)

The process-wide default allocator of a device: the one [`set_default_allocator!`](@ref) set, else
the device's pool ([`device_pool`](@ref)).
"""
function default_allocator(device::Integer = 0)
    out = Ref{Ptr{gpumem_allocator_t}}(C_NULL)
    check(gpumem_allocator_get_default(device, out))
    lock(DEFAULTS_LOCK)
    try
        kept = get(DEFAULTS, Int(device), nothing)
        if kept !== nothing && kept.handle == out[]
            return kept
        end
        return Allocator(out[]; owned = false)
    finally
        unlock(DEFAULTS_LOCK)
    end
end

"""
    set_default_allocator!(device, a::Union{Allocator,Nothing})

Makes `a` the process-wide default allocator of `device` (`nothing`: the device's pool again),
for every user of the library in the process, PyTorch and CuPy through gpumem included. `a` stays
alive while it is the default.
"""
function set_default_allocator!(device::Integer, a::Union{Allocator,Nothing})
    a === nothing || ensure_open(a)
    lock(DEFAULTS_LOCK)
    try
        if a === nothing
            check(gpumem_allocator_set_default(device, C_NULL))
            delete!(DEFAULTS, Int(device))
        else
            check(gpumem_allocator_set_default(device, a))
            DEFAULTS[Int(device)] = a
        end
    finally
        unlock(DEFAULTS_LOCK)
    end
    return nothing
end

## Queries and settings

"""
    device(a::Allocator)

The device an allocator's memory is on, or -1 for host memory.
"""
function device(a::Allocator)
    ensure_open(a)
    out = Ref{Int32}(0)
    check(gpumem_allocator_get_device(a, out))
    return Int(out[])
end

"""
    stats(a::Allocator)

An allocator's statistics, as a [`gpumem_allocator_stats_t`](@ref): `bytes_in_use`,
`peak_bytes_in_use`, `bytes_requested`, `bytes_reserved`, `peak_bytes_reserved`, `alloc_count`,
`free_count`, `upstream_alloc_count`, `upstream_free_count`, `retry_count`, `oom_count`.
"""
function stats(a::Allocator)
    ensure_open(a)
    out = out_struct(gpumem_allocator_stats_t)
    check(gpumem_allocator_get_stats(a, out))
    return out[]
end

"""
    reset_peaks!(a::Allocator)

Sets the peaks of an allocator's statistics to the current values.
"""
reset_peaks!(a::Allocator) = (ensure_open(a); check(gpumem_allocator_reset_peaks(a)))

"""
    info(pool::Allocator)

What a pool holds, as a [`gpumem_pool_info_t`](@ref): `used_bytes`, `free_bytes`, `total_bytes`,
`free_block_count`, `limit`, `arena_count`, `pending_bytes`, `address_bytes`.
"""
function info(pool::Allocator)
    ensure_open(pool)
    out = out_struct(gpumem_pool_info_t)
    check(gpumem_pool_get_info(pool, out))
    return out[]
end

"""
    release(pool::Allocator; stream = nothing, all_streams = true)

Returns a pool's cached whole blocks to its upstream: of every arena, or with
`all_streams = false` of `stream`'s arena only (CuPy's `free_all_blocks`).
"""
function release(pool::Allocator; stream = nothing, all_streams::Bool = true)
    ensure_open(pool)
    flags = all_streams ? GPUMEM_POOL_RELEASE_ALL_STREAMS : UInt32(0)
    return check(gpumem_pool_release(pool, stream_handle(stream), flags))
end

"""
    limit(pool::Allocator)

The most bytes a pool may hold from its upstream; 0 for no limit.
"""
limit(pool::Allocator) = Int(info(pool).limit)

"""
    limit!(pool::Allocator, bytes)

Sets the most bytes a pool may hold from its upstream (0: no limit). A limit below what it holds
is allowed: allocations then reuse cached memory or fail.
"""
limit!(pool::Allocator, bytes::Integer) = (ensure_open(pool); check(gpumem_pool_set_limit(pool, bytes)))

"""
    limit_fraction!(pool::Allocator, fraction)

Sets a pool's limit as a fraction in (0, 1] of its device's memory (not for host memory).
"""
limit_fraction!(pool::Allocator, fraction::Real) =
    (ensure_open(pool); check(gpumem_pool_set_limit_fraction(pool, fraction)))

"""
    stream_reuse!(pool::Allocator, reuse)

Whether a pool lends one stream's free memory to another stream: `GPUMEM_STREAM_REUSE_NEVER`,
`GPUMEM_STREAM_REUSE_FENCE` (the default) or `GPUMEM_STREAM_REUSE_HOST_WAIT`.
"""
stream_reuse!(pool::Allocator, reuse::Integer) =
    (ensure_open(pool); check(gpumem_pool_set_stream_reuse(pool, reuse)))

"""
    record_stream(pool::Allocator, buf::Buffer, stream)

Marks a live buffer of `pool` as used on `stream` too (PyTorch's `record_stream`): once freed, it
is handed out again only when the work queued on `stream` until then has ended.
"""
function record_stream(pool::Allocator, buf::Buffer, stream)
    ensure_open(pool)
    return check(gpumem_pool_record_stream(pool, buf, stream_handle(stream)))
end

# Each block of a snapshot is pushed here by `snapshot_trampoline`.
mutable struct SnapshotState
    blocks::Vector{gpumem_block_info_t}
    error::Any
end

function snapshot_trampoline(block::Ptr{gpumem_block_info_t}, user_data::Ptr{Cvoid})
    state = unsafe_pointer_to_objref(user_data)::SnapshotState
    try
        push!(state.blocks, unsafe_load(block))
    catch err
        state.error = err
    end
    return nothing
end

"""
    snapshot(pool::Allocator)

Every block a pool holds, as one consistent picture: a `Vector` of
[`gpumem_block_info_t`](@ref) (`segment`, `segment_size`, `address`, `size`, `requested`, `state`
(`GPUMEM_BLOCK_*`), `stream`), in order of segment and address.
"""
function snapshot(pool::Allocator)
    ensure_open(pool)
    state = SnapshotState(gpumem_block_info_t[], nothing)
    GC.@preserve state check(gpumem_pool_snapshot(pool, BLOCK_FN[], pointer_from_objref(state)))
    state.error === nothing || throw(state.error)
    return state.blocks
end

"""
    snapshot_json(pool::Allocator, path)

Writes a pool's snapshot as JSON to the file `path` (docs/pool.md says its shape).
"""
snapshot_json(pool::Allocator, path::AbstractString) =
    (ensure_open(pool); check(gpumem_pool_snapshot_json(pool, path)))

"""
    peer_access!(a::Allocator, peer_device, access = GPUMEM_PEER_ACCESS_READ_WRITE)

Lets the kernels of another device reach an allocator's memory (`GPUMEM_PEER_ACCESS_READ_WRITE`),
or stops them (`GPUMEM_PEER_ACCESS_NONE`), as far as its kind allows (cuda_pool.h).
"""
peer_access!(a::Allocator, peer_device::Integer, access::Integer = GPUMEM_PEER_ACCESS_READ_WRITE) =
    (ensure_open(a); check(gpumem_allocator_set_peer_access(a, peer_device, access)))

## CUDA memory pools and VM allocators

"""
    cuda_pool(a::Allocator)

The CUDA memory pool (`CUmemoryPool`) behind an allocator from [`cuda_pool_allocator`](@ref), for
calls gpumem does not wrap. It lives as long as the allocator.
"""
function cuda_pool(a::Allocator)
    ensure_open(a)
    out = Ref{gpumem_cuda_pool_t}(C_NULL)
    check(gpumem_cuda_pool_get(a, out))
    return out[]
end

"""
    cuda_pool_trim!(a::Allocator, keep_bytes = 0)

Returns a CUDA pool's unused memory to the system until it holds about `keep_bytes`.
"""
cuda_pool_trim!(a::Allocator, keep_bytes::Integer = 0) = (ensure_open(a); check(gpumem_cuda_pool_trim(a, keep_bytes)))

"""
    cuda_pool_release_threshold!(a::Allocator, bytes)

Sets the bytes a CUDA pool keeps reserved at a synchronize (`typemax(UInt64)`: everything).
"""
cuda_pool_release_threshold!(a::Allocator, bytes::Integer) =
    (ensure_open(a); check(gpumem_cuda_pool_set_release_threshold(a, bytes)))

"""
    cuda_pool_info(a::Allocator)

What a CUDA pool holds, from its attributes, as a [`gpumem_cuda_pool_info_t`](@ref).
"""
function cuda_pool_info(a::Allocator)
    ensure_open(a)
    out = out_struct(gpumem_cuda_pool_info_t)
    check(gpumem_cuda_pool_get_info(a, out))
    return out[]
end

"""
    cuda_pool_reset_peaks!(a::Allocator)

Restarts a CUDA pool's high watermarks from now.
"""
cuda_pool_reset_peaks!(a::Allocator) = (ensure_open(a); check(gpumem_cuda_pool_reset_peaks(a)))

"""
    vm_info(a::Allocator)

What an allocator from [`vm_allocator`](@ref) holds, as a [`gpumem_vm_info_t`](@ref).
"""
function vm_info(a::Allocator)
    ensure_open(a)
    out = out_struct(gpumem_vm_info_t)
    check(gpumem_vm_get_info(a, out))
    return out[]
end

## Callbacks from C
#
# The library calls them on the thread of the call they serve; Julia before 1.9 cannot run Julia
# code on a thread it did not start, so only Julia threads may use allocators that call Julia.
# The function pointers are made in `__init__`: addresses from precompilation would be stale.

const HOOK_FN = Ref{gpumem_hook_fn}(C_NULL)
const BLOCK_FN = Ref{gpumem_block_fn}(C_NULL)
const RECLAIM_FN = Ref{gpumem_reclaim_fn}(C_NULL)
const ALLOC_FN = Ref{gpumem_alloc_fn}(C_NULL)
const FREE_FN = Ref{gpumem_free_fn}(C_NULL)

function init_callbacks()
    HOOK_FN[] = @cfunction(hook_trampoline, Cvoid, (Ptr{gpumem_hook_info_t}, Ptr{Cvoid}))
    BLOCK_FN[] = @cfunction(snapshot_trampoline, Cvoid, (Ptr{gpumem_block_info_t}, Ptr{Cvoid}))
    RECLAIM_FN[] = @cfunction(reclaim_trampoline, Cvoid, (Int32, Csize_t, Ptr{Cvoid}))
    ALLOC_FN[] = @cfunction(alloc_trampoline, gpumem_status_t,
                            (Ptr{Cvoid}, Csize_t, Int32, gpumem_stream_t, Ptr{Ptr{Cvoid}}))
    FREE_FN[] = @cfunction(free_trampoline, gpumem_status_t, (Ptr{Cvoid}, Ptr{Cvoid}, Csize_t, Int32, gpumem_stream_t))
    return nothing
end

## Hooks

"""
    Hook

A hook added by [`add_hook`](@ref); [`remove_hook`](@ref) removes it.
"""
mutable struct Hook
    allocator::Allocator
    f::Any
    id::UInt64
end

function hook_trampoline(info::Ptr{gpumem_hook_info_t}, user_data::Ptr{Cvoid})
    hook = unsafe_pointer_to_objref(user_data)::Hook
    try
        hook.f(unsafe_load(info))
    catch err
        keep_error!(hook.allocator, err)
    end
    return nothing
end

"""
    add_hook(f, a::Allocator, events = GPUMEM_HOOK_ALL)

Calls `f(info::gpumem_hook_info_t)` on the events of `events` (`GPUMEM_HOOK_*`, combined with `|`)
of allocator `a`, on the thread of each call, with no gpumem lock held. `f` must not yield; what
it throws is kept in [`callback_errors`](@ref). Returns a [`Hook`](@ref).
"""
function add_hook(f, a::Allocator, events::Integer = GPUMEM_HOOK_ALL)
    ensure_open(a)
    hook = Hook(a, f, UInt64(0))
    lock(a.callbacks_lock)
    try
        push!(a.callbacks, hook)
    finally
        unlock(a.callbacks_lock)
    end
    out = Ref{UInt64}(0)
    check(gpumem_allocator_add_hook(a, events, HOOK_FN[], pointer_from_objref(hook), out))
    hook.id = out[]
    return hook
end

"""
    remove_hook(hook::Hook)

Removes a hook; removing it again does nothing. A call in progress on another thread may still
run it once.
"""
function remove_hook(hook::Hook)
    hook.id == 0 && return nothing
    check(gpumem_allocator_remove_hook(hook.allocator, hook.id))
    hook.id = 0
    return nothing
end

## Reclaim callbacks

"""
    Reclaim

A reclaim callback added by [`add_reclaim`](@ref); `errors` holds what its function threw.
"""
mutable struct Reclaim
    f::Any
    id::UInt64
    errors::Vector{Any}
end

# Every callback ever added: a pool may call one once more after its removal.
const RECLAIMS = Reclaim[]
const RECLAIMS_LOCK = ReentrantLock()

function reclaim_trampoline(device::Int32, size::Csize_t, user_data::Ptr{Cvoid})
    reclaim = unsafe_pointer_to_objref(user_data)::Reclaim
    try
        reclaim.f(Int(device), Int(size))
    catch err
        lock(RECLAIMS_LOCK)
        try
            push!(reclaim.errors, err)
        finally
            unlock(RECLAIMS_LOCK)
        end
    end
    return nothing
end

"""
    add_reclaim(f)

Calls `f(device, bytes)` when any pool runs out of memory, so that memory Julia still holds can be
dropped (`add_reclaim((device, bytes) -> GC.gc())` frees unreachable buffers); the pool retries
once all have run. Runs on the allocating thread; returns a [`Reclaim`](@ref).
"""
function add_reclaim(f)
    reclaim = Reclaim(f, UInt64(0), Any[])
    lock(RECLAIMS_LOCK)
    try
        push!(RECLAIMS, reclaim)
    finally
        unlock(RECLAIMS_LOCK)
    end
    out = Ref{UInt64}(0)
    check(gpumem_reclaim_add(RECLAIM_FN[], pointer_from_objref(reclaim), out))
    reclaim.id = out[]
    return reclaim
end

"""
    remove_reclaim(reclaim::Reclaim)

Removes a reclaim callback; removing it again does nothing.
"""
function remove_reclaim(reclaim::Reclaim)
    reclaim.id == 0 && return nothing
    check(gpumem_reclaim_remove(reclaim.id))
    reclaim.id = 0
    return nothing
end

## Allocators made of Julia functions

mutable struct FunctionState
    alloc::Any
    free::Any
    allocator::Union{Allocator,Nothing}
end

function callback_failed(state::FunctionState, err)
    state.allocator === nothing || keep_error!(state.allocator, err)
    return GPUMEM_ERROR_INTERNAL
end

function alloc_trampoline(context::Ptr{Cvoid}, size::Csize_t, device::Int32, stream::gpumem_stream_t,
                          out_ptr::Ptr{Ptr{Cvoid}})
    state = unsafe_pointer_to_objref(context)::FunctionState
    try
        ptr = convert(Ptr{Cvoid}, state.alloc(Int(size), Int(device), stream))
        ptr == C_NULL && return GPUMEM_ERROR_OUT_OF_MEMORY
        unsafe_store!(out_ptr, ptr)
        return GPUMEM_SUCCESS
    catch err
        return callback_failed(state, err)
    end
end

function free_trampoline(context::Ptr{Cvoid}, ptr::Ptr{Cvoid}, size::Csize_t, device::Int32, stream::gpumem_stream_t)
    state = unsafe_pointer_to_objref(context)::FunctionState
    try
        state.free(ptr, Int(size), Int(device), stream)
        return GPUMEM_SUCCESS
    catch err
        return callback_failed(state, err)
    end
end

"""
    function_allocator(alloc, free; device = -1)

An allocator made of two Julia functions: `alloc(bytes, device, stream)` returns a `Ptr` to
`bytes` bytes (`C_NULL`: out of memory, and a pool above releases cached memory and retries), and
`free(ptr, bytes, device, stream)` takes it back. `device` is where the memory is, -1 for host
memory. They run on the thread that allocates or frees, concurrently, and must not yield; what
they throw is kept in [`callback_errors`](@ref) and fails the call with `GPUMEM_ERROR_INTERNAL`.
"""
function function_allocator(alloc, free; device::Integer = -1)
    state = FunctionState(alloc, free, nothing)
    functions = gpumem_allocator_functions_t(sizeof(gpumem_allocator_functions_t), pointer_from_objref(state),
                                             device, ALLOC_FN[], FREE_FN[], C_NULL, C_NULL, C_NULL, C_NULL, C_NULL,
                                             0, 0)
    out = Ref{Ptr{gpumem_allocator_t}}(C_NULL)
    GC.@preserve state check(gpumem_allocator_create_functions(functions, out))
    a = Allocator(out[]; callbacks = Any[state])
    state.allocator = a
    return a
end
