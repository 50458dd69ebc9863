/* How the device pools are built (GPUMEM_POOL_CONF, gpumem_pool_set_device_config), over the fake
 * driver: the process's first device pool is made in each run, so CTest runs this once per case,
 * the case named by argv[1] and the environment set by CMake. */
#include <stdlib.h>

#include "test_util.h"

static const char* g_case = "default";

/* Device 0's pool, with one allocation made and freed: over VM it has reserved a range of
 * addresses beyond what it mapped; over cuMemAlloc, addresses and bytes held are one. */
static gpumem_pool_info_t info_after_one_allocation(void) {
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_get_device(0, &pool));
  void* p = NULL;
  assert_ok(gpumem_alloc(pool, 1000, NULL, &p));
  gpumem_pool_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_pool_get_info(pool, &info));
  assert_ok(gpumem_free(pool, p, NULL));
  return info;
}

static void test_pool_config_case(void** state) {
  (void)state;
  if (!strcmp(g_case, "default")) {
    /* Over virtual memory, in units of the fake device's granularity (2 MiB). */
    const gpumem_pool_info_t info = info_after_one_allocation();
    assert_int_equal(info.total_bytes, 2 << 20);
    assert_true(info.address_bytes > info.total_bytes);
    assert_status(gpumem_pool_set_device_config("backend:classic"), GPUMEM_ERROR_BUSY);
    assert_detail_contains("device 0's pool was asked for already");
  } else if (!strcmp(g_case, "classic")) { /* GPUMEM_POOL_CONF=backend:classic */
    /* Over cuMemAlloc, which the fake driver refuses (it has no memory but the VM calls'). */
    gpumem_allocator_t* pool = NULL;
    assert_ok(gpumem_pool_get_device(0, &pool));
    void* p = NULL;
    assert_status(gpumem_alloc(pool, 1000, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
    assert_detail_contains("(cuMemAlloc;");
  } else if (!strcmp(g_case, "call")) { /* the call's keys over the environment's (map_unit:4MiB) */
    assert_ok(gpumem_pool_set_device_config("backend:classic"));
    assert_ok(gpumem_pool_set_device_config("backend:vm")); /* the last call stands */
    const gpumem_pool_info_t info = info_after_one_allocation();
    assert_int_equal(info.total_bytes, 4 << 20);
  } else if (!strcmp(g_case, "soft")) { /* GPUMEM_POOL_CONF=soft_limit:4MiB,page_reclaim:false */
    gpumem_allocator_t* pool = NULL;
    assert_ok(gpumem_pool_get_device(0, &pool));
    void *a = NULL, *b = NULL, *c = NULL;
    assert_ok(gpumem_alloc(pool, 2 << 20, NULL, &a));
    assert_ok(gpumem_alloc(pool, 2 << 20, NULL, &b));
    assert_ok(gpumem_free(pool, a, NULL));            /* a's unit cached, 4 MiB mapped */
    assert_ok(gpumem_alloc(pool, 4 << 20, NULL, &c)); /* past 4 MiB: a's unit goes first */
    gpumem_pool_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    assert_ok(gpumem_pool_get_info(pool, &info));
    assert_int_equal(info.total_bytes, 6 << 20);
    assert_int_equal(info.free_bytes, 0);
    assert_ok(gpumem_free(pool, b, NULL));
    assert_ok(gpumem_free(pool, c, NULL));
  } else if (!strcmp(g_case, "bad")) { /* GPUMEM_POOL_CONF=colour:red */
    gpumem_allocator_t* pool = (gpumem_allocator_t*)0x1;
    assert_status(gpumem_pool_get_device(0, &pool), GPUMEM_ERROR_INVALID_ARGUMENT);
    assert_null(pool);
    assert_detail_contains("GPUMEM_POOL_CONF: unknown key \"colour\"; the keys are backend");
    /* Nothing was made: a call may still set the configuration, and the refusal stands. */
    assert_ok(gpumem_pool_set_device_config("backend:classic"));
    assert_status(gpumem_pool_get_device(0, &pool), GPUMEM_ERROR_INVALID_ARGUMENT);
  } else {
    fail_msg("unknown case \"%s\"", g_case);
  }
}

int main(int argc, char** argv) {
  g_case = argc > 1 ? argv[1] : "default";
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_pool_config_case)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
