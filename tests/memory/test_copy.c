/* Memset and 1D copies (copy.h): argument checks everywhere, and on a GPU every pair of kinds of
 * memory, synchronous and on a caller's stream, checked byte for byte. */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "test_bytes.h"
#include "test_cuda.h"

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

/* Both the synchronous and the stream form (on the legacy stream) must refuse the same way. */
static void expect_memset_refused(void* dst, uint32_t value, uint32_t element_size, size_t count, gpumem_status_t want,
                                  const char* detail) {
  char what[160];
  snprintf(what, sizeof what, "gpumem_memset(%p, 0x%x, %u, %zu)", dst, value, element_size, count);
  expect_refusal(gpumem_memset(dst, value, element_size, count), want, detail, what);
  snprintf(what, sizeof what, "gpumem_memset_async(%p, 0x%x, %u, %zu, NULL)", dst, value, element_size, count);
  expect_refusal(gpumem_memset_async(dst, value, element_size, count, NULL), want, detail, what);
}

static void expect_copy_refused(void* dst, const void* src, size_t size, gpumem_status_t want, const char* detail) {
  char what[160];
  snprintf(what, sizeof what, "gpumem_copy(%p, %p, %zu)", dst, src, size);
  expect_refusal(gpumem_copy(dst, src, size), want, detail, what);
  snprintf(what, sizeof what, "gpumem_copy_async(%p, %p, %zu, NULL)", dst, src, size);
  expect_refusal(gpumem_copy_async(dst, src, size, NULL), want, detail, what);
}

/* The highest 16-byte-aligned address: any range of 32 bytes from it wraps around. */
#define WRAPPING_ADDRESS ((void*)(uintptr_t)(UINTPTR_MAX - 15))

/* ---------------------------------------------------------------------------------------------
 * Bad input (no driver needed: refused before the driver is touched)
 * ------------------------------------------------------------------------------------------- */

static void test_memset_null_dst_refused(void** state) {
  (void)state;
  expect_memset_refused(NULL, 0, 1, 16, GPUMEM_ERROR_INVALID_ARGUMENT, "dst is NULL");
  expect_memset_refused(NULL, 0, 4, 16, GPUMEM_ERROR_INVALID_ARGUMENT, "dst is NULL");
  /* A count of zero does not excuse a NULL pointer. */
  expect_memset_refused(NULL, 0, 1, 0, GPUMEM_ERROR_INVALID_ARGUMENT, "dst is NULL");
}

static void test_memset_bad_element_size_refused(void** state) {
  (void)state;
  uint32_t storage[16];
  unsigned char before[sizeof storage];
  fill_pattern(before, sizeof before, 1);
  memcpy(storage, before, sizeof storage);
  const uint32_t sizes[] = {0, 3, 8};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char detail[64];
    snprintf(detail, sizeof detail, "element_size %u is not 1, 2 or 4", sizes[i]);
    expect_memset_refused(storage, 0, sizes[i], 4, GPUMEM_ERROR_INVALID_ARGUMENT, detail);
  }
  expect_bytes((const unsigned char*)storage, before, sizeof before, "host buffer after refused memsets");
}

static void test_memset_value_too_wide_refused(void** state) {
  (void)state;
  uint32_t storage[16];
  unsigned char before[sizeof storage];
  fill_pattern(before, sizeof before, 2);
  memcpy(storage, before, sizeof storage);
  expect_memset_refused(storage, 0x100, 1, 4, GPUMEM_ERROR_INVALID_ARGUMENT, "does not fit");
  expect_memset_refused(storage, 0xFFFFFFFFu, 1, 4, GPUMEM_ERROR_INVALID_ARGUMENT, "does not fit");
  expect_memset_refused(storage, 0x10000, 2, 4, GPUMEM_ERROR_INVALID_ARGUMENT, "does not fit");
  expect_bytes((const unsigned char*)storage, before, sizeof before, "host buffer after refused memsets");
}

