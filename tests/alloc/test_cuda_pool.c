/* Allocators over CUDA memory pools: the checks of their parameters and handles (no GPU needed),
 * then, on a GPU, each source of pool, the pool's limits, threshold, trimming and counters, and
 * the pool a caller brings outliving the allocator over it. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "test_bytes.h"
#include "test_cuda.h"

#define MiB ((size_t)1 << 20)

/* ---- Helpers ---- */

static gpumem_cuda_pool_params_t params_of(uint32_t source) {
  gpumem_cuda_pool_params_t params = GPUMEM_CUDA_POOL_PARAMS_INIT;
  params.source = source;
  return params;
}

static gpumem_allocator_t* create_with(const gpumem_cuda_pool_params_t* params) {
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_cuda_pool(params, &a));
  assert_non_null(a);
  return a;
}

static gpumem_allocator_t* create_new_pool(void) {
  const gpumem_cuda_pool_params_t params = params_of(GPUMEM_CUDA_POOL_NEW);
  return create_with(&params);
}

/* Creation refused with the status and a detail naming the problem, leaving the output NULL. */
static void assert_create_refused(const gpumem_cuda_pool_params_t* params, gpumem_status_t status, const char* detail) {
  gpumem_allocator_t* a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_create_cuda_pool(params, &a), status);
  assert_detail_contains(detail);
  assert_null(a);
}

static gpumem_cuda_pool_info_t info_of(gpumem_allocator_t* a) {
  gpumem_cuda_pool_info_t info;
  memset(&info, 0xab, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_cuda_pool_get_info(a, &info));
  assert_int_equal(info.struct_size, sizeof info);
  return info;
}

static gpumem_cuda_pool_t pool_of(gpumem_allocator_t* a) {
  gpumem_cuda_pool_t pool = NULL;
  assert_ok(gpumem_cuda_pool_get(a, &pool));
  assert_non_null(pool);
  return pool;
}

/* Allocates n bytes on a stream of device 0, writes a pattern through a copy and reads it back. */
static void assert_bytes_round_trip(gpumem_allocator_t* a, size_t n, unsigned seed) {
  gpumem_stream_t s = test_stream_create(0);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, n, s, &p));
  assert_non_null(p);
  test_stream_sync(s); /* the copies below run on the legacy stream */
  expect_round_trip(p, n, seed);
  assert_ok(gpumem_free(a, p, s));
  test_stream_sync(s);
  test_stream_destroy(s);
}

/* Allocates and frees n bytes on a stream, and waits for the stream: the pool has seen the free. */
static void alloc_free_sync(gpumem_allocator_t* a, size_t n) {
  gpumem_stream_t s = test_stream_create(0);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, n, s, &p));
  assert_ok(gpumem_free(a, p, s));
  test_stream_sync(s);
  test_stream_destroy(s);
}

/* ---- Without a GPU ---- */

static void test_cuda_pool_params_init(void** state) {
  (void)state;
  gpumem_cuda_pool_params_t params;
  memset(&params, 0xab, sizeof params);
  assert_ok(gpumem_cuda_pool_params_init(&params, sizeof params));
  assert_int_equal(params.struct_size, sizeof params);
  assert_int_equal(params.device, 0);
  assert_int_equal(params.source, GPUMEM_CUDA_POOL_CURRENT);
  assert_null(params.pool);
  assert_int_equal(params.max_size, 0);
  assert_true(params.release_threshold == GPUMEM_CUDA_POOL_KEEP_THRESHOLD);
  assert_int_equal(params.flags, 0);

  assert_status(gpumem_cuda_pool_params_init(NULL, sizeof params), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("params is NULL");
  assert_status(gpumem_cuda_pool_params_init(&params, sizeof params - 1), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("sizeof(gpumem_cuda_pool_params_t)");
}

static void test_cuda_pool_create_bad_input(void** state) {
  (void)state;
  gpumem_cuda_pool_params_t params = params_of(GPUMEM_CUDA_POOL_NEW);
  assert_status(gpumem_allocator_create_cuda_pool(&params, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_allocator is NULL");
  assert_create_refused(NULL, GPUMEM_ERROR_INVALID_ARGUMENT, "params is NULL");

  params.struct_size = sizeof params - 1;
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "struct_size is");

  params = params_of(GPUMEM_CUDA_POOL_NEW);
  params.flags = 0x4;
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "params->flags is 0x4");

  params = params_of(4);
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "params->source 4 is not");

  params = params_of(GPUMEM_CUDA_POOL_EXTERNAL);
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "params->pool is NULL");

  /* A pool given with a source that would not use it is a mistake, not something to ignore. */
  params = params_of(GPUMEM_CUDA_POOL_NEW);
  params.pool = (gpumem_cuda_pool_t)0x1000;
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "params->source is GPUMEM_CUDA_POOL_NEW");
  params = params_of(GPUMEM_CUDA_POOL_CURRENT);
  params.pool = (gpumem_cuda_pool_t)0x1000;
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "pass GPUMEM_CUDA_POOL_EXTERNAL");

  params = params_of(GPUMEM_CUDA_POOL_DEFAULT);
  params.max_size = 64 * MiB;
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_ARGUMENT, "params->max_size is 67,108,864 bytes");

  params = params_of(GPUMEM_CUDA_POOL_NEW);
  params.device = -1;
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_DEVICE, "params->device is -1");
}

