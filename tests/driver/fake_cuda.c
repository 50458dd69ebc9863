/* A stand-in for libcuda.so.1, for the driver-loading tests: gpumem opens it through
 * GPUMEM_CUDA_DRIVER. Like a CUDA 12+ driver it is reached through cuGetProcAddress_v2 alone, and
 * each entry point has the signature of the version gpumem asks for (checked against cudaTypedefs.h
 * at compile time). Environment variables, read at every call, choose how it behaves:
 *   FAKE_CUDA_VERSION       what cuDriverGetVersion reports (default 13000)
 *   FAKE_CUDA_MISSING       comma-separated entry points cuGetProcAddress_v2 does not find; "*": none found
 *   FAKE_CUDA_INIT_RESULT   the CUresult cuInit returns (default 0; 100 is CUDA_ERROR_NO_DEVICE)
 *   FAKE_CUDA_DEVICE_COUNT  what cuDeviceGetCount reports (default 1, at most 8)
 * No memory is ever handed out: allocations fail with CUDA_ERROR_OUT_OF_MEMORY. So that calls on
 * managed memory get past their pointer checks, one range that nobody owns is reported as a managed
 * allocation on device 0 (fake_cuda_managed_address()); the fake never touches it and neither may
 * its callers. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#define FAKE_MAX_DEVICES 8
#define FAKE_TOTAL_MEMORY ((size_t)1 << 30)
#define FAKE_FREE_MEMORY ((size_t)1 << 29)
/* High in the user half of the address space, far from where glibc and the sanitizers map. */
#define FAKE_MANAGED_BASE ((CUdeviceptr)0x7f0000000000ULL)
#define FAKE_MANAGED_SIZE ((size_t)1 << 20)

/* ---- State ------------------------------------------------------------------------------------ */

/* Set by a successful cuInit; the tests are single-threaded, and load() calls cuInit once. */
static int initialized;

/* Primary contexts are addresses in here: opaque to gpumem, never dereferenced. */
static char primary_contexts[FAKE_MAX_DEVICES];

/* Each thread's context stack lives behind a pthread key rather than in C11 thread-local storage:
 * this library is opened with dlopen, and LeakSanitizer can misread a dlopen'ed library's dynamic
 * TLS block (see tests/abi/CMakeLists.txt). */
struct context_stack {
  int depth;
  CUcontext items[64];
};
static pthread_key_t stack_key;
static pthread_once_t stack_once = PTHREAD_ONCE_INIT;
static void make_stack_key(void) { pthread_key_create(&stack_key, free); }

static struct context_stack* context_stack(void) {
  pthread_once(&stack_once, make_stack_key);
  struct context_stack* s = pthread_getspecific(stack_key);
  if (s == NULL && (s = calloc(1, sizeof *s)) != NULL) pthread_setspecific(stack_key, s);
  return s;
}

static CUcontext current_context(void) {
  const struct context_stack* s = context_stack();
  return s && s->depth > 0 ? s->items[s->depth - 1] : NULL;
}

static long env_long(const char* name, long fallback) {
  const char* value = getenv(name);
  return value && *value ? strtol(value, NULL, 0) : fallback;
}

static int driver_version(void) { return (int)env_long("FAKE_CUDA_VERSION", 13000); }

static int device_count(void) {
  const long n = env_long("FAKE_CUDA_DEVICE_COUNT", 1);
  return n < 0 ? 0 : n > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : (int)n;
}

static int is_missing(const char* symbol) {
  const char* list = getenv("FAKE_CUDA_MISSING");
  if (list == NULL) return 0;
  if (strcmp(list, "*") == 0) return 1;
  const size_t n = strlen(symbol);
  for (const char* p = list;;) {
    const char* comma = strchr(p, ',');
    const size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == n && strncmp(p, symbol, n) == 0) return 1;
    if (comma == NULL) return 0;
    p = comma + 1;
  }
}

static int in_managed_range(CUdeviceptr p, size_t size) {
  return p >= FAKE_MANAGED_BASE && p - FAKE_MANAGED_BASE <= FAKE_MANAGED_SIZE &&
         size <= FAKE_MANAGED_SIZE - (p - FAKE_MANAGED_BASE);
}

