// What every benchmark does first: find device 0 through the CUDA runtime and make its primary
// context current, so gpumem works in the same context as the runtime, as in a program that uses
// both. Header-only, shared by the bench programs.
#pragma once

#include <cuda_runtime_api.h>
#include <gpumem/gpumem.h>

#include <cstdio>
#include <stdexcept>
#include <string>

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
  const auto need = [](cudaError_t e, const char* call) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(e));
  };
  need(cudaSetDevice(0), "cudaSetDevice");
  need(cudaFree(nullptr), "cudaFree(NULL)");
  cudaDeviceProp prop{};
  need(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  need(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  need(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  char text[512];
  std::snprintf(text, sizeof text, "device 0: %s; driver CUDA %d.%d, runtime %d.%d; gpumem %s", prop.name,
                driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, gpumem_version_string());
  description = text;
  return true;
}
