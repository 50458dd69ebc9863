/* A stand-in for libcuda.so.1, for the driver-loading and pinning tests (one file, as it is one
 * shared object; its length follows the driver API it models): gpumem opens it through
 * GPUMEM_CUDA_DRIVER. Like a CUDA 12+ driver it is reached through cuGetProcAddress_v2 alone, and
 * each entry point has the signature of the version gpumem asks for (checked against cudaTypedefs.h
 * at compile time). Environment variables, read at every call, choose how it behaves:
 *   FAKE_CUDA_VERSION       what cuDriverGetVersion reports (default 13000)
 *   FAKE_CUDA_MISSING       comma-separated entry points cuGetProcAddress_v2 does not find; "*": none found
 *   FAKE_CUDA_INIT_RESULT   the CUresult cuInit returns (default 0; 100 is CUDA_ERROR_NO_DEVICE)
 *   FAKE_CUDA_DEVICE_COUNT  what cuDeviceGetCount reports (default 1, at most 8)
 *   FAKE_CUDA_UNMAPPED      "start:size" in hex: a window of addresses taken as unmapped, which
 *                           cuMemHostRegister refuses (fake_cuda_set_unmapped() overrides it)
 *   FAKE_CUDA_ZERO_ATTRIBUTES  comma-separated CUdevice_attribute numbers reported as 0 (every other
 *                           attribute is 1)
 *   FAKE_CUDA_PEER_ACCESS   "1": every device can reach every other's memory (cuDeviceCanAccessPeer);
 *                           default: none can
 * No memory is ever handed out: allocations fail with CUDA_ERROR_OUT_OF_MEMORY. So that calls on
 * managed memory get past their pointer checks, one range that nobody owns is reported as a managed
 * allocation on device 0 (fake_cuda_managed_address()); the fake never touches it and neither may
 * its callers.
 *
 * Virtual memory management is bookkeeping too, of addresses in a window nobody maps: reservations
 * (cuMemAddressReserve), physical allocations (cuMemCreate, counted against each device's free
 * memory, which cuMemGetInfo reports less what they hold), and mappings of whole allocations into
 * reservations with each device's access (cuMemMap, cuMemSetAccess). cuMemUnmap takes whole
 * mappings only; cuMemSetAccess a range that is mapped all through. cuPointerGetAttributes reports
 * a mapped address as device memory of the allocation's device, whose range is its one mapping, as
 * the driver does; memsets succeed (and write nothing) where the current device may write all of
 * the mapped range.
 *
 * Host registration is real bookkeeping, never touching the memory: a ledger of live registrations
 * that refuses what the driver refuses. The driver locks whole pages, so cuMemHostRegister fails
 * with CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED when a page of the range is in a live registration,
 * and with CUDA_ERROR_INVALID_VALUE when the range touches the unmapped window or the managed range;
 * cuMemHostUnregister takes exactly a registration's start, else
 * CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED. cuPointerGetAttributes reports an address inside a
 * registration's bytes as page-locked host memory with that registration's start and size. The
 * tests read the ledger and inject failures through the fake_cuda_* functions at the end.
 *
 * Streams and graph capture follow the driver's rules (cuStreamBeginCapture,
 * cuThreadExchangeStreamCaptureMode), so that a call gpumem makes during a capture breaks it here as
 * it would there. Streams come from cuStreamCreate, blocking (flags 0) or not, in the current
 * context; each thread has a per-thread default stream in each context, blocking like the driver's.
 * A capture has a mode and the thread that began it; each thread has a capture interaction mode
 * (global at first). While a capture is in progress (begun, not yet ended):
 *   - work on a capturing stream is captured, not done: a node of the graph, and success;
 *   - any use of the legacy stream of a context (the synchronous copies and memsets, which run
 *     there, work queued on it, cuStreamSynchronize of it) while a blocking stream of that context
 *     is capturing fails with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates those captures, in
 *     every mode and from every thread;
 *   - a potentially unsafe call (allocations and frees, host registration, the synchronous copies
 *     and memsets, arrays, loading a module, enabling peer access, cuCtxSynchronize) fails with
 *     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures that prohibit it: from a
 *     thread in global mode, its own captures not begun in relaxed mode and every other thread's
 *     begun in global mode; in thread-local mode its own not begun in relaxed mode; in relaxed mode
 *     none;
 *   - synchronizing a capturing stream, or a context one of whose streams captures, fails with
 *     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates those captures.
 * cuStreamIsCapturing disturbs nothing: on the legacy stream while a blocking stream of the current
 * context captures it answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, as the driver does. cuStreamEndCapture
 * of an invalidated capture ends it with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph. The
 * tests reach streams and captures through the driver's own exported names (cuStreamCreate,
 * cuStreamBeginCapture_v2, cuStreamEndCapture, cuGraphDestroy, ...), as they do on a GPU. */
#define _GNU_SOURCE /* memfd_create, for exported allocations */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#define FAKE_MAX_DEVICES 8
#define FAKE_TOTAL_MEMORY ((size_t)1 << 30)
#define FAKE_FREE_MEMORY ((size_t)1 << 29)
/* High in the user half of the address space, far from where glibc and the sanitizers map. */
#define FAKE_MANAGED_BASE ((CUdeviceptr)0x7f0000000000ULL)
#define FAKE_MANAGED_SIZE ((size_t)1 << 20)

/* ---- State ------------------------------------------------------------------------------------ */

/* Set by a successful cuInit, which gpumem calls once, before any other call and any other thread. */
static int initialized;

/* Primary contexts are addresses in here: opaque to gpumem, never dereferenced. */
static char primary_contexts[FAKE_MAX_DEVICES];

/* Each thread's context stack lives behind a pthread key rather than in C11 thread-local storage:
 * this library is opened with dlopen, and LeakSanitizer can misread a dlopen'ed library's dynamic
 * TLS block (see tests/abi/CMakeLists.txt). */
