/* A C99 program built against an installed gpumem: the headers it compiled with and the library it
 * loaded must be the same version, and a call through the library must answer. */
#include <stdio.h>
#include <string.h>

#include <gpumem/gpumem.h>

int main(void) {
  const char* loaded = gpumem_version_string();
  printf("gpumem %s (headers %s)\n", loaded, GPUMEM_VERSION_STRING);
  if (strcmp(loaded, GPUMEM_VERSION_STRING) != 0) {
    fprintf(stderr, "consumer: loaded gpumem %s, but the headers are %s\n", loaded, GPUMEM_VERSION_STRING);
    return 1;
  }
  if (gpumem_version_number() != GPUMEM_VERSION_NUMBER) {
    fprintf(stderr, "consumer: gpumem_version_number() is %u, GPUMEM_VERSION_NUMBER is %u\n",
            (unsigned)gpumem_version_number(), (unsigned)GPUMEM_VERSION_NUMBER);
    return 1;
  }
  const char* name = gpumem_status_name(GPUMEM_ERROR_OUT_OF_MEMORY);
  printf("status %d is %s\n", (int)GPUMEM_ERROR_OUT_OF_MEMORY, name);
  if (strcmp(name, "GPUMEM_ERROR_OUT_OF_MEMORY") != 0) {
    fprintf(stderr, "consumer: gpumem_status_name(GPUMEM_ERROR_OUT_OF_MEMORY) is \"%s\"\n", name);
    return 1;
  }
  puts("consumer: ok");
  return 0;
}
