/* gpumem viz: a self-contained page (no network) picturing a trace replayed through a pool: memory
 * over time, live and reserved, and the pool's segments and blocks at the peak. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "replay.h"

enum { kWidth = 960, kPlotLeft = 90, kPlotRight = 940, kPlotTop = 20, kPlotBottom = 280, kMaxSegments = 300 };

struct point {
  uint64_t time_ns, live, reserved;
};

struct series {
  struct point* points;
  size_t count, capacity;
  uint64_t origin; /* the first record's time: traces converted from other tools count from the epoch */
  int failed;      /* out of host memory */
};

static void on_step(void* context, uint64_t time_ns, uint64_t live, uint64_t reserved) {
  struct series* s = context;
  if (s->failed) return;
  if (s->count == s->capacity) {
    const size_t capacity = s->capacity ? 2 * s->capacity : 4096;
    struct point* grown = realloc(s->points, capacity * sizeof *grown);
    if (!grown) {
      s->failed = 1;
      return;
    }
    s->points = grown;
    s->capacity = capacity;
  }
  if (!s->count) s->origin = time_ns;
  s->points[s->count++] = (struct point){time_ns - s->origin, live, reserved};
}

struct blocks {
  gpumem_block_info_t* items;
  size_t count, capacity;
  gpumem_status_t status; /* of the snapshot */
  int failed;
};

static void on_block(const gpumem_block_info_t* block, void* user_data) {
  struct blocks* b = user_data;
  if (b->failed) return;
  if (b->count == b->capacity) {
    const size_t capacity = b->capacity ? 2 * b->capacity : 1024;
    gpumem_block_info_t* grown = realloc(b->items, capacity * sizeof *grown);
    if (!grown) {
      b->failed = 1;
      return;
    }
    b->items = grown;
    b->capacity = capacity;
  }
  b->items[b->count++] = *block;
}

static void at_peak(void* context, gpumem_allocator_t* config, gpumem_stream_t stream) {
  (void)stream;
  struct blocks* b = context;
  b->status = gpumem_pool_snapshot(config, on_block, b);
}

static void human(char* out, size_t size, uint64_t bytes) {
  if (bytes >= (1ULL << 30))
    snprintf(out, size, "%.2f GiB", (double)bytes / (double)(1ULL << 30));
  else if (bytes >= (1ULL << 20))
    snprintf(out, size, "%.2f MiB", (double)bytes / (double)(1ULL << 20));
  else
    snprintf(out, size, "%.1f KiB", (double)bytes / 1024.0);
}

/* A polyline of one field of the series, at most one point per pixel column (the column's most,
 * so no peak is lost). */
static void polyline(FILE* f, const struct series* s, int reserved, uint64_t t_max, uint64_t y_max, const char* cls) {
  fprintf(f, "<polyline class=\"%s\" points=\"", cls);
  const int columns = kPlotRight - kPlotLeft;
  size_t i = 0;
  for (int x = 0; x <= columns && i < s->count; x++) {
    const uint64_t until = t_max ? (uint64_t)((double)t_max * (x + 1) / columns) : 0;
    uint64_t most = 0;
    int any = 0;
    for (; i < s->count && (s->points[i].time_ns <= until || x == columns); i++) {
      const uint64_t v = reserved ? s->points[i].reserved : s->points[i].live;
      if (v > most) most = v;
      any = 1;
    }
    if (!any) continue;
    const double y = kPlotBottom - (y_max ? (double)most / (double)y_max : 0) * (kPlotBottom - kPlotTop);
    fprintf(f, "%d,%.1f ", kPlotLeft + x, y);
  }
  fprintf(f, "\"/>\n");
}

static const char* state_class(uint32_t state) {
  switch (state) {
    case GPUMEM_BLOCK_IN_USE:
      return "used";
    case GPUMEM_BLOCK_PENDING:
      return "pending";
    default:
      return "free";
  }
}

/* Bytes from a segment's start to the end of its last block with memory mapped: all of it, but
 * over virtual memory, where the rest is addresses only. */
static uint64_t mapped_extent(const struct blocks* b, size_t first) {
  uint64_t extent = 0;
  for (size_t i = first; i < b->count && b->items[i].segment == b->items[first].segment; i++)
    if (b->items[i].state != GPUMEM_BLOCK_UNMAPPED)
      extent = (uintptr_t)b->items[i].address + b->items[i].size - (uintptr_t)b->items[i].segment;
  return extent;
}

/* Text from outside (the trace's file name, a configuration's name) as HTML text or an attribute's
 * value: a file may be called "<script>...". */
static void put_escaped(FILE* f, const char* text) {
  for (; *text; text++) {
    switch (*text) {
      case '&':
        fputs("&amp;", f);
        break;
      case '<':
        fputs("&lt;", f);
        break;
      case '>':
        fputs("&gt;", f);
        break;
      case '"':
        fputs("&quot;", f);
        break;
      case '\'':
        fputs("&#39;", f);
        break;
      default:
        fputc(*text, f);
    }
  }
}

