/* gpumem replay: a trace's allocations and frees, replayed through allocator configurations over a
 * simulated device (address space only: no memory is touched, no GPU is needed). */
#define _POSIX_C_SOURCE 200809L

#include "replay.h"

#include <errno.h>
#include <gpumem/gpumem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- The simulated device: hands out address ranges up to its capacity, never reusing one. ---- */

struct device {
  uint64_t capacity, reserved, peak_reserved, next;
  uint64_t unit; /* with virtual memory: the bytes mapped at a time */
};

/* Takes size bytes of the device's memory; 0 when it has no more. */
static int device_take(struct device* d, size_t size) {
  if (size > d->capacity - d->reserved) return 0;
  d->reserved += size;
  if (d->reserved > d->peak_reserved) d->peak_reserved = d->reserved;
  return 1;
}

static gpumem_status_t device_alloc(void* context, size_t size, int32_t dev, gpumem_stream_t stream, void** out) {
  (void)dev;
  (void)stream;
  struct device* d = context;
  if (!device_take(d, size)) return GPUMEM_ERROR_OUT_OF_MEMORY;
  *out = (void*)(uintptr_t)d->next;
  d->next += (size + 4095) / 4096 * 4096; /* page-aligned, as the driver's are */
  return GPUMEM_SUCCESS;
}

static gpumem_status_t device_free(void* context, void* ptr, size_t size, int32_t dev, gpumem_stream_t stream) {
  (void)ptr;
  (void)dev;
  (void)stream;
  struct device* d = context;
  d->reserved -= size;
  return GPUMEM_SUCCESS;
}

/* Virtual memory, as CUDA's: address ranges reserved without memory, memory mapped into them by the
 * unit (gpumem_allocator_create_vm's default unless given). Only what is mapped counts against the
 * capacity. */
#define DEVICE_MAP_UNIT ((uint64_t)32 << 20)

