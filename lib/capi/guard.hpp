// The one wrapper around every extern "C" body: exceptions become statuses and details.
#pragma once

#include <cstring>
#include <new>

#include "capi/structs.hpp"
#include "core/error.hpp"
#include "gpumem/gpumem_version.h"

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

// A struct may be as small as when it was first released (lib/capi/structs.hpp): a caller built
// against that release's header passes that size to this library.
template <class T>
void refuse_undersized(size_t struct_size, const char* name) {
  using Abi = AbiStruct<T>;
  if (struct_size < Abi::first_size)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "%s->struct_size is %zu, less than %s had in gpumem %s, its first release (%zu bytes); set it to sizeof "
         "(%zu here)",
         name, struct_size, Abi::name, Abi::since, Abi::first_size, sizeof(T));
}

// The bytes [from, to) of a caller's struct that this library does not know: they must be zero,
// as a caller built against a newer header that leaves the newer fields alone has them, so that
// a field this library cannot honour is refused rather than ignored (Linux's
// copy_struct_from_user does the same).
template <class T>
void refuse_unknown_fields(const T* in, size_t struct_size, const char* name) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (size_t i = sizeof(T); i < struct_size; ++i)
    if (bytes[i] != 0)
      fail(GPUMEM_ERROR_INVALID_ARGUMENT,
           "%s->struct_size is %zu, more than the %zu bytes of %s in this gpumem (%s), and byte %zu is not zero: "
           "the caller sets a field this gpumem does not have; leave it zero or load a newer gpumem",
           name, struct_size, sizeof(T), AbiStruct<T>::name, GPUMEM_VERSION_STRING, i);
}

// The bytes of a struct that both the caller's struct_size and this library's layout hold.
template <class T>
size_t common_size(size_t struct_size) {
  return struct_size < sizeof(T) ? struct_size : sizeof(T);
}

// Checks a caller's output struct and clears all of it but struct_size, as far as struct_size
// says it reaches: fields of a newer gpumem that this library does not know read as zero. A
// struct_size it refuses as garbage leaves the struct untouched; a too-small one is cleared too.
template <class T>
size_t clear_out_struct(T* out, const char* name) {
  require_out(out, name);
  const size_t struct_size = out->struct_size;
  refuse_oversized(struct_size, sizeof(T), name);
  const size_t head = sizeof out->struct_size;
  if (struct_size > head) std::memset(reinterpret_cast<char*>(out) + head, 0, struct_size - head);
  refuse_undersized<T>(struct_size, name);
  return struct_size;
}

// Fills a caller's output struct from one built in full, writing only what the caller's
// struct_size holds, so an older caller's smaller struct is filled as far as it reaches and
// nothing past it is written. A failure leaves it cleared.
template <class T, class Fill>
void fill_struct(T* out, const char* name, Fill&& fill) {
  const size_t struct_size = clear_out_struct(out, name);
  T result{};
  result.struct_size = struct_size;
  fill(result);
  const size_t head = sizeof out->struct_size;
  std::memcpy(reinterpret_cast<char*>(out) + head, reinterpret_cast<const char*>(&result) + head,
              common_size<T>(struct_size) - head);
}

// Reads a caller's input struct: not NULL, at least its first released size, and any bytes past
// this library's own size zero. The fields the caller's struct_size does not reach take their
// defaults, so a caller built against an older header gets what its release gave.
template <class T>
T in_struct(const T* in, const char* name) {
  if (!in) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s is NULL", name);
  const size_t struct_size = in->struct_size;
  refuse_oversized(struct_size, sizeof(T), name);
  refuse_undersized<T>(struct_size, name);
  refuse_unknown_fields(in, struct_size, name);
  T result = AbiStruct<T>::defaults();
  std::memcpy(static_cast<void*>(&result), in, common_size<T>(struct_size));
  result.struct_size = sizeof(T);
  return result;
}

// The body of gpumem_<x>_init(): fills *out with the defaults of its INIT macro, as far as the
// caller's struct_size reaches, and sets its struct_size to what was filled.
template <class T>
void init_struct(T* out, const char* name, size_t struct_size) {
  require_out(out, name);
  using Abi = AbiStruct<T>;
  if (struct_size < Abi::first_size)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "struct_size is %zu, less than %s had in gpumem %s, its first release (%zu bytes); pass sizeof(%s) (%zu "
         "here)",
         struct_size, Abi::name, Abi::since, Abi::first_size, Abi::name, sizeof(T));
  T defaults = Abi::defaults();
  defaults.struct_size = common_size<T>(struct_size);
  std::memcpy(static_cast<void*>(out), &defaults, defaults.struct_size);
}

}  // namespace gpumem::capi
