/* A PyTorch memory snapshot read as trace records (torch_snapshot.h). The snapshot is a dict; its
 * "device_traces" a list per device of entries, each a dict with "action", "addr", "size",
 * "stream", "time_us" (wall-clock microseconds; older snapshots have none) and "frames" (a list of
 * dicts with "filename", "line" and "name"). Entries become records as the converter makes them:
 * "alloc" an allocation, "free_completed" a free, "segment_alloc" and "segment_free" upstream
 * records (PyTorch's own blocks), "oom" a failed allocation; the rest are left out. */
#define _POSIX_C_SOURCE 200809L

#include "torch_snapshot.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "grow.h"
#include "pickle.h"
#include "stack_table.h"

/* A reading in progress: the snapshot being filled, and the tables that share its frames and
 * stacks (by the pickle's own sharing first, then by content: the stack table). */
struct reader {
  struct torch_snapshot* s;
  const char* path;
  char* error;
  size_t error_size;
  size_t records_capacity;
  struct stack_table stacks;
  struct id_table frame_by_value, stack_by_value;
};

static int no_memory(struct reader* r) {
  snprintf(r->error, r->error_size, "%s: out of host memory for the snapshot's history", r->path);
  return -1;
}

/* A frame's text is at most two strings of kMaxText bytes and its line: room for them. */
enum { kMaxText = 1000, kFrameText = 2 * kMaxText + 64, kFirst = 64 };

/* Bytes onto out, as many as fit in size (keeping room for a NUL). */
static void put_bytes(char* out, size_t size, size_t* at, const char* bytes, size_t n) {
  if (n > size - 1 - *at) n = size - 1 - *at;
  memcpy(out + *at, bytes, n);
  *at += n;
}

/* A string of the snapshot, its first kMaxText bytes as they are (NULs too: the page escapes them). */
static void put_text(char* out, size_t size, size_t* at, const struct pickle_value* v) {
  if (v && v->kind == PICKLE_STRING)
    put_bytes(out, size, at, v->u.s.bytes, v->u.s.length > kMaxText ? kMaxText : v->u.s.length);
  else
    put_bytes(out, size, at, "?", 1);
}

/* The id of a frame dict, shared by value and by text; -1 when out of memory. */
static int64_t frame_id(struct reader* r, const struct pickle_value* frame) {
  const uint64_t by_value = (uint64_t)(uintptr_t)frame;
  int64_t id = id_table_find(&r->frame_by_value, by_value, NULL, NULL);
  if (id >= 0) return id;
  char text[kFrameText], line_text[32] = ")";
  size_t at = 0;
  int64_t line = 0;
  put_text(text, sizeof text, &at, pickle_get(frame, "name"));
  put_bytes(text, sizeof text, &at, " (", 2);
  put_text(text, sizeof text, &at, pickle_get(frame, "filename"));
  if (pickle_int(pickle_get(frame, "line"), &line)) snprintf(line_text, sizeof line_text, ":%lld)", (long long)line);
  put_bytes(text, sizeof text, &at, line_text, strlen(line_text));
  if ((id = stack_table_frame(&r->stacks, text, at)) < 0) return -1;
  return id_table_add(&r->frame_by_value, by_value, (uint32_t)id) != 0 ? -1 : id;
}

/* The id of an entry's frames, or -1 when it has none; -2 when out of memory. */
static int64_t stack_id(struct reader* r, const struct pickle_value* frames) {
  if (!frames || frames->kind != PICKLE_LIST || !frames->u.seq.count) return -1;
  const uint64_t by_value = (uint64_t)(uintptr_t)frames;
  int64_t id = id_table_find(&r->stack_by_value, by_value, NULL, NULL);
  if (id >= 0) return id;
  for (size_t i = 0; i < frames->u.seq.count; i++) {
    const int64_t f = frame_id(r, frames->u.seq.items[i]);
    if (f < 0 || stack_table_push(&r->stacks, (uint32_t)f) != 0) return -2;
  }
  if ((id = stack_table_end(&r->stacks)) < 0) return -2;
  return id_table_add(&r->stack_by_value, by_value, (uint32_t)id) != 0 ? -2 : id;
}

static int event_of(const struct pickle_value* action) {
  static const struct {
    const char* name;
    int event;
  } kActions[] = {{"alloc", GPUMEM_TRACE_ALLOC},
                  {"free_completed", GPUMEM_TRACE_FREE},
                  {"segment_alloc", GPUMEM_TRACE_UPSTREAM_ALLOC},
                  {"segment_free", GPUMEM_TRACE_UPSTREAM_FREE},
                  {"oom", GPUMEM_TRACE_ALLOC_FAILED}};
  if (!action || action->kind != PICKLE_STRING) return 0;
  for (size_t i = 0; i < sizeof kActions / sizeof kActions[0]; i++)
    if (action->u.s.length == strlen(kActions[i].name) &&
        !memcmp(action->u.s.bytes, kActions[i].name, action->u.s.length))
      return kActions[i].event;
  return 0;
}

