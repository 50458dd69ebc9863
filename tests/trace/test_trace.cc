// Trace recording: what a traced allocator did comes back from the file, record by record, in
// order, with the sizes, addresses and streams of the calls; and every refusal of the C calls.
// Through the library's objects, as the reader is not in the ABI. Needs no GPU.
#include <fcntl.h>
#include <gpumem/gpumem.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "test_check.hpp"
#include "trace/trace.hpp"

namespace {

using gpumem::trace::Event;
using gpumem::trace::Reader;
using gpumem::trace::Record;

std::string temp_path(const char* name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/gpumem_" + name + "_" + std::to_string(getpid()) + ".trace";
}

std::vector<Record> read_all(const std::string& path, gpumem::trace::Header* header = nullptr) {
  Reader reader(path);
  if (header) *header = reader.header();
  std::vector<Record> out;
  Record r;
  while (reader.next(r)) out.push_back(r);
  return out;
}

gpumem_stream_t stream(uintptr_t n) { return reinterpret_cast<gpumem_stream_t>(n); }

// A call that must succeed: a failure is printed with gpumem's detail and counted.
void must(gpumem_status_t status, const char* call) {
  if (status == GPUMEM_SUCCESS) return;
  std::printf("%s: %s: %s\n", call, gpumem_status_name(status), gpumem_last_error_detail());
  ++failures;
}
#define OK(call) must((call), #call)

struct HostPool {
  gpumem_allocator_t* host = nullptr;
  gpumem_allocator_t* pool = nullptr;
  explicit HostPool(uint64_t limit = 0) {
    OK(gpumem_allocator_create_host(0, &host));
    gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
    params.upstream = host;
    params.limit = limit;
    OK(gpumem_pool_create(&params, &pool));
  }
  ~HostPool() {
    OK(gpumem_allocator_destroy_force(pool));
    OK(gpumem_allocator_destroy(host));
  }
};

void records_what_the_pool_did() {
  const char* test = "records_what_the_pool_did";
  const std::string path = temp_path(test);
  HostPool h(1 << 20);
  gpumem_trace_t* trace = nullptr;
  CHECK(gpumem_trace_start(h.pool, path.c_str(), 0, &trace) == GPUMEM_SUCCESS && trace);
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  OK(gpumem_alloc(h.pool, 1000, stream(0x1000), &a));  // grows: upstream 1024, then the allocation
  OK(gpumem_free(h.pool, a, stream(0x1000)));          // a free
  OK(gpumem_alloc(h.pool, 600, stream(0x1000), &b));   // from the cache: no upstream record
  CHECK(gpumem_alloc(h.pool, 2 << 20, stream(0x2000), &c) ==
        GPUMEM_ERROR_OUT_OF_MEMORY);  // beyond the limit: a failed allocation
  CHECK(c == nullptr);
  OK(gpumem_free(h.pool, b, stream(0x1000)));
  OK(gpumem_pool_release(h.pool, nullptr, GPUMEM_POOL_RELEASE_ALL_STREAMS));  // the block goes back
  CHECK(gpumem_free(h.pool, b, stream(0x1000)) == GPUMEM_ERROR_NOT_OWNED);    // refused: not recorded
  CHECK(gpumem_trace_stop(trace) == GPUMEM_SUCCESS);

  gpumem::trace::Header header;
  const std::vector<Record> r = read_all(path, &header);
  CHECK(header.version == 1 && header.device == -1 && header.kind == "pool");
  const Event want[] = {Event::kUpstreamAlloc, Event::kAlloc, Event::kFree,        Event::kAlloc,
                        Event::kAllocFailed,   Event::kFree,  Event::kUpstreamFree};
  CHECK(r.size() == sizeof want / sizeof want[0]);
  for (size_t i = 0; i < r.size() && i < sizeof want / sizeof want[0]; ++i) CHECK(r[i].event == want[i]);
  if (r.size() == 7) {
    const auto addr = [](void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); };
    CHECK(r[0].size == 1024 && r[0].address == addr(a) && r[0].stream == 0x1000);
    CHECK(r[1].size == 1000 && r[1].mem_size == 1024 && r[1].address == addr(a) && r[1].stream == 0x1000);
    CHECK(r[2].address == addr(a) && r[2].stream == 0x1000);
    CHECK(r[3].size == 600 && r[3].mem_size == 1024 && r[3].address == addr(b));
    CHECK(r[4].size == (2u << 20) && r[4].status == GPUMEM_ERROR_OUT_OF_MEMORY && r[4].stream == 0x2000);
    CHECK(r[5].address == addr(b));
    CHECK(r[6].size == 1024 && r[6].address == addr(a));
    for (size_t i = 1; i < r.size(); ++i) CHECK(r[i].time_ns >= r[i - 1].time_ns);
    for (const Record& x : r) CHECK(x.thread == r[0].thread && x.thread > 0);
  }
  std::remove(path.c_str());
}

