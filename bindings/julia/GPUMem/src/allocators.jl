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
over it are gone, or by `close`; `isopen(a)` says whether it is still usable. Buffers keep their
allocator alive, and a pool its upstream.

Thread-safe: any thread, concurrently, including on the same handle; but `close` is per handle:
concurrent calls on different handles; one handle is serialized by the caller.
"""
mutable struct Allocator
    handle::Ptr{gpumem_allocator_t}
    owned::Bool
    upstream::Union{Allocator,Nothing}
    refs::Threads.Atomic{Int}
    # The frees of its buffers in progress, with CLOSING and CLOSED above the count: a finalizer
    # may free a buffer on another thread while `close(a; force = true)` frees everything, and
    # the library serializes nothing between the two.
    state::Threads.Atomic{Int}

    function Allocator(handle::Ptr{gpumem_allocator_t}; owned::Bool = true,
                       upstream::Union{Allocator,Nothing} = nothing)
        a = new(handle, owned, upstream, Threads.Atomic{Int}(1), Threads.Atomic{Int}(0))
        if owned
            # A new handle: what was kept under its address belonged to an allocator destroyed elsewhere.
            forget_handle!(UInt(handle))
            finalizer(finalize_allocator, a)
        end
        return a
    end
end

const CLOSING = 1 << 40
const CLOSED = 1 << 41
const FREES = CLOSING - 1

# Passing the Allocator itself to a ccall keeps it rooted, so no finalizer destroys it mid-call.
Base.unsafe_convert(::Type{Ptr{gpumem_allocator_t}}, a::Allocator) = a.handle

"""
    isopen(a::Allocator)

Whether an allocator can still be used: `false` once `close` (or its finalizer) destroyed it.
A borrowed allocator is always open.
"""
Base.isopen(a::Allocator) = (a.state[] & CLOSED) == 0

function Base.show(io::IO, a::Allocator)
    state = !isopen(a) ? "closed" : a.owned ? "owned" : "borrowed"
    print(io, "GPUMem.Allocator(", a.handle, ", ", state, ")")
end

retain!(a::Allocator) = (Threads.atomic_add!(a.refs, 1); nothing)

function drop!(a::Allocator)
    Threads.atomic_sub!(a.refs, 1) == 1 && destroy_unchecked(a)
    return nothing
end

finalize_allocator(a::Allocator) = isopen(a) ? drop!(a) : nothing

# From finalizers, once nothing needs the allocator: nothing may throw. A refusal leaves the
# allocator to the library, which is only memory lost; its upstream, and the Julia functions
# the library may still call for it, then stay.
function destroy_unchecked(a::Allocator)
    a.owned || return nothing
    Threads.atomic_cas!(a.state, 0, CLOSED) == 0 || return nothing
    if gpumem_allocator_destroy(a) == GPUMEM_SUCCESS
        forget_handle!(UInt(a.handle))
        a.upstream === nothing || drop!(a.upstream)
    end
    return nothing
end

function ensure_open(a::Allocator)
    isopen(a) || throw(ArgumentError("$a is closed"))
    return a
end

"""
    close(a::Allocator; force = false)

