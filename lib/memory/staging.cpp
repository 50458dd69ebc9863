// Copies between device memory and plain (pageable) host memory through gpumem's page-locked
// staging buffers. The driver stages such copies too, one buffer at a time on one thread; here
// several host threads fill or drain one buffer while the copy engine moves another, so host
// copying and DMA overlap and the host side runs at the speed of several cores.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <iterator>
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
#include "gpumem/copy.h"
#include "memory/memory.hpp"

namespace gpumem::memory {
namespace {

// Below this the driver's own staging is as fast (measured on an H200: bench/bench_copy.cpp).
constexpr size_t kThreshold = size_t{1} << 20;
constexpr size_t kBufferBytes = size_t{4} << 20;
constexpr int kBuffers = 4;
constexpr int kSets = 2;  // copies at once; a third goes to the driver
static_assert(size_t{kSets} * kBuffers * kBufferBytes == GPUMEM_COPY_STAGING_LIMIT);
// Threads a staged copy's host side uses in each direction, at most (fewer where the process has
// fewer cores or GPUMEM_COPY_THREADS says so). Measured on the H200 machine with bench_copy, 6, 10
// and 16 threads: uploads gain up to all 16 cores (1 GiB: 24.8, 33.6, 36.5 GB/s), while downloads
// peak at 6 (256 MiB: 39.5, 31.5, 24.9 GB/s), their copies into plain memory contending with the
// copy engine's writes into the staging buffers.
constexpr unsigned kUploadThreads = 16;
constexpr unsigned kDownloadThreads = 6;
// Host copies smaller than this stay on the calling thread: waking a worker costs more.
constexpr size_t kPieceBytes = size_t{128} << 10;

// Copies with non-temporal stores where the machine has them. Neither destination is read by this
// thread again soon (the copy engine reads a staging buffer; the caller's memory was written for
// later), so skipping the caches saves reading each destination line before writing it. Measured
// on the H200 machine: 1 GiB staged copies 15-25% faster to the device and 40% from it.
void stream_copy(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (n < 4096) {
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

  // Copies on this thread and at most threads - 1 workers.
  void copy(void* dst, const void* src, size_t n, unsigned threads) {
    if (n / kPieceBytes <= 1) {  // too small to split: this thread alone, no worker needed
      stream_copy(dst, src, n);
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
    const size_t parts = std::min<size_t>({workers_ + 1, threads, n / kPieceBytes});
    if (parts <= 1) {
      stream_copy(dst, src, n);
      return;
    }
    const size_t part = (n / parts + 63) & ~size_t{63};
    Job job;
    job.left.store(parts - 1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 1; i < parts; ++i) {
        const size_t at = i * part;
        queue_.push_back(
            {static_cast<char*>(dst) + at, static_cast<const char*>(src) + at, i + 1 == parts ? n - at : part, &job});
      }
      queued_.store(queue_.size(), std::memory_order_release);
    }
    if (sleeping_.load(std::memory_order_acquire)) wake_.notify_all();
    stream_copy(dst, src, part);
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
  // Pieces queued at once: each staged copy (at most kSets at a time) queues one per worker.
  static constexpr size_t kMaxPieces = kSets * kMaxWorkers;

  // One copy's pieces on worker threads; lives on the copying thread's stack until all are done.
  struct Job {
    std::atomic<size_t> left{0};
    std::mutex mutex;
    std::condition_variable done;
  };
  struct Piece {
    char* dst;
    const char* src;
    size_t n;
    Job* job;
  };

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
      stream_copy(p.dst, p.src, p.n);
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

// ---- Staging buffers -----------------------------------------------------------------------------

struct StagingSet {
  char* buffers[kBuffers] = {};
  CUevent events[kBuffers] = {};  // recorded after the last copy that used the buffer
  bool pending[kBuffers] = {};    // recorded, and not waited for yet
  CUcontext events_context = nullptr;
  bool in_use = false;
  bool release_when_done = false;
};

struct Staging {
  std::mutex mutex;
  StagingSet sets[kSets];
  std::atomic<size_t> held{0};
};

Staging& staging() {
  static Staging* s = new Staging;  // leaked: copies may run during process exit
  return *s;
}

void wait(StagingSet& set, int b) {
  if (!set.pending[b]) return;
  driver::check(driver::api().cuEventSynchronize(set.events[b]), "waiting for a staging buffer");
  set.pending[b] = false;
}

// Waits for and destroys a set's events, in the context they belong to. A failure (a broken
// context, or a driver shut down at exit) leaves nothing to wait for, so it is dropped.
void drop_events(StagingSet& set) {
  if (!set.events_context) return;
  try {
    driver::ContextScope scope(set.events_context);
    for (int b = 0; b < kBuffers; ++b) {
      if (set.pending[b]) driver::api().cuEventSynchronize(set.events[b]);
      driver::api().cuEventDestroy(set.events[b]);
    }
  } catch (const Error&) {
  }
  for (int b = 0; b < kBuffers; ++b) {
    set.events[b] = nullptr;
    set.pending[b] = false;
  }
  set.events_context = nullptr;
}

// Frees the buffers and events of a set no copy is using.
void free_set(StagingSet& set) {
  drop_events(set);
  for (char*& buffer : set.buffers) {
    if (!buffer) continue;
    driver::api().cuMemFreeHost(buffer);  // only fails once the driver has shut down, taking it along
    buffer = nullptr;
    staging().held.fetch_sub(kBufferBytes, std::memory_order_relaxed);
  }
}

// Whether every copy that used the set has ended; asks the driver without waiting.
bool settled(StagingSet& set) {
  if (!set.events_context) return true;
  driver::ContextScope scope(set.events_context);
  for (int b = 0; b < kBuffers; ++b) {
    if (!set.pending[b]) continue;
    if (driver::api().cuEventQuery(set.events[b]) != CUDA_SUCCESS) return false;
    set.pending[b] = false;
  }
  return true;
}

// Buffers for the copy, and events in the current context. False if page-locked memory ran out.
bool prepare(StagingSet& set) {
  const driver::Api& a = driver::api();
  for (int b = 0; b < kBuffers; ++b) {
    if (set.buffers[b]) continue;
    void* p = nullptr;
    if (a.cuMemHostAlloc(&p, kBufferBytes, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) return false;
    set.buffers[b] = static_cast<char*>(p);
    staging().held.fetch_add(kBufferBytes, std::memory_order_relaxed);
  }
  CUcontext current = nullptr;
  driver::check(a.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (set.events_context != current) {
    drop_events(set);
    CUevent events[kBuffers] = {};
    for (int b = 0; b < kBuffers; ++b) {
      const CUresult r = a.cuEventCreate(&events[b], CU_EVENT_DISABLE_TIMING);
      if (r != CUDA_SUCCESS) {
        for (int made = 0; made < b; ++made) a.cuEventDestroy(events[made]);
        driver::throw_result(r, "cuEventCreate for staging");
      }
    }
    std::copy(std::begin(events), std::end(events), std::begin(set.events));
    set.events_context = current;
  }
  return true;
}

// A set taken for one copy and given back when the copy ends, however it ends.
class Lease {
 public:
  // Takes a set no copy is using and whose last copies have ended (one still in flight on another
  // stream would make this copy wait for that stream), one with buffers first; none if all are
  // busy, and the copy goes to the driver.
  Lease() {
    Staging& s = staging();
    std::lock_guard<std::mutex> lock(s.mutex);
    StagingSet* empty = nullptr;
    for (StagingSet& set : s.sets) {
      if (set.in_use) continue;
      if (!set.buffers[0]) {
        empty = empty ? empty : &set;
      } else if (settled(set)) {
        set_ = &set;
        break;
      }
    }
    if (!set_) set_ = empty;
    if (set_) set_->in_use = true;
  }
  ~Lease() {
    if (!set_) return;
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(staging().mutex);
      release = set_->release_when_done;
    }
    if (release) free_set(*set_);
    std::lock_guard<std::mutex> lock(staging().mutex);
    set_->release_when_done = false;
    set_->in_use = false;
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  StagingSet* get() const { return set_; }

 private:
  StagingSet* set_ = nullptr;
};

// Marks buffer b in use by the copy just queued on stream. Without its event nothing could tell
// when the buffer is free again, so a failure waits for the stream before it is reported.
void record(StagingSet& set, int b, CUstream stream) {
  const driver::Api& a = driver::api();
  if (const CUresult r = a.cuEventRecord(set.events[b], stream); r != CUDA_SUCCESS) {
    a.cuStreamSynchronize(stream);
    driver::throw_result(r, "cuEventRecord for staging");
  }
  set.pending[b] = true;
}

size_t chunk_for(size_t size) {
  // At least four chunks a copy, so that host copying and DMA overlap even in the smaller staged
  // copies; no smaller than the driver calls each chunk costs are worth.
  const size_t chunk = (size / 4 + 65535) & ~size_t{65535};
  return std::clamp(chunk, size_t{512} << 10, kBufferBytes);
}

void stage_to_device(StagingSet& set, char* dst, const char* src, size_t size, CUstream stream, bool async) {
  const driver::Api& a = driver::api();
  const size_t chunk = chunk_for(size);
  for (size_t done = 0, i = 0; done < size; ++i) {
    const int b = static_cast<int>(i % kBuffers);
    const size_t n = std::min(chunk, size - done);
    wait(set, b);
    host_copier().copy(set.buffers[b], src + done, n, kUploadThreads);
    driver::check(a.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst + done),
                                  reinterpret_cast<CUdeviceptr>(set.buffers[b]), n, stream),
                  "staged copy to the device");
    record(set, b, stream);
    done += n;
  }
  // The caller's memory has been read; a stream-ordered copy may end here. The buffers are
  // waited for by their next user.
  if (!async)
    for (int b = 0; b < kBuffers; ++b) wait(set, b);
}

void stage_to_host(StagingSet& set, char* dst, const char* src, size_t size, CUstream stream) {
  const driver::Api& a = driver::api();
  const size_t chunk = chunk_for(size);
  const size_t chunks = (size + chunk - 1) / chunk;
  auto issue = [&](size_t i) {
    const int b = static_cast<int>(i % kBuffers);
    const size_t at = i * chunk, n = std::min(chunk, size - at);
    wait(set, b);
    driver::check(a.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(set.buffers[b]),
                                  reinterpret_cast<CUdeviceptr>(src + at), n, stream),
                  "staged copy from the device");
    record(set, b, stream);
  };
  for (size_t i = 0; i < std::min<size_t>(kBuffers, chunks); ++i) issue(i);
  for (size_t i = 0; i < chunks; ++i) {
    const int b = static_cast<int>(i % kBuffers);
    const size_t at = i * chunk;
    wait(set, b);
    host_copier().copy(dst + at, set.buffers[b], std::min(chunk, size - at), kDownloadThreads);
    if (i + kBuffers < chunks) issue(i + kBuffers);
  }
}

}  // namespace

bool staged_copy(void* dst, const void* src, size_t size, bool to_device, CUstream stream, bool async) {
  if (size < kThreshold) return false;
  const driver::Api& a = driver::api();
  if (!async) {
    stream = CU_STREAM_LEGACY;
  } else {
    // Host work cannot be captured into a graph: the driver records (or refuses) such a copy.
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    driver::check(a.cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing");
    if (capture != CU_STREAM_CAPTURE_STATUS_NONE) return false;
  }
  Lease lease;
  StagingSet* set = lease.get();
  if (!set || !prepare(*set)) return false;
  if (to_device)
    stage_to_device(*set, static_cast<char*>(dst), static_cast<const char*>(src), size, stream, async);
  else
    stage_to_host(*set, static_cast<char*>(dst), static_cast<const char*>(src), size, stream);
  return true;
}

void host_copy(void* dst, const void* src, size_t size) { host_copier().copy(dst, src, size, kUploadThreads); }

bool stop_host_copier() { return host_copier().stop(); }

size_t staging_held() { return staging().held.load(std::memory_order_relaxed); }

void staging_release() {
  Staging& s = staging();
  // Freeing page-locked buffers (and waiting for their last copies) during a capture would break it.
  std::vector<CUcontext> contexts;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    for (StagingSet& set : s.sets)
      if (!set.in_use && (set.buffers[0] || set.events_context)) contexts.push_back(set.events_context);
  }
  for (CUcontext ctx : contexts)
    driver::refuse_during_capture("gpumem_copy_staging_release",
                                  "freeing the staging buffers (cuEventSynchronize, cuMemFreeHost)",
                                  "release them after the capture ends", {ctx});
  for (StagingSet& set : s.sets) {
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      if (set.in_use) {
        set.release_when_done = true;
        continue;
      }
      if (!set.buffers[0] && !set.events_context) continue;
      set.in_use = true;  // kept from copies while its buffers are freed outside the lock
    }
    free_set(set);
    std::lock_guard<std::mutex> lock(s.mutex);
    set.in_use = false;
  }
}

}  // namespace gpumem::memory
