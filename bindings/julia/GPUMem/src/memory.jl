# Raw memory of every kind, copies, memset, pointers, managed memory and CUDA arrays
# (memory.h, copy.h, pointer.h, array.h).
#
# Memory arguments are a Buffer, a Ptr (any address: device, managed or host), or an Array of
# bits (host memory). Where the size of a side is known, a call that would run past it throws.

address(ptr::Ptr) = convert(Ptr{Cvoid}, ptr)
function address(a::Array)
    isbitstype(eltype(a)) || throw(ArgumentError("an Array{$(eltype(a))} does not hold its elements inline"))
    return convert(Ptr{Cvoid}, pointer(a))
end

extent(buf::Buffer) = buf.bytes
extent(a::Array) = sizeof(a)
extent(::Ptr) = typemax(Int)

function check_extent(x, bytes::Integer, what::AbstractString)
    bytes >= 0 || throw(ArgumentError("$what of $bytes bytes"))
    bytes <= extent(x) || throw(ArgumentError("$what of $bytes bytes runs past the end of $(extent(x)) bytes"))
    return nothing
end

# The size of a range given by its memory, or by `bytes` for a bare pointer.
span(x, ::Nothing) = x isa Ptr ? throw(ArgumentError("give `bytes` with a bare pointer")) : extent(x)
span(x, bytes::Integer) = (check_extent(x, bytes, "a range"); Int(bytes))

## Raw allocations

"""
    device_alloc(bytes; device = 0)

Device memory straight from the driver (`cuMemAlloc`), as a [`Buffer`](@ref) that
[`free`](@ref) gives back with `cuMemFree`.
"""
function device_alloc(bytes::Integer; device::Integer = 0)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(gpumem_device_alloc(device, bytes, out))
    return new_buffer(out[], bytes, stream_handle(nothing), nothing, :device)
end

"""
    device_alloc_async(bytes; device = 0, stream = nothing, cuda_pool = nothing)

Device memory ordered on `stream` (`cuMemAllocAsync`, or `cuMemAllocFromPoolAsync` from
`cuda_pool`), as a [`Buffer`](@ref) that [`free`](@ref) gives back on that stream
(`cuMemFreeAsync`).
"""
function device_alloc_async(bytes::Integer; device::Integer = 0, stream = nothing, cuda_pool = nothing)
    s = stream_handle(stream)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    if cuda_pool === nothing
        check(gpumem_device_alloc_async(device, bytes, s, out))
    else
        check(gpumem_device_alloc_from_pool(cuda_pool, bytes, s, out))
    end
    return new_buffer(out[], bytes, s, nothing, :device_async)
end

"""
    host_alloc(bytes; flags = 0)

Pinned host memory (`cuMemHostAlloc`, with `GPUMEM_HOST_ALLOC_*` flags), as a [`Buffer`](@ref).
"""
function host_alloc(bytes::Integer; flags::Integer = 0)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(gpumem_host_alloc(bytes, flags, out))
    return new_buffer(out[], bytes, stream_handle(nothing), nothing, :pinned)
end

"""
    managed_alloc(bytes; device = 0, flags = GPUMEM_MANAGED_ATTACH_GLOBAL)

Managed (unified) memory (`cuMemAllocManaged`), reachable from the host and every device, as a
[`Buffer`](@ref).
"""
function managed_alloc(bytes::Integer; device::Integer = 0, flags::Integer = GPUMEM_MANAGED_ATTACH_GLOBAL)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(gpumem_managed_alloc(device, bytes, flags, out))
    return new_buffer(out[], bytes, stream_handle(nothing), nothing, :managed)
end

"""
    register(a::Array; flags = 0)
    register(ptr::Ptr, bytes; flags = 0)

Page-locks existing host memory (`cuMemHostRegister`, with `GPUMEM_HOST_REGISTER_*` flags) and
returns a [`Buffer`](@ref) over it, which keeps the array alive; [`unregister`](@ref) (or `free`,
or its finalizer) ends the registration. For memory that many users pin and unpin, [`pin`](@ref)
counts pins instead.
"""
function register(a::Array; flags::Integer = 0)
    ptr = address(a)
    GC.@preserve a check(gpumem_host_register(ptr, sizeof(a), flags))
    return new_buffer(ptr, sizeof(a), stream_handle(nothing), nothing, :registered, a)
end

function register(ptr::Ptr, bytes::Integer; flags::Integer = 0)
    check(gpumem_host_register(ptr, bytes, flags))
    return new_buffer(address(ptr), bytes, stream_handle(nothing), nothing, :registered)