static void test_cuda_pool_functions_refuse_other_allocators(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_pool_params_t pool_params = GPUMEM_POOL_PARAMS_INIT;
  pool_params.upstream = host;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&pool_params, &pool));

  gpumem_cuda_pool_t cuda_pool = (gpumem_cuda_pool_t)0x1;
  assert_status(gpumem_cuda_pool_get(host, &cuda_pool), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("is a host allocator, not a CUDA pool allocator");
  assert_null(cuda_pool);
  assert_status(gpumem_cuda_pool_get(pool, &cuda_pool), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("is a pool allocator, not a CUDA pool allocator");
  assert_status(gpumem_cuda_pool_get(NULL, &cuda_pool), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a live gpumem allocator");
  assert_status(gpumem_cuda_pool_get(host, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_pool is NULL");

  assert_status(gpumem_cuda_pool_trim(host, 0), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a CUDA pool allocator");
  assert_status(gpumem_cuda_pool_set_release_threshold(pool, 0), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a CUDA pool allocator");
  assert_status(gpumem_cuda_pool_reset_peaks(host), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a CUDA pool allocator");

  gpumem_cuda_pool_info_t info;
  memset(&info, 0xab, sizeof info);
  info.struct_size = sizeof info;
  assert_status(gpumem_cuda_pool_get_info(host, &info), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a CUDA pool allocator");
  assert_int_equal(info.struct_size, sizeof info);
  assert_int_equal(info.reserved, 0); /* cleared on failure */
  assert_int_equal(info.release_threshold, 0);
  assert_status(gpumem_cuda_pool_get_info(host, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_info is NULL");
  info.struct_size = 8;
  assert_status(gpumem_cuda_pool_get_info(host, &info), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("struct_size is 8");

  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(host));
}

static void test_cuda_pool_set_peer_access_bad_input(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_pool_params_t pool_params = GPUMEM_POOL_PARAMS_INIT;
  pool_params.upstream = host;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&pool_params, &pool));

  assert_status(gpumem_allocator_set_peer_access(NULL, 1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a live gpumem allocator");
  assert_status(gpumem_allocator_set_peer_access(host, 1, 2), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("access 2 is not");
  assert_status(gpumem_allocator_set_peer_access(host, -1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_INVALID_DEVICE);
  assert_detail_contains("peer_device is -1");
  /* Plain host memory is no device's to open; a pool over it asks its upstream. */
  assert_status(gpumem_allocator_set_peer_access(host, 1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("the host allocator's memory cannot be opened to device 1");
  assert_status(gpumem_allocator_set_peer_access(pool, 1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("the host allocator's memory cannot be opened to device 1");

  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(host));
}

/* ---- On a GPU ---- */

static void test_cuda_pool_create_device_out_of_range(void** state) {
  (void)state;
  require_gpu();
  gpumem_cuda_pool_params_t params = params_of(GPUMEM_CUDA_POOL_NEW);
  params.device = gpu_count();
  assert_create_refused(&params, GPUMEM_ERROR_INVALID_DEVICE, "does not exist");
}

static void test_cuda_pool_each_source_gives_its_pool(void** state) {
  (void)state;
  require_gpu();
  gpumem_cuda_pool_params_t params = params_of(GPUMEM_CUDA_POOL_CURRENT);
  gpumem_allocator_t* current = create_with(&params);
  gpumem_cuda_pool_t device_current = NULL;
  assert_int_equal(((test_cu_fn_pool)test_cu_symbol("cuDeviceGetMemPool"))(&device_current, 0), 0);
  assert_ptr_equal(pool_of(current), device_current);

  params = params_of(GPUMEM_CUDA_POOL_DEFAULT);
  gpumem_allocator_t* by_default = create_with(&params);
  assert_ptr_equal(pool_of(by_default), test_default_pool(0));

  gpumem_allocator_t* fresh = create_new_pool();
  assert_ptr_not_equal(pool_of(fresh), test_default_pool(0));

  params = params_of(GPUMEM_CUDA_POOL_EXTERNAL);
  params.pool = pool_of(fresh);
  gpumem_allocator_t* external = create_with(&params);
  assert_ptr_equal(pool_of(external), pool_of(fresh));

  gpumem_allocator_t* all[] = {current, by_default, fresh, external};
  for (unsigned i = 0; i < 4; i++) {
    int32_t device = -1;
    assert_ok(gpumem_allocator_get_device(all[i], &device));
    assert_int_equal(device, 0);
    assert_bytes_round_trip(all[i], 3 * MiB + 17, i);
  }
  /* The external allocator before the one that owns its pool. */
  for (unsigned i = 4; i-- > 0;) assert_ok(gpumem_allocator_destroy(all[i]));
}

static void test_cuda_pool_max_size_gives_out_of_memory(void** state) {
  (void)state;
  require_gpu();
  gpumem_cuda_pool_params_t params = params_of(GPUMEM_CUDA_POOL_NEW);
  params.max_size = 64 * MiB;
  gpumem_allocator_t* a = create_with(&params);
  gpumem_stream_t s = test_stream_create(0);
  void* half = NULL;
  assert_ok(gpumem_alloc(a, 32 * MiB, s, &half));
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(a, 64 * MiB, s, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_detail_contains("maximum size 67,108,864 bytes");
  assert_null(p);
  assert_ok(gpumem_free(a, half, s));
  /* Nothing of the pool is in use now: the maximum alone refuses. */
  p = (void*)0x1;
  assert_status(gpumem_alloc(a, 128 * MiB, s, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  const gpumem_allocator_stats_t stats = stats_of(a);
  assert_int_equal(stats.oom_count, 2);
  assert_int_equal(stats.bytes_in_use, 0);
  test_stream_sync(s);
  test_stream_destroy(s);
  /* Below the maximum the pool still serves, once what it cached is trimmed away. */
  assert_ok(gpumem_cuda_pool_trim(a, 0));
  assert_bytes_round_trip(a, 48 * MiB, 3);
  assert_ok(gpumem_allocator_destroy(a));
}

/* A new pool given no maximum takes GPUMEM_GPU_MEMORY_LIMIT's, as a gpumem pool of the device would. */
static void test_cuda_pool_new_pool_takes_the_environments_limit(void** state) {
  (void)state;
  require_gpu();
  assert_int_equal(setenv("GPUMEM_GPU_MEMORY_LIMIT", "64MiB", 1), 0);
  gpumem_allocator_t* a = create_new_pool();
  gpumem_cuda_pool_params_t params = params_of(GPUMEM_CUDA_POOL_NEW);
  params.max_size = 256 * MiB; /* the caller's bound wins */
  gpumem_allocator_t* b = create_with(&params);
  assert_int_equal(setenv("GPUMEM_GPU_MEMORY_LIMIT", "lots", 1), 0);
  const gpumem_cuda_pool_params_t unbounded = params_of(GPUMEM_CUDA_POOL_NEW);
  assert_create_refused(&unbounded, GPUMEM_ERROR_INVALID_ARGUMENT, "GPUMEM_GPU_MEMORY_LIMIT=\"lots\"");
  unsetenv("GPUMEM_GPU_MEMORY_LIMIT");
  gpumem_stream_t s = test_stream_create(0);
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(a, 96 * MiB, s, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_detail_contains("maximum size 67,108,864 bytes");
  assert_null(p);
  assert_ok(gpumem_alloc(b, 96 * MiB, s, &p));
  assert_ok(gpumem_free(b, p, s));
  test_stream_sync(s);
  test_stream_destroy(s);
  assert_ok(gpumem_allocator_destroy(b));
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_cuda_pool_default_threshold_keeps_memory_until_trimmed(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* a = create_new_pool();
  assert_true(info_of(a).release_threshold == UINT64_MAX);
  alloc_free_sync(a, 8 * MiB);
  /* The synchronize would have released it with the driver's threshold of 0. */
  assert_true(info_of(a).reserved >= 8 * MiB);
  assert_ok(gpumem_cuda_pool_trim(a, 0));
  assert_int_equal(info_of(a).reserved, 0);
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_cuda_pool_threshold_zero_releases_at_synchronize(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* a = create_new_pool();
  assert_ok(gpumem_cuda_pool_set_release_threshold(a, 0));
  assert_int_equal(info_of(a).release_threshold, 0);
  alloc_free_sync(a, 8 * MiB);
  assert_int_equal(info_of(a).reserved, 0);
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_cuda_pool_threshold_given_is_set(void** state) {
  (void)state;
  require_gpu();
  gpumem_cuda_pool_params_t params = params_of(GPUMEM_CUDA_POOL_NEW);
  params.release_threshold = 48 * MiB;
  gpumem_allocator_t* a = create_with(&params);
  assert_int_equal(info_of(a).release_threshold, 48 * MiB);
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_cuda_pool_info_tracks_use_and_peaks(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* a = create_new_pool();
  gpumem_cuda_pool_info_t info = info_of(a);
  assert_int_equal(info.used, 0);
  assert_int_equal(info.reserved, 0);

  gpumem_stream_t s = test_stream_create(0);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 4 * MiB, s, &p));
  test_stream_sync(s);
  info = info_of(a);
  assert_true(info.used >= 4 * MiB);
  assert_true(info.used_high >= info.used);
  assert_true(info.reserved >= info.used);
  assert_true(info.reserved_high >= info.reserved);
  const uint64_t used_with_p = info.used;

  assert_ok(gpumem_free(a, p, s));
  test_stream_sync(s);
  info = info_of(a);
  assert_int_equal(info.used, 0);
  assert_true(info.used_high >= used_with_p); /* the peak stays until reset */
  assert_true(info.reserved_high >= used_with_p);

  /* Emptied first, so the watermarks have nothing to restart from. */
  assert_ok(gpumem_cuda_pool_trim(a, 0));
  assert_ok(gpumem_cuda_pool_reset_peaks(a));
  info = info_of(a);
  assert_int_equal(info.used_high, 0);
  assert_int_equal(info.reserved_high, 0);
  /* The allocator's own statistics are separate, and kept. */
  assert_int_equal(stats_of(a).peak_bytes_in_use, 4 * MiB);

  test_stream_destroy(s);
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_cuda_pool_external_pool_outlives_allocator(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* owner = create_new_pool();
  gpumem_cuda_pool_params_t params = params_of(GPUMEM_CUDA_POOL_EXTERNAL);
  params.pool = pool_of(owner);
  gpumem_allocator_t* external = create_with(&params);
  /* A pool that exists keeps its threshold unless one is given. */
  assert_true(info_of(external).release_threshold == UINT64_MAX);
  assert_bytes_round_trip(external, MiB, 5);
  assert_ok(gpumem_allocator_destroy(external));

  /* Destroying the allocator left the pool alive: it still allocates. */
  assert_true(info_of(owner).release_threshold == UINT64_MAX);
  assert_bytes_round_trip(owner, MiB, 6);

  /* A threshold given for a pool that exists is set on it, for every user of the pool. */
  params.release_threshold = 2 * MiB;
  external = create_with(&params);
  assert_int_equal(info_of(owner).release_threshold, 2 * MiB);
  assert_ok(gpumem_allocator_destroy(external));
  assert_ok(gpumem_allocator_destroy(owner));
}

static void test_cuda_pool_peer_access_own_device_refused(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* a = create_new_pool();
  assert_status(gpumem_allocator_set_peer_access(a, 0, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("own device");
  assert_status(gpumem_allocator_set_peer_access(a, gpu_count(), GPUMEM_PEER_ACCESS_READ_WRITE),
                GPUMEM_ERROR_INVALID_DEVICE);
  assert_detail_contains("does not exist");
  assert_ok(gpumem_allocator_destroy(a));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cuda_pool_params_init),
      cmocka_unit_test(test_cuda_pool_create_bad_input),
      cmocka_unit_test(test_cuda_pool_functions_refuse_other_allocators),
      cmocka_unit_test(test_cuda_pool_set_peer_access_bad_input),
      cmocka_unit_test(test_cuda_pool_create_device_out_of_range),
      cmocka_unit_test(test_cuda_pool_each_source_gives_its_pool),
      cmocka_unit_test(test_cuda_pool_max_size_gives_out_of_memory),
      cmocka_unit_test(test_cuda_pool_new_pool_takes_the_environments_limit),
      cmocka_unit_test(test_cuda_pool_default_threshold_keeps_memory_until_trimmed),
      cmocka_unit_test(test_cuda_pool_threshold_zero_releases_at_synchronize),
      cmocka_unit_test(test_cuda_pool_threshold_given_is_set),
      cmocka_unit_test(test_cuda_pool_info_tracks_use_and_peaks),
      cmocka_unit_test(test_cuda_pool_external_pool_outlives_allocator),
      cmocka_unit_test(test_cuda_pool_peer_access_own_device_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
