/* gpumem: the command-line tool. `gpumem info` describes the driver and the devices; `gpumem replay`
 * replays a trace through allocator configurations on any machine, and `gpumem viz` pictures it. */
#include <gpumem/gpumem.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
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

static int version(void) {
  printf("%s\n", gpumem_version_string());
  return 0;
}

static void usage(FILE* to) {
  fputs(
      "usage: gpumem COMMAND [ARGUMENT]...\n"
      "       gpumem -h | --help | -V | --version\n"
      "commands (gpumem COMMAND --help tells of each):\n"
      "  info     the library version, the CUDA driver and each device's memory and capabilities\n"
      "  replay   replays a trace through allocator configurations over a simulated device (no GPU\n"
      "           needed) and prints what each held: gpumem replay TRACE [--config NAME]...\n"
      "  viz      writes a self-contained page picturing a trace replayed through a pool:\n"
      "           gpumem viz TRACE [-o PAGE.html]\n"
      "  summary  a trace's figures as torch.cuda.memory_summary() prints them, and the largest\n"
      "           allocations live at the peak: gpumem summary TRACE [--top N]\n"
      "  version  the library version\n"
      "options:\n"
      "  -h, --help     this text\n"
      "  -V, --version  the library version, as gpumem version prints it\n",
      to);
}

static void info_usage(FILE* to) {
  fputs(
      "usage: gpumem info\n"
      "The library version, the CUDA driver and each device's memory and capabilities. Without a\n"
      "driver or a device it says so and exits 0; 1 when a device cannot be queried.\n",
      to);
}

static void version_usage(FILE* to) {
  fputs("usage: gpumem version (or gpumem --version, gpumem -V)\nThe library version, as MAJOR.MINOR.PATCH.\n", to);
}

/* A command that takes no arguments but --help. */
static int no_arguments(const char* name, int argc, char** argv, void (*usage_of)(FILE*), int (*run)(void)) {
  if (argc == 1 && cli_is_help(argv[0])) {
    usage_of(stdout);
    return 0;
  }
  if (argc) {
    fprintf(stderr, "gpumem %s: unexpected argument \"%s\"; it takes none (see gpumem %s --help)\n", name, argv[0],
            name);
    return 2;
  }
  return run();
}

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char* command = argv[1];
  if (cli_is_help(command)) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(command, "info")) return no_arguments(command, argc - 2, argv + 2, info_usage, info);
  if (!strcmp(command, "replay")) return replay_main(argc - 2, argv + 2);
  if (!strcmp(command, "viz")) return viz_main(argc - 2, argv + 2);
  if (!strcmp(command, "summary")) return summary_main(argc - 2, argv + 2);
  if (!strcmp(command, "version") || !strcmp(command, "--version") || !strcmp(command, "-V"))
    return no_arguments(command, argc - 2, argv + 2, version_usage, version);
  fprintf(stderr, "gpumem: unknown %s \"%s\"; see gpumem --help\n", command[0] == '-' ? "option" : "command", command);
  return 2;
}
