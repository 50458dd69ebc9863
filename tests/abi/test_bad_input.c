/* Bad input to every exported function: NULL handles and outputs; wild, misaligned, stack, heap,
 * destroyed and other-type handles; struct_size 0, short and huge; zero and overflowing sizes;
 * unknown enum values and flags; devices that are not there. Each call must return its documented
 * status, leave a detail of its own, and clear or keep its outputs as documented; nothing may crash
 * or trip a sanitizer. The table has one entry per symbol of lib/gpumem.map, and a test holds the
 * two together, so a new export without an entry fails.
 *
 * Run twice: with no driver (argv[1] "no-driver"; GPUMEM_CUDA_DRIVER names nothing) and over the
 * fake driver (argv[1] "fake"), where the calls that pass gpumem's own checks reach the driver. */
#define _GNU_SOURCE /* RTLD_DEFAULT */

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include <gpumem/experimental.h>

#include "test_util.h"

#ifndef GPUMEM_MAP_PATH
#error "GPUMEM_MAP_PATH must name lib/gpumem.map"
#endif

/* ---- How the calls are checked --------------------------------------------------------------- */

static bool g_fake; /* over the fake driver; else with none */

/* The status a call that gets past gpumem's own checks meets: no driver, or the fake's answer. */
#define DRIVER(fake_status) (g_fake ? (fake_status) : GPUMEM_ERROR_NO_DRIVER)

