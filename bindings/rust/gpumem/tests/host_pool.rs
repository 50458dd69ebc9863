//! A pool over plain host memory, which needs no GPU: bytes, statistics, limits, snapshots and
//! lifetimes.

mod common;

use common::RustHeap;
use gpumem::{Allocator, AllocatorStats, BlockState, Pool, PoolInfo, PoolParams, Status, Stream, StreamReuse};
use std::sync::atomic::Ordering;

fn host_pool() -> (Allocator, Pool) {
    let host = Allocator::host(0).unwrap();
    let pool = Pool::new(&host, &PoolParams::new()).unwrap();
    (host, pool)
}

fn stats(
    in_use: u64,
    requested: u64,
    reserved: u64,
    allocs: u64,
    frees: u64,
    upstream_allocs: u64,
    upstream_frees: u64,
) -> AllocatorStats {
    let mut s = AllocatorStats::default();
    s.bytes_in_use = in_use;
    s.bytes_requested = requested;
    s.bytes_reserved = reserved;
    s.alloc_count = allocs;
    s.free_count = frees;
    s.upstream_alloc_count = upstream_allocs;
    s.upstream_free_count = upstream_frees;
    s
}

#[test]
fn bytes_statistics_and_info_round_trip() {
    let (host, pool) = host_pool();
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 256) as u8).collect();
    let mut b = pool.alloc(1000).unwrap();
    assert_eq!((b.size(), b.stream()), (1000, Stream::DEFAULT));
    assert_eq!(b.allocator(), pool.as_allocator());
    // SAFETY: host memory, used by nothing else.
    unsafe { b.as_mut_slice() }.copy_from_slice(&data);
    // SAFETY: as above.
    assert_eq!(unsafe { b.as_slice() }, &data[..]);

    let mut expected = stats(1024, 1000, 1024, 1, 0, 1, 0);
    expected.peak_bytes_in_use = 1024;
    expected.peak_bytes_reserved = 1024;
    assert_eq!(pool.stats().unwrap(), expected);
    let mut info = PoolInfo::default();
    info.used_bytes = 1024;
    info.total_bytes = 1024;
    info.arena_count = 1;
    info.address_bytes = 1024;
    assert_eq!(pool.info().unwrap(), info);
    assert_eq!(host.stats().unwrap().bytes_in_use, 1024);

    b.free().unwrap();
    let info = pool.info().unwrap();
    assert_eq!(
        (
            info.used_bytes,
            info.free_bytes,
            info.total_bytes,
            info.free_block_count
        ),
        (0, 1024, 1024, 1)
    );

    pool.release_all().unwrap();
    let info = pool.info().unwrap();
    assert_eq!((info.total_bytes, info.free_bytes, info.address_bytes), (0, 0, 0));
    let s = pool.stats().unwrap();
    assert_eq!((s.free_count, s.upstream_free_count, s.bytes_reserved), (1, 1, 0));
    assert_eq!(host.stats().unwrap().bytes_in_use, 0);
}

#[test]
fn cached_memory_is_reused() {
    let (_host, pool) = host_pool();
    let first = pool.alloc(4096).unwrap();
    let ptr = first.as_ptr();
    drop(first);
    let second = pool.alloc(4000).unwrap();
    assert_eq!(second.as_ptr(), ptr);
    assert_eq!(pool.stats().unwrap().upstream_alloc_count, 1);
}

#[test]
fn each_stream_has_its_arena_and_release_by_stream() {
    let (_host, pool) = host_pool();
    let a = pool.alloc_on(512, Stream::DEFAULT).unwrap();
    let b = pool.alloc_on(512, Stream::PER_THREAD).unwrap();
    // The null stream and LEGACY name the same stream, and share its arena.
    let c = pool.alloc_on(512, Stream::LEGACY).unwrap();
    assert_eq!(b.stream(), Stream::PER_THREAD);
    assert_eq!(pool.info().unwrap().arena_count, 2);
    drop((a, b, c));
    pool.release_stream(Stream::PER_THREAD).unwrap();
    assert_eq!(pool.info().unwrap().total_bytes, 1024);
    pool.release_all().unwrap();
    assert_eq!(pool.info().unwrap().total_bytes, 0);
}

