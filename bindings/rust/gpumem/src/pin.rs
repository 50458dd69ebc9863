//! The pinning service (pin.h): counted page-locking of host ranges, shared by the process.

use crate::error::{check, Result};
use crate::{check_version, sys};
use std::fmt;
use std::ops::{Deref, DerefMut};
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
    check_version()?;
    // SAFETY: the range is a live slice of the caller's; pinning locks pages, it never writes them.
    check(unsafe { sys::gpumem_pin(ptr, size, 0) })
}

/// Unpins, then forgets the range: once the guard is gone the slice's owner may free it, and no
/// cached registration may outlive the memory (pin.h). Busy means it is pinned elsewhere too,
/// and the last one to unpin forgets it.
fn release(ptr: *mut c_void, size: usize) -> Result<()> {
    // SAFETY: a range this guard pinned and still holds.
    check(unsafe { sys::gpumem_unpin(ptr, size) })?;
    // SAFETY: a live range.
    let status = unsafe { sys::gpumem_pin_forget(ptr, size) };
    if status == sys::GPUMEM_ERROR_BUSY {
        return Ok(());
    }
    check(status)
}

/// A pinned slice, from [`pin`]; unpinned (and its cached registration dropped) when dropped.
#[must_use = "a Pinned range is unpinned when dropped"]
pub struct Pinned<'a> {
    range: &'a [u8],
}

/// A pinned mutable slice, from [`pin_mut`]; unpinned when dropped.
#[must_use = "a PinnedMut range is unpinned when dropped"]
pub struct PinnedMut<'a> {
    range: &'a mut [u8],
}

/// Pins a slice for fast, asynchronous transfers: page-locks it (registering what is not
/// registered yet) and counts one pin over it. Needs a CUDA driver.
pub fn pin(range: &[u8]) -> Result<Pinned<'_>> {
    pin_range(range.as_ptr() as *mut c_void, range.len())?;
    Ok(Pinned { range })
}

/// Pins a mutable slice, as [`pin`]; the guard gives the slice back through `DerefMut`.
pub fn pin_mut(range: &mut [u8]) -> Result<PinnedMut<'_>> {
    pin_range(range.as_mut_ptr() as *mut c_void, range.len())?;
    Ok(PinnedMut { range })
}

impl Pinned<'_> {
    /// Unpins now, reporting a failure.
    pub fn unpin(self) -> Result<()> {
        let (ptr, size) = (self.range.as_ptr() as *mut c_void, self.range.len());
        std::mem::forget(self);
        release(ptr, size)
    }
}

impl PinnedMut<'_> {
    /// Unpins now, reporting a failure.
    pub fn unpin(self) -> Result<()> {
        let (ptr, size) = (self.range.as_ptr() as *mut c_void, self.range.len());
        std::mem::forget(self);
        release(ptr, size)
    }
}

impl Deref for Pinned<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.range
    }
}

impl Deref for PinnedMut<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.range
    }
}

impl DerefMut for PinnedMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.range
    }
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        let _ = release(self.range.as_ptr() as *mut c_void, self.range.len());
    }
}

impl Drop for PinnedMut<'_> {
    fn drop(&mut self) {
        let _ = release(self.range.as_mut_ptr() as *mut c_void, self.range.len());
    }
}

impl fmt::Debug for Pinned<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pinned")
            .field("ptr", &self.range.as_ptr())
            .field("len", &self.range.len())
            .finish()
    }
}

impl fmt::Debug for PinnedMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedMut")
            .field("ptr", &self.range.as_ptr())
            .field("len", &self.range.len())
            .finish()
    }
}

/// How much of a slice is pinned through the service. Needs no driver.
pub fn pin_query(range: &[u8]) -> Result<PinState> {
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
    // SAFETY: the caller's contract.
    check(unsafe { sys::gpumem_unpin(ptr, size) })
}

/// Drops the cached registrations of a range about to be freed; [`Status::BUSY`](crate::Status::BUSY)
/// while it is pinned.
///
/// # Safety
/// The range must be allocated host memory.
pub unsafe fn pin_forget_raw(ptr: *mut c_void, size: usize) -> Result<()> {
    // SAFETY: the caller's contract.
    check(unsafe { sys::gpumem_pin_forget(ptr, size) })
}

/// Unregisters every cached registration (those no pin covers).
pub fn pin_cache_flush() -> Result<()> {
    // SAFETY: no arguments.
    check(unsafe { sys::gpumem_pin_cache_flush() })
}

/// Sets the most bytes kept registered under no pin (0 turns the cache off).
pub fn pin_cache_set_budget(bytes: u64) -> Result<()> {
    // SAFETY: no pointers.
    check(unsafe { sys::gpumem_pin_cache_set_budget(bytes) })
}

/// Statistics of the pinning service.
pub fn pin_stats() -> Result<PinStats> {
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
