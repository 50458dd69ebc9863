/* gpumem replay: a trace's allocations and frees, replayed through allocator configurations over a
 * simulated device (simulated_device.c: address space only, no memory is touched, no GPU is
 * needed). The command itself is replay_main.c. */
#define _POSIX_C_SOURCE 200809L

#include "replay.h"

#include <errno.h>
#include <gpumem/gpumem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "address_map.h"
#include "rmm_csv.h"
#include "simulated_device.h"

/* ---- Where records come from: a gpumem trace, or RMM's CSV log (logging_resource_adaptor). ---- */

struct source {
  gpumem_trace_reader_t* reader; /* a gpumem trace; else the CSV file below */
  FILE* file;
  struct rmm_csv csv;
};

static int source_open(struct source* src, const char* path, char* error, size_t error_size) {
  memset(src, 0, sizeof *src);
  FILE* f = fopen(path, "rb");
  if (!f) {
    snprintf(error, error_size, "cannot open the trace file %s: %s", path, strerror(errno));
    return -1;
  }
  /* The tools read a trace more than once (to count, to replay, to stop at the peak), and look
   * at its first line before the trace reader does: a pipe or FIFO would lose those bytes. */
  struct stat st_file;
  if (fstat(fileno(f), &st_file) != 0 || !S_ISREG(st_file.st_mode)) {
    snprintf(error, error_size, "%s is not a regular file: the tool reads a trace more than once; copy it to a file",
             path);
    fclose(f);
    return -1;
  }
  if (rmm_csv_open(&src->csv, f, path)) {
    src->file = f;
    return 0;
  }
  fclose(f);
  const gpumem_status_t st = gpumem_trace_reader_open(path, &src->reader);
  if (st != GPUMEM_SUCCESS) {
    /* Only a file that is no gpumem trace at all is told about the other format. */
    const char* detail = gpumem_last_error_detail();
    snprintf(error, error_size, "%s: %s%s", gpumem_status_name(st), detail,
             strstr(detail, "does not start with GPUMEMTR")
                 ? " (nor an RMM CSV log, which starts with \"" RMM_CSV_HEADER "\")"
                 : "");
    return -1;
  }
  return 0;
}

/* The next record into rec: 1, 0 at the end, -1 with error set. */
static int source_next(struct source* src, gpumem_trace_record_t* rec, char* error, size_t error_size) {
  if (!src->reader) return rmm_csv_next(&src->csv, rec, error, error_size);
  bool more = false;
  const gpumem_status_t st = gpumem_trace_reader_next(src->reader, rec, &more);
  if (st == GPUMEM_SUCCESS) return more;
  snprintf(error, error_size, "%s: %s", gpumem_status_name(st), gpumem_last_error_detail());
  return -1;
}

static void source_close(struct source* src) {
  gpumem_trace_reader_close(src->reader);
  if (src->file) fclose(src->file);
  memset(src, 0, sizeof *src);
}

