/* The distinct frames and call stacks of a struct torch_snapshot, each kept once: a frame by its
 * text, a stack by its frames. The PyTorch snapshot's reader (torch_snapshot.c) and a gpumem
 * trace's (trace_stacks.c) fill the snapshot's frame and stack tables through it. */
#ifndef GPUMEM_TOOLS_STACK_TABLE_H
#define GPUMEM_TOOLS_STACK_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "torch_snapshot.h"

/* Ids under 64-bit keys: a text's hash, or a value's address. Open addressing, grown at half full. */
struct id_table {
  uint64_t* keys;
  uint32_t* ids; /* id + 1; 0: empty */
  size_t mask, used;
};

/* Whether id is the one wanted, of those under the same key. */
typedef int (*id_table_same_fn)(const void* context, uint32_t id);

/* The id under key that same() takes for the one wanted (any, if same is NULL); -1 if there is none. */
int64_t id_table_find(const struct id_table* t, uint64_t key, id_table_same_fn same, const void* context);
/* 0, or -1 when out of memory (the table as it was). */
int id_table_add(struct id_table* t, uint64_t key, uint32_t id);
void id_table_free(struct id_table* t);

uint64_t stack_table_hash(const void* data, size_t n);

/* The snapshot's frames and stacks being filled, and the stack being built. */
struct stack_table {
  struct torch_snapshot* s;
  size_t frames_capacity, stack_frames_capacity, stacks_capacity;
  struct id_table frame_by_text, stack_by_content;
  uint32_t* pending; /* the frames of the stack being built */
  size_t pending_count, pending_capacity;
};

void stack_table_init(struct stack_table* t, struct torch_snapshot* s);
/* The id of the frame of these length bytes (a copy is kept, with a NUL after it); -1 when out of memory. */
int64_t stack_table_frame(struct stack_table* t, const char* text, size_t length);
/* The next frame, outward, of the stack being built: 0, or -1 when out of memory. */
int stack_table_push(struct stack_table* t, uint32_t frame);
/* The id of the stack of the frames pushed, which are then forgotten; -1 when out of memory. */
int64_t stack_table_end(struct stack_table* t);
/* Frees the tables, not the snapshot's arrays. */
void stack_table_free(struct stack_table* t);

#endif
