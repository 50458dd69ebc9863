// Memset and 1D copies between any two kinds of memory.
#include <algorithm>

#include "memory/memory.hpp"

namespace gpumem::memory {
namespace {

CUdeviceptr address(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

void require_no_wrap(const void* p, size_t size, const char* role) {
  if (reinterpret_cast<uintptr_t>(p) + size < reinterpret_cast<uintptr_t>(p))
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s range %p + %s bytes wraps around the address space", role, p,
         grouped(size).c_str());
}

// The check gpumem_memset(), gpumem_copy() and their _async forms on the legacy stream make, with
// the context of the work current; ctx is another context the work touches, or NULL. `instead`,
// what a synchronous call could do, is a literal: nothing is formatted unless a capture refuses.
void refuse_during_capture(const char* fn, bool async, CUstream stream, const char* sync_work, const char* instead,
                           CUcontext ctx) {
  if (!async) {
    driver::refuse_during_capture(fn, sync_work, instead, {driver::current_context(), ctx});
  } else if (driver::is_legacy_stream(stream)) {
    driver::refuse_during_capture(fn, "work queued on the legacy stream",
                                  "queue it on the capturing stream, or on a stream of your own",
                                  {driver::current_context(), ctx});
  }
}

}  // namespace

void wait_legacy_stream(const char* what) { driver::check(driver::api().cuStreamSynchronize(CU_STREAM_LEGACY), what); }

void memset(void* dst, uint32_t value, unsigned element_size, size_t count, CUstream stream, bool async) {
  require(dst != nullptr, "dst is NULL");
  if (element_size != 1 && element_size != 2 && element_size != 4)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "element_size %u is not 1, 2 or 4", element_size);
  if (element_size < 4 && value >> (8 * element_size) != 0)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "value 0x%x does not fit in %u byte%s", value, element_size,
         element_size == 1 ? "" : "s");
  if (reinterpret_cast<uintptr_t>(dst) % element_size != 0)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "dst %p is not aligned to the element size %u", dst, element_size);
  if (count > SIZE_MAX / element_size)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s elements of %u bytes overflow size_t", grouped(count).c_str(),
         element_size);
  if (count == 0) return;
  const size_t total = count * element_size;
  require_no_wrap(dst, total, "dst");
  const PointerInfo info = pointer_info(dst);
  if (info.memory_type == GPUMEM_MEMORY_UNREGISTERED)
    fail(GPUMEM_ERROR_INVALID_POINTER, "dst %p is %s, which the device cannot write; use the C library's memset()", dst,
         describe_kind(info).c_str());
  require_within_allocation(dst, total, info, "dst");
  const driver::Api& a = driver::api();
  driver::ContextScope scope(async ? context_for(stream, info) : context_of(info));
  refuse_during_capture(async ? "gpumem_memset_async" : "gpumem_memset", async, stream, "a synchronous memset",
                        "queue it on the capturing stream with gpumem_memset_async, or call gpumem_memset after the "
                        "capture ends",
                        nullptr);
  CUresult r;
  const CUdeviceptr d = address(dst);
  switch (element_size) {
    case 1:
      r = async ? a.cuMemsetD8Async(d, static_cast<unsigned char>(value), count, stream)
                : a.cuMemsetD8(d, static_cast<unsigned char>(value), count);
      break;
    case 2:
      r = async ? a.cuMemsetD16Async(d, static_cast<unsigned short>(value), count, stream)
                : a.cuMemsetD16(d, static_cast<unsigned short>(value), count);
      break;
    default:
      r = async ? a.cuMemsetD32Async(d, value, count, stream) : a.cuMemsetD32(d, value, count);
      break;
  }
  if (r != CUDA_SUCCESS)
    driver::throw_result(
        r, format("memset of %s elements of %s at %p", grouped(count).c_str(), bytes(element_size).c_str(), dst));
  if (!async) wait_legacy_stream("waiting for the memset");
}

