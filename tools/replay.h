/* gpumem replay and viz: replaying a trace through an allocator configuration over a simulated
 * device (replay.c), and the page that pictures it (viz.c). */
#ifndef GPUMEM_TOOLS_REPLAY_H
#define GPUMEM_TOOLS_REPLAY_H

#include <gpumem/gpumem.h>

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

/* Told of each allocation and free replayed; optionally stopped at one record. */
struct replay_observer {
  void* context;
  void (*on_step)(void* context, uint64_t time_ns, uint64_t live, uint64_t reserved);
  uint64_t stop_record; /* with at_record: called after this record, then the replay ends */
  void (*at_record)(void* context, gpumem_allocator_t* config, gpumem_stream_t stream);
};

/* Replays the trace at path (a gpumem trace or an RMM CSV log; records counts them, for the
 * progress shown on a terminal) through the configuration r->name over a simulated device of
 * capacity bytes. observer may be NULL. */
void replay_run(const char* path, uint64_t capacity, uint64_t records, struct replay_result* r,
                const struct replay_observer* observer);
/* The records of the trace at path; error set on failure. */
uint64_t replay_count_records(const char* path, char* error, size_t error_size);
/* Bytes from "1073741824" or a number with KiB, MiB, GiB or TiB ("1.5GiB"): 0; -1 if it is
 * neither, -2 if it is 2^64 bytes or more. */
int replay_parse_size(const char* text, uint64_t* out);
/* The value of a size option (--device-memory) of `gpumem command`: 0, or 2 (the exit status for a
 * bad argument) after saying on stderr why it is refused. Refuses 0 bytes too. */
int replay_size_option(const char* command, const char* option, const char* text, uint64_t* out);

/* `gpumem replay` and `gpumem viz` with the arguments after the command's name: exit statuses. */
int replay_main(int argc, char** argv);
int viz_main(int argc, char** argv);

#endif
