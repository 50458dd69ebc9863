/* gpumem replay's results, printed as a table (text), as JSON or as CSV. The fields of the last
 * two are documented in the command's usage (replay_main.c); keep both in step. */
#include <stdio.h>
#include <string.h>

#include "replay.h"
#include "summary.h"

/* Bytes in GiB or MiB, after a space, right-aligned in width characters (0: as they come). */
static void print_bytes(uint64_t b, int width) {
  if (b >= (1ULL << 30))
    printf(" %*.2f GiB", width, (double)b / (double)(1ULL << 30));
  else
    printf(" %*.2f MiB", width, (double)b / (double)(1ULL << 20));
}

static double ratio(const struct replay_result* r) {
  return r->peak_live ? (double)r->peak_reserved / (double)r->peak_live : 0.0;
}

/* ---- Text: a table, one row per configuration with lines under it. ---- */

static void text_trace(const struct replay_trace* t) {
  printf("trace %s: %llu records; simulated device of", t->path, (unsigned long long)t->records);
  print_bytes(t->capacity, 0);
  printf("\n\n%-24s %14s %14s %9s %10s %10s %8s %8s\n", "configuration", "peak live", "peak reserved", "reserved/",
         "ns/op", "allocs", "failed", "unmatched");
  printf("%-24s %14s %14s %9s\n", "", "", "", "live");
  const struct summary_recorded* rec = t->recorded;
  if (!rec) return;
  /* The traced allocator's own figures, from its upstream records: the run as it happened. */
  printf("%-24s", "as recorded");
  print_bytes(rec->peak_live, 10);
  print_bytes(rec->peak_reserved, 10);
  printf(" %9.4f %10s %10llu %8llu %8s\n", rec->peak_live ? (double)rec->peak_reserved / (double)rec->peak_live : 0.0,
         "-", (unsigned long long)rec->allocs, (unsigned long long)rec->failed, "-");
  printf("  by %s, in the recorded run\n", rec->kind);
}

static void text_result(const struct replay_result* r) {
  if (r->error[0]) {
    printf("%-24s could not be replayed: %s\n", r->name, r->error);
    return;
  }
  printf("%-24s", r->name);
  print_bytes(r->peak_live, 10);
  print_bytes(r->peak_reserved, 10);
  printf(" %9.4f %10.1f %10llu %8llu %8llu\n", ratio(r), r->ns_per_op, (unsigned long long)r->allocs,
         (unsigned long long)r->failed, (unsigned long long)r->unmatched_frees);
  if (r->allocs) { /* the peak is that of what was allocated: none without an allocation */
    printf("  at the peak (record %llu): the largest allocation that would still succeed is",
           (unsigned long long)r->peak_record);
    print_bytes(r->fits_at_peak, 0);
    printf("; the device had");
    print_bytes(r->headroom_at_peak, 0);
    printf(" free\n");
  }
  if (r->failed)
    printf("  first out of memory: record %llu, %llu bytes, %.3f s into the trace\n",
           (unsigned long long)r->first_failure_record, (unsigned long long)r->first_failure_size,
           (double)r->first_failure_time_ns / 1e9);
  if (r->refused) printf("  refused: %llu allocations, first %s\n", (unsigned long long)r->refused, r->first_refusal);
  if (r->skipped)
    printf("  skipped: %llu allocations of 0 bytes and frees of them or of NULL, as RMM's replay does\n",
           (unsigned long long)r->skipped);
}

/* ---- JSON: an object with the trace's figures and an array of configurations. ---- */

static void json_string(const char* s) {
  putchar('"');
  for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      printf("\\%c", *p);
    else if (*p < 0x20)
      printf("\\u%04x", *p);
    else
      putchar(*p);
  }
  putchar('"');
}

/* ", NAME: N", or null when has is 0. */
static void json_count(const char* name, uint64_t n, int has) {
  if (has)
    printf(", \"%s\": %llu", name, (unsigned long long)n);
  else
    printf(", \"%s\": null", name);
}

/* ", NAME: TEXT", or null when has is 0. */
static void json_text(const char* name, const char* s, int has) {
  printf(", \"%s\": ", name);
  if (has)
    json_string(s);
  else
    printf("null");
}

static void json_trace(const struct replay_trace* t) {
  printf("{\n  \"trace\": ");
  json_string(t->path);
  printf(",\n  \"records\": %llu,\n  \"device_memory\": %llu,", (unsigned long long)t->records,
         (unsigned long long)t->capacity);
  const struct summary_recorded* rec = t->recorded;
  if (rec) {
    printf("\n  \"recorded\": {\"allocator\": ");
    json_string(rec->kind);
    printf(", \"peak_live\": %llu, \"peak_reserved\": %llu, \"allocs\": %llu, \"failed\": %llu},",
           (unsigned long long)rec->peak_live, (unsigned long long)rec->peak_reserved, (unsigned long long)rec->allocs,
           (unsigned long long)rec->failed);
  } else {
    printf("\n  \"recorded\": null,");
  }
  printf("\n  \"configurations\": [");
}

