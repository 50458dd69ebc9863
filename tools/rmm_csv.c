/* RMM's CSV log, read strictly: a field that is not what RMM writes is refused with its line, never
 * guessed at (strtoull would take "-5" as 2^64 - 5 bytes). */
#define _POSIX_C_SOURCE 200809L

#include "rmm_csv.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { kRowBytes = 512 };

/* Decimal digits only, at most 2^64 - 1: 0, -1 if it is not such a number, -2 if it is larger. */
static int parse_decimal(const char* s, uint64_t* out) {
  if (!*s) return -1;
  uint64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    const unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return -2;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

/* Hexadecimal digits, with or without 0x, as RMM prints pointers and streams; as parse_decimal. */
static int parse_hex(const char* s, uint64_t* out) {
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s += 2;
  if (!*s) return -1;
  uint64_t v = 0;
  for (; *s; s++) {
    unsigned d;
    if (*s >= '0' && *s <= '9')
      d = (unsigned)(*s - '0');
    else if (*s >= 'a' && *s <= 'f')
      d = (unsigned)(*s - 'a' + 10);
    else if (*s >= 'A' && *s <= 'F')
      d = (unsigned)(*s - 'A' + 10);
    else
      return -1;
    if (v >> 60) return -2;
    v = v << 4 | d;
  }
  *out = v;
  return 0;
}

/* Seconds from RMM's time column: seconds since 1970 ("1634567890.234567"), or older logs'
 * "HH:MM:SS:microseconds". -1 if it is neither. */
static int parse_time(const char* s, double* out) {
  if (strchr(s, ':')) {
    double seconds = 0;
    const double scale[4] = {3600, 60, 1, 1e-6};
    for (int i = 0; i < 4; i++) {
      const size_t digits = strspn(s, "0123456789");
      if (!digits || digits > 12 || s[digits] != (i < 3 ? ':' : '\0')) return -1;
      seconds += (double)strtoull(s, NULL, 10) * scale[i]; /* 12 digits at most: no overflow */
      s += digits + 1;
    }
    *out = seconds;
    return 0;
  }
  const size_t digits = strspn(s, "0123456789");
  if (!digits) return -1;
  if (s[digits] == '.') {
    const size_t fraction = strspn(s + digits + 1, "0123456789");
    if (!fraction || s[digits + 1 + fraction]) return -1;
  } else if (s[digits]) {
    return -1;
  }
  *out = strtod(s, NULL);
  return isfinite(*out) ? 0 : -1; /* hundreds of digits would be infinite */
}

/* One line of file into row (size bytes), without its end: 0 with its length in *length, 1 at the
 * end of the file, -1 if it is longer than row holds, -2 if reading failed (errno says why). */
static int read_line(FILE* file, char* row, size_t size, size_t* length) {
  size_t n = 0;
  int c;
  while ((c = getc(file)) != EOF && c != '\n') {
    if (n + 1 == size) return -1;
    row[n++] = (char)c;
  }
  if (ferror(file)) return -2;
  if (c == EOF && n == 0) return 1;
  row[n] = '\0';
  *length = n;
  return 0;
}

int rmm_csv_open(struct rmm_csv* csv, FILE* file, const char* path) {
  memset(csv, 0, sizeof *csv);
  csv->file = file;
  csv->path = path;
  csv->first_time = -1;
  char head[64];
  size_t n = 0;
  if (read_line(file, head, sizeof head, &n) != 0 || strlen(head) != n) return 0;
  if (n && head[n - 1] == '\r') head[n - 1] = '\0';
  if (strcmp(head, RMM_CSV_HEADER) != 0) return 0;
  csv->line = 1;
  return 1;
}

/* The next row, without its line's end, into row: 0, 1 at the end of the file, -1 with error set. */
static int next_row(struct rmm_csv* csv, char* row, char* error, size_t error_size) {
  size_t n = 0;
  const int got = read_line(csv->file, row, kRowBytes, &n);
  if (got == 1) return 1;
  const unsigned long long line = (unsigned long long)++csv->line;
  if (got == -1)
    snprintf(error, error_size, "%s, line %llu: longer than %d bytes, which no row of RMM's is", csv->path, line,
             kRowBytes - 1);
  else if (got == -2)
    snprintf(error, error_size, "%s, line %llu: reading failed: %s", csv->path, line, strerror(errno));
  else if (strlen(row) != n)
    snprintf(error, error_size, "%s, line %llu: a NUL byte, which no row of RMM's holds", csv->path, line);
  if (got != 0 || strlen(row) != n) return -1;
  if (n && row[n - 1] == '\r') row[n - 1] = '\0';
  return 0;
}

/* Refuses a row for one of its fields, quoting (the start of) the field. */
static int refuse(const struct rmm_csv* csv, char* error, size_t error_size, const char* field, const char* text,
                  const char* why) {
  snprintf(error, error_size, "%s, line %llu: %s \"%.64s\" %s", csv->path, (unsigned long long)csv->line, field, text,
           why);
  return -1;
}

static int number(const struct rmm_csv* csv, int hex, const char* field, const char* text, uint64_t* out, char* error,
                  size_t error_size) {
  const int got = hex ? parse_hex(text, out) : parse_decimal(text, out);
  if (got == -2) return refuse(csv, error, error_size, field, text, "is more than 2^64 - 1");
  if (got != 0)
    return refuse(csv, error, error_size, field, text,
                  hex ? "is not a hexadecimal number" : "is not a number of decimal digits");
  return 0;
}

int rmm_csv_next(struct rmm_csv* csv, gpumem_trace_record_t* rec, char* error, size_t error_size) {
  char row[kRowBytes];
  const int got = next_row(csv, row, error, error_size);
  if (got != 0) return got > 0 ? 0 : -1;
  char* field[6];
  int n = 0;
  for (char* p = row; p && n <= 6; n++) {
    char* comma = strchr(p, ',');
    if (comma) *comma = '\0';
    if (n < 6) field[n] = p;
    p = comma ? comma + 1 : NULL;
  }
  if (n != 6) {
    snprintf(error, error_size, "%s, line %llu: not a row of " RMM_CSV_HEADER " (%s%d field%s)", csv->path,
             (unsigned long long)csv->line, n > 6 ? "more than " : "", n > 6 ? 6 : n, n == 1 ? "" : "s");
    return -1;
  }
  uint64_t thread, pointer, size, stream;
  double t;
  if (number(csv, 0, "thread", field[0], &thread, error, error_size) ||
      number(csv, 1, "pointer", field[3], &pointer, error, error_size) ||
      number(csv, 0, "size", field[4], &size, error, error_size) ||
      number(csv, 1, "stream", field[5], &stream, error, error_size))
    return -1;
  if (parse_time(field[1], &t) != 0)
    return refuse(csv, error, error_size, "time", field[1], "is neither seconds since 1970 nor HH:MM:SS:microseconds");
  if (csv->first_time < 0) csv->first_time = t;
  /* Older logs' clock wraps at midnight; a time before the first row's counts as the start. */
  const double ns = t > csv->first_time ? (t - csv->first_time) * 1e9 : 0;
  if (ns >= 18446744073709551615.0)
    return refuse(csv, error, error_size, "time", field[1], "is more than 584 years after the first row's");
  const size_t struct_size = rec->struct_size;
  memset(rec, 0, sizeof *rec);
  rec->struct_size = struct_size;
  rec->thread = (uint32_t)thread;
  rec->time_ns = (uint64_t)ns;
  rec->stream = stream;
  rec->address = pointer;
  rec->size = size;
  const char* action = field[2];
  if (!strcmp(action, "allocate")) {
    rec->event = GPUMEM_TRACE_ALLOC;
    rec->mem_size = size;
  } else if (!strcmp(action, "free") || !strcmp(action, "deallocate")) {
    rec->event = GPUMEM_TRACE_FREE;
  } else if (!strcmp(action, "allocate failure")) {
    rec->event = GPUMEM_TRACE_ALLOC_FAILED;
    rec->status = GPUMEM_ERROR_OUT_OF_MEMORY;
  } else {
    return refuse(csv, error, error_size, "action", action,
                  "is none of allocate, free, deallocate or allocate failure");
  }
  return 1;
}
