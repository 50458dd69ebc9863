/* VM allocators against the fake driver (tests/driver/fake_cuda.c), with two devices, on any
 * machine: the defaults and the checks that need the driver, the driver calls behind a direct
 * allocation and its free (one physical allocation of the size rounded to the granularity, one
 * access call, a synchronize before unmapping), direct allocations beside a pool that maps whole
 * units, out of memory and out of addresses leaving nothing behind, peer access for what is mapped
 * before and after it changes, and a pool over the allocator growing in place, with memsets across
 * its units' mappings, and giving memory back. The fake keeps books and touches no memory; test_vm
 * checks the bytes, on a GPU.
 *
 * `test_vm_model missing` runs with a driver that lacks two of the entry points. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "test_fake_cuda.h"
#include "test_util.h"

#define MiB ((size_t)1 << 20)
#define GRANULARITY (2 * MiB)   /* the fake's */
#define DEFAULT_UNIT (32 * MiB) /* the map unit of map_unit 0, the fake's granularity being smaller */

enum {
  ACCESS_NONE = 0,       /* CU_MEM_ACCESS_FLAGS_PROT_NONE */
  ACCESS_READ_WRITE = 3, /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
  ATTRIBUTE_VMM = 102    /* CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
};

static size_t fake_reserved(void) { return ((size_t(*)(void))fake_symbol("fake_cuda_vmm_reserved_bytes"))(); }
static size_t fake_mapped(void) { return ((size_t(*)(void))fake_symbol("fake_cuda_vmm_mapped_bytes"))(); }
static size_t fake_held(int device) { return ((size_t(*)(int))fake_symbol("fake_cuda_vmm_held_bytes"))(device); }
static int fake_access(const void* p, int device) {
  return ((int (*)(const void*, int))fake_symbol("fake_cuda_vmm_access"))(p, device);
}
static size_t fake_calls(const char* name) {
  return ((size_t(*)(const char*))fake_symbol("fake_cuda_vmm_calls"))(name);
}

/* The fake holds nothing of the virtual memory management calls. */
static void assert_fake_empty(void) {
  assert_int_equal(fake_reserved(), 0);
  assert_int_equal(fake_mapped(), 0);
  assert_int_equal(fake_held(0), 0);
  assert_int_equal(fake_held(1), 0);
}

static gpumem_allocator_t* create_vm(int32_t device, uint64_t range_size, uint64_t map_unit) {
  gpumem_vm_params_t params = GPUMEM_VM_PARAMS_INIT;
  params.device = device;
  params.range_size = range_size;
  params.map_unit = map_unit;
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_vm(&params, &a));
  assert_non_null(a);
  assert_contexts_restored();
  return a;
}

static void assert_create_refused(int32_t device, uint64_t range_size, uint64_t map_unit, gpumem_status_t status,
                                  const char* detail) {
  gpumem_vm_params_t params = GPUMEM_VM_PARAMS_INIT;
  params.device = device;
  params.range_size = range_size;
  params.map_unit = map_unit;
  gpumem_allocator_t* a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_create_vm(&params, &a), status);
  assert_detail_contains(detail);
  assert_null(a);
  assert_contexts_restored();
}

static gpumem_vm_info_t info_of(gpumem_allocator_t* a) {
  gpumem_vm_info_t info;
  memset(&info, 0xab, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_vm_get_info(a, &info));
  return info;
}

/* ---- Tests ---- */

