/* A pool with a limit, and what its statistics say.
 *
 * The pool caches what it is given back, so a program that allocates and frees the same sizes
 * again and again asks the device once. A limit caps what the pool may hold; past it, an
 * allocation fails with GPUMEM_ERROR_OUT_OF_MEMORY and a detail that says where the bytes are.
 * Over device 0 when there is one, else over plain host memory (the pool is the same). */
#include <gpumem/gpumem.h>
#include <stdio.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

/* Prints a failed call's status and detail; returns 1 so main can pass it on. */
static int failed(const char* call, gpumem_status_t st) {
  fprintf(stderr, "%s: %s: %s\n", call, gpumem_status_name(st), gpumem_last_error_detail());
  return 1;
}

int main(void) {
  gpumem_allocator_t* upstream = NULL;
  gpumem_status_t st = gpumem_allocator_create_device(0, &upstream);
  const char* where = "device 0";
  if (st == GPUMEM_ERROR_NO_DRIVER || st == GPUMEM_ERROR_NO_DEVICE) {
    where = "host memory (no GPU here)";
    st = gpumem_allocator_create_host(0, &upstream);
  }
  if (st != GPUMEM_SUCCESS) return failed("creating the upstream", st);

  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = upstream;
  params.limit = 64 * MIB;
  gpumem_allocator_t* pool = NULL;
  if ((st = gpumem_pool_create(&params, &pool)) != GPUMEM_SUCCESS) return failed("gpumem_pool_create", st);
  printf("a pool over %s, limit 64 MiB\n", where);

  /* The same 16 MiB, a thousand times: one upstream allocation, the rest from the cache. */
  for (int i = 0; i < 1000; i++) {
    void* p = NULL;
    if ((st = gpumem_alloc(pool, 16 * MIB, NULL, &p)) != GPUMEM_SUCCESS) return failed("gpumem_alloc", st);
    if ((st = gpumem_free(pool, p, NULL)) != GPUMEM_SUCCESS) return failed("gpumem_free", st);
  }
  gpumem_allocator_stats_t stats;
  memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats; /* which fields this program knows of */
  if ((st = gpumem_allocator_get_stats(pool, &stats)) != GPUMEM_SUCCESS)
    return failed("gpumem_allocator_get_stats", st);
  printf("1000 allocations of 16 MiB: %llu from the upstream, %llu bytes held\n",
         (unsigned long long)stats.upstream_alloc_count, (unsigned long long)stats.bytes_reserved);

  /* Up to the limit, and one more. */
  void* held[5] = {NULL};
  int n = 0;
  while (n < 5 && (st = gpumem_alloc(pool, 16 * MIB, NULL, &held[n])) == GPUMEM_SUCCESS) n++;
  printf("%d allocations of 16 MiB fit; the next: %s\n  %s\n", n, gpumem_status_name(st), gpumem_last_error_detail());
  const int refused = st == GPUMEM_ERROR_OUT_OF_MEMORY && n == 4;

  for (int i = 0; i < n; i++) gpumem_free(pool, held[i], NULL);
  gpumem_pool_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  gpumem_pool_get_info(pool, &info);
  printf("after the frees: %llu bytes cached in %llu blocks\n", (unsigned long long)info.free_bytes,
         (unsigned long long)info.free_block_count);
  gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS);
  gpumem_pool_get_info(pool, &info);
  printf("after gpumem_pool_release: %llu bytes held\n", (unsigned long long)info.total_bytes);

  if ((st = gpumem_allocator_destroy(pool)) != GPUMEM_SUCCESS) return failed("destroying the pool", st);
  if ((st = gpumem_allocator_destroy(upstream)) != GPUMEM_SUCCESS) return failed("destroying the upstream", st);
  /* What this example shows, checked: one upstream allocation, the limit refusing the fifth. */
  return stats.upstream_alloc_count == 1 && refused && info.total_bytes == 0 ? 0 : 1;
}