struct context_stack {
  int depth;
  CUcontext items[64];
  CUstreamCaptureMode capture_mode; /* the thread's capture interaction mode; 0 is global */
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

/* The registration ledger, sorted by start, under ledger_mutex: gpumem registers from any thread. */
struct registration {
  uintptr_t start;
  size_t size;
  unsigned int flags;
  CUcontext context;
};
static pthread_mutex_t ledger_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct registration* ledger;
static size_t ledger_count, ledger_capacity, ledger_bytes;
static size_t register_calls, unregister_calls, overlap_refusals;
/* Injected failures: after fail_skip more calls, fail_count calls return fail_code. */
static int fail_skip, fail_count;
static CUresult fail_code;
/* Microseconds each register and unregister call takes, outside the ledger's lock, as locking
 * pages takes the driver a while: it widens the windows in which callers race. */
static unsigned int call_delay_us;
/* The unmapped window set by fake_cuda_set_unmapped(), which then overrides FAKE_CUDA_UNMAPPED. */
static int unmapped_set;
static uintptr_t unmapped_start;
static size_t unmapped_size;

/* Virtual memory management, under vmm_mutex: reservations and mappings sorted by start; the
 * allocation of handle h is vmm_handles[h - 1]. An allocation's memory is held until it is released
 * and no longer mapped. */
#define FAKE_VMM_BASE ((uintptr_t)0x7e0000000000ULL)
#define FAKE_VMM_SIZE ((size_t)1 << 40)
#define FAKE_VMM_GRANULARITY ((size_t)2 << 20)
struct vmm_range {
  uintptr_t start;
  size_t size;
};
struct vmm_allocation {
  size_t size;
  int device;
  int released;
  int mapped;
  int exportable; /* made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR requested, or imported */
};
struct vmm_mapping {
  uintptr_t start;
  size_t size;
  CUmemGenericAllocationHandle handle;
  CUmemAccess_flags access[FAKE_MAX_DEVICES];
};
static pthread_mutex_t vmm_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_range* vmm_ranges;
static size_t vmm_range_count, vmm_range_capacity;
static struct vmm_allocation* vmm_handles;
static size_t vmm_handle_count, vmm_handle_capacity;
static struct vmm_mapping* vmm_mappings;
static size_t vmm_mapping_count, vmm_mapping_capacity;
static size_t vmm_held[FAKE_MAX_DEVICES];
static size_t create_calls, map_calls, unmap_calls, set_access_calls, synchronize_calls;

/* Room for one more item in an array that grows; 0 when there is none. */
static int grow(void** items, size_t* capacity, size_t count, size_t item_size) {
  if (count < *capacity) return 1;
  const size_t more = *capacity ? 2 * *capacity : 64;
  void* grown = realloc(*items, more * item_size);
  if (grown == NULL) return 0;
  *items = grown;
  *capacity = more;
  return 1;
}

/* The mapping that holds p, or NULL; under vmm_mutex. */
static struct vmm_mapping* vmm_mapping_holding(uintptr_t p) {
  for (size_t i = 0; i < vmm_mapping_count && vmm_mappings[i].start <= p; ++i)
    if (p - vmm_mappings[i].start < vmm_mappings[i].size) return &vmm_mappings[i];
  return NULL;
}

/* Whether mappings cover [p, p + size) without a gap, and (device >= 0) that device may write all of
 * them; under vmm_mutex. */
static int vmm_covered(uintptr_t p, size_t size, int device) {
  for (uintptr_t at = p; at - p < size;) {
    const struct vmm_mapping* m = vmm_mapping_holding(at);
    if (m == NULL || (device >= 0 && m->access[device] != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) return 0;
    at = m->start + m->size;
  }
  return size > 0;
}

static uintptr_t page_size(void) { return (uintptr_t)sysconf(_SC_PAGESIZE); }
static uintptr_t page_down(uintptr_t p) { return p & ~(page_size() - 1); }
/* The end of the last page [p, p + size) touches; 0 when that wraps past the address space. */
static uintptr_t page_end(uintptr_t p, size_t size) { return page_down(p + size - 1) + page_size(); }

/* Whether the pages of [p, p + size) and of [start, start + n) meet; both sizes at least 1. */
static int pages_meet(uintptr_t p, size_t size, uintptr_t start, size_t n) {
  return page_down(p) <= page_down(start + n - 1) && page_down(start) <= page_down(p + size - 1);
}

/* The registration whose pages hold p, or NULL; under ledger_mutex. */
static struct registration* registration_paging(uintptr_t p) {
  for (size_t i = 0; i < ledger_count && page_down(ledger[i].start) <= p; ++i)
    if (p < page_end(ledger[i].start, ledger[i].size)) return &ledger[i];
  return NULL;
}

/* The registration whose bytes hold p, or NULL; under ledger_mutex. */
static struct registration* registration_holding(uintptr_t p) {
  for (size_t i = 0; i < ledger_count && ledger[i].start <= p; ++i)
    if (p - ledger[i].start < ledger[i].size) return &ledger[i];
  return NULL;
}

static int in_unmapped_window(uintptr_t p, size_t size) {
  uintptr_t start = unmapped_start;
  size_t n = unmapped_size;
  if (!unmapped_set) {
    const char* value = getenv("FAKE_CUDA_UNMAPPED");
    char* colon = NULL;
    if (value == NULL || *value == 0) return 0;
    start = (uintptr_t)strtoull(value, &colon, 16);
    n = *colon == ':' ? (size_t)strtoull(colon + 1, NULL, 16) : 0;
  }
  return n > 0 && pages_meet(p, size, start, n);
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

/* Whether FAKE_CUDA_PEER_ACCESS lets every device reach every other. */
static int peer_access(void) { return env_long("FAKE_CUDA_PEER_ACCESS", 0) != 0; }

/* Whether an attribute is one FAKE_CUDA_ZERO_ATTRIBUTES names. */
static int zero_attribute(CUdevice_attribute attribute) {
  const char* list = getenv("FAKE_CUDA_ZERO_ATTRIBUTES");
  for (char* end = NULL; list != NULL && *list; list = *end == ',' ? end + 1 : end) {
    const long n = strtol(list, &end, 0);
    if (end == list) return 0;
    if (n == (long)attribute) return 1;
  }
  return 0;
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
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
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

/* ---- Streams and graph capture ---------------------------------------------------------------- */

/* Streams are slots in here, under capture_mutex; a handle is a slot's address. Slots are never
 * reused, so a destroyed stream's handle stays unknown. */
#define FAKE_MAX_STREAMS 4096
struct fake_stream {
  int live;
  unsigned int flags; /* CU_STREAM_NON_BLOCKING or 0 */
  CUcontext context;
  int per_thread; /* the per-thread default stream of owner in context */
  pthread_t owner;
  CUstreamCaptureStatus status; /* NONE, or the capture's: ACTIVE or INVALIDATED until it is ended */
  CUstreamCaptureMode mode;     /* the capture's */
  pthread_t capturer;
  size_t nodes; /* work captured */
};
struct fake_graph {
  size_t nodes;
};
static pthread_mutex_t capture_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct fake_stream streams[FAKE_MAX_STREAMS];
static size_t stream_count;
/* Captures in progress, also read without the lock (__atomic): with none, no call pays for the rules. */
static int captures;
static size_t invalidating_calls, captured_calls;

static int capturing(void) { return __atomic_load_n(&captures, __ATOMIC_ACQUIRE) != 0; }
static int in_capture(const struct fake_stream* s) { return s->live && s->status != CU_STREAM_CAPTURE_STATUS_NONE; }
static int blocking(const struct fake_stream* s) { return !(s->flags & CU_STREAM_NON_BLOCKING); }

static CUstreamCaptureMode thread_capture_mode(void) {
  const struct context_stack* t = context_stack();
  return t ? t->capture_mode : CU_STREAM_CAPTURE_MODE_GLOBAL;
}

/* What a stream handle names, under capture_mutex. */
enum stream_kind { STREAM_LEGACY, STREAM_FAKE, STREAM_FOREIGN };
static enum stream_kind find_stream(CUstream h, struct fake_stream** out) {
  *out = NULL;
  if (h == NULL || h == CU_STREAM_LEGACY) return STREAM_LEGACY;
  if (h == CU_STREAM_PER_THREAD) {
    const CUcontext ctx = current_context();
    const pthread_t self = pthread_self();
    if (ctx == NULL) return STREAM_FOREIGN;
    for (size_t i = 0; i < stream_count; ++i)
      if (streams[i].live && streams[i].per_thread && streams[i].context == ctx &&
          pthread_equal(streams[i].owner, self))
        return *out = &streams[i], STREAM_FAKE;
    if (stream_count == FAKE_MAX_STREAMS) return STREAM_FOREIGN;
    streams[stream_count] =
        (struct fake_stream){1, 0, ctx, 1, self, CU_STREAM_CAPTURE_STATUS_NONE, CU_STREAM_CAPTURE_MODE_GLOBAL, self, 0};
    *out = &streams[stream_count++];
    return STREAM_FAKE;
  }
  const uintptr_t p = (uintptr_t)(void*)h, first = (uintptr_t)(void*)streams;
  if (p < first || p >= first + stream_count * sizeof *streams || (p - first) % sizeof *streams) return STREAM_FOREIGN;
  struct fake_stream* s = (struct fake_stream*)(void*)h;
  if (!s->live) return STREAM_FOREIGN;
  *out = s;
  return STREAM_FAKE;
}

static void invalidate(struct fake_stream* s) { s->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED; }

/* A use of ctx's legacy stream would wait for every blocking stream of ctx: those that capture are
 * invalidated. Under capture_mutex; how many there were. */
static int legacy_conflicts(CUcontext ctx) {
  int n = 0;
  for (size_t i = 0; i < stream_count; ++i)
    if (in_capture(&streams[i]) && blocking(&streams[i]) && streams[i].context == ctx) {
      invalidate(&streams[i]);
      ++n;
    }
  return n;
}

/* The captures that prohibit a potentially unsafe call from this thread, invalidated. Under
 * capture_mutex; how many there were. */
static int unsafe_conflicts(void) {
  const CUstreamCaptureMode mode = thread_capture_mode();
  if (mode == CU_STREAM_CAPTURE_MODE_RELAXED) return 0;
  const pthread_t self = pthread_self();
  int n = 0;
  for (size_t i = 0; i < stream_count; ++i) {
    struct fake_stream* s = &streams[i];
    if (!in_capture(s)) continue;
    const int own = pthread_equal(s->capturer, self);
    if ((own && s->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
        (!own && mode == CU_STREAM_CAPTURE_MODE_GLOBAL && s->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
      invalidate(s);
      ++n;
    }
  }
  return n;
}

/* The rules for a call that is potentially unsafe (unsafe) and uses the legacy stream of the current
 * context (legacy): CUDA_SUCCESS where neither forbids it. */
static CUresult capture_rules(int unsafe, int legacy) {
  if (!capturing()) return CUDA_SUCCESS;
  pthread_mutex_lock(&capture_mutex);
  const int implicit = legacy ? legacy_conflicts(current_context()) : 0;
  const int prohibited = unsafe ? unsafe_conflicts() : 0;
  if (implicit || prohibited) ++invalidating_calls;
  pthread_mutex_unlock(&capture_mutex);
  return implicit     ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
         : prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
                      : CUDA_SUCCESS;
}
#define UNSAFE_CALL()                              \
  do {                                             \
    const CUresult capture_ = capture_rules(1, 0); \
    if (capture_ != CUDA_SUCCESS) return capture_; \
  } while (0)
#define SYNCHRONOUS_CALL()                         \
  do {                                             \
    const CUresult capture_ = capture_rules(1, 1); \
    if (capture_ != CUDA_SUCCESS) return capture_; \
  } while (0)

/* Work queued on a stream: *captured when the stream captures (the work is a node of its graph, and
 * done no further); refused on the legacy stream while a blocking stream of the context captures. */
static CUresult queue_on(CUstream h, int* captured) {
  *captured = 0;
  if (!capturing()) return CUDA_SUCCESS;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&capture_mutex);
  struct fake_stream* s = NULL;
  switch (find_stream(h, &s)) {
    case STREAM_LEGACY:
      if (legacy_conflicts(current_context())) {
        ++invalidating_calls;
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      }
      break;
    case STREAM_FAKE:
      if (s->status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        ++s->nodes;
        ++captured_calls;
        *captured = 1;
      } else if (s->status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      }
      break;
    case STREAM_FOREIGN:
      break;
  }
  pthread_mutex_unlock(&capture_mutex);
  return r;
}

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
/* "fake-gpu" and the device's number. */
static CUresult CUDAAPI fake_cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  REQUIRE_DEVICE(dev);
  if (uuid == NULL) return CUDA_ERROR_INVALID_VALUE;
  memset(uuid, 0, sizeof *uuid);
  memcpy(uuid->bytes, "fake-gpu", 8);
  uuid->bytes[15] = (char)dev;
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
/* Every capability present unless FAKE_CUDA_ZERO_ATTRIBUTES says otherwise: compute capability
 * 1.1, managed memory, concurrent access, pools, virtual memory management. */
static CUresult CUDAAPI fake_cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice dev) {
  REQUIRE_DEVICE(dev);
  *value = zero_attribute(attribute) ? 0 : 1;
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

/* The context of a stream from cuStreamCreate; gpumem asks about no default stream. */
static CUresult CUDAAPI fake_cuStreamGetCtx(CUstream stream, CUcontext* ctx) {
  REQUIRE_INIT();
  if (ctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&capture_mutex);
  struct fake_stream* s = NULL;
  const int known = find_stream(stream, &s) == STREAM_FAKE && !s->per_thread;
  if (known) *ctx = s->context;
  pthread_mutex_unlock(&capture_mutex);
  return known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
/* No work is ever queued, so there is none to wait for; but a capturing stream cannot be waited
 * for, and the legacy stream is tied to the capturing blocking streams of its context. */
static CUresult CUDAAPI fake_cuStreamSynchronize(CUstream stream) {
  REQUIRE_INIT();
  if (stream == NULL || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
    REQUIRE_CONTEXT();
  }
  if (!capturing()) return CUDA_SUCCESS;
  if (stream == NULL || stream == CU_STREAM_LEGACY) return capture_rules(1, 1);
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&capture_mutex);
  struct fake_stream* s = NULL;
  if (find_stream(stream, &s) == STREAM_FAKE && in_capture(s)) {
    invalidate(s);
    ++invalidating_calls;
    r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  pthread_mutex_unlock(&capture_mutex);
  return r;
}

static CUresult CUDAAPI fake_cuMemGetInfo(size_t* free_bytes, size_t* total) {
  REQUIRE_CONTEXT();
  const int dev = (int)((uintptr_t)(void*)current_context() - (uintptr_t)primary_contexts);
  pthread_mutex_lock(&vmm_mutex);
  *free_bytes = FAKE_FREE_MEMORY - vmm_held[dev];
  pthread_mutex_unlock(&vmm_mutex);
  *total = FAKE_TOTAL_MEMORY;
  return CUDA_SUCCESS;
}

/* Allocations: none succeeds. */
static CUresult allocate(CUdeviceptr* p) {
  REQUIRE_CONTEXT();
  *p = 0;
  return CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult CUDAAPI fake_cuMemAlloc(CUdeviceptr* p, size_t size) {
  (void)size;
  REQUIRE_CONTEXT();
  UNSAFE_CALL();
  return allocate(p);
}
static CUresult CUDAAPI fake_cuMemAllocAsync(CUdeviceptr* p, size_t size, CUstream stream) {
  (void)size;
  REQUIRE_CONTEXT();
  int captured = 0;
  const CUresult r = queue_on(stream, &captured);
  return r != CUDA_SUCCESS ? r : allocate(p);
}
static CUresult CUDAAPI fake_cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t size, CUmemoryPool pool, CUstream stream) {
  (void)pool;
  return fake_cuMemAllocAsync(p, size, stream);
}
static CUresult CUDAAPI fake_cuMemAllocManaged(CUdeviceptr* p, size_t size, unsigned int flags) {
  (void)flags;
  return fake_cuMemAlloc(p, size);
}
static CUresult CUDAAPI fake_cuMemHostAlloc(void** p, size_t size, unsigned int flags) {
  (void)size;
  (void)flags;
  REQUIRE_CONTEXT();
  UNSAFE_CALL();
  *p = NULL;
  return CUDA_ERROR_OUT_OF_MEMORY;
}
/* Arrays hold no memory: each is its descriptor, freed by cuArrayDestroy, so that handles over
 * them can be made, destroyed and made again (at the same address, as malloc likes to). */
static CUresult CUDAAPI fake_cuArray3DCreate(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  REQUIRE_CONTEXT();
  UNSAFE_CALL();
  *array = NULL;
  CUDA_ARRAY3D_DESCRIPTOR* made = malloc(sizeof *made);
  if (!made) return CUDA_ERROR_OUT_OF_MEMORY;
  *made = *desc;
  *array = (CUarray)made;
  return CUDA_SUCCESS;
}

/* Memory pools: each device has its one pool, which is both its default and its current pool. It
 * holds nothing, keeps the release threshold it is given, and is reachable from its own device
 * alone (no device can reach a peer). Creating another pool needs memory, of which there is none. */
static char device_pools[FAKE_MAX_DEVICES];
static cuuint64_t pool_thresholds[FAKE_MAX_DEVICES];

/* The device whose pool this is, or -1. */
static int pool_device(CUmemoryPool pool) {
  const uintptr_t p = (uintptr_t)(void*)pool, first = (uintptr_t)device_pools;
  return p >= first && p < first + (uintptr_t)device_count() ? (int)(p - first) : -1;
}

static CUresult CUDAAPI fake_cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  REQUIRE_DEVICE(dev);
  if (pool == NULL) return CUDA_ERROR_INVALID_VALUE;
  *pool = (CUmemoryPool)(void*)&device_pools[dev];
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  return fake_cuDeviceGetDefaultMemPool(pool, dev);
}
static CUresult CUDAAPI fake_cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  REQUIRE_INIT();
  if (pool == NULL || props == NULL || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id < 0 ||
      props->location.id >= device_count())
    return CUDA_ERROR_INVALID_VALUE;
  *pool = NULL;
  return CUDA_ERROR_OUT_OF_MEMORY;
}
/* Only pools the fake never made could be destroyed, and a default pool cannot be. */
static CUresult CUDAAPI fake_cuMemPoolDestroy(CUmemoryPool pool) {
  (void)pool;
  REQUIRE_INIT();
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult CUDAAPI fake_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  REQUIRE_INIT();
  const int dev = pool_device(pool);
  if (dev < 0 || value == NULL) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      pool_thresholds[dev] = *(cuuint64_t*)value;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      return *(cuuint64_t*)value == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}
static CUresult CUDAAPI fake_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  REQUIRE_INIT();
  const int dev = pool_device(pool);
  if (dev < 0 || value == NULL) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *(cuuint64_t*)value = pool_thresholds[dev];
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *(cuuint64_t*)value = 0;
      return CUDA_SUCCESS;
    default:
      *(int*)value = 0;
      return CUDA_SUCCESS;
  }
}
static CUresult CUDAAPI fake_cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  (void)keep;
  REQUIRE_INIT();
  return pool_device(pool) < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  REQUIRE_INIT();
  const int dev = pool_device(pool);
  if (dev < 0 || (map == NULL && count > 0)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    REQUIRE_DEVICE(map[i].location.id);
    if (map[i].location.id != dev) return CUDA_ERROR_INVALID_DEVICE;
  }
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool pool, CUmemLocation* location) {
  REQUIRE_INIT();
  const int dev = pool_device(pool);
  if (dev < 0 || flags == NULL || location == NULL || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_DEVICE(location->id);
  *flags = location->id == dev ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

/* Virtual memory management: the bookkeeping described at the top. */
static int valid_prop(const CUmemAllocationProp* prop) {
  return prop != NULL && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id >= 0 &&
         prop->location.id < device_count();
}
static CUresult CUDAAPI fake_cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                           CUmemAllocationGranularity_flags option) {
  REQUIRE_INIT();
  if (granularity == NULL || !valid_prop(prop) ||
      (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
    return CUDA_ERROR_INVALID_VALUE;
  *granularity = FAKE_VMM_GRANULARITY;
  return CUDA_SUCCESS;
}
/* The first gap of the window that fits, at the alignment. */
static CUresult CUDAAPI fake_cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                                 unsigned long long flags) {
  (void)addr; /* a hint the driver may ignore */
  REQUIRE_INIT();
  if (alignment == 0) alignment = FAKE_VMM_GRANULARITY;
  if (ptr == NULL || size == 0 || size % FAKE_VMM_GRANULARITY || (alignment & (alignment - 1)) || flags)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&vmm_mutex);
  uintptr_t at = FAKE_VMM_BASE;
  for (size_t i = 0; i <= vmm_range_count; ++i) {
    const uintptr_t limit = i < vmm_range_count ? vmm_ranges[i].start : FAKE_VMM_BASE + FAKE_VMM_SIZE;
    at = (at + alignment - 1) & ~(uintptr_t)(alignment - 1);
    if (at <= limit && size <= limit - at) {
      if (!grow((void**)&vmm_ranges, &vmm_range_capacity, vmm_range_count, sizeof *vmm_ranges)) break;
      memmove(&vmm_ranges[i + 1], &vmm_ranges[i], (vmm_range_count - i) * sizeof *vmm_ranges);
      vmm_ranges[i] = (struct vmm_range){at, size};
      ++vmm_range_count;
      *ptr = (CUdeviceptr)at;
      r = CUDA_SUCCESS;
      break;
    }
    if (i < vmm_range_count) at = vmm_ranges[i].start + vmm_ranges[i].size;
  }
  pthread_mutex_unlock(&vmm_mutex);
  return r;
}
/* A whole reservation, with nothing mapped in it. */
static CUresult CUDAAPI fake_cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  REQUIRE_INIT();
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_mutex);
  for (size_t i = 0; i < vmm_range_count; ++i) {
    if (vmm_ranges[i].start != (uintptr_t)ptr || vmm_ranges[i].size != size) continue;
    int empty = 1;
    for (size_t j = 0; j < vmm_mapping_count; ++j) empty &= vmm_mappings[j].start - (uintptr_t)ptr >= size;
    if (empty) {
      memmove(&vmm_ranges[i], &vmm_ranges[i + 1], (vmm_range_count - i - 1) * sizeof *vmm_ranges);
      --vmm_range_count;
      r = CUDA_SUCCESS;
    }
    break;
  }
  pthread_mutex_unlock(&vmm_mutex);
  return r;
}
static CUresult CUDAAPI fake_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                         const CUmemAllocationProp* prop, unsigned long long flags) {
  REQUIRE_INIT();
  if (handle == NULL || !valid_prop(prop) || size == 0 || size % FAKE_VMM_GRANULARITY || flags)
    return CUDA_ERROR_INVALID_VALUE;
  const int dev = prop->location.id;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&vmm_mutex);
  ++create_calls;
  if (size <= FAKE_FREE_MEMORY - vmm_held[dev] &&
      grow((void**)&vmm_handles, &vmm_handle_capacity, vmm_handle_count, sizeof *vmm_handles)) {
    vmm_handles[vmm_handle_count++] = (struct vmm_allocation){
        size, dev, 0, 0, prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
    vmm_held[dev] += size;
    *handle = vmm_handle_count;
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&vmm_mutex);
  return r;
}
/* The allocation of a live handle, or NULL; under vmm_mutex. */
static struct vmm_allocation* vmm_allocation(CUmemGenericAllocationHandle handle) {
  return handle >= 1 && handle <= vmm_handle_count && !vmm_handles[handle - 1].released ? &vmm_handles[handle - 1]
                                                                                        : NULL;
}
static void vmm_forget_if_done(struct vmm_allocation* a) {
  if (a->released && a->mapped == 0) vmm_held[a->device] -= a->size;
}
static CUresult CUDAAPI fake_cuMemRelease(CUmemGenericAllocationHandle handle) {
  REQUIRE_INIT();
  pthread_mutex_lock(&vmm_mutex);
  struct vmm_allocation* a = vmm_allocation(handle);
  if (a != NULL) {
    a->released = 1;
    vmm_forget_if_done(a);
  }
  pthread_mutex_unlock(&vmm_mutex);
  return a != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
/* A whole allocation, into addresses of one reservation where nothing is mapped. */
static CUresult CUDAAPI fake_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                      unsigned long long flags) {
  REQUIRE_INIT();
  const uintptr_t p = (uintptr_t)ptr;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_mutex);
  ++map_calls;
  struct vmm_allocation* a = vmm_allocation(handle);
  int inside = 0, free_there = 1;
  for (size_t i = 0; i < vmm_range_count; ++i)
    inside |= p >= vmm_ranges[i].start && p - vmm_ranges[i].start < vmm_ranges[i].size &&
              size <= vmm_ranges[i].size - (p - vmm_ranges[i].start);
  size_t at = 0;
  for (; at < vmm_mapping_count && vmm_mappings[at].start < p + size; ++at)
    free_there &= vmm_mappings[at].start + vmm_mappings[at].size <= p;
  if (a != NULL && offset == 0 && size == a->size && flags == 0 && inside && free_there &&
      grow((void**)&vmm_mappings, &vmm_mapping_capacity, vmm_mapping_count, sizeof *vmm_mappings)) {
    memmove(&vmm_mappings[at + 1], &vmm_mappings[at], (vmm_mapping_count - at) * sizeof *vmm_mappings);
    vmm_mappings[at] = (struct vmm_mapping){p, size, handle, {CU_MEM_ACCESS_FLAGS_PROT_NONE}};
    ++vmm_mapping_count;
    ++a->mapped;
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&vmm_mutex);
  return r;
}
/* The allocation mapped at addr (the start of a mapping), retained: a live handle again until
 * released, as the driver counts references. */