static void test_vm_model_defaults_and_checks(void** state) {
  (void)state;
  /* 32 MiB by default, not the granularity: each physical allocation costs a driver call. */
  gpumem_allocator_t* a = create_vm(0, 0, 0);
  gpumem_vm_info_t info = info_of(a);
  assert_int_equal(info.map_unit, DEFAULT_UNIT);
  assert_int_equal(info.range_size, (size_t)1 << 30); /* the fake's memory, a multiple of the unit */
  assert_int_equal(info.reserved_bytes, 0);
  assert_int_equal(info.mapped_bytes, 0);
  assert_ok(gpumem_allocator_destroy(a));

  /* The finest unit is the granularity, given explicitly. */
  a = create_vm(0, 64 * MiB, GRANULARITY);
  info = info_of(a);
  assert_int_equal(info.map_unit, GRANULARITY);
  assert_int_equal(info.range_size, 64 * MiB);
  assert_ok(gpumem_allocator_destroy(a));

  a = create_vm(1, 64 * MiB, 4 * GRANULARITY);
  info = info_of(a);
  assert_int_equal(info.map_unit, 4 * GRANULARITY);
  assert_int_equal(info.range_size, 64 * MiB);
  int32_t device = -1;
  assert_ok(gpumem_allocator_get_device(a, &device));
  assert_int_equal(device, 1);
  assert_ok(gpumem_allocator_destroy(a));

  assert_create_refused(0, 0, MiB, GPUMEM_ERROR_INVALID_ARGUMENT,
                        "params->map_unit is 1,048,576 bytes, not a multiple of device 0's allocation granularity "
                        "(2,097,152 bytes)");
  assert_create_refused(0, 3 * MiB, GRANULARITY, GPUMEM_ERROR_INVALID_ARGUMENT,
                        "params->range_size is 3,145,728 bytes, not a multiple of the map unit (2,097,152 bytes)");
  /* A range of whole granules is not enough with the default unit: it must be whole units of 32 MiB. */
  assert_create_refused(0, 48 * MiB, 0, GPUMEM_ERROR_INVALID_ARGUMENT,
                        "params->range_size is 50,331,648 bytes, not a multiple of the map unit (33,554,432 bytes)");
  assert_create_refused(0, GRANULARITY, 2 * GRANULARITY, GPUMEM_ERROR_INVALID_ARGUMENT,
                        "params->range_size is 2,097,152 bytes");
  assert_create_refused(2, 0, 0, GPUMEM_ERROR_INVALID_DEVICE, "device 2 does not exist (there are 2");

  setenv("FAKE_CUDA_ZERO_ATTRIBUTES", "102", 1);
  assert_create_refused(0, 0, 0, GPUMEM_ERROR_NOT_SUPPORTED,
                        "device 0 does not support virtual memory management (cuMemCreate, cuMemMap); use "
                        "gpumem_allocator_create_device for a pool's upstream");
  unsetenv("FAKE_CUDA_ZERO_ATTRIBUTES");
  assert_fake_empty();
}

