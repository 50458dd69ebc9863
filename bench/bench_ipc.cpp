// Sharing memory with another process: one handle exported, sent over a Unix-domain socket,
// opened there, closed, and the close acknowledged, against the CUDA runtime's
// cudaIpcGetMemHandle + cudaIpcOpenMemHandle + cudaIpcCloseMemHandle of the same memory, in the
// same run. The binary is its own importer (argv[1] "importer"), started with fork and exec.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "bench_common.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// The importer: for each request byte, open what comes, close it (or keep it) and answer.
int importer(int sock) {
  if (cudaSetDevice(0) != cudaSuccess) return 1;
  for (char op; read(sock, &op, 1) == 1;) {
    gpumem_status_t st = GPUMEM_SUCCESS;
    if (op == 'g' || op == 'k') {  // gpumem: opened and closed, or kept open
      void* p = nullptr;
      st = gpumem_ipc_receive(sock, &p, nullptr);
      if (st == GPUMEM_SUCCESS && op == 'g') st = gpumem_ipc_close(p);
    } else if (op == 'c') {  // the runtime's handle
      cudaIpcMemHandle_t h;
      if (read(sock, &h, sizeof h) != sizeof h) return 1;
      void* p = nullptr;
      st = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess &&
                   cudaIpcCloseMemHandle(p) == cudaSuccess
               ? GPUMEM_SUCCESS
               : GPUMEM_ERROR_DRIVER;
    } else {
      return 0;
    }
    if (write(sock, &st, sizeof st) != sizeof st) return 1;
  }
  return 0;
}

struct Importer {
  pid_t pid = -1;
  int sock = -1;

  Importer() {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw Failure("socketpair");
    pid = fork();
    if (pid == 0) {
      char fd[16];
      std::snprintf(fd, sizeof fd, "%d", dup(fds[1]));
      execl("/proc/self/exe", "bench_ipc", "importer", fd, static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    sock = fds[0];
  }
  ~Importer() {
    const char quit = 'q';
    if (write(sock, &quit, 1) == 1) waitpid(pid, nullptr, 0);
    close(sock);
  }
  void answer() {
    gpumem_status_t st;
    if (read(sock, &st, sizeof st) != sizeof st || st != GPUMEM_SUCCESS)
      throw Failure("the importer failed (status " + std::to_string(st) + ")");
  }
  // Exports p of a, sends it with op, waits for the answer.
  void gpumem(gpumem_allocator_t* a, void* p, char op = 'g') {
    gpumem_ipc_handle_t h;
    check(gpumem_ipc_export(a, p, &h, nullptr), "gpumem_ipc_export");
    if (write(sock, &op, 1) != 1) throw Failure("write");
    check(gpumem_ipc_send(sock, &h), "gpumem_ipc_send");
    answer();
  }
  void runtime(void* base) {
    cudaIpcMemHandle_t h;
    check(cudaIpcGetMemHandle(&h, base), "cudaIpcGetMemHandle");
    const char op = 'c';
    if (write(sock, &op, 1) != 1 || write(sock, &h, sizeof h) != sizeof h) throw Failure("write");
    answer();
  }
};

// Microseconds of the median of n runs of f(i).
template <class F>
double median_us(int n, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    f(i);
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::nth_element(t.begin(), t.begin() + n / 2, t.end());
  return t[n / 2];
}

void row(const char* what, double ours, double theirs) {
  if (theirs > 0)
    std::printf("| %-62s | %9.1f | %9.1f | %6.2f |\n", what, ours, theirs, theirs / ours);
  else
    std::printf("| %-62s | %9.1f | %9s | %6s |\n", what, ours, "-", "-");
}

int bench() {
  std::string description;
  if (!bench_open_device_0(description)) return 0;
  std::printf("bench_ipc: %s\nexport + send + open + close + answer, median us per handle; ratio = driver / gpumem\n\n",
              description.c_str());
  std::printf("| %-62s | %9s | %9s | %6s |\n|%s|---:|---:|---:|\n", "memory shared", "gpumem", "driver", "ratio",
              std::string(64, '-').c_str());
  Importer imp;
  const int n = 200;

  gpumem_allocator_t* device = nullptr;
  check(gpumem_allocator_create_device(0, &device), "gpumem_allocator_create_device");
  void* whole = nullptr;
  check(gpumem_alloc(device, 1 << 20, nullptr, &whole), "gpumem_alloc");
  const double whole_ours = median_us(n, [&](int) { imp.gpumem(device, whole); });
  row("a 1 MiB allocation of the device allocator (cuMemAlloc)", whole_ours,
      median_us(n, [&](int) { imp.runtime(whole); }));

  // Sub-allocations of one classic pool segment; the driver can only share the segment whole.
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = device;
  gpumem_allocator_t* pool = nullptr;
  check(gpumem_pool_create(&params, &pool), "gpumem_pool_create");
  std::vector<void*> small(n + 1);
  void* block = nullptr;  // cached, so that the small allocations are cut out of it
  check(gpumem_alloc(pool, (n + 1) * 512, nullptr, &block), "gpumem_alloc");
  check(gpumem_free(pool, block, nullptr), "gpumem_free");
  for (void*& p : small) check(gpumem_alloc(pool, 512, nullptr, &p), "gpumem_alloc");
  imp.gpumem(pool, small[n], 'k');  // its segment stays open there
  void* segment = nullptr;          // the cuMemAlloc allocation that holds them
  {
    gpumem_pointer_info_t info{};
    info.struct_size = sizeof info;
    check(gpumem_pointer_get_info(small[0], &info), "gpumem_pointer_get_info");
    segment = info.base;
  }
  const double sub_ours = median_us(n, [&](int i) { imp.gpumem(pool, small[i]); });
  row("512 B of a classic pool's segment, opened there already", sub_ours,
      median_us(n, [&](int) { imp.runtime(segment); }));

  // The device pool (over VM by default): small allocations in a unit open there, then a large one.
  std::vector<void*> vm_small(n + 1);
  for (void*& p : vm_small) check(gpumem_alloc(nullptr, 512, nullptr, &p), "gpumem_alloc");
  imp.gpumem(nullptr, vm_small[n], 'k');
  row("512 B of the device pool (VM), its unit opened there already",
      median_us(n, [&](int i) { imp.gpumem(nullptr, vm_small[i]); }), 0);
  void* big = nullptr;
  check(gpumem_alloc(nullptr, 64u << 20, nullptr, &big), "gpumem_alloc");
  row("64 MiB of the device pool (VM: 32 units of 2 MiB, mapped each time)",
      median_us(20, [&](int) { imp.gpumem(nullptr, big); }), 0);

  gpumem_ipc_info_t info{};
  info.struct_size = sizeof info;
  check(gpumem_ipc_get_info(&info), "gpumem_ipc_get_info");
  std::printf("\nexports out at the end: %llu (2 kept open there)\n", static_cast<unsigned long long>(info.exported));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "importer") == 0) return importer(std::atoi(argv[2]));
  return bench_run(bench);
}
