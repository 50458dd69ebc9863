//! CUDA streams as gpumem takes them (core.h).

use crate::sys;

/// A CUDA stream (`CUstream` / `cudaStream_t`), by value. Streams are the caller's: gpumem only
/// orders its work and its pools' arenas by them. [`Stream::DEFAULT`] (null) is the legacy
/// default stream.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Stream(usize);

impl Stream {
    /// The null stream: the legacy default stream.
    pub const DEFAULT: Stream = Stream(0);
    // The values of GPUMEM_STREAM_LEGACY and GPUMEM_STREAM_PER_THREAD: a constant cannot cast
    // their pointers to integers (the test below holds them equal).
    /// The legacy default stream named explicitly (`CU_STREAM_LEGACY`).
    pub const LEGACY: Stream = Stream(0x1);
    /// The calling thread's per-thread default stream (`CU_STREAM_PER_THREAD`).
    pub const PER_THREAD: Stream = Stream(0x2);

    /// A stream made elsewhere (the CUDA runtime, another library).
    ///
    /// # Safety
    /// `stream` must be a live CUDA stream, null, or one of the special values above, for as
    /// long as gpumem is given this `Stream`; the driver may not survive a stale handle.
    pub unsafe fn from_raw(stream: sys::gpumem_stream_t) -> Stream {
        Stream(stream as usize)
    }

    /// The handle, for calls gpumem does not make.
    pub fn as_raw(self) -> sys::gpumem_stream_t {
        self.0 as sys::gpumem_stream_t
    }

    /// The handle's value as an integer, as traces, hooks and snapshots report streams.
    pub fn addr(self) -> usize {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_streams_are_the_headers() {
        assert_eq!(Stream::DEFAULT.as_raw(), std::ptr::null_mut());
        assert_eq!(Stream::LEGACY.as_raw(), sys::GPUMEM_STREAM_LEGACY);
        assert_eq!(Stream::PER_THREAD.as_raw(), sys::GPUMEM_STREAM_PER_THREAD);
    }
}
