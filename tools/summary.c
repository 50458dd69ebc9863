/* gpumem summary: what a trace says the traced allocator did, as a person reads it (the figures of
 * torch.cuda.memory_summary(): current and peak, allocated, requested and reserved bytes, large and
 * small, the counts), then the largest allocations live at the peak and where they came from. Two
 * passes over the trace: the first finds the peak, the second stops there to list what was live. */
#include "summary.h"

#include "address_map.h"
#include "cli.h"

#include <gpumem/gpumem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL_LIMIT (1u << 20) /* PyTorch's small pool: blocks under 1 MiB */

/* The allocations live at a point of the trace: their records in an array whose free slots are
 * chained (address 0, `record` the next free slot + 1), found by address through address_map. */
struct live_entry {
  uint64_t address, size, mem_size, stream, time_ns, record;
  uint32_t thread;
};
struct live_map {
  struct address_map by_address; /* address -> slot + 1 */
  struct live_entry* slots;
  size_t count, capacity, free_head; /* free_head: the first free slot + 1; 0: none */
};

static void live_release(struct live_map* m, size_t slot) {
  m->slots[slot].address = 0;
  m->slots[slot].record = m->free_head;
  m->free_head = slot + 1;
}

static int live_put(struct live_map* m, const struct live_entry* e) {
  const uint64_t replaced = address_map_take(&m->by_address, e->address); /* allocated twice: keep the last */
  if (replaced) live_release(m, (size_t)replaced - 1);
  size_t slot;
  if (m->free_head) {
    slot = m->free_head - 1;
    m->free_head = (size_t)m->slots[slot].record;
  } else {
    if (m->count == m->capacity) {
      const size_t capacity = m->capacity ? 2 * m->capacity : 1024;
      struct live_entry* grown = realloc(m->slots, capacity * sizeof *grown);
      if (!grown) return -1;
      m->slots = grown;
      m->capacity = capacity;
    }
    slot = m->count++;
  }
  m->slots[slot] = *e;
  if (address_map_put(&m->by_address, e->address, slot + 1) == 0) return 0;
  live_release(m, slot);
  return -1;
}

/* Takes the allocation at address out of the map into *out; 0 if there was none. */
static int live_take(struct live_map* m, uint64_t address, struct live_entry* out) {
  const uint64_t slot = address_map_take(&m->by_address, address);
  if (!slot) return 0;
  *out = m->slots[slot - 1];
  live_release(m, (size_t)slot - 1);
  return 1;
}

static void live_free(struct live_map* m) {
  address_map_free(&m->by_address);
  free(m->slots);
  memset(m, 0, sizeof *m);
}

/* Running figures: [0] all, [1] large, [2] small. */
struct figures {
  uint64_t allocated[3], allocated_peak[3], allocated_total[3], freed_total[3];
  uint64_t requested[3], requested_peak[3];
  uint64_t allocs[3], allocs_peak[3], allocs_total[3];
  uint64_t reserved, reserved_peak, reserved_total, released_total, segments, segments_peak, segments_total;
  uint64_t failed, first_failed_size, unknown_frees, records, peak_record;
  int has_upstream;
  char kind[32]; /* the traced allocator's, from the header */
};

static void count_alloc(struct figures* f, const struct live_entry* e) {
  const int cls = e->mem_size >= SMALL_LIMIT ? 1 : 2;
  const int idx[2] = {0, cls};
  for (int k = 0; k < 2; ++k) {
    const int i = idx[k];
    f->allocated[i] += e->mem_size;
    f->allocated_total[i] += e->mem_size;
    f->requested[i] += e->size;
    ++f->allocs[i];
    ++f->allocs_total[i];
    if (f->allocated[i] > f->allocated_peak[i]) f->allocated_peak[i] = f->allocated[i];
    if (f->requested[i] > f->requested_peak[i]) f->requested_peak[i] = f->requested[i];
    if (f->allocs[i] > f->allocs_peak[i]) f->allocs_peak[i] = f->allocs[i];
  }
}

static void count_free(struct figures* f, const struct live_entry* e) {
  const int idx[2] = {0, e->mem_size >= SMALL_LIMIT ? 1 : 2};
  for (int k = 0; k < 2; ++k) {
    f->allocated[idx[k]] -= e->mem_size;
    f->freed_total[idx[k]] += e->mem_size;
    f->requested[idx[k]] -= e->size;
    --f->allocs[idx[k]];
  }
}

/* Reads the trace at path into f, stopping after record `stop` (0: all) with the live allocations
 * left in live. 0, or 1 with the reason in error. */
