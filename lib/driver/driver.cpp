#include "driver/driver.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

namespace gpumem::driver {
namespace {

constexpr int kMinimumDriverVersion = 12000;  // cuGetProcAddress_v2 and the signatures above
// The only entry points a driver may lack; every other one is required. Without CUDA 12.2's
// prefetch and advice, those calls answer GPUMEM_ERROR_NOT_SUPPORTED; without the virtual memory
// management calls, gpumem_allocator_create_vm() does (it checks for them), and nothing else is lost;
// without cuMemRetainAllocationHandle a pool over it moves memory by unmapping and mapping anew.
bool optional_entry_point(std::string_view name) {
  return name == "cuMemPrefetchAsync" || name == "cuMemAdvise" || name == "cuMemAddressReserve" ||
         name == "cuMemAddressFree" || name == "cuMemCreate" || name == "cuMemRelease" || name == "cuMemMap" ||
         name == "cuMemUnmap" || name == "cuMemSetAccess" || name == "cuMemGetAllocationGranularity" ||
         name == "cuMemRetainAllocationHandle";
}

struct Loaded {
  Api api;
  gpumem_status_t status = GPUMEM_SUCCESS;  // NO_DRIVER when the driver is unusable
  std::string detail;
  int32_t cuda_result = 0;
  gpumem_status_t device_status = GPUMEM_SUCCESS;  // NO_DEVICE when cuInit found none
  std::string device_detail;
  int32_t device_result = 0;
  int device_count = 0;
  std::unique_ptr<std::atomic<CUcontext>[]> contexts;
  std::mutex retain_mutex;
};

void load(Loaded& out) {
  const char* env = std::getenv("GPUMEM_CUDA_DRIVER");
  const std::string path = env && *env ? env : "libcuda.so.1";
  // Never closed: memory may be freed at exit, after static destructors have run.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    out.status = GPUMEM_ERROR_NO_DRIVER;
    out.detail = format("cannot load the CUDA driver %s: %s", path.c_str(), why ? why : "unknown reason");
    return;
  }
  auto get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) {
    out.status = GPUMEM_ERROR_NO_DRIVER;
    out.detail = format("the CUDA driver %s is older than CUDA 12.0 (it has no cuGetProcAddress_v2)", path.c_str());
    return;
  }
  Api& a = out.api;
  std::string missing;  // required entry points the driver lacks
  int resolved = 0;
#define GPUMEM_DRIVER_RESOLVE(name, version)                                                  \
  {                                                                                           \
    void* fn = nullptr;                                                                       \
    CUdriverProcAddressQueryResult found{};                                                   \
    if (get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS && \
        found == CU_GET_PROC_ADDRESS_SUCCESS && fn) {                                         \
      a.name = reinterpret_cast<PFN_##name##_v##version>(fn);                                 \
      ++resolved;                                                                             \
    } else if (!optional_entry_point(#name)) {                                                \
      missing += missing.empty() ? #name : ", " #name;                                        \
    }                                                                                         \
  }
  GPUMEM_DRIVER_ENTRY_POINTS(GPUMEM_DRIVER_RESOLVE)
#undef GPUMEM_DRIVER_RESOLVE

  if (resolved == 0) {
    out.status = GPUMEM_ERROR_NO_DRIVER;
    out.detail = format("the CUDA driver %s resolves none of its entry points (is it the CUDA Toolkit's stub library?)",
                        path.c_str());
    return;
  }
  if (!missing.empty()) {
    out.status = GPUMEM_ERROR_NO_DRIVER;
    out.detail = format("the CUDA driver %s lacks %s", path.c_str(), missing.c_str());
    return;
  }
  const CUresult init = a.cuInit(0);
  if (init == CUDA_ERROR_NO_DEVICE) {
    out.device_status = GPUMEM_ERROR_NO_DEVICE;
    out.device_result = init;
    out.device_detail = "the CUDA driver reports no device (cuInit: CUDA_ERROR_NO_DEVICE; CUresult 100)";
  } else if (init != CUDA_SUCCESS) {
    const char* name = nullptr;
    a.cuGetErrorName(init, &name);
    out.status = GPUMEM_ERROR_NO_DRIVER;
    out.cuda_result = init;
    out.detail = format("the CUDA driver %s failed to initialize: cuInit returned %s (CUresult %d)%s", path.c_str(),
                        name ? name : "an unknown error", static_cast<int>(init),
                        init == CUDA_ERROR_STUB_LIBRARY ? "; this is the toolkit's stub, not a driver" : "");
    return;
  }
  int version = 0;
  const CUresult versioned = a.cuDriverGetVersion(&version);
  if (versioned != CUDA_SUCCESS) {
    out.status = GPUMEM_ERROR_NO_DRIVER;
    out.cuda_result = versioned;
    out.detail = format("the CUDA driver %s does not tell its version (cuDriverGetVersion: CUresult %d)", path.c_str(),
                        static_cast<int>(versioned));
    return;
  }
  if (version < kMinimumDriverVersion) {
    out.status = GPUMEM_ERROR_NO_DRIVER;
    out.detail = format("the CUDA driver %s supports CUDA %d.%d; gpumem needs 12.0 or newer", path.c_str(),
                        version / 1000, version % 1000 / 10);
    return;
  }
  if (out.device_status != GPUMEM_SUCCESS) return;
  int count = 0;
  const CUresult counted = a.cuDeviceGetCount(&count);
  if (counted != CUDA_SUCCESS || count <= 0) {
    out.device_status = GPUMEM_ERROR_NO_DEVICE;
    out.device_result = counted;
    out.device_detail = counted == CUDA_SUCCESS
                            ? "the CUDA driver reports no device (cuDeviceGetCount: 0)"
                            : format("the CUDA driver cannot count its devices (cuDeviceGetCount: CUresult %d)",
                                     static_cast<int>(counted));
    return;
  }
  out.device_count = count;
  out.contexts = std::make_unique<std::atomic<CUcontext>[]>(static_cast<size_t>(count));
}

Loaded& loaded() {
  static Loaded* instance = [] {
    // Leaked on purpose: late frees at process exit still find the driver table.
    auto* l = new Loaded;
    load(*l);
    return l;
  }();
  return *instance;
}

gpumem_status_t status_of(CUresult r) {
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return GPUMEM_ERROR_OUT_OF_MEMORY;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
      return GPUMEM_ERROR_INVALID_ARGUMENT;
    case CUDA_ERROR_NO_DEVICE:
      return GPUMEM_ERROR_NO_DEVICE;
    case CUDA_ERROR_INVALID_DEVICE:
      return GPUMEM_ERROR_INVALID_DEVICE;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
      return GPUMEM_ERROR_NOT_SUPPORTED;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
      return GPUMEM_ERROR_ALREADY_REGISTERED;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
      return GPUMEM_ERROR_INVALID_POINTER;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
    case CUDA_ERROR_STREAM_CAPTURE_MERGE:
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION:
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
      return GPUMEM_ERROR_STREAM_CAPTURE;
    default:
      return GPUMEM_ERROR_DRIVER;
  }
}

}  // namespace