/* A detail no call below writes: each refusal must leave its own. */
static char g_marker[256];
static void mark(void) {
  gpumem_allocator_t* a = NULL;
  assert_int_equal(gpumem_allocator_create_host(7, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  snprintf(g_marker, sizeof g_marker, "%s", gpumem_last_error_detail());
  assert_true(g_marker[0] != '\0');
}

static void check_fresh_detail(const char* call, const char* text, const char* file, int line) {
  const char* detail = gpumem_last_error_detail();
  if (detail == NULL || detail[0] == '\0' || strcmp(detail, g_marker) == 0) {
    print_error("%s:%d: %s left no detail of its own (\"%s\")\n", file, line, call, detail ? detail : "(null)");
    fail();
  }
  if (text && !strstr(detail, text)) {
    print_error("%s:%d: %s: detail \"%s\" does not contain \"%s\"\n", file, line, call, detail, text);
    fail();
  }
}

static void check_status(const char* call, gpumem_status_t got, gpumem_status_t want, const char* text,
                         const char* file, int line) {
  if (got != want) {
    print_error("%s:%d: %s returned %s, expected %s; detail: %s\n", file, line, call, gpumem_status_name(got),
                gpumem_status_name(want), gpumem_last_error_detail());
    fail();
  }
  if (want != GPUMEM_SUCCESS) check_fresh_detail(call, text, file, line);
}

/* The call fails with want, leaving a detail of its own that contains text (if not NULL). */
#define REFUSED(call, want, text)                                  \
  do {                                                             \
    mark();                                                        \
    gpumem_status_t got_ = (call);                                 \
    check_status(#call, got_, (want), (text), __FILE__, __LINE__); \
  } while (0)

/* A call that returns no status (PyTorch's and CuPy's entry points): the detail says it failed. */
#define REFUSED_SILENTLY(statement, text)                       \
  do {                                                          \
    mark();                                                     \
    statement;                                                  \
    check_fresh_detail(#statement, (text), __FILE__, __LINE__); \
  } while (0)

/* A call that must succeed, and leave the detail as it was. */
#define ACCEPTED(call)                                                   \
  do {                                                                   \
    mark();                                                              \
    gpumem_status_t got_ = (call);                                       \
    check_status(#call, got_, GPUMEM_SUCCESS, NULL, __FILE__, __LINE__); \
    assert_string_equal(gpumem_last_error_detail(), g_marker);           \
  } while (0)

#define GARBAGE ((void*)(uintptr_t)0xa5a5a5a5a5a5a5a5ULL)

/* ---- Structs the caller passes in or out ------------------------------------------------------ */

/* An output struct: the call under test, with out as its struct (and ctx for the rest). */
typedef gpumem_status_t (*out_call_fn)(void* ctx, void* out);

/* NULL, struct_size 0, one byte short of the first released size and beyond any struct: each
 * refused; a short one is cleared as far as it reaches and no further, the others are untouched. */
static void check_out_struct(out_call_fn call, void* ctx, size_t own, const char* name) {
  unsigned char buf[1024];
  assert_true(own < sizeof buf);
  char null_text[64];
  snprintf(null_text, sizeof null_text, "%s is NULL", name);
  REFUSED(call(ctx, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, null_text);

  const size_t sizes[] = {0, sizeof(size_t), own - 1, 65537, SIZE_MAX};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    memset(buf, 0xa5, sizeof buf);
    memcpy(buf, &sizes[i], sizeof(size_t));
    REFUSED(call(ctx, buf), GPUMEM_ERROR_INVALID_ARGUMENT, "struct_size is");
    size_t kept = 0;
    memcpy(&kept, buf, sizeof kept);
    assert_int_equal(kept, sizes[i]);
    const size_t cleared = sizes[i] <= own ? sizes[i] : 0; /* beyond any struct: not written */
    for (size_t b = sizeof(size_t); b < sizeof buf; ++b) assert_int_equal(buf[b], b < cleared ? 0 : 0xa5);
  }
}

/* An output struct of the right size, prefilled with garbage, for a call expected to fail: after
 * it, all but struct_size reads zero. */
#define GARBLED(var)                   \
  do {                                 \
    memset(&(var), 0xa5, sizeof(var)); \
    (var).struct_size = sizeof(var);   \
  } while (0)

static void assert_cleared(const void* out, size_t size) {
  const unsigned char* b = out;
  size_t kept;
  memcpy(&kept, b, sizeof kept);
  assert_int_equal(kept, size);
  for (size_t i = sizeof(size_t); i < size; ++i) assert_int_equal(b[i], 0);
}

/* An input struct: the call under test with in as its struct. */
typedef gpumem_status_t (*in_call_fn)(void* ctx, const void* in);

/* NULL, struct_size 0, one byte short and beyond any struct: refused, nothing made. valid is a
 * struct the call would take (with own bytes). */
static void check_in_struct(in_call_fn call, void* ctx, const void* valid, size_t own, size_t first, const char* name) {
  unsigned char buf[1024];
  assert_true(own + 16 < sizeof buf);
  char text[64];
  snprintf(text, sizeof text, "%s is NULL", name);
  REFUSED(call(ctx, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, text);
  const size_t sizes[] = {0, first - 1, 65537, SIZE_MAX};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    memset(buf, 0, sizeof buf);
    memcpy(buf, valid, own);
    memcpy(buf, &sizes[i], sizeof(size_t));
    snprintf(text, sizeof text, "%s->struct_size is", name);
    REFUSED(call(ctx, buf), GPUMEM_ERROR_INVALID_ARGUMENT, text);
  }
  /* From a newer header, with a field this library does not have set. */
  memset(buf, 0, sizeof buf);
  memcpy(buf, valid, own);
  const size_t newer = own + 16;
  memcpy(buf, &newer, sizeof(size_t));
  buf[own + 9] = 1;
  snprintf(text, sizeof text, "and byte %zu is not zero", own + 9);
  REFUSED(call(ctx, buf), GPUMEM_ERROR_INVALID_ARGUMENT, text);
}

/* gpumem_<x>_init(): NULL, and a struct_size below its own; the struct is untouched. */
typedef gpumem_status_t (*init_fn)(void* out, size_t struct_size);
static void check_init(init_fn init, size_t own, const char* name) {
  unsigned char buf[1024];
  char text[64];
  snprintf(text, sizeof text, "%s is NULL", name);
  REFUSED(init(NULL, own), GPUMEM_ERROR_INVALID_ARGUMENT, text);
  const size_t sizes[] = {0, 1, own - 1};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    memset(buf, 0xa5, sizeof buf);
    REFUSED(init(buf, sizes[i]), GPUMEM_ERROR_INVALID_ARGUMENT, "struct_size is");
    for (size_t b = 0; b < sizeof buf; ++b) assert_int_equal(buf[b], 0xa5);
  }
  /* Larger is a newer caller's struct: the part this library knows is filled. */
  memset(buf, 0xa5, sizeof buf);
  ACCEPTED(init(buf, own + 64));
  size_t size;
  memcpy(&size, buf, sizeof size);
  assert_int_equal(size, own);
}

/* ---- Handles ---------------------------------------------------------------------------------- */

typedef enum { kAllocator, kTrace, kReader, kArray } handle_type_t;

static gpumem_allocator_t* g_host;      /* a live host allocator */
static gpumem_allocator_t* g_pool;      /* a live pool over it */
static gpumem_allocator_t* g_dead;      /* a destroyed host allocator */
static gpumem_allocator_t* g_traced;    /* a host allocator being recorded, by g_trace */
static gpumem_trace_t* g_trace;         /* a live recording */
static gpumem_trace_t* g_stopped;       /* a stopped one */
static gpumem_trace_reader_t* g_reader; /* an open reader */
static gpumem_trace_reader_t* g_closed; /* a closed one */
static char g_trace_path[300];          /* a complete trace file */
static char g_dir[256];                 /* a directory of the test's own */
static uint64_t g_static_words[4];      /* static data */

static void* live_of(handle_type_t type) {
  switch (type) {
    case kAllocator:
      return g_host;
    case kTrace:
      return g_trace;
    case kReader:
      return g_reader;
    case kArray:
      break;
  }
  return g_host; /* no live array without a GPU: the insides of another handle stand in */
}

typedef struct bad_handle {
  const char* what;
  void* handle;
} bad_handle_t;

/* Every kind of pointer that is not a live handle of type, NULL aside. The copies hold a live
 * handle's bytes (its mark included) where gpumem did not put them. */
static size_t bad_handles(handle_type_t type, bad_handle_t* out, uint64_t* stack_copy, uint64_t* heap_copy) {
  char* live = live_of(type);
  memcpy(stack_copy, live, 2 * sizeof(uint64_t));
  memcpy(heap_copy, live, 2 * sizeof(uint64_t));
  size_t n = 0;
  out[n++] = (bad_handle_t){"wild, odd", (void*)(uintptr_t)12345};
  out[n++] = (bad_handle_t){"wild, aligned", (void*)(uintptr_t)0x10000};
  out[n++] = (bad_handle_t){"the top of the address space", (void*)(UINTPTR_MAX - 7)};
  out[n++] = (bad_handle_t){"the kernel's half", (void*)(uintptr_t)0xffff800000000000ULL};
  out[n++] = (bad_handle_t){"misaligned by 1 into a live handle", live + 1};
  out[n++] = (bad_handle_t){"misaligned by 4 into a live handle", live + 4};
  out[n++] = (bad_handle_t){"aligned, inside a live handle", live + 16};
  out[n++] = (bad_handle_t){"a copy on the stack", stack_copy};
  out[n++] = (bad_handle_t){"a copy on the heap", heap_copy};
  out[n++] = (bad_handle_t){"static data", g_static_words};
  switch (type) {
    case kAllocator:
      out[n++] = (bad_handle_t){"a destroyed allocator", g_dead};
      out[n++] = (bad_handle_t){"a trace reader", g_reader};
      out[n++] = (bad_handle_t){"a recording", g_trace};
      break;
    case kTrace:
      out[n++] = (bad_handle_t){"a stopped recording", g_stopped};
      out[n++] = (bad_handle_t){"an allocator", g_host};
      out[n++] = (bad_handle_t){"a trace reader", g_reader};
      break;
    case kReader:
      out[n++] = (bad_handle_t){"a closed reader", g_closed};
      out[n++] = (bad_handle_t){"an allocator", g_host};
      out[n++] = (bad_handle_t){"a recording", g_trace};
      break;
    case kArray:
      out[n++] = (bad_handle_t){"an allocator", g_host};
      out[n++] = (bad_handle_t){"a trace reader", g_reader};
      break;
  }
  return n;
}

static const char* refusal_of(handle_type_t type) {
  switch (type) {
    case kAllocator:
      return "is not a live gpumem allocator";
    case kTrace:
      return "is not a trace being recorded";
    case kReader:
      return "is not an open trace reader";
    case kArray:
      return "is not a live gpumem array";
  }
  return NULL;
}

/* The call under test with handle as its handle, everything else valid; it checks its own
 * outputs were cleared. */
typedef gpumem_status_t (*handle_call_fn)(void* handle);

/* Each bad handle of the type is refused with GPUMEM_ERROR_INVALID_HANDLE and a detail that
 * names it; with_null: NULL too (for calls where NULL is no default). */
static void check_bad_handles_as(handle_type_t type, handle_call_fn call, bool with_null, const char* call_name) {
  uint64_t stack_copy[2];
  uint64_t* heap_copy = malloc(2 * sizeof(uint64_t));
  assert_non_null(heap_copy);
  bad_handle_t bad[20];
  const size_t n = bad_handles(type, bad, stack_copy, heap_copy);
  for (size_t i = 0; i < n + with_null; ++i) {
    const bad_handle_t b = i < n ? bad[i] : (bad_handle_t){"NULL", NULL};
    char text[160];
    snprintf(text, sizeof text, "%s(%s)", call_name, b.what);
    mark();
    const gpumem_status_t got = call(b.handle);
    check_status(text, got, GPUMEM_ERROR_INVALID_HANDLE, refusal_of(type), __FILE__, __LINE__);
    if (b.handle) {
      snprintf(text, sizeof text, "%p", b.handle);
      check_fresh_detail(call_name, text, __FILE__, __LINE__);
    }
  }
  free(heap_copy);
}
#define BAD_HANDLES(type, call, with_null) check_bad_handles_as((type), (call), (with_null), #call)

/* ---- Core ------------------------------------------------------------------------------------- */

static void bad_version_number(void) {
  mark();
  assert_int_equal(gpumem_version_number(), GPUMEM_VERSION_NUMBER);
  assert_string_equal(gpumem_last_error_detail(), g_marker);
}

static void bad_version_string(void) {
  mark();
  assert_string_equal(gpumem_version_string(), GPUMEM_VERSION_STRING);
  assert_string_equal(gpumem_last_error_detail(), g_marker);
}

static const gpumem_status_t kUnknownStatuses[] = {1, 2, -16, -100, INT32_MIN, INT32_MAX};

static void bad_status_name(void) {
  for (size_t i = 0; i < sizeof kUnknownStatuses / sizeof kUnknownStatuses[0]; ++i)
    assert_string_equal(gpumem_status_name(kUnknownStatuses[i]), "GPUMEM_UNKNOWN_STATUS");
}

static void bad_status_string(void) {
  for (size_t i = 0; i < sizeof kUnknownStatuses / sizeof kUnknownStatuses[0]; ++i)
    assert_string_equal(gpumem_status_string(kUnknownStatuses[i]), "unknown status");
}

static void bad_last_error_detail(void) {
  mark();
  assert_non_null(gpumem_last_error_detail());
  assert_string_equal(gpumem_last_error_detail(), g_marker);
}

static void bad_last_cuda_result(void) {
  mark(); /* refused by gpumem itself: no CUDA result */
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

/* ---- Devices ---------------------------------------------------------------------------------- */

static const int32_t kBadDevices[] = {-1, -2, 1000, INT32_MIN, INT32_MAX};

static void bad_driver_get_version(void) {
  REFUSED(gpumem_driver_get_version(NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_version is NULL");
  int32_t v = 77;
  if (g_fake) {
    ACCEPTED(gpumem_driver_get_version(&v));
  } else {
    REFUSED(gpumem_driver_get_version(&v), GPUMEM_ERROR_NO_DRIVER, NULL);
    assert_int_equal(v, 0);
  }
}

static void bad_device_get_count(void) {
  REFUSED(gpumem_device_get_count(NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_count is NULL");
}

static gpumem_status_t call_device_get_info(void* ctx, void* out) {
  return gpumem_device_get_info(*(int32_t*)ctx, out);
}

static void bad_device_get_info(void) {
  int32_t device = 0;
  check_out_struct(call_device_get_info, &device, sizeof(gpumem_device_info_t), "out_info");
  for (size_t i = 0; i < sizeof kBadDevices / sizeof kBadDevices[0]; ++i) {
    gpumem_device_info_t info;
    GARBLED(info);
    REFUSED(gpumem_device_get_info(kBadDevices[i], &info), DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
    assert_cleared(&info, sizeof info);
  }
}

static void bad_device_query_memory(void) {
  REFUSED(gpumem_device_query_memory(0, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "NULL");
  for (size_t i = 0; i < sizeof kBadDevices / sizeof kBadDevices[0]; ++i) {
    size_t free_bytes = 1, total = 1;
    REFUSED(gpumem_device_query_memory(kBadDevices[i], &free_bytes, &total), DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
    assert_int_equal(free_bytes, 0);
    assert_int_equal(total, 0);
    total = 1;
    REFUSED(gpumem_device_query_memory(kBadDevices[i], NULL, &total), DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
    assert_int_equal(total, 0);
  }
}

/* ---- Raw memory ------------------------------------------------------------------------------- */

/* Addresses that are no memory of any kind the driver knows. */
static void* wild_pointers(size_t i) {
  static char host_bytes[64];
  void* const ptrs[] = {(void*)(uintptr_t)12345, (void*)(uintptr_t)0x10000, (void*)(UINTPTR_MAX - 7), host_bytes + 1};
  return i < sizeof ptrs / sizeof ptrs[0] ? ptrs[i] : NULL;
}
#define FOR_WILD(p) for (size_t p##_i = 0; wild_pointers(p##_i) != NULL; ++p##_i)
#define WILD(p) wild_pointers(p##_i)

typedef gpumem_status_t (*alloc_call_fn)(size_t size, void** out_ptr);

/* NULL output, size 0: refused before anything else; the output cleared. */
static void check_alloc_basics(alloc_call_fn call) {
  REFUSED(call(64, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_ptr is NULL");
  void* p = GARBAGE;
  REFUSED(call(0, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "size is 0");
  assert_null(p);
}

static int32_t g_device; /* for the calls below that take one */
static gpumem_status_t call_device_alloc(size_t size, void** out) { return gpumem_device_alloc(g_device, size, out); }
static gpumem_status_t call_device_alloc_async(size_t size, void** out) {
  return gpumem_device_alloc_async(g_device, size, NULL, out);
}
static gpumem_status_t call_alloc_from_pool(size_t size, void** out) {
  return gpumem_device_alloc_from_pool((gpumem_cuda_pool_t)(uintptr_t)0x10000, size, NULL, out);
}
static gpumem_status_t call_host_alloc(size_t size, void** out) { return gpumem_host_alloc(size, 0, out); }
static gpumem_status_t call_managed_alloc(size_t size, void** out) {
  return gpumem_managed_alloc(g_device, size, 0, out);
}

static void bad_device_alloc(void) {
  g_device = 0;
  check_alloc_basics(call_device_alloc);
  for (size_t i = 0; i < sizeof kBadDevices / sizeof kBadDevices[0]; ++i) {
    void* p = GARBAGE;
    REFUSED(gpumem_device_alloc(kBadDevices[i], 64, &p), DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
    assert_null(p);
  }
  void* p = GARBAGE;
  REFUSED(gpumem_device_alloc(0, SIZE_MAX, &p), DRIVER(GPUMEM_ERROR_OUT_OF_MEMORY), NULL);
  assert_null(p);
}

static void bad_device_alloc_async(void) {
  g_device = 0;
  check_alloc_basics(call_device_alloc_async);
  for (size_t i = 0; i < sizeof kBadDevices / sizeof kBadDevices[0]; ++i) {
    void* p = GARBAGE;
    REFUSED(gpumem_device_alloc_async(kBadDevices[i], 64, NULL, &p), DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
    assert_null(p);
  }
  void* p = GARBAGE;
  REFUSED(gpumem_device_alloc_async(0, SIZE_MAX, NULL, &p), DRIVER(GPUMEM_ERROR_OUT_OF_MEMORY), NULL);
  assert_null(p);
}

static void bad_device_alloc_from_pool(void) {
  check_alloc_basics(call_alloc_from_pool);
  void* p = GARBAGE;
  REFUSED(gpumem_device_alloc_from_pool(NULL, 64, NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "pool is NULL");
  assert_null(p);
  p = GARBAGE; /* a pool the driver never made: the fake driver refuses every allocation alike */
  REFUSED(gpumem_device_alloc_from_pool((gpumem_cuda_pool_t)(uintptr_t)12345, 64, NULL, &p),
          DRIVER(GPUMEM_ERROR_OUT_OF_MEMORY), NULL);
  assert_null(p);
}

typedef gpumem_status_t (*free_call_fn)(void* ptr);
static gpumem_status_t call_device_free_async(void* p) { return gpumem_device_free_async(p, NULL); }

/* NULL is nothing to free; an address that is no allocation of the kind is refused. */
static void check_free(free_call_fn call) {
  ACCEPTED(call(NULL));
  FOR_WILD(p) { REFUSED(call(WILD(p)), DRIVER(GPUMEM_ERROR_INVALID_POINTER), NULL); }
}

static void bad_device_free(void) { check_free(gpumem_device_free); }
static void bad_device_free_async(void) { check_free(call_device_free_async); }
static void bad_host_free(void) { check_free(gpumem_host_free); }
static void bad_managed_free(void) { check_free(gpumem_managed_free); }

static void bad_host_alloc(void) {
  check_alloc_basics(call_host_alloc);
  const uint32_t flags[] = {0x8, 0x80000000u, 0xffffffffu};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i) {
    void* p = GARBAGE;
    REFUSED(gpumem_host_alloc(64, flags[i], &p), GPUMEM_ERROR_INVALID_ARGUMENT, "flags");
    assert_null(p);
  }
}

static void bad_host_register(void) {
  static char bytes[4096];
  REFUSED(gpumem_host_register(NULL, 64, 0), GPUMEM_ERROR_INVALID_ARGUMENT, "ptr is NULL");
  REFUSED(gpumem_host_register(bytes, 0, 0), GPUMEM_ERROR_INVALID_ARGUMENT, "size is 0");
  REFUSED(gpumem_host_register((void*)(UINTPTR_MAX - 63), 128, 0), GPUMEM_ERROR_INVALID_ARGUMENT, "wraps");
  REFUSED(gpumem_host_register(bytes, sizeof bytes, 0x10), GPUMEM_ERROR_INVALID_ARGUMENT, "flags");
  REFUSED(gpumem_host_register(bytes, SIZE_MAX, 0), GPUMEM_ERROR_INVALID_ARGUMENT, "wraps");
}

static void bad_host_unregister(void) {
  REFUSED(gpumem_host_unregister(NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "ptr is NULL");
  FOR_WILD(p) { REFUSED(gpumem_host_unregister(WILD(p)), DRIVER(GPUMEM_ERROR_INVALID_POINTER), NULL); }
}

static void bad_host_get_device_pointer(void) {
  static char bytes[64];
  REFUSED(gpumem_host_get_device_pointer(bytes, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_device_ptr is NULL");
  void* d = GARBAGE;
  REFUSED(gpumem_host_get_device_pointer(NULL, &d), GPUMEM_ERROR_INVALID_ARGUMENT, "ptr is NULL");
  assert_null(d);
  FOR_WILD(p) {
    d = GARBAGE;
    REFUSED(gpumem_host_get_device_pointer(WILD(p), &d), DRIVER(GPUMEM_ERROR_INVALID_POINTER), NULL);
    assert_null(d);
  }
}

static void bad_managed_alloc(void) {
  g_device = 0;
  check_alloc_basics(call_managed_alloc);
  const uint32_t flags[] = {0x3, 0x4, 0xffffffffu};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i) {
    void* p = GARBAGE;
    REFUSED(gpumem_managed_alloc(0, 64, flags[i], &p), GPUMEM_ERROR_INVALID_ARGUMENT, "flags");
    assert_null(p);
  }
  for (size_t i = 0; i < sizeof kBadDevices / sizeof kBadDevices[0]; ++i) {
    void* p = GARBAGE;
    REFUSED(gpumem_managed_alloc(kBadDevices[i], 64, 0, &p), DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
    assert_null(p);
  }
}

static void bad_managed_prefetch(void) {
  static char bytes[64];
  REFUSED(gpumem_managed_prefetch(NULL, 64, 0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "ptr is NULL");
  REFUSED(gpumem_managed_prefetch(bytes, 0, 0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "size is 0");
  const int32_t locations[] = {-3, INT32_MIN};
  for (size_t i = 0; i < sizeof locations / sizeof locations[0]; ++i)
    REFUSED(gpumem_managed_prefetch(bytes, 64, locations[i], NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "location");
  REFUSED(gpumem_managed_prefetch(bytes, 64, 1000, NULL), DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
  REFUSED(gpumem_managed_prefetch((void*)(UINTPTR_MAX - 7), 8, 0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "wraps");
  FOR_WILD(p) { REFUSED(gpumem_managed_prefetch(WILD(p), 4, 0, NULL), DRIVER(GPUMEM_ERROR_INVALID_POINTER), NULL); }
}

static void bad_managed_advise(void) {
  static char bytes[64];
  REFUSED(gpumem_managed_advise(NULL, 64, GPUMEM_ADVICE_SET_READ_MOSTLY, 0), GPUMEM_ERROR_INVALID_ARGUMENT,
          "ptr is NULL");
  REFUSED(gpumem_managed_advise(bytes, 0, GPUMEM_ADVICE_SET_READ_MOSTLY, 0), GPUMEM_ERROR_INVALID_ARGUMENT,
          "size is 0");
  const int32_t advice[] = {0, 7, -1, INT32_MAX};
  for (size_t i = 0; i < sizeof advice / sizeof advice[0]; ++i)
    REFUSED(gpumem_managed_advise(bytes, 64, advice[i], 0), GPUMEM_ERROR_INVALID_ARGUMENT, "advice");
  REFUSED(gpumem_managed_advise(bytes, 64, GPUMEM_ADVICE_SET_PREFERRED_LOCATION, -3), GPUMEM_ERROR_INVALID_ARGUMENT,
          "location");
  REFUSED(gpumem_managed_advise(bytes, 64, GPUMEM_ADVICE_SET_ACCESSED_BY, GPUMEM_LOCATION_HOST),
          GPUMEM_ERROR_INVALID_ARGUMENT, "GPUMEM_LOCATION_HOST");
  REFUSED(gpumem_managed_advise(bytes, 64, GPUMEM_ADVICE_SET_PREFERRED_LOCATION, 1000),
          DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
  REFUSED(gpumem_managed_advise((void*)(UINTPTR_MAX - 7), 8, GPUMEM_ADVICE_SET_READ_MOSTLY, 0),
          GPUMEM_ERROR_INVALID_ARGUMENT, "wraps");
  FOR_WILD(p) {
    REFUSED(gpumem_managed_advise(WILD(p), 4, GPUMEM_ADVICE_SET_READ_MOSTLY, 0), DRIVER(GPUMEM_ERROR_INVALID_POINTER),
            NULL);
  }
}

typedef struct range {
  const void* ptr;
  size_t size;
} range_t;

static gpumem_status_t call_managed_get_range_info(void* ctx, void* out) {
  const range_t* r = ctx;
  return gpumem_managed_get_range_info(r->ptr, r->size, out);
}

static void bad_managed_get_range_info(void) {
  static char bytes[64];
  range_t r = {bytes, sizeof bytes};
  check_out_struct(call_managed_get_range_info, &r, sizeof(gpumem_managed_range_info_t), "out_info");
  gpumem_managed_range_info_t info;
  GARBLED(info);
  REFUSED(gpumem_managed_get_range_info(NULL, 64, &info), GPUMEM_ERROR_INVALID_ARGUMENT, "ptr is NULL");
  assert_cleared(&info, sizeof info);
  GARBLED(info);
  REFUSED(gpumem_managed_get_range_info(bytes, 0, &info), GPUMEM_ERROR_INVALID_ARGUMENT, "size is 0");
  assert_cleared(&info, sizeof info);
  GARBLED(info);
  REFUSED(gpumem_managed_get_range_info((void*)(UINTPTR_MAX - 7), 8, &info), GPUMEM_ERROR_INVALID_ARGUMENT, "wraps");
  assert_cleared(&info, sizeof info);
  FOR_WILD(p) {
    GARBLED(info);
    REFUSED(gpumem_managed_get_range_info(WILD(p), 4, &info), DRIVER(GPUMEM_ERROR_INVALID_POINTER), NULL);
    assert_cleared(&info, sizeof info);
  }
}

/* ---- Copies ----------------------------------------------------------------------------------- */

static void bad_memset(void) {
  static uint32_t words[16];
  REFUSED(gpumem_memset(NULL, 0, 1, 8), GPUMEM_ERROR_INVALID_ARGUMENT, "NULL");
  const uint32_t sizes[] = {0, 3, 8, UINT32_MAX};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
    REFUSED(gpumem_memset(words, 0, sizes[i], 8), GPUMEM_ERROR_INVALID_ARGUMENT, "element");
  REFUSED(gpumem_memset(words, 0x100, 1, 8), GPUMEM_ERROR_INVALID_ARGUMENT, "fit");
  REFUSED(gpumem_memset(words, 0x10000, 2, 8), GPUMEM_ERROR_INVALID_ARGUMENT, "fit");
  REFUSED(gpumem_memset((char*)words + 1, 0, 4, 2), GPUMEM_ERROR_INVALID_ARGUMENT, "align");
  REFUSED(gpumem_memset(words, 0, 4, SIZE_MAX / 2), GPUMEM_ERROR_INVALID_ARGUMENT, "overflow");
  /* Plain host memory, which the device cannot write. */
  REFUSED(gpumem_memset(words, 0, 4, 4), DRIVER(GPUMEM_ERROR_INVALID_POINTER), NULL);
}

static void bad_memset_async(void) {
  static uint32_t words[16];
  REFUSED(gpumem_memset_async(NULL, 0, 1, 8, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "NULL");
  REFUSED(gpumem_memset_async(words, 0, 3, 8, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "element");
  REFUSED(gpumem_memset_async(words, 0x100, 1, 8, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "fit");
  REFUSED(gpumem_memset_async((char*)words + 2, 0, 4, 2, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "align");
  REFUSED(gpumem_memset_async(words, 0, 2, SIZE_MAX, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "overflow");
  REFUSED(gpumem_memset_async(words, 0, 4, 4, NULL), DRIVER(GPUMEM_ERROR_INVALID_POINTER), NULL);
}

typedef gpumem_status_t (*copy_call_fn)(void* dst, const void* src, size_t size);
static gpumem_status_t call_copy_async(void* dst, const void* src, size_t size) {
  return gpumem_copy_async(dst, src, size, NULL);
}

static void check_copy(copy_call_fn call) {
  static char a[256], b[256];
  REFUSED(call(NULL, b, 8), GPUMEM_ERROR_INVALID_ARGUMENT, "NULL");
  REFUSED(call(a, NULL, 8), GPUMEM_ERROR_INVALID_ARGUMENT, "NULL");
  REFUSED(call(a, a + 4, 8), GPUMEM_ERROR_INVALID_ARGUMENT, "overlap");
  REFUSED(call((void*)(UINTPTR_MAX - 3), b, 8), GPUMEM_ERROR_INVALID_ARGUMENT, "wraps");
  REFUSED(call(a, (void*)(UINTPTR_MAX - 3), 8), GPUMEM_ERROR_INVALID_ARGUMENT, "wraps");
  REFUSED(call(a, b, SIZE_MAX), GPUMEM_ERROR_INVALID_ARGUMENT, "wraps");
}

static void bad_copy(void) { check_copy(gpumem_copy); }
static void bad_copy_async(void) { check_copy(call_copy_async); }

static gpumem_status_t init_copy2d(void* out, size_t size) { return gpumem_copy2d_init(out, size); }
static gpumem_status_t init_copy3d(void* out, size_t size) { return gpumem_copy3d_init(out, size); }
static void bad_copy2d_init(void) { check_init(init_copy2d, sizeof(gpumem_copy2d_t), "copy"); }
static void bad_copy3d_init(void) { check_init(init_copy3d, sizeof(gpumem_copy3d_t), "copy"); }

static gpumem_status_t call_copy2d(void* ctx, const void* in) {
  return ctx ? gpumem_copy2d_async(in, NULL) : gpumem_copy2d(in);
}
static gpumem_status_t call_copy3d(void* ctx, const void* in) {
  return ctx ? gpumem_copy3d_async(in, NULL) : gpumem_copy3d(in);
}

static bool g_async; /* the copy calls below: the _async one */
static gpumem_status_t call_copy2d_src_array(void* handle) {
  static char dst[64];
  gpumem_copy2d_t c = GPUMEM_COPY2D_INIT;
  c.dst = dst;
  c.src_array = handle;
  c.width = 4;
  c.height = 1;
  return g_async ? gpumem_copy2d_async(&c, NULL) : gpumem_copy2d(&c);
}
static gpumem_status_t call_copy2d_dst_array(void* handle) {
  static char src[64];
  gpumem_copy2d_t c = GPUMEM_COPY2D_INIT;
  c.dst_array = handle;
  c.src = src;
  c.width = 4;
  c.height = 1;
  return g_async ? gpumem_copy2d_async(&c, NULL) : gpumem_copy2d(&c);
}
static gpumem_status_t call_copy3d_src_array(void* handle) {
  static char dst[64];
  gpumem_copy3d_t c = GPUMEM_COPY3D_INIT;
  c.dst = dst;
  c.src_array = handle;
  c.width = 4;
  c.height = 1;
  c.depth = 1;
  return g_async ? gpumem_copy3d_async(&c, NULL) : gpumem_copy3d(&c);
}
static gpumem_status_t call_copy3d_dst_array(void* handle) {
  static char src[64];
  gpumem_copy3d_t c = GPUMEM_COPY3D_INIT;
  c.dst_array = handle;
  c.src = src;
  c.width = 4;
  c.height = 1;
  c.depth = 1;
  return g_async ? gpumem_copy3d_async(&c, NULL) : gpumem_copy3d(&c);
}

static void check_copy2d(bool async) {
  static char a[4096], b[4096];
  gpumem_copy2d_t valid = GPUMEM_COPY2D_INIT;
  valid.dst = a;
  valid.src = b;
  valid.width = 16;
  valid.height = 2;
  void* ctx = async ? &valid : NULL;
  check_in_struct(call_copy2d, ctx, &valid, sizeof valid, sizeof valid, "copy");
  g_async = async;
  /* Checks 1 to 5 of docs/copy.md need no driver; 6 to 8 (bounds, wrapping, overlap) do. */
  gpumem_copy2d_t c = valid;
  c.dst_array = (gpumem_array_t*)(uintptr_t)0x10000;
  REFUSED(call_copy2d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "dst has both a pointer and an array");
  c = valid;
  c.src = NULL;
  REFUSED(call_copy2d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "src has neither a pointer nor an array");
  c = valid;
  c.dst_pitch = 8;
  REFUSED(call_copy2d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "do not fit in dst_pitch");
  c = valid;
  c.dst_x = SIZE_MAX - 4; /* x + width overflows */
  REFUSED(call_copy2d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "do not fit in dst_pitch");
  c = valid;
  c.src_x = 8;
  c.src_pitch = 16;
  REFUSED(call_copy2d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "do not fit in src_pitch");
  c = valid;
  c.width = 0; /* check 5: nothing to do, after checks 1 to 4 */
  c.src_array = (const gpumem_array_t*)(uintptr_t)0x10000;
  c.src = NULL;
  REFUSED(call_copy2d(ctx, &c), GPUMEM_ERROR_INVALID_HANDLE, "is not a live gpumem array");
  c = valid;
  c.height = 0;
  ACCEPTED(call_copy2d(ctx, &c));
  c = valid;
  c.src = a + 8;
  REFUSED(call_copy2d(ctx, &c), DRIVER(GPUMEM_ERROR_INVALID_ARGUMENT), g_fake ? "overlap" : NULL);
  c = valid;
  c.height = SIZE_MAX; /* wrapping needs no driver to tell either */
  REFUSED(call_copy2d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "wraps around the address space");
  c = valid;
  c.dst_pitch = SIZE_MAX - 16;
  REFUSED(call_copy2d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "wraps around the address space");
  BAD_HANDLES(kArray, call_copy2d_src_array, false);
  BAD_HANDLES(kArray, call_copy2d_dst_array, false);
}

static void check_copy3d(bool async) {
  static char a[4096], b[4096];
  gpumem_copy3d_t valid = GPUMEM_COPY3D_INIT;
  valid.dst = a;
  valid.src = b;
  valid.width = 16;
  valid.height = 2;
  valid.depth = 2;
  void* ctx = async ? &valid : NULL;
  check_in_struct(call_copy3d, ctx, &valid, sizeof valid, sizeof valid, "copy");
  g_async = async;
  gpumem_copy3d_t c = valid;
  c.src_array = (gpumem_array_t*)(uintptr_t)0x10000;
  REFUSED(call_copy3d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "src has both a pointer and an array");
  c = valid;
  c.dst = NULL;
  REFUSED(call_copy3d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "dst has neither a pointer nor an array");
  c = valid;
  c.src_pitch = 15;
  REFUSED(call_copy3d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "do not fit in src_pitch");
  c = valid;
  c.dst_height = 1;
  REFUSED(call_copy3d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "do not fit in a slice of dst_height");
  c = valid;
  c.src_y = SIZE_MAX; /* y + height overflows */
  REFUSED(call_copy3d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "do not fit in a slice of src_height");
  c = valid;
  c.depth = 0;
  ACCEPTED(call_copy3d(ctx, &c));
  c = valid;
  c.depth = SIZE_MAX;
  REFUSED(call_copy3d(ctx, &c), GPUMEM_ERROR_INVALID_ARGUMENT, "wraps around the address space");
  c = valid;
  c.src_z = SIZE_MAX / 2; /* the slice offset overflows: told once the driver is there */
  REFUSED(call_copy3d(ctx, &c), DRIVER(GPUMEM_ERROR_INVALID_ARGUMENT),
          g_fake ? "wraps around the address space" : NULL);
  c = valid;
  c.dst = b + 16; /* the two regions share bytes */
  REFUSED(call_copy3d(ctx, &c), DRIVER(GPUMEM_ERROR_INVALID_ARGUMENT), g_fake ? "overlap" : NULL);
  BAD_HANDLES(kArray, call_copy3d_src_array, false);
  BAD_HANDLES(kArray, call_copy3d_dst_array, false);
}

static void bad_copy2d(void) { check_copy2d(false); }
static void bad_copy2d_async(void) { check_copy2d(true); }
static void bad_copy3d(void) { check_copy3d(false); }
static void bad_copy3d_async(void) { check_copy3d(true); }

static void bad_copy_staging_get_held(void) {
  REFUSED(gpumem_copy_staging_get_held(NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_bytes is NULL");
}

static void bad_copy_staging_release(void) { ACCEPTED(gpumem_copy_staging_release()); /* nothing to get wrong */ }

static gpumem_status_t call_last_out_of_memory_out(void* ctx, void* out) {
  (void)ctx;
  return gpumem_last_out_of_memory(out);
}
static void bad_last_out_of_memory(void) {
  check_out_struct(call_last_out_of_memory_out, NULL, sizeof(gpumem_out_of_memory_info_t), "out_info");
}

/* While the caller holds a handle, nothing stops: refused, and the handle still works. */
static void bad_shutdown(void) {
  gpumem_allocator_t* host = NULL;
  assert_int_equal(gpumem_allocator_create_host(0, &host), GPUMEM_SUCCESS);
  REFUSED(gpumem_shutdown(), GPUMEM_ERROR_BUSY, "handles the caller made are live");
  void* p = NULL;
  assert_int_equal(gpumem_alloc(host, 64, NULL, &p), GPUMEM_SUCCESS);
  assert_int_equal(gpumem_free(host, p, NULL), GPUMEM_SUCCESS);
  assert_int_equal(gpumem_allocator_destroy(host), GPUMEM_SUCCESS);
}

/* ---- Arrays ----------------------------------------------------------------------------------- */

static gpumem_status_t init_array_desc(void* out, size_t size) { return gpumem_array_desc_init(out, size); }
static void bad_array_desc_init(void) { check_init(init_array_desc, sizeof(gpumem_array_desc_t), "desc"); }

static gpumem_status_t call_array_create(void* ctx, const void* in) {
  (void)ctx;
  gpumem_array_t* a = GARBAGE;
  const gpumem_status_t st = gpumem_array_create(in, &a);
  assert_null(a);
  return st;
}

static void bad_array_create(void) {
  gpumem_array_desc_t valid = GPUMEM_ARRAY_DESC_INIT;
  valid.width = 16;
  check_in_struct(call_array_create, NULL, &valid, sizeof valid, sizeof valid, "desc");
  REFUSED(gpumem_array_create(&valid, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_array is NULL");
  gpumem_array_desc_t d = valid;
  const int32_t formats[] = {0, 9, -1, INT32_MAX};
  for (size_t i = 0; i < sizeof formats / sizeof formats[0]; ++i) {
    d = valid;
    d.format = formats[i];
    REFUSED(call_array_create(NULL, &d), GPUMEM_ERROR_INVALID_ARGUMENT, "format");
  }
  const uint32_t channels[] = {0, 3, 5, UINT32_MAX};
  for (size_t i = 0; i < sizeof channels / sizeof channels[0]; ++i) {
    d = valid;
    d.channels = channels[i];
    REFUSED(call_array_create(NULL, &d), GPUMEM_ERROR_INVALID_ARGUMENT, "channels");
  }
  d = valid;
  d.width = 0;
  REFUSED(call_array_create(NULL, &d), GPUMEM_ERROR_INVALID_ARGUMENT, "width is 0");
  d = valid;
  d.depth = 4;
  REFUSED(call_array_create(NULL, &d), GPUMEM_ERROR_INVALID_ARGUMENT, "without a height");
  for (size_t i = 0; i < sizeof kBadDevices / sizeof kBadDevices[0]; ++i) {
    d = valid;
    d.device = kBadDevices[i];
    REFUSED(call_array_create(NULL, &d), DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
  }
}

static gpumem_status_t call_array_destroy(void* h) { return gpumem_array_destroy(h); }
static gpumem_status_t call_array_get_desc(void* h) {
  gpumem_array_desc_t d;
  GARBLED(d);
  const gpumem_status_t st = gpumem_array_get_desc(h, &d);
  assert_cleared(&d, sizeof d);
  return st;
}
static gpumem_status_t call_array_get_desc_out(void* ctx, void* out) { return gpumem_array_get_desc(ctx, out); }

static void bad_array_destroy(void) {
  ACCEPTED(gpumem_array_destroy(NULL));
  BAD_HANDLES(kArray, call_array_destroy, false);
}

static void bad_array_get_desc(void) {
  check_out_struct(call_array_get_desc_out, (void*)(uintptr_t)0x10000, sizeof(gpumem_array_desc_t), "out_desc");
  BAD_HANDLES(kArray, call_array_get_desc, true);
}

/* ---- Pointers and pinning --------------------------------------------------------------------- */

static gpumem_status_t call_pointer_get_info(void* ctx, void* out) { return gpumem_pointer_get_info(ctx, out); }

static void bad_pointer_get_info(void) {
  static char bytes[64];
  check_out_struct(call_pointer_get_info, bytes, sizeof(gpumem_pointer_info_t), "out_info");
  if (!g_fake) {
    gpumem_pointer_info_t info;
    GARBLED(info);
    REFUSED(gpumem_pointer_get_info(bytes, &info), GPUMEM_ERROR_NO_DRIVER, NULL);
    assert_cleared(&info, sizeof info);
  }
  /* Any address is an answer, not an error: wild ones are plain host memory. */
  if (g_fake) FOR_WILD(p) {
      gpumem_pointer_info_t info;
      GARBLED(info);
      ACCEPTED(gpumem_pointer_get_info(WILD(p), &info));
      assert_int_equal(info.memory_type, GPUMEM_MEMORY_UNREGISTERED);
    }
}

typedef gpumem_status_t (*range_call_fn)(void* ptr, size_t size);

/* NULL, size 0, ranges that wrap or end at 2^64. */
static void check_range(range_call_fn call) {
  static char bytes[64];
  REFUSED(call(NULL, 8), GPUMEM_ERROR_INVALID_ARGUMENT, "ptr is NULL");
  REFUSED(call(bytes, 0), GPUMEM_ERROR_INVALID_ARGUMENT, "size is 0");
  REFUSED(call((void*)(UINTPTR_MAX - 7), 16), GPUMEM_ERROR_INVALID_ARGUMENT, "wraps");
  REFUSED(call(bytes, SIZE_MAX), GPUMEM_ERROR_INVALID_ARGUMENT, "wraps");
}

static gpumem_status_t call_pin(void* ptr, size_t size) { return gpumem_pin(ptr, size, 0); }
static gpumem_status_t call_pin_query(void* ptr, size_t size) {
  int32_t state = 77;
  const gpumem_status_t st = gpumem_pin_query(ptr, size, &state);
  if (st != GPUMEM_SUCCESS) assert_int_equal(state, GPUMEM_PIN_NONE);
  return st;
}

static void bad_pin(void) {
  static char bytes[64];
  check_range(call_pin);
  REFUSED(gpumem_pin(bytes, sizeof bytes, 1), GPUMEM_ERROR_INVALID_ARGUMENT, "flags");
  REFUSED(gpumem_pin(bytes, sizeof bytes, 0xffffffffu), GPUMEM_ERROR_INVALID_ARGUMENT, "flags");
}

static void bad_unpin(void) {
  static char bytes[64];
  check_range(gpumem_unpin);
  REFUSED(gpumem_unpin(bytes, sizeof bytes), GPUMEM_ERROR_NOT_OWNED, NULL); /* never pinned */
}

static void bad_pin_query(void) {
  static char bytes[64];
  check_range(call_pin_query);
  REFUSED(gpumem_pin_query(bytes, sizeof bytes, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_state is NULL");
}

static void bad_pin_forget(void) { check_range(gpumem_pin_forget); }

static void bad_pin_cache_flush(void) { ACCEPTED(gpumem_pin_cache_flush()); /* nothing cached: nothing to do */ }

static void bad_pin_cache_set_budget(void) {
  ACCEPTED(gpumem_pin_cache_set_budget(UINT64_MAX)); /* any budget is one */
  ACCEPTED(gpumem_pin_cache_set_budget(0));
  ACCEPTED(gpumem_pin_cache_set_budget((uint64_t)1 << 30));
}

static gpumem_status_t call_pin_get_stats(void* ctx, void* out) {
  (void)ctx;
  return gpumem_pin_get_stats(out);
}
static void bad_pin_get_stats(void) {
  check_out_struct(call_pin_get_stats, NULL, sizeof(gpumem_pin_stats_t), "out_stats");
}

/* ---- Allocators ------------------------------------------------------------------------------- */

/* The output is cleared, and nothing is made. */
#define CREATE_REFUSED(create, out_var, want, text) \
  do {                                              \
    out_var = GARBAGE;                              \
    REFUSED(create, want, text);                    \
    assert_null(out_var);                           \
  } while (0)

static void bad_allocator_create_device(void) {
  REFUSED(gpumem_allocator_create_device(0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_allocator is NULL");
  gpumem_allocator_t* a;
  for (size_t i = 0; i < sizeof kBadDevices / sizeof kBadDevices[0]; ++i)
    CREATE_REFUSED(gpumem_allocator_create_device(kBadDevices[i], &a), a, DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
}

static void bad_allocator_create_device_async(void) {
  REFUSED(gpumem_allocator_create_device_async(0, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_allocator is NULL");
  gpumem_allocator_t* a;
  for (size_t i = 0; i < sizeof kBadDevices / sizeof kBadDevices[0]; ++i)
    CREATE_REFUSED(gpumem_allocator_create_device_async(kBadDevices[i], NULL, &a), a,
                   DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
}

static void bad_allocator_create_managed(void) {
  REFUSED(gpumem_allocator_create_managed(0, 0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_allocator is NULL");
  gpumem_allocator_t* a;
  CREATE_REFUSED(gpumem_allocator_create_managed(0, 3, &a), a, GPUMEM_ERROR_INVALID_ARGUMENT, "flags");
  CREATE_REFUSED(gpumem_allocator_create_managed(0, 0xffffffffu, &a), a, GPUMEM_ERROR_INVALID_ARGUMENT, "flags");
  for (size_t i = 0; i < sizeof kBadDevices / sizeof kBadDevices[0]; ++i)
    CREATE_REFUSED(gpumem_allocator_create_managed(kBadDevices[i], 0, &a), a, DRIVER(GPUMEM_ERROR_INVALID_DEVICE),
                   NULL);
}

static void bad_allocator_create_pinned(void) {
  REFUSED(gpumem_allocator_create_pinned(0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_allocator is NULL");
  gpumem_allocator_t* a;
  CREATE_REFUSED(gpumem_allocator_create_pinned(0x8, &a), a, GPUMEM_ERROR_INVALID_ARGUMENT, "flags");
  CREATE_REFUSED(gpumem_allocator_create_pinned(0xffffffffu, &a), a, GPUMEM_ERROR_INVALID_ARGUMENT, "flags");
}

static void bad_allocator_create_host(void) {
  REFUSED(gpumem_allocator_create_host(0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_allocator is NULL");
  const size_t alignments[] = {1, 3, 4, 24, (size_t)1 << 21, SIZE_MAX, (size_t)1 << 63};
  gpumem_allocator_t* a;
  for (size_t i = 0; i < sizeof alignments / sizeof alignments[0]; ++i)
    CREATE_REFUSED(gpumem_allocator_create_host(alignments[i], &a), a, GPUMEM_ERROR_INVALID_ARGUMENT, "alignment");
}

static gpumem_status_t ok_alloc(void* c, size_t s, int32_t d, gpumem_stream_t st, void** out) {
  (void)c, (void)s, (void)d, (void)st, (void)out;
  return GPUMEM_ERROR_OUT_OF_MEMORY;
}
static gpumem_status_t ok_free(void* c, void* p, size_t s, int32_t d, gpumem_stream_t st) {
  (void)c, (void)p, (void)s, (void)d, (void)st;
  return GPUMEM_SUCCESS;
}
static gpumem_status_t ok_reserve(void* c, size_t s, int32_t d, void** out) {
  (void)c, (void)s, (void)d, (void)out;
  return GPUMEM_ERROR_OUT_OF_MEMORY;
}
static gpumem_status_t ok_map(void* c, void* p, size_t s, int32_t d) {
  (void)c, (void)p, (void)s, (void)d;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t call_create_functions(void* ctx, const void* in) {
  (void)ctx;
  gpumem_allocator_t* a = GARBAGE;
  const gpumem_status_t st = gpumem_allocator_create_functions(in, &a);
  assert_null(a);
  return st;
}

static void bad_allocator_create_functions(void) {
  gpumem_allocator_functions_t valid;
  memset(&valid, 0, sizeof valid);
  valid.struct_size = sizeof valid;
  valid.device = -1;
  valid.alloc = ok_alloc;
  valid.free = ok_free;
  check_in_struct(call_create_functions, NULL, &valid, sizeof valid, offsetof(gpumem_allocator_functions_t, reserve),
                  "functions");
  REFUSED(gpumem_allocator_create_functions(&valid, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_allocator is NULL");
  gpumem_allocator_functions_t f = valid;
  f.alloc = NULL;
  REFUSED(call_create_functions(NULL, &f), GPUMEM_ERROR_INVALID_ARGUMENT, "functions->alloc is NULL");
  f = valid;
  f.free = NULL;
  REFUSED(call_create_functions(NULL, &f), GPUMEM_ERROR_INVALID_ARGUMENT, "functions->free is NULL");
  const int32_t devices[] = {-2, INT32_MIN};
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; ++i) {
    f = valid;
    f.device = devices[i];
    REFUSED(call_create_functions(NULL, &f), GPUMEM_ERROR_INVALID_ARGUMENT, "neither a device nor -1");
  }
  f = valid; /* some of the range functions, not all */
  f.reserve = ok_reserve;
  f.map = ok_map;
  f.map_unit = 4096;
  f.range_size = 1 << 20;
  REFUSED(call_create_functions(NULL, &f), GPUMEM_ERROR_INVALID_ARGUMENT, "give all four or none");
  f.unreserve = ok_map;
  f.unmap = ok_map;
  const uint64_t units[] = {0, 256, 4097, 3 << 12, UINT64_MAX};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; ++i) {
    f.map_unit = units[i];
    REFUSED(call_create_functions(NULL, &f), GPUMEM_ERROR_INVALID_ARGUMENT, "map_unit");
  }
  f.map_unit = 4096;
  const uint64_t ranges[] = {0, 4095, 4096 + 512, UINT64_MAX};
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; ++i) {
    f.range_size = ranges[i];
    REFUSED(call_create_functions(NULL, &f), GPUMEM_ERROR_INVALID_ARGUMENT, "range_size");
  }
}

static gpumem_status_t call_destroy(void* h) { return gpumem_allocator_destroy(h); }
static gpumem_status_t call_destroy_force(void* h) { return gpumem_allocator_destroy_force(h); }
static gpumem_status_t call_get_device(void* h) {
  int32_t d = 77;
  const gpumem_status_t st = gpumem_allocator_get_device(h, &d);
  assert_int_equal(d, 0);
  return st;
}
static gpumem_status_t call_alloc(void* h) {
  void* p = GARBAGE;
  const gpumem_status_t st = gpumem_alloc(h, 64, NULL, &p);
  assert_null(p);
  return st;
}
static gpumem_status_t call_free(void* h) {
  static char bytes[64];
  return gpumem_free(h, bytes, NULL);
}
static gpumem_status_t call_set_default(void* h) { return gpumem_allocator_set_default(0, h); }
static gpumem_status_t call_set_thread(void* h) {
  gpumem_allocator_t* previous = GARBAGE;
  const gpumem_status_t st = gpumem_allocator_set_thread(h, &previous);
  assert_null(previous);
  return st;
}
static gpumem_status_t call_get_stats(void* h) {
  gpumem_allocator_stats_t s;
  GARBLED(s);
  const gpumem_status_t st = gpumem_allocator_get_stats(h, &s);
  assert_cleared(&s, sizeof s);
  return st;
}
static gpumem_status_t call_get_stats_out(void* ctx, void* out) { return gpumem_allocator_get_stats(ctx, out); }
static gpumem_status_t call_reset_peaks(void* h) { return gpumem_allocator_reset_peaks(h); }
static void noop_hook(const gpumem_hook_info_t* info, void* user_data) { (void)info, (void)user_data; }
static gpumem_status_t call_add_hook(void* h) {
  uint64_t id = 77;
  const gpumem_status_t st = gpumem_allocator_add_hook(h, GPUMEM_HOOK_ALL, noop_hook, NULL, &id);
  assert_int_equal(id, 0);
  return st;
}
static gpumem_status_t call_remove_hook(void* h) { return gpumem_allocator_remove_hook(h, 1); }

static void bad_allocator_destroy(void) {
  ACCEPTED(gpumem_allocator_destroy(NULL));
  BAD_HANDLES(kAllocator, call_destroy, false);
  REFUSED(gpumem_allocator_destroy(g_host), GPUMEM_ERROR_BUSY, "relied on"); /* g_pool's upstream */
}

static void bad_allocator_destroy_force(void) {
  ACCEPTED(gpumem_allocator_destroy_force(NULL));
  BAD_HANDLES(kAllocator, call_destroy_force, false);
  REFUSED(gpumem_allocator_destroy_force(g_host), GPUMEM_ERROR_BUSY, "relied on");
}

static void bad_allocator_get_device(void) {
  REFUSED(gpumem_allocator_get_device(g_host, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_device is NULL");
  BAD_HANDLES(kAllocator, call_get_device, false);
  if (!g_fake) REFUSED(call_get_device(NULL), GPUMEM_ERROR_NO_DRIVER, NULL); /* NULL: the default, on a device */
}

static void bad_alloc(void) {
  REFUSED(gpumem_alloc(g_host, 64, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_ptr is NULL");
  void* p = GARBAGE;
  REFUSED(gpumem_alloc(g_host, 0, NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "size is 0");
  assert_null(p);
  const gpumem_allocator_t* const kinds[] = {g_host, g_pool};
  const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 511, (SIZE_MAX >> 1) + 1};
  for (size_t k = 0; k < 2; ++k)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
      const gpumem_allocator_stats_t before = stats_of((gpumem_allocator_t*)kinds[k]);
      p = GARBAGE;
      mark();
      const gpumem_status_t st = gpumem_alloc((gpumem_allocator_t*)kinds[k], sizes[i], NULL, &p);
      if (st != GPUMEM_ERROR_INVALID_ARGUMENT && st != GPUMEM_ERROR_OUT_OF_MEMORY) {
        print_error("gpumem_alloc of %zu bytes returned %s: %s\n", sizes[i], gpumem_status_name(st),
                    gpumem_last_error_detail());
        fail();
      }
      check_fresh_detail("gpumem_alloc(huge)", NULL, __FILE__, __LINE__);
      assert_null(p);
      gpumem_allocator_stats_t after = stats_of((gpumem_allocator_t*)kinds[k]);
      after.oom_count = before.oom_count; /* the one count a failure may change */
      after.retry_count = before.retry_count;
      assert_memory_equal(&after, &before, sizeof after);
    }
  BAD_HANDLES(kAllocator, call_alloc, false);
  if (!g_fake) REFUSED(call_alloc(NULL), GPUMEM_ERROR_NO_DRIVER, NULL);
}

static void bad_free(void) {
  static char bytes[64];
  ACCEPTED(gpumem_free(g_host, NULL, NULL));
  REFUSED(gpumem_free(g_host, bytes, NULL), GPUMEM_ERROR_NOT_OWNED, NULL);
  REFUSED(gpumem_free(g_pool, bytes, NULL), GPUMEM_ERROR_NOT_OWNED, NULL);
  REFUSED(gpumem_free(g_pool, (void*)(uintptr_t)12345, NULL), GPUMEM_ERROR_NOT_OWNED, NULL);
  BAD_HANDLES(kAllocator, call_free, false);
}

static void bad_allocator_set_default(void) {
  REFUSED(gpumem_allocator_set_default(-1, g_host), GPUMEM_ERROR_INVALID_ARGUMENT, "device is negative");
  REFUSED(gpumem_allocator_set_default(INT32_MIN, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "device is negative");
  BAD_HANDLES(kAllocator, call_set_default, false);
  REFUSED(gpumem_allocator_set_default(1000, g_host), DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
}

static void bad_allocator_get_default(void) {
  REFUSED(gpumem_allocator_get_default(0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_allocator is NULL");
  gpumem_allocator_t* a;
  CREATE_REFUSED(gpumem_allocator_get_default(-1, &a), a, GPUMEM_ERROR_INVALID_ARGUMENT, "device is negative");
  CREATE_REFUSED(gpumem_allocator_get_default(1000, &a), a, DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
}

static void bad_allocator_set_thread(void) {
  BAD_HANDLES(kAllocator, call_set_thread, false);
  gpumem_allocator_t* now = GARBAGE;
  ACCEPTED(gpumem_allocator_get_thread(&now));
  assert_null(now); /* none of the refusals set one */
  ACCEPTED(gpumem_allocator_set_thread(NULL, NULL));
}

static void bad_allocator_get_thread(void) {
  REFUSED(gpumem_allocator_get_thread(NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_allocator is NULL");
}

static void bad_allocator_get_stats(void) {
  check_out_struct(call_get_stats_out, g_host, sizeof(gpumem_allocator_stats_t), "out_stats");
  BAD_HANDLES(kAllocator, call_get_stats, false);
  if (!g_fake) REFUSED(call_get_stats(NULL), GPUMEM_ERROR_NO_DRIVER, NULL);
}

static void bad_allocator_reset_peaks(void) {
  BAD_HANDLES(kAllocator, call_reset_peaks, false);
  if (!g_fake) REFUSED(gpumem_allocator_reset_peaks(NULL), GPUMEM_ERROR_NO_DRIVER, NULL);
}

static void bad_allocator_add_hook(void) {
  REFUSED(gpumem_allocator_add_hook(g_host, GPUMEM_HOOK_ALL, noop_hook, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT,
          "out_hook_id is NULL");
  uint64_t id = 77;
  REFUSED(gpumem_allocator_add_hook(g_host, GPUMEM_HOOK_ALL, NULL, NULL, &id), GPUMEM_ERROR_INVALID_ARGUMENT,
          "hook is NULL");
  assert_int_equal(id, 0);
  const uint32_t events[] = {0, 0x40, GPUMEM_HOOK_ALL | 0x80000000u, 0xffffffffu};
  for (size_t i = 0; i < sizeof events / sizeof events[0]; ++i) {
    id = 77;
    REFUSED(gpumem_allocator_add_hook(g_host, events[i], noop_hook, NULL, &id), GPUMEM_ERROR_INVALID_ARGUMENT,
            "events");
    assert_int_equal(id, 0);
  }
  BAD_HANDLES(kAllocator, call_add_hook, true);
}

static void bad_allocator_remove_hook(void) {
  const uint64_t ids[] = {0, 1, UINT64_MAX};
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; ++i)
    REFUSED(gpumem_allocator_remove_hook(g_host, ids[i]), GPUMEM_ERROR_INVALID_HANDLE, "no hook with id");
  BAD_HANDLES(kAllocator, call_remove_hook, true);
}

/* ---- Pools ------------------------------------------------------------------------------------ */

static gpumem_status_t init_pool_params(void* out, size_t size) { return gpumem_pool_params_init(out, size); }
static void bad_pool_params_init(void) { check_init(init_pool_params, sizeof(gpumem_pool_params_t), "params"); }

static gpumem_status_t call_pool_create_in(void* ctx, const void* in) {
  (void)ctx;
  gpumem_allocator_t* p = GARBAGE;
  const gpumem_status_t st = gpumem_pool_create(in, &p);
  assert_null(p);
  return st;
}
static gpumem_status_t call_pool_create(void* h) {
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = h;
  return call_pool_create_in(NULL, &params);
}

static void bad_pool_create(void) {
  gpumem_pool_params_t valid = GPUMEM_POOL_PARAMS_INIT;
  valid.upstream = g_host;
  check_in_struct(call_pool_create_in, NULL, &valid, sizeof valid, sizeof valid, "params");
  REFUSED(gpumem_pool_create(&valid, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_pool is NULL");
  gpumem_pool_params_t p = valid;
  p.upstream = NULL;
  REFUSED(call_pool_create_in(NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "upstream is NULL");
  p = valid;
  p.limit = 1 << 20;
  p.limit_fraction = 0.5;
  REFUSED(call_pool_create_in(NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "both");
  const double fractions[] = {-1.0, 1.5, NAN, INFINITY, -INFINITY, 1e-300};
  for (size_t i = 0; i < sizeof fractions / sizeof fractions[0]; ++i) {
    p = valid;
    p.limit_fraction = fractions[i];
    REFUSED(call_pool_create_in(NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, NULL);
  }
  p = valid; /* a fraction of host memory's device: there is none */
  p.limit_fraction = 0.5;
  REFUSED(call_pool_create_in(NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "host memory");
  BAD_HANDLES(kAllocator, call_pool_create, false);
}

static gpumem_status_t call_pool_set_soft_limit(void* h) { return gpumem_pool_set_soft_limit(h, 0); }
static void bad_pool_set_soft_limit(void) {
  BAD_HANDLES(kAllocator, call_pool_set_soft_limit, true);
  REFUSED(call_pool_set_soft_limit(g_host), GPUMEM_ERROR_INVALID_HANDLE, "not a pool");
}

static void bad_pool_get_device(void) {
  REFUSED(gpumem_pool_get_device(0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_pool is NULL");
  gpumem_allocator_t* a;
  for (size_t i = 0; i < sizeof kBadDevices / sizeof kBadDevices[0]; ++i)
    CREATE_REFUSED(gpumem_pool_get_device(kBadDevices[i], &a), a, DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
}

static gpumem_status_t call_pool_release(void* h) { return gpumem_pool_release(h, NULL, 0); }
static gpumem_status_t call_pool_get_info(void* h) {
  gpumem_pool_info_t i;
  GARBLED(i);
  const gpumem_status_t st = gpumem_pool_get_info(h, &i);
  assert_cleared(&i, sizeof i);
  return st;
}
static gpumem_status_t call_pool_get_info_out(void* ctx, void* out) { return gpumem_pool_get_info(ctx, out); }
static gpumem_status_t call_pool_get_growth_info(void* h) {
  gpumem_pool_growth_info_t i;
  GARBLED(i);
  const gpumem_status_t st = gpumem_pool_get_growth_info(h, &i);
  assert_cleared(&i, sizeof i);
  return st;
}
static gpumem_status_t call_pool_get_growth_info_out(void* ctx, void* out) {
  return gpumem_pool_get_growth_info(ctx, out);
}
static void count_block(const gpumem_block_info_t* info, void* user_data) {
  (void)info;
  ++*(int*)user_data;
}
static gpumem_status_t call_pool_snapshot(void* h) {
  int blocks = 0;
  const gpumem_status_t st = gpumem_pool_snapshot(h, count_block, &blocks);
  assert_int_equal(blocks, 0);
  return st;
}
static gpumem_status_t call_pool_snapshot_json(void* h) {
  char path[300];
  snprintf(path, sizeof path, "%s/snapshot.json", g_dir);
  const gpumem_status_t st = gpumem_pool_snapshot_json(h, path);
  assert_int_equal(access(path, F_OK), -1); /* no file for a refusal */
  return st;
}
static gpumem_status_t call_pool_set_limit(void* h) { return gpumem_pool_set_limit(h, 1 << 20); }
static gpumem_status_t call_pool_set_limit_fraction(void* h) { return gpumem_pool_set_limit_fraction(h, 0.5); }
static gpumem_status_t call_pool_set_stream_reuse(void* h) {
  return gpumem_pool_set_stream_reuse(h, GPUMEM_STREAM_REUSE_NEVER);
}
static gpumem_status_t call_pool_set_page_reclaim(void* h) { return gpumem_pool_set_page_reclaim(h, 1); }
static gpumem_status_t call_pool_record_stream(void* h) {
  static char bytes[64];
  return gpumem_pool_record_stream(h, bytes, (gpumem_stream_t)0x10);
}

/* A pool's call on an allocator that is no pool. */
#define NOT_A_POOL(call) REFUSED(call(g_host), GPUMEM_ERROR_INVALID_HANDLE, "not a pool")

static void bad_pool_release(void) {
  const uint32_t flags[] = {0x2, 0x80000000u, 0xffffffffu};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i)
    REFUSED(gpumem_pool_release(g_pool, NULL, flags[i]), GPUMEM_ERROR_INVALID_ARGUMENT, "flags");
  BAD_HANDLES(kAllocator, call_pool_release, true);
  NOT_A_POOL(call_pool_release);
}

static void bad_pool_get_growth_info(void) {
  check_out_struct(call_pool_get_growth_info_out, g_pool, sizeof(gpumem_pool_growth_info_t), "out_info");
  BAD_HANDLES(kAllocator, call_pool_get_growth_info, true);
  NOT_A_POOL(call_pool_get_growth_info);
}

static void bad_pool_get_info(void) {
  check_out_struct(call_pool_get_info_out, g_pool, offsetof(gpumem_pool_info_t, pending_bytes), "out_info");
  BAD_HANDLES(kAllocator, call_pool_get_info, true);
  NOT_A_POOL(call_pool_get_info);
}

static void bad_pool_snapshot(void) {
  REFUSED(gpumem_pool_snapshot(g_pool, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "fn is NULL");
  BAD_HANDLES(kAllocator, call_pool_snapshot, true);
  NOT_A_POOL(call_pool_snapshot);
}

static void bad_pool_snapshot_json(void) {
  REFUSED(gpumem_pool_snapshot_json(g_pool, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "path is NULL");
  char path[300];
  snprintf(path, sizeof path, "%s/no-such-dir/snapshot.json", g_dir);
  REFUSED(gpumem_pool_snapshot_json(g_pool, path), GPUMEM_ERROR_IO, path);
  REFUSED(gpumem_pool_snapshot_json(g_pool, ""), GPUMEM_ERROR_IO, NULL);
  BAD_HANDLES(kAllocator, call_pool_snapshot_json, true);
  NOT_A_POOL(call_pool_snapshot_json);
}

static void bad_pool_set_limit(void) {
  BAD_HANDLES(kAllocator, call_pool_set_limit, true);
  NOT_A_POOL(call_pool_set_limit);
}

static void bad_pool_set_limit_fraction(void) {
  const double fractions[] = {0.0, -0.5, 1.0000001, NAN, INFINITY};
  for (size_t i = 0; i < sizeof fractions / sizeof fractions[0]; ++i)
    REFUSED(gpumem_pool_set_limit_fraction(g_pool, fractions[i]), GPUMEM_ERROR_INVALID_ARGUMENT, "fraction");
  REFUSED(gpumem_pool_set_limit_fraction(g_pool, 0.5), GPUMEM_ERROR_INVALID_ARGUMENT, "host memory");
  BAD_HANDLES(kAllocator, call_pool_set_limit_fraction, true);
  NOT_A_POOL(call_pool_set_limit_fraction);
}

static void bad_pool_set_stream_reuse(void) {
  const int32_t reuse[] = {-1, 3, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof reuse / sizeof reuse[0]; ++i)
    REFUSED(gpumem_pool_set_stream_reuse(g_pool, reuse[i]), GPUMEM_ERROR_INVALID_ARGUMENT, "stream reuse");
  BAD_HANDLES(kAllocator, call_pool_set_stream_reuse, true);
  NOT_A_POOL(call_pool_set_stream_reuse);
}

static void bad_pool_set_page_reclaim(void) {
  const int32_t enable[] = {-1, 2, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof enable / sizeof enable[0]; ++i)
    REFUSED(gpumem_pool_set_page_reclaim(g_pool, enable[i]), GPUMEM_ERROR_INVALID_ARGUMENT, "pass 1 or 0");
  BAD_HANDLES(kAllocator, call_pool_set_page_reclaim, true);
  NOT_A_POOL(call_pool_set_page_reclaim);
}

/* Refused before anything is kept, whether or not a device pool is made already. */
static void bad_pool_set_device_config(void) {
  REFUSED(gpumem_pool_set_device_config("colour:red"), GPUMEM_ERROR_INVALID_ARGUMENT, "unknown key \"colour\"");
  REFUSED(gpumem_pool_set_device_config("backend"), GPUMEM_ERROR_INVALID_ARGUMENT, "is not key:value");
  REFUSED(gpumem_pool_set_device_config("backend:gpu"), GPUMEM_ERROR_INVALID_ARGUMENT, "is not vm, classic or auto");
  REFUSED(gpumem_pool_set_device_config("map_unit:lots"), GPUMEM_ERROR_INVALID_ARGUMENT, "map_unit");
  REFUSED(gpumem_pool_set_device_config("map_unit:50%"), GPUMEM_ERROR_INVALID_ARGUMENT, "percentage");
  REFUSED(gpumem_pool_set_device_config("backend:vm,page_reclaim:yes"), GPUMEM_ERROR_INVALID_ARGUMENT,
          "is not true or false");
}

static void bad_pool_record_stream(void) {
  static char bytes[64];
  REFUSED(gpumem_pool_record_stream(g_pool, bytes, (gpumem_stream_t)0x10), GPUMEM_ERROR_NOT_OWNED, NULL);
  REFUSED(gpumem_pool_record_stream(g_pool, NULL, (gpumem_stream_t)0x10), GPUMEM_ERROR_NOT_OWNED, NULL);
  void* p = NULL;
  assert_ok(gpumem_alloc(g_pool, 64, NULL, &p));
  REFUSED(gpumem_pool_record_stream(g_pool, p, GPUMEM_STREAM_PER_THREAD), GPUMEM_ERROR_INVALID_ARGUMENT,
          "per-thread default stream");
  REFUSED(gpumem_pool_record_stream(g_pool, (char*)p + 1, (gpumem_stream_t)0x10), GPUMEM_ERROR_NOT_OWNED, NULL);
  assert_ok(gpumem_free(g_pool, p, NULL));
  assert_ok(gpumem_pool_release(g_pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  BAD_HANDLES(kAllocator, call_pool_record_stream, true);
  NOT_A_POOL(call_pool_record_stream);
}

static void reclaim_nothing(int32_t device, size_t size, void* user_data) { (void)device, (void)size, (void)user_data; }

static void bad_reclaim_add(void) {
  REFUSED(gpumem_reclaim_add(reclaim_nothing, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_id is NULL");
  uint64_t id = 77;
  REFUSED(gpumem_reclaim_add(NULL, NULL, &id), GPUMEM_ERROR_INVALID_ARGUMENT, "reclaim is NULL");
  assert_int_equal(id, 0);
}

static void bad_reclaim_remove(void) {
  const uint64_t ids[] = {0, 12345, UINT64_MAX};
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; ++i)
    REFUSED(gpumem_reclaim_remove(ids[i]), GPUMEM_ERROR_INVALID_HANDLE, "no reclaim callback has id");
}

/* ---- CUDA pools and peer access --------------------------------------------------------------- */

static gpumem_status_t init_cuda_pool_params(void* out, size_t size) { return gpumem_cuda_pool_params_init(out, size); }
static void bad_cuda_pool_params_init(void) {
  check_init(init_cuda_pool_params, sizeof(gpumem_cuda_pool_params_t), "params");
}

static gpumem_status_t call_create_cuda_pool(void* ctx, const void* in) {
  (void)ctx;
  gpumem_allocator_t* a = GARBAGE;
  const gpumem_status_t st = gpumem_allocator_create_cuda_pool(in, &a);
  assert_null(a);
  return st;
}

static void bad_allocator_create_cuda_pool(void) {
  gpumem_cuda_pool_params_t valid = GPUMEM_CUDA_POOL_PARAMS_INIT;
  check_in_struct(call_create_cuda_pool, NULL, &valid, sizeof valid, sizeof valid, "params");
  REFUSED(gpumem_allocator_create_cuda_pool(&valid, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_allocator is NULL");
  gpumem_cuda_pool_params_t p = valid;
  const uint32_t sources[] = {4, 0xffffffffu};
  for (size_t i = 0; i < sizeof sources / sizeof sources[0]; ++i) {
    p = valid;
    p.source = sources[i];
    REFUSED(call_create_cuda_pool(NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "source");
  }
  p = valid;
  p.source = GPUMEM_CUDA_POOL_EXTERNAL;
  REFUSED(call_create_cuda_pool(NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "pool");
  p = valid; /* a pool the driver never made */
  p.source = GPUMEM_CUDA_POOL_EXTERNAL;
  p.pool = (gpumem_cuda_pool_t)(uintptr_t)0x10000;
  REFUSED(call_create_cuda_pool(NULL, &p), DRIVER(GPUMEM_ERROR_INVALID_ARGUMENT), NULL);
  p = valid;
  p.pool = (gpumem_cuda_pool_t)(uintptr_t)0x10000; /* a pool with a source that takes none */
  REFUSED(call_create_cuda_pool(NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "pool");
  p = valid;
  p.max_size = 1 << 20; /* for a pool that exists already */
  REFUSED(call_create_cuda_pool(NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "max_size");
  p = valid;
  p.flags = 1;
  REFUSED(call_create_cuda_pool(NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "flags");
  const int32_t devices[] = {-1, INT32_MIN};
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; ++i) {
    p = valid;
    p.device = devices[i];
    REFUSED(call_create_cuda_pool(NULL, &p), GPUMEM_ERROR_INVALID_DEVICE, NULL);
  }
  p = valid;
  p.device = 1000;
  REFUSED(call_create_cuda_pool(NULL, &p), DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
}

static gpumem_status_t call_cuda_pool_get(void* h) {
  gpumem_cuda_pool_t pool = GARBAGE;
  const gpumem_status_t st = gpumem_cuda_pool_get(h, &pool);
  assert_null(pool);
  return st;
}
static gpumem_status_t call_cuda_pool_trim(void* h) { return gpumem_cuda_pool_trim(h, 0); }
static gpumem_status_t call_cuda_pool_set_release_threshold(void* h) {
  return gpumem_cuda_pool_set_release_threshold(h, 0);
}
static gpumem_status_t call_cuda_pool_get_info(void* h) {
  gpumem_cuda_pool_info_t i;
  GARBLED(i);
  const gpumem_status_t st = gpumem_cuda_pool_get_info(h, &i);
  assert_cleared(&i, sizeof i);
  return st;
}
static gpumem_status_t call_cuda_pool_get_info_out(void* ctx, void* out) { return gpumem_cuda_pool_get_info(ctx, out); }
static gpumem_status_t call_cuda_pool_reset_peaks(void* h) { return gpumem_cuda_pool_reset_peaks(h); }

/* A CUDA pool's call on an allocator of another kind, or a gpumem pool. */
#define NOT_A_CUDA_POOL(call)                                                        \
  do {                                                                               \
    REFUSED(call(g_host), GPUMEM_ERROR_INVALID_HANDLE, "not a CUDA pool allocator"); \
    REFUSED(call(g_pool), GPUMEM_ERROR_INVALID_HANDLE, "not a CUDA pool allocator"); \
  } while (0)

static void bad_cuda_pool_get(void) {
  REFUSED(gpumem_cuda_pool_get(g_host, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_pool is NULL");
  BAD_HANDLES(kAllocator, call_cuda_pool_get, true);
  NOT_A_CUDA_POOL(call_cuda_pool_get);
}

static void bad_cuda_pool_trim(void) {
  BAD_HANDLES(kAllocator, call_cuda_pool_trim, true);
  NOT_A_CUDA_POOL(call_cuda_pool_trim);
}

static void bad_cuda_pool_set_release_threshold(void) {
  BAD_HANDLES(kAllocator, call_cuda_pool_set_release_threshold, true);
  NOT_A_CUDA_POOL(call_cuda_pool_set_release_threshold);
}

static void bad_cuda_pool_get_info(void) {
  check_out_struct(call_cuda_pool_get_info_out, g_host, sizeof(gpumem_cuda_pool_info_t), "out_info");
  BAD_HANDLES(kAllocator, call_cuda_pool_get_info, true);
  NOT_A_CUDA_POOL(call_cuda_pool_get_info);
}

static void bad_cuda_pool_reset_peaks(void) {
  BAD_HANDLES(kAllocator, call_cuda_pool_reset_peaks, true);
  NOT_A_CUDA_POOL(call_cuda_pool_reset_peaks);
}

static gpumem_status_t call_set_peer_access(void* h) {
  return gpumem_allocator_set_peer_access(h, 1, GPUMEM_PEER_ACCESS_READ_WRITE);
}

static void bad_allocator_set_peer_access(void) {
  const uint32_t access[] = {2, 0xffffffffu};
  for (size_t i = 0; i < sizeof access / sizeof access[0]; ++i)
    REFUSED(gpumem_allocator_set_peer_access(g_host, 1, access[i]), GPUMEM_ERROR_INVALID_ARGUMENT, "access");
  REFUSED(gpumem_allocator_set_peer_access(g_host, -1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_INVALID_DEVICE,
          "peer_device");
  REFUSED(gpumem_allocator_set_peer_access(g_host, INT32_MIN, GPUMEM_PEER_ACCESS_NONE), GPUMEM_ERROR_INVALID_DEVICE,
          "peer_device");
  /* Host memory cannot be shared that way, nor a pool's over it. */
  REFUSED(gpumem_allocator_set_peer_access(g_host, 1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_NOT_SUPPORTED, NULL);
  REFUSED(gpumem_allocator_set_peer_access(g_pool, 1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_NOT_SUPPORTED, NULL);
  BAD_HANDLES(kAllocator, call_set_peer_access, true);
  if (g_fake) { /* a device allocator, and devices that are not its peers */
    gpumem_allocator_t* device = NULL;
    assert_ok(gpumem_allocator_create_device(0, &device));
    REFUSED(gpumem_allocator_set_peer_access(device, 0, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_INVALID_ARGUMENT,
            "own device");
    REFUSED(gpumem_allocator_set_peer_access(device, 1000, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_INVALID_DEVICE,
            NULL);
    REFUSED(gpumem_allocator_set_peer_access(device, 0, 7), GPUMEM_ERROR_INVALID_ARGUMENT, "access");
    assert_ok(gpumem_allocator_destroy(device));
  }
}

/* ---- VM allocators ---------------------------------------------------------------------------- */

static gpumem_status_t init_vm_params(void* out, size_t size) { return gpumem_vm_params_init(out, size); }
static void bad_vm_params_init(void) { check_init(init_vm_params, sizeof(gpumem_vm_params_t), "params"); }

static gpumem_status_t call_create_vm(void* ctx, const void* in) {
  (void)ctx;
  gpumem_allocator_t* a = GARBAGE;
  const gpumem_status_t st = gpumem_allocator_create_vm(in, &a);
  assert_null(a);
  return st;
}

static void bad_allocator_create_vm(void) {
  gpumem_vm_params_t valid = GPUMEM_VM_PARAMS_INIT;
  check_in_struct(call_create_vm, NULL, &valid, sizeof valid, sizeof valid, "params");
  REFUSED(gpumem_allocator_create_vm(&valid, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_allocator is NULL");
  gpumem_vm_params_t p = valid;
  const int32_t devices[] = {-1, INT32_MIN};
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; ++i) {
    p = valid;
    p.device = devices[i];
    REFUSED(call_create_vm(NULL, &p), GPUMEM_ERROR_INVALID_DEVICE, NULL);
  }
  p = valid;
  p.device = 1000;
  REFUSED(call_create_vm(NULL, &p), DRIVER(GPUMEM_ERROR_INVALID_DEVICE), NULL);
  const uint64_t units[] = {3, (uint64_t)3 << 21, UINT64_MAX};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; ++i) {
    p = valid;
    p.map_unit = units[i];
    REFUSED(call_create_vm(NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "not a power of two");
  }
  const uint64_t ranges[] = {1, ((uint64_t)2 << 20) + 1, UINT64_MAX};
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; ++i) {
    p = valid;
    p.map_unit = (uint64_t)2 << 20;
    p.range_size = ranges[i];
    REFUSED(call_create_vm(NULL, &p), DRIVER(GPUMEM_ERROR_INVALID_ARGUMENT), g_fake ? "range_size" : NULL);
  }
}

static gpumem_status_t call_vm_get_info(void* h) {
  gpumem_vm_info_t i;
  GARBLED(i);
  const gpumem_status_t st = gpumem_vm_get_info(h, &i);
  assert_cleared(&i, sizeof i);
  return st;
}
static gpumem_status_t call_vm_get_info_out(void* ctx, void* out) { return gpumem_vm_get_info(ctx, out); }

static void bad_vm_get_info(void) {
  check_out_struct(call_vm_get_info_out, g_host, sizeof(gpumem_vm_info_t), "out_info");
  BAD_HANDLES(kAllocator, call_vm_get_info, true);
  REFUSED(call_vm_get_info(g_host), GPUMEM_ERROR_INVALID_HANDLE, "not a VM allocator");
  REFUSED(call_vm_get_info(g_pool), GPUMEM_ERROR_INVALID_HANDLE, "not a VM allocator");
}

/* ---- IPC -------------------------------------------------------------------------------------- */

static gpumem_status_t call_ipc_get_info(void* ctx, void* out) {
  (void)ctx;
  return gpumem_ipc_get_info(out);
}

static gpumem_status_t call_ipc_export(void* h) {
  static char bytes[64];
  gpumem_ipc_handle_t out;
  memset(&out, 0x5a, sizeof out);
  size_t count = 7;
  const gpumem_status_t st = gpumem_ipc_export(h, bytes, &out, &count);
  assert_int_equal(count, 0);
  for (size_t i = 0; i < sizeof out.bytes; ++i) assert_int_equal(out.bytes[i], 0);
  return st;
}

static void bad_ipc_export(void) {
  static char bytes[64];
  gpumem_ipc_handle_t out;
  REFUSED(gpumem_ipc_export(g_host, bytes, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_handle is NULL");
  REFUSED(gpumem_ipc_export(g_host, NULL, &out, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "ptr is NULL");
  REFUSED(call_ipc_export(g_host), GPUMEM_ERROR_NOT_OWNED, "is not the start of a live allocation");
  REFUSED(call_ipc_export(g_pool), GPUMEM_ERROR_NOT_OWNED, "is not the start of a live allocation");
  BAD_HANDLES(kAllocator, call_ipc_export, false);
}

/* A handle no gpumem made: every byte 0x42. */
static gpumem_ipc_handle_t forged_handle(void) {
  gpumem_ipc_handle_t h;
  memset(&h, 0x42, sizeof h);
  return h;
}

static void bad_ipc_export_fds(void) {
  const gpumem_ipc_handle_t h = forged_handle();
  int fds[2] = {-7, -7};
  REFUSED(gpumem_ipc_export_fds(NULL, fds, 1), GPUMEM_ERROR_INVALID_ARGUMENT, "handle is NULL");
  REFUSED(gpumem_ipc_export_fds(&h, fds, 1), GPUMEM_ERROR_INVALID_ARGUMENT, "not a gpumem IPC handle");
  assert_int_equal(fds[0], -7);
}

static void bad_ipc_open(void) {
  const gpumem_ipc_handle_t h = forged_handle();
  int fd = 0;
  void* p = GARBAGE;
  size_t size = 9;
  REFUSED(gpumem_ipc_open(&h, &fd, 1, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_ptr is NULL");
  REFUSED(gpumem_ipc_open(NULL, &fd, 1, &p, &size), GPUMEM_ERROR_INVALID_ARGUMENT, "handle is NULL");
  assert_null(p);
  assert_int_equal(size, 0);
  p = GARBAGE;
  REFUSED(gpumem_ipc_open(&h, &fd, 1, &p, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "not a gpumem IPC handle");
  assert_null(p);
}

static void bad_ipc_close(void) {
  static char bytes[64];
  REFUSED(gpumem_ipc_close(NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "ptr is NULL");
  REFUSED(gpumem_ipc_close(bytes), GPUMEM_ERROR_NOT_OWNED, "is not open here");
}

static void bad_ipc_send(void) {
  const gpumem_ipc_handle_t h = forged_handle();
  REFUSED(gpumem_ipc_send(-1, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "handle is NULL");
  REFUSED(gpumem_ipc_send(-1, &h), GPUMEM_ERROR_INVALID_ARGUMENT, "not a gpumem IPC handle");
}

static void bad_ipc_receive(void) {
  void* p = GARBAGE;
  size_t size = 9;
  REFUSED(gpumem_ipc_receive(-1, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_ptr is NULL");
  REFUSED(gpumem_ipc_receive(-1, &p, &size), GPUMEM_ERROR_IO, "receiving an IPC handle on socket -1");
  assert_null(p);
  assert_int_equal(size, 0);
}

static void bad_ipc_collect(void) {
  uint64_t freed = 5;
  ACCEPTED(gpumem_ipc_collect(NULL));
  ACCEPTED(gpumem_ipc_collect(&freed));
  assert_int_equal(freed, 0);
}

static void bad_ipc_get_info(void) { check_out_struct(call_ipc_get_info, NULL, sizeof(gpumem_ipc_info_t), "out_info"); }

/* ---- Tenants ---------------------------------------------------------------------------------- */

static gpumem_status_t init_tenant_params(void* out, size_t size) { return gpumem_tenant_params_init(out, size); }
static void bad_tenant_params_init(void) { check_init(init_tenant_params, sizeof(gpumem_tenant_params_t), "params"); }

static gpumem_status_t call_tenant_create_in(void* ctx, const void* in) {
  (void)ctx;
  gpumem_allocator_t* t = GARBAGE;
  const gpumem_status_t st = gpumem_tenant_create(in, &t);
  assert_null(t);
  return st;
}
static gpumem_status_t call_tenant_create(void* h) {
  gpumem_tenant_params_t params = GPUMEM_TENANT_PARAMS_INIT;
  params.upstream = h;
  return call_tenant_create_in(NULL, &params);
}

static void bad_tenant_create(void) {
  gpumem_tenant_params_t valid = GPUMEM_TENANT_PARAMS_INIT;
  valid.upstream = g_pool;
  check_in_struct(call_tenant_create_in, NULL, &valid, sizeof valid, sizeof valid, "params");
  REFUSED(gpumem_tenant_create(&valid, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_tenant is NULL");
  gpumem_tenant_params_t p = valid;
  p.limit = 4096;
  p.soft_limit = 8192;
  REFUSED(call_tenant_create_in(NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT, "soft_limit (8,192 bytes) is above limit");
  p = valid;
  p.upstream = NULL; /* device 0's pool */
  if (!g_fake) REFUSED(call_tenant_create_in(NULL, &p), GPUMEM_ERROR_NO_DRIVER, NULL);
  BAD_HANDLES(kAllocator, call_tenant_create, false);
}

static gpumem_status_t call_tenant_set_limits(void* h) { return gpumem_tenant_set_limits(h, 0, 0); }
static gpumem_status_t call_tenant_get_info(void* h) {
  gpumem_tenant_info_t i;
  memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  return gpumem_tenant_get_info(h, &i);
}
static gpumem_status_t call_tenant_get_info_out(void* ctx, void* out) { return gpumem_tenant_get_info(ctx, out); }

static void bad_tenant_set_limits(void) {
  BAD_HANDLES(kAllocator, call_tenant_set_limits, true);
  REFUSED(call_tenant_set_limits(g_pool), GPUMEM_ERROR_INVALID_HANDLE, "not a tenant");
}

static void bad_tenant_get_info(void) {
  gpumem_tenant_params_t params = GPUMEM_TENANT_PARAMS_INIT;
  params.upstream = g_host;
  gpumem_allocator_t* t = NULL;
  ACCEPTED(gpumem_tenant_create(&params, &t));
  check_out_struct(call_tenant_get_info_out, t, sizeof(gpumem_tenant_info_t), "out_info");
  REFUSED(gpumem_tenant_set_limits(t, 4096, 8192), GPUMEM_ERROR_INVALID_ARGUMENT, "is above limit");
  ACCEPTED(gpumem_allocator_destroy(t));
  BAD_HANDLES(kAllocator, call_tenant_get_info, true);
  REFUSED(call_tenant_get_info(g_host), GPUMEM_ERROR_INVALID_HANDLE, "not a tenant");
}

/* ---- Traces ----------------------------------------------------------------------------------- */

static gpumem_status_t call_trace_start(void* h) {
  char path[300];
  snprintf(path, sizeof path, "%s/refused.trace", g_dir);
  gpumem_trace_t* t = GARBAGE;
  const gpumem_status_t st = gpumem_trace_start(h, path, 0, &t);
  assert_null(t);
  assert_int_equal(access(path, F_OK), -1); /* no file for a refusal */
  return st;
}

static void bad_trace_start(void) {
  char path[300];
  snprintf(path, sizeof path, "%s/refused.trace", g_dir);
  REFUSED(gpumem_trace_start(g_host, path, 0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_trace is NULL");
  gpumem_trace_t* t;
  CREATE_REFUSED(gpumem_trace_start(g_host, NULL, 0, &t), t, GPUMEM_ERROR_INVALID_ARGUMENT, "path is NULL");
  const uint32_t flags[] = {1, 0x80000000u, 0xffffffffu};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i)
    CREATE_REFUSED(gpumem_trace_start(g_host, path, flags[i], &t), t, GPUMEM_ERROR_INVALID_ARGUMENT, "flags");
  assert_int_equal(access(path, F_OK), -1);
  CREATE_REFUSED(gpumem_trace_start(g_traced, path, 0, &t), t, GPUMEM_ERROR_BUSY, "traced already");
  snprintf(path, sizeof path, "%s/no-such-dir/x.trace", g_dir);
  CREATE_REFUSED(gpumem_trace_start(g_host, path, 0, &t), t, GPUMEM_ERROR_IO, path);
  CREATE_REFUSED(gpumem_trace_start(g_host, "", 0, &t), t, GPUMEM_ERROR_IO, NULL);
  BAD_HANDLES(kAllocator, call_trace_start, false);
  if (!g_fake) REFUSED(call_trace_start(NULL), GPUMEM_ERROR_NO_DRIVER, NULL);
}

static gpumem_status_t call_trace_stop(void* h) { return gpumem_trace_stop(h); }

static void bad_trace_stop(void) { BAD_HANDLES(kTrace, call_trace_stop, true); }

static void bad_trace_reader_open(void) {
  REFUSED(gpumem_trace_reader_open(g_trace_path, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_reader is NULL");
  gpumem_trace_reader_t* r;
  CREATE_REFUSED(gpumem_trace_reader_open(NULL, &r), r, GPUMEM_ERROR_INVALID_ARGUMENT, "path is NULL");
  char path[300];
  snprintf(path, sizeof path, "%s/no-such.trace", g_dir);
  CREATE_REFUSED(gpumem_trace_reader_open(path, &r), r, GPUMEM_ERROR_IO, path);
  CREATE_REFUSED(gpumem_trace_reader_open("", &r), r, GPUMEM_ERROR_IO, NULL);
  CREATE_REFUSED(gpumem_trace_reader_open(g_dir, &r), r, GPUMEM_ERROR_IO, NULL); /* a directory */
  /* Files that are no trace: empty, text, a header cut short. */
  const char* const contents[] = {"", "hello, world\n", "GPUMEMTR", "GPUMEMTR\x01\x00\x00\x00\xff\xff\xff\xff"};
  const size_t lengths[] = {0, 13, 8, 16};
  for (size_t i = 0; i < sizeof contents / sizeof contents[0]; ++i) {
    snprintf(path, sizeof path, "%s/bad%zu.trace", g_dir, i);
    FILE* f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(contents[i], 1, lengths[i], f), lengths[i]);
    assert_int_equal(fclose(f), 0);
    CREATE_REFUSED(gpumem_trace_reader_open(path, &r), r, GPUMEM_ERROR_IO, path);
    unlink(path);
  }
}

static gpumem_status_t call_reader_get_header(void* h) {
  gpumem_trace_header_t header;
  GARBLED(header);
  const gpumem_status_t st = gpumem_trace_reader_get_header(h, &header);
  assert_cleared(&header, sizeof header);
  return st;
}
static gpumem_status_t call_reader_get_header_out(void* ctx, void* out) {
  return gpumem_trace_reader_get_header(ctx, out);
}
static gpumem_status_t call_reader_next(void* h) {
  gpumem_trace_record_t record;
  GARBLED(record);
  bool has = true;
  const gpumem_status_t st = gpumem_trace_reader_next(h, &record, &has);
  assert_false(has);
  assert_cleared(&record, sizeof record);
  return st;
}
static gpumem_status_t call_reader_next_out(void* ctx, void* out) {
  bool has = true;
  const gpumem_status_t st = gpumem_trace_reader_next(ctx, out, &has);
  assert_false(has);
  return st;
}
static gpumem_status_t call_reader_close(void* h) { return gpumem_trace_reader_close(h); }

static void bad_trace_reader_get_header(void) {
  check_out_struct(call_reader_get_header_out, g_reader, sizeof(gpumem_trace_header_t), "out_header");
  BAD_HANDLES(kReader, call_reader_get_header, true);
}

static void bad_trace_reader_next(void) {
  gpumem_trace_record_t record;
  GARBLED(record);
  REFUSED(gpumem_trace_reader_next(g_reader, &record, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "out_has_record is NULL");
  check_out_struct(call_reader_next_out, g_reader, offsetof(gpumem_trace_record_t, stack), "out_record");
  BAD_HANDLES(kReader, call_reader_next, true);
}

static void bad_trace_reader_close(void) {
  ACCEPTED(gpumem_trace_reader_close(NULL));
  BAD_HANDLES(kReader, call_reader_close, false);
}

static gpumem_status_t init_trace_params(void* out, size_t size) { return gpumem_trace_params_init(out, size); }
static void bad_trace_params_init(void) { check_init(init_trace_params, sizeof(gpumem_trace_params_t), "params"); }

static gpumem_status_t call_trace_start_with_params_in(void* allocator, const void* in) {
  char path[300];
  snprintf(path, sizeof path, "%s/refused.trace", g_dir);
  gpumem_trace_t* t = GARBAGE;
  const gpumem_status_t st = gpumem_trace_start_with_params(allocator, path, in, &t);
  assert_null(t);
  assert_int_equal(access(path, F_OK), -1); /* no file for a refusal */
  return st;
}
static gpumem_status_t call_trace_start_with_params(void* h) {
  const gpumem_trace_params_t params = GPUMEM_TRACE_PARAMS_INIT;
  return call_trace_start_with_params_in(h, &params);
}

static void bad_trace_start_with_params(void) {
  char path[300];
  snprintf(path, sizeof path, "%s/refused.trace", g_dir);
  gpumem_trace_params_t params = GPUMEM_TRACE_PARAMS_INIT;
  REFUSED(gpumem_trace_start_with_params(g_host, path, &params, NULL), GPUMEM_ERROR_INVALID_ARGUMENT,
          "out_trace is NULL");
  gpumem_trace_t* t;
  CREATE_REFUSED(gpumem_trace_start_with_params(g_host, NULL, &params, &t), t, GPUMEM_ERROR_INVALID_ARGUMENT,
                 "path is NULL");
  check_in_struct(call_trace_start_with_params_in, g_host, &params, sizeof params, sizeof params, "params");
  const uint32_t flags[] = {0x2, 0x80000000u, 0xffffffffu};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i) {
    params.flags = flags[i];
    CREATE_REFUSED(gpumem_trace_start_with_params(g_host, path, &params, &t), t, GPUMEM_ERROR_INVALID_ARGUMENT,
                   "params->flags");
  }
  params.flags = GPUMEM_TRACE_NATIVE_FRAMES;
  const uint32_t frames[] = {0, GPUMEM_TRACE_MAX_FRAMES + 1, UINT32_MAX};
  for (size_t i = 0; i < sizeof frames / sizeof frames[0]; ++i) {
    params.max_frames = frames[i];
    CREATE_REFUSED(gpumem_trace_start_with_params(g_host, path, &params, &t), t, GPUMEM_ERROR_INVALID_ARGUMENT,
                   "params->max_frames");
  }
  params.max_frames = GPUMEM_TRACE_MAX_FRAMES;
  assert_int_equal(access(path, F_OK), -1);
  CREATE_REFUSED(gpumem_trace_start_with_params(g_traced, path, &params, &t), t, GPUMEM_ERROR_BUSY, "traced already");
  snprintf(path, sizeof path, "%s/no-such-dir/x.trace", g_dir);
  CREATE_REFUSED(gpumem_trace_start_with_params(g_host, path, &params, &t), t, GPUMEM_ERROR_IO, path);
  BAD_HANDLES(kAllocator, call_trace_start_with_params, false);
  if (!g_fake) REFUSED(call_trace_start_with_params(NULL), GPUMEM_ERROR_NO_DRIVER, NULL);
}

static gpumem_status_t call_reader_get_frame(void* h) {
  gpumem_trace_frame_t frame;
  GARBLED(frame);
  const gpumem_status_t st = gpumem_trace_reader_get_frame(h, 0, &frame);
  assert_cleared(&frame, sizeof frame);
  return st;
}
static gpumem_status_t call_reader_get_frame_out(void* ctx, void* out) {
  return gpumem_trace_reader_get_frame(ctx, 0, out);
}

static void bad_trace_reader_get_frame(void) {
  check_out_struct(call_reader_get_frame_out, g_reader, sizeof(gpumem_trace_frame_t), "out_frame");
  /* The good trace's records carry no frames: no index is one. */
  const uint32_t indexes[] = {0, 1, UINT32_MAX};
  for (size_t i = 0; i < sizeof indexes / sizeof indexes[0]; ++i) {
    gpumem_trace_frame_t frame;
    GARBLED(frame);
    REFUSED(gpumem_trace_reader_get_frame(g_reader, indexes[i], &frame), GPUMEM_ERROR_INVALID_ARGUMENT,
            "the last record has 0 frames");
    assert_cleared(&frame, sizeof frame);
  }
  BAD_HANDLES(kReader, call_reader_get_frame, true);
}

/* Counts what a summary writes: a refused one writes no text at all. */
static void count_text(const char* text, size_t length, void* user_data) {
  (void)text;
  *(size_t*)user_data += length;
}

/* A refused summary leaves its figures cleared and gives no text. */
static void summarize_refused(const char* path, gpumem_status_t want, const char* text) {
  gpumem_trace_summary_t s;
  GARBLED(s);
  size_t written = 0;
  REFUSED(gpumem_trace_summarize(path, 10, count_text, &written, &s), want, text);
  assert_cleared(&s, sizeof s);
  assert_int_equal(written, 0);
}

static void bad_trace_summarize(void) {
  summarize_refused(NULL, GPUMEM_ERROR_INVALID_ARGUMENT, "path is NULL");
  /* The figures are optional, but a struct given must be one: as check_out_struct() checks, NULL aside. */
  const size_t own = sizeof(gpumem_trace_summary_t);
  const size_t sizes[] = {0, sizeof(size_t), own - 1, 65537, SIZE_MAX};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    unsigned char s[1024];
    memset(s, 0xa5, sizeof s);
    memcpy(s, &sizes[i], sizeof(size_t));
    size_t written = 0;
    REFUSED(gpumem_trace_summarize(g_trace_path, 10, count_text, &written, (gpumem_trace_summary_t*)s),
            GPUMEM_ERROR_INVALID_ARGUMENT, "out_summary->struct_size is");
    assert_int_equal(written, 0);
    const size_t cleared = sizes[i] <= own ? sizes[i] : 0;
    for (size_t b = sizeof(size_t); b < sizeof s; ++b) assert_int_equal(s[b], b < cleared ? 0 : 0xa5);
  }
  char path[300];
  snprintf(path, sizeof path, "%s/no-such.trace", g_dir);
  summarize_refused(path, GPUMEM_ERROR_IO, path);
  summarize_refused("", GPUMEM_ERROR_IO, NULL);
  summarize_refused(g_dir, GPUMEM_ERROR_IO, g_dir); /* a directory */
  /* Neither text nor figures asked for is no refusal: the trace is read and checked all the same. */
  ACCEPTED(gpumem_trace_summarize(g_trace_path, 10, NULL, NULL, NULL));
  size_t written = 0;
  ACCEPTED(gpumem_trace_summarize(g_trace_path, 0, count_text, &written, NULL));
  assert_true(written > strlen(g_trace_path));
}

static void bad_stream_wait(void) {
  ACCEPTED(gpumem_stream_wait(NULL, NULL)); /* one stream: nothing to order, no driver needed */
  ACCEPTED(gpumem_stream_wait(GARBAGE, GARBAGE));
  REFUSED(gpumem_stream_wait(NULL, (gpumem_stream_t)(uintptr_t)2), DRIVER(GPUMEM_ERROR_NOT_SUPPORTED), NULL);
}

/* ---- PyTorch's and CuPy's entry points -------------------------------------------------------- */

static void bad_torch_alloc(void) {
  const ptrdiff_t sizes[] = {-1, PTRDIFF_MIN};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    void* p = GARBAGE;
    REFUSED_SILENTLY(p = gpumem_torch_alloc(sizes[i], 0, NULL), "size is");
    assert_null(p);
  }
  void* p = GARBAGE;
  REFUSED_SILENTLY(p = gpumem_torch_alloc(64, -1, NULL), "device is -1");
  assert_null(p);
  p = GARBAGE;
  REFUSED_SILENTLY(p = gpumem_torch_alloc(64, 1000, NULL), NULL);
  assert_null(p);
  p = GARBAGE;
  REFUSED_SILENTLY(p = gpumem_torch_alloc(PTRDIFF_MAX, 0, NULL), NULL);
  assert_null(p);
}

/* With no PyTorch in the process there is no exception to throw: the NULL and the detail remain. */
static void bad_torch_alloc_raising(void) {
  void* p = GARBAGE;
  REFUSED_SILENTLY(p = gpumem_torch_alloc_raising(-1, 0, NULL), "size is -1");
  assert_null(p);
  p = GARBAGE;
  REFUSED_SILENTLY(p = gpumem_torch_alloc_raising(64, -1, NULL), "device is -1");
  assert_null(p);
}

static void bad_torch_free(void) {
  static char bytes[64];
  mark();
  gpumem_torch_free(NULL, 0, -1, NULL); /* nothing to free: nothing checked, nothing said */
  assert_string_equal(gpumem_last_error_detail(), g_marker);
  REFUSED_SILENTLY(gpumem_torch_free(bytes, 64, -1, NULL), "device is -1");
  REFUSED_SILENTLY(gpumem_torch_free(bytes, 64, 1000, NULL), NULL);
  REFUSED_SILENTLY(gpumem_torch_free(bytes, 64, 0, NULL), NULL); /* not the default's */
}

static gpumem_status_t call_torch_set_allocator(void* h) { return gpumem_torch_set_allocator(0, h); }
static void bad_torch_set_allocator(void) {
  REFUSED(gpumem_torch_set_allocator(-1, NULL), GPUMEM_ERROR_INVALID_ARGUMENT, "device is -1");
  REFUSED(gpumem_torch_set_allocator(64, g_host), GPUMEM_ERROR_INVALID_ARGUMENT, "device is 64");
  BAD_HANDLES(kAllocator, call_torch_set_allocator, false);
  ACCEPTED(gpumem_torch_set_allocator(0, g_host)); /* kept busy while set */
  REFUSED(gpumem_allocator_destroy(g_host), GPUMEM_ERROR_BUSY, NULL);
  ACCEPTED(gpumem_torch_set_allocator(0, NULL));
}

static void bad_torch_record_stream(void) {
  static char bytes[64];
  REFUSED_SILENTLY(gpumem_torch_record_stream(NULL, NULL), "ptr is NULL");
  REFUSED_SILENTLY(gpumem_torch_record_stream(bytes, NULL), NULL); /* no driver, or not torch's memory */
}

static gpumem_cupy_target_t g_target; /* for the handle checks */
static gpumem_status_t call_cupy_alloc(void* h) {
  g_target.struct_size = sizeof g_target;
  g_target.allocator = h;
  mark();
  const void* p = gpumem_cupy_alloc(&g_target, 64, 0);
  assert_null(p);
  return strstr(gpumem_last_error_detail(), "is not a live gpumem allocator") ? GPUMEM_ERROR_INVALID_HANDLE
                                                                              : GPUMEM_ERROR_INTERNAL;
}
static gpumem_status_t call_cupy_free(void* h) {
  static char bytes[64];
  g_target.struct_size = sizeof g_target;
  g_target.allocator = h;
  mark();
  gpumem_cupy_free(&g_target, bytes, 0);
  return strstr(gpumem_last_error_detail(), "is not a live gpumem allocator") ? GPUMEM_ERROR_INVALID_HANDLE
                                                                              : GPUMEM_ERROR_INTERNAL;
}

static void check_cupy_target(bool alloc) {
  static char bytes[64];
  gpumem_cupy_target_t t = {sizeof t, NULL, NULL};
  t.allocator = g_host;
  unsigned char buf[256];
  const size_t sizes[] = {0, sizeof t - 1, 65537, SIZE_MAX};
  void* p = GARBAGE;
  if (alloc) {
    REFUSED_SILENTLY(p = gpumem_cupy_alloc(NULL, 64, 0), "target is NULL");
    assert_null(p);
    p = GARBAGE;
    REFUSED_SILENTLY(p = gpumem_cupy_alloc(&t, 0, 0), "size is 0");
    assert_null(p);
  } else {
    REFUSED_SILENTLY(gpumem_cupy_free(NULL, bytes, 0), "target is NULL");
    REFUSED_SILENTLY(gpumem_cupy_free(&t, bytes, 0), NULL); /* not the allocator's */
  }
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    memset(buf, 0, sizeof buf);
    memcpy(buf, &t, sizeof t);
    memcpy(buf, &sizes[i], sizeof(size_t));
    if (alloc) {
      p = GARBAGE;
      REFUSED_SILENTLY(p = gpumem_cupy_alloc(buf, 64, 0), "target->struct_size is");
      assert_null(p);
    } else {
      REFUSED_SILENTLY(gpumem_cupy_free(buf, bytes, 0), "target->struct_size is");
    }
  }
  t.allocator = NULL; /* the device's default */
  if (alloc) {
    p = GARBAGE;
    REFUSED_SILENTLY(p = gpumem_cupy_alloc(&t, 64, -1), "device is -1");
    assert_null(p);
  } else {
    REFUSED_SILENTLY(gpumem_cupy_free(&t, bytes, -1), "device is -1");
  }
}

static void bad_cupy_alloc(void) {
  check_cupy_target(true);
  BAD_HANDLES(kAllocator, call_cupy_alloc, false);
}

static void bad_cupy_free(void) {
  check_cupy_target(false);
  mark();
  gpumem_cupy_free(NULL, NULL, 0); /* nothing to free, but a target to check */
  check_fresh_detail("gpumem_cupy_free(NULL, NULL, 0)", "target is NULL", __FILE__, __LINE__);
  BAD_HANDLES(kAllocator, call_cupy_free, false);
}

/* ---- The table: one entry per exported function ----------------------------------------------- */

typedef struct entry {
  const char* name;
  void (*check)(void);
} entry_t;

#define ENTRY(fn) \
  { "gpumem_" #fn, bad_##fn }
static const entry_t kTable[] = {
    ENTRY(alloc),
    ENTRY(allocator_add_hook),
    ENTRY(allocator_create_cuda_pool),
    ENTRY(allocator_create_device),
    ENTRY(allocator_create_device_async),
    ENTRY(allocator_create_functions),
    ENTRY(allocator_create_host),
    ENTRY(allocator_create_managed),
    ENTRY(allocator_create_pinned),
    ENTRY(allocator_create_vm),
    ENTRY(allocator_destroy),
    ENTRY(allocator_destroy_force),
    ENTRY(allocator_get_default),
    ENTRY(allocator_get_device),
    ENTRY(allocator_get_stats),
    ENTRY(allocator_get_thread),
    ENTRY(allocator_remove_hook),
    ENTRY(allocator_reset_peaks),
    ENTRY(allocator_set_default),
    ENTRY(allocator_set_peer_access),
    ENTRY(allocator_set_thread),
    ENTRY(array_create),
    ENTRY(array_desc_init),
    ENTRY(array_destroy),
    ENTRY(array_get_desc),
    ENTRY(copy),
    ENTRY(copy2d),
    ENTRY(copy2d_async),
    ENTRY(copy2d_init),
    ENTRY(copy3d),
    ENTRY(copy3d_async),
    ENTRY(copy3d_init),
    ENTRY(copy_async),
    ENTRY(copy_staging_get_held),
    ENTRY(copy_staging_release),
    ENTRY(cuda_pool_get),
    ENTRY(cuda_pool_get_info),
    ENTRY(cuda_pool_params_init),
    ENTRY(cuda_pool_reset_peaks),
    ENTRY(cuda_pool_set_release_threshold),
    ENTRY(cuda_pool_trim),
    ENTRY(cupy_alloc),
    ENTRY(cupy_free),
    ENTRY(device_alloc),
    ENTRY(device_alloc_async),
    ENTRY(device_alloc_from_pool),
    ENTRY(device_free),
    ENTRY(device_free_async),
    ENTRY(device_get_count),
    ENTRY(device_get_info),
    ENTRY(device_query_memory),
    ENTRY(driver_get_version),
    ENTRY(free),
    ENTRY(host_alloc),
    ENTRY(host_free),
    ENTRY(host_get_device_pointer),
    ENTRY(host_register),
    ENTRY(host_unregister),
    ENTRY(ipc_close),
    ENTRY(ipc_collect),
    ENTRY(ipc_export),
    ENTRY(ipc_export_fds),
    ENTRY(ipc_get_info),
    ENTRY(ipc_open),
    ENTRY(ipc_receive),
    ENTRY(ipc_send),
    ENTRY(last_cuda_result),
    ENTRY(last_error_detail),
    ENTRY(last_out_of_memory),
    ENTRY(managed_advise),
    ENTRY(managed_alloc),
    ENTRY(managed_free),
    ENTRY(managed_get_range_info),
    ENTRY(managed_prefetch),
    ENTRY(memset),
    ENTRY(memset_async),
    ENTRY(pin),
    ENTRY(pin_cache_flush),
    ENTRY(pin_cache_set_budget),
    ENTRY(pin_forget),
    ENTRY(pin_get_stats),
    ENTRY(pin_query),
    ENTRY(pointer_get_info),
    ENTRY(pool_create),
    ENTRY(pool_get_device),
    ENTRY(pool_get_growth_info),
    ENTRY(pool_get_info),
    ENTRY(pool_params_init),
    ENTRY(pool_record_stream),
    ENTRY(pool_release),
    ENTRY(pool_set_device_config),
    ENTRY(pool_set_limit),
    ENTRY(pool_set_limit_fraction),
    ENTRY(pool_set_page_reclaim),
    ENTRY(pool_set_soft_limit),
    ENTRY(pool_set_stream_reuse),
    ENTRY(pool_snapshot),
    ENTRY(pool_snapshot_json),
    ENTRY(reclaim_add),
    ENTRY(reclaim_remove),
    ENTRY(shutdown),
    ENTRY(status_name),
    ENTRY(status_string),
    ENTRY(stream_wait),
    ENTRY(tenant_create),
    ENTRY(tenant_get_info),
    ENTRY(tenant_params_init),
    ENTRY(tenant_set_limits),
    ENTRY(torch_alloc),
    ENTRY(torch_alloc_raising),
    ENTRY(torch_free),
    ENTRY(torch_record_stream),
    ENTRY(torch_set_allocator),
    ENTRY(trace_params_init),
    ENTRY(trace_reader_close),
    ENTRY(trace_reader_get_frame),
    ENTRY(trace_reader_get_header),
    ENTRY(trace_reader_next),
    ENTRY(trace_reader_open),
    ENTRY(trace_start),
    ENTRY(trace_start_with_params),
    ENTRY(trace_stop),
    ENTRY(trace_summarize),
    ENTRY(unpin),
    ENTRY(version_number),
    ENTRY(version_string),
    ENTRY(vm_get_info),
    ENTRY(vm_params_init),
};
#define TABLE_SIZE (sizeof kTable / sizeof kTable[0])

static const entry_t* find_entry(const char* name) {
  for (size_t i = 0; i < TABLE_SIZE; ++i)
    if (strcmp(kTable[i].name, name) == 0) return &kTable[i];
  return NULL;
}

/* The names lib/gpumem.map exports: every `gpumem_...;` outside comments. */
static size_t exported_names(char names[][64], size_t max) {
  FILE* f = fopen(GPUMEM_MAP_PATH, "rb");
  assert_non_null(f);
  static char text[1 << 16];
  const size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  assert_true(n > 0 && n < sizeof text - 1);
  text[n] = '\0';
  for (char* c = strstr(text, "/*"); c; c = strstr(c, "/*")) { /* comments become spaces */
    char* end = strstr(c + 2, "*/");
    assert_non_null(end);
    memset(c, ' ', (size_t)(end + 2 - c));
  }
  size_t count = 0;
  for (char* c = strstr(text, "gpumem_"); c; c = strstr(c + 1, "gpumem_")) {
    size_t len = 0;
    while ((c[len] >= 'a' && c[len] <= 'z') || (c[len] >= '0' && c[len] <= '9') || c[len] == '_') ++len;
    size_t after = len;
    while (c[after] == ' ' || c[after] == '\t') ++after;
    if (c[after] != ';' || len >= 64) continue;
    assert_true(count < max);
    memcpy(names[count], c, len);
    names[count][len] = '\0';
    ++count;
    c += len - 1;
  }
  return count;
}

/* Every export has an entry, every entry an export, once; each entry names a function the
 * library exports. */
static void test_bad_input_table_covers_every_export(void** state) {
  (void)state;
  static char names[256][64];
  const size_t n = exported_names(names, 256);
  assert_true(n >= 100);
  bool missing = false;
  for (size_t i = 0; i < n; ++i)
    if (!find_entry(names[i])) {
      print_error("%s is exported by lib/gpumem.map but has no bad-input entry in %s\n", names[i], __FILE__);
      missing = true;
    }
  for (size_t i = 0; i < TABLE_SIZE; ++i) {
    bool exported = false;
    for (size_t j = 0; j < n; ++j) exported = exported || strcmp(names[j], kTable[i].name) == 0;
    if (!exported) {
      print_error("the bad-input entry %s names no export of lib/gpumem.map\n", kTable[i].name);
      missing = true;
    }
    for (size_t j = 0; j < i; ++j)
      if (strcmp(kTable[j].name, kTable[i].name) == 0) {
        print_error("the bad-input entry %s is there twice\n", kTable[i].name);
        missing = true;
      }
    if (!dlsym(RTLD_DEFAULT, kTable[i].name)) {
      print_error("%s is not in the loaded library's symbols\n", kTable[i].name);
      missing = true;
    }
  }
  assert_false(missing);
  assert_int_equal(n, TABLE_SIZE);
}

static void run_entry(void** state) {
  const entry_t* e = *state;
  e->check();
  /* Nothing the refusals did changed the handles the entries share. */
  assert_int_equal(stats_of(g_host).bytes_in_use, 0);
  assert_int_equal(pool_info_of(g_pool).used_bytes, 0);
  gpumem_allocator_t* now = GARBAGE;
  assert_ok(gpumem_allocator_get_thread(&now));
  assert_null(now);
}

/* ---- The handles every entry shares ----------------------------------------------------------- */

static int setup(void** state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "%s/gpumem-bad-input-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(g_dir)) return -1;
  snprintf(g_trace_path, sizeof g_trace_path, "%s/good.trace", g_dir);
  if (gpumem_allocator_create_host(0, &g_host) || gpumem_allocator_create_host(0, &g_dead) ||
      gpumem_allocator_create_host(0, &g_traced) || gpumem_allocator_destroy(g_dead))
    return -1;
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = g_host;
  if (gpumem_pool_create(&params, &g_pool)) return -1;
  /* A complete trace file, a stopped recording, and a recording left running. */
  if (gpumem_trace_start(g_traced, g_trace_path, 0, &g_stopped)) return -1;
  void* p = NULL;
  if (gpumem_alloc(g_traced, 64, NULL, &p) || gpumem_free(g_traced, p, NULL) || gpumem_trace_stop(g_stopped)) return -1;
  char path[300];
  snprintf(path, sizeof path, "%s/running.trace", g_dir);
  if (gpumem_trace_start(g_traced, path, 0, &g_trace)) return -1;
  if (gpumem_trace_reader_open(g_trace_path, &g_closed) || gpumem_trace_reader_close(g_closed)) return -1;
  if (gpumem_trace_reader_open(g_trace_path, &g_reader)) return -1;
  memset(g_static_words, 0, sizeof g_static_words);
  return 0;
}

static int teardown(void** state) {
  (void)state;
  char path[300];
  int failed = gpumem_trace_reader_close(g_reader) || gpumem_trace_stop(g_trace) || gpumem_allocator_destroy(g_pool) ||
               gpumem_allocator_destroy(g_host) || gpumem_allocator_destroy(g_traced);
  snprintf(path, sizeof path, "%s/running.trace", g_dir);
  unlink(path);
  unlink(g_trace_path);
  failed |= rmdir(g_dir); /* empty: no refusal left a file */
  return failed ? -1 : 0;
}

int main(int argc, char** argv) {
  if (argc != 2 || (strcmp(argv[1], "no-driver") != 0 && strcmp(argv[1], "fake") != 0)) {
    fprintf(stderr, "usage: %s no-driver|fake\n", argv[0]);
    return 2;
  }
  g_fake = strcmp(argv[1], "fake") == 0;
  struct CMUnitTest tests[TABLE_SIZE + 1];
  tests[0] =
      (struct CMUnitTest){"table_covers_every_export", test_bad_input_table_covers_every_export, NULL, NULL, NULL};
  for (size_t i = 0; i < TABLE_SIZE; ++i)
    tests[i + 1] = (struct CMUnitTest){kTable[i].name, run_entry, NULL, NULL, (void*)&kTable[i]};
  return _cmocka_run_group_tests(g_fake ? "bad_input_fake_driver" : "bad_input_no_driver", tests, TABLE_SIZE + 1, setup,
                                 teardown);
}