void copy(void* dst, const void* src, size_t size, CUstream stream, bool async) {
  require(dst != nullptr, "dst is NULL");
  require(src != nullptr, "src is NULL");
  if (size == 0) return;
  require_no_wrap(dst, size, "dst");
  require_no_wrap(src, size, "src");
  // One address space (unified addressing), so overlap is a comparison of addresses.
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d < s + size && s < d + size)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "dst %p and src %p overlap: a copy of %s between them would read what it wrote",
         dst, src, bytes(size).c_str());
  const PointerInfo to = pointer_info(dst);
  const PointerInfo from = pointer_info(src);
  require_within_allocation(dst, size, to, "dst");
  require_within_allocation(src, size, from, "src");
  const PointerInfo& device_side = to.memory_type != GPUMEM_MEMORY_UNREGISTERED ? to : from;
  const driver::Api& a = driver::api();
  driver::ContextScope scope(async ? context_for(stream, device_side) : context_of(device_side));
  // A copy between the memory of two devices runs on both.
  const PointerInfo& other_side = &device_side == &to ? from : to;
  refuse_during_capture(
      async ? "gpumem_copy_async" : "gpumem_copy", async, stream, "a synchronous copy",
      "queue it on the capturing stream with gpumem_copy_async, or call gpumem_copy after the capture "
      "ends",
      other_side.memory_type == GPUMEM_MEMORY_DEVICE ? context_of(other_side) : nullptr);
  if (to.memory_type == GPUMEM_MEMORY_DEVICE && from.memory_type == GPUMEM_MEMORY_DEVICE && to.device != from.device)
    ensure_peer_access(to.device, from.device);
  // Plain host memory on one side and device memory on the other: gpumem's staging is faster than
  // the driver's for large copies (see staging.cpp).
  const bool host_to_device = from.memory_type == GPUMEM_MEMORY_UNREGISTERED && to.memory_type == GPUMEM_MEMORY_DEVICE;
  const bool device_to_host = to.memory_type == GPUMEM_MEMORY_UNREGISTERED && from.memory_type == GPUMEM_MEMORY_DEVICE;
  if ((host_to_device || device_to_host) &&
      staged_copy({static_cast<char*>(dst), size, size}, {static_cast<char*>(const_cast<void*>(src)), size, size}, size,
                  1, 1, host_to_device, stream, async))
    return;
  // The driver refuses a copy whose page-locked side runs over the end of its registration (into
  // the next one, as the pinning service leaves them, or into plain memory): such a copy goes in
  // pieces, one per registration. Almost every copy is one piece, asking the driver nothing more.
  PointerInfo piece_to = to, piece_from = from;
  for (size_t done = 0; done < size;) {
    size_t n = size - done;
    const uintptr_t at_dst = reinterpret_cast<uintptr_t>(dst) + done, at_src = reinterpret_cast<uintptr_t>(src) + done;
    if (done) {
      piece_to = pointer_info(reinterpret_cast<void*>(at_dst));
      piece_from = pointer_info(reinterpret_cast<void*>(at_src));
    }
    if (piece_to.memory_type == GPUMEM_MEMORY_HOST && piece_to.size)
      n = std::min<size_t>(n, piece_to.base + piece_to.size - at_dst);
    if (piece_from.memory_type == GPUMEM_MEMORY_HOST && piece_from.size)
      n = std::min<size_t>(n, piece_from.base + piece_from.size - at_src);
    const CUresult r = async ? a.cuMemcpyAsync(at_dst, at_src, n, stream) : a.cuMemcpy(at_dst, at_src, n);
    if (r != CUDA_SUCCESS)
      driver::throw_result(r, format("copy of %s bytes from %p (%s) to %p (%s)", grouped(n).c_str(),
                                     reinterpret_cast<void*>(at_src), describe_kind(piece_from).c_str(),
                                     reinterpret_cast<void*>(at_dst), describe_kind(piece_to).c_str()));
    done += n;
  }
  if (!async && copy_lands_later(to)) wait_legacy_stream("waiting for the copy");
}

}  // namespace gpumem::memory
