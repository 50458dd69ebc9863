/* VM allocators (CUDA's virtual memory management): the checks of their parameters and handles (no
 * GPU needed), then, on a GPU, the defaults as resolved (a 32 MiB map unit, or the granularity if
 * larger), direct allocations rounded to the granularity and mapped as one physical allocation, a
 * pool over the allocator growing in place by whole units (copies and memsets across the units'
 * mappings), giving memory back and growing again, out of memory at the end of a range and at the
 * end of the device, and peer access for memory mapped before and after it is set. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "test_bytes.h"
#include "test_cuda.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define DEFAULT_UNIT (32 * MiB) /* the map unit of map_unit 0, unless the granularity is larger */

/* What cuda.h declares and the tests do not include: the properties of a physical allocation and
 * the values used here. */
typedef struct test_mem_location {
  int type; /* CUmemLocationType */
  int id;
} test_mem_location_t;
typedef struct test_mem_allocation_prop {
  int type;                   /* CUmemAllocationType */
  int requested_handle_types; /* CUmemAllocationHandleType */
  test_mem_location_t location;
  void* win32_handle_meta_data;
  struct {
    unsigned char compression_type;
    unsigned char gpu_direct_rdma_capable;
    unsigned short usage;
    unsigned char reserved[4];
  } alloc_flags;
} test_mem_allocation_prop_t;
enum {
  TEST_MEM_ALLOCATION_TYPE_PINNED = 1, /* CU_MEM_ALLOCATION_TYPE_PINNED */
  TEST_MEM_LOCATION_TYPE_DEVICE = 1,   /* CU_MEM_LOCATION_TYPE_DEVICE */
  TEST_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
  TEST_MEM_ACCESS_NONE = 0,      /* CU_MEM_ACCESS_FLAGS_PROT_NONE */
  TEST_MEM_ACCESS_READ_WRITE = 3 /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
};
typedef int (*test_cu_fn_granularity)(size_t* granularity, const test_mem_allocation_prop_t* prop, int option);
typedef int (*test_cu_fn_get_access)(unsigned long long* flags, const test_mem_location_t* location,
                                     unsigned long long ptr);
typedef int (*test_cu_fn_can_access_peer)(int* can, int device, int peer);
typedef int (*test_cu_fn_mem_get_info)(size_t* free, size_t* total);

/* ---- Helpers ---- */

static gpumem_vm_params_t params_of(int32_t device, uint64_t range_size, uint64_t map_unit) {
  gpumem_vm_params_t params = GPUMEM_VM_PARAMS_INIT;
  params.device = device;
  params.range_size = range_size;
  params.map_unit = map_unit;
  return params;
}

static gpumem_allocator_t* create_with(const gpumem_vm_params_t* params) {
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_vm(params, &a));
  assert_non_null(a);
  return a;
}

static gpumem_allocator_t* create_default(void) {
  const gpumem_vm_params_t params = GPUMEM_VM_PARAMS_INIT;
  return create_with(&params);
}

/* Creation refused with the status and a detail naming the problem, leaving the output NULL. */
static void assert_create_refused(const gpumem_vm_params_t* params, gpumem_status_t status, const char* detail) {
  gpumem_allocator_t* a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_create_vm(params, &a), status);
  assert_detail_contains(detail);
  assert_null(a);
}

static gpumem_vm_info_t info_of(gpumem_allocator_t* a) {
  gpumem_vm_info_t info;
  memset(&info, 0xab, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_vm_get_info(a, &info));
  assert_int_equal(info.struct_size, sizeof info);
  return info;
}

static size_t round_up(size_t n, size_t unit) { return (n + unit - 1) / unit * unit; }

/* The map unit of map_unit 0 on a device of that granularity. */
static size_t default_unit(size_t granularity) { return granularity > DEFAULT_UNIT ? granularity : DEFAULT_UNIT; }

/* The device's minimum granularity for pinned device memory, as the driver says. */
static size_t granularity_of(int device) {
  test_mem_allocation_prop_t prop;
  memset(&prop, 0, sizeof prop);
  prop.type = TEST_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = TEST_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granularity = 0;
  test_cu_push(device);
  assert_int_equal(((test_cu_fn_granularity)test_cu_symbol("cuMemGetAllocationGranularity"))(
                       &granularity, &prop, TEST_MEM_ALLOC_GRANULARITY_MINIMUM),
                   0);
  test_cu_pop();
  return granularity;
}

