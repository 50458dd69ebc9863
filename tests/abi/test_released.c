/* A program built against the headers of a released gpumem, run against this library: compiled
 * once per release in tests/abi/released/ (and once against today's headers), it calls the
 * functions that take structs with the sizes that release's header gives them (its INIT macros,
 * its sizeof), and checks what a user of that release would: success, the values, and that
 * nothing past the end of its smaller output structs is written. Runs over the fake driver
 * (tests/driver), so it needs no GPU. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <gpumem/gpumem.h>

#define FILL 0xa5
#define TAIL 64

/* An output struct of this release's layout inside a bigger buffer, every byte FILL but its
 * struct_size; `tail` lies past the struct's end, where the library must not write. */
#define DECLARE_OUT(type, var)    \
  struct {                        \
    type s;                       \
    unsigned char tail[TAIL];     \
  } var;                          \
  memset(&var, FILL, sizeof var); \
  var.s.struct_size = sizeof var.s

static void assert_ok_detail(gpumem_status_t status, const char* call) {
  if (status != GPUMEM_SUCCESS)
    fail_msg("%s (built against gpumem %s): %s: %s", call, GPUMEM_VERSION_STRING, gpumem_status_name(status),
             gpumem_last_error_detail());
}
#define ASSERT_OK(call) assert_ok_detail((call), #call)

static void assert_untouched(const unsigned char* tail) {
  for (size_t i = 0; i < TAIL; ++i)
    if (tail[i] != FILL) fail_msg("byte %zu past the end of the caller's struct was written (0x%02x)", i, tail[i]);
}

static gpumem_allocator_t* host_pool(gpumem_allocator_t** out_host) {
  ASSERT_OK(gpumem_allocator_create_host(0, out_host));
  gpumem_pool_params_t params;
  ASSERT_OK(gpumem_pool_params_init(&params, sizeof params));
  assert_int_equal(params.struct_size, sizeof params);
  const gpumem_pool_params_t macro = GPUMEM_POOL_PARAMS_INIT;
  assert_memory_equal(&params, &macro, sizeof params);
  params.upstream = *out_host;
  gpumem_allocator_t* pool = NULL;
  ASSERT_OK(gpumem_pool_create(&params, &pool));
  assert_non_null(pool);
  return pool;
}

static void test_released_version(void** state) {
  (void)state;
  assert_true(gpumem_version_number() >= GPUMEM_VERSION_NUMBER);
  assert_int_equal(gpumem_version_number() / 10000, GPUMEM_VERSION_MAJOR);
}

static void test_released_pool_info_and_stats(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  gpumem_allocator_t* pool = host_pool(&host);
  void* p = NULL;
  ASSERT_OK(gpumem_alloc(pool, 1000, NULL, &p));

  DECLARE_OUT(gpumem_pool_info_t, info);
  ASSERT_OK(gpumem_pool_get_info(pool, &info.s));
  assert_int_equal(info.s.struct_size, sizeof info.s);
  assert_int_equal(info.s.used_bytes, 1024);
  assert_int_equal(info.s.total_bytes, info.s.used_bytes + info.s.free_bytes);
  assert_int_equal(info.s.limit, 0);
  assert_int_equal(info.s.arena_count, 1);
#if GPUMEM_VERSION_NUMBER >= 200
  assert_int_equal(info.s.pending_bytes, 0);
#endif
  assert_untouched(info.tail);

  DECLARE_OUT(gpumem_allocator_stats_t, stats);
  ASSERT_OK(gpumem_allocator_get_stats(pool, &stats.s));
  assert_int_equal(stats.s.bytes_in_use, 1024);
  assert_int_equal(stats.s.bytes_requested, 1000);
  assert_int_equal(stats.s.alloc_count, 1);
  assert_int_equal(stats.s.free_count, 0);
  assert_untouched(stats.tail);

  /* A failing call clears the struct as far as its struct_size reaches, and no further. */
  DECLARE_OUT(gpumem_pool_info_t, failed);
  assert_int_equal(gpumem_pool_get_info(host, &failed.s), GPUMEM_ERROR_INVALID_HANDLE);
  assert_int_equal(failed.s.struct_size, sizeof failed.s);
  assert_int_equal(failed.s.used_bytes, 0);
  assert_untouched(failed.tail);

  ASSERT_OK(gpumem_free(pool, p, NULL));
  ASSERT_OK(gpumem_allocator_destroy(pool));
  ASSERT_OK(gpumem_allocator_destroy(host));
}

struct functions_state {
  int allocs, frees, destroys;
};

