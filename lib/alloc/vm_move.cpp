// Moving a pool's memory from one place in its ranges to another: the physical allocations mapped
// at the source are mapped again at the destination (one physical allocation may be mapped at two
// addresses at once), given the access, and only then unmapped at the source. Nothing is made or
// freed, so a move costs no memory and keeps the bytes; it costs about what a map does.
#include "alloc/vm.hpp"

namespace gpumem::alloc {

void VmAllocator::move(uintptr_t from, uintptr_t to, size_t size, size_t& moved, size_t& lost) {
  moved = lost = 0;
  uintptr_t to_range = 0;
  {
    std::lock_guard<SpinLock> lock(mutex_);
    const bool whole = size && from % unit_ == 0 && to % unit_ == 0 && size % unit_ == 0;
    const auto* source = whole ? reservation_holding(from, size) : nullptr;
    const auto* target = whole ? reservation_holding(to, size) : nullptr;
    if (!source || !target || source->second.direct || target->second.direct || !mapped_whole(from, from + size) ||
        mapped_any(to, to + size))
      fail(GPUMEM_ERROR_INTERNAL,
           "moving %s from %p to %p: not whole units of %s mapped at the one and free at the other, in ranges the vm "
           "allocator of device %d reserved for a pool",
           bytes(size).c_str(), reinterpret_cast<void*>(from), reinterpret_cast<void*>(to), bytes(unit_).c_str(),
           device());
    to_range = target->first;
  }
  const driver::Api& a = driver::api();
  if (!a.cuMemRetainAllocationHandle) {  // a driver older than 11.0: a new physical allocation
    Ranges::move(from, to, size, moved, lost);
    return;
  }
  driver::ContextScope scope(driver::primary_context(device()));
  refuse_during_capture("gpumem_alloc", "moving device memory (cuMemMap, cuMemUnmap)");
  size_t mapped = 0;  // bytes mapped at to so far
  try {
    for (; mapped < size; mapped += unit_) {
      CUmemGenericAllocationHandle handle = 0;
      driver::check(a.cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(from + mapped)),
                    "cuMemRetainAllocationHandle (moving a pool's memory)");
      const CUresult r = a.cuMemMap(static_cast<CUdeviceptr>(to + mapped), unit_, 0, handle, 0);
      a.cuMemRelease(handle);  // the mappings hold the memory
      if (r != CUDA_SUCCESS) fail_mapping(r, "cuMemMap", size, unit_);
    }
    // Counted neither way: the same memory, mapped twice for a moment.
    set_access_and_record(to, size, to_range, false);
  } catch (...) {
    undo_move(to, mapped);
    throw;
  }
  uintptr_t from_range;
  std::vector<int> exported;  // closed outside the lock (closing may enter the driver)
  try {
    // Out of the spans first, so a change of peer access leaves it alone from here on.
    std::lock_guard<SpinLock> lock(mutex_);
    from_range = remove_span(from, from + size);
    exported = take_shared_fds(from, from + size);
  } catch (...) {
    // No host memory to split the span: nothing moved, and the second mapping goes.
    try {
      std::lock_guard<SpinLock> lock(mutex_);
      remove_span(to, to + size);
    } catch (...) {
    }
    undo_move(to, size);
    throw;
  }
  close_all(exported);
  size_t unmapped = 0;
  try {
    for (; unmapped < size; unmapped += unit_) {
      const CUresult r = a.cuMemUnmap(static_cast<CUdeviceptr>(from + unmapped), unit_);
      if (r != CUDA_SUCCESS)
        driver::throw_result(r, format("cuMemUnmap of %s at %p on device %d (moving a pool's memory)",
                                       bytes(unit_).c_str(), reinterpret_cast<void*>(from + unmapped), device()));
    }
  } catch (...) {
    // What is still mapped at from stays there: its second mapping goes.
    {
      std::lock_guard<SpinLock> lock(mutex_);
      try {
        add_span(from + unmapped, from + size, from_range);
      } catch (...) {
      }
      try {
        remove_span(to + unmapped, to + size);
      } catch (...) {
      }
    }
    undo_move(to + unmapped, size - unmapped);
    moved = unmapped;
    throw;
  }
  moved = size;
}

}  // namespace gpumem::alloc