Destroys an allocator now. Throws `GPUMemError` with `GPUMEM_ERROR_BUSY` while it has live
buffers, a pool is built on it, or it is a default; with `force = true` live buffers are freed
with it (their pointers become invalid, and their `free` does nothing). Closing a closed or
borrowed allocator does nothing. A buffer that a finalizer frees on another thread meanwhile is
freed before the allocator is destroyed, or not at all.
"""
function Base.close(a::Allocator; force::Bool = false)
    a.owned || return nothing
    while true
        s = a.state[]
        (s & (CLOSING | CLOSED)) == 0 || return nothing
        Threads.atomic_cas!(a.state, s, s | CLOSING) == s && break
    end
    destroyed = false
    # A finalizer run on this thread while it waits could be a free of this allocator, which
    # would wait for this close in turn.
    enable_finalizers(false)
    try
        while (a.state[] & FREES) != 0
            GC.safepoint()
        end
        check(force ? gpumem_allocator_destroy_force(a) : gpumem_allocator_destroy(a))
        destroyed = true
    finally
        destroyed ? Threads.atomic_xchg!(a.state, CLOSED) : Threads.atomic_and!(a.state, ~CLOSING)
        enable_finalizers(true)
    end
    forget_handle!(UInt(a.handle))
    Threads.atomic_sub!(a.refs, 1)
    a.upstream === nothing || drop!(a.upstream)
    return nothing
end

# Frees memory of `a` unless `close(a; force = true)` freed it with the allocator, waiting while
# such a close is in progress.
function free_to(a::Allocator, ptr::Ptr{Cvoid}, stream::gpumem_stream_t)
    while true
        s = a.state[]
        (s & CLOSED) == 0 || return GPUMEM_SUCCESS
        if (s & CLOSING) == 0
            Threads.atomic_cas!(a.state, s, s + 1) == s && break
        else
            GC.safepoint()
        end
    end
    try
        return gpumem_free(a, ptr, stream)
    finally
        Threads.atomic_sub!(a.state, 1)
    end
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

# Memory freed with its allocator by `close(a; force = true)` is as gone as memory freed by `free`.
isfreed(buf::Buffer) = buf.freed || (buf.kind === :allocator && !isopen(buf.allocator::Allocator))

address(buf::Buffer) = isfreed(buf) ? throw(ArgumentError("$buf is freed")) : buf.ptr

Base.unsafe_convert(::Type{Ptr{Cvoid}}, buf::Buffer) = address(buf)

function Base.show(io::IO, buf::Buffer)
    print(io, "GPUMem.Buffer(", buf.ptr, ", ", buf.bytes, " bytes, ", buf.kind, buf.freed ? ", freed)" : ")")
end

function free_status(buf::Buffer, stream::gpumem_stream_t)
    kind = buf.kind
    if kind === :allocator
        return free_to(buf.allocator::Allocator, buf.ptr, stream)
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
    params = init_struct(gpumem_vm_params_init, gpumem_vm_params_t; device = device, range_size = range_size,
                         map_unit = map_unit)
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
    params = init_struct(gpumem_cuda_pool_params_init, gpumem_cuda_pool_params_t; device = device, source = source,
                         pool = pool, max_size = max_size, release_threshold = release_threshold)
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
    params = init_struct(gpumem_pool_params_init, gpumem_pool_params_t; upstream = upstream.handle, limit = limit,
                         limit_fraction = limit_fraction)
    out = Ref{Ptr{gpumem_allocator_t}}(C_NULL)
    GC.@preserve upstream check(gpumem_pool_create(params, out))
    retain!(upstream)
    return Allocator(out[]; upstream = upstream)
end

"""
    tenant(upstream::Allocator; name = "tenant", limit = 0, soft_limit = 0)

A tenant of `upstream` (`tenant.h`): an allocator of its own handing out `upstream`'s memory,
which it keeps alive, with a hard budget `limit` and a soft one `soft_limit` (0: none) and its own
statistics. Memory one tenant frees serves another at once.
"""
function tenant(upstream::Allocator; name::AbstractString = "tenant", limit::Integer = 0, soft_limit::Integer = 0)
    ensure_open(upstream)
    GC.@preserve name begin
        params = init_struct(gpumem_tenant_params_init, gpumem_tenant_params_t; upstream = upstream.handle,
                             limit = limit, soft_limit = soft_limit, name = Base.unsafe_convert(Cstring, name))
        out = Ref{Ptr{gpumem_allocator_t}}(C_NULL)
        GC.@preserve upstream check(gpumem_tenant_create(params, out))
    end
    retain!(upstream)
    return Allocator(out[]; upstream = upstream)
end

"""
    tenant_limits!(t::Allocator, limit, soft_limit = 0)