static int read_trace(const char* path, uint64_t stop, struct figures* f, struct live_map* live, char* error,
                      size_t error_size) {
  gpumem_trace_reader_t* reader = NULL;
  if (gpumem_trace_reader_open(path, &reader) != GPUMEM_SUCCESS) {
    snprintf(error, error_size, "%s", gpumem_last_error_detail());
    return 1;
  }
  gpumem_trace_header_t header = {sizeof header, 0, 0, 0, {0}};
  if (gpumem_trace_reader_get_header(reader, &header) == GPUMEM_SUCCESS)
    snprintf(f->kind, sizeof f->kind, "%s", header.kind);
  gpumem_trace_record_t r = {sizeof r, 0, 0, 0, 0, 0, 0, 0, 0};
  bool more = false;
  gpumem_status_t st;
  while ((st = gpumem_trace_reader_next(reader, &r, &more)) == GPUMEM_SUCCESS && more) {
    ++f->records;
    if (r.event == GPUMEM_TRACE_ALLOC) {
      const struct live_entry e = {r.address,  r.size,  r.mem_size ? r.mem_size : r.size, r.stream, r.time_ns,
                                   f->records, r.thread};
      if (live_put(live, &e) != 0) {
        snprintf(error, error_size, "out of memory keeping the live allocations");
        break;
      }
      const uint64_t peak_before = f->allocated_peak[0];
      count_alloc(f, &e);
      if (f->allocated_peak[0] > peak_before) f->peak_record = f->records;  // where the peak is first reached
    } else if (r.event == GPUMEM_TRACE_FREE) {
      struct live_entry e;
      if (live_take(live, r.address, &e))
        count_free(f, &e);
      else
        ++f->unknown_frees;
    } else if (r.event == GPUMEM_TRACE_UPSTREAM_ALLOC || r.event == GPUMEM_TRACE_UPSTREAM_FREE) {
      const int grow = r.event == GPUMEM_TRACE_UPSTREAM_ALLOC;
      f->has_upstream = 1;
      f->reserved = grow ? f->reserved + r.size : f->reserved - (r.size < f->reserved ? r.size : f->reserved);
      f->segments = grow ? f->segments + 1 : (f->segments ? f->segments - 1 : 0);
      *(grow ? &f->reserved_total : &f->released_total) += r.size;
      f->segments_total += (uint64_t)grow;
      if (f->reserved > f->reserved_peak) f->reserved_peak = f->reserved;
      if (f->segments > f->segments_peak) f->segments_peak = f->segments;
    } else if (r.event == GPUMEM_TRACE_ALLOC_FAILED) {
      if (f->failed++ == 0) f->first_failed_size = r.size;
    }
    if (stop && f->records == stop) break;
  }
  if (st != GPUMEM_SUCCESS) snprintf(error, error_size, "%s", gpumem_last_error_detail());
  (void)gpumem_trace_reader_close(reader); /* read-only: nothing a failed close could lose */
  return error[0] != '\0';
}

static const char* bytes_text(uint64_t b, char* buf, size_t size) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  if (u == 0)
    snprintf(buf, size, "%llu B", (unsigned long long)b);
  else
    snprintf(buf, size, "%.2f %s", v, units[u]);
  return buf;
}

static void bytes_row(const char* label, uint64_t current, uint64_t peak, const uint64_t* total,
                      const uint64_t* freed) {
  char a[32], b[32], c[32], d[32];
  printf("| %-22s | %12s | %12s | %15s | %15s |\n", label, bytes_text(current, a, sizeof a),
         bytes_text(peak, b, sizeof b), total ? bytes_text(*total, c, sizeof c) : "-",
         freed ? bytes_text(*freed, d, sizeof d) : "-");
}

static void count_row(const char* label, uint64_t current, uint64_t peak, uint64_t total, uint64_t ended) {
  printf("| %-22s | %12llu | %12llu | %15llu | %15llu |\n", label, (unsigned long long)current,
         (unsigned long long)peak, (unsigned long long)total, (unsigned long long)ended);
}

static void print_table(const struct figures* f) {
  static const char* const classes[3] = {"Allocated memory", "  from large blocks", "  from small blocks"};
  static const char* const counts[3] = {"Allocations", "  large (>= 1 MiB)", "  small (< 1 MiB)"};
  printf("| %-22s | %12s | %12s | %15s | %15s |\n", "", "Current", "Peak", "Total allocated", "Total freed");
  printf("|%s|%s|%s|%s|%s|\n", "------------------------", "--------------", "--------------", "-----------------",
         "-----------------");
  for (int i = 0; i < 3; ++i)
    bytes_row(classes[i], f->allocated[i], f->allocated_peak[i], &f->allocated_total[i], &f->freed_total[i]);
  bytes_row("Requested memory", f->requested[0], f->requested_peak[0], NULL, NULL);
  if (f->has_upstream)
    bytes_row("Reserved memory", f->reserved, f->reserved_peak, &f->reserved_total, &f->released_total);
  for (int i = 0; i < 3; ++i)
    count_row(counts[i], f->allocs[i], f->allocs_peak[i], f->allocs_total[i], f->allocs_total[i] - f->allocs[i]);
  if (f->has_upstream)
    count_row("Reserved segments", f->segments, f->segments_peak, f->segments_total, f->segments_total - f->segments);
}

