/* Stale handles: a destroyed handle of every type, and a removed id, stays refused with
 * GPUMEM_ERROR_INVALID_HANDLE once something new is made where it was, changes nothing, and the
 * new one keeps working. Run over the fake driver (tests/driver), whose arrays need no GPU. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <unistd.h>

#include "test_fake_cuda.h"

/* Makes up to this many new handles, looking for one at a destroyed handle's address. */
enum { kTries = 64 };

static gpumem_allocator_t* host(void) {
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_host(0, &a));
  return a;
}

static void assert_allocator_refused(gpumem_allocator_t* stale) {
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(stale, 64, NULL, &p), GPUMEM_ERROR_INVALID_HANDLE);
  assert_null(p);
  assert_detail_contains("it was destroyed");
  assert_status(gpumem_allocator_destroy(stale), GPUMEM_ERROR_INVALID_HANDLE);
  gpumem_allocator_stats_t s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  assert_status(gpumem_allocator_get_stats(stale, &s), GPUMEM_ERROR_INVALID_HANDLE);
}

/* The newest of up to kTries allocators made and destroyed after stale, kept live. */
typedef gpumem_allocator_t* (*make_fn)(gpumem_allocator_t* upstream);
static gpumem_allocator_t* make_host(gpumem_allocator_t* upstream) {
  (void)upstream;
  return host();
}
static gpumem_allocator_t* make_pool(gpumem_allocator_t* upstream) { return pool_over(upstream); }

static void check_allocator_kind(make_fn make) {
  gpumem_allocator_t* upstream = host();
  gpumem_allocator_t* stale = make(upstream);
  void* p = NULL;
  assert_ok(gpumem_alloc(stale, 100, NULL, &p));
  assert_ok(gpumem_free(stale, p, NULL));
  assert_ok(gpumem_allocator_destroy(stale));
  gpumem_allocator_t* fresh = NULL;
  for (int i = 0; i < kTries; ++i) {
    if (fresh) assert_ok(gpumem_allocator_destroy(fresh));
    fresh = make(upstream);
    if (fresh == stale) break;
  }
  assert_allocator_refused(stale);
  /* The new one saw nothing of the refused calls, and works. */
  const gpumem_allocator_stats_t s = stats_of(fresh);
  assert_int_equal(s.alloc_count, 0);
  assert_ok(gpumem_alloc(fresh, 100, NULL, &p));
  assert_ok(gpumem_free(fresh, p, NULL));
  assert_ok(gpumem_allocator_destroy(fresh));
  assert_ok(gpumem_allocator_destroy(upstream));
}

static void test_stale_handles_allocator(void** state) {
  (void)state;
  check_allocator_kind(make_host);
}

static void test_stale_handles_pool(void** state) {
  (void)state;
  check_allocator_kind(make_pool);
}

/* The fake device's arrays are 1 wide at most: the format tells them apart. */
static gpumem_array_t* array(int32_t format) {
  gpumem_array_desc_t desc = GPUMEM_ARRAY_DESC_INIT;
  desc.format = format;
  desc.channels = 1;
  desc.width = 1;
  gpumem_array_t* a = NULL;
  assert_ok(gpumem_array_create(&desc, &a));
  return a;
}

static int32_t format_of(const gpumem_array_t* a) {
  gpumem_array_desc_t desc = GPUMEM_ARRAY_DESC_INIT;
  assert_ok(gpumem_array_get_desc(a, &desc));
  return desc.format;
}

