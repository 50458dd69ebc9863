/* What gpumem viz pictures (viz.h): the trace replayed through each configuration, once to the end
 * (every record's outcome, where each allocation went, memory over time, the segments held at the
 * end) and once more to the peak of reserved bytes (the pool's blocks there). */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "address_map.h"
#include "grow.h"
#include "viz.h"

enum { kFirst = 1024 };

/* Room for one more item in an array of n items: 0, or -1. */
static int grow(void** items, size_t* capacity, size_t n, size_t size) {
  return grow_array(items, capacity, n, size, kFirst);
}

/* A replay in progress, as its steps arrive. */
struct gathering {
  struct viz_trace* t;
  struct viz_config* c;
  int first;               /* the first configuration's replay, which builds the trace's blocks */
  size_t next_block;       /* the block of the next allocation record */
  struct address_map open; /* the first replay: a trace address to 1 + its live block */
  size_t last_stream;      /* the index of the last stream looked up */
  uint64_t live_max;       /* the most live bytes so far */
  uint64_t steps;          /* records met */
  int failed;              /* out of host memory */
  int changed;             /* the trace has more or fewer records than counted */
};

static int stream_index(struct gathering* g, uint64_t stream, uint32_t* out) {
  struct viz_trace* t = g->t;
  if (g->last_stream < t->stream_count && t->streams[g->last_stream] == stream) {
    *out = (uint32_t)g->last_stream;
    return 0;
  }
  for (size_t i = 0; i < t->stream_count; i++)
    if (t->streams[i] == stream) {
      *out = (uint32_t)(g->last_stream = i);
      return 0;
    }
  if (grow((void**)&t->streams, &t->stream_capacity, t->stream_count, sizeof *t->streams) != 0) return -1;
  t->streams[t->stream_count] = stream;
  *out = (uint32_t)(g->last_stream = t->stream_count++);
  return 0;
}

/* The first replay: a new block for an allocation record. */
static int add_block(struct gathering* g, const struct replay_step* s) {
  struct viz_trace* t = g->t;
  struct viz_config* c = g->c;
  struct viz_block b = {s->index, VIZ_NEVER, s->rec->size, 0, s->rec->thread, -1};
  if (t->snapshot && s->index < t->snapshot->count) b.stack = t->snapshot->stacks[s->index];
  const size_t capacity = t->block_capacity;
  if (stream_index(g, s->rec->stream, &b.stream) != 0 ||
      grow((void**)&t->blocks, &t->block_capacity, t->block_count, sizeof *t->blocks) != 0)
    return -1;
  if (t->block_capacity != capacity) { /* the first configuration's addresses, one per block */
    uint64_t* address = realloc(c->address, t->block_capacity * sizeof *address);
    if (!address) return -1;
    c->address = address;
  }
  t->blocks[t->block_count++] = b;
  t->record_block[s->index] = (uint32_t)t->block_count;
  return address_map_put(&g->open, s->rec->address, t->block_count);
}

/* The first replay: a free record ends the block its address holds, if the trace allocated it. */
static void end_block(struct gathering* g, const struct replay_step* s) {
  const uint64_t b = s->rec->address ? address_map_take(&g->open, s->rec->address) : 0;
  if (!b) return;
  g->t->blocks[b - 1].free_record = s->index;
  g->t->record_block[s->index] = (uint32_t)b;
}

static void on_segment(const gpumem_block_info_t* block, void* user_data) {
  struct gathering* g = user_data;
  struct viz_config* c = g->c;
  const uint64_t start = (uintptr_t)block->segment;
  if (g->failed || (c->segment_count && c->segments[c->segment_count - 1].start == start)) return;
  if (grow((void**)&c->segments, &c->segment_capacity, c->segment_count, sizeof *c->segments) != 0) {
    g->failed = 1;
    return;
  }
  c->segments[c->segment_count++] = (struct viz_segment){start, block->segment_size};
}

static int add_point(struct gathering* g, const struct replay_step* s) {
  struct viz_config* c = g->c;
  if (grow((void**)&c->series, &c->series_capacity, c->series_count, sizeof *c->series) != 0) return -1;
  c->series[c->series_count++] = (struct viz_point){s->index, {s->live, s->reserved}};
  if (s->live > g->live_max) {
    g->live_max = s->live;
    c->peak_live_record = s->index;
  }
  return 0;
}

