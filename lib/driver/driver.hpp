// The CUDA driver, opened at run time: entry points, error mapping, primary contexts.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <initializer_list>

#include "core/error.hpp"
#include "driver/entry_points.h"

namespace gpumem::driver {

// The resolved entry points; a member is null where the driver lacks that version.
struct Api {
#define GPUMEM_DRIVER_MEMBER(name, version) PFN_##name##_v##version name = nullptr;
  GPUMEM_DRIVER_ENTRY_POINTS(GPUMEM_DRIVER_MEMBER)
#undef GPUMEM_DRIVER_MEMBER
};

// The loaded driver. Throws GPUMEM_ERROR_NO_DRIVER (with what is missing) if there is none.
const Api& api();

// Like api(), and also throws GPUMEM_ERROR_NO_DEVICE if the driver sees no device.
const Api& device_api();

// The number of devices; throws as device_api() does.
int device_count();

// Throws GPUMEM_ERROR_INVALID_DEVICE unless 0 <= device < device_count().
void require_device(int device);

// The driver's handle of a device ordinal, and the location of its memory for the cuMem calls.
CUdevice cu_device(int device);
CUmemLocation device_location(int device);
// Whether peer_device's kernels and copies can reach device's memory (cuDeviceCanAccessPeer).
bool can_access_peer(int peer_device, int device);

// The device's primary context, retained on first use and kept for the life of the process.
CUcontext primary_context(int device);

// The device of the calling thread's current context, or 0 if it has none.
int current_device();

// The context a call with no device argument works in: the calling thread's current context if
// it has one (so it follows cudaSetDevice), else device 0's primary context.
CUcontext current_context();

// The context a stream belongs to; NULL for the default streams (NULL, legacy, per-thread), whose
// context is the caller's choice.
CUcontext stream_context(CUstream stream);

// Throws the status that matches a failed CUresult, with "<what>: CUDA_ERROR_X (message)".
[[noreturn]] void throw_result(CUresult result, const std::string& what);
inline void check(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) throw_result(result, what);
}

// Runs f, except that if the driver has shut down (at process exit, taking all memory with it)
// f's failure is dropped: frees then succeed and do nothing.
template <class F>
void unless_shut_down(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    if (e.cuda_result() != CUDA_ERROR_DEINITIALIZED) throw;
  }
}

// Puts the calling thread's stream captures in relaxed mode for the scope, so that one-time set-up
// (loading a module, enabling peer access) may run while the caller captures a graph in global
// mode without spoiling the capture; as CuPy and PyTorch do around their allocations.
class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope();
  ~RelaxedCaptureScope();
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

// Refuses synchronous work while a capture into a CUDA graph is in progress that the work would
// break: the driver refuses such a call and invalidates the capture, so the check comes first, as
// CuPy's does. Throws GPUMEM_ERROR_STREAM_CAPTURE ("<fn>: ... <work> ...; <instead>") when, in one
// of the contexts (null ones skipped; none given: the current one),
//   - a blocking stream is capturing (the legacy stream, which synchronous work uses, answers
//     CUDA_ERROR_STREAM_CAPTURE_IMPLICIT then), in any capture mode and on any thread;
//   - the calling thread's per-thread default stream is capturing;
// or the stream given (NULL: none) is. Captures on non-blocking streams that the call is not given
// are invisible to the driver's queries, and are left to the driver. Only cuStreamIsCapturing is
// asked, which leaves every capture as it is; three calls or so per context, off the fast paths.
void refuse_during_capture(const char* fn, const char* work, const char* instead,
                           std::initializer_list<CUcontext> contexts = {}, CUstream stream = nullptr);

// Whether the calling thread's captures are in relaxed mode, where the driver lets synchronous
// allocations and frees run during a capture (PyTorch and CuPy grow their pools so).
bool capture_mode_relaxed();

// The legacy default stream, as a stream argument names it (NULL, or CU_STREAM_LEGACY).
inline bool is_legacy_stream(CUstream stream) { return stream == nullptr || stream == CU_STREAM_LEGACY; }

// Makes a context current for the scope, restoring the caller's afterwards; does nothing if it
// is current already.
class ContextScope {
 public:
  explicit ContextScope(CUcontext context);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  bool pushed_ = false;
};

}  // namespace gpumem::driver
