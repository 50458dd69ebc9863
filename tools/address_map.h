/* A map from a trace's addresses to values (address_map.c), for gpumem replay and summary. */
#ifndef GPUMEM_TOOLS_ADDRESS_MAP_H
#define GPUMEM_TOOLS_ADDRESS_MAP_H

#include <stddef.h>
#include <stdint.h>

/* Zero-initialized is empty. Keys and values are not 0. */
struct address_map {
  uint64_t* keys; /* 0: empty; a deleted slot keeps its key with a value of 0 */
  uint64_t* values;
  size_t mask, used;
};

/* Sets key's value: 0, or -1 when the map cannot grow (it is unchanged then). */
int address_map_put(struct address_map* m, uint64_t key, uint64_t value);
/* The value for key, removed from the map; 0 if there is none. */
uint64_t address_map_take(struct address_map* m, uint64_t key);
void address_map_free(struct address_map* m);

#endif
