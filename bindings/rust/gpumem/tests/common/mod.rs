//! What several test binaries share; each uses a part of it.
#![allow(dead_code)]
// Unsafe operations in unsafe fns take their own unsafe blocks (and rustc 1.63 then accepts those).
#![deny(unsafe_op_in_unsafe_fn)]

use gpumem::{AllocatorFunctions, FunctionsResult, Result, Status};
use std::alloc::{self, Layout};
use std::io::Write;
use std::os::raw::c_void;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;

/// Says, where the test harness does not capture it, that the calling test is skipped and why.
pub fn skip(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr(), "{}: skipped: {}", test, why);
}

/// Whether device 0 is there; if not, says `skipped: no CUDA device` for the calling test.
pub fn gpu() -> bool {
    match gpumem::device_count() {
        Ok(count) if count > 0 => true,
        Ok(_) => {
            skip("no CUDA device");
            false
        }
        Err(e) if e.status == Status::NO_DRIVER || e.status == Status::NO_DEVICE => {
            skip(&format!("no CUDA device ({})", e));
            false
        }
        Err(e) => panic!("counting the devices failed: {}", e),
    }
}

/// Whether a call that needs the driver can run: true for its success; false, saying so, for
/// an error that only means there is no driver or no device; any other error fails the test.
pub fn needs_gpu<T>(result: &Result<T>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) if e.status == Status::NO_DRIVER || e.status == Status::NO_DEVICE => {
            skip(&format!("no CUDA device ({})", e));
            false
        }
        Err(e) => panic!("{}", e),
    }
}

/// A file name under the system's temporary directory, unique to this process and `name`.
pub fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gpumem-rust-{}-{}", std::process::id(), name))
}

/// An allocator of Rust's heap for Allocator::from_functions, aligned to 512 bytes, that counts
/// what it does, panics above `panic_above` bytes and fails above `fail_above`, and sets
/// `dropped` when the library destroys it.
pub struct RustHeap {
    pub live: AtomicUsize,
    pub allocs: AtomicUsize,
    pub last_device: AtomicI32,
    pub panic_above: usize,
    pub fail_above: usize,
    pub panic_in_free: AtomicBool,
    pub dropped: Arc<AtomicBool>,
}

impl RustHeap {
    pub fn new() -> (RustHeap, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        let heap = RustHeap {
            live: AtomicUsize::new(0),
            allocs: AtomicUsize::new(0),
            last_device: AtomicI32::new(i32::MIN),
            panic_above: usize::MAX,
            fail_above: usize::MAX,
            panic_in_free: AtomicBool::new(false),
            dropped: dropped.clone(),
        };
        (heap, dropped)
    }
}

fn layout(size: usize) -> FunctionsResult<Layout> {
    Layout::from_size_align(size, 512).map_err(|_| Status::INVALID_ARGUMENT)
}

// SAFETY: alloc returns `size` bytes of Rust's heap that nothing else uses until free gives them
// back: host memory, as device -1 (the only device the tests make it with) asks.
unsafe impl AllocatorFunctions for RustHeap {
    fn alloc(&self, size: usize, device: i32, _stream: usize) -> FunctionsResult<NonNull<c_void>> {
        self.last_device.store(device, Ordering::SeqCst);
        if size > self.panic_above {
            panic!("RustHeap refuses {} bytes", size);
        }
        if size > self.fail_above {
            return Err(Status::OUT_OF_MEMORY);
        }
        // SAFETY: the layout's size is not 0 (gpumem never asks for 0 bytes).
        let ptr = unsafe { alloc::alloc(layout(size)?) };
        let ptr = NonNull::new(ptr as *mut c_void).ok_or(Status::OUT_OF_MEMORY)?;
        self.live.fetch_add(1, Ordering::SeqCst);
        self.allocs.fetch_add(1, Ordering::SeqCst);
        Ok(ptr)
    }

    unsafe fn free(&self, ptr: NonNull<c_void>, size: usize, _device: i32, _stream: usize) -> FunctionsResult<()> {
        if self.panic_in_free.load(Ordering::SeqCst) {
            panic!("RustHeap will not free {:p}", ptr);
        }
        // SAFETY: the trait's contract: it came from alloc with this size.
        unsafe { alloc::dealloc(ptr.as_ptr() as *mut u8, layout(size)?) };
        self.live.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for RustHeap {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}