Sets a tenant's budgets in bytes (0: none).
"""
tenant_limits!(t::Allocator, limit::Integer, soft_limit::Integer = 0) =
    (ensure_open(t); check(gpumem_tenant_set_limits(t, limit, soft_limit)))

"""
    tenant_info(t::Allocator)

A tenant's name, budgets and figures, as a [`gpumem_tenant_info_t`](@ref).
"""
function tenant_info(t::Allocator)
    ensure_open(t)
    out = out_struct(gpumem_tenant_info_t)
    check(gpumem_tenant_get_info(t, out))
    return out[]
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
    return lock(DEFAULTS_LOCK) do
        kept = get(DEFAULTS, Int(device), nothing)
        kept !== nothing && kept.handle == out[] ? kept : Allocator(out[]; owned = false)
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
    lock(DEFAULTS_LOCK) do
        if a === nothing
            check(gpumem_allocator_set_default(device, C_NULL))
            delete!(DEFAULTS, Int(device))
        else
            check(gpumem_allocator_set_default(device, a))
            DEFAULTS[Int(device)] = a
        end
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
is handed out again only when the work queued on `stream` until then has ended. Throws
`ArgumentError` for a freed buffer or one that is not from `pool`.
"""
function record_stream(pool::Allocator, buf::Buffer, stream)
    ensure_open(pool)
    # By handle: device_pool(d) and default_allocator(d) give a new wrapper of the same pool each time.
    (buf.kind === :allocator && (buf.allocator::Allocator).handle == pool.handle) ||
        throw(ArgumentError("$buf is not from $pool"))
    return GC.@preserve buf check(gpumem_pool_record_stream(pool, address(buf), stream_handle(stream)))
end

# Each block of a snapshot is pushed here by `snapshot_trampoline`.
mutable struct SnapshotState
    blocks::Vector{gpumem_block_info_t}
    error::Any
end

# Called only during `gpumem_pool_snapshot`, which `snapshot` makes with `state` preserved: the
# address of `state` can be the user_data.
function snapshot_trampoline(block::Ptr{gpumem_block_info_t}, user_data::Ptr{Cvoid})
    try
        state = unsafe_pointer_to_objref(user_data)::SnapshotState
        try
            push!(state.blocks, unsafe_load(block))
        catch err
            state.error = err
        end
    catch
        # Nothing may unwind into C.
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
#
# The library calls a hook or reclaim callback only from its adding until its removal returns
# (which waits for its calls on other threads) or its allocator is destroyed; a function
# allocator's functions until its destruction. The `user_data` it holds is a key of CALLBACKS,
# never the address of a Julia object: CALLBACKS roots each callback for that time only, and a
# trampoline holds the entry it looked up for the rest of its call, so a callback that removes
# itself is not collected under it. What callbacks throw is kept by allocator handle, since
# `device_pool(d)` and `default_allocator(d)` give a new wrapper of one handle each time.
#
# Callbacks run inside finalizers too (a buffer's finalizer frees, which runs hooks; a pool
# destroyed by its finalizer gives blocks back to a function allocator), where a task switch
# throws. So they take only SpinLocks, which never yield, with this thread's finalizers held off
# so that none re-enters a lock its thread holds; an error is kept only if its lock is free at
# once, and counted as dropped otherwise. Nothing they throw may unwind into C.

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

# `GC.enable_finalizers` is not in every Julia 1.6.
@static if isdefined(GC, :enable_finalizers)
    enable_finalizers(on::Bool) = GC.enable_finalizers(on)
else
    enable_finalizers(on::Bool) = ccall(:jl_gc_enable_finalizers, Cvoid, (Ptr{Cvoid}, Int32), Core.getptls(), on)
end

function locked(f, l::Threads.SpinLock)
    enable_finalizers(false)
    lock(l)
    try
        return f()
    finally
        unlock(l)
        enable_finalizers(true)
    end
end