static CUresult CUDAAPI fake_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  REQUIRE_INIT();
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_mutex);
  for (size_t i = 0; i < vmm_mapping_count && handle != NULL; ++i)
    if (vmm_mappings[i].start == (uintptr_t)addr) {
      vmm_handles[vmm_mappings[i].handle - 1].released = 0;
      *handle = vmm_mappings[i].handle;
      r = CUDA_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&vmm_mutex);
  return r;
}
/* Sharing between processes. An exported allocation is a memory file holding its size and device,
 * which an import in any process turns into an allocation of its own of that size: bookkeeping,
 * as the rest. No cuMemAlloc memory exists, so the driver's IPC handles are refused. */
struct fake_export {
  uint64_t magic;
  size_t size;
  int device;
};
#define FAKE_EXPORT_MAGIC 0x66616b6565787074ULL
static CUresult CUDAAPI fake_cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                                          CUmemAllocationHandleType type, unsigned long long flags) {
  REQUIRE_INIT();
  if (shareable == NULL || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_mutex);
  struct vmm_allocation* a = vmm_allocation(handle);
  struct fake_export e = {FAKE_EXPORT_MAGIC, a ? a->size : 0, a ? a->device : 0};
  const int exportable = a != NULL && a->exportable;
  pthread_mutex_unlock(&vmm_mutex);
  if (!exportable) return CUDA_ERROR_INVALID_VALUE;
  const int fd = memfd_create("fake-cuda-export", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (write(fd, &e, sizeof e) != (ssize_t)sizeof e) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *(int*)shareable = fd;
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                                            CUmemAllocationHandleType type) {
  REQUIRE_INIT();
  struct fake_export e = {0, 0, 0};
  if (handle == NULL || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      pread((int)(intptr_t)os_handle, &e, sizeof e, 0) != (ssize_t)sizeof e || e.magic != FAKE_EXPORT_MAGIC ||
      e.device < 0 || e.device >= device_count())
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&vmm_mutex);
  if (grow((void**)&vmm_handles, &vmm_handle_capacity, vmm_handle_count, sizeof *vmm_handles)) {
    vmm_handles[vmm_handle_count++] = (struct vmm_allocation){e.size, e.device, 0, 0, 1};
    vmm_held[e.device] += e.size;
    *handle = vmm_handle_count;
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&vmm_mutex);
  return r;
}
static CUresult CUDAAPI fake_cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr) {
  REQUIRE_INIT();
  (void)handle;
  (void)ptr;
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult CUDAAPI fake_cuIpcOpenMemHandle(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int flags) {
  REQUIRE_INIT();
  (void)ptr;
  (void)handle;
  (void)flags;
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult CUDAAPI fake_cuIpcCloseMemHandle(CUdeviceptr ptr) {
  REQUIRE_INIT();
  (void)ptr;
  return CUDA_ERROR_INVALID_VALUE;
}

/* Whole mappings that make up [ptr, ptr + size) without a gap. */
/* Injected cuMemUnmap failures: after unmap_fail_skip more calls, one returns unmap_fail_code. */
static int unmap_fail_skip = -1;
static CUresult unmap_fail_code;

static CUresult CUDAAPI fake_cuMemUnmap(CUdeviceptr ptr, size_t size) {
  REQUIRE_INIT();
  const uintptr_t p = (uintptr_t)ptr;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_mutex);
  ++unmap_calls;
  if (unmap_fail_skip >= 0 && unmap_fail_skip-- == 0) {
    pthread_mutex_unlock(&vmm_mutex);
    return unmap_fail_code;
  }
  size_t first = 0;
  while (first < vmm_mapping_count && vmm_mappings[first].start < p) ++first;
  size_t last = first;
  uintptr_t at = p;
  for (; last < vmm_mapping_count && vmm_mappings[last].start == at && at - p < size; ++last)
    at += vmm_mappings[last].size;
  if (size > 0 && at - p == size && vmm_covered(p, size, -1)) {
    for (size_t i = first; i < last; ++i) {
      struct vmm_allocation* a = &vmm_handles[vmm_mappings[i].handle - 1];
      --a->mapped;
      vmm_forget_if_done(a);
    }
    memmove(&vmm_mappings[first], &vmm_mappings[last], (vmm_mapping_count - last) * sizeof *vmm_mappings);
    vmm_mapping_count -= last - first;
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&vmm_mutex);
  return r;
}
/* Over whole mappings, mapped all through; a device other than the memory's needs a peer path. */
static CUresult CUDAAPI fake_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  REQUIRE_INIT();
  if (desc == NULL || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    REQUIRE_DEVICE(desc[i].location.id);
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
  }
  const uintptr_t p = (uintptr_t)ptr;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&vmm_mutex);
  ++set_access_calls;
  const struct vmm_mapping* head = vmm_mapping_holding(p);
  const struct vmm_mapping* tail = size ? vmm_mapping_holding(p + size - 1) : NULL;
  if (!vmm_covered(p, size, -1) || head->start != p || tail->start + tail->size != p + size)
    r = CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; r == CUDA_SUCCESS && i < vmm_mapping_count; ++i) {
    struct vmm_mapping* m = &vmm_mappings[i];
    if (m->start - p >= size) continue;
    for (size_t j = 0; j < count; ++j)
      if (desc[j].location.id != vmm_handles[m->handle - 1].device && !peer_access()) r = CUDA_ERROR_INVALID_DEVICE;
  }
  for (size_t i = 0; r == CUDA_SUCCESS && i < vmm_mapping_count; ++i) {
    struct vmm_mapping* m = &vmm_mappings[i];
    if (m->start - p >= size) continue;
    for (size_t j = 0; j < count; ++j) m->access[desc[j].location.id] = desc[j].flags;
  }
  pthread_mutex_unlock(&vmm_mutex);
  return r;
}
/* No work is ever queued: there is none to wait for; but while a stream of the context captures,
 * the context cannot be waited for. */