static const struct {
  CUresult code;
  const char* name;
  const char* message;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
};

static CUresult describe(CUresult code, const char** out, int message) {
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; ++i)
    if (errors[i].code == code) {
      *out = message ? errors[i].message : errors[i].name;
      return CUDA_SUCCESS;
    }
  *out = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

/* The preconditions a real driver enforces, so that gpumem calling out of order fails here too. */
#define REQUIRE_INIT() \
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED
#define REQUIRE_DEVICE(dev) \
  REQUIRE_INIT();           \
  if ((dev) < 0 || (dev) >= device_count()) return CUDA_ERROR_INVALID_DEVICE
#define REQUIRE_CONTEXT() \
  REQUIRE_INIT();         \
  if (current_context() == NULL) return CUDA_ERROR_INVALID_CONTEXT

/* ---- Entry points ----------------------------------------------------------------------------- */

static CUresult CUDAAPI fake_cuInit(unsigned int flags) {
  (void)flags;
  const CUresult r = (CUresult)env_long("FAKE_CUDA_INIT_RESULT", CUDA_SUCCESS);
  if (r == CUDA_SUCCESS) initialized = 1;
  return r;
}
static CUresult CUDAAPI fake_cuDriverGetVersion(int* version) {
  if (version == NULL) return CUDA_ERROR_INVALID_VALUE;
  *version = driver_version();
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuGetErrorName(CUresult e, const char** s) { return describe(e, s, 0); }
static CUresult CUDAAPI fake_cuGetErrorString(CUresult e, const char** s) { return describe(e, s, 1); }

static CUresult CUDAAPI fake_cuDeviceGetCount(int* count) {
  REQUIRE_INIT();
  *count = device_count();
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuDeviceGet(CUdevice* dev, int ordinal) {
  REQUIRE_DEVICE(ordinal);
  *dev = ordinal;
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuDeviceGetName(char* name, int len, CUdevice dev) {
  REQUIRE_DEVICE(dev);
  if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "Fake GPU");
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  REQUIRE_DEVICE(dev);
  *bytes = FAKE_TOTAL_MEMORY;
  return CUDA_SUCCESS;
}
/* Every capability present: compute capability 1.1, managed memory, concurrent access, pools. */
static CUresult CUDAAPI fake_cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice dev) {
  (void)attribute;
  REQUIRE_DEVICE(dev);
  *value = 1;
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  REQUIRE_DEVICE(dev);
  *ctx = (CUcontext)(void*)&primary_contexts[dev];
  return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuCtxGetCurrent(CUcontext* ctx) {
  REQUIRE_INIT();
  *ctx = current_context();
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuCtxPushCurrent(CUcontext ctx) {
  REQUIRE_INIT();
  const uintptr_t p = (uintptr_t)(void*)ctx, first = (uintptr_t)primary_contexts;
  if (p < first || p >= first + (uintptr_t)device_count()) return CUDA_ERROR_INVALID_CONTEXT;
  struct context_stack* s = context_stack();
  if (s == NULL || s->depth == (int)(sizeof s->items / sizeof s->items[0])) return CUDA_ERROR_OUT_OF_MEMORY;
  s->items[s->depth++] = ctx;
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuCtxPopCurrent(CUcontext* ctx) {
  REQUIRE_CONTEXT();
  struct context_stack* s = context_stack();
  const CUcontext popped = s->items[--s->depth];
  if (ctx) *ctx = popped;
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuCtxGetDevice(CUdevice* dev) {
  REQUIRE_CONTEXT();
  *dev = (CUdevice)((uintptr_t)(void*)current_context() - (uintptr_t)primary_contexts);
  return CUDA_SUCCESS;
}

/* No stream is ever created, so only the default streams exist, and gpumem asks about no others. */
static CUresult CUDAAPI fake_cuStreamGetCtx(CUstream stream, CUcontext* ctx) {
  (void)stream;
  (void)ctx;
  REQUIRE_INIT();
  return CUDA_ERROR_INVALID_HANDLE;
}
static CUresult CUDAAPI fake_cuStreamSynchronize(CUstream stream) {
  (void)stream;
  REQUIRE_CONTEXT();
  return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuMemGetInfo(size_t* free_bytes, size_t* total) {
  REQUIRE_CONTEXT();
  *free_bytes = FAKE_FREE_MEMORY;
  *total = FAKE_TOTAL_MEMORY;
  return CUDA_SUCCESS;
}

/* Allocations: none succeeds. */
static CUresult CUDAAPI fake_cuMemAlloc(CUdeviceptr* p, size_t size) {
  (void)size;
  REQUIRE_CONTEXT();
  *p = 0;
  return CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult CUDAAPI fake_cuMemAllocAsync(CUdeviceptr* p, size_t size, CUstream stream) {
  (void)stream;
  return fake_cuMemAlloc(p, size);
}
static CUresult CUDAAPI fake_cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t size, CUmemoryPool pool, CUstream stream) {
  (void)pool;
  (void)stream;
  return fake_cuMemAlloc(p, size);
}
static CUresult CUDAAPI fake_cuMemAllocManaged(CUdeviceptr* p, size_t size, unsigned int flags) {
  (void)flags;
  return fake_cuMemAlloc(p, size);
}
static CUresult CUDAAPI fake_cuMemHostAlloc(void** p, size_t size, unsigned int flags) {
  (void)size;
  (void)flags;
  REQUIRE_CONTEXT();
  *p = NULL;
  return CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult CUDAAPI fake_cuMemHostRegister(void* p, size_t size, unsigned int flags) {
  (void)p;
  (void)size;
  (void)flags;
  REQUIRE_CONTEXT();
  return CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult CUDAAPI fake_cuArray3DCreate(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  (void)desc;
  REQUIRE_CONTEXT();
  *array = NULL;
  return CUDA_ERROR_OUT_OF_MEMORY;
}

/* Frees and every use of memory: there is none to free or use. */
static CUresult CUDAAPI fake_cuMemFree(CUdeviceptr p) {
  (void)p;
  REQUIRE_CONTEXT();
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult CUDAAPI fake_cuMemFreeAsync(CUdeviceptr p, CUstream stream) {
  (void)stream;
  return fake_cuMemFree(p);
}
static CUresult CUDAAPI fake_cuMemFreeHost(void* p) { return fake_cuMemFree((CUdeviceptr)(uintptr_t)p); }
static CUresult CUDAAPI fake_cuMemHostUnregister(void* p) { return fake_cuMemFree((CUdeviceptr)(uintptr_t)p); }
static CUresult CUDAAPI fake_cuMemHostGetDevicePointer(CUdeviceptr* d, void* p, unsigned int flags) {
  (void)flags;
  *d = 0;
  return fake_cuMemFree((CUdeviceptr)(uintptr_t)p);
}
static CUresult CUDAAPI fake_cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  (void)v;
  (void)n;
  return fake_cuMemFree(d);
}
static CUresult CUDAAPI fake_cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n) {
  (void)v;
  (void)n;
  return fake_cuMemFree(d);
}
static CUresult CUDAAPI fake_cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n) {
  (void)v;
  (void)n;
  return fake_cuMemFree(d);
}
static CUresult CUDAAPI fake_cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream stream) {
  (void)stream;
  return fake_cuMemsetD8(d, v, n);
}
static CUresult CUDAAPI fake_cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream stream) {
  (void)stream;
  return fake_cuMemsetD16(d, v, n);
}
static CUresult CUDAAPI fake_cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream stream) {
  (void)stream;
  return fake_cuMemsetD32(d, v, n);
}
static CUresult CUDAAPI fake_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  (void)src;
  (void)n;
  return fake_cuMemFree(dst);
}
static CUresult CUDAAPI fake_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  (void)stream;
  return fake_cuMemcpy(dst, src, n);
}
static CUresult CUDAAPI fake_cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR* desc, CUarray array) {
  (void)desc;
  (void)array;
  REQUIRE_CONTEXT();
  return CUDA_ERROR_INVALID_HANDLE;
}
static CUresult CUDAAPI fake_cuArrayDestroy(CUarray array) {
  (void)array;
  REQUIRE_CONTEXT();
  return CUDA_ERROR_INVALID_HANDLE;
}

