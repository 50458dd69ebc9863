# The package against the libgpumem that GPUMEM_LIBRARY names (else libgpumem.so.0 from the
# loader's search). The host tests need no GPU; the GPU tests are skipped, saying so, without a
# CUDA driver and device.

using GPUMem
# Names other packages use too are not exported; a user imports them like this.
using GPUMem: check, version, alloc, free, pool, stats, info, release, limit, limit!, register, unregister, snapshot,
              snapshot_json
using Test

const GPU = has_device()

GPU || @info "No CUDA driver or device: the GPU tests are skipped." GPUMem.library_path()

# `f()` must throw a GPUMemError with this status; returns it for more checks.
function gpumem_error(f, status)
    err = try
        f()
        nothing
    catch e
        e
    end
    @test err isa GPUMemError
    err isa GPUMemError && @test err.status == status
    return err
end

# The bytes of host-reachable memory, copied, and filling them; `buf` stays rooted while they are used.
read_bytes(buf::Buffer) = GC.@preserve buf copy(unsafe_wrap(Array, convert(Ptr{UInt8}, pointer(buf)), sizeof(buf)))
fill_bytes!(buf::Buffer, value::UInt8) =
    GC.@preserve buf fill!(unsafe_wrap(Array, convert(Ptr{UInt8}, pointer(buf)), sizeof(buf)), value)

# Helpers that leave nothing reachable behind them once they return.
@noinline drop_a_buffer(a) = (alloc(a, 64); nothing)
@noinline buffer_of_a_new_pool(upstream) = alloc(pool(upstream), 1000)

