/* Writes the small trace that the replay tests read (to the path given): 10 allocations of
 * 1 MiB live at once on one stream, all freed, then 11 of 1.5 MiB on another stream, all freed.
 * Peak live: 16.5 MiB. A pool keeps the 1 MiB blocks while the larger ones grow it (26.5 MiB)
 * unless the device is too small, when it gives them back first. */
#include <gpumem/gpumem.h>
#include <stdio.h>

static int check(gpumem_status_t st, const char* what) {
  if (st == GPUMEM_SUCCESS) return 0;
  fprintf(stderr, "make_trace: %s: %s: %s\n", what, gpumem_status_name(st), gpumem_last_error_detail());
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_trace PATH\n");
    return 2;
  }
  gpumem_allocator_t* host = NULL;
  gpumem_trace_t* trace = NULL;
  if (check(gpumem_allocator_create_host(0, &host), "gpumem_allocator_create_host") ||
      check(gpumem_trace_start(host, argv[1], 0, &trace), "gpumem_trace_start"))
    return 1;
  void* p[11];
  for (int i = 0; i < 10; i++)
    if (check(gpumem_alloc(host, 1 << 20, (gpumem_stream_t)(size_t)0x100, &p[i]), "gpumem_alloc")) return 1;
  for (int i = 0; i < 10; i++)
    if (check(gpumem_free(host, p[i], (gpumem_stream_t)(size_t)0x100), "gpumem_free")) return 1;
  for (int i = 0; i < 11; i++)
    if (check(gpumem_alloc(host, 3 << 19, (gpumem_stream_t)(size_t)0x200, &p[i]), "gpumem_alloc")) return 1;
  for (int i = 10; i >= 0; i--)
    if (check(gpumem_free(host, p[i], (gpumem_stream_t)(size_t)0x200), "gpumem_free")) return 1;
  if (check(gpumem_trace_stop(trace), "gpumem_trace_stop") || check(gpumem_allocator_destroy(host), "destroy"))
    return 1;
  printf("wrote %s\n", argv[1]);
  return 0;
}