/* The page's head, its title and the summary table. */
static void write_summary(FILE* f, const char* trace, const struct replay_result* r) {
  char live[32], reserved[32];
  human(live, sizeof live, r->peak_live);
  human(reserved, sizeof reserved, r->peak_reserved);
  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>gpumem: ", f);
  put_escaped(f, trace);
  fputs(
      "</title>\n"
      "<style>\nbody { font: 14px sans-serif; margin: 24px; color: #222; }\n"
      "h1 { font-size: 18px; } h2 { font-size: 15px; margin-top: 28px; }\n"
      "table { border-collapse: collapse; } td, th { padding: 2px 12px 2px 0; text-align: left; }\n"
      ".axis { stroke: #888; } .label { font-size: 11px; fill: #555; }\n"
      "polyline { fill: none; stroke-width: 1.5; } .live { stroke: #1f77b4; } .reserved { stroke: #ff7f0e; }\n"
      ".used { fill: #1f77b4; } .free { fill: #d8d8d8; } .pending { fill: #ff7f0e; } .segment { fill: none; "
      "stroke: #444; stroke-width: 0.5; }\n.key { display: inline-block; width: 12px; height: 12px; "
      "margin: 0 4px 0 12px; vertical-align: middle; }\n</style>\n</head>\n<body>\n",
      f);
  fputs("<h1>gpumem: ", f);
  put_escaped(f, trace);
  fputs(", replayed through ", f);
  put_escaped(f, r->name);
  fputs("</h1>\n", f);
  fprintf(f,
          "<table id=\"summary\">\n<tr><th>peak live</th><td>%s</td></tr>\n<tr><th>peak reserved</th><td>%s</td></tr>\n"
          "<tr><th>reserved / live</th><td>%.4f</td></tr>\n<tr><th>allocations</th><td>%llu</td></tr>\n"
          "<tr><th>failed allocations</th><td>%llu</td></tr>\n</table>\n",
          live, reserved, r->peak_live ? (double)r->peak_reserved / (double)r->peak_live : 0.0,
          (unsigned long long)r->allocs, (unsigned long long)r->failed);
}

/* Memory over time: live and reserved bytes against the trace's time. */
static void write_timeline(FILE* f, const struct replay_result* r, const struct series* s) {
  const uint64_t t_max = s->count ? s->points[s->count - 1].time_ns : 0;
  const uint64_t y_max = r->peak_reserved > r->peak_live ? r->peak_reserved : r->peak_live;
  fprintf(f,
          "<h2>Memory over time</h2>\n<p><span class=\"key live\" style=\"background:#1f77b4\"></span>live "
          "(bytes asked for by live allocations)<span class=\"key\" style=\"background:#ff7f0e\"></span>reserved "
          "(bytes the pool held)</p>\n");
  fprintf(f,
          "<svg id=\"timeline\" width=\"%d\" height=\"320\" viewBox=\"0 0 %d 320\" "
          "xmlns=\"http://www.w3.org/2000/svg\">\n",
          kWidth, kWidth);
  fprintf(f, "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n", kPlotLeft, kPlotBottom, kPlotRight,
          kPlotBottom);
  fprintf(f, "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n", kPlotLeft, kPlotTop, kPlotLeft,
          kPlotBottom);
  char top[32];
  human(top, sizeof top, y_max);
  fprintf(f, "<text class=\"label\" x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", kPlotLeft - 6, kPlotTop + 4,
          top);
  fprintf(f, "<text class=\"label\" x=\"%d\" y=\"%d\" text-anchor=\"end\">0</text>\n", kPlotLeft - 6, kPlotBottom);
  fprintf(f, "<text class=\"label\" x=\"%d\" y=\"%d\">0 s</text>\n", kPlotLeft, kPlotBottom + 16);
  char end[32];
  if (t_max >= 1000000000)
    snprintf(end, sizeof end, "%.3f s", (double)t_max / 1e9);
  else if (t_max >= 1000000)
    snprintf(end, sizeof end, "%.3f ms", (double)t_max / 1e6);
  else
    snprintf(end, sizeof end, "%.1f \u00b5s", (double)t_max / 1e3);
  fprintf(f, "<text class=\"label\" x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", kPlotRight, kPlotBottom + 16,
          end);
  polyline(f, s, 1, t_max, y_max, "reserved");
  polyline(f, s, 0, t_max, y_max, "live");
  fprintf(f, "</svg>\n");
}