/* What `device` may do with the mapping that holds p (cuMemGetAccess). */
static unsigned long long access_of(const void* p, int device) {
  const test_mem_location_t location = {TEST_MEM_LOCATION_TYPE_DEVICE, device};
  unsigned long long flags = 99;
  assert_int_equal(
      ((test_cu_fn_get_access)test_cu_symbol("cuMemGetAccess"))(&flags, &location, (unsigned long long)(uintptr_t)p),
      0);
  return flags;
}

/* n bytes of the pattern of a seed, in host memory the caller frees. */
static unsigned char* pattern_of(size_t n, unsigned seed) {
  unsigned char* bytes = checked_malloc(n);
  fill_pattern(bytes, n, seed);
  return bytes;
}

static void write_pattern(void* p, size_t n, unsigned seed) {
  unsigned char* bytes = pattern_of(n, seed);
  assert_ok(gpumem_copy(p, bytes, n));
  free(bytes);
}

static void expect_pattern(const void* p, size_t n, unsigned seed, const char* what) {
  unsigned char* want = pattern_of(n, seed);
  unsigned char* got = checked_malloc(n);
  memset(got, ~want[0], n);
  assert_ok(gpumem_copy(got, p, n));
  expect_bytes(got, want, n, what);
  free(got);
  free(want);
}

/* ---- Without a GPU ---- */

static void test_vm_params_init(void** state) {
  (void)state;
  gpumem_vm_params_t params;
  memset(&params, 0xab, sizeof params);
  assert_ok(gpumem_vm_params_init(&params, sizeof params));
  assert_int_equal(params.struct_size, sizeof params);
  assert_int_equal(params.device, 0);
  assert_int_equal(params.range_size, 0);
  assert_int_equal(params.map_unit, 0);

  assert_status(gpumem_vm_params_init(NULL, sizeof params), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("params is NULL");
  assert_status(gpumem_vm_params_init(&params, sizeof params - 1), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("sizeof(gpumem_vm_params_t)");
}

static void test_vm_create_bad_input(void** state) {
  (void)state;
  gpumem_vm_params_t params = params_of(0, 0, 0);
  assert_status(gpumem_allocator_create_vm(&params, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_allocator is NULL");
  assert_create_refused(NULL, GPUMEM_ERROR_INVALID_ARGUMENT, "params is NULL");

  params.struct_size = sizeof params - 1;
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "params->struct_size is");
  params.struct_size = 1 << 20;
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "more than any gpumem struct");

  params = params_of(-1, 0, 0);
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_DEVICE, "params->device is -1");

  /* Refused before the driver is asked anything. */
  params = params_of(0, 0, 3 * MiB);
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT,
                        "params->map_unit is 3,145,728 bytes, which is not a power of two");
}

