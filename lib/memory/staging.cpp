// Copies between device memory and plain (pageable) host memory through gpumem's page-locked
// staging buffers, in 1D, 2D and 3D. The driver stages such copies too, one buffer at a time on one
// thread; here several host threads (host_copy.cpp) fill or drain one buffer while the copy engine
// moves another, so host copying and DMA overlap and the host side runs at the speed of several
// cores. Pitched rows are packed into a buffer, as many whole rows of a slice as fit
// (staging_pieces.hpp).
#include <algorithm>
#include <atomic>
#include <iterator>
#include <mutex>
#include <optional>
#include <vector>

#include "gpumem/copy.h"
#include "memory/host_copy.hpp"
#include "memory/memory.hpp"
#include "memory/staging_pieces.hpp"

namespace gpumem::memory {
namespace {

// Below this the driver's own staging is as fast (measured on an H200: bench/bench_copy.cpp).
constexpr size_t kThreshold = size_t{1} << 20;
constexpr int kBuffers = 4;
constexpr int kSets = 2;  // copies at once; a third goes to the driver
static_assert(size_t{kSets} * kBuffers * kStagingBufferBytes == GPUMEM_COPY_STAGING_LIMIT);
static_assert(size_t{kSets} <= kHostCopiesAtOnce);
static_assert(kBuffers >= 2);  // a piece is copied on the host while the one before it is
// Threads a staged copy's host side uses in each direction, at most (fewer where the process has
// fewer cores or GPUMEM_COPY_THREADS says so). Uploads gain up to all 16 cores of the H200 machine;
// downloads, whose copies into plain memory contend with the copy engine's writes into the staging
// buffers, ran best with 6 (bench_copy, 256 MiB and 1 GiB, three runs: 41-50 GB/s with 6, 41-45
// with 8, 7-19 with 10 in one run). Eight buffers of 8 MiB (over GPUMEM_COPY_STAGING_LIMIT) gave
// downloads 46-52 GB/s and uploads 39-45; two buffers a set, 12-38 in both directions.
constexpr unsigned kUploadThreads = 16;
constexpr unsigned kDownloadThreads = 6;

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
    staging().held.fetch_sub(kStagingBufferBytes, std::memory_order_relaxed);
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
    if (a.cuMemHostAlloc(&p, kStagingBufferBytes, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) return false;
    set.buffers[b] = static_cast<char*>(p);
    staging().held.fetch_add(kStagingBufferBytes, std::memory_order_relaxed);
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

char* at(const RowsAt& m, const Pieces::Piece& p) { return m.at + p.z * m.slice + p.y * m.pitch + p.x; }

// A piece's rows between memory laid out as m and a buffer, where they lie packed.
RowCopy to_buffer(char* buffer, const RowsAt& m, const Pieces::Piece& p) {
  return {buffer, at(m, p), p.width, p.rows, p.width, m.pitch, p.slices, p.width * p.rows, m.slice};
}
RowCopy from_buffer(const RowsAt& m, const char* buffer, const Pieces::Piece& p) {
  return {at(m, p), buffer, p.width, p.rows, m.pitch, p.width, p.slices, m.slice, p.width * p.rows};
}

// Queues the copy engine's part of a piece: rows.src to rows.dst, both in device-visible memory.
void queue_rows(const RowCopy& rows, CUstream stream, const char* what) {
  const driver::Api& a = driver::api();
  if (rows.rows == 1 && rows.slices == 1) {
    driver::check(a.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(rows.dst), reinterpret_cast<CUdeviceptr>(rows.src),
                                  rows.width, stream),
                  what);
    return;
  }
  CUDA_MEMCPY3D m{};
  m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  m.srcDevice = reinterpret_cast<CUdeviceptr>(rows.src);
  m.srcPitch = rows.src_pitch;
  m.srcHeight = rows.slices > 1 ? rows.src_slice / rows.src_pitch : rows.rows;
  m.dstDevice = reinterpret_cast<CUdeviceptr>(rows.dst);
  m.dstPitch = rows.dst_pitch;
  m.dstHeight = rows.slices > 1 ? rows.dst_slice / rows.dst_pitch : rows.rows;
  m.WidthInBytes = rows.width;
  m.Height = rows.rows;
  m.Depth = rows.slices;
  driver::check(a.cuMemcpy3DAsync(&m, stream), what);
}

// Each piece's host copy is handed to the workers (HostCopy) before this thread queues the previous
// piece's DMA, so that they go on copying while it calls the driver and waits for the last parts.
void stage_to_device(StagingSet& set, RowsAt dst, RowsAt src, const Pieces& pieces, CUstream stream, bool async) {
  const size_t count = pieces.count();
  std::optional<HostCopy> copies[2];
  auto fill = [&](size_t i) {
    const int b = static_cast<int>(i % kBuffers);
    wait(set, b);
    copies[i % 2].emplace(to_buffer(set.buffers[b], src, pieces[i]), kUploadThreads);
  };
  if (count) fill(0);
  for (size_t i = 0; i < count; ++i) {
    if (i + 1 < count) fill(i + 1);
    copies[i % 2]->wait();
    const int b = static_cast<int>(i % kBuffers);
    queue_rows(from_buffer(dst, set.buffers[b], pieces[i]), stream, "staged copy to the device");
    record(set, b, stream);
  }
  // The caller's memory has been read; a stream-ordered copy may end here. The buffers are
  // waited for by their next user.
  if (!async)
    for (int b = 0; b < kBuffers; ++b) wait(set, b);
}

void stage_to_host(StagingSet& set, RowsAt dst, RowsAt src, const Pieces& pieces, CUstream stream) {
  const size_t count = pieces.count();
  auto issue = [&](size_t i) {
    const int b = static_cast<int>(i % kBuffers);
    wait(set, b);
    queue_rows(to_buffer(set.buffers[b], src, pieces[i]), stream, "staged copy from the device");
    record(set, b, stream);
  };
  std::optional<HostCopy> copies[2];
  auto drain = [&](size_t i) {
    const int b = static_cast<int>(i % kBuffers);
    wait(set, b);
    copies[i % 2].emplace(from_buffer(dst, set.buffers[b], pieces[i]), kDownloadThreads);
  };
  for (size_t i = 0; i < std::min<size_t>(kBuffers, count); ++i) issue(i);
  if (count) drain(0);
  for (size_t i = 0; i < count; ++i) {
    if (i + 1 < count) drain(i + 1);
    copies[i % 2]->wait();
    if (i + kBuffers < count) issue(i + kBuffers);
  }
}

}  // namespace

bool staged_copy(RowsAt dst, RowsAt src, size_t width, size_t height, size_t depth, bool to_device, CUstream stream,
                 bool async) {
  // A region too large to count in bytes is left to the driver, which refuses it or copies it.
  if (height && depth && (width > SIZE_MAX / height || width * height > SIZE_MAX / depth)) return false;
  if (width * height * depth < kThreshold) return false;
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
  const Pieces pieces(width, height, depth);
  if (to_device)
    stage_to_device(*set, dst, src, pieces, stream, async);
  else
    stage_to_host(*set, dst, src, pieces, stream);
  return true;
}

void host_copy(void* dst, const void* src, size_t size) {
  host_copy_rows({static_cast<char*>(dst), static_cast<const char*>(src), size, 1, size, size}, kUploadThreads);
}

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