/* The widest value of each size is accepted; a count of zero then returns before the driver. */
static void test_memset_widest_values_accepted(void** state) {
  (void)state;
  uint32_t storage[4];
  unsigned char before[sizeof storage];
  fill_pattern(before, sizeof before, 3);
  memcpy(storage, before, sizeof storage);
  expect_ok(gpumem_memset(storage, 0xFF, 1, 0), "gpumem_memset 0xFF, 1 byte, count 0");
  expect_ok(gpumem_memset(storage, 0xFFFF, 2, 0), "gpumem_memset 0xFFFF, 2 bytes, count 0");
  expect_ok(gpumem_memset(storage, 0xFFFFFFFFu, 4, 0), "gpumem_memset 0xFFFFFFFF, 4 bytes, count 0");
  expect_ok(gpumem_memset_async(storage, 0xFF, 1, 0, NULL), "gpumem_memset_async 0xFF, 1 byte, count 0");
  expect_ok(gpumem_memset_async(storage, 0xFFFF, 2, 0, NULL), "gpumem_memset_async 0xFFFF, 2 bytes, count 0");
  expect_ok(gpumem_memset_async(storage, 0xFFFFFFFFu, 4, 0, NULL), "gpumem_memset_async 0xFFFFFFFF, count 0");
  expect_bytes((const unsigned char*)storage, before, sizeof before, "host buffer after empty memsets");
}

static void test_memset_misaligned_dst_refused(void** state) {
  (void)state;
  uint32_t storage[16];
  unsigned char* base = (unsigned char*)storage;
  unsigned char before[sizeof storage];
  fill_pattern(before, sizeof before, 4);
  memcpy(storage, before, sizeof storage);
  expect_memset_refused(base + 1, 0x1234, 2, 4, GPUMEM_ERROR_INVALID_ARGUMENT, "not aligned");
  expect_memset_refused(base + 1, 0x12345678, 4, 4, GPUMEM_ERROR_INVALID_ARGUMENT, "not aligned");
  expect_memset_refused(base + 2, 0x12345678, 4, 4, GPUMEM_ERROR_INVALID_ARGUMENT, "not aligned");
  expect_memset_refused(base + 3, 0x12345678, 4, 4, GPUMEM_ERROR_INVALID_ARGUMENT, "not aligned");
  expect_bytes(base, before, sizeof before, "host buffer after refused memsets");
}

static void test_memset_count_overflow_refused(void** state) {
  (void)state;
  uint32_t storage[4];
  expect_memset_refused(storage, 0, 4, SIZE_MAX / 2 + 1, GPUMEM_ERROR_INVALID_ARGUMENT, "overflow");
  expect_memset_refused(storage, 0, 4, SIZE_MAX / 4 + 1, GPUMEM_ERROR_INVALID_ARGUMENT, "overflow");
  expect_memset_refused(storage, 0, 2, SIZE_MAX / 2 + 1, GPUMEM_ERROR_INVALID_ARGUMENT, "overflow");
}

static void test_memset_wrapping_range_refused(void** state) {
  (void)state;
  expect_memset_refused(WRAPPING_ADDRESS, 0, 4, 8, GPUMEM_ERROR_INVALID_ARGUMENT, "wraps around");
  expect_memset_refused(WRAPPING_ADDRESS, 0, 1, 32, GPUMEM_ERROR_INVALID_ARGUMENT, "wraps around");
}

static void test_memset_zero_count_writes_nothing(void** state) {
  (void)state;
  uint32_t storage[16];
  unsigned char before[sizeof storage];
  fill_pattern(before, sizeof before, 5);
  memcpy(storage, before, sizeof storage);
  for (uint32_t element_size = 1; element_size <= 4; element_size *= 2) {
    expect_ok(gpumem_memset(storage, 0, element_size, 0), "gpumem_memset count 0");
    expect_ok(gpumem_memset_async(storage, 0, element_size, 0, NULL), "gpumem_memset_async count 0");
  }
  expect_bytes((const unsigned char*)storage, before, sizeof before, "host buffer after empty memsets");
}

