// Host memory copied by several threads: the host side of staged copies (staging.cpp), where one
// core's memcpy is the bottleneck. A pool of worker threads takes parts of a copy; the calling
// thread copies a part too, then waits for the rest.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <system_error>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "core/spin_lock.hpp"
#include "memory/memory.hpp"

namespace gpumem::memory {
namespace {

// Host copies smaller than this stay on the calling thread: waking a worker costs more.
constexpr size_t kPieceBytes = size_t{128} << 10;

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

class HostCopier {
 public:
  HostCopier() {
    queue_.reserve(kMaxPieces);  // so that queueing a copy's pieces cannot fail half way
    start();
  }

  // Copies rows of width bytes (one row: a plain copy) on this thread and at most threads - 1
  // workers: rows are shared out whole, a single row in 64-byte-aligned parts.
  void copy(const RowCopy& c, unsigned threads) {
    const size_t rows = c.rows * c.slices, bytes = c.width * rows;
    if (bytes / kPieceBytes <= 1) {  // too small to split: this thread alone, no worker needed
      copy_piece({c, 0, rows, nullptr});
      return;
    }
    // Shared with other copies, never with stop(): the workers stay while a copy needs them.
    std::shared_lock<std::shared_mutex> running(running_);
    if (!started_.load(std::memory_order_acquire)) {
      running.unlock();
      {
        std::unique_lock<std::shared_mutex> starting(running_);
        if (!started_.load(std::memory_order_relaxed)) start();
      }
      running.lock();
    }
    const size_t parts = std::min<size_t>({workers_ + 1, threads, bytes / kPieceBytes, rows > 1 ? rows : SIZE_MAX});
    if (parts <= 1) {
      copy_piece({c, 0, rows, nullptr});
      return;
    }
    Job job;
    job.left.store(parts - 1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 1; i < parts; ++i) queue_.push_back(part_of(c, i, parts, &job));
      queued_.store(queue_.size(), std::memory_order_release);
    }
    if (sleeping_.load(std::memory_order_acquire)) wake_.notify_all();
    copy_piece(part_of(c, 0, parts, &job));
    // The pieces end at about the same time as this thread's, so spin before sleeping: a wake-up
    // costs as much as copying a few hundred kilobytes.
    for (int spin = 0; spin < kSpins && job.left.load(std::memory_order_acquire) != 0; ++spin) spin_pause();
    // Taking the job's mutex also waits for a worker still inside finish(), so the job may end.
    std::unique_lock<std::mutex> lock(job.mutex);
    job.done.wait(lock, [&] { return job.left.load(std::memory_order_acquire) == 0; });
  }

  // Joins the workers; a later copy starts them again. False, doing nothing, while a copy runs.
  bool stop() {
    std::unique_lock<std::shared_mutex> running(running_, std::try_to_lock);
    if (!running.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
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
  void start() {
    cpu_set_t cpus;
    const int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    const unsigned wanted =
        std::min<unsigned>(kMaxWorkers, copy_threads(static_cast<unsigned>(std::max(cores, 1))) - 1);
    threads_.reserve(wanted);
    try {
      for (; workers_ < wanted; ++workers_) {
        threads_.emplace_back([this] { work(); });
        pthread_setname_np(threads_.back().native_handle(), "gpumem-copy");  // for ps, gdb and tests
      }
    } catch (const std::system_error&) {
      // Out of threads: copy with those that started, down to the calling thread alone.
    }
    started_.store(true, std::memory_order_release);
  }

  static constexpr int kSpins = 2000;  // some tens of microseconds of pauses
  static constexpr unsigned kMaxWorkers = 15;
  // Pieces queued at once: each staged copy (at most kHostCopiesAtOnce) queues one per worker.
  static constexpr size_t kMaxPieces = kHostCopiesAtOnce * kMaxWorkers;

  // One copy's pieces on worker threads; lives on the copying thread's stack until all are done.
  struct Job {
    std::atomic<size_t> left{0};
    std::mutex mutex;
    std::condition_variable done;
  };
  // Rows first to end - 1 of a copy, counting through its slices.
  struct Piece {
    RowCopy c;
    size_t first, end;
    Job* job;
  };

  static void copy_piece(const Piece& p) {
    const RowCopy& c = p.c;
    // Rows written back to back fill whole lines however short they are, and stream from 512 bytes
    // (3D copies of 1,536-byte rows: 19 to 36 GB/s into the staging buffers); short rows apart
    // leave part lines that streamed stores write slowly (rows of 1,001 bytes: 17 to 7 GB/s).
    const bool packed = c.dst_pitch == c.width && (c.slices == 1 || c.dst_slice == c.width * c.rows);
    const size_t streamed_from = packed ? 512 : 4096;
    for (size_t f = p.first; f < p.end; ++f) {
      const size_t z = f / c.rows, y = f % c.rows;
      stream_copy(c.dst + z * c.dst_slice + y * c.dst_pitch, c.src + z * c.src_slice + y * c.src_pitch, c.width,
                  streamed_from);
    }
  }

  // Part i of parts of a copy: a share of its rows, or of its one row's bytes.
  static Piece part_of(const RowCopy& c, size_t i, size_t parts, Job* job) {
    const size_t rows = c.rows * c.slices;
    if (rows > 1) return {c, rows * i / parts, rows * (i + 1) / parts, job};
    RowCopy p = c;
    const size_t part = (c.width / parts + 63) & ~size_t{63};
    p.dst += i * part;
    p.src += i * part;
    p.width = i + 1 == parts ? c.width - i * part : part;
    return {p, 0, 1, job};
  }

  static void finish(Job& job) {
    std::lock_guard<std::mutex> lock(job.mutex);
    if (job.left.fetch_sub(1, std::memory_order_acq_rel) == 1) job.done.notify_all();
  }

  // A piece to copy, else false; `stop` set when the workers are to end (no copy is running then).
  bool take(Piece& p, bool& stop) {
    std::lock_guard<std::mutex> lock(mutex_);
    stop = stopping_;
    if (queue_.empty()) return false;
    p = queue_.front();
    queue_.erase(queue_.begin());
    queued_.store(queue_.size(), std::memory_order_release);
    return true;
  }

  void work() {
    for (;;) {
      Piece p;
      bool stop = false;
      for (int spin = 0; !take(p, stop); ++spin) {
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
      copy_piece(p);
      finish(*p.job);
    }
  }

  unsigned workers_ = 0;
  std::vector<std::thread> threads_;
  std::atomic<bool> started_{false};
  std::shared_mutex running_;  // copies hold it shared; stop() alone
  bool stopping_ = false;      // under mutex_
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Piece> queue_;  // a handful at most: taken from the front
  std::atomic<size_t> queued_{0};
  std::atomic<unsigned> sleeping_{0};
};

HostCopier& host_copier() {
  static HostCopier* c = new HostCopier;  // leaked: copies may run during exit; gpumem_shutdown joins its threads
  return *c;
}

}  // namespace

void host_copy_rows(const RowCopy& copy, unsigned threads) { host_copier().copy(copy, threads); }

bool stop_host_copier() { return host_copier().stop(); }

}  // namespace gpumem::memory
