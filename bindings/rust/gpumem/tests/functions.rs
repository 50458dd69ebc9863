//! Allocators written in Rust (Allocator::from_functions): bytes and statistics through them, a
//! pool over them, their errors and panics turned into statuses, and address ranges.

// Unsafe operations in unsafe fns take their own unsafe blocks (and rustc 1.63 then accepts those).
#![deny(unsafe_op_in_unsafe_fn)]

mod common;

use common::RustHeap;
use gpumem::{AddressRanges, Allocator, AllocatorFunctions, FunctionsResult, Pool, PoolParams, Status, Stream};
use std::alloc::{self, Layout};
use std::os::raw::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn a_pool_over_a_rust_allocator_holds_bytes() {
    let (heap, dropped) = RustHeap::new();
    let rust = Allocator::from_functions(-1, heap).unwrap();
    assert_eq!(rust.device_id().unwrap(), -1);
    let pool = Pool::new(&rust, &PoolParams::new()).unwrap();
    let mut a = pool.alloc(3000).unwrap();
    let mut b = pool.alloc(100).unwrap();
    // SAFETY: host memory, used by nothing else.
    unsafe {
        a.as_mut_slice().fill(0xa5);
        b.as_mut_slice().fill(0x5a);
        assert!(a.as_slice().iter().all(|&x| x == 0xa5));
        assert!(b.as_slice().iter().all(|&x| x == 0x5a));
    }
    let s = rust.stats().unwrap();
    assert_eq!((s.alloc_count, s.bytes_in_use), (2, 3072 + 512));
    assert_eq!(pool.stats().unwrap().bytes_requested, 3100);
    drop((a, b));
    pool.release_all().unwrap();
    assert_eq!(rust.stats().unwrap().bytes_in_use, 0);
    drop(pool);
    assert!(!dropped.load(Ordering::SeqCst));
    rust.destroy().map_err(|(_, e)| e).unwrap();
    assert!(
        dropped.load(Ordering::SeqCst),
        "destroying the allocator drops the Rust object"
    );
}

#[test]
fn the_device_is_passed_to_the_functions() {
    let (heap, _dropped) = RustHeap::new();
    let heap = Arc::new(heap);
    let rust = Allocator::from_functions(-1, heap.clone()).unwrap();
    rust.alloc(1).unwrap().free().unwrap();
    assert_eq!(heap.last_device.load(Ordering::SeqCst), -1);
    let e = Allocator::from_functions(-2, RustHeap::new().0).unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT);
}

#[test]
fn a_panicking_allocation_is_an_internal_error_and_the_allocator_lives_on() {
    let (mut heap, _dropped) = RustHeap::new();
    heap.panic_above = 1 << 20;
    let rust = Allocator::from_functions(-1, heap).unwrap();
    let e = rust.alloc(2 << 20).unwrap_err();
    assert_eq!(e.status, Status::INTERNAL);
    assert!(
        e.detail
            .contains("the caller's alloc function returned GPUMEM_ERROR_INTERNAL"),
        "{}",
        e.detail
    );
    assert_eq!(rust.take_panics(), vec!["RustHeap refuses 2097152 bytes".to_string()]);
    assert!(rust.take_panics().is_empty());
    let b = rust.alloc(100).unwrap();
    b.free().unwrap();
    assert_eq!(rust.stats().unwrap().free_count, 1);

    // Through a pool: the panic's status reaches the pool's caller, and nothing is retried.
    let pool = Pool::new(&rust, &PoolParams::new()).unwrap();
    let e = pool.alloc(4 << 20).unwrap_err();
    assert_eq!(e.status, Status::INTERNAL);
    assert_eq!(rust.take_panics().len(), 1);
}

/// The buffer of a failed free comes back with the error, still allocated, and can be freed again.
#[test]
fn a_failed_free_gives_the_buffer_back() {
    let (heap, _dropped) = RustHeap::new();
    let heap = Arc::new(heap);
    let rust = Allocator::from_functions(-1, heap.clone()).unwrap();
    let mut b = rust.alloc(64).unwrap();
    b.write(0, b"kept").unwrap();
    heap.panic_in_free.store(true, Ordering::SeqCst);
    let (b, e) = b.free_on(Stream::LEGACY).unwrap_err();
    assert_eq!(e.status, Status::INTERNAL);
    assert_eq!(rust.take_panics().len(), 1);
    let mut back = [0u8; 4];
    b.read(0, &mut back).unwrap();
    assert_eq!(&back, b"kept");
    assert_eq!(heap.live.load(Ordering::SeqCst), 1);
    heap.panic_in_free.store(false, Ordering::SeqCst);
    b.free().unwrap();
    assert_eq!(heap.live.load(Ordering::SeqCst), 0);
}