/* A field of an entry that must be a number of 0 to 2^64 - 1 (absent: 0, if it may be). */
static int entry_number(struct reader* r, const struct pickle_value* e, const char* key, int required, size_t device,
                        size_t index, uint64_t* out) {
  const struct pickle_value* v = pickle_get(e, key);
  *out = 0;
  if (!v && !required) return 0;
  if (v && v->kind == PICKLE_INT && (v->wide == 1 || (!v->wide && v->u.i >= 0))) {
    *out = (uint64_t)v->u.i;
    return 0;
  }
  snprintf(r->error, r->error_size, "%s: device_traces[%zu][%zu]: \"%s\" is %s, not a number of 0 to 2^64 - 1", r->path,
           device, index, key,
           !v                      ? "missing"
           : v->kind == PICKLE_INT ? "out of range"
                                   : pickle_kind_name(v->kind));
  return -1;
}

static int add_entry(struct reader* r, const struct pickle_value* e, size_t device, size_t index, int timed) {
  const int event = event_of(pickle_get(e, "action"));
  if (!event) return 0;
  struct torch_snapshot* s = r->s;
  /* Records and their stacks grow together: each array grows from the same capacity. */
  size_t capacity = r->records_capacity;
  if (grow_array((void**)&s->stacks, &capacity, s->count, sizeof *s->stacks, kFirst) != 0) return no_memory(r);
  capacity = r->records_capacity;
  if (grow_array((void**)&s->records, &capacity, s->count, sizeof *s->records, kFirst) != 0) return no_memory(r);
  r->records_capacity = capacity;
  gpumem_trace_record_t* rec = &s->records[s->count];
  memset(rec, 0, sizeof *rec);
  rec->struct_size = sizeof *rec;
  rec->event = (uint32_t)event;
  rec->thread = 1;
  uint64_t time_us = 0;
  if (entry_number(r, e, "size", 1, device, index, &rec->size) != 0 ||
      entry_number(r, e, "addr", event != GPUMEM_TRACE_ALLOC_FAILED, device, index, &rec->address) != 0 ||
      entry_number(r, e, "stream", 0, device, index, &rec->stream) != 0 ||
      (timed && entry_number(r, e, "time_us", 1, device, index, &time_us) != 0))
    return -1;
  rec->time_ns = timed ? time_us * 1000 : (uint64_t)s->count * 1000; /* untimed: a microsecond an entry */
  if (event == GPUMEM_TRACE_FREE) rec->size = 0;
  if (event == GPUMEM_TRACE_ALLOC) rec->mem_size = rec->size;
  if (event == GPUMEM_TRACE_ALLOC_FAILED) {
    rec->address = 0;
    rec->status = GPUMEM_ERROR_OUT_OF_MEMORY;
  }
  const int64_t stack = event == GPUMEM_TRACE_ALLOC ? stack_id(r, pickle_get(e, "frames")) : -1;
  if (stack == -2) return no_memory(r);
  s->stacks[s->count++] = (int32_t)stack;
  return 0;
}

/* Whether every replayed entry of a history has a time (else none counts: the order is kept). */
static int history_is_timed(const struct pickle_value* history) {
  for (size_t i = 0; i < history->u.seq.count; i++)
    if (event_of(pickle_get(history->u.seq.items[i], "action")) && !pickle_get(history->u.seq.items[i], "time_us"))
      return 0;
  return 1;
}

static size_t replayed_entries(const struct pickle_value* history) {
  size_t n = 0;
  for (size_t i = 0; history->kind == PICKLE_LIST && i < history->u.seq.count; i++)
    n += event_of(pickle_get(history->u.seq.items[i], "action")) != 0;
  return n;
}

/* The device's history in the snapshot's "device_traces", after saying why not if it has none. */
static const struct pickle_value* history_of(struct reader* r, const struct pickle_value* root, int32_t* device) {
  const struct pickle_value* traces = pickle_get(root, "device_traces");
  if (!root || root->kind != PICKLE_DICT || !traces || traces->kind != PICKLE_LIST) {
    snprintf(r->error, r->error_size,
             "%s is a pickle but not a PyTorch memory snapshot: it is %s with no list \"device_traces\"", r->path,
             root ? pickle_kind_name(root->kind) : "empty");
    return NULL;
  }
  const size_t devices = traces->u.seq.count;
  const int chosen = *device >= 0;
  for (size_t d = 0; !chosen && *device < 0 && d < devices; d++)
    if (replayed_entries(traces->u.seq.items[d])) *device = (int32_t)d;
  if (chosen && ((size_t)*device >= devices || traces->u.seq.items[*device]->kind != PICKLE_LIST)) {
    snprintf(r->error, r->error_size, "%s: the snapshot has histories for %zu device%s, none for device %d", r->path,
             devices, devices == 1 ? "" : "s", (int)*device);
    return NULL;
  }
  /* A device asked for whose history is empty is as useless as none: a page of nothing. */
  if (*device < 0 || !replayed_entries(traces->u.seq.items[*device])) {
    char which[64];
    if (chosen)
      snprintf(which, sizeof which, "for device %d", (int)*device);
    else
      snprintf(which, sizeof which, "(of %zu device%s)", devices, devices == 1 ? "" : "s");
    snprintf(r->error, r->error_size,
             "%s: the snapshot holds no allocation history %s: record one with "
             "torch.cuda.memory._record_memory_history() before torch.cuda.memory._dump_snapshot()",
             r->path, which);
    return NULL;
  }
  return traces->u.seq.items[*device];
}

