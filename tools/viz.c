/* gpumem viz, the command: its arguments, the trace (a gpumem trace, an RMM log, or a PyTorch
 * snapshot, whose records are written to a temporary file for the replays to read), and the page. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "rmm_csv.h"
#include "trace_stacks.h"
#include "viz.h"

/* Past some 20,000 bands a browser takes seconds to lay the page out and to draw it. */
enum { kDefaultBands = 3000, kMaxBands = 20000 };

static const char kUsage[] =
    "usage: gpumem viz TRACE [-o PAGE.html] [--config NAME]... [--device-memory SIZE] [--bands N]\n"
    "                 [--device N]\n"
    "Writes one self-contained page (it loads nothing) picturing the trace replayed through each\n"
    "configuration over a simulated device, as gpumem replay does. TRACE is a gpumem trace, an RMM\n"
    "CSV log, or a PyTorch snapshot (the pickle of torch.cuda.memory._dump_snapshot(), read without\n"
    "PyTorch); the call stacks of a snapshot, and of a trace recorded with frames, are shown. The\n"
    "page shows:\n"
    "  - every allocation as a band of a stacked timeline, coloured by stream or a lane per stream;\n"
    "    the wheel zooms, a drag zooms to what it spans, shift+drag or the strip below pans, a\n"
    "    double click shows the whole trace; hovering or clicking a band tells its size, stream,\n"
    "    allocation and free, call stack and segment;\n"
    "  - each configuration's reserved bytes on the same axes, with the peaks of live and reserved\n"
    "    bytes marked, and a table of their figures;\n"
    "  - the segments at the peak of reserved bytes, the largest first, with what is left out.\n"
    "options (a long option's value may also follow \"=\": --config=pool:vm):\n"
    "  -o, --output PAGE     the page to write, memory.html unless given; it is replaced once the\n"
    "                        new page is written whole\n"
    "  --config NAME         a configuration, up to 16 times, each drawn on the same axes: pool\n"
    "                        unless given, or any other that gpumem replay takes (gpumem replay\n"
    "                        --help lists them)\n"
    "  --device-memory SIZE  the simulated device's capacity; 80GiB unless given\n"
    "  --bands N             the most allocations drawn as bands of their own, the largest;\n"
    "                        the rest are summed per stream in one band, \"other\" (3000 unless\n"
    "                        given; at most 20000)\n"
    "  --device N            a snapshot's device; the first with a history unless given\n"
    "  -h, --help            this text\n" CLI_SIZE_USAGE
    "Open PAGE.html#selftest to have the page exercise itself and print what it saw.\n"
    "exit status: 0 when the page is written; 1 when the trace could not be read or replayed or\n"
    "the page not written; 2 for a bad argument.\n";

void viz_usage(FILE* to) { fputs(kUsage, to); }

struct arguments {
  const char* path;
  const char* out;
  const char* configs[VIZ_MAX_CONFIGS];
  int nconfigs;
  uint64_t capacity;
  uint64_t bands;
  int32_t device; /* -1: the first with a history */
};

static int add_config(struct arguments* a, const char* name) {
  struct replay_config c;
  char why[512];
  if (replay_config_parse(name, &c, why, sizeof why) != 0) {
    fprintf(stderr, "gpumem viz: --config %s: %s\n", name, why);
    return 2;
  }
  if (a->nconfigs == VIZ_MAX_CONFIGS) {
    fprintf(stderr, "gpumem viz: --config %s: at most %d configurations\n", name, VIZ_MAX_CONFIGS);
    return 2;
  }
  a->configs[a->nconfigs++] = name;
  return 0;
}

/* A count option: decimal digits, from lo to hi. */
static int count_option(const char* option, const char* text, uint64_t lo, uint64_t hi, uint64_t* out) {
  uint64_t v = 0;
  const size_t digits = strspn(text, "0123456789");
  int ok = digits > 0 && digits <= 19 && !text[digits];
  if (ok) v = strtoull(text, NULL, 10);
  if (ok && v >= lo && v <= hi) {
    *out = v;
    return 0;
  }
  fprintf(stderr, "gpumem viz: %s %s: give a whole number from %llu to %llu\n", option, text, (unsigned long long)lo,
          (unsigned long long)hi);
  return 2;
}

/* --bands: a count, from 1 to kMaxBands; more is refused with why. */
static int bands_option(const char* text, uint64_t* out) {
  const size_t digits = strspn(text, "0123456789");
  if (digits && !text[digits] && (digits > 19 || strtoull(text, NULL, 10) > kMaxBands)) {
    fprintf(stderr,
            "gpumem viz: --bands %s: at most %d allocations are drawn as bands of their own (a browser takes "
            "seconds to lay out and draw more); the rest are summed in the band \"other\"\n",
            text, kMaxBands);
    return 2;
  }
  return count_option("--bands", text, 1, kMaxBands, out);
}