end

"""
    unregister(buf::Buffer)

Ends a registration made by [`register`](@ref); the same as `free(buf)`.
"""
function unregister(buf::Buffer)
    buf.kind === :registered || throw(ArgumentError("$buf is not a registration"))
    return free(buf)
end

"""
    device_pointer(x)

The device address of mapped page-locked host memory (`cuMemHostGetDevicePointer`): pinned memory
from `host_alloc(bytes; flags = GPUMEM_HOST_ALLOC_DEVICEMAP)` or registered with
`GPUMEM_HOST_REGISTER_DEVICEMAP` (any pinned memory on devices with unified addressing).
"""
function device_pointer(x)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve x check(gpumem_host_get_device_pointer(address(x), out))
    return out[]
end

## Copies and memset

"""
    unsafe_copyto!(dst, src, n; stream = nothing)

Copies `n` elements from `src` to `dst`, at least one of them a [`Buffer`](@ref), the other a
`Buffer`, a `Ptr` or an `Array` of bits; either side may be device, managed, pinned, registered or
plain host memory. As with Base's and CUDA.jl's `unsafe_copyto!`, `n` counts elements of `T` when
the other side is a `Ptr{T}` or an `Array{T}` (`length(a)` for a whole array, not `sizeof(a)`),
and bytes between two `Buffer`s or with a `Ptr{Cvoid}`. Without `stream` the copy is done when
the call returns (`cuMemcpy`); with a stream it is queued there (a copy with plain host memory
still reads or writes that memory before returning). The ranges must not overlap. Returns `dst`.
"""
Base.unsafe_copyto!(dst::Buffer, src::Buffer, n::Integer; stream = nothing) = copy_elements!(dst, src, n, stream)
Base.unsafe_copyto!(dst::Buffer, src::Union{Ptr,Array}, n::Integer; stream = nothing) =
    copy_elements!(dst, src, n, stream)
Base.unsafe_copyto!(dst::Union{Ptr,Array}, src::Buffer, n::Integer; stream = nothing) =
    copy_elements!(dst, src, n, stream)

# Bytes of the element a side counts in, or nothing for memory counted in bytes.
element_size(::Buffer) = nothing
element_size(::Ptr{Cvoid}) = nothing
element_size(::Ptr{T}) where {T} = bits_size(T)
element_size(::Array{T}) where {T} = bits_size(T)

bits_size(::Type{T}) where {T} = isbitstype(T) ? sizeof(T) : throw(ArgumentError("$T is not a type of bits"))

function copy_elements!(dst, src, n::Integer, stream)
    nbytes = Base.checked_mul(Int(n), something(element_size(dst), element_size(src), 1))
    check_extent(dst, nbytes, "a copy")
    check_extent(src, nbytes, "a copy")
    GC.@preserve dst src begin
        d, s = address(dst), address(src)
        on_stream(stream, () -> gpumem_copy(d, s, nbytes), h -> gpumem_copy_async(d, s, nbytes, h))
    end
    return dst
end

# The synchronous call without a stream, the one queued on it with one.
function on_stream(stream, sync, async)
    check(stream === nothing ? sync() : async(stream_handle(stream)))
    return nothing
end

"""
    memset!(dst, value::Union{UInt8,UInt16,UInt32}, count; stream = nothing)

Sets `count` elements of `sizeof(value)` bytes at `dst` (device, managed or mapped pinned memory,
aligned to the element) to `value` (`cuMemsetD8/D16/D32`), on `stream` if given. Returns `dst`.
"""
function memset!(dst, value::Union{UInt8,UInt16,UInt32}, count::Integer; stream = nothing)
    check_extent(dst, count * sizeof(value), "a memset")
    GC.@preserve dst begin
        d = address(dst)
        on_stream(stream, () -> gpumem_memset(d, value, sizeof(value), count),
                  h -> gpumem_memset_async(d, value, sizeof(value), count, h))
    end
    return dst
end

# A copy's region in a memory side whose size is known must end within it: the last byte is
# `x + width` bytes into row `y + height - 1` of slice `z + depth - 1`, rows `pitch` bytes apart
# (0: `width`) and slices `rows` rows apart (0: `height`). An array's region the library checks.
function check_region(side, what, x, y, z, pitch, rows, width, height, depth)
    all(>=(0), (x, y, z, pitch, rows, width, height, depth)) ||
        throw(ArgumentError("the $what region has a negative offset, pitch or extent"))
    (width == 0 || height == 0 || depth == 0) && return nothing
    pitch = pitch == 0 ? width : pitch
    rows = rows == 0 ? height : rows
    last = ((Int128(z) + depth - 1) * rows + y + height - 1) * pitch + x + width
    last <= extent(side) ||
        throw(ArgumentError("the $what region ends $last bytes in, past the end of $(extent(side)) bytes"))
    return nothing
