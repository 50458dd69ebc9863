/* The call stacks a gpumem trace carries (format version 2, docs/trace-format.md), read with the
 * library's reader into a struct torch_snapshot, so that gpumem viz shows them as it shows a
 * PyTorch snapshot's: no records of its own (the replays read the trace), and device -1. */
#ifndef GPUMEM_TOOLS_TRACE_STACKS_H
#define GPUMEM_TOOLS_TRACE_STACKS_H

#include <stdint.h>

#include "torch_snapshot.h"

/* Reads the stacks of the first records records of the gpumem trace at path into s: stacks[i] is
 * record i's (counting from 0, as the replay does), or -1; records that share a stack share its
 * id; a frame's text is gpumem_trace_frame_t::text. 1 when a record has a stack; 0 when none has
 * (s then holds nothing: a version-1 trace costs only its header); -1 with error set to a message
 * naming the file (a damaged trace, the tool out of host memory). Free s with torch_snapshot_free. */
int trace_stacks_read(const char* path, uint64_t records, struct torch_snapshot* s, char* error, size_t error_size);

#endif