const Api& api() {
  Loaded& l = loaded();
  if (l.status != GPUMEM_SUCCESS) throw Error(l.status, l.detail, l.cuda_result);
  return l.api;
}

const Api& device_api() {
  const Api& a = api();
  Loaded& l = loaded();
  if (l.device_status != GPUMEM_SUCCESS) throw Error(l.device_status, l.device_detail, l.device_result);
  return a;
}

int device_count() {
  device_api();
  return loaded().device_count;
}

void require_device(int device) {
  const int count = device_count();
  if (device < 0 || device >= count)
    fail(GPUMEM_ERROR_INVALID_DEVICE, "device %d does not exist (there %s %d, numbered from 0)", device,
         count == 1 ? "is" : "are", count);
}

CUcontext primary_context(int device) {
  require_device(device);
  Loaded& l = loaded();
  std::atomic<CUcontext>& slot = l.contexts[static_cast<size_t>(device)];
  CUcontext ctx = slot.load(std::memory_order_acquire);
  if (ctx) return ctx;
  std::lock_guard<std::mutex> lock(l.retain_mutex);
  ctx = slot.load(std::memory_order_relaxed);
  if (ctx) return ctx;
  CUdevice dev = 0;
  check(l.api.cuDeviceGet(&dev, device), "cuDeviceGet");
  // Retained once and never released: the context outlives every allocation made in it.
  CUresult r = l.api.cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r != CUDA_SUCCESS) throw_result(r, format("retaining the primary context of device %d", device));
  slot.store(ctx, std::memory_order_release);
  return ctx;
}

int current_device() {
  // Checked once: the driver's state is settled when it loads, and a failure leaves the static
  // unset, so the next call throws the same error again.
  static const Api& a = device_api();
  // One driver call on the common path: it fails only when no context is current.
  CUdevice dev = 0;
  const CUresult r = a.cuCtxGetDevice(&dev);
  if (r == CUDA_SUCCESS) return dev;
  if (r == CUDA_ERROR_INVALID_CONTEXT) return 0;
  throw_result(r, "cuCtxGetDevice (the device of the current context)");
}

CUcontext current_context() {
  const Api& a = device_api();
  CUcontext ctx = nullptr;
  if (a.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx) return ctx;
  return primary_context(0);
}

CUcontext stream_context(CUstream stream) {
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return nullptr;
  CUcontext ctx = nullptr;
  check(device_api().cuStreamGetCtx(stream, &ctx), "cuStreamGetCtx (is the stream valid?)");
  return ctx;
}

