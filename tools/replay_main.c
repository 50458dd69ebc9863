/* gpumem replay, the command: its arguments, and a table of what each configuration did. */
#include <stdio.h>
#include <string.h>

#include "replay.h"

int replay_size_option(const char* command, const char* option, const char* text, uint64_t* out) {
  const int got = replay_parse_size(text, out);
  if (got == -2)
    fprintf(stderr, "gpumem %s: %s %s: more than 2^64 - 1 bytes, the most a size can be\n", command, option, text);
  else if (got != 0 || *out == 0)
    fprintf(stderr, "gpumem %s: %s %s: give bytes, or a number with KiB, MiB, GiB or TiB (as in 1.5GiB)\n", command,
            option, text);
  return got == 0 && *out != 0 ? 0 : 2;
}

/* Bytes in GiB or MiB, after a space, right-aligned in width characters (0: as they come). */
static void print_bytes(uint64_t b, int width) {
  if (b >= (1ULL << 30))
    printf(" %*.2f GiB", width, (double)b / (double)(1ULL << 30));
  else
    printf(" %*.2f MiB", width, (double)b / (double)(1ULL << 20));
}

/* At the peak: the largest allocation the configuration would still give, found by trying (on
 * the peak's stream), so every rule of the configuration counts: its limit, the device's room,
 * its cached pieces, and giving back its cache when it runs short. */
static void largest_fit(void* context, gpumem_allocator_t* config, gpumem_stream_t stream) {
  uint64_t* fits = context;
  uint64_t lo = 0, hi = fits[1]; /* lo succeeds (or is 0); fits[1] is the device's capacity */
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2 + ((hi - lo) & 1); /* rounded up, without hi - lo + 1 wrapping */
    void* p = NULL;
    if (gpumem_alloc(config, mid, stream, &p) == GPUMEM_SUCCESS) {
      gpumem_free(config, p, stream);
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  fits[0] = lo;
}

/* The arguments: 0, or the exit status 2 after saying what is wrong. */
static int parse_arguments(int argc, char** argv, const char** path, uint64_t* capacity, const char** configs,
                           int* nconfigs) {
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--device-memory") && i + 1 < argc) {
      if (replay_size_option("replay", argv[i], argv[i + 1], capacity) != 0) return 2;
      i++;
    } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
      if (*nconfigs == 16) {
        fprintf(stderr, "gpumem replay: at most 16 configurations\n");
        return 2;
      }
      configs[(*nconfigs)++] = argv[++i];
    } else if (argv[i][0] == '-' || *path) {
      fprintf(stderr, "gpumem replay: unexpected argument \"%s\"\n", argv[i]);
      return 2;
    } else {
      *path = argv[i];
    }
  }
  if (!*path) {
    fprintf(stderr, "usage: gpumem replay TRACE [--device-memory SIZE] [--config NAME]...\n");
    return 2;
  }
  if (!*nconfigs) configs[(*nconfigs)++] = "pool";
  return 0;
}

/* One configuration's row, and the lines under it. */
static void print_result(const struct replay_result* r) {
  printf("%-24s", r->name);
  print_bytes(r->peak_live, 10);
  print_bytes(r->peak_reserved, 10);
  printf(" %9.4f %10.1f %10llu %8llu %8llu\n", r->peak_live ? (double)r->peak_reserved / (double)r->peak_live : 0.0,
         r->ns_per_op, (unsigned long long)r->allocs, (unsigned long long)r->failed,
         (unsigned long long)r->unmatched_frees);
  if (r->allocs) { /* the peak is that of what was allocated: none without an allocation */
    printf("  at the peak (record %llu): the largest allocation that would still succeed is",
           (unsigned long long)r->peak_record);
    print_bytes(r->fits_at_peak, 0);
    printf("; the device had");
    print_bytes(r->headroom_at_peak, 0);
    printf(" free\n");
  }
  if (r->failed)
    printf("  first out of memory: record %llu, %llu bytes, %.3f s into the trace\n",
           (unsigned long long)r->first_failure_record, (unsigned long long)r->first_failure_size,
           (double)r->first_failure_time_ns / 1e9);
  if (r->refused) printf("  refused: %llu allocations, first %s\n", (unsigned long long)r->refused, r->first_refusal);
  if (r->skipped)
    printf("  skipped: %llu allocations of 0 bytes and frees of them or of NULL, as RMM's replay does\n",
           (unsigned long long)r->skipped);
}

int replay_main(int argc, char** argv) {
  const char* path = NULL;
  uint64_t capacity = 80ULL << 30;
  const char* configs[16];
  int nconfigs = 0;
  const int bad = parse_arguments(argc, argv, &path, &capacity, configs, &nconfigs);
  if (bad) return bad;
  char error[1024] = "";
  const uint64_t records = replay_count_records(path, error, sizeof error);
  if (error[0]) {
    fprintf(stderr, "gpumem replay: %s\n", error);
    return 1;
  }
  printf("trace %s: %llu records; simulated device of", path, (unsigned long long)records);
  print_bytes(capacity, 0);
  printf("\n\n%-24s %14s %14s %9s %10s %10s %8s %8s\n", "configuration", "peak live", "peak reserved", "reserved/",
         "ns/op", "allocs", "failed", "unmatched");
  printf("%-24s %14s %14s %9s\n", "", "", "", "live");
  int status = 0;
  for (int c = 0; c < nconfigs; c++) {
    struct replay_result r;
    memset(&r, 0, sizeof r);
    r.name = configs[c];
    replay_run(path, capacity, records, &r, NULL);
    if (r.tool_failed) { /* every configuration after it would fail the same way */
      fflush(stdout);
      fprintf(stderr, "gpumem replay: %s: %s\n", r.name, r.error);
      return 1;
    }
    if (r.error[0]) {
      printf("%-24s could not be replayed: %s\n", r.name, r.error);
      status = 1;
      continue;
    }
    if (r.allocs) { /* again, to the peak, to try what would still fit there */
      uint64_t fits[2] = {0, capacity};
      struct replay_result again;
      memset(&again, 0, sizeof again);
      again.name = r.name;
      const struct replay_observer at_peak = {fits, NULL, r.peak_record, largest_fit};
      replay_run(path, capacity, records, &again, &at_peak);
      r.fits_at_peak = fits[0];
    }
    print_result(&r);
  }
  return status;
}