const MAX_KEPT_ERRORS = 100

# What the Julia functions of one allocator, or one reclaim callback, threw.
struct CallbackErrors
    errors::Vector{Any}
    dropped::Threads.Atomic{Int}
end

CallbackErrors() = CallbackErrors(Any[], Threads.Atomic{Int}(0))

# Every allocator handle with callbacks: the keys to drop when it is destroyed, and its errors.
struct HandleCallbacks
    keys::Vector{UInt}
    errors::CallbackErrors
end

const CALLBACKS = Dict{UInt,Any}()
const BY_HANDLE = Dict{UInt,HandleCallbacks}()
const CALLBACKS_LOCK = Threads.SpinLock()
const ERRORS_LOCK = Threads.SpinLock()
const NEXT_KEY = Threads.Atomic{UInt}(1)

user_data(key::UInt) = reinterpret(Ptr{Cvoid}, key)

function register_callback!(entry)
    key = Threads.atomic_add!(NEXT_KEY, UInt(1))
    locked(() -> (CALLBACKS[key] = entry), CALLBACKS_LOCK)
    return key
end

# Ties a registered callback to an allocator handle, to be dropped when it is destroyed, and
# gives it the errors kept for that handle.
function attach_callback!(entry, key::UInt, handle::UInt)
    locked(CALLBACKS_LOCK) do
        kept = get!(() -> HandleCallbacks(UInt[], CallbackErrors()), BY_HANDLE, handle)
        push!(kept.keys, key)
        entry.errors = kept.errors
    end
    return nothing
end

function unregister_callback!(key::UInt, handle::UInt = UInt(0))
    locked(CALLBACKS_LOCK) do
        delete!(CALLBACKS, key)
        kept = get(BY_HANDLE, handle, nothing)
        kept === nothing || filter!(k -> k != key, kept.keys)
    end
    return nothing
end

# An allocator destroyed: the library calls none of its callbacks any more.
function forget_handle!(handle::UInt)
    locked(CALLBACKS_LOCK) do
        kept = pop!(BY_HANDLE, handle, nothing)
        if kept !== nothing
            for key in kept.keys
                delete!(CALLBACKS, key)
            end
        end
    end
    return nothing
end

callback_entry(user_data::Ptr{Cvoid}) = locked(() -> get(CALLBACKS, UInt(user_data), nothing), CALLBACKS_LOCK)

function keep_error!(kept::CallbackErrors, err)
    done = false
    try
        enable_finalizers(false)
        try
            if trylock(ERRORS_LOCK)
                try
                    if length(kept.errors) < MAX_KEPT_ERRORS
                        push!(kept.errors, err)
                        done = true
                    end
                finally
                    unlock(ERRORS_LOCK)
                end
            end
        finally
            enable_finalizers(true)
        end
    catch
        # Not kept: counted below.
    end
    done || Threads.atomic_add!(kept.dropped, 1)
    return nothing
end

keep_error!(::Nothing, err) = nothing

kept_errors(kept::CallbackErrors) = locked(() -> copy(kept.errors), ERRORS_LOCK)

handle_errors(a::Allocator) = locked(() -> get(BY_HANDLE, UInt(a.handle), nothing), CALLBACKS_LOCK)

"""
    callback_errors(a::Allocator)
    callback_errors(reclaim::Reclaim)

The exceptions thrown by the Julia functions that the library called for an allocator (its hooks,
the functions of a [`function_allocator`](@ref)) or by a reclaim callback, oldest first: they
cannot unwind through C, so they are kept, until the allocator is destroyed. At most
$MAX_KEPT_ERRORS are kept; [`dropped_callback_errors`](@ref) counts the others. Every wrapper of
one handle (`device_pool(0)`, say, each time) has the same errors.
"""
function callback_errors(a::Allocator)
    kept = handle_errors(a)
    return kept === nothing ? Any[] : kept_errors(kept.errors)
end

