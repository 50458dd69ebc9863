/* gpumem replay, the command: its arguments, every one checked before any replay starts, and what
 * each configuration did (printed by replay_output.c). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "replay.h"
#include "summary.h"

enum { kMaxConfigs = 16 };

static const char kUsage[] =
    "usage: gpumem replay TRACE [--device-memory SIZE] [--config NAME]... [--format text|json|csv]\n"
    "Replays a trace (a gpumem trace from gpumem_trace_start, or an RMM CSV log) through allocator\n"
    "configurations over a simulated device: no GPU needed.\n"
    "options (a long option's value may also follow \"=\": --config=pool):\n"
    "  --device-memory SIZE  the simulated device's capacity; 80GiB unless given\n"
    "  --config NAME         a configuration to replay through, up to 16 times, each in its own row:\n"
    "                          pool                a gpumem pool (the default)\n"
    "                          pool:vm             segments that grow in place, over virtual memory\n"
    "                                              mapped 32MiB at a time\n"
    "                          pool:vm,unit=SIZE   mapped SIZE at a time (a power of two, at least 512)\n"
    "                          pool:limit=SIZE     a pool that holds at most SIZE\n"
    "                          options combine:    pool:vm,unit=2MiB,limit=8GiB\n"
    "                          device              no caching: every allocation from the device\n"
    "  --format FORMAT       text (a table, the default), json or csv\n"
    "  -h, --help            this text\n" CLI_SIZE_USAGE
    "json: one object, {\"trace\": PATH, \"records\": N, \"device_memory\": BYTES, \"recorded\": {...},\n"
    "\"configurations\": [...]}, with one object per configuration; recorded is null, or for a\n"
    "pool's trace (its upstream records) the traced allocator's own figures: allocator (its name),\n"
    "peak_live, peak_reserved, allocs, failed (the text table's \"as recorded\" row; csv has none).\n"
    "csv: a header line, then one row per configuration, whose\n"
    "first columns are trace, records and device_memory. Each configuration's fields (null in json,\n"
    "empty in csv, where there is none):\n"
    "  configuration           its name, as given\n"
    "  peak_live               the most bytes live allocations asked for at once\n"
    "  peak_reserved           the most bytes it held from the device at once\n"
    "  reserved_per_live       peak_reserved / peak_live\n"
    "  ns_per_op               the replay's own time per allocation or free, on this machine\n"
    "  allocs, frees           the allocations that succeeded, and the frees made\n"
    "  failed                  allocations that found no memory\n"
    "  refused                 allocations refused for another reason (a size it does not take)\n"
    "  unmatched_frees         frees of memory allocated before the recording or failed here\n"
    "  skipped                 allocations of 0 bytes and frees of them or of NULL\n"
    "  peak_record             the record at which peak_reserved was first reached\n"
    "  fits_at_peak            bytes: the largest allocation that would still succeed there\n"
    "  free_at_peak            bytes the device had free there\n"
    "  first_failure_record, first_failure_size, first_failure_time_ns  the first that failed\n"
    "                          (in json one object, first_failure: {record, size, time_ns})\n"
    "  first_refusal           the first refused: its record, size, status and detail\n"
    "  error                   why the configuration could not be replayed\n"
    "exit status: 0 when every configuration replayed with no failed or refused allocation; 1 when\n"
    "one had such allocations (the results are printed, and stderr says how many), could not be\n"
    "replayed, or the trace could not be read; 2 for a bad argument.\n";

void replay_usage(FILE* to) { fputs(kUsage, to); }

struct arguments {
  const char* path;
  uint64_t capacity;
  const char* configs[kMaxConfigs];
  int nconfigs;
  int format;
};

static int parse_format(const char* text, int* format) {
  static const char* const names[] = {"text", "json", "csv"}; /* in the order of enum replay_format */
  for (int f = 0; f < 3; f++)
    if (!strcmp(text, names[f])) {
      *format = f;
      return 0;
    }
  fprintf(stderr, "gpumem replay: --format %s: give text, json or csv\n", text);
  return 2;
}

static int add_config(struct arguments* a, const char* name) {
  struct replay_config c;
  char why[512];
  if (replay_config_parse(name, &c, why, sizeof why) != 0) {
    fprintf(stderr, "gpumem replay: --config %s: %s\n", name, why);
    return 2;
  }
  if (a->nconfigs == kMaxConfigs) {
    fprintf(stderr, "gpumem replay: --config %s: at most %d configurations\n", name, kMaxConfigs);
    return 2;
  }
  a->configs[a->nconfigs++] = name;
  return 0;
}