static CUresult CUDAAPI fake_cuCtxSynchronize(void) {
  REQUIRE_CONTEXT();
  if (capturing()) {
    const CUcontext ctx = current_context();
    int n = 0;
    pthread_mutex_lock(&capture_mutex);
    for (size_t i = 0; i < stream_count; ++i)
      if (in_capture(&streams[i]) && streams[i].context == ctx) {
        invalidate(&streams[i]);
        ++n;
      }
    if (n) ++invalidating_calls;
    pthread_mutex_unlock(&capture_mutex);
    if (n) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    SYNCHRONOUS_CALL();
  }
  pthread_mutex_lock(&vmm_mutex);
  ++synchronize_calls;
  pthread_mutex_unlock(&vmm_mutex);
  return CUDA_SUCCESS;
}

/* Host registration: the ledger. */
static CUresult register_locked(uintptr_t p, size_t size, unsigned int flags) {
  ++register_calls;
  if (fail_count > 0) {
    if (fail_skip > 0) {
      --fail_skip;
    } else {
      --fail_count;
      return fail_code;
    }
  }
  const unsigned int known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |
                             CU_MEMHOSTREGISTER_READ_ONLY;
  if (p == 0 || size == 0 || (flags & ~known) || p + (size - 1) < p || page_end(p, size) == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (in_unmapped_window(p, size) || pages_meet(p, size, FAKE_MANAGED_BASE, FAKE_MANAGED_SIZE))
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < ledger_count; ++i)
    if (pages_meet(p, size, ledger[i].start, ledger[i].size)) {
      ++overlap_refusals;
      return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
  if (ledger_count == ledger_capacity) {
    const size_t capacity = ledger_capacity ? 2 * ledger_capacity : 64;
    struct registration* grown = realloc(ledger, capacity * sizeof *grown);
    if (grown == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    ledger = grown;
    ledger_capacity = capacity;
  }
  size_t at = 0;
  while (at < ledger_count && ledger[at].start < p) ++at;
  memmove(&ledger[at + 1], &ledger[at], (ledger_count - at) * sizeof *ledger);
  ledger[at] = (struct registration){p, size, flags, current_context()};
  ++ledger_count;
  ledger_bytes += size;
  return CUDA_SUCCESS;
}

static void take_a_while(void) {
  pthread_mutex_lock(&ledger_mutex);
  const unsigned int us = call_delay_us;
  pthread_mutex_unlock(&ledger_mutex);
  if (us == 0) return;
  const struct timespec delay = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
  nanosleep(&delay, NULL);
}

static CUresult CUDAAPI fake_cuMemHostRegister(void* p, size_t size, unsigned int flags) {
  REQUIRE_CONTEXT();
  UNSAFE_CALL();
  take_a_while();
  pthread_mutex_lock(&ledger_mutex);
  const CUresult r = register_locked((uintptr_t)p, size, flags);
  pthread_mutex_unlock(&ledger_mutex);
  return r;
}

static CUresult CUDAAPI fake_cuMemHostUnregister(void* p) {
  REQUIRE_CONTEXT();
  UNSAFE_CALL();
  CUresult r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  take_a_while();
  pthread_mutex_lock(&ledger_mutex);
  ++unregister_calls;
  for (size_t i = 0; i < ledger_count; ++i)
    if (ledger[i].start == (uintptr_t)p) {
      ledger_bytes -= ledger[i].size;
      memmove(&ledger[i], &ledger[i + 1], (ledger_count - i - 1) * sizeof *ledger);
      --ledger_count;
      r = CUDA_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&ledger_mutex);
  return r;
}

/* Frees and every use of memory: there is none to free or use. */
static CUresult no_memory(void) {
  REQUIRE_CONTEXT();
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult CUDAAPI fake_cuMemFree(CUdeviceptr p) {
  (void)p;
  REQUIRE_CONTEXT();
  UNSAFE_CALL();
  return no_memory();
}
static CUresult CUDAAPI fake_cuMemFreeAsync(CUdeviceptr p, CUstream stream) {
  (void)p;
  REQUIRE_CONTEXT();
  int captured = 0;
  const CUresult r = queue_on(stream, &captured);
  return r != CUDA_SUCCESS ? r : no_memory();
}
static CUresult CUDAAPI fake_cuMemFreeHost(void* p) { return fake_cuMemFree((CUdeviceptr)(uintptr_t)p); }
static CUresult CUDAAPI fake_cuMemHostGetDevicePointer(CUdeviceptr* d, void* p, unsigned int flags) {
  (void)p;
  (void)flags;
  *d = 0;
  return no_memory();
}
/* A memset writes nothing, and succeeds where the current device may write mapped memory. */
static CUresult device_write(CUdeviceptr d, size_t n, size_t element_size) {
  REQUIRE_CONTEXT();
  const int dev = (int)((uintptr_t)(void*)current_context() - (uintptr_t)primary_contexts);
  pthread_mutex_lock(&vmm_mutex);
  const int writable = n <= SIZE_MAX / element_size && vmm_covered((uintptr_t)d, n * element_size, dev);
  pthread_mutex_unlock(&vmm_mutex);
  return writable ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
/* Synchronous work runs on the legacy stream; work on a capturing stream is captured instead. */
#define FAKE_QUEUE(stream, work)                             \
  do {                                                       \
    REQUIRE_CONTEXT();                                       \
    int captured_ = 0;                                       \
    const CUresult queued_ = queue_on((stream), &captured_); \
    if (queued_ != CUDA_SUCCESS) return queued_;             \
    return captured_ ? CUDA_SUCCESS : (work);                \
  } while (0)
static CUresult CUDAAPI fake_cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  (void)v;
  REQUIRE_CONTEXT();
  SYNCHRONOUS_CALL();
  return device_write(d, n, 1);
}
static CUresult CUDAAPI fake_cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n) {
  (void)v;
  REQUIRE_CONTEXT();
  SYNCHRONOUS_CALL();
  return device_write(d, n, 2);
}
static CUresult CUDAAPI fake_cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n) {
  (void)v;
  REQUIRE_CONTEXT();
  SYNCHRONOUS_CALL();
  return device_write(d, n, 4);
}
static CUresult CUDAAPI fake_cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream stream) {
  (void)v;
  FAKE_QUEUE(stream, device_write(d, n, 1));
}
static CUresult CUDAAPI fake_cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream stream) {
  (void)v;
  FAKE_QUEUE(stream, device_write(d, n, 2));
}
static CUresult CUDAAPI fake_cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream stream) {
  (void)v;
  FAKE_QUEUE(stream, device_write(d, n, 4));
}
static CUresult CUDAAPI fake_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  (void)dst, (void)src, (void)n;
  REQUIRE_CONTEXT();
  SYNCHRONOUS_CALL();
  return no_memory();
}
static CUresult CUDAAPI fake_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  (void)dst, (void)src, (void)n;
  FAKE_QUEUE(stream, no_memory());
}
/* The fake has no device memory, events or modules: these answer as a driver would to handles it
 * never made, after checking for a context. */