static void test_copy_null_pointers_refused(void** state) {
  (void)state;
  unsigned char buffer[64];
  unsigned char before[sizeof buffer];
  fill_pattern(before, sizeof before, 6);
  memcpy(buffer, before, sizeof buffer);
  expect_copy_refused(NULL, buffer, 16, GPUMEM_ERROR_INVALID_ARGUMENT, "dst is NULL");
  expect_copy_refused(buffer, NULL, 16, GPUMEM_ERROR_INVALID_ARGUMENT, "src is NULL");
  expect_copy_refused(NULL, NULL, 16, GPUMEM_ERROR_INVALID_ARGUMENT, "is NULL");
  /* A size of zero does not excuse a NULL pointer. */
  expect_copy_refused(NULL, buffer, 0, GPUMEM_ERROR_INVALID_ARGUMENT, "dst is NULL");
  expect_copy_refused(buffer, NULL, 0, GPUMEM_ERROR_INVALID_ARGUMENT, "src is NULL");
  expect_bytes(buffer, before, sizeof before, "host buffer after refused copies");
}

/* Overlap is refused before the driver is asked, in both directions and for a single shared byte;
 * ranges that only touch are fine (checked on the GPU by the pair tests). */
static void test_copy_overlapping_ranges_refused(void** state) {
  (void)state;
  unsigned char buffer[64];
  unsigned char before[sizeof buffer];
  fill_pattern(before, sizeof before, 8);
  memcpy(buffer, before, sizeof buffer);
  expect_copy_refused(buffer + 8, buffer, 16, GPUMEM_ERROR_INVALID_ARGUMENT, "overlap");
  expect_copy_refused(buffer, buffer + 8, 16, GPUMEM_ERROR_INVALID_ARGUMENT, "overlap");
  expect_copy_refused(buffer, buffer, 16, GPUMEM_ERROR_INVALID_ARGUMENT, "16 bytes");
  expect_copy_refused(buffer + 15, buffer, 16, GPUMEM_ERROR_INVALID_ARGUMENT, "overlap");
  expect_bytes(buffer, before, sizeof before, "host buffer after refused copies");
}

static void test_copy_wrapping_range_refused(void** state) {
  (void)state;
  unsigned char buffer[64];
  unsigned char before[sizeof buffer];
  fill_pattern(before, sizeof before, 7);
  memcpy(buffer, before, sizeof buffer);
  expect_copy_refused(WRAPPING_ADDRESS, buffer, 32, GPUMEM_ERROR_INVALID_ARGUMENT, "dst range");
  expect_copy_refused(WRAPPING_ADDRESS, buffer, 32, GPUMEM_ERROR_INVALID_ARGUMENT, "wraps around");
  expect_copy_refused(buffer, WRAPPING_ADDRESS, 32, GPUMEM_ERROR_INVALID_ARGUMENT, "src range");
  expect_copy_refused(buffer, WRAPPING_ADDRESS, 32, GPUMEM_ERROR_INVALID_ARGUMENT, "wraps around");
  expect_copy_refused(buffer, WRAPPING_ADDRESS, SIZE_MAX, GPUMEM_ERROR_INVALID_ARGUMENT, "wraps around");
  expect_bytes(buffer, before, sizeof before, "host buffer after refused copies");
}

static void test_copy_zero_bytes_writes_nothing(void** state) {
  (void)state;
  unsigned char dst[64];
  unsigned char src[64];
  unsigned char before[sizeof dst];
  fill_pattern(before, sizeof before, 8);
  fill_pattern(src, sizeof src, 9);
  memcpy(dst, before, sizeof dst);
  expect_ok(gpumem_copy(dst, src, 0), "gpumem_copy size 0");
  expect_ok(gpumem_copy_async(dst, src, 0, NULL), "gpumem_copy_async size 0");
  expect_ok(gpumem_copy_async(dst, src, 0, GPUMEM_STREAM_PER_THREAD), "gpumem_copy_async size 0, per-thread");
  expect_bytes(dst, before, sizeof before, "host buffer after empty copies");
}