/* The arguments: 0; the exit status 2 after saying what is wrong; or -1 after printing the usage. */
static int parse_arguments(int argc, char** argv, struct arguments* a) {
  int positional = 0; /* after "--" */
  for (int i = 0; i < argc; i++) {
    const char* v = NULL;
    int got;
    if (positional || argv[i][0] != '-' || !argv[i][1]) {
      if (a->path) return cli_unexpected("replay", argv[i]);
      a->path = argv[i];
    } else if (!strcmp(argv[i], "--")) {
      positional = 1;
    } else if (cli_is_help(argv[i])) {
      replay_usage(stdout);
      return -1;
    } else if ((got = cli_option(argc, argv, &i, "replay", "--device-memory", &v)) != 0) {
      if (got < 0 || cli_size_option("replay", "--device-memory", v, &a->capacity) != 0) return 2;
    } else if ((got = cli_option(argc, argv, &i, "replay", "--config", &v)) != 0) {
      if (got < 0 || add_config(a, v) != 0) return 2;
    } else if ((got = cli_option(argc, argv, &i, "replay", "--format", &v)) != 0) {
      if (got < 0 || parse_format(v, &a->format) != 0) return 2;
    } else {
      return cli_unexpected("replay", argv[i]);
    }
  }
  if (!a->path) {
    fprintf(stderr,
            "gpumem replay: no TRACE given\nusage: gpumem replay TRACE [--device-memory SIZE] [--config NAME]... "
            "[--format text|json|csv]\n(gpumem replay --help tells more)\n");
    return 2;
  }
  if (!a->nconfigs) a->configs[a->nconfigs++] = "pool";
  return 0;
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

/* One configuration's replay into r, and again to its peak for what would still fit there. */
static void replay_config(const struct arguments* a, uint64_t records, const char* name, struct replay_result* r) {
  memset(r, 0, sizeof *r);
  r->name = name;
  replay_run(a->path, a->capacity, records, r, NULL);
  if (r->error[0] || !r->allocs) return;
  uint64_t fits[2] = {0, a->capacity};
  struct replay_result again;
  memset(&again, 0, sizeof again);
  again.name = name;
  const struct replay_observer at_peak = {fits, NULL, r->peak_record, largest_fit};
  replay_run(a->path, a->capacity, records, &again, &at_peak);
  r->fits_at_peak = fits[0];
}

/* Says on stderr which configurations had allocations fail: 1 if any did, else 0. */
static int report_failures(const struct arguments* a, const uint64_t* failed, const uint64_t* refused) {
  uint64_t total = 0;
  int configs = 0;
  for (int c = 0; c < a->nconfigs; c++) {
    total += failed[c] + refused[c];
    configs += failed[c] + refused[c] != 0;
  }
  if (!total) return 0;
  fflush(stdout);
  fprintf(stderr, "gpumem replay: %llu allocation%s failed, in %d of %d configurations:", (unsigned long long)total,
          total == 1 ? "" : "s", configs, a->nconfigs);
  const char* sep = " ";
  for (int c = 0; c < a->nconfigs; c++) {
    if (!failed[c] && !refused[c]) continue;
    fprintf(stderr, "%s%s %llu out of memory", sep, a->configs[c], (unsigned long long)failed[c]);
    if (refused[c]) fprintf(stderr, ", %llu refused", (unsigned long long)refused[c]);
    sep = "; ";
  }
  fputc('\n', stderr);
  return 1;
}

int replay_main(int argc, char** argv) {
  struct arguments a = {NULL, 80ULL << 30, {NULL}, 0, REPLAY_TEXT};
  const int bad = parse_arguments(argc, argv, &a);
  if (bad) return bad < 0 ? 0 : bad;
  char error[1024] = "";
  const uint64_t records = replay_count_records(a.path, error, sizeof error);
  if (error[0]) {
    fprintf(stderr, "gpumem replay: %s\n", error);
    return 1;
  }
  struct summary_recorded recorded;
  const int has_recorded = summary_recorded(a.path, &recorded);
  const struct replay_trace trace = {a.path, records, a.capacity, has_recorded ? &recorded : NULL};
  replay_print_trace(a.format, &trace);
  uint64_t failed[kMaxConfigs] = {0}, refused[kMaxConfigs] = {0};
  int status = 0;
  for (int c = 0; c < a.nconfigs; c++) {
    struct replay_result r;
    replay_config(&a, records, a.configs[c], &r);
    if (r.tool_failed) { /* every configuration after it would fail the same way */
      fflush(stdout);
      fprintf(stderr, "gpumem replay: %s: %s\n", r.name, r.error);
      return 1;
    }
    if (r.error[0]) status = 1;
    failed[c] = r.failed;
    refused[c] = r.refused;
    replay_print_result(a.format, &trace, &r, c);
  }
  replay_print_end(a.format);
  return report_failures(&a, failed, refused) || status;
}