static int read_history(struct reader* r, const struct pickle_value* root, int32_t device) {
  const struct pickle_value* history = history_of(r, root, &device);
  if (!history) return -1;
  r->s->device = device;
  const int timed = history_is_timed(history);
  for (size_t i = 0; i < history->u.seq.count; i++)
    if (add_entry(r, history->u.seq.items[i], (size_t)device, i, timed) != 0) return -1;
  struct torch_snapshot* s = r->s;
  s->start_ns = s->count ? s->records[0].time_ns : 0;
  for (size_t i = 0; i < s->count; i++) /* times from the start, never before an earlier record's */
    s->records[i].time_ns = s->records[i].time_ns > s->start_ns ? s->records[i].time_ns - s->start_ns : 0;
  for (size_t i = 1; i < s->count; i++)
    if (s->records[i].time_ns < s->records[i - 1].time_ns) s->records[i].time_ns = s->records[i - 1].time_ns;
  if (!timed) s->start_ns = 0;
  return 0;
}

int torch_snapshot_sniff(const char* path) {
  unsigned char head[2] = {0, 0};
  FILE* f = fopen(path, "rb");
  struct stat st;
  /* Only a regular file: the replay refuses others, and a pipe would lose what was read here. */
  const int regular = f && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
  const size_t n = regular ? fread(head, 1, sizeof head, f) : 0;
  if (f) fclose(f);
  return pickle_sniff(head, n);
}

int torch_snapshot_read(const char* path, int32_t device, struct torch_snapshot* s, char* error, size_t error_size) {
  memset(s, 0, sizeof *s);
  struct pickle_doc doc;
  if (pickle_load(path, &doc, error, error_size) != 0) return -1;
  struct reader r;
  memset(&r, 0, sizeof r);
  r.s = s;
  r.path = path;
  r.error = error;
  r.error_size = error_size;
  stack_table_init(&r.stacks, s);
  const int got = read_history(&r, doc.root, device);
  id_table_free(&r.frame_by_value);
  id_table_free(&r.stack_by_value);
  stack_table_free(&r.stacks);
  pickle_free(&doc);
  if (got != 0) torch_snapshot_free(s);
  return got;
}

static int put_varint(FILE* f, uint64_t v) {
  unsigned char b[10];
  int n = 0;
  for (; v >= 0x80; v >>= 7) b[n++] = (unsigned char)(v | 0x80);
  b[n++] = (unsigned char)v;
  return fwrite(b, 1, (size_t)n, f) == (size_t)n ? 0 : -1;
}

static uint64_t zigzag(uint64_t v) { return v << 1 ^ (0 - (v >> 63)); }

static int put_le(FILE* f, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    if (fputc((int)(v >> (8 * i) & 0xff), f) == EOF) return -1;
  return 0;
}

int torch_snapshot_write_trace(const struct torch_snapshot* s, FILE* f) {
  static const char kKind[] = "pytorch caching allocator"; /* as the converter names it */
  const size_t kind = sizeof kKind - 1;
  if (fwrite("GPUMEMTR", 1, 8, f) != 8 || put_le(f, 1, 4) || put_le(f, 34 + kind, 4) ||
      put_le(f, (uint32_t)s->device, 4) || put_le(f, 0, 4) || put_le(f, s->start_ns, 8) || put_le(f, kind, 2) ||
      fwrite(kKind, 1, kind, f) != kind)
    return -1;
  uint64_t last_time = 0, last_address = 0;
  for (size_t i = 0; i < s->count; i++) {
    const gpumem_trace_record_t* r = &s->records[i];
    if (fputc((int)r->event, f) == EOF || put_varint(f, r->time_ns - last_time) || put_varint(f, r->thread) ||
        put_varint(f, r->stream) || put_varint(f, zigzag(r->address - last_address)) || put_varint(f, r->size))
      return -1;
    if (r->event == GPUMEM_TRACE_ALLOC && put_varint(f, r->mem_size)) return -1;
    if (r->event == GPUMEM_TRACE_ALLOC_FAILED && put_varint(f, zigzag((uint64_t)(int64_t)r->status))) return -1;
    last_time = r->time_ns;
    last_address = r->address;
  }
  return fflush(f) == 0 ? 0 : -1;
}

void torch_snapshot_free(struct torch_snapshot* s) {
  for (size_t i = 0; i < s->frame_count; i++) free(s->frames[i]);
  free(s->frames);
  free(s->frame_lengths);
  free(s->records);
  free(s->stacks);
  free(s->stack_frames);
  free(s->stack_start);
  memset(s, 0, sizeof *s);
}
