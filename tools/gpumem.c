/* gpumem: the command-line tool. `gpumem info` describes the driver and the devices; `gpumem replay`
 * replays a trace through allocator configurations on any machine, and `gpumem viz` pictures it. */
#include <gpumem/gpumem.h>
#include <stdio.h>
#include <string.h>

#include "replay.h"
#include "summary.h"

static const char* yes_no(bool b) { return b ? "yes" : "no"; }

static void print_mib(const char* label, size_t bytes) { printf("  %-26s %zu MiB\n", label, bytes >> 20); }

static int info(void) {
  printf("gpumem %s\n", gpumem_version_string());
  int32_t version = 0;
  if (gpumem_driver_get_version(&version) != GPUMEM_SUCCESS) {
    printf("CUDA driver: none (%s)\n", gpumem_last_error_detail());
    return 0;
  }
  printf("CUDA driver: supports CUDA %d.%d\n", version / 1000, version % 1000 / 10);
  int32_t count = 0;
  gpumem_status_t st = gpumem_device_get_count(&count);
  if (st == GPUMEM_ERROR_NO_DEVICE) {
    printf("devices: none (%s)\n", gpumem_last_error_detail());
    return 0;
  }
  if (st != GPUMEM_SUCCESS) {
    fprintf(stderr, "gpumem: %s: %s\n", gpumem_status_name(st), gpumem_last_error_detail());
    return 1;
  }
  printf("devices: %d\n", count);
  for (int32_t d = 0; d < count; ++d) {
    gpumem_device_info_t di;
    di.struct_size = sizeof di;
    size_t free_bytes = 0, total = 0;
    st = gpumem_device_get_info(d, &di);
    if (st == GPUMEM_SUCCESS) st = gpumem_device_query_memory(d, &free_bytes, &total);
    if (st != GPUMEM_SUCCESS) {
      fprintf(stderr, "gpumem: device %d: %s: %s\n", d, gpumem_status_name(st), gpumem_last_error_detail());
      return 1;
    }
    printf("device %d: %s (compute capability %d.%d)\n", d, di.name, di.compute_capability_major,
           di.compute_capability_minor);
    print_mib("memory total:", total);
    print_mib("memory free:", free_bytes);
    printf("  %-26s %s\n", "unified addressing:", yes_no(di.unified_addressing));
    printf("  %-26s %s\n", "managed memory:", yes_no(di.managed_memory));
    printf("  %-26s %s\n", "concurrent managed access:", yes_no(di.concurrent_managed_access));
    printf("  %-26s %s\n", "memory pools:", yes_no(di.memory_pools));
    printf("  %-26s %s\n", "pageable memory access:", yes_no(di.pageable_memory_access));
    printf("  %-26s %s\n", "host register:", yes_no(di.host_register));
    printf("  %-26s %s\n", "map host memory:", yes_no(di.can_map_host_memory));
  }
  return 0;
}

static void usage(FILE* to) {
  fprintf(to,
          "usage: gpumem <command>\n"
          "commands:\n"
          "  info     the library version, the CUDA driver and each device's memory and capabilities\n"
          "  replay TRACE [--device-memory SIZE] [--config NAME]...\n"
          "           replays a trace (gpumem_trace_start) through allocator configurations over a\n"
          "           simulated device (80 GiB unless given; no GPU needed): pool (the default),\n"
          "           pool:vm (segments that grow in place, over virtual memory mapped 32 MiB at a\n"
          "           time; pool:vm,unit=2MiB for another unit), pool:limit=SIZE,\n"
          "           pool:vm,limit=SIZE, device (no caching); SIZE in bytes or with KiB/MiB/GiB/TiB\n"
          "  viz TRACE [-o PAGE.html] [--config NAME] [--device-memory SIZE]\n"
          "           writes a self-contained page picturing the trace replayed through a pool:\n"
          "           memory over time and the segments at the peak (memory.html unless given)\n"
          "  summary TRACE [--top N]\n"
          "           what the trace says the traced allocator did, as torch.cuda.memory_summary()\n"
          "           prints it, and the largest allocations live at the peak\n"
          "  version  the library version\n");
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "info") == 0) return info();
  if (argc >= 2 && strcmp(argv[1], "replay") == 0) return replay_main(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "viz") == 0) return viz_main(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "summary") == 0) return summary_main(argc - 2, argv + 2);
  if (argc == 2 && strcmp(argv[1], "version") == 0) {
    printf("%s\n", gpumem_version_string());
    return 0;
  }
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage(stdout);
    return 0;
  }
  usage(stderr);
  return 2;
}