/* ---------------------------------------------------------------------------------------------
 * Buffers of every kind (GPU)
 * ------------------------------------------------------------------------------------------- */

typedef struct {
  kind_t kind;
  unsigned char* ptr;
  size_t size;
} buffer_t;

static buffer_t buffer_create(kind_t kind, size_t size) {
  const buffer_t b = {kind, memory_alloc(kind, 0, size), size};
  return b;
}

static void buffer_destroy(buffer_t* b) {
  memory_free(b->kind, b->ptr);
  b->ptr = NULL;
}

/* The host reaches every kind but device memory directly; device memory goes through a plain
 * host buffer and a synchronous copy. */
static void buffer_write(const buffer_t* b, size_t offset, const unsigned char* src, size_t n) {
  if (b->kind == KIND_DEVICE)
    expect_ok(gpumem_copy(b->ptr + offset, src, n), "filling device memory from plain host memory");
  else
    memcpy(b->ptr + offset, src, n);
}

static void buffer_read(const buffer_t* b, size_t offset, unsigned char* dst, size_t n) {
  if (b->kind == KIND_DEVICE)
    expect_ok(gpumem_copy(dst, b->ptr + offset, n), "reading device memory into plain host memory");
  else
    memcpy(dst, b->ptr + offset, n);
}

/* Synchronizes a default stream (NULL, legacy, per-thread), which needs a current context. */
static void default_stream_sync(gpumem_stream_t stream) {
  test_cu_push(0);
  test_stream_sync(stream);
  test_cu_pop();
}

/* ---------------------------------------------------------------------------------------------
 * Copies between every pair of kinds (GPU)
 * ------------------------------------------------------------------------------------------- */

/* Odd offsets and an odd length, so no copy is accidentally aligned to anything. */
#define PAIR_BUFFER 4096
#define PAIR_SRC_OFFSET 123
#define PAIR_DST_OFFSET 257
#define PAIR_BYTES 3001

static void copy_every_pair(gpumem_stream_t stream) {
  buffer_t src[KIND_COUNT];
  buffer_t dst[KIND_COUNT];
  for (int k = 0; k < KIND_COUNT; k++) {
    src[k] = buffer_create((kind_t)k, PAIR_BUFFER);
    dst[k] = buffer_create((kind_t)k, PAIR_BUFFER);
  }
  unsigned char* source = checked_malloc(PAIR_BUFFER);
  unsigned char* before = checked_malloc(PAIR_BUFFER);
  unsigned char* expected = checked_malloc(PAIR_BUFFER);
  unsigned char* got = checked_malloc(PAIR_BUFFER);

  unsigned seed = 100;
  for (int from = 0; from < KIND_COUNT; from++) {
    for (int to = 0; to < KIND_COUNT; to++) {
      char what[160];
      snprintf(what, sizeof what, "%s copy from %s to %s", stream ? "stream" : "synchronous", kind_name((kind_t)from),
               kind_name((kind_t)to));
      /* A fresh pattern on each side for each pair, so data left by an earlier pair cannot pass. */
      fill_pattern(source, PAIR_BUFFER, seed++);
      fill_pattern(before, PAIR_BUFFER, seed++);
      buffer_write(&src[from], 0, source, PAIR_BUFFER);
      buffer_write(&dst[to], 0, before, PAIR_BUFFER);

      unsigned char* d = dst[to].ptr + PAIR_DST_OFFSET;
      const unsigned char* s = src[from].ptr + PAIR_SRC_OFFSET;
      if (stream) {
        expect_ok(gpumem_copy_async(d, s, PAIR_BYTES, stream), what);
        test_stream_sync(stream);
      } else {
        expect_ok(gpumem_copy(d, s, PAIR_BYTES), what);
      }

      memcpy(expected, before, PAIR_BUFFER);
      memcpy(expected + PAIR_DST_OFFSET, source + PAIR_SRC_OFFSET, PAIR_BYTES);
      buffer_read(&dst[to], 0, got, PAIR_BUFFER);
      expect_bytes(got, expected, PAIR_BUFFER, what);
      buffer_read(&src[from], 0, got, PAIR_BUFFER);
      expect_bytes(got, source, PAIR_BUFFER, what);
    }
  }

  free(source);
  free(before);
  free(expected);
  free(got);
  for (int k = 0; k < KIND_COUNT; k++) {
    buffer_destroy(&src[k]);
    buffer_destroy(&dst[k]);
  }
}

