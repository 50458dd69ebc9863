/* The page's data (viz.h), as JSON that the page's script reads. What a big trace would make too
 * big is cut here, and the page says so: only the largest allocations get bands of their own (the
 * rest summed per stream), a series of more than kMaxPoints steps is drawn at its highest over
 * kBuckets equal runs of records, and the segment map holds the kMapRows segments holding the most.
 * Some 500 lines in one file: its parts write one JSON document from one selection of what it
 * shows (struct selection), which none of them makes alone. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "address_map.h"
#include "viz.h"

enum { kMaxPoints = 16384, kBuckets = 8192, kMapRows = 64 };

/* ---- JSON text ---- */

/* The length of the valid UTF-8 sequence at s (n bytes left), or 0 if it is not one. */
static size_t utf8_length(const unsigned char* s, size_t n) {
  const size_t len = s[0] < 0xc2 ? 0 : s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : s[0] < 0xf5 ? 4 : 0;
  if (!len || len > n) return 0;
  for (size_t i = 1; i < len; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) || (s[0] == 0xf0 && s[1] < 0x90) ||
      (s[0] == 0xf4 && s[1] > 0x8f))
    return 0; /* overlong, a surrogate, or past U+10FFFF */
  return len;
}

/* A JSON string that is safe inside a <script> element: no "<", ">" or "&" in it as such, so
 * nothing in a file's name or a stack frame can end the element. Invalid UTF-8 becomes U+FFFD. */
static void json_string(FILE* f, const char* text, size_t n) {
  const unsigned char* s = (const unsigned char*)text;
  fputc('"', f);
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    if (c >= 0x80) {
      const size_t len = utf8_length(s + i, n - i);
      if (len)
        fwrite(s + i, 1, len, f);
      else
        fputs("\\ufffd", f);
      i += len ? len : 1;
      continue;
    }
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20 || c == '<' || c == '>' || c == '&')
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
    i++;
  }
  fputc('"', f);
}

static void json_text(FILE* f, const char* text) { json_string(f, text, strlen(text)); }

static void json_hex(FILE* f, uint64_t v) { fprintf(f, "\"0x%llx\"", (unsigned long long)v); }

static long long or_minus_one(uint64_t v) { return v == VIZ_NEVER ? -1 : (long long)v; }

/* ---- Which allocations get bands of their own, which segments the maps show, and which call
 * stacks the page holds ---- */

struct map_row {
  uint64_t start, size, extent, mapped, bytes[3]; /* bytes: free, in use, pending */
  uint64_t stream;
  size_t first, count; /* its blocks in c->peak */
};

/* A configuration's segment map: the peak's segments, the largest first, and for each block of
 * c->peak in the rows shown, the trace's allocation it holds (1 + its index; 0: none). */
struct map {
  struct map_row* rows;
  size_t count, shown;
  uint64_t* block;
};

struct selection {
  int64_t* band_of; /* per block: its band, or -1 */
  size_t* bands;    /* the bands' blocks, in order of allocation */
  size_t count;
  uint64_t smallest; /* bytes of the smallest band */
  struct map maps[VIZ_MAX_CONFIGS];
  int32_t* stack_id; /* per snapshot stack: its index in the page, or -1 */
  int32_t* frame_id;
  size_t stacks, frames;
};

struct rank {
  uint64_t size, life, alloc;
  size_t block;
};

/* The largest first; of equal sizes the longest-lived, then the earliest. */
static int by_rank(const void* a, const void* b) {
  const struct rank *x = a, *y = b;
  if (x->size != y->size) return x->size < y->size ? 1 : -1;
  if (x->life != y->life) return x->life < y->life ? 1 : -1;
  return (x->alloc > y->alloc) - (x->alloc < y->alloc);
}