/* An option with a value: 1 when it is one (got: 0, or 2 after saying what is wrong), else 0. */
static int value_option(int argc, char** argv, int* i, struct arguments* a, int* got) {
  const char* v = NULL;
  int is;
  uint64_t device = 0;
  if ((is = cli_option(argc, argv, i, "viz", "-o", &v)) || (is = cli_option(argc, argv, i, "viz", "--output", &v))) {
    *got = is < 0 ? 2 : 0;
    a->out = v;
  } else if ((is = cli_option(argc, argv, i, "viz", "--config", &v))) {
    *got = is < 0 ? 2 : add_config(a, v);
  } else if ((is = cli_option(argc, argv, i, "viz", "--device-memory", &v))) {
    *got = is < 0 ? 2 : cli_size_option("viz", "--device-memory", v, &a->capacity);
  } else if ((is = cli_option(argc, argv, i, "viz", "--bands", &v))) {
    *got = is < 0 ? 2 : bands_option(v, &a->bands);
  } else if ((is = cli_option(argc, argv, i, "viz", "--device", &v))) {
    *got = is < 0 ? 2 : count_option("--device", v, 0, INT32_MAX, &device);
    a->device = (int32_t)device;
  }
  return is != 0;
}

/* The arguments: 0; the exit status 2 after saying what is wrong; or -1 after printing the usage. */
static int parse_arguments(int argc, char** argv, struct arguments* a) {
  int positional = 0; /* after "--" */
  for (int i = 0; i < argc; i++) {
    int got = 0;
    if (positional || argv[i][0] != '-' || !argv[i][1]) {
      if (a->path) return cli_unexpected("viz", argv[i]);
      a->path = argv[i];
    } else if (!strcmp(argv[i], "--")) {
      positional = 1;
    } else if (cli_is_help(argv[i])) {
      viz_usage(stdout);
      return -1;
    } else if (value_option(argc, argv, &i, a, &got)) {
      if (got) return got;
    } else {
      return cli_unexpected("viz", argv[i]);
    }
  }
  if (!a->path) {
    fprintf(stderr,
            "gpumem viz: no TRACE given\nusage: gpumem viz TRACE [-o PAGE.html] [--config NAME]... "
            "[--device-memory SIZE] [--bands N] [--device N]\n(gpumem viz --help tells more)\n");
    return 2;
  }
  if (!a->nconfigs) a->configs[a->nconfigs++] = "pool";
  return 0;
}

static const char* format_of(const char* path) {
  FILE* f = fopen(path, "rb");
  struct rmm_csv csv;
  const int rmm = f && rmm_csv_open(&csv, f, path);
  if (f) fclose(f);
  return rmm ? "RMM log" : "gpumem trace";
}

/* A snapshot's records, as a trace in a temporary file (its name into name) that the replays read
 * by that name, which viz_main removes when they are done: NULL with errno set, and no file. */
static FILE* snapshot_trace(const struct torch_snapshot* s, char* name, size_t name_size) {
  const char* dir = getenv("TMPDIR");
  if ((size_t)snprintf(name, name_size, "%s/gpumem-viz-XXXXXX", dir && *dir ? dir : "/tmp") >= name_size) {
    errno = ENAMETOOLONG;
    return NULL;
  }
  const int fd = mkstemp(name);
  if (fd < 0) return NULL;
  FILE* f = fdopen(fd, "w+b");
  if (f && torch_snapshot_write_trace(s, f) == 0) return f;
  const int why = errno;
  if (f)
    fclose(f);
  else
    close(fd);
  unlink(name);
  errno = why;
  return NULL;
}

/* The page into a new file beside out, renamed over out once whole: a failed write leaves no half a
 * page, and whatever out held before. 0, or -1 after saying why. */