static int by_size_descending(const void* a, const void* b) {
  const struct live_entry* x = a;
  const struct live_entry* y = b;
  return x->mem_size < y->mem_size   ? 1
         : x->mem_size > y->mem_size ? -1
                                     : (x->record > y->record) - (x->record < y->record);
}

/* The `top` largest allocations live in `live`, largest first. */
static int print_largest(const struct live_map* live, size_t top, const struct figures* at_peak) {
  struct live_entry* all = malloc((live->count ? live->count : 1) * sizeof *all);
  if (!all) return 1;
  size_t n = 0;
  for (size_t i = 0; i < live->count; ++i)
    if (live->slots[i].address) all[n++] = live->slots[i];
  qsort(all, n, sizeof *all, by_size_descending);
  char a[32], b[32];
  printf("\nLargest allocations live at the peak (record %llu: %llu allocations, %s):\n",
         (unsigned long long)at_peak->records, (unsigned long long)n, bytes_text(at_peak->allocated[0], a, sizeof a));
  printf("  %12s %12s %18s %6s %12s %8s\n", "size", "asked", "stream", "thread", "since (s)", "record");
  for (size_t i = 0; i < n && i < top; ++i)
    printf("  %12s %12llu %#18llx %6u %12.6f %8llu\n", bytes_text(all[i].mem_size, b, sizeof b),
           (unsigned long long)all[i].size, (unsigned long long)all[i].stream, all[i].thread,
           (double)all[i].time_ns / 1e9, (unsigned long long)all[i].record);
  if (n > top) printf("  ... and %llu smaller\n", (unsigned long long)(n - top));
  free(all);
  return 0;
}

static void usage(FILE* to) {
  fprintf(to,
          "usage: gpumem summary TRACE [--top N]\n"
          "  what the trace (gpumem_trace_start) says the traced allocator did, as\n"
          "  torch.cuda.memory_summary() prints it: allocated, requested and reserved bytes and the\n"
          "  counts, current and peak, for blocks of 1 MiB or more (large) and smaller ones; failed\n"
          "  allocations; then the N largest allocations live at the peak (10 unless given)\n");
}

int summary_main(int argc, char** argv) {
  const char* path = NULL;
  size_t top = 10;
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
    top = (size_t)n;
  }
  if (!path) {
    usage(stderr);
    return 2;
  }
  char error[1024] = "";
  struct figures all = {0};
  struct live_map live = {0};
  if (read_trace(path, 0, &all, &live, error, sizeof error) != 0) {
    fprintf(stderr, "gpumem summary: %s\n", error);
    live_free(&live);
    return 1;
  }
  live_free(&live);
  printf("%s: %llu records\n\n", path, (unsigned long long)all.records);
  print_table(&all);
  if (!all.has_upstream)
    printf("(no upstream records: the traced allocator is not a pool, so nothing was reserved apart)\n");
  printf("\nFailed allocations (out of memory or refused): %llu", (unsigned long long)all.failed);
  if (all.failed) printf(", the first of %llu bytes", (unsigned long long)all.first_failed_size);
  printf("\nFrees of addresses the trace did not allocate: %llu\n", (unsigned long long)all.unknown_frees);
  if (all.peak_record == 0) return 0;
  struct figures at_peak = {0};
  struct live_map peak_live = {0};
  int rc = read_trace(path, all.peak_record, &at_peak, &peak_live, error, sizeof error);
  if (rc == 0) rc = print_largest(&peak_live, top, &at_peak);
  live_free(&peak_live);
  if (rc != 0) fprintf(stderr, "gpumem summary: %s\n", error[0] ? error : "out of memory");
  return rc;
}

int summary_recorded(const char* path, struct summary_recorded* out) {
  struct figures f = {0};
  struct live_map live = {0};
  char error[1024] = "";
  const int failed = read_trace(path, 0, &f, &live, error, sizeof error);
  live_free(&live);
  if (failed || !f.has_upstream) return 0;
  snprintf(out->kind, sizeof out->kind, "%s", f.kind[0] ? f.kind : "the traced allocator");
  out->peak_live = f.requested_peak[0];
  out->peak_reserved = f.reserved_peak;
  out->allocs = f.allocs_total[0];
  out->failed = f.failed;
  return 1;
}