static void on_step(void* context, const struct replay_step* s) {
  struct gathering* g = context;
  struct viz_trace* t = g->t;
  if (g->failed) return;
  g->steps++;
  if (s->index >= t->records) { /* times and record_block hold t->records entries */
    g->failed = g->changed = 1;
    return;
  }
  /* Traces converted from other tools may count from 1970: the page counts from the first record. */
  if (g->first && !s->index) t->origin_ns = s->rec->time_ns;
  if (g->first) t->times[s->index] = s->rec->time_ns - t->origin_ns;
  const int is_block = s->rec->event == GPUMEM_TRACE_ALLOC && s->rec->size && s->rec->address;
  if (is_block) {
    if (g->first && add_block(g, s) != 0) {
      g->failed = 1;
      return;
    }
    if (g->next_block < t->block_count) g->c->address[g->next_block++] = s->made ? s->address : 0;
  } else if (g->first && s->rec->event == GPUMEM_TRACE_FREE) {
    end_block(g, s);
  }
  if (s->made && add_point(g, s) != 0) g->failed = 1;
  /* The segments still held at the end: a block's segment may be one the peak did not have yet.
   * (Not a pool: the snapshot refuses, and blocks have no segment.) */
  if (s->index + 1 == t->records) (void)gpumem_pool_snapshot(s->config, on_segment, g);
}

static void on_peak_block(const gpumem_block_info_t* block, void* user_data) {
  struct gathering* g = user_data;
  struct viz_config* c = g->c;
  on_segment(block, g);
  if (g->failed || grow((void**)&c->peak, &c->peak_capacity, c->peak_count, sizeof *c->peak) != 0) {
    g->failed = 1;
    return;
  }
  c->peak[c->peak_count++] = *block;
}

static void at_peak(void* context, gpumem_allocator_t* config, gpumem_stream_t stream) {
  (void)stream;
  struct gathering* g = context;
  g->c->peak_status = gpumem_pool_snapshot(config, on_peak_block, g);
}

static int by_start(const void* a, const void* b) {
  const uint64_t x = ((const struct viz_segment*)a)->start, y = ((const struct viz_segment*)b)->start;
  return (x > y) - (x < y);
}

/* The segments of the end and of the peak, in order of address, each once. */
static void sort_segments(struct viz_config* c) {
  if (!c->segment_count) return; /* not a pool: no array, which qsort may not be given */
  qsort(c->segments, c->segment_count, sizeof *c->segments, by_start);
  size_t n = 0;
  for (size_t i = 0; i < c->segment_count; i++)
    if (!n || c->segments[n - 1].start != c->segments[i].start) c->segments[n++] = c->segments[i];
  c->segment_count = n;
}

/* One configuration: to the end, then to its peak. */
static int gather_config(struct viz_trace* t, int index, char* error, size_t error_size) {
  struct viz_config* c = &t->configs[index];
  struct gathering g = {t, c, index == 0, 0, {0}, 0, 0, 0, 0, 0};
  if (index > 0 && !(c->address = calloc(t->block_count ? t->block_count : 1, sizeof *c->address))) g.failed = 1;
  const struct replay_observer to_end = {&g, on_step, 0, NULL};
  if (!g.failed) replay_run(t->replayed, t->capacity, t->records, &c->r, &to_end);
  address_map_free(&g.open);
  if (!g.failed && !c->r.error[0] && g.steps != t->records) g.failed = g.changed = 1; /* it shrank */
  c->peak_status = GPUMEM_ERROR_INVALID_HANDLE;
  if (!g.failed && !c->r.error[0] && c->r.allocs) {
    struct replay_result again;
    memset(&again, 0, sizeof again);
    again.name = c->r.name;
    const struct replay_observer to_peak = {&g, NULL, c->r.peak_record, at_peak};
    replay_run(t->replayed, t->capacity, t->records, &again, &to_peak);
  }
  if (c->r.error[0]) {
    snprintf(error, error_size, "%s: %s", c->r.name, c->r.error);
    return -1;
  }
  if (g.changed) {
    snprintf(error, error_size, "%s changed while it was read: %llu records counted, then %llu read", t->path,
             (unsigned long long)t->records, (unsigned long long)g.steps);
    return -1;
  }
  if (g.failed) {
    snprintf(error, error_size, "%s: out of host memory for the picture", c->r.name);
    return -1;
  }
  sort_segments(c);
  return 0;
}

int viz_gather(struct viz_trace* t, char* error, size_t error_size) {
  t->times = calloc(t->records ? t->records : 1, sizeof *t->times);
  t->record_block = calloc(t->records ? t->records : 1, sizeof *t->record_block);
  if (!t->times || !t->record_block) {
    snprintf(error, error_size, "out of host memory for the picture of %llu records", (unsigned long long)t->records);
    return -1;
  }
  for (int i = 0; i < t->config_count; i++)
    if (gather_config(t, i, error, error_size) != 0) return -1;
  return 0;
}

void viz_free(struct viz_trace* t) {
  for (int i = 0; i < t->config_count; i++) {
    free(t->configs[i].series);
    free(t->configs[i].address);
    free(t->configs[i].segments);
    free(t->configs[i].peak);
  }
  free(t->times);
  free(t->record_block);
  free(t->blocks);
  free(t->streams);
}