/* ---- One configuration's replay. ---- */

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Makes the allocator of a configuration over the device. */
static int make_config(const struct replay_config* c, gpumem_allocator_t* device, gpumem_allocator_t** out, char* error,
                       size_t error_size) {
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = device;
  params.limit = c->limit;
  if (!c->pool) {
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

/* A replay in progress: the device, the configuration over it, the trace and the bookkeeping. */
struct replay {
  struct replay_result* r;
  struct sim_device dev;
  gpumem_allocator_t* device;
  gpumem_allocator_t* config;
  struct source src;
  struct address_map map;   /* the trace's address to the replay's, or kSkipped */
  struct address_map sizes; /* the trace's address to the bytes its allocation asked */
  uint64_t live, index;
  uint64_t made_at; /* the address of the last allocation made */
  double busy;
};

/* In the map for an allocation of 0 bytes, which the replay skips: no real address is 1. */
#define kSkipped ((uint64_t)1)

/* The simulated device and the configuration over it: 0, or -1 with r->error set. */
static int replay_open(struct replay* x, const char* path, uint64_t capacity) {
  struct replay_config c;
  if (replay_config_parse(x->r->name, &c, x->r->error, sizeof x->r->error) != 0) return -1;
  gpumem_allocator_functions_t fns;
  sim_device_init(&x->dev, capacity, c.unit, &fns);
  const gpumem_status_t st = gpumem_allocator_create_functions(&fns, &x->device);
  if (st != GPUMEM_SUCCESS) { /* the tool's own device, whose parameters a user does not write */
    snprintf(x->r->error, sizeof x->r->error, "the simulated device: %s: %s", gpumem_status_name(st),
             gpumem_last_error_detail());
    return -1;
  }
  if (make_config(&c, x->device, &x->config, x->r->error, sizeof x->r->error) != 0) return -1;
  return source_open(&x->src, path, x->r->error, sizeof x->r->error);
}

static int bookkeeping_failed(struct replay* x) {
  snprintf(x->r->error, sizeof x->r->error,
           "out of host memory for the replay's own table of live allocations (%zu of them): a failure of the "
           "tool, not of the configuration",
           x->map.used);
  x->r->tool_failed = 1;
  return -1;
}

/* An allocation: 1 when it was made, 0 when it was not (failed, refused or skipped), -1 with
 * r->error set. */
static int replay_alloc(struct replay* x, const gpumem_trace_record_t* rec) {
  struct replay_result* r = x->r;
  if (rec->size == 0) {
    /* RMM's replay benchmark passes a 0-byte allocation to its resource, which gives NULL for it,
     * and the free of that NULL later, which does nothing: both are skipped here, and counted. */
    r->skipped++;
    return rec->address && address_map_put(&x->map, rec->address, kSkipped) != 0 ? bookkeeping_failed(x) : 0;
  }
  if (!rec->address) {
    snprintf(r->error, sizeof r->error,
             "record %llu: an allocation of %llu bytes at address 0, which no allocator "
             "hands out: the trace is damaged",
             (unsigned long long)x->index, (unsigned long long)rec->size);
    return -1;
  }
  void* p = NULL;
  const double t0 = now_ns();
  const gpumem_status_t st = gpumem_alloc(x->config, rec->size, (gpumem_stream_t)(uintptr_t)rec->stream, &p);
  x->busy += now_ns() - t0;
  if (st == GPUMEM_ERROR_OUT_OF_MEMORY) {
    if (!r->failed++) {
      r->first_failure_record = x->index;
      r->first_failure_size = rec->size;
      r->first_failure_time_ns = rec->time_ns;
    }
    return 0;
  }
  if (st != GPUMEM_SUCCESS) { /* not for want of memory: a size the configuration does not take */
    if (!r->refused++)
      snprintf(r->first_refusal, sizeof r->first_refusal, "record %llu, %llu bytes: %s: %s",
               (unsigned long long)x->index, (unsigned long long)rec->size, gpumem_status_name(st),
               gpumem_last_error_detail());
    return 0;
  }
  r->allocs++;
  x->made_at = (uint64_t)(uintptr_t)p;
  if (address_map_put(&x->map, rec->address, (uint64_t)(uintptr_t)p) != 0 ||
      address_map_put(&x->sizes, rec->address, rec->size) != 0)
    return bookkeeping_failed(x);
  x->live += rec->size;
  if (x->live > r->peak_live) r->peak_live = x->live;
  if (x->dev.peak_reserved > r->peak_reserved) {
    r->peak_reserved = x->dev.peak_reserved;
    r->peak_record = x->index;
    r->headroom_at_peak = x->dev.capacity - x->dev.reserved;
  }
  return 1;
}

/* A free: 1 when it was made, 0 when there was nothing to free, -1 with r->error set. */
static int replay_free(struct replay* x, const gpumem_trace_record_t* rec) {
  struct replay_result* r = x->r;
  const uint64_t p = rec->address ? address_map_take(&x->map, rec->address) : kSkipped; /* NULL: nothing to free */
  if (p == kSkipped) {
    r->skipped++;
    return 0;
  }
  if (!p) { /* allocated before the recording started, or failed in this replay */
    r->unmatched_frees++;
    return 0;
  }
  x->live -= address_map_take(&x->sizes, rec->address);
  const double t0 = now_ns();
  const gpumem_status_t st = gpumem_free(x->config, (void*)(uintptr_t)p, (gpumem_stream_t)(uintptr_t)rec->stream);
  x->busy += now_ns() - t0;
  if (st != GPUMEM_SUCCESS) {
    snprintf(r->error, sizeof r->error, "record %llu: gpumem_free: %s: %s", (unsigned long long)x->index,
             gpumem_status_name(st), gpumem_last_error_detail());
    return -1;
  }
  r->frees++;
  return 1;
}

static void replay_close(struct replay* x) {
  address_map_free(&x->map);
  address_map_free(&x->sizes);
  source_close(&x->src);
  if (x->config && x->config != x->device) gpumem_allocator_destroy_force(x->config);
  if (x->device) gpumem_allocator_destroy_force(x->device);
}

void replay_run(const char* path, uint64_t capacity, uint64_t records, struct replay_result* r,
                const struct replay_observer* observer) {
  struct replay x;
  memset(&x, 0, sizeof x);
  x.r = r;
  const int show_progress = isatty(2) && records > 100000;
  gpumem_trace_record_t rec;
  memset(&rec, 0, sizeof rec);
  rec.struct_size = sizeof rec;
  if (replay_open(&x, path, capacity) != 0) goto done;
  /* No further than the records counted: an observer sized its tables by them, and a trace still
   * being written may have more by now. */
  for (; x.index < records; x.index++) {
    const int got = source_next(&x.src, &rec, r->error, sizeof r->error);
    if (got < 0) goto done;
    if (!got) break;
    if (show_progress && x.index % (records / 100) == 0) progress(r->name, x.index, records);
    /* Allocations that failed when recorded are not replayed, nor a pool's upstream records. */
    const int made = rec.event == GPUMEM_TRACE_ALLOC  ? replay_alloc(&x, &rec)
                     : rec.event == GPUMEM_TRACE_FREE ? replay_free(&x, &rec)
                                                      : 0;
    if (made < 0) goto done;
    if (observer && observer->on_step) {
      const int alloc = made && rec.event == GPUMEM_TRACE_ALLOC;
      const struct replay_step step = {x.index, &rec, made, alloc ? x.made_at : 0, x.live, x.dev.reserved, x.config};
      observer->on_step(observer->context, &step);
    }
    if (!made) continue;
    if (observer && observer->at_record && x.index == observer->stop_record) {
      observer->at_record(observer->context, x.config, (gpumem_stream_t)(uintptr_t)rec.stream);
      break;
    }
  }
  if (show_progress) progress(r->name, records, records);
  r->ns_per_op = r->allocs + r->frees ? x.busy / (double)(r->allocs + r->frees) : 0;
done:
  replay_close(&x);
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
