// Host memory copied by several threads (host_copy.cpp): the host side of staged copies.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace gpumem::memory {

// Rows of host memory to copy: row y of slice z from src + z * src_slice + y * src_pitch to the
// same place of dst.
struct RowCopy {
  char* dst;
  const char* src;
  size_t width, rows, dst_pitch, src_pitch;
  size_t slices = 1, dst_slice = 0, src_slice = 0;
};

// Staged copies that may run their host side at once (staging's sets), each with two HostCopy
// objects alive: the host copier's queue holds their helpers without allocating.
constexpr size_t kHostCopiesAtOnce = 2;

class HostCopier;

// A host copy shared with the host copier's worker threads from the moment it is made, so the
// making thread can call the driver while they copy; wait() copies what is left on this thread
// and returns once every byte is copied. Workers hold its address until then: not movable, and
// the destructor waits.
class HostCopy {
 public:
  // Copies on this thread and up to threads - 1 workers.
  HostCopy(const RowCopy& copy, unsigned threads);
  ~HostCopy() { wait(); }
  HostCopy(const HostCopy&) = delete;
  HostCopy& operator=(const HostCopy&) = delete;
  void wait();

 private:
  friend class HostCopier;
  const RowCopy c_;
  const size_t rows_per_, cuts_, parts_;  // rows a part, parts a row (one of them is 1), parts in all
  std::atomic<size_t> next_{0};           // the next part to take
  std::atomic<size_t> helping_{0};        // workers inside: counted up under the copier's queue mutex
  size_t helpers_ = 0;                    // queued; 0 once withdrawn or if none were needed
  bool waited_ = false;
  std::mutex mutex_;
  std::condition_variable left_;
};

// Copies on this thread and up to threads - 1 of the host copier's workers.
void host_copy_rows(const RowCopy& copy, unsigned threads);
// Joins the host copier's worker threads (a later copy starts them again); false while a copy runs.
bool stop_host_copier();
// Copies host memory as staging does: split over its worker threads when large. For tests.
void host_copy(void* dst, const void* src, size_t size);

}  // namespace gpumem::memory