static void test_copy_every_pair_of_kinds(void** state) {
  (void)state;
  require_gpu();
  copy_every_pair(NULL);
}

static void test_copy_async_every_pair_of_kinds(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  copy_every_pair(stream);
  test_stream_destroy(stream);
}

/* The default streams by name, each synchronized before the result is read. */
static void test_copy_async_default_streams(void** state) {
  (void)state;
  require_gpu();
  const size_t n = 8192;
  buffer_t device = buffer_create(KIND_DEVICE, n);
  buffer_t pinned = buffer_create(KIND_PINNED, n);
  unsigned char* source = checked_malloc(n);
  const gpumem_stream_t streams[] = {NULL, GPUMEM_STREAM_LEGACY, GPUMEM_STREAM_PER_THREAD};
  const char* const names[] = {"NULL", "GPUMEM_STREAM_LEGACY", "GPUMEM_STREAM_PER_THREAD"};
  for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++) {
    char what[96];
    snprintf(what, sizeof what, "device to pinned copy on %s", names[i]);
    fill_pattern(source, n, 200 + (unsigned)i);
    buffer_write(&device, 0, source, n);
    memset(pinned.ptr, 0, n);
    expect_ok(gpumem_copy_async(pinned.ptr, device.ptr, n, streams[i]), what);
    default_stream_sync(streams[i]);
    expect_bytes(pinned.ptr, source, n, what);
  }
  free(source);
  buffer_destroy(&device);
  buffer_destroy(&pinned);
}

/* Memory from a CUDA pool, allocated, used and freed in the order of one stream. */
static void test_copy_async_stream_ordered_device_memory(void** state) {
  (void)state;
  require_gpu();
  const size_t n = 65536;
  gpumem_stream_t stream = test_stream_create(0);
  buffer_t in = buffer_create(KIND_PINNED, n);
  buffer_t out = buffer_create(KIND_PINNED, n);
  fill_pattern(in.ptr, n, 250);
  memset(out.ptr, 0, n);
  void* device = NULL;
  assert_ok(gpumem_device_alloc_from_pool(test_default_pool(0), n, stream, &device));
  expect_ok(gpumem_copy_async(device, in.ptr, n, stream), "pinned to pool memory");
  expect_ok(gpumem_copy_async(out.ptr, device, n, stream), "pool memory to pinned");
  assert_ok(gpumem_device_free_async(device, stream));
  test_stream_sync(stream);
  expect_bytes(out.ptr, in.ptr, n, "pinned to pool memory and back");
  buffer_destroy(&in);
  buffer_destroy(&out);
  test_stream_destroy(stream);
}

/* Large enough that the driver splits the transfer; a lost or misplaced piece shows in the bytes. */
static void test_copy_64_mib_device_to_device(void** state) {
  (void)state;
  require_gpu();
  const size_t n = (size_t)64 << 20;
  buffer_t a = buffer_create(KIND_DEVICE, n);
  buffer_t b = buffer_create(KIND_DEVICE, n);
  uint32_t* source = checked_malloc(n);
  uint32_t* got = checked_malloc(n);
  for (size_t i = 0; i < n / 4; i++) source[i] = (uint32_t)i * 2654435761u ^ 0xA5A5A5A5u;
  memset(got, 0, n);
  expect_ok(gpumem_copy(a.ptr, source, n), "filling 64 MiB of device memory");
  expect_ok(gpumem_memset(b.ptr, 0xEE, 1, n), "clearing 64 MiB of device memory");
  expect_ok(gpumem_copy(b.ptr, a.ptr, n), "64 MiB device to device copy");
  expect_ok(gpumem_copy(got, b.ptr, n), "reading 64 MiB of device memory");
  expect_bytes((const unsigned char*)got, (const unsigned char*)source, n, "64 MiB device to device copy");
  free(source);
  free(got);
  buffer_destroy(&a);
  buffer_destroy(&b);
}

