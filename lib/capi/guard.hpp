// The one wrapper around every extern "C" body: exceptions become statuses and details.
#pragma once

#include <cstring>
#include <new>

#include "core/error.hpp"

namespace gpumem::capi {

template <class Body>
gpumem_status_t guard(Body&& body) noexcept {
  try {
    body();
    return GPUMEM_SUCCESS;
  } catch (const Error& e) {
    record_failure(e.status(), e.what(), e.cuda_result());
    return e.status();
  } catch (const std::bad_alloc&) {
    record_failure(GPUMEM_ERROR_OUT_OF_MEMORY, "out of host memory for gpumem's own bookkeeping", 0);
    return GPUMEM_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    record_failure(GPUMEM_ERROR_INTERNAL, e.what(), 0);
    return GPUMEM_ERROR_INTERNAL;
  } catch (...) {
    record_failure(GPUMEM_ERROR_INTERNAL, "unknown exception", 0);
    return GPUMEM_ERROR_INTERNAL;
  }
}

// A struct_size beyond this is garbage, not a struct from a newer gpumem.
constexpr size_t kMaxStructSize = 65536;

inline void refuse_oversized(size_t struct_size, size_t own, const char* name) {
  if (struct_size > kMaxStructSize)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s->struct_size is %zu, more than any gpumem struct; set it to sizeof (%zu)",
         name, struct_size, own);
}

// Every struct is at its first released size, so struct_size must be at least this library's.
inline void refuse_undersized(size_t struct_size, size_t own, const char* name) {
  if (struct_size < own)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s->struct_size is %zu; set it to sizeof (%zu)", name, struct_size, own);
}

// Checks a caller's output struct and clears all of it but struct_size, as far as struct_size
// says it reaches: fields of a newer gpumem that this library does not know read as zero.
template <class T>
T& out_struct(T* out, const char* name) {
  require_out(out, name);
  const size_t struct_size = out->struct_size;
  refuse_oversized(struct_size, sizeof(T), name);
  const size_t head = sizeof out->struct_size;
  if (struct_size > head) std::memset(reinterpret_cast<char*>(out) + head, 0, struct_size - head);
  refuse_undersized(struct_size, sizeof(T), name);
  return *out;
}

// Fills a caller's output struct from one built in full, so a failure leaves it cleared.
template <class T, class Fill>
void fill_struct(T* out, const char* name, Fill&& fill) {
  T& dest = out_struct(out, name);
  T result = dest;
  fill(result);
  dest = result;
}

// Checks a caller's input struct: not NULL, and at least its first released size.
template <class T>
const T& in_struct(const T* in, const char* name) {
  if (!in) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s is NULL", name);
  refuse_oversized(in->struct_size, sizeof(T), name);
  refuse_undersized(in->struct_size, sizeof(T), name);
  return *in;
}

// The body of gpumem_<x>_init(): fills *out with the defaults of its INIT macro.
template <class T>
void init_struct(T* out, const char* name, size_t struct_size, const char* type, const T& defaults) {
  require_out(out, name);
  if (struct_size < sizeof(T))
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "struct_size is %zu; pass sizeof(%s) (%zu)", struct_size, type, sizeof(T));
  *out = defaults;
}

}  // namespace gpumem::capi