/// A RustHeap that keeps the stream of the last allocation and of the last free.
struct Streams {
    heap: RustHeap,
    alloc_stream: AtomicUsize,
    free_stream: AtomicUsize,
}

// SAFETY: every call goes to a RustHeap, which keeps the trait's promises.
unsafe impl AllocatorFunctions for Streams {
    fn alloc(&self, size: usize, device: i32, stream: usize) -> FunctionsResult<NonNull<c_void>> {
        self.alloc_stream.store(stream, Ordering::SeqCst);
        self.heap.alloc(size, device, stream)
    }

    unsafe fn free(&self, ptr: NonNull<c_void>, size: usize, device: i32, stream: usize) -> FunctionsResult<()> {
        self.free_stream.store(stream, Ordering::SeqCst);
        // SAFETY: the same contract.
        unsafe { self.heap.free(ptr, size, device, stream) }
    }
}

/// The stream of each call reaches the functions as its handle's value, and a buffer may be freed
/// on another stream than its own.
#[test]
fn the_stream_is_passed_as_a_value() {
    let streams = Arc::new(Streams {
        heap: RustHeap::new().0,
        alloc_stream: AtomicUsize::new(0),
        free_stream: AtomicUsize::new(0),
    });
    let rust = Allocator::from_functions(-1, streams.clone()).unwrap();
    let b = rust.alloc_on(100, Stream::PER_THREAD).unwrap();
    assert_eq!(b.stream(), Stream::PER_THREAD);
    b.free_on(Stream::LEGACY).unwrap();
    assert_eq!(streams.alloc_stream.load(Ordering::SeqCst), Stream::PER_THREAD.addr());
    assert_eq!(streams.free_stream.load(Ordering::SeqCst), Stream::LEGACY.addr());
    assert_eq!(streams.heap.live.load(Ordering::SeqCst), 0);
}

#[test]
fn a_panicking_free_leaves_the_memory_allocated() {
    let (heap, _dropped) = RustHeap::new();
    let heap = Arc::new(heap);
    let rust = Allocator::from_functions(-1, heap.clone()).unwrap();
    let ptr = rust.alloc_raw(64, Stream::DEFAULT).unwrap();
    heap.panic_in_free.store(true, Ordering::SeqCst);
    // SAFETY: memory from alloc_raw, used by nothing.
    let e = unsafe { rust.free_raw(ptr.as_ptr(), Stream::DEFAULT) }.unwrap_err();
    assert_eq!(e.status, Status::INTERNAL);
    assert!(e.detail.contains("the caller's free function returned"), "{}", e.detail);
    assert_eq!(rust.take_panics(), vec![format!("RustHeap will not free {:p}", ptr)]);
    assert_eq!(rust.stats().unwrap().bytes_in_use, 64);
    heap.panic_in_free.store(false, Ordering::SeqCst);
    // SAFETY: as above; the failed free changed nothing.
    unsafe { rust.free_raw(ptr.as_ptr(), Stream::DEFAULT) }.unwrap();
    assert_eq!(heap.live.load(Ordering::SeqCst), 0);
}

#[test]
fn an_error_of_the_functions_passes_its_status_and_a_pool_retries() {
    let (mut heap, _dropped) = RustHeap::new();
    heap.fail_above = 4096;
    let rust = Allocator::from_functions(-1, heap).unwrap();
    let e = rust.alloc(8192).unwrap_err();
    assert_eq!(e.status, Status::OUT_OF_MEMORY);
    assert!(e.detail.contains("GPUMEM_ERROR_OUT_OF_MEMORY"), "{}", e.detail);

    let pool = Pool::new(&rust, &PoolParams::new()).unwrap();
    let cached = pool.alloc(4096).unwrap();
    drop(cached);
    let e = pool.alloc(8192).unwrap_err();
    assert_eq!(e.status, Status::OUT_OF_MEMORY);
    let s = pool.stats().unwrap();
    assert!(s.retry_count >= 1, "{:?}", s);
    assert_eq!(s.oom_count, 1);
    assert_eq!(
        pool.info().unwrap().total_bytes,
        0,
        "the retry released the cached block first"
    );
}

