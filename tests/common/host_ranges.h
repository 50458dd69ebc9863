/* Address ranges in host memory for a caller's allocator: reserved with mmap and no access, mapped
 * by granting access and unmapped by dropping the pages and the access again, so that memory the
 * pool uses while unmapped faults. Counts what is mapped, and refuses to map beyond a budget, as a
 * device runs out. Include after test_util.h, with _DEFAULT_SOURCE defined first. */
#ifndef GPUMEM_TEST_HOST_RANGES_H
#define GPUMEM_TEST_HOST_RANGES_H

#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>

struct host_ranges {
  size_t unit, range_size;
  size_t budget; /* most bytes mapped at once; 0 for no end */
  size_t mapped, reserved;
  size_t maps, unmaps, reserves, unreserves;
  bool refuse_reserve; /* the next reserve finds no addresses */
};

static gpumem_status_t host_ranges_reserve(void* context, size_t size, int32_t device, void** out_ptr) {
  struct host_ranges* r = (struct host_ranges*)context;
  (void)device;
  if (r->refuse_reserve) return GPUMEM_ERROR_OUT_OF_MEMORY;
  /* Over by one unit, then trimmed, for a start aligned to the unit. */
  char* p = (char*)mmap(NULL, size + r->unit, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return GPUMEM_ERROR_OUT_OF_MEMORY;
  char* start = (char*)(((uintptr_t)p + r->unit - 1) & ~(uintptr_t)(r->unit - 1));
  if (start > p) munmap(p, (size_t)(start - p));
  munmap(start + size, (size_t)(p + r->unit - start));
  r->reserved += size;
  ++r->reserves;
  *out_ptr = start;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t host_ranges_unreserve(void* context, void* ptr, size_t size, int32_t device) {
  struct host_ranges* r = (struct host_ranges*)context;
  (void)device;
  if (munmap(ptr, size) != 0) return GPUMEM_ERROR_INVALID_ARGUMENT;
  r->reserved -= size;
  ++r->unreserves;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t host_ranges_map(void* context, void* ptr, size_t size, int32_t device) {
  struct host_ranges* r = (struct host_ranges*)context;
  (void)device;
  if ((uintptr_t)ptr % r->unit || size % r->unit) return GPUMEM_ERROR_INVALID_ARGUMENT;
  if (r->budget && r->mapped + size > r->budget) return GPUMEM_ERROR_OUT_OF_MEMORY;
  if (mprotect(ptr, size, PROT_READ | PROT_WRITE) != 0) return GPUMEM_ERROR_INVALID_ARGUMENT;
  r->mapped += size;
  ++r->maps;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t host_ranges_unmap(void* context, void* ptr, size_t size, int32_t device) {
  struct host_ranges* r = (struct host_ranges*)context;
  (void)device;
  if ((uintptr_t)ptr % r->unit || size % r->unit) return GPUMEM_ERROR_INVALID_ARGUMENT;
  if (madvise(ptr, size, MADV_DONTNEED) != 0 || mprotect(ptr, size, PROT_NONE) != 0)
    return GPUMEM_ERROR_INVALID_ARGUMENT;
  r->mapped -= size;
  ++r->unmaps;
  return GPUMEM_SUCCESS;
}

/* Plain allocations of the same allocator: whole mapped ranges. */
static gpumem_status_t host_ranges_alloc(void* context, size_t size, int32_t device, gpumem_stream_t stream,
                                         void** out_ptr) {
  struct host_ranges* r = (struct host_ranges*)context;
  (void)stream;
  const size_t whole = (size + r->unit - 1) / r->unit * r->unit;
  gpumem_status_t st = host_ranges_reserve(context, whole, device, out_ptr);
  if (st == GPUMEM_SUCCESS && (st = host_ranges_map(context, *out_ptr, whole, device)) != GPUMEM_SUCCESS)
    host_ranges_unreserve(context, *out_ptr, whole, device);
  return st;
}

static gpumem_status_t host_ranges_free(void* context, void* ptr, size_t size, int32_t device, gpumem_stream_t stream) {
  struct host_ranges* r = (struct host_ranges*)context;
  (void)stream;
  const size_t whole = (size + r->unit - 1) / r->unit * r->unit;
  host_ranges_unmap(context, ptr, whole, device);
  return host_ranges_unreserve(context, ptr, whole, device);
}

/* The functions of an allocator over r, on the host (device -1). */
static inline gpumem_allocator_functions_t host_ranges_functions(struct host_ranges* r) {
  gpumem_allocator_functions_t f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  f.context = r;
  f.device = -1;
  f.alloc = host_ranges_alloc;
  f.free = host_ranges_free;
  f.reserve = host_ranges_reserve;
  f.unreserve = host_ranges_unreserve;
  f.map = host_ranges_map;
  f.unmap = host_ranges_unmap;
  f.map_unit = r->unit;
  f.range_size = r->range_size;
  return f;
}

#endif /* GPUMEM_TEST_HOST_RANGES_H */