static void test_vm_get_info_bad_input(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_allocator_t* pool = pool_over(host);

  gpumem_vm_info_t info;
  memset(&info, 0xab, sizeof info);
  info.struct_size = sizeof info;
  assert_status(gpumem_vm_get_info(NULL, &info), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a live gpumem allocator");
  assert_status(gpumem_vm_get_info(host, &info), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("is a host allocator, not a VM allocator");
  assert_int_equal(info.struct_size, sizeof info);
  assert_int_equal(info.map_unit, 0); /* cleared on failure */
  assert_int_equal(info.mapped_bytes, 0);
  assert_status(gpumem_vm_get_info(pool, &info), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("is a pool allocator, not a VM allocator");
  assert_detail_contains("pass its upstream");

  assert_status(gpumem_vm_get_info(host, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_info is NULL");
  info.struct_size = 8;
  assert_status(gpumem_vm_get_info(host, &info), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("struct_size is 8");

  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(host));
}

/* ---- On a GPU ---- */

static void test_vm_create_resolves_defaults(void** state) {
  (void)state;
  require_gpu();
  const size_t granularity = granularity_of(0);
  gpumem_device_info_t device;
  memset(&device, 0, sizeof device);
  device.struct_size = sizeof device;
  assert_ok(gpumem_device_get_info(0, &device));

  gpumem_allocator_t* a = create_default();
  gpumem_vm_info_t info = info_of(a);
  assert_int_equal(info.map_unit, default_unit(granularity));
  assert_true(info.range_size >= device.total_memory);
  assert_int_equal(info.range_size % info.map_unit, 0);
  assert_true(info.range_size - device.total_memory < info.map_unit);
  assert_int_equal(info.reserved_bytes, 0);
  assert_int_equal(info.mapped_bytes, 0);
  int32_t dev = -1;
  assert_ok(gpumem_allocator_get_device(a, &dev));
  assert_int_equal(dev, 0);
  /* A direct allocation of one byte reserves and maps one granule, whatever the map unit. */
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 1, NULL, &p));
  info = info_of(a);
  assert_int_equal(info.reserved_bytes, granularity);
  assert_int_equal(info.mapped_bytes, granularity);
  assert_ok(gpumem_free(a, p, NULL));
  assert_ok(gpumem_allocator_destroy(a));

  /* Given values are kept; the granularity is the finest unit. */
  gpumem_vm_params_t params = params_of(0, 64 * granularity, 4 * granularity);
  a = create_with(&params);
  info = info_of(a);
  assert_int_equal(info.map_unit, 4 * granularity);
  assert_int_equal(info.range_size, 64 * granularity);
  assert_ok(gpumem_allocator_destroy(a));
  params = params_of(0, 0, granularity);
  a = create_with(&params);
  info = info_of(a);
  assert_int_equal(info.map_unit, granularity);
  assert_true(info.range_size >= device.total_memory);
  assert_true(info.range_size - device.total_memory < granularity);
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_vm_create_bad_values(void** state) {
  (void)state;
  require_gpu();
  const size_t granularity = granularity_of(0);
  gpumem_vm_params_t params = params_of(gpu_count(), 0, 0);
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_DEVICE, "does not exist");

  params = params_of(0, 0, granularity / 2);
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "not a multiple of device 0's allocation granularity");

  params = params_of(0, 0, granularity * 3);
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "which is not a power of two");

  params = params_of(0, granularity * 8 + 4096, 0);
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "not a multiple of the map unit");
  params = params_of(0, granularity, granularity * 2);
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "params->range_size is");
  /* With the default unit a range must be whole units of it, not only whole granules. */
  if (default_unit(granularity) > granularity) {
    params = params_of(0, default_unit(granularity) + granularity, 0);
    assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "not a multiple of the map unit (33,554,432 bytes)");
  }
}