static gpumem_status_t functions_alloc(void* context, size_t size, int32_t device, gpumem_stream_t stream,
                                       void** out_ptr) {
  (void)device;
  (void)stream;
  ((struct functions_state*)context)->allocs++;
  *out_ptr = malloc(size);
  return *out_ptr ? GPUMEM_SUCCESS : GPUMEM_ERROR_OUT_OF_MEMORY;
}

static gpumem_status_t functions_free(void* context, void* ptr, size_t size, int32_t device, gpumem_stream_t stream) {
  (void)size;
  (void)device;
  (void)stream;
  ((struct functions_state*)context)->frees++;
  free(ptr);
  return GPUMEM_SUCCESS;
}

static void functions_destroy(void* context) { ((struct functions_state*)context)->destroys++; }

/* An input struct of this release's size, followed by bytes that are not zero: a library that read
 * past struct_size would take them for fields of a later release (functions to call). */
static void test_released_functions_allocator(void** state) {
  (void)state;
  struct functions_state counts = {0, 0, 0};
  struct {
    gpumem_allocator_functions_t f;
    unsigned char tail[TAIL];
  } in;
  memset(&in, FILL, sizeof in);
  in.f.struct_size = sizeof in.f;
  in.f.context = &counts;
  in.f.device = -1;
  in.f.alloc = functions_alloc;
  in.f.free = functions_free;
  in.f.destroy = functions_destroy;
#if GPUMEM_VERSION_NUMBER >= 400
  in.f.reserve = NULL;
  in.f.unreserve = NULL;
  in.f.map = NULL;
  in.f.unmap = NULL;
  in.f.map_unit = 0;
  in.f.range_size = 0;
#endif
  gpumem_allocator_t* functions = NULL;
  ASSERT_OK(gpumem_allocator_create_functions(&in.f, &functions));

  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = functions;
  gpumem_allocator_t* pool = NULL;
  ASSERT_OK(gpumem_pool_create(&params, &pool));
  void* p = NULL;
  ASSERT_OK(gpumem_alloc(pool, 4096, NULL, &p));
  memset(p, 1, 4096);
  assert_int_equal(counts.allocs, 1);
  DECLARE_OUT(gpumem_pool_info_t, info);
  ASSERT_OK(gpumem_pool_get_info(pool, &info.s));
  assert_int_equal(info.s.used_bytes, 4096);
  assert_untouched(info.tail);
  ASSERT_OK(gpumem_free(pool, p, NULL));
  ASSERT_OK(gpumem_allocator_destroy(pool));
  assert_int_equal(counts.frees, 1);
  ASSERT_OK(gpumem_allocator_destroy(functions));
  assert_int_equal(counts.destroys, 1);
}

static void test_released_array_desc_init(void** state) {
  (void)state;
  DECLARE_OUT(gpumem_array_desc_t, desc);
  ASSERT_OK(gpumem_array_desc_init(&desc.s, sizeof desc.s));
  const gpumem_array_desc_t macro = GPUMEM_ARRAY_DESC_INIT;
  assert_int_equal(desc.s.struct_size, macro.struct_size);
  assert_int_equal(desc.s.device, macro.device);
  assert_int_equal(desc.s.format, macro.format);
  assert_int_equal(desc.s.channels, macro.channels);
  assert_int_equal(desc.s.width, 0);
  assert_int_equal(desc.s.height, 0);
  assert_int_equal(desc.s.depth, 0);
  assert_untouched(desc.tail);
}

static void test_released_device_and_pointer_info(void** state) {
  (void)state;
  DECLARE_OUT(gpumem_device_info_t, device);
  ASSERT_OK(gpumem_device_get_info(0, &device.s));
  assert_int_equal(device.s.struct_size, sizeof device.s);
  assert_true(device.s.name[0] != '\0');
  assert_true(device.s.total_memory > 0);
  assert_untouched(device.tail);

  char plain[64];
  DECLARE_OUT(gpumem_pointer_info_t, pointer);
  ASSERT_OK(gpumem_pointer_get_info(plain, &pointer.s));
  assert_int_equal(pointer.s.memory_type, GPUMEM_MEMORY_UNREGISTERED);
  assert_int_equal(pointer.s.device, -1);
  assert_ptr_equal(pointer.s.host_ptr, plain);
  assert_false(pointer.s.is_pinned);
  assert_untouched(pointer.tail);

  DECLARE_OUT(gpumem_pin_stats_t, pins);
  ASSERT_OK(gpumem_pin_get_stats(&pins.s));
  assert_int_equal(pins.s.bytes_pinned, 0);
  assert_untouched(pins.tail);
}