static void json_result(const struct replay_result* r, int index) {
  printf("%s\n    {\"configuration\": ", index ? "," : "");
  json_string(r->name);
  printf(", \"peak_live\": %llu, \"peak_reserved\": %llu, \"reserved_per_live\": %.4f, \"ns_per_op\": %.1f",
         (unsigned long long)r->peak_live, (unsigned long long)r->peak_reserved, ratio(r), r->ns_per_op);
  printf(", \"allocs\": %llu, \"frees\": %llu, \"failed\": %llu, \"refused\": %llu, \"unmatched_frees\": %llu",
         (unsigned long long)r->allocs, (unsigned long long)r->frees, (unsigned long long)r->failed,
         (unsigned long long)r->refused, (unsigned long long)r->unmatched_frees);
  printf(", \"skipped\": %llu", (unsigned long long)r->skipped);
  json_count("peak_record", r->peak_record, r->allocs != 0);
  json_count("fits_at_peak", r->fits_at_peak, r->allocs != 0);
  json_count("free_at_peak", r->headroom_at_peak, r->allocs != 0);
  if (r->failed)
    printf(", \"first_failure\": {\"record\": %llu, \"size\": %llu, \"time_ns\": %llu}",
           (unsigned long long)r->first_failure_record, (unsigned long long)r->first_failure_size,
           (unsigned long long)r->first_failure_time_ns);
  else
    printf(", \"first_failure\": null");
  json_text("first_refusal", r->first_refusal, r->refused != 0);
  json_text("error", r->error, r->error[0] != 0);
  putchar('}');
}

/* ---- CSV: a header line, then one row per configuration, the trace's figures on each. ---- */

static const char kCsvHeader[] =
    "trace,records,device_memory,configuration,peak_live,peak_reserved,reserved_per_live,ns_per_op,allocs,frees,"
    "failed,refused,unmatched_frees,skipped,peak_record,fits_at_peak,free_at_peak,first_failure_record,"
    "first_failure_size,first_failure_time_ns,first_refusal,error";

/* A field, quoted (RFC 4180) when it holds a comma, a quote or a line break; after a comma unless first. */
static void csv_text(const char* s, int first) {
  if (!first) putchar(',');
  if (!s[strcspn(s, ",\"\r\n")]) {
    fputs(s, stdout);
    return;
  }
  putchar('"');
  for (const char* p = s; *p; p++) {
    if (*p == '"') putchar('"');
    putchar(*p);
  }
  putchar('"');
}

/* ",N", or "," (empty) when has is 0. */
static void csv_count(uint64_t n, int has) {
  if (has)
    printf(",%llu", (unsigned long long)n);
  else
    putchar(',');
}

static void csv_result(const struct replay_trace* t, const struct replay_result* r) {
  csv_text(t->path, 1);
  printf(",%llu,%llu", (unsigned long long)t->records, (unsigned long long)t->capacity);
  csv_text(r->name, 0);
  printf(",%llu,%llu,%.4f,%.1f,%llu,%llu,%llu,%llu,%llu,%llu", (unsigned long long)r->peak_live,
         (unsigned long long)r->peak_reserved, ratio(r), r->ns_per_op, (unsigned long long)r->allocs,
         (unsigned long long)r->frees, (unsigned long long)r->failed, (unsigned long long)r->refused,
         (unsigned long long)r->unmatched_frees, (unsigned long long)r->skipped);
  csv_count(r->peak_record, r->allocs != 0);
  csv_count(r->fits_at_peak, r->allocs != 0);
  csv_count(r->headroom_at_peak, r->allocs != 0);
  csv_count(r->first_failure_record, r->failed != 0);
  csv_count(r->first_failure_size, r->failed != 0);
  csv_count(r->first_failure_time_ns, r->failed != 0);
  csv_text(r->refused ? r->first_refusal : "", 0);
  csv_text(r->error, 0);
  putchar('\n');
}

void replay_print_trace(int format, const struct replay_trace* t) {
  if (format == REPLAY_TEXT) text_trace(t);
  if (format == REPLAY_JSON) json_trace(t);
  if (format == REPLAY_CSV) printf("%s\n", kCsvHeader);
}

void replay_print_result(int format, const struct replay_trace* t, const struct replay_result* r, int index) {
  if (format == REPLAY_TEXT) text_result(r);
  if (format == REPLAY_JSON) json_result(r, index);
  if (format == REPLAY_CSV) csv_result(t, r);
}

void replay_print_end(int format) {
  if (format == REPLAY_JSON) printf("\n  ]\n}\n");
}
