/* The call stacks of a gpumem trace (trace_stacks.h). */
#include "trace_stacks.h"

#include <gpumem/gpumem.h>
#include <stdio.h>
#include <string.h>

#include "grow.h"
#include "stack_table.h"

/* A reading in progress: the snapshot being filled, its frames and stacks, and the trace's stack
 * numbers with the ids they were given (a trace's stack has the same frames wherever it recurs). */
struct reading {
  gpumem_trace_reader_t* reader;
  struct torch_snapshot* s;
  size_t stacks_capacity;
  struct stack_table table;
  struct id_table by_number;
  int no_memory; /* else a failure is the reader's, with its status and detail */
};

/* The id of the record's stack, or -1 when it has none; -2 on failure. */
static int64_t record_stack(struct reading* g, const gpumem_trace_record_t* rec, gpumem_status_t* st) {
  if (!rec->stack || !rec->frame_count) return -1;
  int64_t id = id_table_find(&g->by_number, rec->stack, NULL, NULL);
  if (id >= 0) return id;
  for (uint32_t i = 0; i < rec->frame_count; i++) {
    gpumem_trace_frame_t f;
    memset(&f, 0, sizeof f);
    f.struct_size = sizeof f;
    if ((*st = gpumem_trace_reader_get_frame(g->reader, i, &f)) != GPUMEM_SUCCESS) return -2;
    const char* text = f.text ? f.text : "";
    const int64_t frame = stack_table_frame(&g->table, text, strlen(text));
    if (frame < 0 || stack_table_push(&g->table, (uint32_t)frame) != 0) return g->no_memory = 1, -2;
  }
  if ((id = stack_table_end(&g->table)) < 0 || id_table_add(&g->by_number, rec->stack, (uint32_t)id) != 0)
    return g->no_memory = 1, -2;
  return id;
}

/* Every record's stack, up to records of them: 1 when one has a stack, 0 when none has, -1 on failure. */
static int read_stacks(struct reading* g, uint64_t records, gpumem_status_t* st) {
  gpumem_trace_header_t h;
  memset(&h, 0, sizeof h);
  h.struct_size = sizeof h;
  if ((*st = gpumem_trace_reader_get_header(g->reader, &h)) != GPUMEM_SUCCESS) return -1;
  if (h.version < 2) return 0; /* frames came with version 2 */
  struct torch_snapshot* s = g->s;
  int found = 0;
  while (s->count < records) {
    gpumem_trace_record_t rec;
    memset(&rec, 0, sizeof rec);
    rec.struct_size = sizeof rec;
    bool more = false;
    if ((*st = gpumem_trace_reader_next(g->reader, &rec, &more)) != GPUMEM_SUCCESS) return -1;
    if (!more) break;
    const int64_t stack = record_stack(g, &rec, st);
    if (stack < -1) return -1;
    if (grow_array((void**)&s->stacks, &g->stacks_capacity, s->count, sizeof *s->stacks, 1024) != 0)
      return g->no_memory = 1, -1;
    s->stacks[s->count++] = (int32_t)stack;
    found |= stack >= 0;
  }
  return found;
}

int trace_stacks_read(const char* path, uint64_t records, struct torch_snapshot* s, char* error, size_t error_size) {
  memset(s, 0, sizeof *s);
  struct reading g;
  memset(&g, 0, sizeof g);
  g.s = s;
  stack_table_init(&g.table, s);
  gpumem_status_t st = gpumem_trace_reader_open(path, &g.reader);
  const int found = st == GPUMEM_SUCCESS ? read_stacks(&g, records, &st) : -1;
  if (found < 0 && g.no_memory)
    snprintf(error, error_size, "%s: out of host memory for the trace's call stacks", path);
  else if (found < 0)
    snprintf(error, error_size, "%s: %s", gpumem_status_name(st), gpumem_last_error_detail());
  (void)gpumem_trace_reader_close(g.reader);
  stack_table_free(&g.table);
  id_table_free(&g.by_number);
  if (found <= 0) torch_snapshot_free(s);
  s->device = -1;
  return found;
}
