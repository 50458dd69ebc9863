/* Pinning a buffer for asynchronous copies.
 *
 * gpumem_copy_async() from pageable memory cannot overlap with the host: the driver stages it.
 * Pinned (page-locked) memory it can copy straight from. gpumem_pin() locks any host range and
 * counts pins, so several owners may pin the same memory; gpumem_pin_forget() before free()
 * drops a registration the cache may still hold. Here 64 MiB go to the device on the legacy
 * stream while the host goes on, and come back with a synchronous copy, which on the legacy
 * stream waits for the work queued before it. Needs a GPU: without one it says so and returns 77. */
#include <gpumem/gpumem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIZE ((size_t)64 << 20)

int main(void) {
  void* device = NULL;
  gpumem_status_t st = gpumem_device_alloc(0, SIZE, &device);
  if (st == GPUMEM_ERROR_NO_DRIVER || st == GPUMEM_ERROR_NO_DEVICE) {
    printf("no GPU: %s\n", gpumem_last_error_detail());
    return 77;
  }
  if (st != GPUMEM_SUCCESS) {
    fprintf(stderr, "gpumem_device_alloc: %s\n", gpumem_last_error_detail());
    return 1;
  }
  unsigned char* buffer = malloc(SIZE);
  unsigned char* check = malloc(SIZE);
  for (size_t i = 0; i < SIZE; i++) buffer[i] = (unsigned char)(i * 31 + 7);

  if ((st = gpumem_pin(buffer, SIZE, 0)) != GPUMEM_SUCCESS) {
    fprintf(stderr, "gpumem_pin: %s\n", gpumem_last_error_detail());
    return 1;
  }
  st = gpumem_copy_async(device, buffer, SIZE, NULL); /* queued; the host goes on */
  memset(check, 0, SIZE);                             /* work the copy overlaps with */
  if (st == GPUMEM_SUCCESS) st = gpumem_copy(check, device, SIZE);
  if (st != GPUMEM_SUCCESS) fprintf(stderr, "copy: %s\n", gpumem_last_error_detail());
  const int same = st == GPUMEM_SUCCESS && memcmp(check, buffer, SIZE) == 0;
  printf("64 MiB to the device from pinned memory and back: %s\n", same ? "identical" : "DIFFERENT");

  gpumem_unpin(buffer, SIZE);
  gpumem_pin_forget(buffer, SIZE); /* before the memory goes back to the C library */
  free(buffer);
  free(check);
  gpumem_device_free(device);
  return same ? 0 : 1;
}
