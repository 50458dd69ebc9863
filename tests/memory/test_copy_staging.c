/* 1D copies between device memory and plain (pageable) host memory, which gpumem stages through
 * its own page-locked buffers from a size on: every size around the threshold and well past it,
 * both directions, synchronous and on a stream, host pointers at every misalignment; the staging
 * memory held, within its limit and given back on release; stream order and the reuse of the host
 * side kept as the driver's pageable copies keep them; and the sides that are not staged. Device
 * memory is filled and read through pinned memory, which is never staged, so a fault of the staged
 * path cannot hide itself. */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "test_bytes.h"
#include "test_cuda.h"
#include "test_staging.h"

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

static void expect_held_within_limit(const char* when) {
  const size_t held = staging_held();
  if (held == 0 || held > GPUMEM_COPY_STAGING_LIMIT) {
    print_error("%s: %zu bytes of staging memory held, expected more than 0 and at most %zu\n", when, held,
                GPUMEM_COPY_STAGING_LIMIT);
    fail();
  }
}

/* The device side starts this far into its buffer, and its buffer extends this far past it. */
#define DEV_OFFSET 5
#define DEV_MARGIN 64
/* Poison this wide before and after a host destination. */
#define HOST_MARGIN 64

/* Plain host memory at malloc + host_offset to device memory; the whole device buffer is checked. */
static void pageable_to_device(size_t n, size_t host_offset, gpumem_stream_t stream, unsigned seed) {
  char what[160];
  snprintf(what, sizeof what, "%s copy of %zu bytes from plain host memory (malloc + %zu) to device memory",
           stream ? "stream" : "synchronous", n, host_offset);
  const size_t dn = n + DEV_OFFSET + DEV_MARGIN;
  unsigned char* host = checked_malloc(n + host_offset);
  unsigned char* dev = device_alloc(dn);
  unsigned char* expected = checked_malloc(dn);
  unsigned char* got = checked_malloc(dn);
  fill_pattern(host + host_offset, n, seed);
  fill_pattern(expected, dn, seed + 1);
  /* Each byte of the region differs from what is to arrive, so even a 1-byte copy must happen. */
  for (size_t i = 0; i < n; i++) expected[DEV_OFFSET + i] = (unsigned char)~host[host_offset + i];
  device_write(dev, expected, dn);

  copy_1d(dev + DEV_OFFSET, host + host_offset, n, stream, what);

  memcpy(expected + DEV_OFFSET, host + host_offset, n);
  device_read(got, dev, dn);
  expect_bytes(got, expected, dn, what);
  fill_pattern(expected, n, seed);
  expect_bytes(host + host_offset, expected, n, "the source after the copy");
  free(host);
  free(expected);
  free(got);
  assert_ok(gpumem_device_free(dev));
}

/* Device memory to plain host memory at malloc + HOST_MARGIN + host_offset; the whole host buffer,
 * poisoned margins included, is checked. */
static void device_to_pageable(size_t n, size_t host_offset, gpumem_stream_t stream, unsigned seed) {
  char what[160];
  snprintf(what, sizeof what, "%s copy of %zu bytes from device memory to plain host memory (malloc + %zu)",
           stream ? "stream" : "synchronous", n, HOST_MARGIN + host_offset);
  const size_t dn = n + DEV_OFFSET + DEV_MARGIN;
  const size_t hn = HOST_MARGIN + host_offset + n + HOST_MARGIN;
  unsigned char* source = checked_malloc(dn);
  unsigned char* dev = device_alloc(dn);
  unsigned char* host = checked_malloc(hn);
  unsigned char* expected = checked_malloc(hn);
  fill_pattern(source, dn, seed);
  device_write(dev, source, dn);
  fill_pattern(expected, hn, seed + 1);
  for (size_t i = 0; i < n; i++) expected[HOST_MARGIN + host_offset + i] = (unsigned char)~source[DEV_OFFSET + i];
  memcpy(host, expected, hn);

  copy_1d(host + HOST_MARGIN + host_offset, dev + DEV_OFFSET, n, stream, what);

  memcpy(expected + HOST_MARGIN + host_offset, source + DEV_OFFSET, n);
  expect_bytes(host, expected, hn, what);
  free(source);
  free(host);
  free(expected);
  assert_ok(gpumem_device_free(dev));
}

