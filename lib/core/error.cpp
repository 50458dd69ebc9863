#include "core/error.hpp"

#include <cstdarg>
#include <cstdio>

namespace gpumem {

// Every status once: its value is in core.h, its name and message here.
#define GPUMEM_STATUS_MAP(X)                                                           \
  X(GPUMEM_SUCCESS, "success")                                                         \
  X(GPUMEM_ERROR_INVALID_ARGUMENT, "invalid argument")                                 \
  X(GPUMEM_ERROR_OUT_OF_MEMORY, "out of memory")                                       \
  X(GPUMEM_ERROR_NO_DRIVER, "no usable CUDA driver")                                   \
  X(GPUMEM_ERROR_NO_DEVICE, "no CUDA device")                                          \
  X(GPUMEM_ERROR_INVALID_DEVICE, "no such device")                                     \
  X(GPUMEM_ERROR_NOT_SUPPORTED, "not supported by this device or driver")              \
  X(GPUMEM_ERROR_INVALID_POINTER, "pointer is not memory of the kind this call needs") \
  X(GPUMEM_ERROR_INVALID_HANDLE, "invalid handle")                                     \
  X(GPUMEM_ERROR_ALREADY_REGISTERED, "host memory is already registered")              \
  X(GPUMEM_ERROR_STREAM_CAPTURE, "not allowed while a stream is being captured")       \
  X(GPUMEM_ERROR_DRIVER, "CUDA driver error")                                          \
  X(GPUMEM_ERROR_INTERNAL, "internal error in gpumem")                                 \
  X(GPUMEM_ERROR_NOT_OWNED, "pointer was not allocated by this allocator")             \
  X(GPUMEM_ERROR_BUSY, "handle is still in use")                                       \
  X(GPUMEM_ERROR_IO, "file could not be opened, read or written")

const char* status_name(gpumem_status_t status) noexcept {
  switch (status) {
#define X(code, message) \
  case code:             \
    return #code;
    GPUMEM_STATUS_MAP(X)
#undef X
  }
  return "GPUMEM_UNKNOWN_STATUS";
}

const char* status_message(gpumem_status_t status) noexcept {
  switch (status) {
#define X(code, message) \
  case code:             \
    return message;
    GPUMEM_STATUS_MAP(X)
#undef X
  }
  return "unknown status";
}

namespace {
struct LastFailure {
  std::string detail;
  int32_t cuda_result = 0;
};
thread_local LastFailure last_failure;

std::string vformat(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  return out;
}
}  // namespace

void record_failure(gpumem_status_t, const char* detail, int32_t cuda_result) noexcept {
  try {
    last_failure.detail = detail;
  } catch (...) {
    last_failure.detail.clear();  // no memory for the text: an empty detail beats none at all
  }
  last_failure.cuda_result = cuda_result;
}

const char* last_error_detail() noexcept { return last_failure.detail.c_str(); }
int32_t last_cuda_result() noexcept { return last_failure.cuda_result; }

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string out = vformat(fmt, args);
  va_end(args);
  return out;
}

std::string grouped(uint64_t n) {
  // Appended, not inserted: GCC 12 warns (-Wrestrict, falsely) on std::string::insert at -O2.
  const std::string digits = std::to_string(n);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string bytes(uint64_t n) { return grouped(n) + (n == 1 ? " byte" : " bytes"); }

void fail(gpumem_status_t status, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string detail = vformat(fmt, args);
  va_end(args);
  throw Error(status, std::move(detail));
}

}  // namespace gpumem