void many_threads_and_many_records() {
  const char* test = "many_threads_and_many_records";
  const std::string path = temp_path(test);
  HostPool h;
  gpumem_trace_t* trace = nullptr;
  CHECK(gpumem_trace_start(h.pool, path.c_str(), 0, &trace) == GPUMEM_SUCCESS);
  constexpr int kThreads = 4, kPairs = 20000;  // several flushes of the 64 KiB buffer
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPairs; ++i) {
        void* p = nullptr;
        OK(gpumem_alloc(h.pool, 512 * (1 + (i + t) % 7), stream(0x1000 * (t + 1)), &p));
        OK(gpumem_free(h.pool, p, stream(0x1000 * (t + 1))));
      }
    });
  for (auto& th : threads) th.join();
  CHECK(gpumem_trace_stop(trace) == GPUMEM_SUCCESS);
  const std::vector<Record> r = read_all(path);
  size_t allocs = 0, frees = 0;
  std::vector<size_t> per_thread_live(64, 0);
  bool balanced = true;
  for (const Record& x : r) {
    if (x.event == Event::kAlloc) ++allocs;
    if (x.event == Event::kFree) ++frees;
    // Each thread frees what it allocated before allocating again: its records alternate.
    if (x.thread < per_thread_live.size()) {
      if (x.event == Event::kAlloc) balanced = balanced && per_thread_live[x.thread]++ == 0;
      if (x.event == Event::kFree) balanced = balanced && per_thread_live[x.thread]-- == 1;
    }
  }
  CHECK(allocs == kThreads * kPairs && frees == kThreads * kPairs);
  CHECK(balanced);
  std::remove(path.c_str());
}

void refusals_change_nothing() {
  const char* test = "refusals_change_nothing";
  const std::string path = temp_path(test);
  HostPool h;
  gpumem_trace_t* trace = reinterpret_cast<gpumem_trace_t*>(&failures);
  CHECK(gpumem_trace_start(h.pool, nullptr, 0, &trace) == GPUMEM_ERROR_INVALID_ARGUMENT && trace == nullptr);
  CHECK(std::strstr(gpumem_last_error_detail(), "path is NULL"));
  CHECK(gpumem_trace_start(h.pool, path.c_str(), 1, &trace) == GPUMEM_ERROR_INVALID_ARGUMENT);
  CHECK(std::strstr(gpumem_last_error_detail(), "flags"));
  CHECK(gpumem_trace_start(h.pool, path.c_str(), 0, nullptr) == GPUMEM_ERROR_INVALID_ARGUMENT);
  const std::string unwritable = "/nonexistent-dir/x.trace";
  CHECK(gpumem_trace_start(h.pool, unwritable.c_str(), 0, &trace) == GPUMEM_ERROR_IO && trace == nullptr);
  CHECK(std::strstr(gpumem_last_error_detail(), "cannot create the trace file /nonexistent-dir/x.trace"));
  CHECK(gpumem_trace_start(h.pool, path.c_str(), 0, &trace) == GPUMEM_SUCCESS);
  gpumem_trace_t* second = nullptr;
  CHECK(gpumem_trace_start(h.pool, path.c_str(), 0, &second) == GPUMEM_ERROR_BUSY && second == nullptr);
  CHECK(std::strstr(gpumem_last_error_detail(), "being traced already"));
  CHECK(gpumem_trace_stop(trace) == GPUMEM_SUCCESS);
  CHECK(gpumem_trace_stop(trace) == GPUMEM_ERROR_INVALID_HANDLE);
  CHECK(gpumem_trace_stop(nullptr) == GPUMEM_ERROR_INVALID_HANDLE);
  // Stopped, it may be recorded again.
  CHECK(gpumem_trace_start(h.pool, path.c_str(), 0, &trace) == GPUMEM_SUCCESS);
  CHECK(gpumem_trace_stop(trace) == GPUMEM_SUCCESS);
  CHECK(read_all(path).empty());
  std::remove(path.c_str());
}