static int select_bands(const struct viz_trace* t, struct selection* sel) {
  const size_t n = t->block_count;
  struct rank* ranks = malloc((n ? n : 1) * sizeof *ranks);
  sel->band_of = malloc((n ? n : 1) * sizeof *sel->band_of);
  sel->bands = malloc((n ? n : 1) * sizeof *sel->bands);
  if (!ranks || !sel->band_of || !sel->bands) return free(ranks), -1;
  for (size_t i = 0; i < n; i++) {
    const struct viz_block* b = &t->blocks[i];
    const uint64_t end = b->free_record == VIZ_NEVER ? t->records : b->free_record;
    ranks[i] = (struct rank){b->size, end - b->alloc_record, b->alloc_record, i};
    sel->band_of[i] = -1;
  }
  qsort(ranks, n, sizeof *ranks, by_rank);
  const size_t drawn = n < t->band_limit ? n : t->band_limit;
  for (size_t i = 0; i < drawn; i++) sel->band_of[ranks[i].block] = 0;
  sel->smallest = drawn ? ranks[drawn - 1].size : 0;
  free(ranks);
  for (size_t i = 0; i < n; i++)
    if (sel->band_of[i] == 0) {
      sel->band_of[i] = (int64_t)sel->count;
      sel->bands[sel->count++] = i;
    }
  return 0;
}

static int live_at(const struct viz_block* b, uint64_t record) {
  return b->alloc_record <= record && (b->free_record == VIZ_NEVER || b->free_record > record);
}

static void keep_stack(const struct viz_trace* t, struct selection* sel, int32_t stack) {
  if (stack < 0 || sel->stack_id[stack] >= 0) return;
  sel->stack_id[stack] = (int32_t)sel->stacks++;
  const struct torch_snapshot* s = t->snapshot;
  for (size_t i = s->stack_start[stack]; i < s->stack_start[stack + 1]; i++)
    if (sel->frame_id[s->stack_frames[i]] < 0) sel->frame_id[s->stack_frames[i]] = (int32_t)sel->frames++;
}

/* The stacks of the bands and of the blocks in the rows of a segment map: what the page shows. */
static int select_stacks(const struct viz_trace* t, struct selection* sel) {
  const struct torch_snapshot* s = t->snapshot;
  if (!s) return 0;
  sel->stack_id = malloc((s->stack_count ? s->stack_count : 1) * sizeof *sel->stack_id);
  sel->frame_id = malloc((s->frame_count ? s->frame_count : 1) * sizeof *sel->frame_id);
  if (!sel->stack_id || !sel->frame_id) return -1;
  memset(sel->stack_id, 0xff, s->stack_count * sizeof *sel->stack_id);
  memset(sel->frame_id, 0xff, s->frame_count * sizeof *sel->frame_id);
  for (size_t i = 0; i < sel->count; i++) keep_stack(t, sel, t->blocks[sel->bands[i]].stack);
  for (int c = 0; c < t->config_count; c++) {
    const struct map* m = &sel->maps[c];
    for (size_t r = 0; r < m->shown; r++)
      for (size_t k = m->rows[r].first; k < m->rows[r].first + m->rows[r].count; k++)
        if (m->block[k]) keep_stack(t, sel, t->blocks[m->block[k] - 1].stack);
  }
  return 0;
}

static int32_t page_stack(const struct selection* sel, int32_t stack) {
  return stack < 0 || !sel->stack_id ? -1 : sel->stack_id[stack];
}

static void free_selection(struct selection* sel) {
  for (int c = 0; c < VIZ_MAX_CONFIGS; c++) {
    free(sel->maps[c].rows);
    free(sel->maps[c].block);
  }
  free(sel->band_of);
  free(sel->bands);
  free(sel->stack_id);
  free(sel->frame_id);
}

/* ---- Steps over records ---- */

static void put_row(FILE* f, const struct viz_trace* t, uint64_t record, const uint64_t* v, int values, uint64_t* last,
                    const char** sep) {
  if (v[0] == last[0] && (values < 2 || v[1] == last[1])) return; /* the same step goes on */
  fprintf(f, "%s[%llu,%llu", *sep, (unsigned long long)record, (unsigned long long)t->times[record]);
  for (int i = 0; i < values; i++) fprintf(f, ",%llu", (unsigned long long)v[i]);
  fputc(']', f);
  last[0] = v[0];
  last[1] = v[1];
  *sep = ",";
}

/* A step function (values from each point's record on; the records distinct and in order) as rows
 * [record, ns, value...]; past kMaxPoints (over share, for one of share step functions), one row per
 * bucket of records with the highest of each value over it, so that no peak is lost, and the value
 * it ended at after it. */