#[test]
fn limits_and_peaks() {
    let (host, pool) = host_pool();
    pool.alloc(2048).unwrap().free().unwrap();
    assert_eq!(pool.stats().unwrap().peak_bytes_in_use, 2048);
    pool.reset_peaks().unwrap();
    assert_eq!(pool.stats().unwrap().peak_bytes_in_use, 0);
    pool.release_all().unwrap();

    assert_eq!(pool.limit().unwrap(), 0);
    pool.set_limit(4096).unwrap();
    assert_eq!(pool.limit().unwrap(), 4096);
    let e = pool.alloc(8192).unwrap_err();
    assert_eq!(e.status, Status::OUT_OF_MEMORY);
    assert!(e.detail.replace(',', "").contains("8192"), "{}", e.detail);
    assert!(e.to_string().starts_with("GPUMEM_ERROR_OUT_OF_MEMORY: "), "{}", e);
    assert_eq!(pool.stats().unwrap().oom_count, 1);

    let limited = Pool::new(&host, &PoolParams::new().limit(1 << 20)).unwrap();
    assert_eq!(limited.limit().unwrap(), 1 << 20);
    let e = Pool::new(&host, &PoolParams::new().limit_fraction(0.5)).unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT, "a fraction of host memory: {}", e);
}

#[test]
fn snapshot_lists_each_block() {
    let (_host, pool) = host_pool();
    let a = pool.alloc(512).unwrap();
    let b = pool.alloc(100).unwrap();
    let blocks = pool.snapshot().unwrap();
    assert_eq!(blocks.len(), 2);
    let of = |buffer: &gpumem::Buffer| *blocks.iter().find(|x| x.address == buffer.as_ptr() as usize).unwrap();
    assert_eq!(of(&a).size, 512);
    assert_eq!(of(&b).requested, 100);
    for block in &blocks {
        assert_eq!(block.state, BlockState::IN_USE);
        assert_eq!(block.stream, Stream::DEFAULT.addr());
        assert_eq!(block.segment, block.address);
        assert_eq!(block.segment_size, block.size);
    }
    let address = a.as_ptr() as usize;
    drop(a);
    let blocks = pool.snapshot().unwrap();
    assert_eq!(
        blocks.iter().find(|x| x.address == address).unwrap().state,
        BlockState::FREE
    );
    drop(b);

    let path = common::temp_path("snapshot.json");
    pool.snapshot_json(&path).unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(json.contains("\"format\": \"gpumem-pool-snapshot\""), "{}", json);
    assert!(json.contains("\"state\": \"free\""), "{}", json);
}

#[test]
fn record_stream_and_stream_reuse() {
    let (host, pool) = host_pool();
    let b = pool.alloc(64).unwrap();
    pool.record_stream(&b, Stream::LEGACY).unwrap();
    let e = pool.record_stream(&b, Stream::PER_THREAD).unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT);
    let other = Pool::new(&host, &PoolParams::new()).unwrap();
    let e = other.record_stream(&b, Stream::LEGACY).unwrap_err();
    assert_eq!(e.status, Status::NOT_OWNED);

    pool.set_stream_reuse(StreamReuse::NEVER).unwrap();
    pool.set_stream_reuse(StreamReuse::HOST_WAIT).unwrap();
    let e = pool.set_stream_reuse(StreamReuse(7)).unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT);
}

#[test]
fn only_a_pool_converts_to_a_pool() {
    let (host, pool) = host_pool();
    let e = Pool::try_from(host.clone()).unwrap_err();
    assert_eq!(e.status, Status::INVALID_HANDLE);
    let again = Pool::try_from(Allocator::from(pool.clone())).unwrap();
    assert_eq!(again, pool);
}

#[test]
fn a_buffer_keeps_its_pool_and_the_pool_its_upstream_alive() {
    let (heap, dropped) = RustHeap::new();
    let upstream = Allocator::from_functions(-1, heap).unwrap();
    let pool = Pool::new(&upstream, &PoolParams::new()).unwrap();
    assert_eq!(pool.upstream(), Some(&upstream));
    let buffer = pool.alloc(100).unwrap();
    drop(upstream);
    drop(pool);
    assert!(
        !dropped.load(Ordering::SeqCst),
        "the upstream went while a buffer of its pool lives"
    );
    buffer.free().unwrap();
    assert!(
        dropped.load(Ordering::SeqCst),
        "the last handle went, and the allocators stayed"
    );
}