end

"""
    unsafe_copy2d!(dst, dpitch, src, spitch, width, height;
                   dst_x = 0, dst_y = 0, src_x = 0, src_y = 0, stream = nothing)

Copies `height` rows of `width` bytes. Each side is memory (a `Buffer`, `Ptr` or `Array`) whose
rows lie `pitch` bytes apart (0: `width`), or an [`ArrayBuffer`](@ref) (its pitch is ignored, and
its `x` and `width` are whole elements). The region starts `x` bytes into row `y` of each side;
a region that would run past the end of a `Buffer` or `Array` throws `ArgumentError`.
Synchronous, or queued on `stream` if given. Returns `dst`.
"""
function unsafe_copy2d!(dst, dpitch::Integer, src, spitch::Integer, width::Integer, height::Integer;
                        dst_x::Integer = 0, dst_y::Integer = 0, src_x::Integer = 0, src_y::Integer = 0,
                        stream = nothing)
    check_region(dst, "destination", dst_x, dst_y, 0, dpitch, 0, width, height, 1)
    check_region(src, "source", src_x, src_y, 0, spitch, 0, width, height, 1)
    GC.@preserve dst src begin
        desc = init_struct(gpumem_copy2d_init, gpumem_copy2d_t; dst = side_address(dst), dst_array = side_array(dst),
                           dst_x = dst_x, dst_y = dst_y, dst_pitch = dpitch, src = side_address(src),
                           src_array = side_array(src), src_x = src_x, src_y = src_y, src_pitch = spitch,
                           width = width, height = height)
        on_stream(stream, () -> gpumem_copy2d(desc), h -> gpumem_copy2d_async(desc, h))
    end
    return dst
end

"""
    unsafe_copy3d!(dst, dpitch, dheight, src, spitch, sheight, width, height, depth;
                   dst_x = 0, dst_y = 0, dst_z = 0, src_x = 0, src_y = 0, src_z = 0, stream = nothing)

Copies `depth` slices of `height` rows of `width` bytes, as [`unsafe_copy2d!`](@ref) does in
slices; `dheight` and `sheight` are the rows per slice of memory sides (0: `height`). Returns `dst`.
"""
function unsafe_copy3d!(dst, dpitch::Integer, dheight::Integer, src, spitch::Integer, sheight::Integer,
                        width::Integer, height::Integer, depth::Integer; dst_x::Integer = 0, dst_y::Integer = 0,
                        dst_z::Integer = 0, src_x::Integer = 0, src_y::Integer = 0, src_z::Integer = 0,
                        stream = nothing)
    check_region(dst, "destination", dst_x, dst_y, dst_z, dpitch, dheight, width, height, depth)
    check_region(src, "source", src_x, src_y, src_z, spitch, sheight, width, height, depth)
    GC.@preserve dst src begin
        desc = init_struct(gpumem_copy3d_init, gpumem_copy3d_t; dst = side_address(dst), dst_array = side_array(dst),
                           dst_x = dst_x, dst_y = dst_y, dst_z = dst_z, dst_pitch = dpitch, dst_height = dheight,
                           src = side_address(src), src_array = side_array(src), src_x = src_x, src_y = src_y,
                           src_z = src_z, src_pitch = spitch, src_height = sheight, width = width, height = height,
                           depth = depth)
        on_stream(stream, () -> gpumem_copy3d(desc), h -> gpumem_copy3d_async(desc, h))
    end
    return dst
end

"""
    staging_held()

Bytes of page-locked staging memory gpumem holds for copies with plain host memory (at most
`GPUMEM_COPY_STAGING_LIMIT`).
"""
function staging_held()
    out = Ref{Csize_t}(0)
    check(gpumem_copy_staging_get_held(out))
    return Int(out[])
end

"""
    staging_release()

Frees the staging buffers that no copy is using.
"""
staging_release() = check(gpumem_copy_staging_release())

## Pointers and managed memory

