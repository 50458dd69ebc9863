// What the benchmarks share: failures that skip one row and let the others run, and the start on
// device 0 through the CUDA runtime, whose primary context gpumem then works in too, as in a
// program that uses both. Header-only.
#pragma once

#include <cuda_runtime_api.h>
#include <gpumem/gpumem.h>

#include <cstdio>
#include <stdexcept>
#include <string>

// A row that fails is reported and skipped; the others still run.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn, gnu::noinline, gnu::cold]] inline void gpumem_failed(const char* call, gpumem_status_t st) {
  throw Failure(std::string(call) + ": " + gpumem_status_name(st) + ": " + gpumem_last_error_detail());
}
[[noreturn, gnu::noinline, gnu::cold]] inline void cuda_failed(const char* call, cudaError_t e) {
  throw Failure(std::string(call) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}
inline void check(gpumem_status_t st, const char* call) {
  if (st != GPUMEM_SUCCESS) [[unlikely]]
    gpumem_failed(call, st);
}
inline void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) [[unlikely]]
    cuda_failed(call, e);
}

// Runs a benchmark's body; a failure outside every row ends it with "FAIL <what>" and status 1.
template <class Run>
int bench_run(Run&& run) {
  try {
    return run();
  } catch (const std::exception& e) {
    std::printf("FAIL %s\n", e.what());
    return 1;
  }
}

// Returns false, having printed "no GPU: ..." (a clean exit for the caller), when there is none;
// otherwise fills description with "device 0: NAME; driver CUDA x.y, runtime x.y; gpumem V".
inline bool bench_open_device_0(std::string& description) {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    std::printf("no GPU: cudaGetDeviceCount: %s: %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
    return false;
  }
  if (count == 0) {
    std::printf("no GPU: cudaGetDeviceCount found 0 devices\n");
    return false;
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaFree(nullptr), "cudaFree(NULL)");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  char text[512];
  std::snprintf(text, sizeof text, "device 0: %s; driver CUDA %d.%d, runtime %d.%d; gpumem %s", prop.name,
                driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, gpumem_version_string());
  description = text;
  return true;
}
