/* The simulated device of gpumem replay: address ranges handed out up to a capacity, never reused,
 * with no memory behind them. */
#include "simulated_device.h"

#include <string.h>

/* Takes size bytes of the device's memory; 0 when it has no more. */
static int device_take(struct sim_device* d, size_t size) {
  if (size > d->capacity - d->reserved) return 0;
  d->reserved += size;
  if (d->reserved > d->peak_reserved) d->peak_reserved = d->reserved;
  return 1;
}

/* The start of the next range of size bytes aligned to align, which then takes advance bytes of
 * addresses: 0 when the addresses run out. A range must end below 2^64: one that wrapped, or ended
 * at 2^64 itself, would overlap others or end at address 0, so the device refuses it as the driver
 * does (out of memory) however large its capacity. */
static int device_addresses(const struct sim_device* d, uint64_t align, uint64_t advance, uint64_t* start) {
  if (d->next > UINT64_MAX - (align - 1)) return 0;
  *start = (d->next + align - 1) / align * align;
  return advance <= UINT64_MAX - *start;
}

static gpumem_status_t device_alloc(void* context, size_t size, int32_t dev, gpumem_stream_t stream, void** out) {
  (void)dev;
  (void)stream;
  struct sim_device* d = context;
  const uint64_t pages = size / 4096 + (size % 4096 != 0); /* page-aligned, as the driver's are */
  uint64_t start = 0;
  if (pages > UINT64_MAX / 4096 || !device_addresses(d, 4096, pages * 4096, &start) || !device_take(d, size))
    return GPUMEM_ERROR_OUT_OF_MEMORY;
  *out = (void*)(uintptr_t)start;
  d->next = start + pages * 4096;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t device_free(void* context, void* ptr, size_t size, int32_t dev, gpumem_stream_t stream) {
  (void)ptr;
  (void)dev;
  (void)stream;
  struct sim_device* d = context;
  d->reserved -= size;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t device_reserve(void* context, size_t size, int32_t dev, void** out) {
  (void)dev;
  struct sim_device* d = context;
  uint64_t start = 0;
  if (!device_addresses(d, d->unit, size, &start)) return GPUMEM_ERROR_OUT_OF_MEMORY;
  *out = (void*)(uintptr_t)start;
  d->next = start + size;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t device_unreserve(void* context, void* ptr, size_t size, int32_t dev) {
  (void)context;
  (void)ptr;
  (void)size;
  (void)dev;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t device_map(void* context, void* ptr, size_t size, int32_t dev) {
  (void)ptr;
  (void)dev;
  return device_take(context, size) ? GPUMEM_SUCCESS : GPUMEM_ERROR_OUT_OF_MEMORY;
}

static gpumem_status_t device_unmap(void* context, void* ptr, size_t size, int32_t dev) {
  return device_free(context, ptr, size, dev, NULL);
}

void sim_device_init(struct sim_device* d, uint64_t capacity, uint64_t unit, gpumem_allocator_functions_t* fns) {
  memset(d, 0, sizeof *d);
  d->capacity = capacity;
  d->next = 0x100000000000ULL;
  d->unit = unit;
  memset(fns, 0, sizeof *fns);
  fns->struct_size = sizeof *fns;
  fns->context = d;
  fns->device = -1;
  fns->alloc = device_alloc;
  fns->free = device_free;
  if (!unit) return;
  fns->reserve = device_reserve;
  fns->unreserve = device_unreserve;
  fns->map = device_map;
  fns->unmap = device_unmap;
  fns->map_unit = unit;
  /* The capacity in whole units: rounded up, unless that passes 2^64. */
  fns->range_size = capacity / unit * unit;
  if (fns->range_size < capacity && fns->range_size <= UINT64_MAX - unit) fns->range_size += unit;
}