static int write_steps(FILE* f, const struct viz_trace* t, const struct viz_point* p, size_t n, int values,
                       size_t share) {
  const uint64_t width = n <= kMaxPoints / share ? 1 : (t->records + kBuckets / share - 1) / (kBuckets / share);
  uint64_t now[2] = {0, 0}, last[2] = {UINT64_MAX, UINT64_MAX};
  const char* sep = "";
  fputc('[', f);
  for (size_t i = 0; i < n;) {
    const uint64_t start = p[i].record / width * width;
    const int carried = p[i].record > start; /* the value before holds from the bucket's start */
    uint64_t most[2] = {carried ? now[0] : 0, carried ? now[1] : 0};
    for (; i < n && p[i].record < start + width; i++)
      for (int v = 0; v < values; v++) {
        now[v] = p[i].value[v];
        if (now[v] > most[v]) most[v] = now[v];
      }
    put_row(f, t, start, most, values, last, &sep);
    if (start + width < t->records && (i == n || p[i].record >= start + 2 * width))
      put_row(f, t, start + width, now, values, last, &sep);
  }
  fputc(']', f);
  return width > 1;
}

/* The allocations without a band of their own, made in configuration c, summed per stream; then
 * whether any stream's is drawn at its highest over buckets. */
static int write_other(FILE* f, const struct viz_trace* t, const struct viz_config* c, const struct selection* sel) {
  struct viz_point* points = malloc((t->records ? t->records : 1) * sizeof *points);
  uint64_t* live = calloc(t->stream_count ? t->stream_count : 1, sizeof *live);
  if (!points || !live) return free(points), free(live), -1;
  int bucketed = 0;
  fputc('[', f);
  for (size_t s = 0; s < t->stream_count; s++) {
    size_t n = 0;
    for (uint64_t r = 0; r < t->records; r++) {
      const uint32_t b = t->record_block[r];
      if (!b || sel->band_of[b - 1] >= 0 || !c->address[b - 1] || t->blocks[b - 1].stream != s) continue;
      const struct viz_block* block = &t->blocks[b - 1];
      live[s] = block->alloc_record == r ? live[s] + block->size : live[s] - block->size;
      points[n++] = (struct viz_point){r, {live[s], 0}};
    }
    fprintf(f, "%s", s ? "," : "");
    bucketed |= write_steps(f, t, points, n, 1, t->stream_count < 16 ? t->stream_count : 16);
  }
  fprintf(f, "],\"other_bucketed\":%s", bucketed ? "true" : "false");
  free(points);
  free(live);
  return 0;
}

/* ---- A configuration ---- */

/* The segment (an index into c->segments) that holds address, or -1. */
static long segment_of(const struct viz_config* c, uint64_t address) {
  size_t lo = 0, hi = c->segment_count;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (c->segments[mid].start <= address)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (!lo || address - c->segments[lo - 1].start >= c->segments[lo - 1].size) return -1;
  return (long)(lo - 1);
}

static void write_placement(FILE* f, const struct viz_config* c, const struct selection* sel) {
  fputs(",\"addresses\":[", f);
  for (size_t i = 0; i < sel->count; i++) {
    fputs(i ? "," : "", f);
    const uint64_t a = c->address[sel->bands[i]];
    if (a)
      json_hex(f, a);
    else
      fputs("null", f);
  }
  fputs("],\"block_segments\":[", f);
  for (size_t i = 0; i < sel->count; i++) {
    const uint64_t a = c->address[sel->bands[i]];
    fprintf(f, "%s%ld", i ? "," : "", a ? segment_of(c, a) : -1L);
  }
  fputs("],\"segments\":[", f);
  for (size_t i = 0; i < c->segment_count; i++) {
    fputs(i ? ",[" : "[", f);
    json_hex(f, c->segments[i].start);
    fprintf(f, ",%llu]", (unsigned long long)c->segments[i].size);
  }
  fputc(']', f);
}

static int by_mapped(const void* a, const void* b) {
  const struct map_row *x = a, *y = b;
  if (x->mapped != y->mapped) return x->mapped < y->mapped ? 1 : -1;
  return (x->start > y->start) - (x->start < y->start);
}

