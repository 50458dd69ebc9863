/* The conventions every command of the gpumem tool follows (cli.h). */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The library's units (lib/core/size_text.cpp), as exact integers. */
static const struct {
  const char* name;
  uint64_t bytes;
} kUnits[] = {
    {"", 1},
    {"B", 1},
    {"KB", 1000},
    {"MB", 1000000},
    {"GB", 1000000000},
    {"TB", 1000000000000ULL},
    {"KiB", 1ULL << 10},
    {"MiB", 1ULL << 20},
    {"GiB", 1ULL << 30},
    {"TiB", 1ULL << 40},
};

static uint64_t unit_bytes(const char* name) {
  while (*name == ' ') name++; /* as the library: "8 GiB" */
  for (size_t i = 0; i < sizeof kUnits / sizeof kUnits[0]; i++)
    if (!strcasecmp(name, kUnits[i].name)) return kUnits[i].bytes;
  return 0;
}

int cli_parse_size(const char* text, uint64_t* out) {
  const size_t digits = strspn(text, "0123456789");
  if (!digits) return -1;
  const char* end = text + digits;
  const char* fraction = NULL;
  if (*end == '.') {
    fraction = end;
    end += 1 + strspn(end + 1, "0123456789");
    if (end == fraction + 1) return -1;
  }
  const uint64_t unit = unit_bytes(end);
  if (!unit) return -1;
  uint64_t v = 0;
  for (const char* p = text; p < text + digits; p++) {
    const unsigned d = (unsigned)(*p - '0');
    if (v > (UINT64_MAX - d) / 10) return -2;
    v = v * 10 + d;
  }
  if (v > UINT64_MAX / unit) return -2;
  v *= unit;
  /* The fraction of a unit, rounded down to a byte, as the library does: under 2^40, exact enough
   * in a double. */
  const uint64_t part = fraction ? (uint64_t)(strtod(fraction, NULL) * (double)unit) : 0;
  if (part > UINT64_MAX - v) return -2;
  *out = v + part;
  return 0;
}

const char* cli_size_problem(int got) {
  return got == -2 ? "more than 2^64 - 1 bytes, the most a size can be" : "give " CLI_SIZE_UNITS;
}

int cli_size_option(const char* command, const char* option, const char* text, uint64_t* out) {
  const int got = cli_parse_size(text, out);
  if (got == 0 && *out != 0) return 0;
  fprintf(stderr, "gpumem %s: %s %s: %s\n", command, option, text,
          got ? cli_size_problem(got) : "give at least 1 byte");
  return 2;
}

int cli_option(int argc, char** argv, int* i, const char* command, const char* name, const char** value) {
  const char* arg = argv[*i];
  const size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0) return 0;
  if (arg[n] == '=' && name[1] == '-') {
    *value = arg + n + 1;
    return 1;
  }
  if (arg[n]) return 0;
  if (*i + 1 >= argc) {
    fprintf(stderr, "gpumem %s: %s needs a value; see gpumem %s --help\n", command, name, command);
    return -1;
  }
  *value = argv[++*i];
  return 1;
}

int cli_is_help(const char* arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

int cli_unexpected(const char* command, const char* arg) {
  if (arg[0] == '-' && arg[1])
    fprintf(stderr, "gpumem %s: unknown option \"%s\"; see gpumem %s --help\n", command, arg, command);
  else
    fprintf(stderr, "gpumem %s: unexpected argument \"%s\": one TRACE only; see gpumem %s --help\n", command, arg,
            command);
  return 2;
}
