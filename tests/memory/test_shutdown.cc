// gpumem_shutdown (gpumem/experimental.h) over no driver: refused while the caller holds a handle,
// then it joins staging's worker threads, and a later copy starts them again with its bytes right,
// as many as GPUMEM_COPY_THREADS says (less the calling thread), which must be a number.
#include <dirent.h>
#include <gpumem/experimental.h>
#include <gpumem/gpumem.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "memory/host_copy.hpp"
#include "memory/memory.hpp"
#include "test_check.hpp"

namespace {

// Staging's workers: the threads named "gpumem-copy" (a sanitizer's own threads are not).
int copy_workers() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char path[320], name[32] = {};
      std::snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
      if (std::FILE* f = std::fopen(path, "r")) {
        if (std::fgets(name, sizeof name, f) && std::strncmp(name, "gpumem-copy", 11) == 0) ++n;
        std::fclose(f);
      }
    }
    closedir(d);
  }
  return n;
}

// The workers once they have gone: a joined thread's /proc entry can outlast pthread_join by a
// moment (the kernel wakes the joiner before it reaps the thread), so this waits up to 2 s.
int copy_workers_after_stop() {
  for (int i = 0; i < 2000 && copy_workers() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return copy_workers();
}

// A copy large enough to be split over the workers; true if every byte arrived.
bool split_copy(unsigned char seed) {
  std::vector<unsigned char> src(size_t{8} << 20), dst(src.size(), 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + seed);
  gpumem::memory::host_copy(dst.data(), src.data(), src.size());
  return std::memcmp(dst.data(), src.data(), src.size()) == 0;
}

}  // namespace

// The workers GPUMEM_COPY_THREADS asks for: one thread fewer, at most 15 (cores do not bound a
// number given).
int expected_workers(const char* threads) { return std::min(std::atoi(threads), 16) - 1; }

int main() {
  const char* test = "test_shutdown";
  const char* threads = std::getenv("GPUMEM_COPY_THREADS");
  CHECK(split_copy(1));
  const int workers = copy_workers();
  if (threads) CHECK(workers == expected_workers(threads));
  if (workers == 0) std::printf("note: no copy workers: only the refusals are checked\n");

  gpumem_allocator_t* host = nullptr;
  CHECK(gpumem_allocator_create_host(0, &host) == GPUMEM_SUCCESS);
  CHECK(gpumem_shutdown() == GPUMEM_ERROR_BUSY);
  CHECK(std::strstr(gpumem_last_error_detail(), "1 handles the caller made are live") != nullptr);
  CHECK(copy_workers() == workers);  // refused: nothing stopped
  CHECK(gpumem_allocator_destroy(host) == GPUMEM_SUCCESS);

  CHECK(gpumem_shutdown() == GPUMEM_SUCCESS);
  CHECK(copy_workers_after_stop() == 0);
  CHECK(gpumem_shutdown() == GPUMEM_SUCCESS);  // again: nothing left to stop
  CHECK(split_copy(2));                        // gpumem goes on: the workers start again
  CHECK(copy_workers() == workers);

  // A value that is no number of threads is refused when the workers start, naming it.
  CHECK(gpumem_shutdown() == GPUMEM_SUCCESS);
  setenv("GPUMEM_COPY_THREADS", "lots", 1);
  bool refused = false;
  try {
    split_copy(3);
  } catch (const gpumem::Error& e) {
    refused = e.status() == GPUMEM_ERROR_INVALID_ARGUMENT &&
              std::string(e.what()).find("GPUMEM_COPY_THREADS=\"lots\"") != std::string::npos;
  }
  CHECK(refused);
  CHECK(copy_workers_after_stop() == 0);
  if (threads)
    setenv("GPUMEM_COPY_THREADS", threads, 1);
  else
    unsetenv("GPUMEM_COPY_THREADS");
  CHECK(split_copy(4));
  CHECK(copy_workers() == workers);
  std::printf("%d copy workers; %d failures\n", workers, failures);
  return failures ? 1 : 0;
}