static CUresult CUDAAPI fake_cuMemcpy3D(const CUDA_MEMCPY3D* copy) {
  (void)copy;
  REQUIRE_CONTEXT();
  SYNCHRONOUS_CALL();
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult CUDAAPI fake_cuMemcpy3DAsync(const CUDA_MEMCPY3D* copy, CUstream stream) {
  (void)copy;
  FAKE_QUEUE(stream, CUDA_ERROR_INVALID_VALUE);
}
static CUresult CUDAAPI fake_cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* copy) {
  (void)copy;
  REQUIRE_CONTEXT();
  SYNCHRONOUS_CALL();
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult CUDAAPI fake_cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* copy, CUstream stream) {
  (void)copy;
  FAKE_QUEUE(stream, CUDA_ERROR_INVALID_VALUE);
}
static CUresult CUDAAPI fake_cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  REQUIRE_DEVICE(dev);
  REQUIRE_DEVICE(peer);
  *can = dev != peer && peer_access();
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  (void)peer;
  (void)flags;
  REQUIRE_CONTEXT();
  UNSAFE_CALL();
  return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
}
/* Disturbs no capture. The legacy stream never captures, but while a blocking stream of the context
 * does, asking about it is CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (and *status is left as it was). */
static CUresult CUDAAPI fake_cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  REQUIRE_INIT();
  if (status == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (stream == NULL || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
    REQUIRE_CONTEXT();
  }
  if (!capturing()) {
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&capture_mutex);
  struct fake_stream* s = NULL;
  switch (find_stream(stream, &s)) {
    case STREAM_LEGACY: {
      const CUcontext ctx = current_context();
      for (size_t i = 0; i < stream_count; ++i)
        if (in_capture(&streams[i]) && blocking(&streams[i]) && streams[i].context == ctx)
          r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      if (r == CUDA_SUCCESS) *status = CU_STREAM_CAPTURE_STATUS_NONE;
      break;
    }
    case STREAM_FAKE:
      *status = s->status;
      break;
    case STREAM_FOREIGN:
      *status = CU_STREAM_CAPTURE_STATUS_NONE;
      break;
  }
  pthread_mutex_unlock(&capture_mutex);
  return r;
}
static CUresult CUDAAPI fake_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  REQUIRE_INIT();
  if (mode == NULL || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  struct context_stack* t = context_stack();
  if (t == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUstreamCaptureMode previous = t->capture_mode;
  t->capture_mode = *mode;
  *mode = previous;
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuModuleUnload(CUmodule module) {
  (void)module;
  REQUIRE_CONTEXT();
  return CUDA_ERROR_INVALID_HANDLE;
}
static CUresult CUDAAPI fake_cuEventCreate(CUevent* event, unsigned int flags) {
  (void)event;
  (void)flags;
  REQUIRE_CONTEXT();
  return CUDA_ERROR_NOT_SUPPORTED;
}
static CUresult CUDAAPI fake_cuEventRecord(CUevent event, CUstream stream) {
  (void)event;
  (void)stream;
  REQUIRE_CONTEXT();
  return CUDA_ERROR_INVALID_HANDLE;
}
static CUresult CUDAAPI fake_cuEventSynchronize(CUevent event) {
  (void)event;
  REQUIRE_INIT();
  return CUDA_ERROR_INVALID_HANDLE;
}
static CUresult CUDAAPI fake_cuEventQuery(CUevent event) {
  (void)event;
  REQUIRE_INIT();
  return CUDA_ERROR_INVALID_HANDLE;
}
static CUresult CUDAAPI fake_cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  (void)stream, (void)event, (void)flags;
  REQUIRE_CONTEXT();
  return CUDA_ERROR_INVALID_HANDLE;
}
static CUresult CUDAAPI fake_cuEventDestroy(CUevent event) {
  (void)event;
  REQUIRE_INIT();
  return CUDA_ERROR_INVALID_HANDLE;
}
static CUresult CUDAAPI fake_cuModuleLoadData(CUmodule* module, const void* image) {
  (void)module;
  (void)image;
  REQUIRE_CONTEXT();
  UNSAFE_CALL();
  return CUDA_ERROR_NO_BINARY_FOR_GPU;
}
static CUresult CUDAAPI fake_cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  (void)function;
  (void)module;
  (void)name;
  REQUIRE_CONTEXT();
  return CUDA_ERROR_INVALID_HANDLE;
}
static CUresult CUDAAPI fake_cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction f, int block_size,
                                                                         size_t shared) {
  (void)blocks, (void)f, (void)block_size, (void)shared;
  REQUIRE_CONTEXT();
  return CUDA_ERROR_INVALID_HANDLE;
}
static CUresult CUDAAPI fake_cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                            unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                            CUstream stream, void** params, void** extra) {
  (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)stream, (void)params,
      (void)extra;
  REQUIRE_CONTEXT();
  return CUDA_ERROR_INVALID_HANDLE;
}
static CUresult CUDAAPI fake_cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR* desc, CUarray array) {
  REQUIRE_CONTEXT();
  if (!array) return CUDA_ERROR_INVALID_HANDLE;
  *desc = *(const CUDA_ARRAY3D_DESCRIPTOR*)array;
  return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_cuArrayDestroy(CUarray array) {
  REQUIRE_CONTEXT();
  UNSAFE_CALL();
  if (!array) return CUDA_ERROR_INVALID_HANDLE;
  free(array);
  return CUDA_SUCCESS;
}

/* The managed range: advice and prefetches are accepted and change nothing. */
static CUresult CUDAAPI fake_cuMemPrefetchAsync(CUdeviceptr p, size_t size, CUmemLocation location, unsigned int flags,
                                                CUstream stream) {
  (void)location;
  (void)flags;
  FAKE_QUEUE(stream, in_managed_range(p, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
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

/* The managed range, VMM mappings (each its own range, of no context), registered host memory (as
 * the ledger has it), and plain host memory (the driver's "default NULL values") for every other
 * address. No memory is legacy-IPC capable or from a memory pool. */
static CUresult CUDAAPI fake_cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes, void** data,
                                                    CUdeviceptr p) {
  REQUIRE_INIT();
  const int managed = in_managed_range(p, 1);
  pthread_mutex_lock(&vmm_mutex);
  const struct vmm_mapping* holding = managed ? NULL : vmm_mapping_holding((uintptr_t)p);
  const struct vmm_mapping mapping =
      holding ? *holding : (struct vmm_mapping){0, 0, 0, {CU_MEM_ACCESS_FLAGS_PROT_NONE}};
  const int mapped_device = holding ? vmm_handles[holding->handle - 1].device : CU_DEVICE_INVALID;
  pthread_mutex_unlock(&vmm_mutex);
  const int vmm = holding != NULL;
  pthread_mutex_lock(&ledger_mutex);
  const struct registration* found = managed || vmm ? NULL : registration_holding((uintptr_t)p);
  const struct registration host = found ? *found : (struct registration){0, 0, 0, NULL};
  pthread_mutex_unlock(&ledger_mutex);
  const int known = managed || vmm || found;
  for (unsigned int i = 0; i < count; ++i) {
    void* out = data[i];
    switch (attributes[i]) {
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext*)out = managed ? (CUcontext)(void*)&primary_contexts[0] : host.context;
        break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int*)out = managed || vmm ? CU_MEMORYTYPE_DEVICE : found ? CU_MEMORYTYPE_HOST : 0;
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: /* unified addressing: the same address */
        *(CUdeviceptr*)out = known ? p : 0;
        break;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void**)out = managed || found ? (void*)(uintptr_t)p : NULL;
        break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned char*)out = (unsigned char)managed; /* a one-byte bool, as the driver writes it */
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int*)out = managed ? 0
                     : vmm   ? mapped_device
                     : found ? (int)((uintptr_t)(void*)host.context - (uintptr_t)primary_contexts)
                             : CU_DEVICE_INVALID;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr*)out = managed ? FAKE_MANAGED_BASE : vmm ? (CUdeviceptr)mapping.start : (CUdeviceptr)host.start;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t*)out = managed ? FAKE_MANAGED_SIZE : vmm ? mapping.size : host.size;
        break;
      case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned char*)out = (unsigned char)known;
        break;
      case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(unsigned char*)out = 0;
        break;
      case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool*)out = NULL;
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

