/* gpumem summary: what a trace says the traced allocator did, as a person reads it. The library
 * does the work (gpumem_trace_summarize()): the figures of torch.cuda.memory_summary(), then the
 * largest allocations live at the peak and, where the trace has them, the frames they came from. */
#include "summary.h"

#include "cli.h"

#include <gpumem/gpumem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE* to) {
  fprintf(to,
          "usage: gpumem summary TRACE [--top N]\n"
          "  what the trace (gpumem_trace_start) says the traced allocator did, as\n"
          "  torch.cuda.memory_summary() prints it: allocated, requested and reserved bytes and the\n"
          "  counts, current and peak, for blocks of 1 MiB or more (large) and smaller ones; failed\n"
          "  allocations; then the N largest allocations live at the peak (10 unless given), each\n"
          "  with the frames it was allocated from where the trace has them\n");
}

/* Each piece of the text as it comes: the trace is read once, so a pipe will do. */
static void write_text(const char* text, size_t length, void* user_data) {
  int* failed = user_data;
  if (!*failed && fwrite(text, 1, length, stdout) != length) *failed = 1;
}

/* Prints the summary of the trace at path; 0, or 1 with the reason on stderr. */
static int print_summary(const char* path, uint32_t top) {
  int write_failed = 0;
  if (gpumem_trace_summarize(path, top, write_text, &write_failed, NULL) != GPUMEM_SUCCESS) {
    fprintf(stderr, "gpumem summary: %s\n", gpumem_last_error_detail());
    return 1;
  }
  if (write_failed || fflush(stdout) != 0) {
    fprintf(stderr, "gpumem summary: writing the summary failed\n");
    return 1;
  }
  return 0;
}

int summary_main(int argc, char** argv) {
  const char* path = NULL;
  uint32_t top = 10;
  for (int i = 0; i < argc; ++i) {
    const char* value = NULL;
    const int top_given = cli_option(argc, argv, &i, "summary", "--top", &value);
    if (top_given < 0) return 2;
    if (cli_is_help(argv[i])) {
      usage(stdout);
      return 0;
    }
    if (!top_given) {
      if (argv[i][0] == '-' || path) return cli_unexpected("summary", argv[i]);
      path = argv[i];
      continue;
    }
    char* end = NULL;
    const unsigned long long n = strtoull(value, &end, 10);
    if (!*value || *end || value[0] == '-') {
      fprintf(stderr, "gpumem summary: --top '%s' is not a count of allocations\n", value);
      return 2;
    }
    top = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
  }
  if (!path) {
    usage(stderr);
    return 2;
  }
  return print_summary(path, top);
}

int summary_recorded(const char* path, struct summary_recorded* out) {
  gpumem_trace_summary_t s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  if (gpumem_trace_summarize(path, 0, NULL, NULL, &s) != GPUMEM_SUCCESS || !s.upstream_record_count) return 0;
  snprintf(out->kind, sizeof out->kind, "%s", s.kind[0] ? s.kind : "the traced allocator");
  out->peak_live = s.requested_bytes_peak;
  out->peak_reserved = s.reserved_bytes_peak;
  out->allocs = s.alloc_count_total;
  out->failed = s.failed_count;
  return 1;
}
