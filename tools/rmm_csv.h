/* The log of RMM's logging_resource_adaptor (CSV: Thread,Time,Action,Pointer,Size,Stream), read as
 * gpumem trace records, row by row. Its own file so that the fuzzer links it alone. */
#ifndef GPUMEM_TOOLS_RMM_CSV_H
#define GPUMEM_TOOLS_RMM_CSV_H

#include <gpumem/gpumem.h>
#include <stdio.h>

#define RMM_CSV_HEADER "Thread,Time,Action,Pointer,Size,Stream"

struct rmm_csv {
  FILE* file;
  const char* path;  /* for messages */
  uint64_t line;     /* of the last line read; the header is line 1 */
  double first_time; /* the first row's time, in seconds; negative before it */
};

/* Reads the first line of file: 1 if it is RMM's header (the rows follow), 0 if it is not (the
 * file's position is then anywhere). The file stays the caller's to close. */
int rmm_csv_open(struct rmm_csv* csv, FILE* file, const char* path);
/* The next row into rec (its struct_size kept): 1, 0 at the end, -1 with error set to a message
 * naming the path and the line. */
int rmm_csv_next(struct rmm_csv* csv, gpumem_trace_record_t* rec, char* error, size_t error_size);

#endif
