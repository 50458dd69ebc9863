/* Addresses to values, for the tool's passes over a trace: open addressing, grown at half full. */
#include "address_map.h"

#include <stdlib.h>
#include <string.h>

static size_t slot_of(uint64_t key, size_t mask) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return (size_t)key & mask;
}

static int grow(struct address_map* m) {
  if (m->keys && m->mask + 1 > SIZE_MAX / 2 / sizeof *m->keys) return -1; /* full: it cannot double */
  const size_t capacity = m->keys ? 2 * (m->mask + 1) : 1024;
  uint64_t* keys = calloc(capacity, sizeof *keys);
  uint64_t* values = calloc(capacity, sizeof *values);
  if (!keys || !values) {
    free(keys);
    free(values);
    return -1;
  }
  size_t used = 0;
  for (size_t i = 0; m->keys && i <= m->mask; i++) {
    if (!m->keys[i] || !m->values[i]) continue;
    size_t j = slot_of(m->keys[i], capacity - 1);
    while (keys[j]) j = (j + 1) & (capacity - 1);
    keys[j] = m->keys[i];
    values[j] = m->values[i];
    used++;
  }
  free(m->keys);
  free(m->values);
  m->keys = keys;
  m->values = values;
  m->mask = capacity - 1;
  m->used = used;
  return 0;
}

int address_map_put(struct address_map* m, uint64_t key, uint64_t value) {
  if ((!m->keys || 2 * (m->used + 1) > m->mask + 1) && grow(m) != 0) return -1;
  size_t i = slot_of(key, m->mask);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & m->mask;
  if (!m->keys[i]) m->used++;
  m->keys[i] = key;
  m->values[i] = value;
  return 0;
}

uint64_t address_map_take(struct address_map* m, uint64_t key) {
  if (!m->keys) return 0;
  for (size_t i = slot_of(key, m->mask); m->keys[i]; i = (i + 1) & m->mask) {
    if (m->keys[i] != key) continue;
    const uint64_t v = m->values[i];
    m->values[i] = 0;
    return v;
  }
  return 0;
}

void address_map_free(struct address_map* m) {
  free(m->keys);
  free(m->values);
  memset(m, 0, sizeof *m);
}