@testset "GPUMem" begin
    @testset "library" begin
        @test version() >= v"0.4.0"
        @test isfile(library_path())
        @test status_name(GPUMEM_ERROR_OUT_OF_MEMORY) == "GPUMEM_ERROR_OUT_OF_MEMORY"
        @test status_name(-1000) == "GPUMEM_UNKNOWN_STATUS"
        @test status_string(GPUMEM_ERROR_OUT_OF_MEMORY) == "out of memory"
        @test check(GPUMEM_SUCCESS) === nothing
        @test UInt(stream_handle(nothing)) == 0
        @test UInt(stream_handle(GPUMEM_STREAM_PER_THREAD)) == 2
        @test UInt(stream_handle(reinterpret(Ptr{Cvoid}, UInt(0x10)))) == 0x10
        # While the major version is 0, another minor version may have another ABI.
        @test GPUMem.compatible(v"0.4.0") && GPUMem.compatible(v"0.4.7")
        @test !GPUMem.compatible(v"0.3.9") && !GPUMem.compatible(v"0.5.0") && !GPUMem.compatible(v"1.4.0")
        @test GPUMem.compatible(v"1.3.0", v"1.2.0") && !GPUMem.compatible(v"2.0.0", v"1.2.0")
    end

    @testset "exports" begin
        for name in (:check, :version, :alloc, :free, :pool, :stats, :info, :release, :limit, :register, :snapshot)
            @test !(name in names(GPUMem))
        end
        for name in (:device_pool, :host_allocator, :add_hook, :callback_errors, :GPUMEM_ERROR_OUT_OF_MEMORY)
            @test name in names(GPUMem)
        end
    end

    @testset "errors" begin
        host = host_allocator()
        err = gpumem_error(() -> alloc(host, 0), GPUMEM_ERROR_INVALID_ARGUMENT)
        @test err.name == "GPUMEM_ERROR_INVALID_ARGUMENT"
        @test err.detail == "size is 0"
        @test err.cuda_result == 0
        @test sprint(showerror, err) == "GPUMemError: GPUMEM_ERROR_INVALID_ARGUMENT: size is 0"
        err = gpumem_error(() -> host_allocator(alignment = 3), GPUMEM_ERROR_INVALID_ARGUMENT)
        @test occursin("alignment 3 is not a power of two", err.detail)
        close(host)
        @test !isopen(host)
        @test_throws ArgumentError alloc(host, 64)
        close(host)  # again: nothing
    end

    @testset "tenants" begin
        p = pool(host_allocator())
        t = tenant(p; name = "julia", limit = 1 << 20)
        u = tenant(p; name = "other")
        a = alloc(t, 512 << 10)
        at = pointer(a)
        gpumem_error(() -> alloc(t, 600 << 10), GPUMEM_ERROR_OUT_OF_MEMORY)
        free(a)
        b = alloc(u, 512 << 10)
        @test pointer(b) == at # what one tenant freed serves the other at once
        i = tenant_info(t)
        @test (i.limit, i.refused, i.bytes_in_use) == (1 << 20, 1, 0)
        tenant_limits!(t, 0)
        @test tenant_info(t).limit == 0
        free(b)
    end

    @testset "host pool" begin
        host = host_allocator()
        p = pool(host)
        @test GPUMem.device(p) == -1
        @test GPUMem.device(host) == -1

        buf = alloc(p, 1000)
        @test sizeof(buf) == 1000
        @test pointer(buf) != C_NULL
        fill_bytes!(buf, 0x2a)
        @test all(==(0x2a), read_bytes(buf))
        s = stats(p)
        @test (s.bytes_in_use, s.peak_bytes_in_use, s.bytes_requested, s.bytes_reserved, s.peak_bytes_reserved) ==
              (1024, 1024, 1000, 1024, 1024)
        @test (s.alloc_count, s.free_count, s.upstream_alloc_count, s.upstream_free_count, s.oom_count) ==
              (1, 0, 1, 0, 0)
        i = info(p)
        @test (i.used_bytes, i.free_bytes, i.total_bytes, i.free_block_count, i.limit, i.arena_count,
               i.pending_bytes, i.address_bytes) == (1024, 0, 1024, 0, 0, 1, 0, 1024)
        @test stats(host).bytes_in_use == 1024

        # The pool relies on its upstream, and the buffer on the pool.
        err = gpumem_error(() -> close(host), GPUMEM_ERROR_BUSY)
        @test occursin("upstream of a pool", err.detail)
        err = gpumem_error(() -> close(p), GPUMEM_ERROR_BUSY)
        @test occursin("1 live allocation", err.detail)

        free(buf)
        @test buf.freed
        free(buf)  # again: nothing
        @test stats(p).free_count == 1
        i = info(p)
        @test (i.used_bytes, i.free_bytes, i.total_bytes, i.free_block_count) == (0, 1024, 1024, 1)

        # Cached memory is handed out again.
        earlier = alloc(p, 4096)
        address = pointer(earlier)
        free(earlier)
        later = alloc(p, 4000)
        @test pointer(later) == address
        @test stats(p).upstream_alloc_count == 2  # the 1,024-byte block, then this one
        free(later)

        release(p)
        i = info(p)
        @test (i.total_bytes, i.free_bytes, i.address_bytes) == (0, 0, 0)
        @test stats(host).bytes_in_use == 0

        reset_peaks!(p)
        @test stats(p).peak_bytes_in_use == 0
        close(p)
        close(host)
    end

    @testset "limits and reclaim" begin
        host = host_allocator()
        p = pool(host; limit = 4096)
        @test limit(p) == 4096
        held = alloc(p, 4096)
        err = gpumem_error(() -> alloc(p, 8192), GPUMEM_ERROR_OUT_OF_MEMORY)
        @test occursin("8192", replace(err.detail, "," => ""))
        @test stats(p).oom_count == 1

        # Out of memory within the limit: the reclaim callbacks may free something, and the pool retries.
        calls = Tuple{Int,Int}[]
        reclaim = add_reclaim() do device, bytes
            push!(calls, (device, bytes))
            free(held)
        end
        try
            again = alloc(p, 4096)
            @test calls == [(-1, 4096)]
            @test held.freed
            free(again)
        finally
            remove_reclaim(reclaim)
        end
        @test isempty(callback_errors(reclaim))
        remove_reclaim(reclaim)  # again: nothing

        # What a reclaim callback throws is kept; removed, it is no longer kept alive.
        registered = length(GPUMem.CALLBACKS)
        failing = add_reclaim((device, bytes) -> error("reclaim failed"))
        @test length(GPUMem.CALLBACKS) == registered + 1
        taken = alloc(p, 4096)
        gpumem_error(() -> alloc(p, 4096), GPUMEM_ERROR_OUT_OF_MEMORY)
        @test length(callback_errors(failing)) == 1
        @test dropped_callback_errors(failing) == 0
        remove_reclaim(failing)
        @test length(GPUMem.CALLBACKS) == registered
        free(taken)

        limit!(p, 0)
        @test limit(p) == 0
        err = gpumem_error(() -> limit_fraction!(p, 0.5), GPUMEM_ERROR_INVALID_ARGUMENT)
        @test occursin("this pool holds host memory", err.detail)
        close(pool(host; limit = 1 << 20))
        close(p)
        close(host)
    end

    @testset "streams" begin
        host = host_allocator()
        p = pool(host)
        for reuse in (GPUMEM_STREAM_REUSE_NEVER, GPUMEM_STREAM_REUSE_FENCE, GPUMEM_STREAM_REUSE_HOST_WAIT)
            stream_reuse!(p, reuse)
        end
        err = gpumem_error(() -> stream_reuse!(p, 7), GPUMEM_ERROR_INVALID_ARGUMENT)
        @test occursin("stream reuse 7 is not one of", err.detail)

        buf = alloc(p, 64; stream = 0x10)
        @test UInt(buf.stream) == 0x10
        record_stream(p, buf, 0x20)  # host memory: only the pointer is checked
        gpumem_error(() -> record_stream(p, buf, GPUMEM_STREAM_PER_THREAD), GPUMEM_ERROR_INVALID_ARGUMENT)
        @test info(p).arena_count == 1
        free(buf)  # on its own stream, 0x10
        # A freed buffer, or another pool's, is refused before the library could fence a block
        # that now belongs to someone else.
        @test_throws ArgumentError record_stream(p, buf, 0x20)
        other = pool(host)
        elsewhere = alloc(other, 64)
        @test_throws ArgumentError record_stream(p, elsewhere, 0x20)
        free(elsewhere)
        close(other)
        release(p; stream = 0x10, all_streams = false)
        @test info(p).total_bytes == 0
        close(p)
        close(host)
    end

    @testset "snapshots" begin
        host = host_allocator()
        p = pool(host)
        a = alloc(p, 512)
        b = alloc(p, 100)
        blocks = snapshot(p)
        @test length(blocks) == 2
        by_address = Dict(block.address => block for block in blocks)
        @test by_address[pointer(a)].size == 512
        @test by_address[pointer(b)].requested == 100
        for block in blocks
            @test block.state == GPUMEM_BLOCK_IN_USE
            @test UInt(block.stream) == 0
            @test block.segment == block.address
            @test block.segment_size == block.size
        end
        free(a)
        states = Dict(block.address => block.state for block in snapshot(p))
        @test states[pointer(a)] == GPUMEM_BLOCK_FREE

        path = tempname()
        snapshot_json(p, path)
        text = read(path, String)
        rm(path)
        @test occursin("gpumem-pool-snapshot", text)
        err = gpumem_error(() -> snapshot_json(p, "/nonexistent/folder/snapshot.json"), GPUMEM_ERROR_IO)
        @test occursin("cannot create the snapshot file /nonexistent/folder/snapshot.json", err.detail)
        free(b)
        close(p)
        close(host)
    end

    @testset "hooks" begin
        host = host_allocator()
        p = pool(host)
        seen = GPUMem.gpumem_hook_info_t[]
        registered = length(GPUMem.CALLBACKS)
        hook = add_hook(event -> push!(seen, event), p, GPUMEM_HOOK_MALLOC_POST | GPUMEM_HOOK_FREE_POST)
        @test length(GPUMem.CALLBACKS) == registered + 1
        buf = alloc(p, 100)
        free(buf)
        @test [event.event for event in seen] == [GPUMEM_HOOK_MALLOC_POST, GPUMEM_HOOK_FREE_POST]
        for event in seen
            @test (event.device, event.size, event.mem_size, event.status) == (-1, 100, 512, GPUMEM_SUCCESS)
            @test event.ptr == pointer(buf)
            @test event.allocator == p.handle
        end
        remove_hook(hook)
        @test length(GPUMem.CALLBACKS) == registered
        free(alloc(p, 100))
        @test length(seen) == 2
        remove_hook(hook)  # again: nothing

        # A hook may remove itself: that call finishes, the hook never runs again and is not kept.
        own = Ref{Any}(nothing)
        self_calls = Ref(0)
        own[] = add_hook(_ -> (self_calls[] += 1; remove_hook(own[])), p, GPUMEM_HOOK_MALLOC_PRE)
        @test length(GPUMem.CALLBACKS) == registered + 1
        free(alloc(p, 64))
        free(alloc(p, 64))
        @test self_calls[] == 1
        @test own[].id == 0
        @test length(GPUMem.CALLBACKS) == registered
        @test isempty(callback_errors(p))

        # A hook the library refuses is not kept.
        gpumem_error(() -> add_hook(_ -> nothing, p, 0), GPUMEM_ERROR_INVALID_ARGUMENT)
        @test length(GPUMem.CALLBACKS) == registered

        # The library holds the hook, not the caller: it runs, unheld, through collections.
        calls = Ref(0)
        add_hook(_ -> (calls[] += 1), p, GPUMEM_HOOK_MALLOC_POST)
        GC.gc()
        GC.gc()
        free(alloc(p, 64))
        @test calls[] == 1

        # What a hook throws cannot unwind through C: the call goes on, and the error is kept, up
        # to a limit; the rest are counted.
        failing = add_hook(_ -> error("hook failed"), p, GPUMEM_HOOK_MALLOC_PRE)
        buf = alloc(p, 64)
        errors = callback_errors(p)
        @test length(errors) == 1
        @test errors[1] isa ErrorException
        free(buf)
        for _ in 1:GPUMem.MAX_KEPT_ERRORS
            free(alloc(p, 64))
        end
        @test length(callback_errors(p)) == GPUMem.MAX_KEPT_ERRORS
        @test dropped_callback_errors(p) == 1
        remove_hook(failing)

        # The allocator's hooks and errors go with it.
        close(p)
        @test length(GPUMem.CALLBACKS) == registered
        @test isempty(callback_errors(p))
        close(host)
    end

    @testset "an allocator made of Julia functions" begin
        blocks = Dict{Ptr{Cvoid},Vector{UInt8}}()
        failing = Ref(false)
        function take(bytes, device, stream)
            failing[] && error("no more")
            block = Vector{UInt8}(undef, bytes)
            blocks[pointer(block)] = block
            return pointer(block)
        end
        give_back(ptr, bytes, device, stream) = (delete!(blocks, ptr); nothing)
        upstream = function_allocator(take, give_back)
        @test GPUMem.device(upstream) == -1
        p = pool(upstream)
        buf = alloc(p, 1000)
        @test length(blocks) == 1
        @test haskey(blocks, pointer(buf))
        free(buf)
        release(p)
        @test isempty(blocks)

        failing[] = true
        err = gpumem_error(() -> alloc(p, 1000), GPUMEM_ERROR_INTERNAL)
        @test occursin("the caller's alloc function returned GPUMEM_ERROR_INTERNAL", err.detail)
        @test callback_errors(upstream)[1] isa ErrorException
        close(p)
        registered = length(GPUMem.CALLBACKS)
        close(upstream)
        @test length(GPUMem.CALLBACKS) == registered - 1
    end

    @testset "lifetimes" begin
        host = host_allocator()
        p = pool(host)
        drop_a_buffer(p)
        GC.gc()
        GC.gc()
        @test stats(p).free_count == 1
        @test info(p).used_bytes == 0
        close(p)

        # The buffer keeps its pool alive, and the pool its upstream; once the buffer is gone,
        # whichever finalizer runs last destroys the pool.
        buf = buffer_of_a_new_pool(host)
        GC.gc()
        @test !buf.freed
        @test stats(host).bytes_in_use == 1024
        buf = nothing
        GC.gc()
        GC.gc()
        @test stats(host).bytes_in_use == 0
        close(host)  # not refused: no pool relies on it any more
        @test !isopen(host)

        # Closing with force frees live buffers with the allocator; they cannot be used, and their
        # free does nothing.
        host = host_allocator()
        buf = alloc(host, 64)
        close(host; force = true)
        @test !isopen(host)
        @test_throws ArgumentError unsafe_copyto!(zeros(UInt8, 64), buf, 64)
        free(buf)
        @test buf.freed

        # Memory from elsewhere can be a side of a copy, but is never freed.
        data = zeros(UInt8, 16)
        borrowed = Buffer(pointer(data), sizeof(data))
        @test_throws ArgumentError free(borrowed)
        @test_throws ArgumentError unsafe_copyto!(borrowed, zeros(UInt8, 8), 16)
        @test_throws ArgumentError unsafe_copyto!(zeros(UInt8, 8), borrowed, 16)
    end

    @testset "extents" begin
        data = zeros(UInt8, 16)
        GC.@preserve data begin
            borrowed = Buffer(pointer(data), sizeof(data))
            # A count is of the elements of a typed side: 5 Float32s are 20 bytes.
            @test_throws ArgumentError unsafe_copyto!(borrowed, zeros(Float32, 8), 5)
            @test_throws ArgumentError unsafe_copyto!(zeros(Float64, 4), borrowed, 3)
            # 3 rows of 4 bytes, 4 apart, take 12 bytes; 2 more rows down, 20.
            @test_throws ArgumentError unsafe_copy2d!(zeros(UInt8, 10), 4, borrowed, 4, 4, 3)
            @test_throws ArgumentError unsafe_copy2d!(borrowed, 4, zeros(UInt8, 16), 4, 4, 3; dst_y = 2)
            # A pitch of 0 is the width: 4 rows of 4 bytes from byte 1 end at 17.
            @test_throws ArgumentError unsafe_copy2d!(zeros(UInt8, 64), 0, borrowed, 0, 4, 4; src_x = 1)
            # The second of 2 slices of 2 rows of 4 bytes ends at 16; from slice 1, at 24.
            @test_throws ArgumentError unsafe_copy3d!(borrowed, 4, 2, zeros(UInt8, 64), 4, 2, 4, 2, 2; dst_z = 1)
            @test_throws ArgumentError unsafe_copy3d!(zeros(UInt8, 64), 4, 0, borrowed, 4, 0, 4, 3, 2)
            @test_throws ArgumentError unsafe_copy2d!(borrowed, 4, zeros(UInt8, 16), 4, -1, 2)
        end
        @test_throws ArgumentError GPUMem.with_fields(GPUMem.gpumem_pool_params_t(0, C_NULL, 0, 0.0); limits = 1)
    end

    @testset "traces" begin
        host = host_allocator()
        p = pool(host)
        path = tempname()
        trace_start(p, path) do
            free(alloc(p, 1000; stream = 0x10); stream = 0x10)
        end
        t = read_trace(path)
        rm(path)
        @test (t.device, t.kind) == (-1, "pool")
        @test [r.event for r in t.records] == [GPUMEM_TRACE_UPSTREAM_ALLOC, GPUMEM_TRACE_ALLOC, GPUMEM_TRACE_FREE]
        @test (t.records[1].size, t.records[2].size, t.records[2].mem_size) == (1024, 1000, 1024)
        @test all(r -> r.stream == 0x10, t.records)
        gpumem_error(() -> read_trace("/nonexistent/trace"), GPUMEM_ERROR_IO)
        close(p)
        close(host)
    end

    @testset "pinning (host side)" begin
        data = zeros(UInt8, 1 << 16)
        @test pin_state(data) == GPUMEM_PIN_NONE
        @test pin_state(UInt8[]) == GPUMEM_PIN_NONE
        budget = pin_stats().cache_budget
        pin_cache_budget!(1 << 20)
        @test pin_stats().cache_budget == 1 << 20
        pin_cache_budget!(budget)
        @test pin_stats().cache_budget == budget
        pin_cache_flush()
        pin_forget(data)
        gpumem_error(() -> unpin(data), GPUMEM_ERROR_NOT_OWNED)
        staging_release()
        @test staging_held() == 0
    end

    @testset "GPU" begin
        if !GPU
            @test_skip "a CUDA device" == "present"
        else
            @testset "devices" begin
                @test device_count() >= 1
                @test driver_version() > 0
                d = device_info(0)
                @test !isempty(d.name)
                @test d.total_memory > 0
                m = memory_info(0)
                @test 0 < m.free <= m.total
            end

            @testset "copies through the device pool" begin
                p = device_pool(0)
                @test !p.owned
                @test GPUMem.device(p) == 0
                src = collect(UInt8, 0:255)
                dst = zeros(UInt8, 256)
                buf = alloc(p, 256)
                unsafe_copyto!(buf, src, 256)
                unsafe_copyto!(dst, buf, 256)
                @test dst == src
                other = alloc(256)  # the default allocator of device 0
                unsafe_copyto!(other, buf, 256; stream = nothing)
                memset!(buf, 0x07, 256)
                unsafe_copyto!(dst, buf, 256)
                @test all(==(0x07), dst)
                unsafe_copyto!(dst, other, 256)
                @test dst == src
                memset!(buf, UInt32(0x01020304), 64; stream = GPUMEM_STREAM_LEGACY)
                unsafe_copyto!(dst, buf, 256)
                @test dst[1:4] == [0x04, 0x03, 0x02, 0x01]
                info_ = pointer_info(buf)
                @test info_.memory_type == GPUMEM_MEMORY_DEVICE
                @test info_.device == 0
                free(buf)
                free(other)

                # With a typed side, the count is of its elements.
                floats = rand(Float32, 64)
                back = zeros(Float32, 64)
                buf = alloc(p, sizeof(floats))
                unsafe_copyto!(buf, floats, length(floats))
                unsafe_copyto!(back, buf, length(back))
                @test back == floats
                free(buf)

                # A borrowed pool's hook outlives the wrapper it was added through, and its errors
                # are found through any wrapper of the pool. (Garbage first: its frees would run it.)
                GC.gc()
                failing = add_hook(_ -> error("hook failed"), device_pool(0), GPUMEM_HOOK_FREE_PRE)
                GC.gc()
                free(alloc(device_pool(0), 64))
                @test length(callback_errors(device_pool(0))) == 1
                remove_hook(failing)
            end

            @testset "2D and 3D copies" begin
                width, height, depth = 12, 5, 3
                src = rand(UInt8, width * height * depth)
                dst = zeros(UInt8, width * height * depth)
                dev = device_alloc(32 * height * depth)
                unsafe_copy2d!(dev, 32, src, width, width, height)
                unsafe_copy2d!(dst, width, dev, 32, width, height)
                @test dst[1:(width * height)] == src[1:(width * height)]
                unsafe_copy3d!(dev, 32, height, src, width, height, width, height, depth)
                fill!(dst, 0)
                unsafe_copy3d!(dst, width, height, dev, 32, height, width, height, depth)
                @test dst == src
                free(dev)

                arr = ArrayBuffer(GPUMEM_FORMAT_U8, width, height)
                desc = array_desc(arr)
                @test (desc.width, desc.height, desc.format) == (width, height, GPUMEM_FORMAT_U8)
                unsafe_copy2d!(arr, 0, src, width, width, height)
                fill!(dst, 0)
                unsafe_copy2d!(dst, width, arr, 0, width, height)
                @test dst[1:(width * height)] == src[1:(width * height)]
                close(arr)
            end

            @testset "raw kinds" begin
                data = rand(UInt8, 4096)
                out = zeros(UInt8, 4096)

                pinned = host_alloc(4096; flags = GPUMEM_HOST_ALLOC_DEVICEMAP)
                @test pointer_info(pinned).is_pinned
                @test device_pointer(pinned) != C_NULL
                unsafe_copyto!(pinned, data, 4096)
                @test read_bytes(pinned) == data
                free(pinned)

                async = device_alloc_async(4096; stream = GPUMEM_STREAM_LEGACY)
                unsafe_copyto!(async, data, 4096; stream = GPUMEM_STREAM_LEGACY)
                unsafe_copyto!(out, async, 4096)
                @test out == data
                free(async)

                managed = managed_alloc(4096)
                unsafe_copyto!(managed, data, 4096)
                @test read_bytes(managed) == data
                advise(managed, GPUMEM_ADVICE_SET_READ_MOSTLY)
                @test range_info(managed).read_mostly
                prefetch(managed, 0)
                @test pointer_info(managed).is_managed
                free(managed)

                host_data = zeros(UInt8, 1 << 20)
                registration = register(host_data)
                @test pointer_info(host_data).is_pinned
                unregister(registration)
                @test registration.freed
            end

            @testset "allocators of every kind" begin
                data = rand(UInt8, 1 << 20)
                out = zeros(UInt8, 1 << 20)
                for make in (() -> device_allocator(0), () -> device_async_allocator(0), () -> managed_allocator(0),
                             () -> pinned_allocator(), () -> vm_allocator(0), () -> cuda_pool_allocator(0))
                    upstream = make()
                    p = pool(upstream)
                    buf = alloc(p, length(data))
                    unsafe_copyto!(buf, data, length(data))
                    fill!(out, 0)
                    unsafe_copyto!(out, buf, length(data))
                    @test out == data
                    free(buf)
                    release(p)
                    close(p)
                    close(upstream)
                end
                a = cuda_pool_allocator(0; source = GPUMEM_CUDA_POOL_NEW)
                @test cuda_pool(a) != C_NULL
                buf = alloc(a, 1 << 20)
                @test cuda_pool_info(a).used >= 1 << 20
                free(buf)
                cuda_pool_trim!(a)
                cuda_pool_reset_peaks!(a)
                close(a)
                v = vm_allocator(0)
                @test vm_info(v).map_unit > 0
                close(v)
            end

            @testset "pinning" begin
                data = rand(UInt8, 1 << 20)
                buf = alloc(1 << 20)
                pin(data) do pinned
                    @test pin_state(pinned) == GPUMEM_PIN_FULL
                    unsafe_copyto!(buf, pinned, sizeof(pinned))
                end
                @test pin_state(data) == GPUMEM_PIN_NONE
                out = zeros(UInt8, 1 << 20)
                unsafe_copyto!(out, buf, sizeof(out))
                @test out == data
                @test pin_stats().pins >= 1
                pin_forget(data)
                free(buf)
            end

            @testset "defaults" begin
                mine = pool(device_allocator(0))
                previous = default_allocator(0)
                set_default_allocator!(0, mine)
                @test default_allocator(0) === mine
                buf = alloc(64)
                @test buf.allocator === mine
                free(buf)
                set_default_allocator!(0, nothing)
                @test default_allocator(0).handle == previous.handle
                close(mine)
            end
        end
    end
end