/* The managed range: advice and prefetches are accepted and change nothing. */
static CUresult CUDAAPI fake_cuMemPrefetchAsync(CUdeviceptr p, size_t size, CUmemLocation location, unsigned int flags,
                                                CUstream stream) {
  (void)location;
  (void)flags;
  (void)stream;
  REQUIRE_CONTEXT();
  return in_managed_range(p, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
static CUresult CUDAAPI fake_cuMemAdvise(CUdeviceptr p, size_t size, CUmem_advise advice, CUmemLocation location) {
  (void)advice;
  (void)location;
  REQUIRE_CONTEXT();
  return in_managed_range(p, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
/* No advice, never prefetched: 0 for read-mostly, CU_DEVICE_INVALID for every location. */
static CUresult CUDAAPI fake_cuMemRangeGetAttributes(void** data, size_t* sizes, CUmem_range_attribute* attributes,
                                                     size_t count, CUdeviceptr p, size_t size) {
  REQUIRE_INIT();
  if (!in_managed_range(p, size)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i)
    for (size_t j = 0; j < sizes[i] / sizeof(int); ++j)
      ((int*)data[i])[j] = attributes[i] == CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY ? 0 : CU_DEVICE_INVALID;
  return CUDA_SUCCESS;
}

/* Plain host memory (the driver's "default NULL values") for every address but the managed range. */
static CUresult CUDAAPI fake_cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes, void** data,
                                                    CUdeviceptr p) {
  REQUIRE_INIT();
  const int managed = in_managed_range(p, 1);
  for (unsigned int i = 0; i < count; ++i) {
    void* out = data[i];
    switch (attributes[i]) {
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext*)out = managed ? (CUcontext)(void*)&primary_contexts[0] : NULL;
        break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int*)out = managed ? CU_MEMORYTYPE_DEVICE : 0;
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr*)out = managed ? p : 0;
        break;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void**)out = managed ? (void*)(uintptr_t)p : NULL;
        break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned char*)out = (unsigned char)managed; /* a one-byte bool, as the driver writes it */
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int*)out = managed ? 0 : CU_DEVICE_INVALID;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr*)out = managed ? FAKE_MANAGED_BASE : 0;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t*)out = managed ? FAKE_MANAGED_SIZE : 0;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

