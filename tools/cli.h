/* The conventions every command of the gpumem tool follows: an option's value given as
 * "--name value" or "--name=value", -h and --help, and sizes written as the library reads them in
 * GPUMEM_GPU_MEMORY_LIMIT (lib/core/size_text.cpp): bytes, or a number with a decimal or binary
 * unit, case-insensitive. */
#ifndef GPUMEM_TOOLS_CLI_H
#define GPUMEM_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>

/* What a size may be: for refusals on one line, and for usage texts in lines of 100 columns. */
#define CLI_SIZE_UNITS                                                                               \
  "bytes (1073741824), or a number with a unit, in any case: B, KB, MB, GB, TB (powers of 1000) or " \
  "KiB, MiB, GiB, TiB (powers of 1024), as in 1.5GiB or 10GB"
#define CLI_SIZE_USAGE                                                                             \
  "SIZE: bytes (1073741824), or a number with a unit, in any case: B, KB, MB, GB, TB (powers of\n" \
  "1000) or KiB, MiB, GiB, TiB (powers of 1024), as in 1.5GiB or 10GB.\n"

/* Bytes from "1073741824", "1.5GiB", "10GB" or "512 mb": 0; -1 if it is none, -2 if it is 2^64
 * bytes or more. *out is untouched on a refusal. Unlike the library's parser, which reads the
 * number with strtod, it takes only decimal digits with an optional fraction, so that every size
 * up to 2^64 - 1 is exact and "1e3", "0x10", "inf" and signs are refused. */
int cli_parse_size(const char* text, uint64_t* out);
/* Why cli_parse_size refused a size, from what it returned. */
const char* cli_size_problem(int got);
/* The value of a size option (--device-memory) of `gpumem command`: 0, or 2 (the exit status for a
 * bad argument) after saying on stderr why it is refused. Refuses 0 bytes too. */
int cli_size_option(const char* command, const char* option, const char* text, uint64_t* out);

/* Whether argv[*i] is the option name ("--config", "-o"): 1 with *value its value, given as the
 * next argument or, for a long option, after "=" (*i is then the last argument it used); 0 if it
 * is another argument; -1 after saying on stderr that its value is missing. */
int cli_option(int argc, char** argv, int* i, const char* command, const char* name, const char** value);
/* Whether arg asks for help: -h or --help. */
int cli_is_help(const char* arg);
/* Refuses an argument no option of `gpumem command` takes: the exit status 2, after saying why. */
int cli_unexpected(const char* command, const char* arg);

#endif
