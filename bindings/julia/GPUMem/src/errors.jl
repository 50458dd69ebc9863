# Errors: every failing gpumem call becomes a GPUMemError; a library that cannot be used, a LibraryError.

"""
    GPUMemError(status, name, detail, cuda_result)

A gpumem call failed. `status` is the `Int32` status it returned (one of the `GPUMEM_ERROR_*`
constants), `name` its name (`"GPUMEM_ERROR_OUT_OF_MEMORY"`), `detail` what
`gpumem_last_error_detail()` said about this failure, with the numbers that matter, and
`cuda_result` the `CUresult` behind it (0 where gpumem refused the call itself).
"""
struct GPUMemError <: Exception
    status::Int32
    name::String
    detail::String
    cuda_result::Int32
end

function Base.showerror(io::IO, e::GPUMemError)
    print(io, "GPUMemError: ", e.name)
    isempty(e.detail) || print(io, ": ", e.detail)
    e.cuda_result == 0 || print(io, " (CUDA error ", e.cuda_result, ")")
    return nothing
end

"""
    LibraryError(msg)

libgpumem cannot be used: it was not found, is not libgpumem, is not a version this package can use, or
lacks a function. `msg` says what was tried.
"""
struct LibraryError <: Exception
    msg::String
end

Base.showerror(io::IO, e::LibraryError) = print(io, "LibraryError: ", e.msg)

"""
    check(status)

Returns `nothing` for `GPUMEM_SUCCESS`; for any other status throws the [`GPUMemError`](@ref)
that describes it. Call it right after the call that returned `status`, on the same task with no
yield in between: the detail is kept per thread, until that thread's next failing call.
"""
@inline function check(status::Integer)
    status == GPUMEM_SUCCESS && return nothing
    throw(last_error(Int32(status)))
end

@noinline function last_error(status::Int32)
    # A collection here could run a finalizer whose gpumem call fails on this thread, replacing the
    # text the detail pointer refers to before it is copied.
    gc_was_enabled = GC.enable(false)
    try
        detail = unsafe_string(gpumem_last_error_detail())
        cuda_result = gpumem_last_cuda_result()
        return GPUMemError(status, unsafe_string(gpumem_status_name(status)), detail, cuda_result)
    finally
        GC.enable(gc_was_enabled)
    end
end