#[test]
fn destroy_reports_what_drop_cannot_and_gives_the_handle_back() {
    let (heap, dropped) = RustHeap::new();
    let upstream = Allocator::from_functions(-1, heap).unwrap();
    let pool = Pool::new(&upstream, &PoolParams::new()).unwrap();
    let buffer = pool.alloc(64).unwrap();
    let (pool, e) = pool.destroy().unwrap_err();
    assert_eq!(e.status, Status::BUSY);
    assert!(e.detail.contains("1 other handles"), "{}", e.detail);
    drop(buffer);
    pool.alloc(8).unwrap();
    pool.destroy().map_err(|(_, e)| e).unwrap();
    assert!(!dropped.load(Ordering::SeqCst));
    upstream.destroy().map_err(|(_, e)| e).unwrap();
    assert!(dropped.load(Ordering::SeqCst));

    // The library's refusal gives the handle back as live as it was.
    let (heap, dropped) = RustHeap::new();
    let rust = Allocator::from_functions(-1, heap).unwrap();
    let raw = rust.alloc_raw(64, Stream::DEFAULT).unwrap();
    let (rust, e) = rust.destroy().unwrap_err();
    assert_eq!(e.status, Status::BUSY);
    assert!(!e.detail.contains("other handles"), "{}", e.detail);
    assert!(!dropped.load(Ordering::SeqCst));
    // SAFETY: memory from alloc_raw, used by nothing.
    unsafe { rust.free_raw(raw.as_ptr(), Stream::DEFAULT) }.unwrap();
    rust.destroy().map_err(|(_, e)| e).unwrap();
    assert!(dropped.load(Ordering::SeqCst));
}

#[test]
fn host_buffers_are_read_written_and_filled_without_a_driver() {
    let (_host, pool) = host_pool();
    let mut b = pool.alloc(256).unwrap();
    let data: Vec<u8> = (0..=255).collect();
    b.write(0, &data).unwrap();
    let mut back = vec![0u8; 100];
    b.read(50, &mut back).unwrap();
    assert_eq!(back, &data[50..150]);
    b.fill(0x5a).unwrap();
    // SAFETY: host memory the buffer owns, used by nothing else.
    assert!(unsafe { b.as_slice() }.iter().all(|&x| x == 0x5a));
    let e = b.write(250, &data[..7]).unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT);

    // A Rust allocator's host memory too.
    let rust = Allocator::from_functions(-1, RustHeap::new().0).unwrap();
    let mut b = rust.alloc(16).unwrap();
    b.write(8, b"8 bytes!").unwrap();
    let mut back = [0u8; 8];
    b.read(8, &mut back).unwrap();
    assert_eq!(&back, b"8 bytes!");
}

#[test]
fn a_borrowed_pool_is_not_destroyed() {
    let (_host, pool) = host_pool();
    // SAFETY: `pool` outlives the borrowed wrapper, which is used only below.
    let borrowed = unsafe { Allocator::from_raw_borrowed(pool.as_raw()) }.unwrap();
    let borrowed = Pool::try_from(borrowed).unwrap();
    assert!(!borrowed.is_owned());
    let (borrowed, e) = borrowed.destroy().unwrap_err();
    assert_eq!(e.status, Status::NOT_SUPPORTED);
    borrowed.alloc(8).unwrap();
}

#[test]
fn devices_of_host_memory() {
    let (host, pool) = host_pool();
    assert_eq!(host.device_id().unwrap(), -1);
    assert_eq!(pool.device_id().unwrap(), -1);
    assert!(host.is_owned() && pool.is_owned());
}

#[test]
fn tenants_share_a_pool_within_their_budgets() {
    let (_host, pool) = host_pool();
    let torch = Allocator::tenant(&pool, "torch", 1 << 20, 0).unwrap();
    let cupy = Allocator::tenant(&pool, "cupy", 0, 0).unwrap();
    let a = torch.alloc(512 << 10).unwrap();
    let at = a.as_ptr() as usize;
    let err = torch.alloc(600 << 10).unwrap_err();
    assert_eq!(err.status, Status::OUT_OF_MEMORY);
    assert!(err.detail.contains("tenant 'torch'"), "{}", err.detail);
    drop(a);
    let b = cupy.alloc(512 << 10).unwrap(); // what torch freed, at once
    assert_eq!(b.as_ptr() as usize, at);
    let info = torch.tenant_info().unwrap();
    assert_eq!(info.name, "torch");
    assert_eq!((info.limit, info.refused, info.bytes_in_use), (1 << 20, 1, 0));
    assert_eq!(cupy.tenant_info().unwrap().bytes_in_use, 512 << 10);
    torch.set_tenant_limits(0, 0).unwrap();
    assert_eq!(torch.tenant_info().unwrap().limit, 0);
}
