/* gpumem summary (summary.c): a trace's figures as a person reads them. */
#ifndef GPUMEM_TOOLS_SUMMARY_H
#define GPUMEM_TOOLS_SUMMARY_H

#include <stdint.h>

/* `gpumem summary` with the arguments after the command's name: its exit status. */
int summary_main(int argc, char** argv);

/* What the traced allocator itself did, from a trace's upstream records: the peer's own figure
 * beside a replay's configurations. */
struct summary_recorded {
  char kind[32]; /* the traced allocator, as its header names it */
  uint64_t peak_live, peak_reserved, allocs, failed;
};
/* 1 with *out filled if path is a gpumem trace with upstream records (a pool's), else 0. */
int summary_recorded(const char* path, struct summary_recorded* out);

#endif
