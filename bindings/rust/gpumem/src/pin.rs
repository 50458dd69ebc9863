//! The pinning service (pin.h): counted page-locking of host ranges, shared by the process.

use crate::error::{check, Result};
use crate::{require_version, sys};
use std::mem::ManuallyDrop;
use std::os::raw::c_void;

/// How much of a range is pinned (`gpumem_pin_state`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct PinState(pub i32);

impl PinState {
    /// No byte of the range is pinned.
    pub const NONE: PinState = PinState(sys::GPUMEM_PIN_NONE);
    /// Some bytes are pinned, some are not.
    pub const PARTIAL: PinState = PinState(sys::GPUMEM_PIN_PARTIAL);
    /// Every byte is pinned.
    pub const FULL: PinState = PinState(sys::GPUMEM_PIN_FULL);
}

/// Statistics of the pinning service (`gpumem_pin_stats_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PinStats {
    /// Bytes registered with the driver now, pinned or cached.
    pub bytes_registered: u64,
    /// Of those, bytes of registrations holding a pinned byte.
    pub bytes_pinned: u64,
    /// Of those, bytes of registrations kept for reuse.
    pub bytes_cached: u64,
    /// Driver registrations now.
    pub registrations: u64,
    /// Successful pins.
    pub pins: u64,
    /// Successful unpins.
    pub unpins: u64,
    /// Pins that needed no new registration.
    pub hits: u64,
    /// Pins that registered pages with the driver.
    pub misses: u64,
    /// Cached registrations dropped to keep within the budget.
    pub evictions: u64,
    /// The cache's budget in bytes.
    pub cache_budget: u64,
}

fn pin_range(ptr: *mut c_void, size: usize) -> Result<()> {
    require_version()?;
    // SAFETY: the range is a live slice of the caller's; pinning locks pages, it never writes them.
    check(unsafe { sys::gpumem_pin(ptr, size, 0) })
}

/// Unpins, then forgets the range: once the pin is gone the slice's owner may free it, and no
/// cached registration may outlive the memory (pin.h). Busy means it is pinned elsewhere too,
/// and the last one to unpin forgets it.
fn release(ptr: *mut c_void, size: usize) -> Result<()> {
    // SAFETY: a range this pin holds.
    check(unsafe { sys::gpumem_unpin(ptr, size) })?;
    // SAFETY: a live range.
    let status = unsafe { sys::gpumem_pin_forget(ptr, size) };
    if status == sys::GPUMEM_ERROR_BUSY {
        return Ok(());
    }
    check(status)
}

/// One pin of a borrowed range, given back when dropped, on unwind too. Never handed out: a guard
/// the caller held could be leaked (`mem::forget`), ending the borrow with the pages still pinned.
struct PinGuard {
    ptr: *mut c_void,
    size: usize,
}

impl PinGuard {
    fn pin(ptr: *mut c_void, size: usize) -> Result<PinGuard> {
        pin_range(ptr, size)?;
        Ok(PinGuard { ptr, size })
    }

    fn unpin(self) -> Result<()> {
        let this = ManuallyDrop::new(self);
        release(this.ptr, this.size)
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        let _ = release(self.ptr, self.size);
    }
}

/// Pins a slice while `f` runs, for fast, asynchronous transfers: page-locks it (registering what
/// is not registered yet) and counts one pin over it, calls `f` with the slice, then unpins it
/// (and drops its cached registration), in this frame, however `f` ends: a panic in `f` unpins it
/// and goes on. Needs a CUDA driver.
///
/// The range is pinned only within the call, rather than for the life of a guard, because a
/// guard can be leaked (`mem::forget`) while the slice's owner frees the memory under the pin.
///
/// Err if pinning fails (`f` is not called) or if unpinning fails (`f`'s result is dropped).
pub fn pin_scope<R>(range: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<R> {
    let guard = PinGuard::pin(range.as_ptr() as *mut c_void, range.len())?;
    let result = f(range);
    guard.unpin()?;
    Ok(result)
}

/// Pins a mutable slice while `f` runs, as [`pin_scope`] does; `f` gets the slice to write.
pub fn pin_scope_mut<R>(range: &mut [u8], f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
    let guard = PinGuard::pin(range.as_mut_ptr() as *mut c_void, range.len())?;
    let result = f(range);
    guard.unpin()?;
    Ok(result)
}

/// How much of a slice is pinned through the service. Needs no driver.
pub fn pin_query(range: &[u8]) -> Result<PinState> {
    require_version()?;
    let mut state = 0;
    // SAFETY: the range is only looked up; the output is valid.
    check(unsafe { sys::gpumem_pin_query(range.as_ptr() as *const c_void, range.len(), &mut state) })?;
    Ok(PinState(state))
}

/// Pins a raw host range, leaving its unpinning to the caller; a cached registration then
/// outlives the pin until [`pin_forget_raw`], which keeps pinning the same memory cheap.
///
/// # Safety
/// The range must stay allocated until it is unpinned with [`unpin_raw`] and forgotten with
/// [`pin_forget_raw`].
pub unsafe fn pin_raw(ptr: *mut c_void, size: usize) -> Result<()> {
    pin_range(ptr, size)
}

/// Removes one pin from a raw range.
///
/// # Safety
/// The range must be allocated host memory.
pub unsafe fn unpin_raw(ptr: *mut c_void, size: usize) -> Result<()> {
    require_version()?;
    // SAFETY: the caller's contract.
    check(unsafe { sys::gpumem_unpin(ptr, size) })
}

/// Drops the cached registrations of a range about to be freed; [`Status::BUSY`](crate::Status::BUSY)
/// while it is pinned.
///
/// # Safety
/// The range must be allocated host memory.
pub unsafe fn pin_forget_raw(ptr: *mut c_void, size: usize) -> Result<()> {
    require_version()?;
    // SAFETY: the caller's contract.
    check(unsafe { sys::gpumem_pin_forget(ptr, size) })
}

/// Unregisters every cached registration (those no pin covers).
pub fn pin_cache_flush() -> Result<()> {
    require_version()?;
    // SAFETY: no arguments.
    check(unsafe { sys::gpumem_pin_cache_flush() })
}

/// Sets the most bytes kept registered under no pin (0 turns the cache off).
pub fn pin_cache_set_budget(bytes: u64) -> Result<()> {
    require_version()?;
    // SAFETY: no pointers.
    check(unsafe { sys::gpumem_pin_cache_set_budget(bytes) })
}

/// Statistics of the pinning service.
pub fn pin_stats() -> Result<PinStats> {
    require_version()?;
    let mut raw = sized_zeroed!(sys::gpumem_pin_stats_t);
    // SAFETY: a valid struct with its size.
    check(unsafe { sys::gpumem_pin_get_stats(&mut raw) })?;
    Ok(PinStats {
        bytes_registered: raw.bytes_registered,
        bytes_pinned: raw.bytes_pinned,
        bytes_cached: raw.bytes_cached,
        registrations: raw.registrations,
        pins: raw.pins,
        unpins: raw.unpins,
        hits: raw.hits,
        misses: raw.misses,
        evictions: raw.evictions,
        cache_budget: raw.cache_budget,
    })
}