/* Each step depends on the one before; only stream order makes the result right. */
static void test_copy_stream_ordered_chain(void** state) {
  (void)state;
  require_gpu();
  const size_t n = 1 << 20;
  const size_t offset = 4096 + 6;
  const size_t span = 100000; /* even: the memset writes 2-byte elements */
  gpumem_stream_t stream = test_stream_create(0);
  buffer_t a = buffer_create(KIND_DEVICE, n);
  buffer_t b = buffer_create(KIND_DEVICE, n);
  buffer_t out = buffer_create(KIND_PINNED, n);
  unsigned char* before = checked_malloc(n);
  unsigned char* expected = checked_malloc(n);
  fill_pattern(before, n, 300);
  buffer_write(&b, 0, before, n);
  memset(out.ptr, 0, n);

  expect_ok(gpumem_memset_async(a.ptr, 0x1234, 2, n / 2, stream), "memset_async of a");
  expect_ok(gpumem_copy_async(b.ptr + offset, a.ptr, span, stream), "copy_async a to b");
  expect_ok(gpumem_copy_async(out.ptr, b.ptr, n, stream), "copy_async b to pinned");
  test_stream_sync(stream);

  memcpy(expected, before, n);
  for (size_t i = 0; i < span; i += 2) {
    const uint16_t v = 0x1234;
    memcpy(expected + offset + i, &v, sizeof v);
  }
  expect_bytes(out.ptr, expected, n, "memset, copy, copy on one stream");

  free(before);
  free(expected);
  buffer_destroy(&a);
  buffer_destroy(&b);
  buffer_destroy(&out);
  test_stream_destroy(stream);
}

/* ---------------------------------------------------------------------------------------------
 * Memset (GPU)
 * ------------------------------------------------------------------------------------------- */

#define MEMSET_BUFFER 4096
#define MEMSET_BYTES 1000

static void memset_kind(kind_t kind, gpumem_stream_t stream) {
  static const uint32_t values[] = {0xA7, 0xBEEF, 0xDEADBEEFu};
  buffer_t b = buffer_create(kind, MEMSET_BUFFER);
  unsigned char* before = checked_malloc(MEMSET_BUFFER);
  unsigned char* expected = checked_malloc(MEMSET_BUFFER);
  unsigned char* got = checked_malloc(MEMSET_BUFFER);
  for (unsigned e = 0; e < 3; e++) {
    const uint32_t element_size = 1u << e;
    const uint32_t value = values[e];
    /* Aligned to the element and to nothing wider. */
    const size_t offset = 64 + element_size;
    const size_t count = MEMSET_BYTES / element_size;
    char what[128];
    snprintf(what, sizeof what, "%s memset of %zu x %u-byte 0x%x on %s memory", stream ? "stream" : "synchronous",
             count, element_size, value, kind_name(kind));

    fill_pattern(before, MEMSET_BUFFER, 400 + e + 10 * (unsigned)kind);
    buffer_write(&b, 0, before, MEMSET_BUFFER);
    if (stream) {
      expect_ok(gpumem_memset_async(b.ptr + offset, value, element_size, count, stream), what);
      test_stream_sync(stream);
    } else {
      expect_ok(gpumem_memset(b.ptr + offset, value, element_size, count), what);
    }

    memcpy(expected, before, MEMSET_BUFFER);
    for (size_t i = 0; i < count; i++) {
      unsigned char* at = expected + offset + i * element_size;
      if (element_size == 1) {
        *at = (unsigned char)value;
      } else if (element_size == 2) {
        const uint16_t v = (uint16_t)value;
        memcpy(at, &v, sizeof v);
      } else {
        memcpy(at, &value, sizeof value);
      }
    }
    buffer_read(&b, 0, got, MEMSET_BUFFER);
    expect_bytes(got, expected, MEMSET_BUFFER, what);
  }
  free(before);
  free(expected);
  free(got);
  buffer_destroy(&b);
}

