"""Exceptions: one class per gpumem status (core.h), and LibraryError for loading."""


class LibraryError(ImportError):
    """libgpumem could not be loaded, or is older than this package needs."""


class Error(Exception):
    """A gpumem call failed; `status` is its gpumem_status_t, `detail` the library's explanation."""

    STATUS = None
    NAME = "GPUMEM_UNKNOWN_STATUS"

    def __init__(self, status, detail=""):
        super().__init__(status, detail)
        self.status = status
        self.detail = detail

    @property
    def name(self):
        """The status's name, such as "GPUMEM_ERROR_OUT_OF_MEMORY"."""
        return _BY_STATUS.get(self.status, Error).NAME

    def __str__(self):
        return f"{self.name}: {self.detail}" if self.detail else self.name


class InvalidArgument(Error, ValueError):
    """An argument is NULL, zero, out of range or an unknown flag."""

    STATUS, NAME = -1, "GPUMEM_ERROR_INVALID_ARGUMENT"


class OutOfMemory(Error, MemoryError):
    """The device or the host has no memory for the request."""

    STATUS, NAME = -2, "GPUMEM_ERROR_OUT_OF_MEMORY"


class NoDriver(Error):
    """No usable CUDA driver could be loaded."""

    STATUS, NAME = -3, "GPUMEM_ERROR_NO_DRIVER"


class NoDevice(Error):
    """The driver is loaded but reports no CUDA device."""

    STATUS, NAME = -4, "GPUMEM_ERROR_NO_DEVICE"


class InvalidDevice(Error):
    """The device index is not that of a present device."""

    STATUS, NAME = -5, "GPUMEM_ERROR_INVALID_DEVICE"


class NotSupported(Error):
    """The device or the driver lacks the capability."""

    STATUS, NAME = -6, "GPUMEM_ERROR_NOT_SUPPORTED"


class InvalidPointer(Error):
    """The pointer is not memory of the kind the call needs."""

    STATUS, NAME = -7, "GPUMEM_ERROR_INVALID_POINTER"


class InvalidHandle(Error):
    """The handle is NULL, destroyed or not one of gpumem's."""

    STATUS, NAME = -8, "GPUMEM_ERROR_INVALID_HANDLE"


class AlreadyRegistered(Error):
    """The host range is already registered with the driver."""

    STATUS, NAME = -9, "GPUMEM_ERROR_ALREADY_REGISTERED"


class StreamCapture(Error):
    """Not allowed while a stream is being captured into a graph."""

    STATUS, NAME = -10, "GPUMEM_ERROR_STREAM_CAPTURE"


class DriverError(Error):
    """Another CUDA error; `cuda_result` holds the driver's code."""

    STATUS, NAME = -11, "GPUMEM_ERROR_DRIVER"


class InternalError(Error):
    """A defect in gpumem; the detail says where."""

    STATUS, NAME = -12, "GPUMEM_ERROR_INTERNAL"


class NotOwned(Error):
    """The allocator did not hand out this pointer, or it is freed already."""

    STATUS, NAME = -13, "GPUMEM_ERROR_NOT_OWNED"


class Busy(Error):
    """The handle is in use: live allocations, or another object relies on it."""

    STATUS, NAME = -14, "GPUMEM_ERROR_BUSY"


class IoError(Error):
    """A file could not be opened, read or written."""

    STATUS, NAME = -15, "GPUMEM_ERROR_IO"


_BY_STATUS = {cls.STATUS: cls for cls in Error.__subclasses__()}


def error_for(status, detail="", cuda_result=0):
    """The exception for a failing status (an unknown one gives the base Error)."""
    error = _BY_STATUS.get(status, Error)(status, detail)
    error.cuda_result = cuda_result
    return error