/* The peak's segments, the largest first: their count in *n. */
static struct map_row* map_rows(const struct viz_config* c, size_t* n) {
  struct map_row* rows = malloc((c->peak_count ? c->peak_count : 1) * sizeof *rows);
  *n = 0;
  if (!rows) return NULL;
  for (size_t i = 0; i < c->peak_count; i++) {
    const gpumem_block_info_t* b = &c->peak[i];
    const uint64_t start = (uintptr_t)b->segment;
    if (!*n || rows[*n - 1].start != start)
      rows[(*n)++] = (struct map_row){start, b->segment_size, 0, 0, {0, 0, 0}, (uintptr_t)b->stream, i, 0};
    struct map_row* row = &rows[*n - 1];
    row->count++;
    if (b->state == GPUMEM_BLOCK_UNMAPPED) continue; /* addresses only */
    row->extent = (uintptr_t)b->address + b->size - start;
    row->mapped += b->size;
    if (b->state <= GPUMEM_BLOCK_PENDING) row->bytes[b->state] += b->size;
  }
  qsort(rows, *n, sizeof *rows, by_mapped);
  return rows;
}

/* The segment map of configuration c, if it is a pool: 0, or -1 when out of memory. */
static int prepare_map(const struct viz_trace* t, const struct viz_config* c, struct map* m) {
  if (c->peak_status != GPUMEM_SUCCESS) return 0;
  m->rows = map_rows(c, &m->count);
  m->shown = m->count < kMapRows ? m->count : kMapRows;
  m->block = calloc(c->peak_count ? c->peak_count : 1, sizeof *m->block);
  struct address_map live = {0}; /* where each allocation live at the peak is */
  int failed = !m->rows || !m->block;
  for (size_t i = 0; !failed && i < t->block_count; i++)
    if (c->address[i] && live_at(&t->blocks[i], c->r.peak_record))
      failed = address_map_put(&live, c->address[i], i + 1) != 0;
  for (size_t r = 0; !failed && r < m->shown; r++)
    for (size_t k = m->rows[r].first; k < m->rows[r].first + m->rows[r].count; k++)
      if (c->peak[k].state == GPUMEM_BLOCK_IN_USE) m->block[k] = address_map_take(&live, (uintptr_t)c->peak[k].address);
  address_map_free(&live);
  return failed ? -1 : 0;
}

static void write_map_block(FILE* f, const struct viz_trace* t, const struct selection* sel,
                            const gpumem_block_info_t* b, uint64_t start, uint64_t block) {
  fprintf(f, "[%llu,%llu,%u,%llu", (unsigned long long)((uintptr_t)b->address - start), (unsigned long long)b->size,
          b->state, (unsigned long long)b->requested);
  if (block) {
    const struct viz_block* x = &t->blocks[block - 1];
    fprintf(f, ",%lld,%llu,%llu,%u,%d", (long long)sel->band_of[block - 1], (unsigned long long)x->alloc_record,
            (unsigned long long)t->times[x->alloc_record], x->stream, (int)page_stack(sel, x->stack));
  }
  fputc(']', f);
}

static void write_map_row(FILE* f, const struct viz_trace* t, const struct viz_config* c, const struct selection* sel,
                          const struct map_row* row, const uint64_t* block) {
  fputs("{\"start\":", f);
  json_hex(f, row->start);
  fprintf(f, ",\"size\":%llu,\"extent\":%llu,\"mapped\":%llu,\"free\":%llu,\"used\":%llu,\"pending\":%llu,\"stream\":",
          (unsigned long long)row->size, (unsigned long long)row->extent, (unsigned long long)row->mapped,
          (unsigned long long)row->bytes[0], (unsigned long long)row->bytes[1], (unsigned long long)row->bytes[2]);
  json_hex(f, row->stream);
  fputs(",\"blocks\":[", f);
  for (size_t i = 0; i < row->count; i++) {
    fputs(i ? "," : "", f);
    write_map_block(f, t, sel, &c->peak[row->first + i], row->start, block[row->first + i]);
  }
  fputs("]}", f);
}

