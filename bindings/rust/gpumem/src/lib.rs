//! GPU memory management from Rust: safe wrappers over libgpumem.
//!
//! Handles own what they wrap and give it back on `Drop`: an [`Allocator`] is destroyed when its
//! last handle goes, a [`Buffer`] is freed, a [`Hook`] removed with its closure; a slice is pinned
//! for the length of a closure ([`pin_scope`]). An allocator is shared through an `Arc`, so every
//! buffer keeps its allocator alive and a [`Pool`] its upstream; the library's refusals
//! (destroying an allocator with live memory) therefore never happen behind the caller's back. Every fallible call returns [`Result`], whose [`Error`] carries
//! the library's status, the detail it left for the calling thread and the CUDA result behind it.
//! Statuses and the library's other enumerations stay integers (newtypes with associated
//! constants), as in C, so a value from a newer library is never a surprise.
//!
//! Rust code called from the library (hooks, caller-supplied allocators, reclaim callbacks) runs
//! inside `catch_unwind`: a panic never unwinds into C. It is reported by the panic hook as usual
//! and kept ([`Allocator::take_panics`], [`Reclaim::take_panics`]); a caller-supplied
//! allocator's panic becomes [`Status::INTERNAL`]. (With `panic = "abort"` a panic aborts, as
//! anywhere.)
//!
//! Without a GPU or a CUDA driver, host allocators, pools over them, caller-supplied allocators,
//! their buffers' reads and writes, traces and errors work; calls that need a GPU fail with
//! [`Status::NO_DRIVER`] or [`Status::NO_DEVICE`].
//!
//! ```no_run
//! # fn main() -> gpumem::Result<()> {
//! use gpumem::{Allocator, Pool, PoolParams};
//!
//! let device = Allocator::device(0)?;
//! let pool = Pool::new(&device, &PoolParams::new().limit(1 << 30))?;
//! let mut buffer = pool.alloc(4096)?;
//! buffer.write(0, &[1, 2, 3, 4])?;
//! let mut back = [0u8; 4];
//! buffer.read(0, &mut back)?;
//! assert_eq!(back, [1, 2, 3, 4]);
//! # Ok(())
//! # }
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

/// The raw declarations this crate wraps, for what it does not cover.
pub use gpumem_sys as sys;

/// A zeroed ABI struct with its `struct_size` set; all-zero is a valid value of each of them
/// (integers, `false`, null pointers, `None` callbacks).
macro_rules! sized_zeroed {
    ($t:ty) => {{
        // SAFETY: see the macro's comment: every field of these C structs is valid when zero.
        let mut value: $t = unsafe { std::mem::zeroed() };
        value.struct_size = std::mem::size_of::<$t>();
        value
    }};
}

mod allocator;
mod callback;
mod copy;
mod device;
mod error;
mod pin;
mod pool;
mod stream;
mod trace;

pub use allocator::{
    AddressRanges, Allocator, AllocatorFunctions, AllocatorStats, Buffer, CudaPoolInfo, CudaPoolParams, CudaPoolSource,
    FunctionsResult, Hook, HookEvents, HookInfo, HostAllocFlags, ManagedFlags, PeerAccess, TenantInfo, VmInfo, VmParams,
};
pub use copy::{
    copy, copy_async, copy_from_slice, copy_from_slice_async, copy_staging_held, copy_staging_release, copy_to_slice,
    copy_to_slice_async, memset, memset_async, pointer_info, Copy2d, MemoryType, PointerInfo,
};
pub use device::{device_count, device_info, device_memory, driver_version, DeviceInfo, DeviceMemory};
pub use error::{Error, Result, Status};
pub use pin::{
    pin_cache_flush, pin_cache_set_budget, pin_forget_raw, pin_query, pin_raw, pin_scope, pin_scope_mut, pin_stats,
    unpin_raw, PinState, PinStats,
};
pub use pool::{add_reclaim, BlockInfo, BlockState, Pool, PoolInfo, PoolParams, Reclaim, StreamReuse};
pub use stream::Stream;
pub use trace::{Trace, TraceEvent, TraceHeader, TraceReader, TraceRecord};

use std::ffi::CStr;
use std::os::raw::c_char;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