"""
    dropped_callback_errors(a::Allocator)
    dropped_callback_errors(reclaim::Reclaim)

How many exceptions thrown by the Julia functions called for an allocator, or by a reclaim
callback, were not kept in [`callback_errors`](@ref): those beyond the first $MAX_KEPT_ERRORS,
and those thrown while another thread was reading or keeping errors.
"""
function dropped_callback_errors(a::Allocator)
    kept = handle_errors(a)
    return kept === nothing ? 0 : kept.errors.dropped[]
end

## Hooks

"""
    Hook

A hook added by [`add_hook`](@ref); [`remove_hook`](@ref) removes it. It need not be kept: the
hook runs until it is removed or its allocator is destroyed.
"""
mutable struct Hook
    allocator::Allocator
    key::UInt
    id::UInt64
end

mutable struct HookEntry
    f::Any
    errors::Union{CallbackErrors,Nothing}
end

function hook_trampoline(info::Ptr{gpumem_hook_info_t}, user_data::Ptr{Cvoid})
    entry = nothing
    try
        entry = callback_entry(user_data)
        entry isa HookEntry && entry.f(unsafe_load(info))
    catch err
        entry isa HookEntry && keep_error!(entry.errors, err)
    end
    return nothing
end

"""
    add_hook(f, a::Allocator, events = GPUMEM_HOOK_ALL)

Calls `f(info::gpumem_hook_info_t)` on the events of `events` (`GPUMEM_HOOK_*`, combined with `|`)
of allocator `a`, on the thread of each call, with no gpumem lock held, until [`remove_hook`](@ref)
or the allocator's destruction; a borrowed allocator's hooks stay after its wrapper is gone. `f`
may run inside a finalizer (one that frees a buffer), so it must not yield: no I/O, no locks
that wait, no `@sync`. What it throws is kept in [`callback_errors`](@ref). Returns a
[`Hook`](@ref).
"""
function add_hook(f, a::Allocator, events::Integer = GPUMEM_HOOK_ALL)
    ensure_open(a)
    entry = HookEntry(f, nothing)
    key = register_callback!(entry)
    attach_callback!(entry, key, UInt(a.handle))
    out = Ref{UInt64}(0)
    try
        check(gpumem_allocator_add_hook(a, events, HOOK_FN[], user_data(key), out))
    catch
        unregister_callback!(key, UInt(a.handle))
        rethrow()
    end
    return Hook(a, key, out[])
end

"""
    remove_hook(hook::Hook)

Removes a hook; removing it again, or once its allocator is destroyed, does nothing. Returns
once no other thread runs it; it never runs again, and its function is no longer kept. Called
from inside the hook, the call it is made from finishes after it.
"""
function remove_hook(hook::Hook)
    hook.id == 0 && return nothing
    isopen(hook.allocator) && check(gpumem_allocator_remove_hook(hook.allocator, hook.id))
    unregister_callback!(hook.key, UInt(hook.allocator.handle))
    hook.id = 0
    return nothing
end

## Reclaim callbacks

"""
    Reclaim

A reclaim callback added by [`add_reclaim`](@ref); [`callback_errors`](@ref) gives what its
function threw.
"""
mutable struct Reclaim
    f::Any
    key::UInt
    id::UInt64
    errors::CallbackErrors
end

function reclaim_trampoline(device::Int32, size::Csize_t, user_data::Ptr{Cvoid})
    entry = nothing
    try
        entry = callback_entry(user_data)
        entry isa Reclaim && entry.f(Int(device), Int(size))
    catch err
        entry isa Reclaim && keep_error!(entry.errors, err)
    end
    return nothing
end