/* The segments at the peak: the kMapRows holding the most, and exactly what the rest hold. */
static void write_map(FILE* f, const struct viz_trace* t, const struct viz_config* c, const struct selection* sel,
                      const struct map* m) {
  if (c->peak_status != GPUMEM_SUCCESS) {
    fputs(",\"map\":null", f);
    return;
  }
  fprintf(f, ",\"map\":{\"record\":%llu,\"ns\":%llu,\"segments\":%zu,\"rows\":[", (unsigned long long)c->r.peak_record,
          (unsigned long long)t->times[c->r.peak_record], m->count);
  for (size_t i = 0; i < m->shown; i++) {
    fputs(i ? "," : "", f);
    write_map_row(f, t, c, sel, &m->rows[i], m->block);
  }
  uint64_t left[4] = {0, 0, 0, 0}; /* mapped, free, in use, pending */
  for (size_t i = m->shown; i < m->count; i++) {
    left[0] += m->rows[i].mapped;
    for (int s = 0; s < 3; s++) left[s + 1] += m->rows[i].bytes[s];
  }
  fprintf(f, "],\"left_out\":{\"segments\":%zu,\"bytes\":%llu,\"free\":%llu,\"used\":%llu,\"pending\":%llu}}",
          m->count - m->shown, (unsigned long long)left[0], (unsigned long long)left[1], (unsigned long long)left[2],
          (unsigned long long)left[3]);
}

static void write_figures(FILE* f, const struct viz_trace* t, const struct viz_config* c) {
  const struct replay_result* r = &c->r;
  fputs("{\"name\":", f);
  json_text(f, r->name);
  fprintf(f,
          ",\"peak_live\":%llu,\"peak_live_record\":%llu,\"peak_live_ns\":%llu,\"peak_reserved\":%llu,"
          "\"peak_reserved_record\":%llu,\"peak_reserved_ns\":%llu,\"allocs\":%llu,\"frees\":%llu,\"failed\":%llu,"
          "\"refused\":%llu,\"unmatched_frees\":%llu",
          (unsigned long long)r->peak_live, (unsigned long long)c->peak_live_record,
          (unsigned long long)(t->records ? t->times[c->peak_live_record] : 0), (unsigned long long)r->peak_reserved,
          (unsigned long long)r->peak_record, (unsigned long long)(t->records ? t->times[r->peak_record] : 0),
          (unsigned long long)r->allocs, (unsigned long long)r->frees, (unsigned long long)r->failed,
          (unsigned long long)r->refused, (unsigned long long)r->unmatched_frees);
  if (r->failed)
    fprintf(f, ",\"first_failure_record\":%llu,\"first_failure_ns\":%llu", (unsigned long long)r->first_failure_record,
            (unsigned long long)t->times[r->first_failure_record]);
  else
    fputs(",\"first_failure_record\":-1", f);
  fprintf(f, ",\"series_bucketed\":%s,\"series\":", c->series_count > kMaxPoints ? "true" : "false");
  write_steps(f, t, c->series, c->series_count, 2, 1);
}

/* Whether configuration c made the allocations that the first made (its band "other" is the same). */
static int same_made(const struct viz_trace* t, const struct viz_config* c) {
  for (size_t i = 0; i < t->block_count; i++)
    if (!c->address[i] != !t->configs[0].address[i]) return 0;
  return 1;
}

static int write_config(FILE* f, const struct viz_trace* t, const struct viz_config* c, const struct selection* sel) {
  write_figures(f, t, c);
  write_placement(f, c, sel);
  if (c != &t->configs[0] && same_made(t, c))
    fputs(",\"other_as\":0", f);
  else if (fputs(",\"other\":", f) < 0 || write_other(f, t, c, sel) != 0)
    return -1;
  write_map(f, t, c, sel, &sel->maps[c - t->configs]);
  fputc('}', f);
  return 0;
}

/* ---- The trace ---- */

static void write_bands(FILE* f, const struct viz_trace* t, const struct selection* sel) {
  fprintf(f,
          ",\"bands\":{\"limit\":%zu,\"allocations\":%zu,\"drawn\":%zu,\"smallest\":%llu,\"max_points\":%d,"
          "\"buckets\":%d},\"blocks\":[",
          t->band_limit, t->block_count, sel->count, (unsigned long long)sel->smallest, kMaxPoints, kBuckets);
  for (size_t i = 0; i < sel->count; i++) {
    const struct viz_block* b = &t->blocks[sel->bands[i]];
    const int freed = b->free_record != VIZ_NEVER;
    fprintf(f, "%s[%llu,%llu,%lld,%lld,%llu,%u,%d,%u]", i ? "," : "", (unsigned long long)b->alloc_record,
            (unsigned long long)t->times[b->alloc_record], or_minus_one(b->free_record),
            freed ? (long long)t->times[b->free_record] : -1LL, (unsigned long long)b->size, b->stream,
            (int)page_stack(sel, b->stack), b->thread);
  }
  fputc(']', f);
}

