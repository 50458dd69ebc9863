/* The simulated device of gpumem replay (tools/simulated_device.c): whatever its capacity, every
 * range it hands out ends below 2^64, and one that would not is refused as out of memory, as the
 * driver refuses addresses it does not have. */
#include "simulated_device.h"
#include "test_util.h"

static const uint64_t kFirst = 0x100000000000ULL; /* where its addresses start */

static gpumem_status_t alloc(const gpumem_allocator_functions_t* fns, uint64_t size, uint64_t* out) {
  void* p = NULL;
  const gpumem_status_t st = fns->alloc(fns->context, size, -1, NULL, &p);
  *out = (uint64_t)(uintptr_t)p;
  return st;
}

static void test_simulated_device_hands_out_page_aligned_ranges(void** state) {
  (void)state;
  struct sim_device d;
  gpumem_allocator_functions_t fns;
  sim_device_init(&d, 1 << 20, 0, &fns);
  assert_null(fns.reserve);
  uint64_t a = 0, b = 0;
  assert_int_equal(alloc(&fns, 100, &a), GPUMEM_SUCCESS);
  assert_int_equal(alloc(&fns, 5000, &b), GPUMEM_SUCCESS);
  assert_int_equal(a, kFirst);
  assert_int_equal(b, kFirst + 4096);
  assert_int_equal(d.reserved, 5100);
  assert_int_equal(alloc(&fns, (1 << 20) - 5099, &b), GPUMEM_ERROR_OUT_OF_MEMORY); /* past its capacity */
  assert_int_equal(d.reserved, 5100);
}

static void test_simulated_device_refuses_ranges_past_2_64(void** state) {
  (void)state;
  struct sim_device d;
  gpumem_allocator_functions_t fns;
  sim_device_init(&d, UINT64_MAX, 0, &fns);
  uint64_t a = 0;
  /* Every address up to the last page below 2^64. */
  const uint64_t most = 0 - kFirst - 4096;
  assert_int_equal(alloc(&fns, most, &a), GPUMEM_SUCCESS);
  assert_int_equal(a, kFirst);
  /* The last page would end at 2^64 itself, which is address 0: refused, however much room is left. */
  assert_int_equal(alloc(&fns, 4096, &a), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_int_equal(alloc(&fns, 1, &a), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_int_equal(d.reserved, most); /* the refusals took nothing */
  assert_int_equal(fns.free(fns.context, (void*)(uintptr_t)kFirst, most, -1, NULL), GPUMEM_SUCCESS);
  /* Freed memory comes back; addresses never do, so nothing of that size wraps around to 0. */
  assert_int_equal(alloc(&fns, most, &a), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_int_equal(alloc(&fns, UINT64_MAX, &a), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_int_equal(d.reserved, 0);
}

static void test_simulated_device_reserves_ranges_below_2_64(void** state) {
  (void)state;
  struct sim_device d;
  gpumem_allocator_functions_t fns;
  const uint64_t unit = 32 << 20;
  sim_device_init(&d, UINT64_MAX, unit, &fns);
  assert_int_equal(fns.map_unit, unit);
  /* The capacity in units: rounded down, as rounding it up would pass 2^64 (and wrap to 0). */
  assert_int_equal(fns.range_size, UINT64_MAX / unit * unit);
  void* p = NULL;
  assert_int_equal(fns.reserve(fns.context, fns.range_size, -1, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  const uint64_t half = 1ULL << 63;
  assert_int_equal(fns.reserve(fns.context, half, -1, &p), GPUMEM_SUCCESS);
  assert_int_equal((uint64_t)(uintptr_t)p, kFirst);
  assert_int_equal(fns.reserve(fns.context, half, -1, &p), GPUMEM_ERROR_OUT_OF_MEMORY); /* would end past 2^64 */
  assert_int_equal(fns.reserve(fns.context, half - kFirst - unit, -1, &p), GPUMEM_SUCCESS);
  assert_int_equal((uint64_t)(uintptr_t)p, kFirst + half);
  assert_int_equal(fns.reserve(fns.context, unit, -1, &p), GPUMEM_ERROR_OUT_OF_MEMORY); /* would end at 2^64 */
  assert_int_equal(fns.map(fns.context, (void*)(uintptr_t)kFirst, unit, -1), GPUMEM_SUCCESS);
  assert_int_equal(d.reserved, unit);
  /* A small capacity is a range of one unit. */
  sim_device_init(&d, 1000, unit, &fns);
  assert_int_equal(fns.range_size, unit);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_simulated_device_hands_out_page_aligned_ranges),
      cmocka_unit_test(test_simulated_device_refuses_ranges_past_2_64),
      cmocka_unit_test(test_simulated_device_reserves_ranges_below_2_64),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