/// The oldest library this crate works with, as `major * 10000 + minor * 100 + patch`: the
/// version of the headers `gpumem-sys` mirrors.
pub const REQUIRED_VERSION: u32 = sys::GPUMEM_VERSION_NUMBER;

/// The version of the loaded library, "MAJOR.MINOR.PATCH".
pub fn version() -> &'static str {
    // SAFETY: no arguments; the library returns a static string.
    static_str(unsafe { sys::gpumem_version_string() })
}

/// The version of the loaded library as `major * 10000 + minor * 100 + patch`.
pub fn version_number() -> u32 {
    // SAFETY: no arguments, no state.
    unsafe { sys::gpumem_version_number() }
}

/// Checks that the loaded library is one this crate can use: the version of
/// [`REQUIRED_VERSION`] or a newer patch of it, or, from 1.0 on, a newer minor version of the same
/// major (while the major version is 0 a minor version may change the ABI). Every function that
/// makes a handle or needs none checks it too, once per process.
pub fn check_version() -> Result<()> {
    let have = version_number();
    if compatible(have, REQUIRED_VERSION) {
        return Ok(());
    }
    let wanted = if REQUIRED_VERSION < 10000 {
        format!(
            "{} or a newer 0.{}.x",
            version_text(REQUIRED_VERSION),
            REQUIRED_VERSION / 100
        )
    } else {
        format!(
            "{} or a newer {}.x",
            version_text(REQUIRED_VERSION),
            REQUIRED_VERSION / 10000
        )
    };
    Err(Error::new(
        Status::NOT_SUPPORTED,
        format!(
            "the loaded libgpumem is {}, but this gpumem crate needs {}; put the right libgpumem.so.{} first on \
             the library search path (LD_LIBRARY_PATH)",
            version_text(have),
            wanted,
            REQUIRED_VERSION / 10000
        ),
    ))
}

/// Whether a library of version `have` has the ABI of version `need` (both as
/// `major * 10000 + minor * 100 + patch`): the same major, at least as new, and, while the major
/// is 0, the same minor.
fn compatible(have: u32, need: u32) -> bool {
    let same_major = have / 10000 == need / 10000;
    let same_minor = have / 100 == need / 100;
    same_major && have >= need && (need >= 10000 || same_minor)
}

/// [`check_version`], asked of the library once per process: what every entry point calls first.
pub(crate) fn require_version() -> Result<()> {
    static ONCE: Once = Once::new();
    static COMPATIBLE: AtomicBool = AtomicBool::new(false);
    // `call_once` orders its closure's store before every later return, so Relaxed is enough.
    ONCE.call_once(|| COMPATIBLE.store(check_version().is_ok(), Ordering::Relaxed));
    if COMPATIBLE.load(Ordering::Relaxed) {
        Ok(())
    } else {
        check_version()
    }
}

fn version_text(number: u32) -> String {
    format!("{}.{}.{}", number / 10000, number / 100 % 100, number % 100)
}

/// A static C string of the library as `&'static str` ("" for NULL, which it never returns).
fn static_str(p: *const c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    // SAFETY: the library's names and messages are static, NUL-terminated ASCII.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
}

/// A NUL-terminated `char` array of an ABI struct as a `String` (lossy: device names are ASCII).
fn fixed_str(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_the_same_abi_are_compatible() {
        assert!(compatible(400, 400));
        assert!(compatible(405, 400), "a newer patch");
        assert!(!compatible(399, 400), "an older minor");
        assert!(!compatible(401, 402), "an older patch");
        assert!(
            !compatible(500, 400),
            "while the major is 0, a newer minor may change the ABI"
        );
        assert!(!compatible(10400, 400), "another major");
        assert!(compatible(10500, 10400), "from 1.0, a newer minor keeps the ABI");
        assert!(!compatible(10300, 10400));
        assert!(!compatible(20000, 10400));
    }

    #[test]
    fn the_required_version_is_the_headers() {
        assert_eq!(REQUIRED_VERSION, sys::GPUMEM_VERSION_NUMBER);
        assert_eq!(version_text(REQUIRED_VERSION), sys::GPUMEM_VERSION_STRING);
    }
}