/* Streams and captures under the driver's exported names (cuda.h declares them), so that the
 * tests' helpers (tests/common/test_cuda.h) drive the fake as they drive the driver on a GPU. A
 * capture's graph is only the count of the work it captured (fake_cuda_graph_nodes). */
CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int flags) {
  REQUIRE_CONTEXT();
  if (stream == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&capture_mutex);
  if (stream_count < FAKE_MAX_STREAMS) {
    const pthread_t self = pthread_self();
    streams[stream_count] = (struct fake_stream){
        1, flags, current_context(), 0, self, CU_STREAM_CAPTURE_STATUS_NONE, CU_STREAM_CAPTURE_MODE_GLOBAL, self, 0};
    *stream = (CUstream)(void*)&streams[stream_count++];
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&capture_mutex);
  return r;
}
/* A stream destroyed while it captures takes its capture along. */
CUresult CUDAAPI cuStreamDestroy(CUstream stream) {
  REQUIRE_INIT();
  CUresult r = CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&capture_mutex);
  struct fake_stream* s = NULL;
  if (find_stream(stream, &s) == STREAM_FAKE && !s->per_thread) {
    if (in_capture(s)) __atomic_sub_fetch(&captures, 1, __ATOMIC_RELEASE);
    s->live = 0;
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&capture_mutex);
  return r;
}
CUresult CUDAAPI cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {
  REQUIRE_INIT();
  if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  if (stream == NULL || stream == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (stream == CU_STREAM_PER_THREAD) {
    REQUIRE_CONTEXT();
  }
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&capture_mutex);
  struct fake_stream* s = NULL;
  if (find_stream(stream, &s) != STREAM_FAKE) {
    r = CUDA_ERROR_INVALID_HANDLE;
  } else if (in_capture(s)) {
    r = CUDA_ERROR_ILLEGAL_STATE;
  } else {
    s->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    s->mode = mode;
    s->capturer = pthread_self();
    s->nodes = 0;
    __atomic_add_fetch(&captures, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&capture_mutex);
  return r;
}
/* A capture not begun in relaxed mode ends on the thread that began it. */
CUresult CUDAAPI cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  REQUIRE_INIT();
  if (graph == NULL) return CUDA_ERROR_INVALID_VALUE;
  *graph = NULL;
  if (stream == CU_STREAM_PER_THREAD) {
    REQUIRE_CONTEXT();
  }
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&capture_mutex);
  struct fake_stream* s = NULL;
  if (find_stream(stream, &s) != STREAM_FAKE || !in_capture(s)) {
    r = CUDA_ERROR_ILLEGAL_STATE;
  } else if (s->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(s->capturer, pthread_self())) {
    r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  } else {
    struct fake_graph* g = NULL;
    if (s->status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
      r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else if ((g = malloc(sizeof *g)) == NULL) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      g->nodes = s->nodes;
      *graph = (CUgraph)(void*)g;
    }
    if (r != CUDA_ERROR_OUT_OF_MEMORY) {
      s->status = CU_STREAM_CAPTURE_STATUS_NONE;
      __atomic_sub_fetch(&captures, 1, __ATOMIC_RELEASE);
    }
  }
  pthread_mutex_unlock(&capture_mutex);
  return r;
}
CUresult CUDAAPI cuGraphDestroy(CUgraph graph) {
  if (graph == NULL) return CUDA_ERROR_INVALID_VALUE;
  free(graph);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  return fake_cuStreamIsCapturing(stream, status);
}
CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  return fake_cuThreadExchangeStreamCaptureMode(mode);
}
CUresult CUDAAPI cuStreamSynchronize(CUstream stream) { return fake_cuStreamSynchronize(stream); }
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  return fake_cuDevicePrimaryCtxRetain(ctx, dev);
}
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) { return fake_cuCtxPushCurrent(ctx); }
CUresult CUDAAPI cuCtxPopCurrent(CUcontext* ctx) { return fake_cuCtxPopCurrent(ctx); }

