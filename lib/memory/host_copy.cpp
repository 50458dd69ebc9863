// Host memory copied by several threads: the host side of staged copies (staging.cpp), where one
// core's memcpy is the bottleneck. A pool of worker threads takes parts of a copy as they come
// free; the calling thread takes parts too, then waits for the rest.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "core/spin_lock.hpp"
#include "memory/host_copy.hpp"
#include "memory/memory.hpp"

namespace gpumem::memory {
namespace {

// Host copies under twice this stay on the calling thread: waking a worker costs more.
constexpr size_t kPieceBytes = size_t{128} << 10;

// A part of a copy that one thread takes at a time: whole rows up to this many bytes, else this
// many bytes of one row. Parts taken as threads come free, rather than a fixed share each, keep
// a thread slowed by the copy engine's traffic or the scheduler from holding up the rest
// (measured on the H200 machine, 1 GiB staged through 4 MiB buffers: 38.5 to 40.9 GB/s to the
// device, 30.2 to 45.6 GB/s from it).
constexpr size_t kPartBytes = size_t{32} << 10;

// Copies with non-temporal stores where the machine has them. Neither destination is read by this
// thread again soon (the copy engine reads a staging buffer; the caller's memory was written for
// later), so skipping the caches saves reading each destination line before writing it. Measured
// on the H200 machine: 1 GiB staged copies 15-25% faster to the device and 40% from it. Copies
// under `streamed_from` bytes use the caches.
void stream_copy(void* dst, const void* src, size_t n, size_t streamed_from) {
#if defined(__x86_64__)
  if (n < streamed_from) {
    std::memcpy(dst, src, n);
    return;
  }
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  std::memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, n);
  _mm_sfence();  // the streamed stores are ordered before whatever signals the copy's end
#else
  std::memcpy(dst, src, n);
#endif
}

// ---- Host copies spread over worker threads ------------------------------------------------------

// GPUMEM_COPY_THREADS, the threads a staged copy's host side uses (the calling thread among them),
// else `cores`; at least 1.
unsigned copy_threads(unsigned cores) {
  const char* text = std::getenv("GPUMEM_COPY_THREADS");
  if (!text || !*text) return cores;
  char* end = nullptr;
  errno = 0;
  const unsigned long n = std::strtoul(text, &end, 10);
  if (errno || *end || n < 1 || n > 1024 || text[0] == '-')
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "GPUMEM_COPY_THREADS=\"%s\" is not a number of threads from 1 to 1024", text);
  return static_cast<unsigned>(n);
}

}  // namespace

class HostCopier {
 public:
  HostCopier() {
    queue_.reserve(kMaxQueued);  // so that queueing a copy's helpers cannot fail half way
    start_workers();
  }

  // Queues helpers for a copy large enough to share; the workers take its parts as they come free.
  void start(HostCopy& job, unsigned threads) {
    if (threads <= 1 || job.c_.width * job.c_.rows * job.c_.slices / kPieceBytes <= 1 || job.parts_ <= 1) return;
    if (!started_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> life(lifecycle_);
      if (!started_.load(std::memory_order_relaxed)) start_workers();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Workers being joined (stop() found no copy running): this copy runs on its thread alone.
      if (stopping_ || !started_.load(std::memory_order_relaxed)) return;
      const size_t helpers = std::min<size_t>({workers_, threads - 1, job.parts_ - 1});
      if (!helpers) return;
      queue_.insert(queue_.end(), helpers, &job);
      queued_.store(queue_.size(), std::memory_order_release);
      job.helpers_ = helpers;
      ++running_;
    }
    if (sleeping_.load(std::memory_order_acquire)) wake_.notify_all();
  }

  static void drain(HostCopy& job) {
    for (size_t i; (i = job.next_.fetch_add(1, std::memory_order_relaxed)) < job.parts_;) copy_part(job, i);
  }

