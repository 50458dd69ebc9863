/* Arrays that grow as the tool's readers fill them (the pickle reader, the PyTorch snapshot, the
 * page's data): one helper, so that each checks that its size in bytes still fits in a size_t.
 * Inline in a header, so that a fuzzer that links one reader's file needs no other. */
#ifndef GPUMEM_TOOLS_GROW_H
#define GPUMEM_TOOLS_GROW_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Room for one more item in *items, an array of n items of size bytes with room for *capacity: it
 * doubles, or starts at first items. 0; or -1, the array as it was, when out of memory or when the
 * bytes it would take are more than a size_t counts. */
static inline int grow_array(void** items, size_t* capacity, size_t n, size_t size, size_t first) {
  if (n < *capacity) return 0;
  const size_t more = *capacity ? 2 * *capacity : first;
  if (more <= *capacity || more > SIZE_MAX / size) return -1;
  void* grown = realloc(*items, more * size);
  if (!grown) return -1;
  *items = grown;
  *capacity = more;
  return 0;
}

#endif