/* The frames and stacks the page shows, in the page's order (its ids): 0, or -1 when out of memory. */
static int write_stacks(FILE* f, const struct viz_trace* t, const struct selection* sel) {
  const struct torch_snapshot* s = t->snapshot;
  size_t* frames = calloc(sel->frames ? sel->frames : 1, sizeof *frames); /* a page id's frame */
  size_t* stacks = calloc(sel->stacks ? sel->stacks : 1, sizeof *stacks);
  if (!frames || !stacks) return free(frames), free(stacks), -1;
  for (size_t i = 0; s && i < s->frame_count; i++)
    if (sel->frame_id[i] >= 0) frames[sel->frame_id[i]] = i;
  for (size_t i = 0; s && i < s->stack_count; i++)
    if (sel->stack_id[i] >= 0) stacks[sel->stack_id[i]] = i;
  fputs(",\"frames\":[", f);
  for (size_t id = 0; id < sel->frames; id++) {
    fputs(id ? "," : "", f);
    json_string(f, s->frames[frames[id]], s->frame_lengths[frames[id]]);
  }
  fputs("],\"stacks\":[", f);
  for (size_t id = 0; id < sel->stacks; id++) {
    const size_t i = stacks[id];
    fputs(id ? ",[" : "[", f);
    for (size_t k = s->stack_start[i]; k < s->stack_start[i + 1]; k++)
      fprintf(f, "%s%d", k > s->stack_start[i] ? "," : "", (int)sel->frame_id[s->stack_frames[k]]);
    fputc(']', f);
  }
  fputc(']', f);
  free(frames);
  free(stacks);
  return 0;
}

static void write_trace(FILE* f, const struct viz_trace* t) {
  fputs("{\"trace\":", f);
  json_text(f, t->path);
  fputs(",\"format\":", f);
  json_text(f, t->format);
  fprintf(f, ",\"records\":%llu,\"end_ns\":%llu,\"device_memory\":%llu", (unsigned long long)t->records,
          (unsigned long long)(t->records ? t->times[t->records - 1] : 0), (unsigned long long)t->capacity);
  if (t->snapshot && t->snapshot->device >= 0) fprintf(f, ",\"device\":%d", (int)t->snapshot->device);
  fputs(",\"streams\":[", f);
  for (size_t i = 0; i < t->stream_count; i++) {
    fputs(i ? "," : "", f);
    json_hex(f, t->streams[i]);
  }
  fputs("],\"recorded\":", f);
  if (t->has_recorded) {
    fputs("{\"allocator\":", f);
    json_text(f, t->recorded.kind);
    fprintf(f, ",\"peak_live\":%llu,\"peak_reserved\":%llu}", (unsigned long long)t->recorded.peak_live,
            (unsigned long long)t->recorded.peak_reserved);
  } else {
    fputs("null", f);
  }
}

int viz_write_json(FILE* f, const struct viz_trace* t) {
  struct selection sel;
  memset(&sel, 0, sizeof sel);
  int failed = select_bands(t, &sel) != 0;
  for (int i = 0; !failed && i < t->config_count; i++) failed = prepare_map(t, &t->configs[i], &sel.maps[i]) != 0;
  failed = failed || select_stacks(t, &sel) != 0;
  if (!failed) {
    write_trace(f, t);
    write_bands(f, t, &sel);
    failed = write_stacks(f, t, &sel) != 0;
  }
  if (!failed) {
    fputs(",\"configs\":[", f);
    for (int i = 0; !failed && i < t->config_count; i++) {
      fputs(i ? "," : "", f);
      failed = write_config(f, t, &t->configs[i], &sel) != 0;
    }
    fputs("]}", f);
  }
  free_selection(&sel);
  return failed ? -1 : 0;
}
