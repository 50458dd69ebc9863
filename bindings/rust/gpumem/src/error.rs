//! Statuses and errors (core.h).

use crate::{static_str, sys};
use std::ffi::CStr;
use std::fmt;

/// A `gpumem_status_t`: 0 for success or a negative error code. An integer, not an enum, so that
/// codes a newer library adds are kept as they are.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(pub i32);

impl Status {
    /// The call did what was asked.
    pub const SUCCESS: Status = Status(sys::GPUMEM_SUCCESS);
    /// An argument is NULL, zero, out of range or an unknown flag.
    pub const INVALID_ARGUMENT: Status = Status(sys::GPUMEM_ERROR_INVALID_ARGUMENT);
    /// The device or the host has no memory for the request.
    pub const OUT_OF_MEMORY: Status = Status(sys::GPUMEM_ERROR_OUT_OF_MEMORY);
    /// No usable CUDA driver could be loaded.
    pub const NO_DRIVER: Status = Status(sys::GPUMEM_ERROR_NO_DRIVER);
    /// The driver is loaded but reports no CUDA device.
    pub const NO_DEVICE: Status = Status(sys::GPUMEM_ERROR_NO_DEVICE);
    /// The device index is not that of a present device.
    pub const INVALID_DEVICE: Status = Status(sys::GPUMEM_ERROR_INVALID_DEVICE);
    /// The device or the driver lacks the capability.
    pub const NOT_SUPPORTED: Status = Status(sys::GPUMEM_ERROR_NOT_SUPPORTED);
    /// The pointer is not memory of the kind the call needs.
    pub const INVALID_POINTER: Status = Status(sys::GPUMEM_ERROR_INVALID_POINTER);
    /// The handle is NULL, destroyed or not one of gpumem's.
    pub const INVALID_HANDLE: Status = Status(sys::GPUMEM_ERROR_INVALID_HANDLE);
    /// The host range is already registered with the driver.
    pub const ALREADY_REGISTERED: Status = Status(sys::GPUMEM_ERROR_ALREADY_REGISTERED);
    /// Not allowed while a stream is being captured into a graph.
    pub const STREAM_CAPTURE: Status = Status(sys::GPUMEM_ERROR_STREAM_CAPTURE);
    /// Another CUDA error; [`Error::cuda_result`] holds the driver's code.
    pub const DRIVER: Status = Status(sys::GPUMEM_ERROR_DRIVER);
    /// A defect in gpumem, or a panic in a Rust callback; the detail says where.
    pub const INTERNAL: Status = Status(sys::GPUMEM_ERROR_INTERNAL);
    /// The allocator did not hand out this pointer, or it is freed already.
    pub const NOT_OWNED: Status = Status(sys::GPUMEM_ERROR_NOT_OWNED);
    /// The handle is in use: live allocations, or another object relies on it.
    pub const BUSY: Status = Status(sys::GPUMEM_ERROR_BUSY);
    /// A file could not be opened, read or written.
    pub const IO: Status = Status(sys::GPUMEM_ERROR_IO);

    /// The code's name, such as "GPUMEM_ERROR_OUT_OF_MEMORY" ("GPUMEM_UNKNOWN_STATUS" for a code
    /// the loaded library does not know).
    pub fn name(self) -> &'static str {
        // SAFETY: any value is accepted; the result is a static string.
        static_str(unsafe { sys::gpumem_status_name(self.0) })
    }

    /// The code's one-line message, such as "out of memory".
    pub fn message(self) -> &'static str {
        // SAFETY: any value is accepted; the result is a static string.
        static_str(unsafe { sys::gpumem_status_string(self.0) })
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Status> for i32 {
    fn from(status: Status) -> i32 {
        status.0
    }
}

impl PartialEq<Status> for i32 {
    fn eq(&self, other: &Status) -> bool {
        *self == other.0
    }
}

impl PartialEq<i32> for Status {
    fn eq(&self, other: &i32) -> bool {
        self.0 == *other
    }
}

/// A failed gpumem call: its status, the library's explanation for the calling thread, and the
/// `CUresult` behind it (0 where gpumem refused the call itself).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Error {
    /// What failed, a negative status: `e.status == Status::OUT_OF_MEMORY`.
    pub status: Status,
    /// What went wrong, with the numbers that matter (`gpumem_last_error_detail()`).
    pub detail: String,
    /// The driver's `CUresult` (`gpumem_last_cuda_result()`); 0 if the driver was not at fault.
    pub cuda_result: i32,
}

impl Error {
    /// An error of this crate's own, with no CUDA result. `status` is an error, so negative.
    pub fn new(status: Status, detail: impl Into<String>) -> Error {
        debug_assert!(status.0 < 0, "{:?} is not an error", status);
        Error {
            status,
            detail: detail.into(),
            cuda_result: 0,
        }
    }

    /// The error the library just reported on this thread with `status`.
    pub(crate) fn last(status: i32) -> Error {
        // SAFETY: no arguments; the detail is a NUL-terminated string valid until the next
        // failing call on this thread, and is copied at once.
        let detail = unsafe { CStr::from_ptr(sys::gpumem_last_error_detail()) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: no arguments; per-thread state.
        let cuda_result = unsafe { sys::gpumem_last_cuda_result() };
        Error {
            status: Status(status),
            detail,
            cuda_result,
        }
    }

    /// The status's name, such as "GPUMEM_ERROR_NOT_OWNED".
    pub fn name(&self) -> &'static str {
        self.status.name()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            f.write_str(self.name())
        } else {
            write!(f, "{}: {}", self.name(), self.detail)
        }
    }
}

impl std::error::Error for Error {}

/// The result of a gpumem call.
pub type Result<T> = std::result::Result<T, Error>;

/// Ok for success, else the error the library left for this thread.
pub(crate) fn check(status: i32) -> Result<()> {
    if status == sys::GPUMEM_SUCCESS {
        Ok(())
    } else {
        Err(Error::last(status))
    }
}

/// An error this crate reports about an argument before calling the library.
pub(crate) fn invalid(detail: impl Into<String>) -> Error {
    Error::new(Status::INVALID_ARGUMENT, detail)
}