/* The rows of the segment map: the first shown segments, scale pixels a byte. */
static void write_segment_rows(FILE* f, const struct blocks* b, size_t shown, double scale) {
  size_t row = 0, segment_start = 0;
  for (size_t i = 0; i < b->count && row <= shown; i++) {
    const gpumem_block_info_t* x = &b->items[i];
    const int first = i == 0 || x->segment != b->items[i - 1].segment;
    if (first && ++row > shown) break;
    if (first) segment_start = i;
    const double y = 2 + (double)(row - 1) * 14;
    if (first) {
      char size[32];
      human(size, sizeof size, mapped_extent(b, segment_start));
      fprintf(f, "<text class=\"label\" x=\"%d\" y=\"%.0f\" text-anchor=\"end\">%s</text>\n", kPlotLeft - 6, y + 9,
              size);
    }
    const int last = i + 1 == b->count || b->items[i + 1].segment != x->segment;
    if (last)
      fprintf(f, "<rect class=\"segment\" x=\"%d\" y=\"%.0f\" width=\"%.2f\" height=\"10\"/>\n", kPlotLeft, y,
              (double)mapped_extent(b, segment_start) * scale);
    if (x->state == GPUMEM_BLOCK_UNMAPPED) continue;  // the page shows through
    const double x0 = kPlotLeft + (double)((uintptr_t)x->address - (uintptr_t)x->segment) * scale;
    const double w = (double)x->size * scale;
    fprintf(f, "<rect class=\"%s\" x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"10\"><title>%llu bytes at %p, %s",
            state_class(x->state), x0, y, w > 0.5 ? w : 0.5, (unsigned long long)x->size, x->address,
            state_class(x->state));
    if (x->state == GPUMEM_BLOCK_IN_USE) fprintf(f, ", %llu asked", (unsigned long long)x->requested);
    fprintf(f, "</title></rect>\n");
  }
}

/* The pool's segments and blocks at the peak, one row per segment. */
static void write_segments(FILE* f, const struct replay_result* r, const struct blocks* b) {
  fprintf(f,
          "<h2>Segments at the peak</h2>\n<p>Each row is a segment (a block the pool took from the device), its "
          "width in proportion to the largest; inside, its blocks:<span class=\"key\" "
          "style=\"background:#1f77b4\"></span>in use<span class=\"key\" style=\"background:#d8d8d8\"></span>free"
          "<span class=\"key\" style=\"background:#ff7f0e\"></span>pending. Over virtual memory (pool:vm) a row "
          "is a range of addresses, drawn to the end of its mapped memory; addresses with nothing mapped "
          "are left blank.</p>\n");
  if (b->status != GPUMEM_SUCCESS) {
    fputs("<p id=\"no-segments\">No segment map: the configuration ", f);
    put_escaped(f, r->name);
    fputs(" is not a pool.</p>\n", f);
  } else {
    size_t segments = 0;
    uint64_t largest = 1;
    for (size_t i = 0; i < b->count; i++) {
      if (i > 0 && b->items[i].segment == b->items[i - 1].segment) continue;
      segments++;
      if (mapped_extent(b, i) > largest) largest = mapped_extent(b, i);
    }
    const size_t shown = segments < kMaxSegments ? segments : kMaxSegments;
    if (shown < segments) fprintf(f, "<p>The first %zu of %zu segments, by address.</p>\n", shown, segments);
    fprintf(f,
            "<svg id=\"segments\" width=\"%d\" height=\"%zu\" viewBox=\"0 0 %d %zu\" "
            "xmlns=\"http://www.w3.org/2000/svg\">\n",
            kWidth, shown * 14 + 4, kWidth, shown * 14 + 4);
    write_segment_rows(f, b, shown, (double)(kPlotRight - kPlotLeft) / (double)largest);
    fprintf(f, "</svg>\n");
  }
}

static void write_page(FILE* f, const char* trace, const struct replay_result* r, const struct series* s,
                       const struct blocks* b) {
  write_summary(f, trace, r);
  write_timeline(f, r, s);
  write_segments(f, r, b);
  fprintf(f, "</body>\n</html>\n");
}

static const char kUsage[] =
    "usage: gpumem viz TRACE [-o PAGE.html] [--config NAME] [--device-memory SIZE]\n"
    "Writes a self-contained page (it loads nothing) picturing the trace replayed through one\n"
    "configuration: memory over time, and the pool's segments at the peak.\n"
    "options (a long option's value may also follow \"=\": --config=pool:vm):\n"
    "  -o, --output PAGE     the page to write; memory.html unless given\n"
    "  --config NAME         the configuration, once: pool unless given, or any other that\n"
    "                        gpumem replay takes (gpumem replay --help lists them)\n"
    "  --device-memory SIZE  the simulated device's capacity; 80GiB unless given\n"
    "  -h, --help            this text\n" CLI_SIZE_USAGE
    "exit status: 0 when the page is written; 1 when the trace could not be read or replayed or\n"
    "the page not written; 2 for a bad argument.\n";

