// Errors inside the library: thrown as gpumem::Error, turned into a status at the C boundary.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include "gpumem/core.h"

namespace gpumem {

class Error : public std::exception {
 public:
  Error(gpumem_status_t status, std::string detail, int32_t cuda_result = 0)
      : status_(status), cuda_result_(cuda_result), detail_(std::move(detail)) {}
  const char* what() const noexcept override { return detail_.c_str(); }
  gpumem_status_t status() const noexcept { return status_; }
  int32_t cuda_result() const noexcept { return cuda_result_; }

 private:
  gpumem_status_t status_;
  int32_t cuda_result_;
  std::string detail_;
};

// printf-style formatting into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// "1 byte", "4,096 bytes": a byte count for a detail.
std::string bytes(uint64_t n);

// A count with thousands separators, as the details print them: 1073741824 -> "1,073,741,824".
std::string grouped(uint64_t n);

[[noreturn]] void fail(gpumem_status_t status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Argument checks shared by the C boundary: throw GPUMEM_ERROR_INVALID_ARGUMENT naming the argument.
inline void require(bool ok, const char* what) {
  if (!ok) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s", what);
}
template <class T>
inline void require_out(T* out, const char* name) {
  if (out == nullptr) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s is NULL", name);
}

// Status names and messages, and the calling thread's record of its last failure.
const char* status_name(gpumem_status_t status) noexcept;
const char* status_message(gpumem_status_t status) noexcept;
void record_failure(gpumem_status_t status, const char* detail, int32_t cuda_result) noexcept;
const char* last_error_detail() noexcept;
int32_t last_cuda_result() noexcept;

}  // namespace gpumem