/* ---- The one door in -------------------------------------------------------------------------- */

/* The list gpumem resolves, each implemented above at that version. */
#include "driver/entry_points.h"
#define FAKE_ENTRY_POINTS GPUMEM_DRIVER_ENTRY_POINTS

/* As the driver answers: a version newer than the driver is an invalid value, one older than the
 * entry point "version not sufficient", an unknown or FAKE_CUDA_MISSING name "not found". */
CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
  (void)flags;
  CUdriverProcAddressQueryResult ignored;
  if (symbolStatus == NULL) symbolStatus = &ignored;
  if (symbol == NULL || pfn == NULL) return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (cudaVersion > driver_version()) return CUDA_ERROR_INVALID_VALUE;
  if (is_missing(symbol)) return CUDA_ERROR_NOT_FOUND;
    /* The assignment to the PFN_ type is what checks each fake's signature. */
#define FAKE_RESOLVE(name, version)                               \
  if (strcmp(symbol, #name) == 0) {                               \
    const PFN_##name##_v##version fn = fake_##name;               \
    if (cudaVersion < (version)) {                                \
      *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT; \
      return CUDA_ERROR_NOT_FOUND;                                \
    }                                                             \
    *pfn = (void*)fn;                                             \
    *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;                  \
    return CUDA_SUCCESS;                                          \
  }
  FAKE_ENTRY_POINTS(FAKE_RESOLVE)
#undef FAKE_RESOLVE
  return CUDA_ERROR_NOT_FOUND;
}

/* ---- For the tests, through dlsym ------------------------------------------------------------- */

int fake_cuda_context_depth(void);
void* fake_cuda_managed_address(void);

/* How many contexts gpumem left pushed on the calling thread: 0 after every call returns. */
int fake_cuda_context_depth(void) {
  const struct context_stack* s = context_stack();
  return s ? s->depth : -1;
}

void* fake_cuda_managed_address(void) { return (void*)(uintptr_t)FAKE_MANAGED_BASE; }
