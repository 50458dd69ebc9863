/* A PyTorch memory snapshot (the pickle of torch.cuda.memory._dump_snapshot()) read as gpumem trace
 * records, with the call stack PyTorch recorded for each: the entries that
 * tools/torch_snapshot_to_trace.py converts, read without Python. */
#ifndef GPUMEM_TOOLS_TORCH_SNAPSHOT_H
#define GPUMEM_TOOLS_TORCH_SNAPSHOT_H

#include <gpumem/gpumem.h>
#include <stdio.h>

struct torch_snapshot {
  gpumem_trace_record_t* records;
  int32_t* stacks; /* per record: its call stack, or -1 */
  size_t count;
  uint64_t start_ns; /* the first entry's wall-clock time, nanoseconds since 1970 */
  int32_t device;
  char** frames;         /* each distinct frame as "name (file:line)", NUL-terminated */
  size_t* frame_lengths; /* and its bytes, which may hold a NUL of the snapshot's own */
  size_t frame_count;
  /* Stack i is frames stack_frames[stack_start[i]] to stack_frames[stack_start[i + 1] - 1], the
   * innermost call (where the allocation was asked for) first, as PyTorch records them. */
  uint32_t* stack_frames;
  size_t* stack_start;
  size_t stack_count;
};

/* Whether the file at path starts as a pickle does (so it is read as a snapshot). */
int torch_snapshot_sniff(const char* path);
/* Reads the snapshot at path, the history of device (or, if device < 0, of the first device that
 * has one), into s: 0, or -1 with error set to a message naming the file. */
int torch_snapshot_read(const char* path, int32_t device, struct torch_snapshot* s, char* error, size_t error_size);
/* Writes the records as a gpumem trace (docs/trace-format.md) to f: 0, or -1 with errno set. */
int torch_snapshot_write_trace(const struct torch_snapshot* s, FILE* f);
void torch_snapshot_free(struct torch_snapshot* s);

#endif
