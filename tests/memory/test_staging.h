/* What the staging tests share (test_copy_staging.c, test_copy_staging_edges.c): the staging
 * memory held, and device memory written and read only through pinned memory, which is never
 * staged, so that a fault of the staged path cannot hide itself. Include after test_cuda.h. */
#ifndef GPUMEM_TEST_STAGING_H
#define GPUMEM_TEST_STAGING_H

#include <string.h>

#include "test_bytes.h"
#include "test_cuda.h"

static size_t staging_held(void) {
  size_t held = (size_t)-1;
  assert_ok(gpumem_copy_staging_get_held(&held));
  return held;
}

#define BOUNCE_BYTES ((size_t)16 << 20)
static unsigned char* bounce;

static unsigned char* bounce_buffer(void) {
  if (!bounce) {
    void* p = NULL;
    assert_ok(gpumem_host_alloc(BOUNCE_BYTES, 0, &p));
    bounce = p;
  }
  return bounce;
}

static void device_write(unsigned char* dev, const unsigned char* bytes, size_t n) {
  unsigned char* b = bounce_buffer();
  for (size_t done = 0; done < n; done += BOUNCE_BYTES) {
    const size_t chunk = n - done < BOUNCE_BYTES ? n - done : BOUNCE_BYTES;
    memcpy(b, bytes + done, chunk);
    expect_ok(gpumem_copy(dev + done, b, chunk), "writing device memory through pinned memory");
  }
}

static void device_read(unsigned char* bytes, const unsigned char* dev, size_t n) {
  unsigned char* b = bounce_buffer();
  for (size_t done = 0; done < n; done += BOUNCE_BYTES) {
    const size_t chunk = n - done < BOUNCE_BYTES ? n - done : BOUNCE_BYTES;
    expect_ok(gpumem_copy(b, dev + done, chunk), "reading device memory through pinned memory");
    memcpy(bytes + done, b, chunk);
  }
}

static unsigned char* device_alloc(size_t n) { return memory_alloc(KIND_DEVICE, 0, n); }

/* stream NULL: the synchronous call; otherwise the _async call, then a wait for the stream. */
static void copy_1d(void* dst, const void* src, size_t n, gpumem_stream_t stream, const char* what) {
  if (stream) {
    expect_ok(gpumem_copy_async(dst, src, n, stream), what);
    test_stream_sync(stream);
  } else {
    expect_ok(gpumem_copy(dst, src, n), what);
  }
}

/* The group's teardown: the pinned buffer goes. */
static int group_teardown(void** state) {
  (void)state;
  const gpumem_status_t status = bounce ? gpumem_host_free(bounce) : GPUMEM_SUCCESS;
  bounce = NULL;
  return status == GPUMEM_SUCCESS ? 0 : -1;
}

#endif
