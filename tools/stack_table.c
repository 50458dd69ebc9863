/* The distinct frames and call stacks of a struct torch_snapshot (stack_table.h). */
#include "stack_table.h"

#include <stdlib.h>
#include <string.h>

#include "grow.h"

enum { kFirst = 64 };

static size_t slot_of(uint64_t key, size_t mask) { return (size_t)((key ^ key >> 29) * 0x9e3779b97f4a7c15ULL) & mask; }

int64_t id_table_find(const struct id_table* t, uint64_t key, id_table_same_fn same, const void* context) {
  if (!t->keys) return -1;
  for (size_t i = slot_of(key, t->mask); t->ids[i]; i = (i + 1) & t->mask)
    if (t->keys[i] == key && (!same || same(context, t->ids[i] - 1))) return t->ids[i] - 1;
  return -1;
}

int id_table_add(struct id_table* t, uint64_t key, uint32_t id) {
  if (!t->keys || 2 * (t->used + 1) > t->mask + 1) {
    const size_t capacity = t->keys ? 2 * (t->mask + 1) : 256;
    struct id_table bigger = {calloc(capacity, sizeof *bigger.keys), calloc(capacity, sizeof *bigger.ids), capacity - 1,
                              t->used};
    if (!bigger.keys || !bigger.ids) {
      free(bigger.keys);
      free(bigger.ids);
      return -1;
    }
    for (size_t i = 0; t->keys && i <= t->mask; i++) {
      if (!t->ids[i]) continue;
      size_t j = slot_of(t->keys[i], bigger.mask);
      while (bigger.ids[j]) j = (j + 1) & bigger.mask;
      bigger.keys[j] = t->keys[i];
      bigger.ids[j] = t->ids[i];
    }
    free(t->keys);
    free(t->ids);
    *t = bigger;
  }
  size_t i = slot_of(key, t->mask);
  while (t->ids[i]) i = (i + 1) & t->mask;
  t->keys[i] = key;
  t->ids[i] = id + 1;
  t->used++;
  return 0;
}

void id_table_free(struct id_table* t) {
  free(t->keys);
  free(t->ids);
  memset(t, 0, sizeof *t);
}

uint64_t stack_table_hash(const void* data, size_t n) {
  const unsigned char* b = data;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

void stack_table_init(struct stack_table* t, struct torch_snapshot* s) {
  memset(t, 0, sizeof *t);
  t->s = s;
}

struct frame_text {
  const struct torch_snapshot* s;
  const char* text;
  size_t length;
};

static int same_text(const void* context, uint32_t id) {
  const struct frame_text* t = context;
  return t->s->frame_lengths[id] == t->length && !memcmp(t->s->frames[id], t->text, t->length);
}

/* A copy of the frame's text, with a NUL after it for those who read it as a C string. */
static int add_frame(struct stack_table* t, const char* text, size_t length) {
  struct torch_snapshot* s = t->s;
  /* The texts and their lengths grow together: each array grows from the same capacity. */
  size_t capacity = t->frames_capacity;
  if (grow_array((void**)&s->frames, &capacity, s->frame_count, sizeof *s->frames, kFirst) != 0) return -1;
  capacity = t->frames_capacity;
  if (grow_array((void**)&s->frame_lengths, &capacity, s->frame_count, sizeof *s->frame_lengths, kFirst) != 0)
    return -1;
  t->frames_capacity = capacity;
  char* copy = malloc(length + 1);
  if (!copy) return -1;
  memcpy(copy, text, length);
  copy[length] = '\0';
  s->frames[s->frame_count] = copy;
  s->frame_lengths[s->frame_count] = length;
  s->frame_count++;
  return 0;
}

int64_t stack_table_frame(struct stack_table* t, const char* text, size_t length) {
  const uint64_t hash = stack_table_hash(text, length);
  const struct frame_text wanted = {t->s, text, length};
  int64_t id = id_table_find(&t->frame_by_text, hash, same_text, &wanted);
  if (id >= 0) return id;
  if (add_frame(t, text, length) != 0) return -1;
  id = (int64_t)t->s->frame_count - 1;
  return id_table_add(&t->frame_by_text, hash, (uint32_t)id) != 0 ? -1 : id;
}

int stack_table_push(struct stack_table* t, uint32_t frame) {
  if (grow_array((void**)&t->pending, &t->pending_capacity, t->pending_count, sizeof *t->pending, kFirst) != 0)
    return -1;
  t->pending[t->pending_count++] = frame;
  return 0;
}

static int same_stack(const void* context, uint32_t id) {
  const struct stack_table* t = context;
  const struct torch_snapshot* s = t->s;
  const size_t n = s->stack_start[id + 1] - s->stack_start[id];
  return n == t->pending_count &&
         (!n || !memcmp(s->stack_frames + s->stack_start[id], t->pending, n * sizeof *t->pending));
}

/* A new stack of the pending frames: its id, or -1. */
static int64_t add_stack(struct stack_table* t, uint64_t hash) {
  struct torch_snapshot* s = t->s;
  const size_t start = s->stack_count ? s->stack_start[s->stack_count] : 0;
  for (size_t i = 0; i < t->pending_count; i++) {
    if (grow_array((void**)&s->stack_frames, &t->stack_frames_capacity, start + i, sizeof *s->stack_frames, kFirst) !=
        0)
      return -1;
    s->stack_frames[start + i] = t->pending[i];
  }
  if (grow_array((void**)&s->stack_start, &t->stacks_capacity, s->stack_count + 1, sizeof *s->stack_start, kFirst) != 0)
    return -1;
  s->stack_start[s->stack_count] = start;
  s->stack_start[s->stack_count + 1] = start + t->pending_count;
  const int64_t id = (int64_t)s->stack_count++;
  return id_table_add(&t->stack_by_content, hash, (uint32_t)id) != 0 ? -1 : id;
}

int64_t stack_table_end(struct stack_table* t) {
  const uint64_t hash = stack_table_hash(t->pending, t->pending_count * sizeof *t->pending);
  int64_t id = id_table_find(&t->stack_by_content, hash, same_stack, t);
  if (id < 0) id = add_stack(t, hash);
  t->pending_count = 0;
  return id;
}

void stack_table_free(struct stack_table* t) {
  id_table_free(&t->frame_by_text);
  id_table_free(&t->stack_by_content);
  free(t->pending);
  memset(t, 0, sizeof *t);
}
