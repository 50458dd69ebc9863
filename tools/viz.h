/* gpumem viz, in parts: the command (viz.c) gathers what the page pictures by replaying the trace
 * through each configuration (viz_data.c), and writes the page (viz_page.c): a template with its
 * script (viz_page.html, viz_*.js, embedded at build time) around the data as JSON (viz_json.c). */
#ifndef GPUMEM_TOOLS_VIZ_H
#define GPUMEM_TOOLS_VIZ_H

#include <gpumem/gpumem.h>
#include <stdio.h>

#include "replay.h"
#include "summary.h"
#include "torch_snapshot.h"

#define VIZ_NEVER UINT64_MAX
enum { VIZ_MAX_CONFIGS = 16 };

/* One allocation of the trace: the same in every configuration, whether or not it was made there. */
struct viz_block {
  uint64_t alloc_record, free_record; /* free_record: VIZ_NEVER when the trace does not free it */
  uint64_t size;                      /* bytes asked for */
  uint32_t stream;                    /* an index into viz_trace.streams */
  uint32_t thread;
  int32_t stack; /* its call stack (a snapshot's, or a trace's recorded with frames), or -1 */
};

/* From this record on, live and reserved bytes (value[0], value[1]); or one value of a band. */
struct viz_point {
  uint64_t record;
  uint64_t value[2];
};

struct viz_segment {
  uint64_t start, size;
};

struct viz_config {
  struct replay_result r;
  uint64_t peak_live_record;
  struct viz_point* series; /* after each allocation or free made */
  size_t series_count, series_capacity;
  uint64_t* address; /* per block: where the configuration put it; 0 when it was not made */
  /* The segments held at the peak or at the end, by address: where a block's address lies. */
  struct viz_segment* segments;
  size_t segment_count, segment_capacity;
  /* The pool's blocks at the peak (r.peak_record), and the snapshot's status (not a pool: not 0). */
  gpumem_block_info_t* peak;
  size_t peak_count, peak_capacity;
  gpumem_status_t peak_status;
};

struct viz_trace {
  const char* path;     /* as given */
  const char* replayed; /* the file the replays read: path, or a snapshot's records written as a trace */
  const char* format;   /* "gpumem trace", "RMM log", "PyTorch snapshot" */
  uint64_t records, capacity;
  size_t band_limit; /* allocations drawn as bands of their own */
  const struct torch_snapshot* snapshot;
  struct summary_recorded recorded;
  int has_recorded;
  uint64_t origin_ns;     /* the first record's time */
  uint64_t* times;        /* per record: nanoseconds from the first */
  uint32_t* record_block; /* per record: 1 + the block it allocates or frees; 0 for none */
  struct viz_block* blocks;
  size_t block_count, block_capacity;
  uint64_t* streams; /* each stream's handle, in the order of their first records */
  size_t stream_count, stream_capacity;
  struct viz_config configs[VIZ_MAX_CONFIGS];
  int config_count;
};

/* Replays the trace through every configuration (their names in configs[i].r.name): 0, or -1 with
 * error set (a configuration that could not be replayed, or the tool out of host memory). */
int viz_gather(struct viz_trace* t, char* error, size_t error_size);
void viz_free(struct viz_trace* t);

/* The data as JSON (viz_json.c), and the whole page (viz_page.c): 0, or -1 when out of memory. */
int viz_write_json(FILE* f, const struct viz_trace* t);
int viz_write_page(FILE* f, const struct viz_trace* t);
/* Text from outside (a file's name) as HTML text; sizes as people read them ("1.50 MiB"). */
void viz_put_escaped(FILE* f, const char* text);
void viz_human(char* out, size_t size, uint64_t bytes);

/* The page's template and script (generated from tools/viz_page.html and tools/viz_*.js), each
 * ending with a NUL; unsigned, as the bytes of UTF-8 text past 0x7f are. */
extern const unsigned char viz_page_html[];
extern const unsigned char viz_page_js[];

#endif