#if GPUMEM_VERSION_NUMBER >= 200
static void assert_detail_has(const char* fragment) {
  if (!strstr(gpumem_last_error_detail(), fragment))
    fail_msg("detail \"%s\" lacks \"%s\"", gpumem_last_error_detail(), fragment);
}

/* The fake driver copies nothing, so a copy shows it read the description by what it tells the
 * driver (the detail of the driver's refusal) and by the empty copies it finishes alone. */
static void test_released_copies(void** state) {
  (void)state;
  unsigned char src[4][16], dst[4][16];
  memset(src, 1, sizeof src);
  memset(dst, 0, sizeof dst);

  gpumem_copy2d_t c2;
  ASSERT_OK(gpumem_copy2d_init(&c2, sizeof c2));
  const gpumem_copy2d_t macro2 = GPUMEM_COPY2D_INIT;
  assert_memory_equal(&c2, &macro2, sizeof c2);
  c2.dst = dst;
  c2.dst_pitch = 16;
  c2.src = src;
  c2.src_pitch = 16;
  c2.src_x = 4;
  c2.width = 8;
  ASSERT_OK(gpumem_copy2d(&c2)); /* height 0: nothing to copy */
  c2.height = 3;
  assert_int_not_equal(gpumem_copy2d(&c2), GPUMEM_SUCCESS);
  assert_detail_has("2D copy of 8 x 3 x 1 bytes");

  gpumem_copy3d_t c3 = GPUMEM_COPY3D_INIT;
  gpumem_copy3d_t from_init;
  ASSERT_OK(gpumem_copy3d_init(&from_init, sizeof from_init));
  assert_memory_equal(&c3, &from_init, sizeof c3);
  c3.dst = dst;
  c3.dst_pitch = 16;
  c3.dst_height = 2;
  c3.src = src;
  c3.src_pitch = 16;
  c3.src_height = 2;
  c3.width = 16;
  c3.height = 2;
  ASSERT_OK(gpumem_copy3d(&c3)); /* depth 0 */
  c3.depth = 2;
  assert_int_not_equal(gpumem_copy3d(&c3), GPUMEM_SUCCESS);
  assert_detail_has("3D copy of 16 x 2 x 2 bytes");
  for (size_t y = 0; y < 4; ++y)
    for (size_t x = 0; x < 16; ++x) assert_int_equal(dst[y][x], 0);

  gpumem_cuda_pool_params_t cuda_pool;
  ASSERT_OK(gpumem_cuda_pool_params_init(&cuda_pool, sizeof cuda_pool));
  assert_int_equal(cuda_pool.struct_size, sizeof cuda_pool);
  assert_int_equal(cuda_pool.device, 0);
  assert_int_equal(cuda_pool.source, GPUMEM_CUDA_POOL_CURRENT);
  assert_null(cuda_pool.pool);
  assert_int_equal(cuda_pool.max_size, 0);
  assert_int_equal(cuda_pool.release_threshold, GPUMEM_CUDA_POOL_KEEP_THRESHOLD);
  assert_int_equal(cuda_pool.flags, 0);
}
#endif

static void on_hook(const gpumem_hook_info_t* info, void* user_data) {
  /* The library's struct is at least as large as the one this program knows. */
  assert_true(info->struct_size >= sizeof *info);
  if (info->event == GPUMEM_HOOK_MALLOC_POST) *(size_t*)user_data = info->mem_size;
}

static void test_released_hooks(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  gpumem_allocator_t* pool = host_pool(&host);
  size_t mem_size = 0;
  uint64_t id = 0;
  ASSERT_OK(gpumem_allocator_add_hook(pool, GPUMEM_HOOK_ALL, on_hook, &mem_size, &id));
  void* p = NULL;
  ASSERT_OK(gpumem_alloc(pool, 100, NULL, &p));
  assert_int_equal(mem_size, 512);
  ASSERT_OK(gpumem_free(pool, p, NULL));
  ASSERT_OK(gpumem_allocator_remove_hook(pool, id));
  ASSERT_OK(gpumem_allocator_destroy(pool));
  ASSERT_OK(gpumem_allocator_destroy(host));
}

#if GPUMEM_VERSION_NUMBER >= 300
static void on_block(const gpumem_block_info_t* block, void* user_data) {
  assert_true(block->struct_size >= sizeof *block);
  if (block->state == GPUMEM_BLOCK_IN_USE) *(size_t*)user_data += block->size;
}

