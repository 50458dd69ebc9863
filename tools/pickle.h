/* A reader of Python's pickle format for the part that plain data uses, as
 * torch.cuda.memory._dump_snapshot() writes it: dicts, lists, tuples, strings, bytes, ints, floats,
 * None and bools, with the memo's shared references, in protocols 2 to 5. A pickle that names a
 * class or a function (GLOBAL, REDUCE, BUILD, ...) is refused: reading a file builds no object of
 * its choosing and runs none of its code. Its own file so that the fuzzer links it alone. */
#ifndef GPUMEM_TOOLS_PICKLE_H
#define GPUMEM_TOOLS_PICKLE_H

#include <stddef.h>
#include <stdint.h>

enum pickle_kind {
  PICKLE_NONE,
  PICKLE_BOOL,
  PICKLE_INT,
  PICKLE_FLOAT,
  PICKLE_STRING, /* UTF-8 as the file holds it, not checked */
  PICKLE_BYTES,
  PICKLE_LIST,
  PICKLE_TUPLE,
  PICKLE_DICT
};

struct pickle_value {
  uint8_t kind;
  uint8_t wide; /* an int outside int64_t: 1 below 2^64 (exact as (uint64_t)i), 2 beyond (i its low bits) */
  union {
    int64_t i; /* ints; bools are 0 or 1 */
    double f;
    struct {
      const char* bytes; /* inside the document's buffer; not NUL-terminated */
      size_t length;
    } s;
    struct {
      struct pickle_value** items; /* a dict's keys and values alternate */
      size_t count, capacity;      /* a dict's count is twice its entries */
    } seq;
  } u;
};

struct pickle_arena;
struct pickle_doc {
  const struct pickle_value* root;
  unsigned char* data; /* the file's bytes, when pickle_load read them */
  struct pickle_arena* arena;
};

/* Reads the pickle in data (size bytes; they must outlive the document, whose strings point into
 * them) into doc: 0, or -1 with error set to a message that starts with name and, for damage,
 * says at which byte. */
int pickle_parse(const unsigned char* data, size_t size, const char* name, struct pickle_doc* doc, char* error,
                 size_t error_size);
/* Reads the file at path whole and parses it: as pickle_parse, the messages naming the path. */
int pickle_load(const char* path, struct pickle_doc* doc, char* error, size_t error_size);
/* Whether the size bytes at data start as a pickle of protocol 2 or later does. */
int pickle_sniff(const unsigned char* data, size_t size);
void pickle_free(struct pickle_doc* doc);

/* The value of a dict's string key (the last, when a key repeats); NULL if there is none or v is
 * not a dict. */
const struct pickle_value* pickle_get(const struct pickle_value* v, const char* key);
/* Whether v is an int that fits in int64_t, with its value in *out. */
int pickle_int(const struct pickle_value* v, int64_t* out);
/* The name of a kind, for messages: "a dict", "an int", ... */
const char* pickle_kind_name(int kind);

#endif