"""
    add_reclaim(f)

Calls `f(device, bytes)` when any pool runs out of memory, so that memory Julia still holds can be
dropped (`add_reclaim((device, bytes) -> GC.gc())` frees unreachable buffers); the pool retries
once all have run. Runs on the allocating thread, perhaps inside a finalizer, so `f` must not
yield; what it throws is kept in [`callback_errors`](@ref). Returns a [`Reclaim`](@ref).
"""
function add_reclaim(f)
    reclaim = Reclaim(f, UInt(0), UInt64(0), CallbackErrors())
    reclaim.key = register_callback!(reclaim)
    out = Ref{UInt64}(0)
    try
        check(gpumem_reclaim_add(RECLAIM_FN[], user_data(reclaim.key), out))
    catch
        unregister_callback!(reclaim.key)
        rethrow()
    end
    reclaim.id = out[]
    return reclaim
end

"""
    remove_reclaim(reclaim::Reclaim)

Removes a reclaim callback; removing it again does nothing. Returns once no other thread runs
it; it never runs again, and its function is no longer kept. Called from inside the callback,
the call it is made from finishes after it.
"""
function remove_reclaim(reclaim::Reclaim)
    reclaim.id == 0 && return nothing
    check(gpumem_reclaim_remove(reclaim.id))
    unregister_callback!(reclaim.key)
    reclaim.id = 0
    return nothing
end

callback_errors(reclaim::Reclaim) = kept_errors(reclaim.errors)

dropped_callback_errors(reclaim::Reclaim) = reclaim.errors.dropped[]

## Allocators made of Julia functions

mutable struct FunctionState
    alloc::Any
    free::Any
    errors::Union{CallbackErrors,Nothing}
end

function alloc_trampoline(context::Ptr{Cvoid}, size::Csize_t, device::Int32, stream::gpumem_stream_t,
                          out_ptr::Ptr{Ptr{Cvoid}})
    state = nothing
    try
        state = callback_entry(context)
        state isa FunctionState || return GPUMEM_ERROR_INTERNAL
        ptr = convert(Ptr{Cvoid}, state.alloc(Int(size), Int(device), stream))
        ptr == C_NULL && return GPUMEM_ERROR_OUT_OF_MEMORY
        unsafe_store!(out_ptr, ptr)
        return GPUMEM_SUCCESS
    catch err
        state isa FunctionState && keep_error!(state.errors, err)
        return GPUMEM_ERROR_INTERNAL
    end
end

function free_trampoline(context::Ptr{Cvoid}, ptr::Ptr{Cvoid}, size::Csize_t, device::Int32, stream::gpumem_stream_t)
    state = nothing
    try
        state = callback_entry(context)
        state isa FunctionState || return GPUMEM_ERROR_INTERNAL
        state.free(ptr, Int(size), Int(device), stream)
        return GPUMEM_SUCCESS
    catch err
        state isa FunctionState && keep_error!(state.errors, err)
        return GPUMEM_ERROR_INTERNAL
    end
end

"""
    function_allocator(alloc, free; device = -1)

An allocator made of two Julia functions: `alloc(bytes, device, stream)` returns a `Ptr` to
`bytes` bytes (`C_NULL`: out of memory, and a pool above releases cached memory and retries), and
`free(ptr, bytes, device, stream)` takes it back. `device` is where the memory is, -1 for host
memory. They run on the thread that allocates or frees, concurrently, perhaps inside a finalizer
(a pool over this allocator destroyed by its finalizer frees here), and must not yield; what
they throw is kept in [`callback_errors`](@ref) and fails the call with `GPUMEM_ERROR_INTERNAL`.
"""
function function_allocator(alloc, free; device::Integer = -1)
    state = FunctionState(alloc, free, nothing)
    key = register_callback!(state)
    functions = c_struct(gpumem_allocator_functions_t; context = user_data(key), device = device,
                         alloc = ALLOC_FN[], free = FREE_FN[])
    out = Ref{Ptr{gpumem_allocator_t}}(C_NULL)
    try
        check(gpumem_allocator_create_functions(functions, out))
    catch
        unregister_callback!(key)
        rethrow()
    end
    a = Allocator(out[])
    attach_callback!(state, key, UInt(a.handle))
    return a
end
