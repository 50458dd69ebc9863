/* Frees made while the process exits, after the CUDA driver may have torn itself down: each must
 * return GPUMEM_SUCCESS without crashing. The handler is registered before the driver is loaded,
 * so it runs after any exit handler the driver installs. Not a cmocka suite: the checks run after
 * main has returned. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <gpumem/gpumem.h>

static void* device_mem;
static void* async_mem;
static void* host_mem;
static void* managed_mem;
static gpumem_array_t* array;
static char registered[1 << 16] __attribute__((aligned(4096)));

static void check(const char* what, gpumem_status_t st) {
  if (st != GPUMEM_SUCCESS) {
    fprintf(stderr, "%s at exit: %s: %s\n", what, gpumem_status_name(st), gpumem_last_error_detail());
    _exit(1); /* exit() may not be called again from an exit handler */
  }
}

static void free_late(void) {
  check("gpumem_device_free", gpumem_device_free(device_mem));
  check("gpumem_device_free_async", gpumem_device_free_async(async_mem, NULL));
  check("gpumem_host_free", gpumem_host_free(host_mem));
  check("gpumem_managed_free", gpumem_managed_free(managed_mem));
  check("gpumem_array_destroy", gpumem_array_destroy(array));
  check("gpumem_host_unregister", gpumem_host_unregister(registered));
  printf("late frees: ok\n");
}

int main(void) {
  atexit(free_late);
  int32_t count = 0;
  if (gpumem_device_get_count(&count) != GPUMEM_SUCCESS) {
    printf("no GPU: %s\n", gpumem_last_error_detail());
    fflush(stdout); /* _exit() does not flush, and the reason is what a skip's reader looks for */
    _exit(77);      /* skip, without running the handler */
  }
  gpumem_array_desc_t desc = GPUMEM_ARRAY_DESC_INIT;
  desc.width = 256;
  check("gpumem_device_alloc", gpumem_device_alloc(0, 1 << 20, &device_mem));
  check("gpumem_device_alloc_async", gpumem_device_alloc_async(0, 1 << 20, NULL, &async_mem));
  check("gpumem_host_alloc", gpumem_host_alloc(1 << 20, 0, &host_mem));
  check("gpumem_managed_alloc", gpumem_managed_alloc(0, 1 << 20, 0, &managed_mem));
  check("gpumem_array_create", gpumem_array_create(&desc, &array));
  check("gpumem_host_register", gpumem_host_register(registered, sizeof registered, 0));
  return 0;
}