static int write_page_file(const char* out, const struct viz_trace* t) {
  const size_t n = strlen(out);
  char* temp = malloc(n + sizeof ".XXXXXX");
  if (!temp) return fprintf(stderr, "gpumem viz: writing %s failed: out of host memory\n", out), -1;
  memcpy(temp, out, n);
  memcpy(temp + n, ".XXXXXX", sizeof ".XXXXXX");
  const int fd = mkstemp(temp);
  FILE* f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    fprintf(stderr, "gpumem viz: cannot create %s: %s\n", out, strerror(errno));
    if (fd >= 0) {
      close(fd);
      unlink(temp);
    }
    free(temp);
    return -1;
  }
  const mode_t mask = umask(0); /* mkstemp's file is the owner's alone; a page is as fopen makes it */
  umask(mask);
  errno = 0; /* what a failed write of the page leaves here is why it failed */
  const int no_memory = viz_write_page(f, t) != 0;
  int why = fchmod(fd, 0666 & ~mask) != 0 || fflush(f) != 0 || ferror(f) ? (errno ? errno : EIO) : 0;
  if (fclose(f) != 0 && !why) why = errno;
  const int renamed = !no_memory && !why && rename(temp, out) == 0;
  if (!renamed) {
    if (!no_memory && !why) why = errno;
    fprintf(stderr, "gpumem viz: writing %s failed: %s\n", out, no_memory ? "out of host memory" : strerror(why));
    unlink(temp);
  }
  free(temp);
  return renamed ? 0 : -1;
}

/* The page, once the replays are done: the exit status. */
static int write_file(const char* out, const struct viz_trace* t) {
  if (write_page_file(out, t) != 0) return 1;
  printf("wrote %s: %llu records", out, (unsigned long long)t->records);
  for (int i = 0; i < t->config_count; i++) {
    const struct replay_result* r = &t->configs[i].r;
    if (t->config_count > 1) printf("; %s:", r->name);
    printf("%s peak live %llu bytes, peak reserved %llu bytes", t->config_count > 1 ? "" : ",",
           (unsigned long long)r->peak_live, (unsigned long long)r->peak_reserved);
  }
  printf("\n");
  return 0;
}

/* Counts, replays and writes: the exit status. A gpumem trace's call stacks are read into stacks
 * once the count has found it a trace that may be read again (a regular file, whole). */
static int picture(const struct arguments* a, struct viz_trace* t, struct torch_snapshot* stacks) {
  char error[1024] = "";
  t->records = replay_count_records(t->replayed, error, sizeof error);
  const int found = !error[0] && !strcmp(t->format, "gpumem trace")
                        ? trace_stacks_read(t->path, t->records, stacks, error, sizeof error)
                        : 0;
  if (error[0]) {
    fprintf(stderr, "gpumem viz: %s\n", error);
    return 1;
  }
  if (found > 0) t->snapshot = stacks;
  t->has_recorded = summary_recorded(t->replayed, &t->recorded);
  for (int i = 0; i < a->nconfigs; i++) t->configs[i].r.name = a->configs[i];
  t->config_count = a->nconfigs;
  if (viz_gather(t, error, sizeof error) != 0) {
    fprintf(stderr, "gpumem viz: %s\n", error);
    return 1;
  }
  return write_file(a->out, t);
}

int viz_main(int argc, char** argv) {
  struct arguments a = {NULL, "memory.html", {NULL}, 0, 80ULL << 30, kDefaultBands, -1};
  const int bad = parse_arguments(argc, argv, &a);
  if (bad) return bad < 0 ? 0 : bad;
  struct viz_trace* t = calloc(1, sizeof *t);
  if (!t) return 1;
  t->path = t->replayed = a.path;
  t->capacity = a.capacity;
  t->band_limit = (size_t)a.bands;
  struct torch_snapshot snapshot;
  memset(&snapshot, 0, sizeof snapshot);
  char error[1024], replayed[4096] = "";
  FILE* file = NULL;
  int status = 0;
  const int is_snapshot = torch_snapshot_sniff(a.path);
  if (a.device >= 0 && !is_snapshot) {
    fprintf(stderr, "gpumem viz: --device %d: %s is not a PyTorch snapshot, whose device --device picks\n",
            (int)a.device, a.path);
    status = 2;
  } else if (is_snapshot) {
    if (torch_snapshot_read(a.path, a.device, &snapshot, error, sizeof error) != 0) {
      fprintf(stderr, "gpumem viz: %s\n", error);
      status = 1;
    } else if (!(file = snapshot_trace(&snapshot, replayed, sizeof replayed))) {
      fprintf(stderr, "gpumem viz: a file for the snapshot's records: %s\n", strerror(errno));
      status = 1;
    }
    t->snapshot = &snapshot;
    t->replayed = replayed;
    t->format = "PyTorch snapshot";
  } else {
    t->format = format_of(a.path);
  }
  if (!status) status = picture(&a, t, &snapshot);
  if (file) {
    fclose(file);
    unlink(replayed);
  }
  torch_snapshot_free(&snapshot);
  viz_free(t);
  free(t);
  return status;
}