size_t fake_cuda_graph_nodes(CUgraph graph);
size_t fake_cuda_capture_invalidating_calls(void);
size_t fake_cuda_captured_calls(void);
void* fake_cuda_device_memory(int device, size_t size);

/* The work a capture's graph holds. */
size_t fake_cuda_graph_nodes(CUgraph graph) {
  return graph ? ((const struct fake_graph*)(const void*)graph)->nodes : 0;
}
/* Calls since the library was loaded that a capture refused (and invalidated it for), and calls captured. */
size_t fake_cuda_capture_invalidating_calls(void) {
  pthread_mutex_lock(&capture_mutex);
  const size_t n = invalidating_calls;
  pthread_mutex_unlock(&capture_mutex);
  return n;
}
size_t fake_cuda_captured_calls(void) {
  pthread_mutex_lock(&capture_mutex);
  const size_t n = captured_calls;
  pthread_mutex_unlock(&capture_mutex);
  return n;
}
/* Device memory of a device, for tests that need some: a reservation with one allocation mapped in
 * it (size rounded up to the granularity), which the device may read and write; NULL if there is no
 * room. Reported as device memory as mappings are; never freed. Call with no capture in progress. */
void* fake_cuda_device_memory(int device, size_t size) {
  const size_t n = (size + FAKE_VMM_GRANULARITY - 1) / FAKE_VMM_GRANULARITY * FAKE_VMM_GRANULARITY;
  const CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device}};
  CUdeviceptr p = 0;
  CUmemGenericAllocationHandle handle = 0;
  if (fake_cuMemAddressReserve(&p, n, 0, 0, 0) != CUDA_SUCCESS) return NULL;
  if (fake_cuMemCreate(&handle, n, &prop, 0) != CUDA_SUCCESS || fake_cuMemMap(p, n, 0, handle, 0) != CUDA_SUCCESS)
    return NULL;
  const CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  return fake_cuMemSetAccess(p, n, &access, 1) == CUDA_SUCCESS ? (void*)(uintptr_t)p : NULL;
}