static void test_vm_direct_allocation_one_physical_allocation(void** state) {
  (void)state;
  require_gpu();
  const size_t granularity = granularity_of(0);
  gpumem_allocator_t* a = create_default();
  /* Rounded to the granularity, not to the map unit, and mapped whole. */
  const size_t n = 8 * MiB + 1;
  const size_t mapped = round_up(n, granularity);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, n, NULL, &p));
  assert_non_null(p);
  assert_int_equal((uintptr_t)p % granularity, 0);
  gpumem_vm_info_t info = info_of(a);
  assert_int_equal(info.reserved_bytes, mapped);
  assert_int_equal(info.mapped_bytes, mapped);
  const gpumem_allocator_stats_t stats = stats_of(a);
  assert_int_equal(stats.bytes_in_use, n);
  assert_int_equal(stats.bytes_reserved, n);
  /* One mapping from the first byte to the last, so one physical allocation. */
  assert_pointer_range((char*)p + mapped - 1, p, mapped);

  write_pattern(p, n, 7);
  expect_pattern(p, n, 7, "the bytes read back");
  assert_ok(gpumem_memset(p, 0x5a, 1, n));
  unsigned char* back = checked_malloc(n);
  unsigned char* want = checked_malloc(n);
  memset(want, 0x5a, n);
  assert_ok(gpumem_copy(back, p, n));
  expect_bytes(back, want, n, "the bytes after the memset");
  /* All that is mapped may be written; a byte more may not. */
  assert_ok(gpumem_memset(p, 0, 1, mapped));
  assert_status(gpumem_memset(p, 0, 1, mapped + 1), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("runs 1 byte past the end of its allocation");
  free(back);
  free(want);

  assert_ok(gpumem_free(a, p, NULL));
  info = info_of(a);
  assert_int_equal(info.reserved_bytes, 0);
  assert_int_equal(info.mapped_bytes, 0);
  assert_int_equal(stats_of(a).bytes_reserved, 0);

  /* 3 MiB + 1: 4 MiB on a device of 2 MiB granules, where a pool would map a whole unit. */
  const size_t small = 3 * MiB + 1;
  assert_ok(gpumem_alloc(a, small, NULL, &p));
  info = info_of(a);
  assert_int_equal(info.mapped_bytes, round_up(small, granularity));
  if (granularity == 2 * MiB) assert_int_equal(info.mapped_bytes, 4 * MiB);
  assert_pointer_range(p, p, round_up(small, granularity));
  write_pattern(p, small, 8);
  expect_pattern(p, small, 8, "the bytes of 3 MiB + 1");
  assert_ok(gpumem_free(a, p, NULL));
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_vm_pool_grows_in_place_and_gives_back(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* vm = create_default();
  const size_t unit = info_of(vm).map_unit;
  assert_int_equal(unit, default_unit(granularity_of(0)));
  gpumem_allocator_t* pool = pool_over(vm);

  void* first = NULL;
  assert_ok(gpumem_alloc(pool, 3 * MiB, NULL, &first));
  /* A whole unit for 3 MiB. */
  assert_int_equal(pool_info_of(pool).total_bytes, unit);
  write_pattern(first, 3 * MiB, 1);
  /* Growth across many units; the blocks that span units are written and read whole. */
  enum { MORE = 6 };
  void* more[MORE];
  for (unsigned i = 0; i < MORE; i++) {
    const size_t n = (2 + i) * unit + 512 * i;
    assert_ok(gpumem_alloc(pool, n, NULL, &more[i]));
    write_pattern(more[i], n, 10 + i);
  }
  expect_pattern(first, 3 * MiB, 1, "the first block after the pool grew");
  for (unsigned i = 0; i < MORE; i++) expect_pattern(more[i], (2 + i) * unit + 512 * i, 10 + i, "a later block");

  gpumem_pool_info_t grown = pool_info_of(pool);
  gpumem_vm_info_t vm_info = info_of(vm);
  /* The pool holds what is mapped, and spans what is reserved. */
  assert_int_equal(grown.total_bytes, vm_info.mapped_bytes);
  assert_int_equal(grown.address_bytes, vm_info.reserved_bytes);
  assert_true(grown.total_bytes >= 3 * MiB + 27 * unit);
  assert_int_equal(grown.total_bytes % unit, 0);
  assert_true(grown.address_bytes >= grown.total_bytes);
  /* The last byte of the last block is device memory of device 0, inside a range the driver
   * reports (which, for memory mapped in pieces, may be one piece or more: the copies above ran
   * over whole blocks either way). */
  const char* last = (const char*)more[MORE - 1] + (2 + MORE - 1) * unit + 512 * (MORE - 1) - 1;
  gpumem_pointer_info_t at_last;
  memset(&at_last, 0, sizeof at_last);
  at_last.struct_size = sizeof at_last;
  assert_ok(gpumem_pointer_get_info(last, &at_last));
  assert_int_equal(at_last.memory_type, GPUMEM_MEMORY_DEVICE);
  assert_int_equal(at_last.device, 0);
  assert_true((const char*)at_last.base <= last && last < (const char*)at_last.base + at_last.size);

  assert_ok(gpumem_free(pool, first, NULL));
  for (unsigned i = 0; i < MORE; i++) assert_ok(gpumem_free(pool, more[i], NULL));
  assert_ok(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  const gpumem_pool_info_t released = pool_info_of(pool);
  vm_info = info_of(vm);
  assert_true(released.total_bytes < grown.total_bytes);
  assert_int_equal(released.total_bytes % unit, 0);
  assert_int_equal(released.total_bytes, vm_info.mapped_bytes);
  assert_int_equal(released.address_bytes, vm_info.reserved_bytes);

  /* Mapped again as it grows. */
  void* again = NULL;
  assert_ok(gpumem_alloc(pool, 5 * unit + 1, NULL, &again));
  write_pattern(again, 5 * unit + 1, 30);
  expect_pattern(again, 5 * unit + 1, 30, "a block after the pool grew again");
  assert_true(pool_info_of(pool).total_bytes >= 5 * unit + 512);
  assert_int_equal(pool_info_of(pool).total_bytes % unit, 0);
  assert_int_equal(pool_info_of(pool).total_bytes, info_of(vm).mapped_bytes);
  assert_ok(gpumem_free(pool, again, NULL));

  assert_ok(gpumem_allocator_destroy(pool));
  vm_info = info_of(vm);
  assert_int_equal(vm_info.mapped_bytes, 0);
  assert_int_equal(vm_info.reserved_bytes, 0);
  assert_ok(gpumem_allocator_destroy(vm));
}

static void test_vm_pool_request_beyond_range_size(void** state) {
  (void)state;
  require_gpu();
  /* Units of the granularity: a 64 MiB range is whole units of it, whatever the default unit. */
  const size_t granularity = granularity_of(0);
  if ((64 * MiB) % granularity != 0) skip();
  const gpumem_vm_params_t params = params_of(0, 64 * MiB, granularity);
  gpumem_allocator_t* vm = create_with(&params);
  assert_int_equal(info_of(vm).range_size, 64 * MiB);
  assert_int_equal(info_of(vm).map_unit, granularity);
  gpumem_allocator_t* pool = pool_over(vm);
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(pool, 65 * MiB, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("range_size 67,108,864 bytes");
  assert_int_equal(stats_of(pool).oom_count, 1);
  /* A request that fits the range is served. */
  assert_ok(gpumem_alloc(pool, 32 * MiB, NULL, &p));
  write_pattern(p, 32 * MiB, 4);
  expect_pattern(p, 32 * MiB, 4, "a block of a 64 MiB range");
  assert_int_equal(pool_info_of(pool).total_bytes, round_up(32 * MiB, granularity));
  assert_ok(gpumem_free(pool, p, NULL));
  assert_ok(gpumem_allocator_destroy(pool));

  /* Direct allocations are not bounded by the range size. */
  assert_ok(gpumem_alloc(vm, 65 * MiB, NULL, &p));
  assert_int_equal(info_of(vm).mapped_bytes, round_up(65 * MiB, granularity));
  assert_ok(gpumem_free(vm, p, NULL));
  assert_ok(gpumem_allocator_destroy(vm));
}

/* The device's free memory now, as the driver says (cuMemGetInfo). */
static size_t free_memory_of(int device) {
  size_t free = 0, total = 0;
  test_cu_push(device);
  assert_int_equal(((test_cu_fn_mem_get_info)test_cu_symbol("cuMemGetInfo_v2"))(&free, &total), 0);
  test_cu_pop();
  return free;
}

static void test_vm_out_of_device_memory(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* a = create_default();
  const size_t unit = info_of(a).map_unit;
  /* Direct allocations of 16 GiB, each one physical allocation, until the device has no room for
   * one more. */
  enum { MOST = 64 };
  void* held[MOST];
  unsigned count = 0;
  gpumem_status_t st = GPUMEM_SUCCESS;
  while (count < MOST) {
    void* p = (void*)0x1;
    st = gpumem_alloc(a, 16 * GiB, NULL, &p);
    if (st != GPUMEM_SUCCESS) {
      assert_null(p);
      break;
    }
    held[count++] = p;
  }
  assert_status(st, GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_detail_contains("out of memory mapping 17,179,869,184 bytes on device 0");
  assert_detail_contains("bytes free (cuMemCreate, in units of 17,179,869,184 bytes)");
  /* The failed allocation left nothing behind. */
  gpumem_vm_info_t info = info_of(a);
  assert_int_equal(info.mapped_bytes, (uint64_t)count * 16 * GiB);
  assert_int_equal(info.reserved_bytes, (uint64_t)count * 16 * GiB);
  assert_int_equal(stats_of(a).oom_count, 1);

  /* A pool over it asking for more than is free maps units until the device runs out, and unmaps
   * them again. */
  gpumem_allocator_t* pool = pool_over(a);
  const size_t ask = round_up(free_memory_of(0) + 1, unit);
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(pool, ask, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("bytes free (cuMemCreate, in units of");
  if (unit == DEFAULT_UNIT) assert_detail_contains("(cuMemCreate, in units of 33,554,432 bytes)");
  info = info_of(a);
  assert_int_equal(info.mapped_bytes, (uint64_t)count * 16 * GiB);
  assert_int_equal(pool_info_of(pool).total_bytes, 0);
  assert_ok(gpumem_allocator_destroy(pool));

  for (unsigned i = 0; i < count; i++) assert_ok(gpumem_free(a, held[i], NULL));
  info = info_of(a);
  assert_int_equal(info.mapped_bytes, 0);
  assert_int_equal(info.reserved_bytes, 0);
  p = NULL;
  assert_ok(gpumem_alloc(a, GiB, NULL, &p));
  write_pattern(p, MiB, 5);
  expect_pattern(p, MiB, 5, "memory mapped after running out");
  assert_ok(gpumem_free(a, p, NULL));
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_vm_peer_access_own_device_refused(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* a = create_default();
  assert_status(gpumem_allocator_set_peer_access(a, 0, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("own device");
  assert_status(gpumem_allocator_set_peer_access(a, gpu_count(), GPUMEM_PEER_ACCESS_READ_WRITE),
                GPUMEM_ERROR_INVALID_DEVICE);
  assert_detail_contains("does not exist");
  assert_ok(gpumem_allocator_destroy(a));
}

/* Device 1's memory copied into a block of device 0's pool, and read back. */
static void expect_copy_from_peer(void* block, const void* peer_memory, size_t n, unsigned seed) {
  assert_ok(gpumem_copy(block, peer_memory, n));
  expect_pattern(block, n, seed, "bytes copied from device 1");
}

static void test_vm_peer_access_before_and_after_growth(void** state) {
  (void)state;
  require_gpu();
  int can = 0;
  if (gpu_count() < 2) skip();
  assert_int_equal(((test_cu_fn_can_access_peer)test_cu_symbol("cuDeviceCanAccessPeer"))(&can, 1, 0), 0);
  if (!can) skip();
  gpumem_allocator_t* vm = create_default();
  const size_t unit = info_of(vm).map_unit;
  gpumem_allocator_t* pool = pool_over(vm);

  void* before = NULL;
  assert_ok(gpumem_alloc(pool, MiB, NULL, &before));
  assert_int_equal(access_of(before, 1), TEST_MEM_ACCESS_NONE);
  /* Through the pool to its upstream: the memory mapped now... */
  assert_ok(gpumem_allocator_set_peer_access(pool, 1, GPUMEM_PEER_ACCESS_READ_WRITE));
  assert_int_equal(access_of(before, 1), TEST_MEM_ACCESS_READ_WRITE);
  assert_int_equal(access_of(before, 0), TEST_MEM_ACCESS_READ_WRITE);
  /* ...and what the pool maps as it grows. */
  const size_t n = 4 * unit;
  void* after = NULL;
  assert_ok(gpumem_alloc(pool, n, NULL, &after));
  assert_int_equal(access_of(after, 1), TEST_MEM_ACCESS_READ_WRITE);
  assert_int_equal(access_of((char*)after + n - 1, 1), TEST_MEM_ACCESS_READ_WRITE);
  /* A direct allocation, one physical allocation, is opened to the peer too. */
  void* direct = NULL;
  assert_ok(gpumem_alloc(vm, 3 * MiB + 1, NULL, &direct));
  assert_int_equal(access_of(direct, 1), TEST_MEM_ACCESS_READ_WRITE);
  assert_int_equal(access_of((char*)direct + 3 * MiB, 1), TEST_MEM_ACCESS_READ_WRITE);
  assert_ok(gpumem_free(vm, direct, NULL));

  void* peer_memory = NULL;
  assert_ok(gpumem_device_alloc(1, n, &peer_memory));
  write_pattern(peer_memory, n, 21);
  expect_copy_from_peer(before, peer_memory, MiB, 21);
  expect_copy_from_peer(after, peer_memory, n, 21);

  /* Taken away from all, and from what is mapped later. */
  assert_ok(gpumem_allocator_set_peer_access(vm, 1, GPUMEM_PEER_ACCESS_NONE));
  assert_int_equal(access_of(before, 1), TEST_MEM_ACCESS_NONE);
  assert_int_equal(access_of(after, 1), TEST_MEM_ACCESS_NONE);
  void* later = NULL;
  assert_ok(gpumem_alloc(pool, n, NULL, &later));
  assert_int_equal(access_of(later, 1), TEST_MEM_ACCESS_NONE);
  assert_int_equal(access_of(later, 0), TEST_MEM_ACCESS_READ_WRITE);

  assert_ok(gpumem_device_free(peer_memory));
  assert_ok(gpumem_free(pool, before, NULL));
  assert_ok(gpumem_free(pool, after, NULL));
  assert_ok(gpumem_free(pool, later, NULL));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(vm));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vm_params_init),
      cmocka_unit_test(test_vm_create_bad_input),
      cmocka_unit_test(test_vm_get_info_bad_input),
      cmocka_unit_test(test_vm_create_resolves_defaults),
      cmocka_unit_test(test_vm_create_bad_values),
      cmocka_unit_test(test_vm_direct_allocation_one_physical_allocation),
      cmocka_unit_test(test_vm_pool_grows_in_place_and_gives_back),
      cmocka_unit_test(test_vm_pool_request_beyond_range_size),
      cmocka_unit_test(test_vm_out_of_device_memory),
      cmocka_unit_test(test_vm_peer_access_own_device_refused),
      cmocka_unit_test(test_vm_peer_access_before_and_after_growth),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
