/* gpumem replay and viz: replaying a trace through an allocator configuration over a simulated
 * device (replay.c), and the page that pictures it (viz.c). */
#ifndef GPUMEM_TOOLS_REPLAY_H
#define GPUMEM_TOOLS_REPLAY_H

#include <gpumem/gpumem.h>
#include <stdio.h>

/* What one configuration's replay did. */
struct replay_result {
  const char* name; /* the configuration: "device", or "pool" with options (pool:vm,limit=SIZE) */
  uint64_t peak_live, peak_reserved, headroom_at_peak;
  uint64_t fits_at_peak; /* the largest allocation that would still succeed at the peak (replay_main) */
  uint64_t peak_record;  /* the record at which reserved bytes first reached their peak */
  uint64_t allocs, frees, unmatched_frees;
  uint64_t failed; /* allocations that found no memory */
  uint64_t first_failure_record, first_failure_size, first_failure_time_ns;
  uint64_t refused;         /* allocations refused for another reason than memory (a size it does not take) */
  char first_refusal[1024]; /* the first: its record, size, status and detail */
  uint64_t skipped;         /* allocations of 0 bytes, and frees of them or of NULL (RMM's replay's no-ops) */
  double ns_per_op;
  char error[1024]; /* why the replay could not go on; empty when it did */
  int tool_failed;  /* with error: the tool's own failure (its bookkeeping), not the configuration's */
};

/* One record as the replay met it, for an observer that pictures the replay (viz). */
struct replay_step {
  uint64_t index; /* of the record, from 0 */
  const gpumem_trace_record_t* rec;
  int made;         /* 1: allocated or freed in the replay; 0: failed, refused, skipped or not replayed */
  uint64_t address; /* an allocation made: where the configuration put it; else 0 */
  uint64_t live, reserved;
  gpumem_allocator_t* config;
};

/* Told of the records as the replay reads them; optionally stopped at one record. */
struct replay_observer {
  void* context;
  /* Called after every record read, made or not (step->made): failed and refused allocations,
   * those of 0 bytes, frees of nothing, and records that are not replayed at all (a pool's
   * upstream records, allocations that failed when recorded) included. */
  void (*on_step)(void* context, const struct replay_step* step);
  uint64_t stop_record; /* with at_record: called after this record, then the replay ends */
  void (*at_record)(void* context, gpumem_allocator_t* config, gpumem_stream_t stream);
};

/* Replays the first records of the trace at path (a gpumem trace or an RMM CSV log; records, as
 * replay_count_records counted them, is also the progress shown on a terminal) through the
 * configuration r->name over a simulated device of capacity bytes. It reads no record past them,
 * should the file have grown since. observer may be NULL. */
void replay_run(const char* path, uint64_t capacity, uint64_t records, struct replay_result* r,
                const struct replay_observer* observer);
/* The records of the trace at path; error set on failure. */
uint64_t replay_count_records(const char* path, char* error, size_t error_size);

/* A configuration (replay_config.c): "device", or "pool" with options after a colon: "vm" (over
 * the device's virtual memory), "unit=SIZE" (that, mapped SIZE at a time) and "limit=SIZE". */
struct replay_config {
  int pool;
  uint64_t limit; /* 0: none */
  uint64_t unit;  /* over virtual memory: the map unit; 0: not */
};
/* Reads the configuration name into c: 0, or -1 with error saying why, in the name's own terms. */
int replay_config_parse(const char* name, struct replay_config* c, char* error, size_t error_size);

/* How gpumem replay prints its results (replay_output.c): the trace's figures first, then each
 * configuration's (index counting from 0), then the end. */
enum replay_format { REPLAY_TEXT, REPLAY_JSON, REPLAY_CSV };
struct summary_recorded;
struct replay_trace {
  const char* path;
  uint64_t records, capacity;
  const struct summary_recorded* recorded; /* the traced allocator's own figures, or NULL */
};
void replay_print_trace(int format, const struct replay_trace* t);
void replay_print_result(int format, const struct replay_trace* t, const struct replay_result* r, int index);
void replay_print_end(int format);

/* The usage of `gpumem replay` and `gpumem viz`. */
void replay_usage(FILE* to);
void viz_usage(FILE* to);
/* `gpumem replay` and `gpumem viz` with the arguments after the command's name: exit statuses. */
int replay_main(int argc, char** argv);
int viz_main(int argc, char** argv);

#endif
