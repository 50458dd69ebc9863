# Recording what an allocator does, and reading the recordings back (trace.h, docs/traces.md).

"""
    Trace

A recording of an allocator's events to a file, from [`trace_start`](@ref); `close` (or
[`trace_stop`](@ref), or its finalizer) writes what is left and closes the file.

Per handle: concurrent calls on different handles; one handle is serialized by the caller. The
traced allocator stays thread-safe: any thread, concurrently, including on the same handle.
"""
mutable struct Trace
    handle::Ptr{gpumem_trace_t}
    allocator::Allocator
    path::String
    stopped::Bool

    function Trace(handle::Ptr{gpumem_trace_t}, allocator::Allocator, path::String)
        trace = new(handle, allocator, path, false)
        finalizer(finalize_trace, trace)
        return trace
    end
end

Base.show(io::IO, t::Trace) = print(io, "GPUMem.Trace(", repr(t.path), t.stopped ? ", stopped)" : ")")

function finalize_trace(t::Trace)
    t.stopped && return nothing
    t.stopped = true
    gpumem_trace_stop(t.handle)
    return nothing
end

"""
    trace_start(a::Allocator, path)

Starts recording every allocation, free and failed allocation of `a` (and, for a pool, the blocks
it takes from and gives back to its upstream) to the file `path`, created or replaced. One
recording per allocator at a time. Returns a [`Trace`](@ref).
"""
function trace_start(a::Allocator, path::AbstractString)
    ensure_open(a)
    out = Ref{Ptr{gpumem_trace_t}}(C_NULL)
    check(gpumem_trace_start(a, path, 0, out))
    return Trace(out[], a, String(path))
end

"""
    trace_start(f, a::Allocator, path)

Records `a` to `path` while `f()` runs, then stops; returns what `f` returned.
"""
function trace_start(f::Function, a::Allocator, path::AbstractString)
    t = trace_start(a, path)
    try
        return f()
    finally
        close(t)
    end
end

"""
    trace_stop(t::Trace)

Stops a recording and completes its file; stopping it again does nothing. Throws `GPUMemError`
with `GPUMEM_ERROR_IO` if writing failed at some point (the file then holds the records before
the failure).
"""
function trace_stop(t::Trace)
    t.stopped && return nothing
    t.stopped = true
    return check(gpumem_trace_stop(t.handle))
end

Base.close(t::Trace) = trace_stop(t)

"""
    read_trace(path)

Reads a whole trace file: `(version, device, start_unix_ns, kind, records)`, where `kind` names the
traced allocator's kind and `records` is a `Vector` of [`gpumem_trace_record_t`](@ref) (`event`
(`GPUMEM_TRACE_*`), `thread`, `time_ns`, `stream`, `address`, `size`, `mem_size`, `status`).
"""
function read_trace(path::AbstractString)
    out = Ref{Ptr{gpumem_trace_reader_t}}(C_NULL)
    check(gpumem_trace_reader_open(path, out))
    reader = out[]
    try
        header = out_struct(gpumem_trace_header_t)
        check(gpumem_trace_reader_get_header(reader, header))
        records = gpumem_trace_record_t[]
        has_record = Ref{Bool}(false)
        while true
            record = out_struct(gpumem_trace_record_t)
            check(gpumem_trace_reader_next(reader, record, has_record))
            has_record[] || break
            push!(records, record[])
        end
        h = header[]
        return (version = Int(h.version), device = Int(h.device), start_unix_ns = h.start_unix_ns,
                kind = c_string(h.kind), records = records)
    finally
        gpumem_trace_reader_close(reader)
    end
end