static void test_vm_model_direct_allocation(void** state) {
  (void)state;
  gpumem_allocator_t* a = create_vm(0, 0, 0);
  const size_t n = 8 * MiB + 1;
  const size_t mapped = 5 * GRANULARITY; /* rounded to the granularity, not to the 32 MiB unit */
  const size_t creates = fake_calls("cuMemCreate"), maps = fake_calls("cuMemMap"),
               accesses = fake_calls("cuMemSetAccess");
  char* p = NULL;
  assert_ok(gpumem_alloc(a, n, NULL, (void**)&p));
  assert_contexts_restored();
  assert_int_equal((uintptr_t)p % GRANULARITY, 0);
  /* One physical allocation, mapped whole, and one access call. */
  assert_int_equal(fake_calls("cuMemCreate") - creates, 1);
  assert_int_equal(fake_calls("cuMemMap") - maps, 1);
  assert_int_equal(fake_calls("cuMemSetAccess") - accesses, 1);
  assert_pointer_range(p + mapped - 1, p, mapped);
  assert_int_equal(fake_reserved(), mapped);
  assert_int_equal(fake_mapped(), mapped);
  assert_int_equal(fake_held(0), mapped);
  for (size_t at = 0; at < mapped; at += GRANULARITY) {
    assert_int_equal(fake_access(p + at, 0), ACCESS_READ_WRITE);
    assert_int_equal(fake_access(p + at, 1), ACCESS_NONE);
  }
  gpumem_vm_info_t info = info_of(a);
  assert_int_equal(info.reserved_bytes, mapped);
  assert_int_equal(info.mapped_bytes, mapped);
  gpumem_allocator_stats_t stats = stats_of(a);
  assert_int_equal(stats.bytes_in_use, n);
  assert_int_equal(stats.bytes_reserved, n);
  assert_int_equal(stats.upstream_alloc_count, 1);

  /* Memsets reach the end of what is mapped and no further. */
  assert_ok(gpumem_memset(p, 0xab, 1, n));
  assert_ok(gpumem_memset(p + GRANULARITY - 1, 0, 1, 2));
  assert_ok(gpumem_memset(p + 2 * GRANULARITY, 0x12345678, 4, 3 * GRANULARITY / 4));
  assert_ok(gpumem_memset(p, 0, 1, mapped));
  assert_status(gpumem_memset(p, 0, 1, mapped + 1), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("dst range");
  assert_detail_contains("runs 1 byte past the end of its allocation (device memory on device 0 at");
  assert_detail_contains("10,485,760 bytes)");
  assert_status(gpumem_memset(p + 3 * GRANULARITY, 0, 1, 3 * GRANULARITY), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("runs 2,097,152 bytes past the end of its allocation");
  assert_contexts_restored();

  /* A free waits for the device, then unmaps the one mapping. */
  const size_t synchronizes = fake_calls("cuCtxSynchronize"), unmaps = fake_calls("cuMemUnmap");
  assert_ok(gpumem_free(a, p, NULL));
  assert_int_equal(fake_calls("cuCtxSynchronize") - synchronizes, 1);
  assert_int_equal(fake_calls("cuMemUnmap") - unmaps, 1);
  assert_contexts_restored();
  assert_fake_empty();
  info = info_of(a);
  assert_int_equal(info.reserved_bytes, 0);
  assert_int_equal(info.mapped_bytes, 0);
  stats = stats_of(a);
  assert_int_equal(stats.bytes_reserved, 0);
  assert_int_equal(stats.upstream_free_count, 1);
  /* Nothing is live: a memset there is refused as for memory that was never mapped. */
  assert_status(gpumem_memset(p, 0, 1, 1), GPUMEM_ERROR_INVALID_POINTER);
  assert_ok(gpumem_allocator_destroy(a));
}

/* With the default unit, a direct allocation of 3 MiB + 1 maps 4 MiB in one physical allocation,
 * while a pool over the same allocator maps and unmaps whole units of 32 MiB. */
static void test_vm_model_direct_by_granularity_pool_by_unit(void** state) {
  (void)state;
  gpumem_allocator_t* vm = create_vm(0, 0, 0);
  size_t creates = fake_calls("cuMemCreate"), maps = fake_calls("cuMemMap");
  char* direct = NULL;
  assert_ok(gpumem_alloc(vm, 3 * MiB + 1, NULL, (void**)&direct));
  assert_int_equal(fake_calls("cuMemCreate") - creates, 1);
  assert_int_equal(fake_calls("cuMemMap") - maps, 1);
  assert_pointer_range(direct + 3 * MiB, direct, 4 * MiB);
  assert_int_equal(fake_mapped(), 4 * MiB);
  assert_int_equal(fake_held(0), 4 * MiB);
  assert_int_equal(fake_reserved(), 4 * MiB);
  gpumem_vm_info_t info = info_of(vm);
  assert_int_equal(info.reserved_bytes, 4 * MiB);
  assert_int_equal(info.mapped_bytes, 4 * MiB);

  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = vm;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));
  creates = fake_calls("cuMemCreate");
  maps = fake_calls("cuMemMap");
  char* small = NULL;
  assert_ok(gpumem_alloc(pool, 1000, NULL, (void**)&small));
  /* A whole unit for 1,000 bytes, in one physical allocation. */
  assert_int_equal(fake_calls("cuMemCreate") - creates, 1);
  assert_int_equal(fake_calls("cuMemMap") - maps, 1);
  assert_int_equal(pool_info_of(pool).total_bytes, DEFAULT_UNIT);
  assert_int_equal(fake_mapped(), 4 * MiB + DEFAULT_UNIT);
  assert_int_equal(fake_held(0), 4 * MiB + DEFAULT_UNIT);
  assert_pointer_range(small, small, DEFAULT_UNIT); /* the block starts the range */
  info = info_of(vm);
  assert_int_equal(info.mapped_bytes, 4 * MiB + DEFAULT_UNIT);
  assert_int_equal(info.reserved_bytes, 4 * MiB + info.range_size);

  /* 40 MiB next to it lacks one more unit, and maps just that. */
  char* big = NULL;
  assert_ok(gpumem_alloc(pool, 40 * MiB, NULL, (void**)&big));
  assert_int_equal(fake_calls("cuMemCreate") - creates, 2);
  assert_int_equal(fake_calls("cuMemMap") - maps, 2);
  assert_int_equal(pool_info_of(pool).total_bytes, 2 * DEFAULT_UNIT);
  assert_int_equal(fake_mapped(), 4 * MiB + 2 * DEFAULT_UNIT);
  assert_ok(gpumem_memset(big, 0x22, 1, 40 * MiB));

  /* Released: one unmap per unit; the direct allocation stays. */
  assert_ok(gpumem_free(pool, small, NULL));
  assert_ok(gpumem_free(pool, big, NULL));
  const size_t unmaps = fake_calls("cuMemUnmap");
  assert_ok(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  assert_int_equal(fake_calls("cuMemUnmap") - unmaps, 2);
  assert_int_equal(pool_info_of(pool).total_bytes, 0);
  assert_int_equal(fake_mapped(), 4 * MiB);
  assert_int_equal(fake_held(0), 4 * MiB);
  assert_ok(gpumem_allocator_destroy(pool));

  assert_ok(gpumem_free(vm, direct, NULL));
  assert_fake_empty();
  assert_contexts_restored();
  assert_ok(gpumem_allocator_destroy(vm));
}

static void test_vm_model_out_of_memory_leaves_nothing(void** state) {
  (void)state;
  gpumem_allocator_t* a = create_vm(0, 0, 0);
  void* big = NULL;
  assert_ok(gpumem_alloc(a, 400 * MiB, NULL, &big));
  /* The fake has 512 MiB free: a direct allocation of 200 MiB more is one physical allocation,
   * refused whole. */
  const size_t creates = fake_calls("cuMemCreate"), maps = fake_calls("cuMemMap");
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(a, 200 * MiB, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains(
      "out of memory mapping 209,715,200 bytes on device 0: the device has 117,440,512 of 1,073,741,824 bytes free "
      "(cuMemCreate, in units of 209,715,200 bytes)");
  assert_int_equal(fake_calls("cuMemCreate") - creates, 1);
  assert_int_equal(fake_calls("cuMemMap") - maps, 0);
  assert_contexts_restored();
  assert_int_equal(fake_reserved(), 400 * MiB);
  assert_int_equal(fake_mapped(), 400 * MiB);
  assert_int_equal(fake_held(0), 400 * MiB);
  gpumem_vm_info_t info = info_of(a);
  assert_int_equal(info.reserved_bytes, 400 * MiB);
  assert_int_equal(info.mapped_bytes, 400 * MiB);
  const gpumem_allocator_stats_t stats = stats_of(a);
  assert_int_equal(stats.oom_count, 1);
  assert_int_equal(stats.alloc_count, 1);
  assert_int_equal(stats.bytes_reserved, 400 * MiB);

  /* A pool's growth maps 32 MiB units: three fit in the 112 MiB left, the fourth runs out, and
   * what the call had mapped is unmapped again. */
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = a;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));
  p = (void*)0x1;
  assert_status(gpumem_alloc(pool, 200 * MiB, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  /* Seven units asked for; the free memory is told without the three the call had made. */
  assert_detail_contains(
      "out of memory mapping 234,881,024 bytes on device 0: the device has 117,440,512 of 1,073,741,824 bytes free "
      "(cuMemCreate, in units of 33,554,432 bytes)");
  assert_contexts_restored();
  assert_int_equal(fake_mapped(), 400 * MiB);
  assert_int_equal(fake_held(0), 400 * MiB);
  info = info_of(a);
  assert_int_equal(info.mapped_bytes, 400 * MiB);
  assert_int_equal(pool_info_of(pool).total_bytes, 0);
  assert_int_equal(stats_of(pool).oom_count, 1);
  /* What fits is still served, in whole units. */
  assert_ok(gpumem_alloc(pool, 50 * MiB, NULL, &p));
  assert_int_equal(pool_info_of(pool).total_bytes, 2 * DEFAULT_UNIT);
  assert_int_equal(fake_mapped(), 400 * MiB + 2 * DEFAULT_UNIT);
  assert_ok(gpumem_free(pool, p, NULL));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_int_equal(fake_mapped(), 400 * MiB);

  assert_ok(gpumem_alloc(a, 100 * MiB, NULL, &p));
  assert_ok(gpumem_free(a, p, NULL));
  assert_ok(gpumem_free(a, big, NULL));
  assert_fake_empty();
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_vm_model_out_of_addresses(void** state) {
  (void)state;
  gpumem_allocator_t* a = create_vm(0, 0, 0);
  /* The fake has 1 TiB of addresses; direct allocations are not bounded by the range size. */
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(a, (size_t)2 << 40, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("out of addresses reserving 2,199,023,255,552 bytes on device 0 (cuMemAddressReserve)");
  /* Sizes round to the granularity, not to the 32 MiB unit: the largest that rounds without
   * overflowing is refused for want of addresses, one byte more for overflowing. */
  p = (void*)0x1;
  assert_status(gpumem_alloc(a, SIZE_MAX - (GRANULARITY - 1), NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("out of addresses reserving 18,446,744,073,707,454,464 bytes on device 0");
  assert_status(gpumem_alloc(a, SIZE_MAX - (GRANULARITY - 2), NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("overflows rounding to the device's granularity (2,097,152 bytes)");
  assert_status(gpumem_alloc(a, SIZE_MAX, NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains(
      "18,446,744,073,709,551,615 bytes overflows rounding to the device's granularity "
      "(2,097,152 bytes)");
  assert_null(p);
  assert_contexts_restored();
  assert_fake_empty();
  assert_int_equal(info_of(a).reserved_bytes, 0);
  assert_int_equal(stats_of(a).oom_count, 2);
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_vm_model_peer_access_without_peer_path(void** state) {
  (void)state;
  gpumem_allocator_t* a = create_vm(0, 0, 0);
  assert_status(gpumem_allocator_set_peer_access(a, 1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("device 1 cannot reach device 0's memory (cuDeviceCanAccessPeer: no peer path between them)");
  /* Device 1 has no access to take away. */
  assert_ok(gpumem_allocator_set_peer_access(a, 1, GPUMEM_PEER_ACCESS_NONE));
  assert_status(gpumem_allocator_set_peer_access(a, 0, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("device 0 is the vm allocator's own device");
  assert_status(gpumem_allocator_set_peer_access(a, 2, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_INVALID_DEVICE);
  assert_detail_contains("device 2 does not exist");
  assert_contexts_restored();
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_vm_model_peer_access_follows_mappings(void** state) {
  (void)state;
  setenv("FAKE_CUDA_PEER_ACCESS", "1", 1);
  gpumem_allocator_t* a = create_vm(0, 0, 0);
  char* before = NULL;
  assert_ok(gpumem_alloc(a, 3 * GRANULARITY, NULL, (void**)&before));
  assert_ok(gpumem_allocator_set_peer_access(a, 1, GPUMEM_PEER_ACCESS_READ_WRITE));
  assert_contexts_restored();
  for (size_t k = 0; k < 3; k++) assert_int_equal(fake_access(before + k * GRANULARITY, 1), ACCESS_READ_WRITE);
  char* after = NULL;
  assert_ok(gpumem_alloc(a, 2 * GRANULARITY, NULL, (void**)&after));
  assert_int_equal(fake_access(after, 1), ACCESS_READ_WRITE);
  assert_int_equal(fake_access(after + GRANULARITY, 1), ACCESS_READ_WRITE);
  assert_int_equal(fake_access(after, 0), ACCESS_READ_WRITE);
  /* Enabling what is enabled asks the driver nothing. */
  const size_t accesses = fake_calls("cuMemSetAccess");
  assert_ok(gpumem_allocator_set_peer_access(a, 1, GPUMEM_PEER_ACCESS_READ_WRITE));
  assert_int_equal(fake_calls("cuMemSetAccess"), accesses);

  assert_ok(gpumem_allocator_set_peer_access(a, 1, GPUMEM_PEER_ACCESS_NONE));
  assert_int_equal(fake_access(before, 1), ACCESS_NONE);
  assert_int_equal(fake_access(before + 2 * GRANULARITY, 1), ACCESS_NONE);
  assert_int_equal(fake_access(after + GRANULARITY, 1), ACCESS_NONE);
  assert_int_equal(fake_access(after, 0), ACCESS_READ_WRITE);
  char* later = NULL;
  assert_ok(gpumem_alloc(a, GRANULARITY, NULL, (void**)&later));
  assert_int_equal(fake_access(later, 1), ACCESS_NONE);
  assert_int_equal(fake_access(later, 0), ACCESS_READ_WRITE);

  /* Given again: to everything mapped, whenever it was mapped. */
  assert_ok(gpumem_allocator_set_peer_access(a, 1, GPUMEM_PEER_ACCESS_READ_WRITE));
  assert_int_equal(fake_access(before + GRANULARITY, 1), ACCESS_READ_WRITE);
  assert_int_equal(fake_access(after + GRANULARITY, 1), ACCESS_READ_WRITE);
  assert_int_equal(fake_access(later, 1), ACCESS_READ_WRITE);
  assert_contexts_restored();

  assert_ok(gpumem_free(a, before, NULL));
  assert_ok(gpumem_free(a, after, NULL));
  assert_ok(gpumem_free(a, later, NULL));
  assert_fake_empty();
  /* A pool passes the call to its upstream. */
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = a;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));
  assert_ok(gpumem_allocator_set_peer_access(pool, 1, GPUMEM_PEER_ACCESS_NONE));
  assert_status(gpumem_allocator_set_peer_access(pool, 0, GPUMEM_PEER_ACCESS_NONE), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("the vm allocator's own device");
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(a));
  unsetenv("FAKE_CUDA_PEER_ACCESS");
}

/* A pool over the allocator maps units as it grows and unmaps them on release: what it says it
 * holds is what the allocator and the driver have mapped, and what it spans what they reserved. */
static void assert_pool_holds_mapped(gpumem_allocator_t* pool, gpumem_allocator_t* vm) {
  const gpumem_pool_info_t p = pool_info_of(pool);
  const gpumem_vm_info_t v = info_of(vm);
  assert_int_equal(p.total_bytes, v.mapped_bytes);
  assert_int_equal(p.address_bytes, v.reserved_bytes);
  assert_int_equal(v.mapped_bytes, fake_mapped());
  assert_int_equal(v.reserved_bytes, fake_reserved());
  assert_int_equal(stats_of(pool).bytes_reserved, p.total_bytes);
}

static void test_vm_model_pool_grows_in_place(void** state) {
  (void)state;
  setenv("FAKE_CUDA_PEER_ACCESS", "1", 1);
  /* Units of the granularity, so that small blocks span several. */
  gpumem_allocator_t* vm = create_vm(0, 64 * MiB, GRANULARITY);
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = vm;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));

  char* small = NULL;
  assert_ok(gpumem_alloc(pool, 1000, NULL, (void**)&small));
  assert_pool_holds_mapped(pool, vm);
  assert_int_equal(fake_mapped(), GRANULARITY);
  assert_int_equal(fake_reserved(), 64 * MiB);
  /* Opened to the peer through the pool; what it maps later is opened too. */
  assert_ok(gpumem_allocator_set_peer_access(pool, 1, GPUMEM_PEER_ACCESS_READ_WRITE));
  assert_int_equal(fake_access(small, 1), ACCESS_READ_WRITE);
  char* big = NULL;
  assert_ok(gpumem_alloc(pool, 5 * MiB, NULL, (void**)&big));
  assert_pool_holds_mapped(pool, vm);
  assert_true(fake_mapped() >= 3 * GRANULARITY);
  assert_true(fake_mapped() <= 4 * GRANULARITY);
  for (size_t at = 0; at < 5 * MiB; at += MiB) assert_int_equal(fake_access(big + at, 1), ACCESS_READ_WRITE);
  /* The driver describes one unit's mapping at a time, but a block across units is one region to
   * a memset, which runs on to the end of what is mapped and no further. */
  assert_pointer_range(big + 5 * MiB - 1, (void*)((uintptr_t)(big + 5 * MiB - 1) & ~(GRANULARITY - 1)), GRANULARITY);
  assert_ok(gpumem_memset(big, 0x11, 1, 5 * MiB));
  assert_ok(gpumem_memset(big + 3 * MiB, 0x12345678, 4, MiB / 2));
  const size_t mapped = fake_mapped();
  assert_ok(gpumem_memset(small, 0, 1, mapped));
  assert_status(gpumem_memset(small, 0, 1, mapped + 1), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("runs 1 byte past the end of its allocation (device memory on device 0 at");
  assert_contexts_restored();

  /* Larger than one range: refused, naming it. */
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(pool, 65 * MiB, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("range_size 67,108,864 bytes");

  /* Released: unmapped after a synchronize, and the empty range given back. */
  assert_ok(gpumem_free(pool, small, NULL));
  assert_ok(gpumem_free(pool, big, NULL));
  const size_t synchronizes = fake_calls("cuCtxSynchronize");
  assert_ok(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  assert_true(fake_calls("cuCtxSynchronize") > synchronizes);
  assert_pool_holds_mapped(pool, vm);
  assert_int_equal(pool_info_of(pool).total_bytes, 0);
  assert_int_equal(fake_mapped(), 0);
  assert_int_equal(fake_held(0), 0);

  /* And mapped again as it grows. */
  assert_ok(gpumem_alloc(pool, 3 * GRANULARITY, NULL, &p));
  assert_pool_holds_mapped(pool, vm);
  assert_int_equal(fake_mapped(), 3 * GRANULARITY);
  assert_int_equal(fake_access(p, 1), ACCESS_READ_WRITE);
  assert_ok(gpumem_free(pool, p, NULL));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_fake_empty();
  assert_int_equal(info_of(vm).reserved_bytes, 0);
  assert_ok(gpumem_allocator_destroy(vm));
  unsetenv("FAKE_CUDA_PEER_ACCESS");
}

static void test_vm_model_stale_handle(void** state) {
  (void)state;
  gpumem_allocator_t* a = create_vm(0, 0, 0);
  assert_ok(gpumem_allocator_destroy(a));
  gpumem_vm_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  assert_status(gpumem_vm_get_info(a, &info), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a live gpumem allocator");
}

/* ---- missing: the driver lacks cuMemMap and cuMemSetAccess ---- */

static void test_vm_model_missing_entry_points(void** state) {
  (void)state;
  assert_create_refused(0, 0, 0, GPUMEM_ERROR_NOT_SUPPORTED,
                        "the CUDA driver lacks cuMemMap, cuMemSetAccess, which virtual memory management needs");
  /* Nothing else is lost. */
  gpumem_allocator_t* device = NULL;
  assert_ok(gpumem_allocator_create_device(0, &device));
  assert_ok(gpumem_allocator_destroy(device));
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "missing") == 0) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_vm_model_missing_entry_points)};
    return cmocka_run_group_tests(tests, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vm_model_defaults_and_checks),
      cmocka_unit_test(test_vm_model_direct_allocation),
      cmocka_unit_test(test_vm_model_direct_by_granularity_pool_by_unit),
      cmocka_unit_test(test_vm_model_out_of_memory_leaves_nothing),
      cmocka_unit_test(test_vm_model_out_of_addresses),
      cmocka_unit_test(test_vm_model_peer_access_without_peer_path),
      cmocka_unit_test(test_vm_model_peer_access_follows_mappings),
      cmocka_unit_test(test_vm_model_pool_grows_in_place),
      cmocka_unit_test(test_vm_model_stale_handle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
