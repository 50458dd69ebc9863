# The pinning service (pin.h): counted page-locking of host memory, shared by every caller in the
# process, with a cache of registrations that makes pinning the same memory again cheap.
#
# The library's rule is that a cached registration must not outlive its memory. An Array pinned
# here gets, once, a finalizer that forgets its range before Julia frees it; arrays already given
# one are remembered by address, with a weak reference to tell a new array at an old address.

const FORGET_LOCK = ReentrantLock()
const FORGET_ON_COLLECTION = Dict{UInt,WeakRef}()
const FORGET_PURGE_AT = Ref(64)

function forget_on_collection(a::Array)
    key = UInt(pointer(a))
    lock(FORGET_LOCK) do
        known = get(FORGET_ON_COLLECTION, key, nothing)
        known !== nothing && known.value === a && return
        finalizer(forget_pins, a)
        FORGET_ON_COLLECTION[key] = WeakRef(a)
        if length(FORGET_ON_COLLECTION) >= FORGET_PURGE_AT[]
            filter!(entry -> entry.second.value !== nothing, FORGET_ON_COLLECTION)
            FORGET_PURGE_AT[] = 2 * max(length(FORGET_ON_COLLECTION), 32)
        end
    end
    return nothing
end

# Calls `f(address, bytes)` for an array's memory and checks the status; an empty array has none.
function on_array(f, a::Array)
    sizeof(a) == 0 && return nothing
    GC.@preserve a check(f(address(a), sizeof(a)))
    return nothing
end

# From a finalizer: a pin that still covers the array makes the library refuse, and the cache then
# evicts the registration in its own time.
function forget_pins(a::Array)
    sizeof(a) == 0 || gpumem_pin_forget(a, sizeof(a))
    return nothing
end

"""
    pin(a::Array)
    pin(ptr::Ptr, bytes)

Pins host memory: page-locks it for fast, asynchronous transfers, registering with the driver only
what is not registered yet, and counts one more pin over it. Any number of callers may pin the
same or overlapping memory; it stays page-locked while a pin covers it. Each `pin` needs one
[`unpin`](@ref), once the copies queued on it are done. Returns its argument. An empty array
needs no pin.

Do not resize a pinned array, and for memory freed other than by Julia's collection of an
`Array`, call [`pin_forget`](@ref) first.
"""
function pin(a::Array)
    sizeof(a) == 0 && return a
    on_array((ptr, size) -> gpumem_pin(ptr, size, 0), a)
    forget_on_collection(a)
    return a
end

function pin(ptr::Ptr, bytes::Integer)
    check(gpumem_pin(ptr, bytes, 0))
    return ptr
end

"""
    pin(f, a::Array)
    pin(f, ptr::Ptr, bytes)

Pins the memory, runs `f(a)` (or `f(ptr)`), unpins, and returns what `f` returned. Copies that
`f` queues on a stream must be complete when it returns: the memory may be unregistered then.
"""
function pin(f::Function, a::Array)
    pin(a)
    try
        return f(a)
    finally
        unpin(a)
    end
end

function pin(f::Function, ptr::Ptr, bytes::Integer)
    pin(ptr, bytes)
    try
        return f(ptr)
    finally
        unpin(ptr, bytes)
    end
end

"""
    unpin(a::Array)
    unpin(ptr::Ptr, bytes)

Removes one pin. Memory no pin covers any more is unregistered, or kept registered in the cache
while its budget allows. Throws `GPUMemError` with `GPUMEM_ERROR_NOT_OWNED`, changing nothing, when
part of the memory is not pinned.
"""
unpin(a::Array) = on_array(gpumem_unpin, a)

unpin(ptr::Ptr, bytes::Integer) = check(gpumem_unpin(ptr, bytes))

"""
    pin_state(a::Array)
    pin_state(ptr::Ptr, bytes)

How much of the memory is pinned through the service: `GPUMEM_PIN_NONE`, `GPUMEM_PIN_PARTIAL` or
`GPUMEM_PIN_FULL`.
"""
function pin_state(a::Array)
    sizeof(a) == 0 && return GPUMEM_PIN_NONE
    return GC.@preserve a pin_state(address(a), sizeof(a))
end

function pin_state(ptr::Ptr, bytes::Integer)
    out = Ref{Int32}(GPUMEM_PIN_NONE)
    check(gpumem_pin_query(ptr, bytes, out))
    return out[]
end

"""
    pin_forget(a::Array)
    pin_forget(ptr::Ptr, bytes)

Tells the service that memory is about to be freed: cached registrations that touch it are
unregistered now. Throws `GPUMemError` with `GPUMEM_ERROR_BUSY` while a pin still covers any of it.
"""
pin_forget(a::Array) = on_array(gpumem_pin_forget, a)

pin_forget(ptr::Ptr, bytes::Integer) = check(gpumem_pin_forget(ptr, bytes))

"""
    pin_stats()

Statistics of the pinning service, as a [`gpumem_pin_stats_t`](@ref): `bytes_registered`,
`bytes_pinned`, `bytes_cached`, `registrations`, `pins`, `unpins`, `hits`, `misses`, `evictions`,
`cache_budget`.
"""
function pin_stats()
    out = out_struct(gpumem_pin_stats_t)
    check(gpumem_pin_get_stats(out))
    return out[]
end

"""
    pin_cache_flush()

Unregisters every cached registration (those no pin covers).
"""
pin_cache_flush() = check(gpumem_pin_cache_flush())

"""
    pin_cache_budget!(bytes)

Sets the most bytes the cache keeps registered under no pin (default `GPUMEM_PIN_CACHE`, else
1 GiB; 0 turns caching off), evicting what is over it.
"""
pin_cache_budget!(bytes::Integer) = check(gpumem_pin_cache_set_budget(bytes))