"""
    pointer_info(x)

Everything the driver knows about an address (a `Ptr`, `Buffer` or `Array`), as a
[`gpumem_pointer_info_t`](@ref): `memory_type` (`GPUMEM_MEMORY_*`), `device`, `is_managed`,
`is_pinned`, `host_ptr`, `device_ptr`, `base` and `size` of its allocation.
"""
function pointer_info(x)
    out = out_struct(gpumem_pointer_info_t)
    GC.@preserve x check(gpumem_pointer_get_info(address(x), out))
    return out[]
end

"""
    prefetch(x, location; bytes = nothing, stream = nothing)

Migrates managed memory to a device, or to the host with `GPUMEM_LOCATION_HOST`, ordered on
`stream` (`cuMemPrefetchAsync`). `bytes` defaults to the whole buffer; a bare `Ptr` needs it.
"""
function prefetch(x, location::Integer; bytes = nothing, stream = nothing)
    n = span(x, bytes)
    GC.@preserve x check(gpumem_managed_prefetch(address(x), n, location, stream_handle(stream)))
    return nothing
end

"""
    advise(x, advice, location = GPUMEM_LOCATION_HOST; bytes = nothing)

Advice about how managed memory is used (`cuMemAdvise`): one of `GPUMEM_ADVICE_*`, with a device
or `GPUMEM_LOCATION_HOST` for the advice that takes one.
"""
function advise(x, advice::Integer, location::Integer = GPUMEM_LOCATION_HOST; bytes = nothing)
    n = span(x, bytes)
    GC.@preserve x check(gpumem_managed_advise(address(x), n, advice, location))
    return nothing
end

"""
    range_info(x; bytes = nothing)

The advice and prefetch state of managed memory, as a [`gpumem_managed_range_info_t`](@ref).
"""
function range_info(x; bytes = nothing)
    n = span(x, bytes)
    out = out_struct(gpumem_managed_range_info_t)
    GC.@preserve x check(gpumem_managed_get_range_info(address(x), n, out))
    return out[]
end

## CUDA arrays

"""
    ArrayBuffer(format, width, height = 0, depth = 0; channels = 1, device = 0)

A CUDA array (`cuArray3DCreate`): formatted memory for textures, of `GPUMEM_FORMAT_*` elements
with 1, 2 or 4 channels; `height` 0 makes it 1D, `depth` 0 2D. A side of
[`unsafe_copy2d!`](@ref) and [`unsafe_copy3d!`](@ref). Destroyed by `close` or its finalizer.

Thread-safe: any thread, concurrently, including on the same handle; but `close` is per handle:
concurrent calls on different handles; one handle is serialized by the caller.
"""
mutable struct ArrayBuffer
    handle::Ptr{gpumem_array_t}
    destroyed::Bool

    function ArrayBuffer(handle::Ptr{gpumem_array_t})
        arr = new(handle, false)
        finalizer(finalize_array, arr)
        return arr
    end
end

function ArrayBuffer(format::Integer, width::Integer, height::Integer = 0, depth::Integer = 0; channels::Integer = 1,
                     device::Integer = 0)
    desc = init_struct(gpumem_array_desc_init, gpumem_array_desc_t; device = device, format = format,
                       channels = channels, width = width, height = height, depth = depth)
    out = Ref{Ptr{gpumem_array_t}}(C_NULL)
    check(gpumem_array_create(desc, out))
    return ArrayBuffer(out[])
end

Base.unsafe_convert(::Type{Ptr{gpumem_array_t}}, arr::ArrayBuffer) =
    arr.destroyed ? throw(ArgumentError("the CUDA array is destroyed")) : arr.handle

function finalize_array(arr::ArrayBuffer)
    arr.destroyed && return nothing
    arr.destroyed = true
    gpumem_array_destroy(arr.handle)
    return nothing
end

function Base.close(arr::ArrayBuffer)
    arr.destroyed && return nothing
    check(gpumem_array_destroy(arr))
    arr.destroyed = true
    return nothing
end

"""
    array_desc(arr::ArrayBuffer)

The shape and element type of a CUDA array as the driver reports them, as a
[`gpumem_array_desc_t`](@ref).
"""
function array_desc(arr::ArrayBuffer)
    out = out_struct(gpumem_array_desc_t)
    check(gpumem_array_get_desc(arr, out))
    return out[]
end

check_region(::ArrayBuffer, what, x, y, z, pitch, rows, width, height, depth) = nothing

side_address(::ArrayBuffer) = C_NULL
side_address(x) = address(x)
side_array(arr::ArrayBuffer) = Base.unsafe_convert(Ptr{gpumem_array_t}, arr)
side_array(x) = convert(Ptr{gpumem_array_t}, C_NULL)
