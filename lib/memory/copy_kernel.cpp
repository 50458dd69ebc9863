#include "memory/copy_kernel.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#ifdef GPUMEM_COPY_KERNEL_FATBIN
// The fatbin nvcc built from copy_kernel.cu, as bytes in this object: the library carries its
// kernels and needs no file or CUDA library beside it.
asm(".pushsection .rodata.gpumem_copy_kernel,\"a\"\n"
    ".balign 64\n"
    ".globl gpumem_copy_kernel_fatbin\n"
    ".hidden gpumem_copy_kernel_fatbin\n"
    "gpumem_copy_kernel_fatbin:\n"
    ".incbin \"" GPUMEM_COPY_KERNEL_FATBIN
    "\"\n"
    ".popsection\n");
extern "C" const unsigned char gpumem_copy_kernel_fatbin[];
#endif

namespace gpumem::memory {
namespace {

constexpr unsigned kThreadsPerBlock = 256;
// Blocks beyond those resident at once, so that rows of uneven cost even out (measured on an
// H200: 4x beats 1x by 3% on 3D copies of short rows).
constexpr unsigned kWaves = 4;

struct DeviceKernels {
  enum State { kUnloaded, kReady, kUnavailable };
  std::atomic<int> state{kUnloaded};
  struct Kernel {
    CUfunction function = nullptr;
    unsigned max_blocks = 0;  // as many as run at once; the kernel loops over the rows
  } aligned, shifted;
};

struct Kernels {
  std::mutex load_mutex;
  std::unique_ptr<DeviceKernels[]> devices;
  int count = 0;
};

Kernels& kernels() {
  static Kernels* k = [] {
    auto* all = new Kernels;  // leaked: copies may run during process exit
    all->count = driver::device_count();
    all->devices = std::make_unique<DeviceKernels[]>(static_cast<size_t>(all->count));
    return all;
  }();
  return *k;
}

#ifdef GPUMEM_COPY_KERNEL_FATBIN
// The driver's answers that mean the fatbin will never load on this device: no code for it, and
// PTX it cannot compile. Anything else (out of memory, say) is tried again on the next copy.
bool never_loads(CUresult r) {
  return r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
         r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_JIT_COMPILER_NOT_FOUND ||
         r == CUDA_ERROR_JIT_COMPILATION_DISABLED;
}

// With the device's primary context current; under the kernels' load mutex.
void load(DeviceKernels& dk, int device) {
  const driver::Api& a = driver::api();
  driver::RelaxedCaptureScope relaxed;
  CUmodule module = nullptr;
  if (const CUresult r = a.cuModuleLoadData(&module, gpumem_copy_kernel_fatbin); r != CUDA_SUCCESS) {
    if (never_loads(r)) dk.state.store(DeviceKernels::kUnavailable, std::memory_order_release);
    return;
  }
  try {
    CUdevice dev = 0;
    driver::check(a.cuDeviceGet(&dev, device), "cuDeviceGet");
    int sms = 0;
    driver::check(a.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute");
    for (auto [kernel, name] :
         {std::pair{&dk.aligned, "gpumem_copy_rows_aligned"}, {&dk.shifted, "gpumem_copy_rows_shifted"}}) {
      driver::check(a.cuModuleGetFunction(&kernel->function, module, name), "cuModuleGetFunction");
      int blocks_per_sm = 0;
      driver::check(
          a.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel->function, kThreadsPerBlock, 0),
          "cuOccupancyMaxActiveBlocksPerMultiprocessor");
      kernel->max_blocks = static_cast<unsigned>(sms) * static_cast<unsigned>(std::max(1, blocks_per_sm));
    }
  } catch (const Error&) {
    a.cuModuleUnload(module);
    throw;
  }
  dk.state.store(DeviceKernels::kReady, std::memory_order_release);
}
#else
void load(DeviceKernels& dk, int) { dk.state.store(DeviceKernels::kUnavailable, std::memory_order_release); }
#endif

}  // namespace

bool launch_copy_rows(int device, gpumem_copy_rows_t rows, CUstream stream) {
  Kernels& all = kernels();
  if (device < 0 || device >= all.count) return false;
  DeviceKernels& dk = all.devices[static_cast<size_t>(device)];
  if (dk.state.load(std::memory_order_acquire) == DeviceKernels::kUnloaded) {
    std::lock_guard<std::mutex> lock(all.load_mutex);
    if (dk.state.load(std::memory_order_relaxed) == DeviceKernels::kUnloaded) load(dk, device);
  }
  if (dk.state.load(std::memory_order_acquire) != DeviceKernels::kReady) return false;

  // A warp to a row, or to several narrow ones, each lane moving at least four words of a row
  // (measured on an H200, rows of 1001 bytes at pitch 1003: 16 lanes a row copy 1.46 times what
  // cudaMemcpy2D does, 32 lanes 1.26 times; wider groups for long rows are slower).
  const uint64_t words = std::max<uint64_t>(1, rows.width / 16);
  unsigned lanes = 1;
  while (lanes < 32 && lanes * 4 < words) lanes *= 2;
  rows.lanes_per_row = lanes;
  // Equally aligned in every row: the 16-byte words of both sides line up after the same head.
  const bool aligned =
      ((rows.dst - rows.src) | (rows.dst_pitch - rows.src_pitch) | (rows.dst_slice_pitch - rows.src_slice_pitch)) %
          16 ==
      0;
  const DeviceKernels::Kernel& kernel = aligned ? dk.aligned : dk.shifted;
  const uint64_t threads = rows.rows * lanes;
  const uint64_t blocks =
      std::min<uint64_t>(uint64_t{kernel.max_blocks} * kWaves, (threads + kThreadsPerBlock - 1) / kThreadsPerBlock);
  void* args[] = {&rows};
  driver::check(driver::api().cuLaunchKernel(kernel.function, static_cast<unsigned>(blocks), 1, 1, kThreadsPerBlock, 1,
                                             1, 0, stream, args, nullptr),
                "cuLaunchKernel(gpumem copy kernel)");
  return true;
}

}  // namespace gpumem::memory