const UNIT: usize = 4096;
const RANGE: usize = 1 << 20;

/// Address ranges over Rust's heap: a reservation is a heap block (all of it usable), and map and
/// unmap only count.
#[derive(Default)]
struct Ranges {
    reserved: AtomicUsize,
    mapped: AtomicUsize,
}

// SAFETY: every reservation is a whole heap block of its own, aligned to the map unit, so each
// part a pool maps is host memory, as device -1 asks; and so is each allocation.
unsafe impl AllocatorFunctions for Ranges {
    fn alloc(&self, size: usize, _device: i32, _stream: usize) -> FunctionsResult<NonNull<c_void>> {
        self.reserve(size, -1)
    }

    unsafe fn free(&self, ptr: NonNull<c_void>, size: usize, device: i32, _stream: usize) -> FunctionsResult<()> {
        // SAFETY: the same contract.
        unsafe { self.unreserve(ptr, size, device) }
    }

    fn ranges(&self) -> Option<AddressRanges> {
        Some(AddressRanges {
            map_unit: UNIT as u64,
            range_size: RANGE as u64,
        })
    }

    fn reserve(&self, size: usize, _device: i32) -> FunctionsResult<NonNull<c_void>> {
        let layout = Layout::from_size_align(size, UNIT).unwrap();
        // SAFETY: not a size of 0.
        let ptr = unsafe { alloc::alloc(layout) };
        self.reserved.fetch_add(size, Ordering::SeqCst);
        Ok(NonNull::new(ptr as *mut c_void).expect("out of host memory"))
    }

    unsafe fn unreserve(&self, ptr: NonNull<c_void>, size: usize, _device: i32) -> FunctionsResult<()> {
        // SAFETY: the trait's contract: a whole reservation of this size.
        unsafe { alloc::dealloc(ptr.as_ptr() as *mut u8, Layout::from_size_align(size, UNIT).unwrap()) };
        self.reserved.fetch_sub(size, Ordering::SeqCst);
        Ok(())
    }

    unsafe fn map(&self, _ptr: NonNull<c_void>, size: usize, _device: i32) -> FunctionsResult<()> {
        self.mapped.fetch_add(size, Ordering::SeqCst);
        Ok(())
    }

    unsafe fn unmap(&self, _ptr: NonNull<c_void>, size: usize, _device: i32) -> FunctionsResult<()> {
        self.mapped.fetch_sub(size, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn a_pool_grows_in_place_over_address_ranges() {
    let ranges = Arc::new(Ranges::default());
    let rust = Allocator::from_functions(-1, ranges.clone()).unwrap();
    let pool = Pool::new(&rust, &PoolParams::new()).unwrap();
    let mut a = pool.alloc(1000).unwrap();
    let mut b = pool.alloc(3 * UNIT).unwrap();
    // SAFETY: host memory inside a heap block, used by nothing else.
    unsafe {
        a.as_mut_slice().fill(1);
        b.as_mut_slice().fill(2);
        assert!(a.as_slice().iter().all(|&x| x == 1) && b.as_slice().iter().all(|&x| x == 2));
    }
    assert_eq!(ranges.reserved.load(Ordering::SeqCst), RANGE);
    assert_eq!(ranges.mapped.load(Ordering::SeqCst), 4 * UNIT);
    let info = pool.info().unwrap();
    assert_eq!((info.total_bytes, info.address_bytes), (4 * UNIT as u64, RANGE as u64));
    assert_eq!(
        b.as_ptr() as usize,
        a.as_ptr() as usize + 1024,
        "the segment grew in place"
    );
    drop((a, b));
    pool.release_all().unwrap();
    assert_eq!(ranges.mapped.load(Ordering::SeqCst), 0);
    drop(pool);
    assert_eq!(ranges.reserved.load(Ordering::SeqCst), 0);
}