void throw_result(CUresult result, const std::string& what) {
  const char* name = nullptr;
  const char* message = nullptr;
  Loaded& l = loaded();
  if (l.api.cuGetErrorName) l.api.cuGetErrorName(result, &name);
  if (l.api.cuGetErrorString) l.api.cuGetErrorString(result, &message);
  // The driver's words for these do not say that a graph capture is the cause.
  const char* hint = status_of(result) == GPUMEM_ERROR_STREAM_CAPTURE
                         ? "; a stream is being captured into a CUDA graph, and synchronous work or work on the "
                           "legacy stream is not allowed during the capture: queue it on the capturing stream"
                         : "";
  throw Error(status_of(result),
              format("%s: %s (%s; CUresult %d)%s", what.c_str(), name ? name : "unknown CUDA error",
                     message ? message : "no message", static_cast<int>(result), hint),
              static_cast<int32_t>(result));
}

namespace {

const char* capture_state(CUstreamCaptureStatus status) {
  return status == CU_STREAM_CAPTURE_STATUS_INVALIDATED ? " (its capture is invalidated already, and not yet ended)"
                                                        : "";
}

std::string current_device_name(const Api& a) {
  CUdevice dev = 0;
  return a.cuCtxGetDevice(&dev) == CUDA_SUCCESS ? format("device %d's context", static_cast<int>(dev))
                                                : std::string("the current context");
}

// What is being captured that synchronous work in the current context would break; empty if
// nothing. Both answers come from cuStreamIsCapturing, which disturbs no capture: on the legacy
// stream it reports a capture on a blocking stream of the context as CUDA_ERROR_STREAM_CAPTURE_IMPLICIT.
std::string capturing_here(const Api& a) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult legacy = a.cuStreamIsCapturing(CU_STREAM_LEGACY, &status);
  if (legacy == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
    return format(
        "a blocking stream of %s is being captured, which ties up the legacy stream that synchronous work "
        "uses (cuStreamIsCapturing on the legacy stream answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)",
        current_device_name(a).c_str());
  if (legacy != CUDA_SUCCESS) throw_result(legacy, "cuStreamIsCapturing(CU_STREAM_LEGACY)");
  status = CU_STREAM_CAPTURE_STATUS_NONE;
  check(a.cuStreamIsCapturing(CU_STREAM_PER_THREAD, &status), "cuStreamIsCapturing(CU_STREAM_PER_THREAD)");
  if (status != CU_STREAM_CAPTURE_STATUS_NONE)
    return format("the calling thread's per-thread default stream of %s is being captured%s",
                  current_device_name(a).c_str(), capture_state(status));
  return {};
}

}  // namespace

void refuse_during_capture(const char* fn, const char* work, const char* instead,
                           std::initializer_list<CUcontext> contexts, CUstream stream) {
  const Api& a = api();
  std::string what;
  if (!is_legacy_stream(stream) && stream != CU_STREAM_PER_THREAD) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    check(a.cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing (is the stream valid?)");
    if (status != CU_STREAM_CAPTURE_STATUS_NONE)
      what = format("stream %p is being captured%s", static_cast<void*>(stream), capture_state(status));
  }
  bool asked = false;
  for (auto it = contexts.begin(); what.empty() && it != contexts.end(); ++it) {
    if (!*it || std::find(contexts.begin(), it, *it) != it) continue;
    ContextScope scope(*it);
    what = capturing_here(a);
    asked = true;
  }
  if (what.empty() && !asked) {
    ContextScope scope(current_context());
    what = capturing_here(a);
  }
  if (what.empty()) return;
  throw Error(GPUMEM_ERROR_STREAM_CAPTURE,
              format("%s: refused while a stream is being captured into a CUDA graph: %s, and %s would break the "
                     "capture (the driver refuses it and invalidates the capture). Nothing was done and the capture "
                     "is still valid; %s",
                     fn, what.c_str(), work, instead));
}

bool capture_mode_relaxed() {
  // The mode is read by exchanging it, and put back at once.
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  check(api().cuThreadExchangeStreamCaptureMode(&mode), "cuThreadExchangeStreamCaptureMode");
  CUstreamCaptureMode back = mode;
  check(api().cuThreadExchangeStreamCaptureMode(&back), "cuThreadExchangeStreamCaptureMode");
  return mode == CU_STREAM_CAPTURE_MODE_RELAXED;
}

RelaxedCaptureScope::RelaxedCaptureScope() {
  check(api().cuThreadExchangeStreamCaptureMode(&previous_), "cuThreadExchangeStreamCaptureMode");
}

RelaxedCaptureScope::~RelaxedCaptureScope() { loaded().api.cuThreadExchangeStreamCaptureMode(&previous_); }

ContextScope::ContextScope(CUcontext context) {
  const Api& a = api();
  CUcontext current = nullptr;
  a.cuCtxGetCurrent(&current);
  if (current != context) {
    check(a.cuCtxPushCurrent(context), "cuCtxPushCurrent");
    pushed_ = true;
  }
}

ContextScope::~ContextScope() {
  if (pushed_) {
    CUcontext popped = nullptr;
    loaded().api.cuCtxPopCurrent(&popped);
  }
}

}  // namespace gpumem::driver