  // After the copying thread has drained a job it queued helpers for: withdraws those no worker
  // took, then waits for the workers inside to leave. Every part is taken by then, so they end
  // soon: spin before sleeping, as a wake-up costs as much as copying a few hundred kilobytes.
  void finish(HostCopy& job) {
    if (!job.helpers_) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.erase(std::remove(queue_.begin(), queue_.end(), &job), queue_.end());
      queued_.store(queue_.size(), std::memory_order_release);
    }
    job.helpers_ = 0;
    for (int spin = 0; spin < kSpins && job.helping_.load(std::memory_order_acquire) != 0; ++spin) spin_pause();
    {
      // Taking the job's mutex also waits for a worker still inside leave(), so the job may end.
      std::unique_lock<std::mutex> lock(job.mutex_);
      job.left_.wait(lock, [&] { return job.helping_.load(std::memory_order_acquire) == 0; });
    }
    std::lock_guard<std::mutex> lock(mutex_);
    --running_;
  }

  // Joins the workers; a later copy starts them again. False, doing nothing, while a copy runs.
  bool stop() {
    std::lock_guard<std::mutex> life(lifecycle_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (running_) return false;
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    std::lock_guard<std::mutex> lock(mutex_);
    workers_ = 0;
    stopping_ = false;
    started_.store(false, std::memory_order_release);
    return true;
  }

 private:
  // One worker per core this process may run on (its affinity, as a container's cpuset sets it)
  // but the calling thread's, at most kMaxWorkers, or GPUMEM_COPY_THREADS threads in all. A copy
  // thread moves about 7 GB/s on the H200 machine, and the rate grows with threads up to its 16
  // cores (49 GB/s alone, 42 GB/s beside a DMA transfer): bench/README.md. Called without any
  // copy running.
  void start_workers() {
    cpu_set_t cpus;
    const int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    const unsigned wanted =
        std::min<unsigned>(kMaxWorkers, copy_threads(static_cast<unsigned>(std::max(cores, 1))) - 1);
    threads_.reserve(wanted);
    try {
      while (threads_.size() < wanted) {
        threads_.emplace_back([this] { work(); });
        pthread_setname_np(threads_.back().native_handle(), "gpumem-copy");  // for ps, gdb and tests
      }
    } catch (const std::system_error&) {
      // Out of threads: copy with those that started, down to the calling thread alone.
    }
    std::lock_guard<std::mutex> lock(mutex_);
    workers_ = threads_.size();
    started_.store(true, std::memory_order_release);
  }

  static constexpr int kSpins = 2000;  // some tens of microseconds of pauses
  static constexpr unsigned kMaxWorkers = 15;
  // Helpers queued at once: two copies in flight for each staged copy, one helper per worker each.
  static constexpr size_t kMaxQueued = 2 * kHostCopiesAtOnce * kMaxWorkers;

  // Copies part i of a job: rows_per rows counting through the slices, or one cut of one row.
  static void copy_part(const HostCopy& job, size_t i) {
    const RowCopy& c = job.c_;
    // Rows written back to back fill whole lines however short they are, and stream from 512 bytes
    // (3D copies of 1,536-byte rows: 19 to 36 GB/s into the staging buffers); short rows apart
    // leave part lines that streamed stores write slowly (rows of 1,001 bytes: 17 to 7 GB/s).
    const bool packed = c.dst_pitch == c.width && (c.slices == 1 || c.dst_slice == c.width * c.rows);
    const size_t streamed_from = packed ? 512 : 4096;
    const size_t first = i / job.cuts_ * job.rows_per_, end = std::min(first + job.rows_per_, c.rows * c.slices);
    const size_t x = i % job.cuts_ * kPartBytes, width = job.cuts_ == 1 ? c.width : std::min(kPartBytes, c.width - x);
    for (size_t f = first; f < end; ++f) {
      const size_t z = f / c.rows, y = f % c.rows;
      stream_copy(c.dst + z * c.dst_slice + y * c.dst_pitch + x, c.src + z * c.src_slice + y * c.src_pitch + x, width,
                  streamed_from);
    }
  }

  static void leave(HostCopy& job) {
    std::lock_guard<std::mutex> lock(job.mutex_);
    if (job.helping_.fetch_sub(1, std::memory_order_acq_rel) == 1) job.left_.notify_all();
  }

  // A job to help with, else null; `stop` set when the workers are to end (no copy runs then).
  HostCopy* take(bool& stop) {
    std::lock_guard<std::mutex> lock(mutex_);
    stop = stopping_;
    if (queue_.empty()) return nullptr;
    HostCopy* job = queue_.front();
    queue_.erase(queue_.begin());
    queued_.store(queue_.size(), std::memory_order_release);
    job->helping_.fetch_add(1, std::memory_order_relaxed);
    return job;
  }

  void work() {
    for (;;) {
      HostCopy* job = nullptr;
      bool stop = false;
      for (int spin = 0; !(job = take(stop)); ++spin) {
        if (stop) return;
        if (spin < kSpins) {
          while (spin < kSpins && queued_.load(std::memory_order_acquire) == 0) {
            spin_pause();
            ++spin;
          }
          continue;
        }
        std::unique_lock<std::mutex> lock(mutex_);
        sleeping_.fetch_add(1, std::memory_order_acq_rel);
        wake_.wait(lock, [this] { return !queue_.empty() || stopping_; });
        sleeping_.fetch_sub(1, std::memory_order_acq_rel);
        spin = 0;
      }
      drain(*job);
      leave(*job);
    }
  }

  std::mutex lifecycle_;              // starting and joining the workers
  std::vector<std::thread> threads_;  // under lifecycle_
  std::atomic<bool> started_{false};
  std::mutex mutex_;  // the queue, and what follows
  size_t workers_ = 0;
  size_t running_ = 0;  // copies with helpers queued or inside: stop() waits for none
  bool stopping_ = false;
  std::condition_variable wake_;
  std::vector<HostCopy*> queue_;  // a handful at most: taken from the front
  std::atomic<size_t> queued_{0};
  std::atomic<unsigned> sleeping_{0};
};

namespace {

HostCopier& host_copier() {
  static HostCopier* c = new HostCopier;  // leaked: copies may run during exit; gpumem_shutdown joins its threads
  return *c;
}

}  // namespace

HostCopy::HostCopy(const RowCopy& copy, unsigned threads)
    : c_(copy),
      rows_per_(c_.width && c_.width < kPartBytes ? kPartBytes / c_.width : 1),
      cuts_(c_.width > kPartBytes ? (c_.width + kPartBytes - 1) / kPartBytes : 1),
      parts_(c_.width ? (c_.rows * c_.slices + rows_per_ - 1) / rows_per_ * cuts_ : 0) {
  host_copier().start(*this, threads);
}

void HostCopy::wait() {
  if (waited_) return;
  waited_ = true;
  HostCopier::drain(*this);
  host_copier().finish(*this);
}

void host_copy_rows(const RowCopy& copy, unsigned threads) { HostCopy(copy, threads).wait(); }

bool stop_host_copier() { return host_copier().stop(); }

}  // namespace gpumem::memory