static const size_t kSizes[] = {
    1, 4095, ((size_t)1 << 20) - 1, ((size_t)1 << 20) + 7, ((size_t)8 << 20) + 3, ((size_t)64 << 20) + 5,
};
#define SIZE_COUNT (sizeof kSizes / sizeof kSizes[0])
#define BIG ((size_t)64 << 20)

/* Every size in both directions; the host offsets run through 1 to 7 across sizes and directions. */
static void every_size_both_directions(gpumem_stream_t stream, unsigned seed) {
  for (size_t i = 0; i < SIZE_COUNT; i++) {
    pageable_to_device(kSizes[i], 1 + (2 * i) % 7, stream, seed + 4 * (unsigned)i);
    device_to_pageable(kSizes[i], 1 + (2 * i + 1) % 7, stream, seed + 4 * (unsigned)i + 2);
  }
}

/* Several large copies on the stream ahead of the work under test, so that this work starts well
 * after its call returns: work that did not wait for the stream would run first and show. */
#define DELAY_BYTES ((size_t)256 << 20)
#define DELAY_COPIES 8

typedef struct {
  unsigned char* a;
  unsigned char* b;
} delay_t;

static delay_t delay_create(void) {
  delay_t d = {device_alloc(DELAY_BYTES), device_alloc(DELAY_BYTES)};
  expect_ok(gpumem_memset(d.a, 0, 1, DELAY_BYTES), "clearing the delay buffer");
  return d;
}

static void delay_queue(const delay_t* d, gpumem_stream_t stream) {
  for (int i = 0; i < DELAY_COPIES; i++)
    expect_ok(gpumem_copy_async(i % 2 ? d->a : d->b, i % 2 ? d->b : d->a, DELAY_BYTES, stream),
              "queueing a device to device copy");
}

static void delay_destroy(delay_t* d) {
  assert_ok(gpumem_device_free(d->a));
  assert_ok(gpumem_device_free(d->b));
}

/* ---------------------------------------------------------------------------------------------
 * Without a GPU too
 * ------------------------------------------------------------------------------------------- */