void viz_usage(FILE* to) { fputs(kUsage, to); }

struct arguments {
  const char* path;
  const char* out;
  const char* config; /* NULL: not given, so pool */
  uint64_t capacity;
};

/* The configuration, given once: a page pictures one. */
static int set_config(struct arguments* a, const char* name) {
  if (a->config) {
    fprintf(stderr,
            "gpumem viz: --config %s: a second configuration (after %s); a page pictures one: run gpumem viz once for "
            "each, with -o\n",
            name, a->config);
    return 2;
  }
  struct replay_config c;
  char why[512];
  if (replay_config_parse(name, &c, why, sizeof why) != 0) {
    fprintf(stderr, "gpumem viz: --config %s: %s\n", name, why);
    return 2;
  }
  a->config = name;
  return 0;
}

/* The arguments: 0; the exit status 2 after saying what is wrong; or -1 after printing the usage. */
static int parse_arguments(int argc, char** argv, struct arguments* a) {
  int positional = 0; /* after "--" */
  for (int i = 0; i < argc; i++) {
    const char* v = NULL;
    int got;
    if (positional || argv[i][0] != '-' || !argv[i][1]) {
      if (a->path) return cli_unexpected("viz", argv[i]);
      a->path = argv[i];
    } else if (!strcmp(argv[i], "--")) {
      positional = 1;
    } else if (cli_is_help(argv[i])) {
      viz_usage(stdout);
      return -1;
    } else if ((got = cli_option(argc, argv, &i, "viz", "-o", &v)) != 0 ||
               (got = cli_option(argc, argv, &i, "viz", "--output", &v)) != 0) {
      if (got < 0) return 2;
      a->out = v;
    } else if ((got = cli_option(argc, argv, &i, "viz", "--config", &v)) != 0) {
      if (got < 0 || set_config(a, v) != 0) return 2;
    } else if ((got = cli_option(argc, argv, &i, "viz", "--device-memory", &v)) != 0) {
      if (got < 0 || cli_size_option("viz", "--device-memory", v, &a->capacity) != 0) return 2;
    } else {
      return cli_unexpected("viz", argv[i]);
    }
  }
  if (!a->path) {
    fprintf(stderr,
            "gpumem viz: no TRACE given\nusage: gpumem viz TRACE [-o PAGE.html] [--config NAME] "
            "[--device-memory SIZE]\n(gpumem viz --help tells more)\n");
    return 2;
  }
  if (!a->config) a->config = "pool";
  return 0;
}

/* The page, once the replays are done: the exit status. */
static int write_file(const char* out, const char* path, uint64_t records, const struct replay_result* r,
                      const struct series* s, const struct blocks* b) {
  FILE* f = fopen(out, "w");
  if (!f) {
    fprintf(stderr, "gpumem viz: cannot create %s: %s\n", out, strerror(errno));
    return 1;
  }
  write_page(f, path, r, s, b);
  if (fclose(f) != 0) {
    fprintf(stderr, "gpumem viz: writing %s failed: %s\n", out, strerror(errno));
    return 1;
  }
  printf("wrote %s: %llu records, peak live %llu bytes, peak reserved %llu bytes\n", out, (unsigned long long)records,
         (unsigned long long)r->peak_live, (unsigned long long)r->peak_reserved);
  return 0;
}

int viz_main(int argc, char** argv) {
  struct arguments a = {NULL, "memory.html", NULL, 80ULL << 30};
  const int bad = parse_arguments(argc, argv, &a);
  if (bad) return bad < 0 ? 0 : bad;
  char error[1024] = "";
  const uint64_t records = replay_count_records(a.path, error, sizeof error);
  if (error[0]) {
    fprintf(stderr, "gpumem viz: %s\n", error);
    return 1;
  }
  /* Once for the series and the peak's record, once more to the peak for its segments. */
  struct series s = {0};
  struct replay_result r;
  memset(&r, 0, sizeof r);
  r.name = a.config;
  struct replay_observer timeline = {&s, on_step, 0, NULL};
  replay_run(a.path, a.capacity, records, &r, &timeline);
  struct blocks b = {0};
  b.status = GPUMEM_ERROR_INVALID_HANDLE;
  struct replay_result again;
  memset(&again, 0, sizeof again);
  again.name = a.config;
  struct replay_observer peak = {&b, NULL, r.peak_record, at_peak};
  if (!r.error[0] && r.allocs) replay_run(a.path, a.capacity, records, &again, &peak);
  int status = 0;
  if (r.error[0] || s.failed || b.failed) {
    fprintf(stderr, "gpumem viz: %s\n", r.error[0] ? r.error : "out of host memory for the picture");
    status = 1;
  } else {
    status = write_file(a.out, a.path, records, &r, &s, &b);
  }
  free(s.points);
  free(b.items);
  return status;
}