static void test_memset_device_memory(void** state) {
  (void)state;
  require_gpu();
  memset_kind(KIND_DEVICE, NULL);
}

static void test_memset_managed_memory(void** state) {
  (void)state;
  require_gpu();
  memset_kind(KIND_MANAGED, NULL);
}

static void test_memset_pinned_host_memory(void** state) {
  (void)state;
  require_gpu();
  memset_kind(KIND_PINNED, NULL);
  memset_kind(KIND_PINNED_MAPPED, NULL);
}

static void test_memset_async_device_memory(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  memset_kind(KIND_DEVICE, stream);
  test_stream_destroy(stream);
}

static void test_memset_async_managed_memory(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  memset_kind(KIND_MANAGED, stream);
  test_stream_destroy(stream);
}

static void test_memset_async_pinned_host_memory(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t stream = test_stream_create(0);
  memset_kind(KIND_PINNED, stream);
  memset_kind(KIND_PINNED_MAPPED, stream);
  test_stream_destroy(stream);
}

static void test_memset_plain_host_memory_refused(void** state) {
  (void)state;
  require_gpu();
  const size_t n = 256;
  unsigned char* plain = checked_malloc(n);
  unsigned char before[256];
  fill_pattern(before, n, 500);
  memcpy(plain, before, n);
  expect_memset_refused(plain, 0x5A, 1, n, GPUMEM_ERROR_INVALID_POINTER, "plain host memory");
  expect_memset_refused(plain, 0x5A5A, 2, n / 2, GPUMEM_ERROR_INVALID_POINTER, "plain host memory");
  expect_bytes(plain, before, n, "plain host memory after refused memsets");
  /* The stack is plain host memory too. */
  uint32_t local[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  expect_memset_refused(local, 0, 4, 8, GPUMEM_ERROR_INVALID_POINTER, "plain host memory");
  for (uint32_t i = 0; i < 8; i++) assert_int_equal(local[i], i + 1);
  free(plain);
}

/* A multiple of the driver's 2 MiB allocation granularity, so the allocation ends exactly there. */
#define EDGE_ALLOCATION ((size_t)2 << 20)
#define EDGE_TAIL 256

static void test_memset_past_end_of_device_allocation_refused(void** state) {
  (void)state;
  require_gpu();
  buffer_t b = buffer_create(KIND_DEVICE, EDGE_ALLOCATION);
  unsigned char* const end = b.ptr + EDGE_ALLOCATION;
  unsigned char before[EDGE_TAIL];
  unsigned char got[EDGE_TAIL];
  fill_pattern(before, EDGE_TAIL, 600);
  buffer_write(&b, EDGE_ALLOCATION - EDGE_TAIL, before, EDGE_TAIL);

  expect_memset_refused(end - 100, 0x77, 1, 101, GPUMEM_ERROR_INVALID_POINTER, "past the end");
  expect_memset_refused(end - 100, 0x7777, 2, 51, GPUMEM_ERROR_INVALID_POINTER, "past the end");
  expect_memset_refused(end - 64, 0x77777777u, 4, 32, GPUMEM_ERROR_INVALID_POINTER, "past the end");
  buffer_read(&b, EDGE_ALLOCATION - EDGE_TAIL, got, EDGE_TAIL);
  expect_bytes(got, before, EDGE_TAIL, "device memory after refused memsets");

  /* Up to the last byte is allowed. */
  expect_ok(gpumem_memset(end - 100, 0x77, 1, 100), "memset of the last 100 bytes");
  buffer_read(&b, EDGE_ALLOCATION - EDGE_TAIL, got, EDGE_TAIL);
  memset(before + EDGE_TAIL - 100, 0x77, 100);
  expect_bytes(got, before, EDGE_TAIL, "device memory after a memset of its last 100 bytes");
  buffer_destroy(&b);
}

static void test_copy_past_end_of_device_allocation_refused(void** state) {
  (void)state;
  require_gpu();
  buffer_t b = buffer_create(KIND_DEVICE, EDGE_ALLOCATION);
  unsigned char* const end = b.ptr + EDGE_ALLOCATION;
  unsigned char before[EDGE_TAIL];
  unsigned char got[EDGE_TAIL];
  unsigned char host[EDGE_TAIL];
  unsigned char host_before[EDGE_TAIL];
  fill_pattern(before, EDGE_TAIL, 700);
  fill_pattern(host_before, EDGE_TAIL, 701);
  memcpy(host, host_before, EDGE_TAIL);
  buffer_write(&b, EDGE_ALLOCATION - EDGE_TAIL, before, EDGE_TAIL);

  expect_copy_refused(end - 100, host, 200, GPUMEM_ERROR_INVALID_POINTER, "past the end");
  expect_copy_refused(end - 100, host, 101, GPUMEM_ERROR_INVALID_POINTER, "dst range");
  expect_copy_refused(host, end - 100, 200, GPUMEM_ERROR_INVALID_POINTER, "past the end");
  expect_copy_refused(host, end - 100, 101, GPUMEM_ERROR_INVALID_POINTER, "src range");
  expect_copy_refused(end - 50, end - 200, 100, GPUMEM_ERROR_INVALID_POINTER, "past the end");
  buffer_read(&b, EDGE_ALLOCATION - EDGE_TAIL, got, EDGE_TAIL);
  expect_bytes(got, before, EDGE_TAIL, "device memory after refused copies");
  expect_bytes(host, host_before, EDGE_TAIL, "host memory after refused copies");

  /* Up to the last byte is allowed, both ways. */
  expect_ok(gpumem_copy(end - 100, host, 100), "copy into the last 100 bytes");
  expect_ok(gpumem_copy(got, end - 100, 100), "copy out of the last 100 bytes");
  expect_bytes(got, host, 100, "the last 100 bytes of device memory");
  buffer_destroy(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_memset_null_dst_refused),
      cmocka_unit_test(test_memset_bad_element_size_refused),
      cmocka_unit_test(test_memset_value_too_wide_refused),
      cmocka_unit_test(test_memset_widest_values_accepted),
      cmocka_unit_test(test_memset_misaligned_dst_refused),
      cmocka_unit_test(test_memset_count_overflow_refused),
      cmocka_unit_test(test_memset_wrapping_range_refused),
      cmocka_unit_test(test_memset_zero_count_writes_nothing),
      cmocka_unit_test(test_copy_null_pointers_refused),
      cmocka_unit_test(test_copy_overlapping_ranges_refused),
      cmocka_unit_test(test_copy_wrapping_range_refused),
      cmocka_unit_test(test_copy_zero_bytes_writes_nothing),
      cmocka_unit_test(test_copy_every_pair_of_kinds),
      cmocka_unit_test(test_copy_async_every_pair_of_kinds),
      cmocka_unit_test(test_copy_async_default_streams),
      cmocka_unit_test(test_copy_async_stream_ordered_device_memory),
      cmocka_unit_test(test_copy_64_mib_device_to_device),
      cmocka_unit_test(test_copy_stream_ordered_chain),
      cmocka_unit_test(test_memset_device_memory),
      cmocka_unit_test(test_memset_managed_memory),
      cmocka_unit_test(test_memset_pinned_host_memory),
      cmocka_unit_test(test_memset_async_device_memory),
      cmocka_unit_test(test_memset_async_managed_memory),
      cmocka_unit_test(test_memset_async_pinned_host_memory),
      cmocka_unit_test(test_memset_plain_host_memory_refused),
      cmocka_unit_test(test_memset_past_end_of_device_allocation_refused),
      cmocka_unit_test(test_copy_past_end_of_device_allocation_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