static void test_released_snapshot_and_trace(void** state) {
  (void)state;
  char path[] = "/tmp/gpumem-test-released-XXXXXX";
  const int fd = mkstemp(path);
  assert_true(fd >= 0);
  gpumem_allocator_t* host = NULL;
  gpumem_allocator_t* pool = host_pool(&host);
  gpumem_trace_t* trace = NULL;
  ASSERT_OK(gpumem_trace_start(pool, path, 0, &trace));
  void* p = NULL;
  ASSERT_OK(gpumem_alloc(pool, 3000, NULL, &p));
  size_t in_use = 0;
  ASSERT_OK(gpumem_pool_snapshot(pool, on_block, &in_use));
  assert_int_equal(in_use, 3072);
  ASSERT_OK(gpumem_free(pool, p, NULL));
  ASSERT_OK(gpumem_trace_stop(trace));

  gpumem_trace_reader_t* reader = NULL;
  ASSERT_OK(gpumem_trace_reader_open(path, &reader));
  DECLARE_OUT(gpumem_trace_header_t, header);
  ASSERT_OK(gpumem_trace_reader_get_header(reader, &header.s));
  assert_int_equal(header.s.device, -1);
  assert_true(header.s.kind[0] != '\0');
  assert_untouched(header.tail);
  int allocs = 0, frees = 0;
  for (;;) {
    DECLARE_OUT(gpumem_trace_record_t, record);
    bool has = false;
    ASSERT_OK(gpumem_trace_reader_next(reader, &record.s, &has));
    assert_untouched(record.tail);
    if (!has) break;
    if (record.s.event == GPUMEM_TRACE_ALLOC) {
      assert_int_equal(record.s.size, 3000);
      assert_int_equal(record.s.mem_size, 3072);
      allocs++;
    }
    if (record.s.event == GPUMEM_TRACE_FREE) frees++;
  }
  assert_int_equal(allocs, 1);
  assert_int_equal(frees, 1);
  ASSERT_OK(gpumem_trace_reader_close(reader));
  ASSERT_OK(gpumem_allocator_destroy(pool));
  ASSERT_OK(gpumem_allocator_destroy(host));
  remove(path);
}
#endif

#if GPUMEM_VERSION_NUMBER >= 400
static void test_released_vm_growth_cupy(void** state) {
  (void)state;
  gpumem_vm_params_t params;
  ASSERT_OK(gpumem_vm_params_init(&params, sizeof params));
  assert_int_equal(params.struct_size, sizeof params);
  assert_int_equal(params.device, 0);
  assert_int_equal(params.range_size, 0);
  assert_int_equal(params.map_unit, 0);
  gpumem_allocator_t* vm = NULL;
  ASSERT_OK(gpumem_allocator_create_vm(&params, &vm));
  DECLARE_OUT(gpumem_vm_info_t, info);
  ASSERT_OK(gpumem_vm_get_info(vm, &info.s));
  assert_true(info.s.map_unit > 0);
  assert_int_equal(info.s.mapped_bytes, 0);
  assert_untouched(info.tail);
  ASSERT_OK(gpumem_allocator_destroy(vm));

  gpumem_allocator_t* host = NULL;
  gpumem_allocator_t* pool = host_pool(&host);
  DECLARE_OUT(gpumem_pool_growth_info_t, growth);
  ASSERT_OK(gpumem_pool_get_growth_info(pool, &growth.s));
  assert_int_equal(growth.s.mapped_bytes, 0);
  assert_untouched(growth.tail);

  gpumem_cupy_target_t target;
  memset(&target, 0, sizeof target);
  target.struct_size = sizeof target;
  target.allocator = pool;
  void* p = gpumem_cupy_alloc(&target, 100, 0);
  assert_non_null(p);
  gpumem_cupy_free(&target, p, 0);
  ASSERT_OK(gpumem_allocator_destroy(pool));
  ASSERT_OK(gpumem_allocator_destroy(host));
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_released_version),
    cmocka_unit_test(test_released_pool_info_and_stats),
    cmocka_unit_test(test_released_functions_allocator),
    cmocka_unit_test(test_released_array_desc_init),
    cmocka_unit_test(test_released_device_and_pointer_info),
    cmocka_unit_test(test_released_hooks),
#if GPUMEM_VERSION_NUMBER >= 200
    cmocka_unit_test(test_released_copies),
#endif
#if GPUMEM_VERSION_NUMBER >= 300
    cmocka_unit_test(test_released_snapshot_and_trace),
#endif
#if GPUMEM_VERSION_NUMBER >= 400
    cmocka_unit_test(test_released_vm_growth_cupy),
#endif
  };
  return cmocka_run_group_tests_name("test_released_" GPUMEM_VERSION_STRING, tests, NULL, NULL);
}