static void test_stale_handles_array(void** state) {
  (void)state;
  gpumem_array_t* stale = array(GPUMEM_FORMAT_F32);
  assert_int_equal(format_of(stale), GPUMEM_FORMAT_F32);
  assert_ok(gpumem_array_destroy(stale));
  gpumem_array_t* fresh = NULL;
  for (int i = 0; i < kTries; ++i) {
    if (fresh) assert_ok(gpumem_array_destroy(fresh));
    fresh = array(GPUMEM_FORMAT_U8);
    if (fresh == stale) break;
  }
  gpumem_array_desc_t desc = GPUMEM_ARRAY_DESC_INIT;
  assert_status(gpumem_array_get_desc(stale, &desc), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("is not a live gpumem array: it was destroyed");
  assert_status(gpumem_array_destroy(stale), GPUMEM_ERROR_INVALID_HANDLE);
  assert_int_equal(format_of(fresh), GPUMEM_FORMAT_U8);
  assert_ok(gpumem_array_destroy(fresh));
  assert_contexts_restored();
}

static void test_stale_handles_trace_and_reader(void** state) {
  (void)state;
  char dir[] = "/tmp/gpumem_stale_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[64];
  snprintf(path, sizeof path, "%s/t.trace", dir);
  gpumem_allocator_t* a = host();
  gpumem_trace_t* stale = NULL;
  assert_ok(gpumem_trace_start(a, path, 0, &stale));
  assert_ok(gpumem_trace_stop(stale));
  gpumem_trace_t* fresh = NULL;
  for (int i = 0; i < kTries; ++i) {
    if (fresh) assert_ok(gpumem_trace_stop(fresh));
    assert_ok(gpumem_trace_start(a, path, 0, &fresh));
    if (fresh == stale) break;
  }
  assert_status(gpumem_trace_stop(stale), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("it was destroyed");
  /* The new recording is still on: a second one is refused, and it records. */
  gpumem_trace_t* other = NULL;
  assert_status(gpumem_trace_start(a, path, 0, &other), GPUMEM_ERROR_BUSY);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 64, NULL, &p));
  assert_ok(gpumem_free(a, p, NULL));
  assert_ok(gpumem_trace_stop(fresh));

  gpumem_trace_reader_t* stale_reader = NULL;
  assert_ok(gpumem_trace_reader_open(path, &stale_reader));
  assert_ok(gpumem_trace_reader_close(stale_reader));
  gpumem_trace_reader_t* reader = NULL;
  for (int i = 0; i < kTries; ++i) {
    if (reader) assert_ok(gpumem_trace_reader_close(reader));
    assert_ok(gpumem_trace_reader_open(path, &reader));
    if (reader == stale_reader) break;
  }
  gpumem_trace_record_t record;
  memset(&record, 0, sizeof record);
  record.struct_size = sizeof record;
  bool has = true;
  assert_status(gpumem_trace_reader_next(stale_reader, &record, &has), GPUMEM_ERROR_INVALID_HANDLE);
  assert_false(has);
  assert_status(gpumem_trace_reader_close(stale_reader), GPUMEM_ERROR_INVALID_HANDLE);
  /* The refused calls read nothing of the new reader's: its first record is the allocation. */
  assert_ok(gpumem_trace_reader_next(reader, &record, &has));
  assert_true(has);
  assert_int_equal(record.size, 64);
  assert_ok(gpumem_trace_reader_close(reader));
  assert_ok(gpumem_allocator_destroy(a));
  unlink(path);
  assert_int_equal(rmdir(dir), 0);
}

static void count_hook(const gpumem_hook_info_t* info, void* user_data) {
  (void)info;
  ++*(int*)user_data;
}

/* A hook id is never given twice, by any allocator: a removed one, or one of another allocator's,
 * removes nothing. */
static void test_stale_handles_hook_id(void** state) {
  (void)state;
  gpumem_allocator_t* a = host();
  int a_calls = 0, b_calls = 0;
  uint64_t stale = 0;
  assert_ok(gpumem_allocator_add_hook(a, GPUMEM_HOOK_MALLOC_POST, count_hook, &a_calls, &stale));
  assert_ok(gpumem_allocator_remove_hook(a, stale));
  assert_ok(gpumem_allocator_destroy(a));
  gpumem_allocator_t* b = host();
  uint64_t fresh = 0;
  assert_ok(gpumem_allocator_add_hook(b, GPUMEM_HOOK_MALLOC_POST, count_hook, &b_calls, &fresh));
  assert_true(fresh != stale);
  assert_status(gpumem_allocator_remove_hook(b, stale), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("no hook with id");
  void* p = NULL;
  assert_ok(gpumem_alloc(b, 64, NULL, &p));
  assert_ok(gpumem_free(b, p, NULL));
  assert_int_equal(b_calls, 1);
  assert_int_equal(a_calls, 0);
  assert_ok(gpumem_allocator_remove_hook(b, fresh));
  assert_ok(gpumem_allocator_destroy(b));
}

static void nothing(int32_t device, size_t size, void* user_data) { (void)device, (void)size, (void)user_data; }

static void test_stale_handles_reclaim_id(void** state) {
  (void)state;
  uint64_t stale = 0, fresh = 0;
  assert_ok(gpumem_reclaim_add(nothing, NULL, &stale));
  assert_ok(gpumem_reclaim_remove(stale));
  assert_ok(gpumem_reclaim_add(nothing, NULL, &fresh));
  assert_true(fresh != stale);
  assert_status(gpumem_reclaim_remove(stale), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("no reclaim callback has id");
  assert_ok(gpumem_reclaim_remove(fresh));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stale_handles_allocator), cmocka_unit_test(test_stale_handles_pool),
      cmocka_unit_test(test_stale_handles_array),     cmocka_unit_test(test_stale_handles_trace_and_reader),
      cmocka_unit_test(test_stale_handles_hook_id),   cmocka_unit_test(test_stale_handles_reclaim_id),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