int fake_cuda_context_depth(void);
void* fake_cuda_managed_address(void);
size_t fake_cuda_registration_count(void);
size_t fake_cuda_registered_bytes(void);
size_t fake_cuda_register_calls(void);
size_t fake_cuda_unregister_calls(void);
size_t fake_cuda_overlap_refusals(void);
int fake_cuda_is_registered(const void* p);
int fake_cuda_registration_flags(const void* p);
size_t fake_cuda_registrations(uintptr_t* starts, size_t* sizes, size_t max);
void fake_cuda_fail_registers(int n, int code);
void fake_cuda_fail_registers_after(int skip, int n, int code);
void fake_cuda_set_unmapped(const void* p, size_t size);
void fake_cuda_set_call_delay(unsigned int microseconds);
size_t fake_cuda_vmm_reserved_bytes(void);
size_t fake_cuda_vmm_mapped_bytes(void);
size_t fake_cuda_vmm_held_bytes(int device);
int fake_cuda_vmm_access(const void* p, int device);
size_t fake_cuda_vmm_calls(const char* name);
void fake_cuda_fail_unmap_after(int skip, int code);

/* How many contexts gpumem left pushed on the calling thread: 0 after every call returns. */
int fake_cuda_context_depth(void) {
  const struct context_stack* s = context_stack();
  return s ? s->depth : -1;
}

void* fake_cuda_managed_address(void) { return (void*)(uintptr_t)FAKE_MANAGED_BASE; }

#define FAKE_READ_LEDGER(type, expression) \
  pthread_mutex_lock(&ledger_mutex);       \
  const type value_ = (expression);        \
  pthread_mutex_unlock(&ledger_mutex);     \
  return value_

/* Live registrations, and the bytes they were registered with. */
size_t fake_cuda_registration_count(void) { FAKE_READ_LEDGER(size_t, ledger_count); }
size_t fake_cuda_registered_bytes(void) { FAKE_READ_LEDGER(size_t, ledger_bytes); }
/* Calls since the library was loaded, failed ones included. */
size_t fake_cuda_register_calls(void) { FAKE_READ_LEDGER(size_t, register_calls); }
size_t fake_cuda_unregister_calls(void) { FAKE_READ_LEDGER(size_t, unregister_calls); }
/* Register calls refused because a page of the range was registered already. */
size_t fake_cuda_overlap_refusals(void) { FAKE_READ_LEDGER(size_t, overlap_refusals); }
/* Whether the page holding p is locked by a live registration. */
int fake_cuda_is_registered(const void* p) { FAKE_READ_LEDGER(int, registration_paging((uintptr_t)p) != NULL); }
/* The flags of the registration that locks the page holding p, or -1. */
int fake_cuda_registration_flags(const void* p) {
  pthread_mutex_lock(&ledger_mutex);
  const struct registration* r = registration_paging((uintptr_t)p);
  const int flags = r ? (int)r->flags : -1;
  pthread_mutex_unlock(&ledger_mutex);
  return flags;
}

/* Copies up to max registrations, by address, and returns how many there are. */
size_t fake_cuda_registrations(uintptr_t* starts, size_t* sizes, size_t max) {
  pthread_mutex_lock(&ledger_mutex);
  for (size_t i = 0; i < ledger_count && i < max; ++i) {
    starts[i] = ledger[i].start;
    sizes[i] = ledger[i].size;
  }
  const size_t n = ledger_count;
  pthread_mutex_unlock(&ledger_mutex);
  return n;
}

/* The next n register calls fail with the CUresult code, changing nothing; after the first skip calls
 * with fake_cuda_fail_registers_after(). n = 0 cancels what is left. */
void fake_cuda_fail_registers_after(int skip, int n, int code) {
  pthread_mutex_lock(&ledger_mutex);
  fail_skip = skip;
  fail_count = n;
  fail_code = (CUresult)code;
  pthread_mutex_unlock(&ledger_mutex);
}
void fake_cuda_fail_registers(int n, int code) { fake_cuda_fail_registers_after(0, n, code); }

/* Pages that meet [p, p + size) count as unmapped from now on, in place of FAKE_CUDA_UNMAPPED; size 0: none. */
void fake_cuda_set_unmapped(const void* p, size_t size) {
  pthread_mutex_lock(&ledger_mutex);
  unmapped_set = 1;
  unmapped_start = (uintptr_t)p;
  unmapped_size = size;
  pthread_mutex_unlock(&ledger_mutex);
}

/* How long each register and unregister call takes from now on. */
void fake_cuda_set_call_delay(unsigned int microseconds) {
  pthread_mutex_lock(&ledger_mutex);
  call_delay_us = microseconds;
  pthread_mutex_unlock(&ledger_mutex);
}

/* Addresses reserved, and mapped, now. */
size_t fake_cuda_vmm_reserved_bytes(void) {
  pthread_mutex_lock(&vmm_mutex);
  size_t n = 0;
  for (size_t i = 0; i < vmm_range_count; ++i) n += vmm_ranges[i].size;
  pthread_mutex_unlock(&vmm_mutex);
  return n;
}
size_t fake_cuda_vmm_mapped_bytes(void) {
  pthread_mutex_lock(&vmm_mutex);
  size_t n = 0;
  for (size_t i = 0; i < vmm_mapping_count; ++i) n += vmm_mappings[i].size;
  pthread_mutex_unlock(&vmm_mutex);
  return n;
}
/* Memory of a device's physical allocations that are not yet freed (released and unmapped). */
size_t fake_cuda_vmm_held_bytes(int device) {
  pthread_mutex_lock(&vmm_mutex);
  const size_t n = device >= 0 && device < FAKE_MAX_DEVICES ? vmm_held[device] : 0;
  pthread_mutex_unlock(&vmm_mutex);
  return n;
}
/* The access (a CUmemAccess_flags) a device has to the mapping holding p; -1 where nothing is mapped. */
/* The cuMemUnmap call after skip more fails with code. */
void fake_cuda_fail_unmap_after(int skip, int code) {
  pthread_mutex_lock(&vmm_mutex);
  unmap_fail_skip = skip;
  unmap_fail_code = (CUresult)code;
  pthread_mutex_unlock(&vmm_mutex);
}

int fake_cuda_vmm_access(const void* p, int device) {
  pthread_mutex_lock(&vmm_mutex);
  const struct vmm_mapping* m = vmm_mapping_holding((uintptr_t)p);
  const int flags = m != NULL && device >= 0 && device < FAKE_MAX_DEVICES ? (int)m->access[device] : -1;
  pthread_mutex_unlock(&vmm_mutex);
  return flags;
}
/* Calls since the library was loaded, failed ones included, of cuMemCreate, cuMemMap, cuMemUnmap,
 * cuMemSetAccess or cuCtxSynchronize. */
size_t fake_cuda_vmm_calls(const char* name) {
  pthread_mutex_lock(&vmm_mutex);
  const size_t n = strcmp(name, "cuMemCreate") == 0        ? create_calls
                   : strcmp(name, "cuMemMap") == 0         ? map_calls
                   : strcmp(name, "cuMemUnmap") == 0       ? unmap_calls
                   : strcmp(name, "cuMemSetAccess") == 0   ? set_access_calls
                   : strcmp(name, "cuCtxSynchronize") == 0 ? synchronize_calls
                                                           : 0;
  pthread_mutex_unlock(&vmm_mutex);
  return n;
}