void destroying_the_allocator_completes_the_file() {
  const char* test = "destroying_the_allocator_completes_the_file";
  const std::string path = temp_path(test);
  gpumem_trace_t* trace = nullptr;
  {
    HostPool h;
    CHECK(gpumem_trace_start(h.pool, path.c_str(), 0, &trace) == GPUMEM_SUCCESS);
    void* p = nullptr;
    OK(gpumem_alloc(h.pool, 4096, nullptr, &p));
    OK(gpumem_free(h.pool, p, nullptr));
  }  // the pool goes, giving its block back: recorded, then the file is closed
  const std::vector<Record> r = read_all(path);
  CHECK(r.size() == 4 && r.back().event == Event::kUpstreamFree);
  CHECK(gpumem_trace_stop(trace) == GPUMEM_SUCCESS);  // the handle is still the caller's to stop
  std::remove(path.c_str());
}

void damaged_files_are_refused() {
  const char* test = "damaged_files_are_refused";
  const std::string path = temp_path(test);
  const auto refused = [&](const char* detail) {
    try {
      read_all(path);
    } catch (const gpumem::Error& e) {
      return e.status() == GPUMEM_ERROR_IO && std::strstr(e.what(), detail) != nullptr;
    }
    return false;
  };
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fputs("not a trace at all, but long enough", f);
  std::fclose(f);
  CHECK(refused("is not a gpumem trace"));
  HostPool h;
  gpumem_trace_t* trace = nullptr;
  OK(gpumem_trace_start(h.pool, path.c_str(), 0, &trace));
  void* p = nullptr;
  OK(gpumem_alloc(h.pool, 4096, nullptr, &p));
  OK(gpumem_trace_stop(trace));
  OK(gpumem_free(h.pool, p, nullptr));
  CHECK(truncate(path.c_str(), 40) == 0);  // the header (34 bytes) and part of a record
  CHECK(refused("a record ends early"));
  std::remove(path.c_str());
  CHECK(refused("cannot open the trace file"));
}

// The reader decodes through a buffer of a fixed size: records that straddle two reads, at every
// place they can, come back the same as through the default buffer.
void small_buffers_read_the_same() {
  const char* test = "small_buffers_read_the_same";
  const std::string path = temp_path(test);
  HostPool h(1 << 20);
  gpumem_trace_t* trace = nullptr;
  CHECK(gpumem_trace_start(h.pool, path.c_str(), 0, &trace) == GPUMEM_SUCCESS);
  std::vector<void*> live;
  for (int i = 0; i < 300; ++i) {
    void* p = nullptr;
    if (gpumem_alloc(h.pool, 1000 + 777 * static_cast<size_t>(i % 50), stream(0x10 * (i % 3)), &p) == GPUMEM_SUCCESS)
      live.push_back(p);
    if (i % 4 == 3) {
      OK(gpumem_free(h.pool, live.front(), stream(0x10 * (i % 3))));
      live.erase(live.begin());
    }
  }
  void* p = nullptr;
  CHECK(gpumem_alloc(h.pool, 2 << 20, nullptr, &p) == GPUMEM_ERROR_OUT_OF_MEMORY);  // past the limit: recorded
  for (void* q : live) OK(gpumem_free(h.pool, q, nullptr));
  CHECK(gpumem_trace_stop(trace) == GPUMEM_SUCCESS);
  gpumem::trace::Header want_header;
  const std::vector<Record> want = read_all(path, &want_header);
  CHECK(want.size() > 500 && want.back().event == Event::kFree);
  for (const size_t buffer : {1, 2, 3, 5, 8, 13, 64, 1000}) {
    Reader reader(open(path.c_str(), O_RDONLY), path, buffer);
    CHECK(reader.header().kind == want_header.kind && reader.header().start_unix_ns == want_header.start_unix_ns);
    size_t n = 0;
    bool same = true;
    for (Record r; reader.next(r); ++n) {
      if (n >= want.size()) break;
      const Record& w = want[n];
      same = same && r.event == w.event && r.thread == w.thread && r.time_ns == w.time_ns && r.stream == w.stream &&
             r.address == w.address && r.size == w.size && r.mem_size == w.mem_size && r.status == w.status;
    }
    CHECK(n == want.size() && same);
  }
  std::remove(path.c_str());
}

}  // namespace

int main() {
  records_what_the_pool_did();
  many_threads_and_many_records();
  refusals_change_nothing();
  destroying_the_allocator_completes_the_file();
  damaged_files_are_refused();
  small_buffers_read_the_same();
  std::printf("%s\n", failures ? "FAILED" : "all trace cases passed");
  return failures ? 1 : 0;
}