static gpumem_status_t device_reserve(void* context, size_t size, int32_t dev, void** out) {
  (void)dev;
  struct device* d = context;
  d->next = (d->next + d->unit - 1) / d->unit * d->unit;
  *out = (void*)(uintptr_t)d->next;
  d->next += size;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t device_unreserve(void* context, void* ptr, size_t size, int32_t dev) {
  (void)context;
  (void)ptr;
  (void)size;
  (void)dev;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t device_map(void* context, void* ptr, size_t size, int32_t dev) {
  (void)ptr;
  (void)dev;
  return device_take(context, size) ? GPUMEM_SUCCESS : GPUMEM_ERROR_OUT_OF_MEMORY;
}

static gpumem_status_t device_unmap(void* context, void* ptr, size_t size, int32_t dev) {
  return device_free(context, ptr, size, dev, NULL);
}

/* ---- Addresses of the trace to those of the replay: open addressing, grown at half full. ---- */

struct address_map {
  uint64_t* keys; /* 0: empty; a deleted slot keeps its key with a value of 0 */
  uint64_t* values;
  size_t mask, used;
};

static size_t slot_of(uint64_t key, size_t mask) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return (size_t)key & mask;
}

static int map_grow(struct address_map* m) {
  const size_t capacity = m->keys ? 2 * (m->mask + 1) : 1024;
  uint64_t* keys = calloc(capacity, sizeof *keys);
  uint64_t* values = calloc(capacity, sizeof *values);
  if (!keys || !values) {
    free(keys);
    free(values);
    return -1;
  }
  size_t used = 0;
  for (size_t i = 0; m->keys && i <= m->mask; i++) {
    if (!m->keys[i] || !m->values[i]) continue;
    size_t j = slot_of(m->keys[i], capacity - 1);
    while (keys[j]) j = (j + 1) & (capacity - 1);
    keys[j] = m->keys[i];
    values[j] = m->values[i];
    used++;
  }
  free(m->keys);
  free(m->values);
  m->keys = keys;
  m->values = values;
  m->mask = capacity - 1;
  m->used = used;
  return 0;
}

static int map_put(struct address_map* m, uint64_t key, uint64_t value) {
  if ((!m->keys || 2 * (m->used + 1) > m->mask + 1) && map_grow(m) != 0) return -1;
  size_t i = slot_of(key, m->mask);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & m->mask;
  if (!m->keys[i]) m->used++;
  m->keys[i] = key;
  m->values[i] = value;
  return 0;
}

/* The value for key, removed from the map; 0 if there is none. */
static uint64_t map_take(struct address_map* m, uint64_t key) {
  if (!m->keys) return 0;
  for (size_t i = slot_of(key, m->mask); m->keys[i]; i = (i + 1) & m->mask) {
    if (m->keys[i] != key) continue;
    const uint64_t v = m->values[i];
    m->values[i] = 0;
    return v;
  }
  return 0;
}

static void map_free(struct address_map* m) {
  free(m->keys);
  free(m->values);
  memset(m, 0, sizeof *m);
}

/* ---- Where records come from: a gpumem trace, or RMM's CSV log (logging_resource_adaptor). ---- */

struct source {
  gpumem_trace_reader_t* reader; /* a gpumem trace; else the CSV file below */
  FILE* csv;
  const char* path;
  uint64_t line;
  double first_time; /* the CSV's first time, in seconds; negative before the first row */
};

/* Seconds from RMM's time column: seconds since 1970 ("1634567890.234567"), or older logs'
 * "HH:MM:SS:microseconds". */
static double csv_seconds(const char* text) {
  int h = 0, m = 0, sec = 0;
  long us = 0;
  if (strchr(text, ':') && sscanf(text, "%d:%d:%d:%ld", &h, &m, &sec, &us) == 4)
    return h * 3600.0 + m * 60.0 + sec + (double)us / 1e6;
  return strtod(text, NULL);
}

static int source_open(struct source* src, const char* path, char* error, size_t error_size) {
  memset(src, 0, sizeof *src);
  src->path = path;
  src->first_time = -1;
  FILE* f = fopen(path, "rb");
  if (!f) {
    snprintf(error, error_size, "cannot open the trace file %s: %s", path, strerror(errno));
    return -1;
  }
  char head[64] = "";
  if (!fgets(head, sizeof head, f)) head[0] = '\0';
  if (strncmp(head, "Thread,Time,Action,Pointer,Size,Stream", 38) == 0) {
    src->csv = f; /* the header line is read: rows follow */
    src->line = 1;
    return 0;
  }
  fclose(f);
  const gpumem_status_t st = gpumem_trace_reader_open(path, &src->reader);
  if (st != GPUMEM_SUCCESS) {
    snprintf(error, error_size,
             "%s: %s (neither a gpumem trace nor an RMM CSV log, which starts with "
             "\"Thread,Time,Action,Pointer,Size,Stream\")",
             gpumem_status_name(st), gpumem_last_error_detail());
    return -1;
  }
  return 0;
}

/* The next record into rec: 1, 0 at the end, -1 with error set. */
static int source_next(struct source* src, gpumem_trace_record_t* rec, char* error, size_t error_size) {
  if (src->reader) {
    bool more = false;
    const gpumem_status_t st = gpumem_trace_reader_next(src->reader, rec, &more);
    if (st == GPUMEM_SUCCESS) return more;
    snprintf(error, error_size, "%s: %s", gpumem_status_name(st), gpumem_last_error_detail());
    return -1;
  }
  char row[512];
  if (!fgets(row, sizeof row, src->csv)) return 0;
  src->line++;
  char time[64], action[32];
  unsigned long long thread = 0, pointer = 0, size = 0, stream = 0;
  if (sscanf(row, "%llu,%63[^,],%31[^,],%llx,%llu,%llx", &thread, time, action, &pointer, &size, &stream) != 6) {
    snprintf(error, error_size, "%s, line %llu: not a row of Thread,Time,Action,Pointer,Size,Stream", src->path,
             (unsigned long long)src->line);
    return -1;
  }
  const double t = csv_seconds(time);
  if (src->first_time < 0) src->first_time = t;
  const size_t struct_size = rec->struct_size;
  memset(rec, 0, sizeof *rec);
  rec->struct_size = struct_size;
  rec->thread = (uint32_t)thread;
  rec->time_ns = t > src->first_time ? (uint64_t)((t - src->first_time) * 1e9) : 0;
  rec->stream = stream;
  rec->address = pointer;
  rec->size = size;
  if (!strcmp(action, "allocate")) {
    rec->event = GPUMEM_TRACE_ALLOC;
    rec->mem_size = size;
  } else if (!strcmp(action, "free") || !strcmp(action, "deallocate")) {
    rec->event = GPUMEM_TRACE_FREE;
  } else if (!strcmp(action, "allocate failure")) {
    rec->event = GPUMEM_TRACE_ALLOC_FAILED;
    rec->status = GPUMEM_ERROR_OUT_OF_MEMORY;
  } else {
    snprintf(error, error_size, "%s, line %llu: unknown action \"%s\"", src->path, (unsigned long long)src->line,
             action);
    return -1;
  }
  return 1;
}

static void source_close(struct source* src) {
  gpumem_trace_reader_close(src->reader);
  if (src->csv) fclose(src->csv);
  memset(src, 0, sizeof *src);
}

/* ---- One configuration's replay. ---- */

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int replay_parse_size(const char* text, uint64_t* out) {
  char* end = NULL;
  const double v = strtod(text, &end);
  if (end == text || v < 0) return -1;
  double unit = 1;
  if (!strcmp(end, "") || !strcmp(end, "B"))
    unit = 1;
  else if (!strcmp(end, "KiB"))
    unit = 1024.0;
  else if (!strcmp(end, "MiB"))
    unit = 1024.0 * 1024;
  else if (!strcmp(end, "GiB"))
    unit = 1024.0 * 1024 * 1024;
  else if (!strcmp(end, "TiB"))
    unit = 1024.0 * 1024 * 1024 * 1024;
  else
    return -1;
  *out = (uint64_t)(v * unit);
  return 0;
}

#define CONFIG_NAMES "device, pool, or pool: with vm, unit=SIZE and limit=SIZE, comma-separated (pool:vm,limit=8GiB)"

struct config {
  int pool;
  uint64_t limit; /* 0: none */
  uint64_t unit;  /* over virtual memory: the map unit; 0: not */
};

/* Reads a configuration's name: "device", or "pool" with options after a colon: "vm" (over the
 * device's virtual memory), "unit=SIZE" (that, mapped SIZE at a time) and "limit=SIZE". */
static int parse_config(const char* name, struct config* c) {
  memset(c, 0, sizeof *c);
  if (!strcmp(name, "device")) return 0;
  if (strncmp(name, "pool", 4) != 0 || (name[4] && name[4] != ':')) return -1;
  c->pool = 1;
  if (!name[4]) return 0;
  char options[128];
  if (snprintf(options, sizeof options, "%s", name + 5) >= (int)sizeof options) return -1;
  char* saved = NULL;
  for (char* o = strtok_r(options, ",", &saved); o; o = strtok_r(NULL, ",", &saved)) {
    if (!strcmp(o, "vm")) {
      if (!c->unit) c->unit = DEVICE_MAP_UNIT;
    } else if (!strncmp(o, "unit=", 5)) {
      if (replay_parse_size(o + 5, &c->unit) != 0 || c->unit == 0) return -1;
    } else if (strncmp(o, "limit=", 6) != 0 || replay_parse_size(o + 6, &c->limit) != 0) {
      return -1;
    }
  }
  return 0;
}

/* Makes the allocator a configuration names over the device. */
static int make_config(const char* name, gpumem_allocator_t* device, gpumem_allocator_t** out, char* error,
                       size_t error_size) {
  struct config c;
  if (parse_config(name, &c) != 0) {
    snprintf(error, error_size, "unknown configuration \"%s\" (use " CONFIG_NAMES ")", name);
    return -1;
  }
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = device;
  params.limit = c.limit;
  if (!c.pool) {
    *out = device;
    return 0;
  }
  const gpumem_status_t st = gpumem_pool_create(&params, out);
  if (st != GPUMEM_SUCCESS) {
    snprintf(error, error_size, "%s: %s", gpumem_status_name(st), gpumem_last_error_detail());
    return -1;
  }
  return 0;
}

static void progress(const char* name, uint64_t done, uint64_t total) {
  fprintf(stderr, "\r%-24s %3d%%", name, (int)(total ? 100 * done / total : 100));
  if (done == total) fputc('\n', stderr);
}

void replay_run(const char* path, uint64_t capacity, uint64_t records, struct replay_result* r,
                const struct replay_observer* observer) {
  struct device dev = {capacity, 0, 0, 0x100000000000ULL, 0};
  gpumem_allocator_functions_t fns;
  memset(&fns, 0, sizeof fns);
  fns.struct_size = sizeof fns;
  fns.context = &dev;
  fns.device = -1;
  fns.alloc = device_alloc;
  fns.free = device_free;
  struct config c;
  if (parse_config(r->name, &c) == 0 && c.unit) {
    dev.unit = c.unit;
    fns.reserve = device_reserve;
    fns.unreserve = device_unreserve;
    fns.map = device_map;
    fns.unmap = device_unmap;
    fns.map_unit = c.unit;
    fns.range_size = (capacity + c.unit - 1) / c.unit * c.unit;
  }
  gpumem_allocator_t* device = NULL;
  gpumem_allocator_t* config = NULL;
  struct source src = {0};
  struct address_map map = {0};   /* the trace's address to the replay's */
  struct address_map sizes = {0}; /* the trace's address to the bytes its allocation asked */
  gpumem_status_t st = gpumem_allocator_create_functions(&fns, &device);
  if (st == GPUMEM_SUCCESS && make_config(r->name, device, &config, r->error, sizeof r->error) != 0) goto done;
  if (st != GPUMEM_SUCCESS) {
    snprintf(r->error, sizeof r->error, "%s: %s", gpumem_status_name(st), gpumem_last_error_detail());
    goto done;
  }
  if (source_open(&src, path, r->error, sizeof r->error) != 0) goto done;
  const int show_progress = isatty(2) && records > 100000;
  uint64_t live = 0, index = 0;
  double busy = 0;
  gpumem_trace_record_t rec;
  memset(&rec, 0, sizeof rec);
  rec.struct_size = sizeof rec;
  for (;; index++) {
    const int got = source_next(&src, &rec, r->error, sizeof r->error);
    if (got < 0) goto done;
    if (!got) break;
    if (show_progress && index % (records / 100) == 0) progress(r->name, index, records);
    if (rec.event == GPUMEM_TRACE_ALLOC) {
      void* p = NULL;
      const double t0 = now_ns();
      st = gpumem_alloc(config, rec.size, (gpumem_stream_t)(uintptr_t)rec.stream, &p);
      busy += now_ns() - t0;
      if (st != GPUMEM_SUCCESS) {
        if (!r->failed++) {
          r->first_failure_record = index;
          r->first_failure_size = rec.size;
          r->first_failure_time_ns = rec.time_ns;
        }
        continue;
      }
      r->allocs++;
      if (map_put(&map, rec.address, (uint64_t)(uintptr_t)p) != 0 || map_put(&sizes, rec.address, rec.size) != 0) {
        snprintf(r->error, sizeof r->error, "out of host memory for the address map");
        goto done;
      }
      live += rec.size;
      if (live > r->peak_live) r->peak_live = live;
      if (dev.peak_reserved > r->peak_reserved) {
        r->peak_reserved = dev.peak_reserved;
        r->peak_record = index;
        r->headroom_at_peak = capacity - dev.reserved;
      }
    } else if (rec.event == GPUMEM_TRACE_FREE) {
      void* p = (void*)(uintptr_t)map_take(&map, rec.address);
      if (!p) { /* allocated before the recording started, or failed in this replay */
        r->unmatched_frees++;
        continue;
      }
      live -= map_take(&sizes, rec.address);
      const double t0 = now_ns();
      st = gpumem_free(config, p, (gpumem_stream_t)(uintptr_t)rec.stream);
      busy += now_ns() - t0;
      if (st != GPUMEM_SUCCESS) {
        snprintf(r->error, sizeof r->error, "record %llu: gpumem_free: %s: %s", (unsigned long long)index,
                 gpumem_status_name(st), gpumem_last_error_detail());
        goto done;
      }
      r->frees++;
    } else {
      continue;
    }
    if (observer && observer->on_step) observer->on_step(observer->context, rec.time_ns, live, dev.reserved);
    if (observer && observer->at_record && index == observer->stop_record) {
      observer->at_record(observer->context, config, (gpumem_stream_t)(uintptr_t)rec.stream);
      break;
    }
  }
  if (show_progress) progress(r->name, records, records);
  r->ns_per_op = r->allocs + r->frees ? busy / (double)(r->allocs + r->frees) : 0;
done:
  map_free(&map);
  map_free(&sizes);
  source_close(&src);
  if (config && config != device) gpumem_allocator_destroy_force(config);
  if (device) gpumem_allocator_destroy_force(device);
}

uint64_t replay_count_records(const char* path, char* error, size_t error_size) {
  struct source src;
  uint64_t n = 0;
  if (source_open(&src, path, error, error_size) != 0) return 0;
  gpumem_trace_record_t rec;
  memset(&rec, 0, sizeof rec);
  rec.struct_size = sizeof rec;
  for (int got; (got = source_next(&src, &rec, error, error_size)) > 0;) n++;
  source_close(&src);
  return n;
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
    const uint64_t mid = lo + (hi - lo + 1) / 2;
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

int replay_main(int argc, char** argv) {
  const char* path = NULL;
  uint64_t capacity = 80ULL << 30;
  const char* configs[16];
  int nconfigs = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--device-memory") && i + 1 < argc) {
      if (replay_parse_size(argv[++i], &capacity) != 0 || capacity == 0) {
        fprintf(stderr, "gpumem replay: --device-memory %s: give bytes, or a number with KiB, MiB, GiB or TiB\n",
                argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
      if (nconfigs == 16) {
        fprintf(stderr, "gpumem replay: at most 16 configurations\n");
        return 2;
      }
      configs[nconfigs++] = argv[++i];
    } else if (argv[i][0] == '-' || path) {
      fprintf(stderr, "gpumem replay: unexpected argument \"%s\"\n", argv[i]);
      return 2;
    } else {
      path = argv[i];
    }
  }
  if (!path) {
    fprintf(stderr, "usage: gpumem replay TRACE [--device-memory SIZE] [--config NAME]...\n");
    return 2;
  }
  if (!nconfigs) configs[nconfigs++] = "pool";
  char error[256] = "";
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
    printf("%-24s", r.name);
    print_bytes(r.peak_live, 10);
    print_bytes(r.peak_reserved, 10);
    printf(" %9.4f %10.1f %10llu %8llu %8llu\n", r.peak_live ? (double)r.peak_reserved / (double)r.peak_live : 0.0,
           r.ns_per_op, (unsigned long long)r.allocs, (unsigned long long)r.failed,
           (unsigned long long)r.unmatched_frees);
    printf("  at the peak (record %llu): the largest allocation that would still succeed is",
           (unsigned long long)r.peak_record);
    print_bytes(r.fits_at_peak, 0);
    printf("; the device had");
    print_bytes(r.headroom_at_peak, 0);
    printf(" free\n");
    if (r.failed)
      printf("  first out of memory: record %llu, %llu bytes, %.3f s into the trace\n",
             (unsigned long long)r.first_failure_record, (unsigned long long)r.first_failure_size,
             (double)r.first_failure_time_ns / 1e9);
  }
  return status;
}