static void test_copy_staging_get_held_null_refused(void** state) {
  (void)state;
  assert_status(gpumem_copy_staging_get_held(NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_bytes");
}

/* With no copy running, a release leaves nothing held, and a second release is harmless. */
static void test_copy_staging_release_leaves_nothing_held(void** state) {
  (void)state;
  assert_ok(gpumem_copy_staging_release());
  assert_int_equal(staging_held(), 0);
  assert_ok(gpumem_copy_staging_release());
  assert_int_equal(staging_held(), 0);
}

/* ---------------------------------------------------------------------------------------------
 * Copies with plain host memory (GPU)
 * ------------------------------------------------------------------------------------------- */

static void test_copy_staging_pageable_every_size_sync(void** state) {
  (void)state;
  require_gpu();
  every_size_both_directions(NULL, 100);
}

static void test_copy_staging_pageable_every_size_async(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  every_size_both_directions(stream, 200);
  test_stream_destroy(stream);
}

/* ---------------------------------------------------------------------------------------------
 * Staging memory held (GPU)
 * ------------------------------------------------------------------------------------------- */

static void test_copy_staging_held_within_limit_after_large_copies(void** state) {
  (void)state;
  require_gpu();
  assert_ok(gpumem_copy_staging_release());
  assert_int_equal(staging_held(), 0);

  pageable_to_device(BIG + 5, 3, NULL, 300);
  expect_held_within_limit("after a synchronous 64 MiB copy from plain host memory");
  device_to_pageable(BIG + 5, 5, NULL, 310);
  expect_held_within_limit("after a synchronous 64 MiB copy to plain host memory");

  /* While a stream copy may still be running, and after it. */
  gpumem_stream_t stream = test_stream_create(0);
  unsigned char* dev = device_alloc(BIG);
  unsigned char* host = checked_malloc(BIG + 1);
  fill_pattern(host + 1, BIG, 320);
  expect_ok(gpumem_copy_async(dev, host + 1, BIG, stream), "64 MiB stream copy from plain host memory");
  const size_t held = staging_held();
  if (held > GPUMEM_COPY_STAGING_LIMIT) {
    print_error("%zu bytes of staging memory held during a stream copy, more than the limit of %zu\n", held,
                GPUMEM_COPY_STAGING_LIMIT);
    fail();
  }
  test_stream_sync(stream);
  expect_held_within_limit("after a 64 MiB stream copy from plain host memory");
  free(host);
  assert_ok(gpumem_device_free(dev));
  test_stream_destroy(stream);
}

static void test_copy_staging_release_after_large_copy_leaves_nothing_held(void** state) {
  (void)state;
  require_gpu();
  pageable_to_device(BIG + 5, 7, NULL, 400);
  expect_held_within_limit("after a 64 MiB copy from plain host memory");
  assert_ok(gpumem_copy_staging_release());
  assert_int_equal(staging_held(), 0);
}

/* Buffers freed by a release are made again on the next copy. */
static void test_copy_staging_copies_work_after_release(void** state) {
  (void)state;
  require_gpu();
  pageable_to_device(BIG + 5, 1, NULL, 500);
  assert_ok(gpumem_copy_staging_release());
  assert_int_equal(staging_held(), 0);
  pageable_to_device(BIG + 5, 2, NULL, 510);
  device_to_pageable(BIG + 5, 6, NULL, 520);
  expect_held_within_limit("after 64 MiB copies that followed a release");

  assert_ok(gpumem_copy_staging_release());
  gpumem_stream_t stream = test_stream_create(0);
  device_to_pageable(((size_t)8 << 20) + 3, 3, stream, 530);
  pageable_to_device(((size_t)8 << 20) + 3, 4, stream, 540);
  test_stream_destroy(stream);
}

/* ---------------------------------------------------------------------------------------------
 * Stream order and the host side on return (GPU)
 * ------------------------------------------------------------------------------------------- */

/* A copy to plain host memory sees the memset queued before it on its stream, even though the
 * memset starts only after a long wait. */
static void test_copy_staging_async_to_pageable_sees_earlier_memset(void** state) {
  (void)state;
  require_gpu();
  const size_t n = ((size_t)16 << 20) + 3;
  const size_t dn = n + DEV_OFFSET + DEV_MARGIN;
  const size_t hn = HOST_MARGIN + 1 + n + HOST_MARGIN;
  gpumem_stream_t stream = test_stream_create(0);
  delay_t delay = delay_create();
  unsigned char* dev = device_alloc(dn);
  unsigned char* host = checked_malloc(hn);
  unsigned char* expected = checked_malloc(hn);
  /* The device bytes before the memset are a pattern, so a copy that ran early shows them. */
  unsigned char* source = checked_malloc(dn);
  fill_pattern(source, dn, 600);
  device_write(dev, source, dn);
  fill_pattern(expected, hn, 601);
  memcpy(host, expected, hn);

  delay_queue(&delay, stream);
  expect_ok(gpumem_memset_async(dev + DEV_OFFSET, 0xC3, 1, n, stream), "memset_async of device memory");
  expect_ok(gpumem_copy_async(host + HOST_MARGIN + 1, dev + DEV_OFFSET, n, stream),
            "stream copy from device memory to plain host memory after a memset");
  test_stream_sync(stream);

  memset(expected + HOST_MARGIN + 1, 0xC3, n);
  expect_bytes(host, expected, hn, "plain host memory after a memset and a copy on one stream");
  free(source);
  free(host);
  free(expected);
  assert_ok(gpumem_device_free(dev));
  delay_destroy(&delay);
  test_stream_destroy(stream);
}

/* Once the call returns, the host source may be reused: what arrives is what it held at the call,
 * even though the copy's turn on the stream comes only after a long wait. */
static void test_copy_staging_async_from_pageable_source_reusable_on_return(void** state) {
  (void)state;
  require_gpu();
  const size_t n = ((size_t)16 << 20) + 3;
  const size_t dn = n + DEV_OFFSET + DEV_MARGIN;
  gpumem_stream_t stream = test_stream_create(0);
  delay_t delay = delay_create();
  unsigned char* dev = device_alloc(dn);
  unsigned char* host = checked_malloc(n + 3);
  unsigned char* expected = checked_malloc(dn);
  unsigned char* got = checked_malloc(dn);
  fill_pattern(expected, dn, 700);
  device_write(dev, expected, dn);
  fill_pattern(host + 3, n, 701);
  memcpy(expected + DEV_OFFSET, host + 3, n);

  delay_queue(&delay, stream);
  expect_ok(gpumem_copy_async(dev + DEV_OFFSET, host + 3, n, stream),
            "stream copy from plain host memory to device memory behind a long wait");
  fill_pattern(host + 3, n, 702);
  test_stream_sync(stream);

  device_read(got, dev, dn);
  expect_bytes(got, expected, dn, "device memory after a stream copy whose host source was then overwritten");
  free(host);
  free(expected);
  free(got);
  assert_ok(gpumem_device_free(dev));
  delay_destroy(&delay);
  test_stream_destroy(stream);
}

/* ---------------------------------------------------------------------------------------------
 * Plain host memory with managed and pinned memory: not staged, still right (GPU)
 * ------------------------------------------------------------------------------------------- */

/* Both directions between plain host memory and the other kind, every byte of each destination
 * buffer checked; the host reaches managed and pinned memory directly. */
static void pageable_and_other(kind_t kind, size_t n, gpumem_stream_t stream, unsigned seed) {
  char what[160];
  const size_t on = DEV_OFFSET + n + DEV_MARGIN;
  const size_t hn = HOST_MARGIN + 3 + n + HOST_MARGIN;
  unsigned char* other = memory_alloc(kind, 0, on);
  unsigned char* host = checked_malloc(hn);
  unsigned char* expected = checked_malloc(hn > on ? hn : on);

  fill_pattern(host, hn, seed);
  fill_pattern(other, on, seed + 1);
  memcpy(expected, other, on);
  memcpy(expected + DEV_OFFSET, host + HOST_MARGIN + 3, n);
  snprintf(what, sizeof what, "%s copy of %zu bytes from plain host to %s memory", stream ? "stream" : "synchronous", n,
           kind_name(kind));
  copy_1d(other + DEV_OFFSET, host + HOST_MARGIN + 3, n, stream, what);
  expect_bytes(other, expected, on, what);

  fill_pattern(host, hn, seed + 2);
  fill_pattern(other, on, seed + 3);
  memcpy(expected, host, hn);
  memcpy(expected + HOST_MARGIN + 3, other + DEV_OFFSET, n);
  snprintf(what, sizeof what, "%s copy of %zu bytes from %s memory to plain host", stream ? "stream" : "synchronous", n,
           kind_name(kind));
  copy_1d(host + HOST_MARGIN + 3, other + DEV_OFFSET, n, stream, what);
  expect_bytes(host, expected, hn, what);

  free(host);
  free(expected);
  memory_free(kind, other);
}

/* 1 MiB + 7 and 16 MiB + 3 bytes, synchronous and then on a stream; seeds seed to seed + 30. */
static void pageable_and_other_every_form(kind_t kind, unsigned seed) {
  gpumem_stream_t stream = test_stream_create(0);
  pageable_and_other(kind, ((size_t)1 << 20) + 7, NULL, seed);
  pageable_and_other(kind, ((size_t)16 << 20) + 3, NULL, seed + 10);
  pageable_and_other(kind, ((size_t)1 << 20) + 7, stream, seed + 20);
  pageable_and_other(kind, ((size_t)16 << 20) + 3, stream, seed + 30);
  test_stream_destroy(stream);
}

static void test_copy_staging_pageable_and_managed(void** state) {
  (void)state;
  require_gpu();
  pageable_and_other_every_form(KIND_MANAGED, 800);
}

static void test_copy_staging_pageable_and_pinned(void** state) {
  (void)state;
  require_gpu();
  pageable_and_other_every_form(KIND_PINNED, 900);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_copy_staging_get_held_null_refused),
      cmocka_unit_test(test_copy_staging_release_leaves_nothing_held),
      cmocka_unit_test(test_copy_staging_pageable_every_size_sync),
      cmocka_unit_test(test_copy_staging_pageable_every_size_async),
      cmocka_unit_test(test_copy_staging_held_within_limit_after_large_copies),
      cmocka_unit_test(test_copy_staging_release_after_large_copy_leaves_nothing_held),
      cmocka_unit_test(test_copy_staging_copies_work_after_release),
      cmocka_unit_test(test_copy_staging_async_to_pageable_sees_earlier_memset),
      cmocka_unit_test(test_copy_staging_async_from_pageable_source_reusable_on_return),
      cmocka_unit_test(test_copy_staging_pageable_and_managed),
      cmocka_unit_test(test_copy_staging_pageable_and_pinned),
  };
  return cmocka_run_group_tests(tests, NULL, group_teardown);
}
