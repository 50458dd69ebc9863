//! Device 0: every kind of allocator, copies there and back, memsets, pinning. Each test prints
//! `skipped: no CUDA device` and returns when there is none.

mod common;

use common::gpu;
use gpumem::{
    Allocator, Buffer, Copy2d, CudaPoolParams, CudaPoolSource, HostAllocFlags, ManagedFlags, MemoryType, Pool,
    PoolParams, Status, Stream, VmParams,
};
use std::os::raw::c_void;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Writes a pattern through the buffer, reads it back, and checks the bytes.
fn round_trip(buffer: &mut Buffer, seed: u8) {
    let data = pattern(buffer.size(), seed);
    buffer.write(0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    buffer.read(0, &mut back).unwrap();
    assert!(back == data, "the bytes read back differ from those written");
}

#[test]
fn device_queries() {
    if !gpu() {
        return;
    }
    let info = gpumem::device_info(0).unwrap();
    assert!(!info.name.is_empty());
    assert!(info.total_memory > 0);
    assert!(info.compute_capability.0 >= 3);
    let memory = gpumem::device_memory(0).unwrap();
    assert!(memory.free <= memory.total && memory.total > 0);
    assert!(gpumem::driver_version().unwrap() >= 12000);
    let count = gpumem::device_count().unwrap();
    assert_eq!(gpumem::device_info(count).unwrap_err().status, Status::INVALID_DEVICE);
}

#[test]
fn device_memory_round_trip() {
    if !gpu() {
        return;
    }
    let device = Allocator::device(0).unwrap();
    assert_eq!(device.device_id().unwrap(), 0);
    let mut b = device.alloc(3 << 20).unwrap();
    round_trip(&mut b, 1);
    let info = gpumem::pointer_info(b.as_ptr()).unwrap();
    assert_eq!(
        (info.memory_type, info.device, info.base),
        (MemoryType::DEVICE, 0, b.as_ptr() as usize)
    );

    b.fill(0xab).unwrap();
    let mut back = vec![0u8; 4096];
    b.read((3 << 20) - 4096, &mut back).unwrap();
    assert!(back.iter().all(|&x| x == 0xab));

    let other = device.alloc(3 << 20).unwrap();
    // SAFETY: two live device buffers of the same size.
    unsafe { gpumem::copy(other.as_ptr(), b.as_ptr(), 3 << 20) }.unwrap();
    other.read(0, &mut back).unwrap();
    assert!(back.iter().all(|&x| x == 0xab));
}

#[test]
fn a_pool_over_device_memory() {
    if !gpu() {
        return;
    }
    let device = Allocator::device(0).unwrap();
    let pool = Pool::new(&device, &PoolParams::new().limit(64 << 20)).unwrap();
    let mut a = pool.alloc(1 << 20).unwrap();
    round_trip(&mut a, 2);
    let ptr = a.as_ptr();
    drop(a);
    let mut b = pool.alloc((1 << 20) - 100).unwrap();
    assert_eq!(b.as_ptr(), ptr, "cached memory is handed out again");
    round_trip(&mut b, 3);
    assert_eq!(pool.alloc(128 << 20).unwrap_err().status, Status::OUT_OF_MEMORY);
    drop(b);
    pool.release_all().unwrap();
    assert_eq!(pool.info().unwrap().total_bytes, 0);
}

#[test]
fn the_device_pool_and_the_default_allocator() {
    if !gpu() {
        return;
    }
    let pool = Pool::device(0).unwrap();
    assert!(!pool.is_owned());
    let mut b = pool.alloc(4096).unwrap();
    round_trip(&mut b, 4);
    drop(b);
    let default = Allocator::default_for(0).unwrap();
    assert!(!default.is_owned());
    assert_eq!(Pool::try_from(default).unwrap(), pool);
    let (pool, e) = pool.destroy().unwrap_err();
    assert_eq!(e.status, Status::NOT_SUPPORTED);
    pool.alloc(64).unwrap();
}

#[test]
fn stream_ordered_managed_pinned_and_vm_memory() {
    if !gpu() {
        return;
    }
    let info = gpumem::device_info(0).unwrap();
    let mut kinds = vec![("pinned", Allocator::pinned(HostAllocFlags::PORTABLE))];
    if info.memory_pools {
        kinds.push(("device_async", Allocator::device_async(0)));
        kinds.push((
            "cuda_pool",
            Allocator::cuda_pool(&CudaPoolParams::new(0).source(CudaPoolSource::NEW)),
        ));
    }
    if info.managed_memory {
        kinds.push(("managed", Allocator::managed(0, ManagedFlags::ATTACH_GLOBAL)));
    }
    match Allocator::vm(&VmParams {
        device: 0,
        ..VmParams::default()
    }) {
        Err(e) if e.status == Status::NOT_SUPPORTED => common::skip("vm: the device has no virtual memory management"),
        vm => kinds.push(("vm", vm)),
    }
    for (name, allocator) in kinds {
        let allocator = allocator.unwrap_or_else(|e| panic!("{}: {}", name, e));
        for upstream in [false, true] {
            let pool;
            let through: &Allocator = if upstream {
                pool = Pool::new(&allocator, &PoolParams::new()).unwrap();
                &pool
            } else {
                &allocator
            };
            let mut b = through.alloc(2 << 20).unwrap_or_else(|e| panic!("{}: {}", name, e));
            round_trip(&mut b, 5);
        }
    }
}

#[test]
fn a_cuda_pool_allocator_reports_its_pool() {
    if !gpu() {
        return;
    }
    if !gpumem::device_info(0).unwrap().memory_pools {
        common::skip("the device has no memory pools");
        return;
    }
    let allocator = Allocator::cuda_pool(&CudaPoolParams::new(0).source(CudaPoolSource::NEW)).unwrap();
    assert!(!allocator.cuda_pool_raw().unwrap().is_null());
    let b = allocator.alloc(8 << 20).unwrap();
    assert!(allocator.cuda_pool_info().unwrap().used >= 8 << 20);
    drop(b);
    allocator.cuda_pool_trim(0).unwrap();
    allocator.cuda_pool_set_release_threshold(0).unwrap();
    allocator.cuda_pool_reset_peaks().unwrap();
}

#[test]
fn copies_between_pinned_slices_and_device_memory() {
    if !gpu() {
        return;
    }
    let device = Allocator::device(0).unwrap();
    let mut b = device.alloc(1 << 20).unwrap();
    let mut data = pattern(1 << 20, 6);
    gpumem::pin_scope_mut(&mut data, |pinned| {
        // SAFETY: the slice stays pinned and unchanged until the copy is done: the read below is
        // queued after it on the same stream, and returns once it has written plain host memory.
        unsafe { b.write_async(0, pinned, Stream::LEGACY) }.unwrap();
        let mut back = vec![0u8; 1 << 20];
        // SAFETY: `back` is plain host memory, written before the call returns.
        unsafe { b.read_async(0, &mut back, Stream::LEGACY) }.unwrap();
        assert!(back[..] == pinned[..]);
    })
    .unwrap();
    let mut back = vec![0u8; 4096];
    // SAFETY: 4096 live bytes of the buffer.
    unsafe { gpumem::copy_to_slice(&mut back, b.as_ptr()) }.unwrap();
    assert!(back[..] == data[..4096]);
}

#[test]
fn a_2d_copy_through_device_memory() {
    if !gpu() {
        return;
    }
    let device = Allocator::device(0).unwrap();
    let (width, height, pitch) = (100usize, 50usize, 128usize);
    let rows = pattern(width * height, 7);
    let b = device.alloc(pitch * height).unwrap();
    // SAFETY: `rows` is width × height bytes; the buffer pitch × height.
    unsafe {
        Copy2d::new(width, height)
            .src(rows.as_ptr() as *const c_void, 0)
            .dst(b.as_ptr(), pitch)
            .run()
    }
    .unwrap();
    let mut back = vec![0u8; width * height];
    // SAFETY: as above, the other way.
    unsafe {
        Copy2d::new(width, height)
            .src(b.as_ptr(), pitch)
            .dst(back.as_mut_ptr() as *mut c_void, 0)
            .run()
    }
    .unwrap();
    assert!(back == rows);
}
