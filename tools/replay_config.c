/* The configurations gpumem replay and viz replay through, read from their names. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "replay.h"
#include "simulated_device.h"

#define CONFIG_NAMES \
  "give device, pool, or pool: with options vm, unit=SIZE and limit=SIZE, comma-separated (pool:vm,limit=8GiB)"

static int size_value(const char* option, const char* text, uint64_t* out, char* error, size_t error_size) {
  const int got = cli_parse_size(text, out);
  if (got == 0) return 0;
  snprintf(error, error_size, "%s%s: %s", option, text, cli_size_problem(got));
  return -1;
}

/* One option after "pool:". */
static int parse_option(const char* o, struct replay_config* c, char* error, size_t error_size) {
  if (!strcmp(o, "vm")) {
    if (!c->unit) c->unit = SIM_DEVICE_MAP_UNIT;
    return 0;
  }
  if (!strncmp(o, "limit=", 6)) return size_value("limit=", o + 6, &c->limit, error, error_size);
  if (strncmp(o, "unit=", 5) != 0) {
    snprintf(error, error_size, "unknown option \"%s\" of pool; %s", o, CONFIG_NAMES);
    return -1;
  }
  if (size_value("unit=", o + 5, &c->unit, error, error_size) != 0) return -1;
  /* What the library takes for a map unit (gpumem_allocator_create_functions), told here in the
   * option's own terms. */
  if (c->unit < 512 || (c->unit & (c->unit - 1))) {
    snprintf(error, error_size, "%s is %llu bytes, not a power of two of at least 512 bytes (as in unit=2MiB)", o,
             (unsigned long long)c->unit);
    return -1;
  }
  return 0;
}

int replay_config_parse(const char* name, struct replay_config* c, char* error, size_t error_size) {
  memset(c, 0, sizeof *c);
  if (!strcmp(name, "device")) return 0;
  if (strncmp(name, "pool", 4) != 0 || (name[4] && name[4] != ':')) {
    snprintf(error, error_size, "unknown configuration; %s", CONFIG_NAMES);
    return -1;
  }
  c->pool = 1;
  if (!name[4]) return 0;
  char options[128];
  if (snprintf(options, sizeof options, "%s", name + 5) >= (int)sizeof options) {
    snprintf(error, error_size, "its options are longer than %zu characters", sizeof options - 1);
    return -1;
  }
  char* saved = NULL;
  for (char* o = strtok_r(options, ",", &saved); o; o = strtok_r(NULL, ",", &saved))
    if (parse_option(o, c, error, error_size) != 0) return -1;
  return 0;
}
