/* The pickle reader (pickle.h): Python's unpickling machine for plain data, opcode by opcode, over
 * a buffer held whole in memory. Values live in an arena freed at once, so a memo's shared
 * references and even cycles (a list holding itself) cost nothing to free. Memory is bounded by
 * the file: no more values than it has bytes, and a container's items start at room for two.
 * One file of about 500 lines: the opcodes' tables and the machine share the parser's state, and
 * the fuzzer (tests/fuzz/fuzz_pickle.cc) links this file alone. */
#define _POSIX_C_SOURCE 200809L

#include "pickle.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "grow.h"

/* Most lists and dicts of a snapshot are small (a frame's three keys): their items start at two. */
enum { kChunkValues = 4096, kFirstItems = 2 };

struct chunk {
  struct chunk* next;
  size_t used;
  struct pickle_value values[kChunkValues];
};

struct pickle_arena {
  struct chunk* chunks;
};

struct parser {
  const unsigned char* data;
  size_t size, pos, at; /* at: where the opcode being run starts */
  const char* name;
  char* error;
  size_t error_size;
  struct pickle_arena* arena;
  size_t values; /* made so far: each opcode makes one at most, so never more than the file's bytes */
  struct pickle_value** stack;
  size_t depth, stack_capacity;
  size_t* marks; /* the depth at each MARK */
  size_t nmarks, marks_capacity;
  struct pickle_value** memo;
  size_t memo_size, memo_entries; /* slots, and those set (MEMOIZE's next index, as Python's len(memo)) */
};

__attribute__((format(printf, 2, 3))) static int fail(struct parser* p, const char* fmt, ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  snprintf(p->error, p->error_size, "%s, byte %zu: %s", p->name, p->at, why);
  return -1;
}

static int out_of_memory(struct parser* p) { return fail(p, "out of host memory for the pickle's values"); }

/* A new value: NULL, after saying why, when there is no room for it. */
static struct pickle_value* new_value(struct parser* p, int kind) {
  if (p->values == p->size) { /* a guard on what each opcode costs: none makes more than one */
    fail(p, "more values than the file has bytes");
    return NULL;
  }
  p->values++;
  struct chunk* c = p->arena->chunks;
  if (!c || c->used == kChunkValues) {
    c = calloc(1, sizeof *c);
    if (!c) return out_of_memory(p), NULL;
    c->next = p->arena->chunks;
    p->arena->chunks = c;
  }
  struct pickle_value* v = &c->values[c->used++];
  memset(v, 0, sizeof *v);
  v->kind = (uint8_t)kind;
  return v;
}

static int push(struct parser* p, struct pickle_value* v) {
  if (!v) return -1;
  if (grow_array((void**)&p->stack, &p->stack_capacity, p->depth, sizeof *p->stack, 64) != 0) return out_of_memory(p);
  p->stack[p->depth++] = v;
  return 0;
}

static int push_new(struct parser* p, int kind, struct pickle_value** out) {
  struct pickle_value* v = new_value(p, kind);
  if (push(p, v) != 0) return -1;
  if (out) *out = v;
  return 0;
}

/* The bottom of the values above the last MARK: what an opcode may pop. */
static size_t floor_of(const struct parser* p) { return p->nmarks ? p->marks[p->nmarks - 1] : 0; }

static struct pickle_value* pop(struct parser* p, const char* op) {
  if (p->depth == floor_of(p)) {
    fail(p, "%s with no value on the stack%s", op, p->nmarks ? " above the last MARK" : "");
    return NULL;
  }
  return p->stack[--p->depth];
}

static int pop_mark(struct parser* p, const char* op, size_t* mark) {
  if (!p->nmarks) return fail(p, "%s with no MARK before it", op);
  *mark = p->marks[--p->nmarks];
  return 0;
}

static int append(struct parser* p, struct pickle_value* seq, struct pickle_value* item) {
  if (grow_array((void**)&seq->u.seq.items, &seq->u.seq.capacity, seq->u.seq.count, sizeof item, kFirstItems) != 0)
    return out_of_memory(p);
  seq->u.seq.items[seq->u.seq.count++] = item;
  return 0;
}

/* The next n bytes of the file: NULL, after saying so, if it ends first. */
static const unsigned char* take(struct parser* p, size_t n, const char* what) {
  if (n > p->size - p->pos) {
    fail(p, "the file ends inside %s (%zu bytes wanted, %zu left)", what, n, p->size - p->pos);
    return NULL;
  }
  const unsigned char* at = p->data + p->pos;
  p->pos += n;
  return at;
}

static int little(struct parser* p, size_t n, const char* what, uint64_t* out) {
  const unsigned char* b = take(p, n, what);
  if (!b) return -1;
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = v << 8 | b[i];
  *out = v;
  return 0;
}

/* LONG1 and LONG4: n bytes of little-endian two's complement. */
static int load_long(struct parser* p, size_t length_bytes) {
  uint64_t n = 0;
  if (little(p, length_bytes, "a LONG's length", &n) != 0) return -1;
  if (length_bytes == 4 && n >> 31) return fail(p, "LONG4 of a negative length");
  const unsigned char* b = take(p, (size_t)n, "a LONG");
  if (!b) return -1;
  struct pickle_value* v = NULL;
  if (push_new(p, PICKLE_INT, &v) != 0) return -1;
  if (!n) return 0;
  const int negative = b[n - 1] >> 7;
  uint64_t low = negative ? UINT64_MAX : 0;
  for (size_t i = n < 8 ? n : 8; i-- > 0;) low = low << 8 | b[i];
  int high_is_sign = 1, high_is_zero = 1;
  for (size_t i = 8; i < n; i++) {
    high_is_sign &= b[i] == (negative ? 0xff : 0x00);
    high_is_zero &= b[i] == 0;
  }
  v->u.i = (int64_t)low;
  if (high_is_sign && (int)(low >> 63) == negative) return 0;
  v->wide = !negative && high_is_zero ? 1 : 2;
  return 0;
}

static int load_string(struct parser* p, int kind, size_t length_bytes, const char* what) {
  uint64_t n = 0;
  if (little(p, length_bytes, what, &n) != 0) return -1;
  if (n > p->size) return fail(p, "%s of %llu bytes, longer than the file", what, (unsigned long long)n);
  const unsigned char* b = take(p, (size_t)n, what);
  struct pickle_value* v = NULL;
  if (!b || push_new(p, kind, &v) != 0) return -1;
  v->u.s.bytes = (const char*)b;
  v->u.s.length = (size_t)n;
  return 0;
}

static int load_int(struct parser* p, size_t n, int is_signed) {
  uint64_t raw = 0;
  struct pickle_value* v = NULL;
  if (little(p, n, "an int", &raw) != 0 || push_new(p, PICKLE_INT, &v) != 0) return -1;
  v->u.i = is_signed ? (int64_t)(int32_t)(uint32_t)raw : (int64_t)raw;
  return 0;
}

static int load_float(struct parser* p) {
  const unsigned char* b = take(p, 8, "a BINFLOAT");
  struct pickle_value* v = NULL;
  if (!b || push_new(p, PICKLE_FLOAT, &v) != 0) return -1;
  uint64_t bits = 0;
  for (int i = 0; i < 8; i++) bits = bits << 8 | b[i]; /* big-endian, unlike everything else */
  memcpy(&v->u.f, &bits, sizeof bits);
  return 0;
}

/* TUPLE1..3 (n items), TUPLE and LIST (from the last MARK, n then SIZE_MAX). */
static int load_sequence(struct parser* p, int kind, size_t n, const char* op) {
  size_t from = 0;
  if (n == SIZE_MAX) {
    if (pop_mark(p, op, &from) != 0) return -1;
  } else {
    if (p->depth - floor_of(p) < n) return fail(p, "%s with fewer than %zu values on the stack", op, n);
    from = p->depth - n;
  }
  struct pickle_value* seq = new_value(p, kind);
  if (!seq) return -1;
  for (size_t i = from; i < p->depth; i++)
    if (append(p, seq, p->stack[i]) != 0) return -1;
  p->depth = from;
  return push(p, seq);
}

/* The list or dict that an opcode adds to: the value at index below the values it adds. */
static struct pickle_value* target(struct parser* p, size_t index, int kind, const char* op) {
  if (index == floor_of(p)) {
    fail(p, "%s with nothing to add to", op);
    return NULL;
  }
  struct pickle_value* t = p->stack[index - 1];
  if (t->kind != kind) {
    fail(p, "%s on %s, not %s", op, pickle_kind_name(t->kind), pickle_kind_name(kind));
    return NULL;
  }
  return t;
}

/* APPEND and SETITEM: one item or pair from the top of the stack. */
static int add_items(struct parser* p, int kind, size_t n, const char* op) {
  if (p->depth - floor_of(p) < n + 1) return fail(p, "%s with fewer than %zu values on the stack", op, n + 1);
  p->depth -= n;
  struct pickle_value* t = target(p, p->depth, kind, op);
  for (size_t i = 0; t && i < n; i++)
    if (append(p, t, p->stack[p->depth + i]) != 0) return -1;
  return t ? 0 : -1;
}

/* APPENDS, SETITEMS and DICT: the items since the last MARK. */
static int add_marked(struct parser* p, int kind, const char* op, int new_dict) {
  size_t from = 0;
  if (pop_mark(p, op, &from) != 0) return -1;
  if (kind == PICKLE_DICT && (p->depth - from) % 2)
    return fail(p, "%s of %zu values, not of keys and values", op, p->depth - from);
  struct pickle_value* t = NULL;
  if (new_dict) {
    t = new_value(p, kind);
    if (!t) return -1;
  } else if (!(t = target(p, from, kind, op))) {
    return -1;
  }
  for (size_t i = from; i < p->depth; i++)
    if (append(p, t, p->stack[i]) != 0) return -1;
  p->depth = from;
  return new_dict ? push(p, t) : 0;
}

static int memo_put(struct parser* p, uint64_t index) {
  if (p->depth == floor_of(p)) return fail(p, "a memo put with no value on the stack");
  /* Python numbers the memo from 0 as it goes: an index past the file's length is no pickler's. */
  if (index > p->size) return fail(p, "a memo index of %llu, more than the file's bytes", (unsigned long long)index);
  while (p->memo_size <= index) {
    const size_t old = p->memo_size;
    if (grow_array((void**)&p->memo, &p->memo_size, old, sizeof *p->memo, 64) != 0) return out_of_memory(p);
    for (size_t i = old; i < p->memo_size; i++) p->memo[i] = NULL;
  }
  p->memo_entries += p->memo[index] == NULL;
  p->memo[index] = p->stack[p->depth - 1];
  return 0;
}

static int memo_get(struct parser* p, size_t index_bytes) {
  uint64_t index = 0;
  if (little(p, index_bytes, "a memo index", &index) != 0) return -1;
  if (index >= p->memo_size || !p->memo[index])
    return fail(p, "a memo get of index %llu, which nothing was put in", (unsigned long long)index);
  return push(p, p->memo[index]);
}

static int memo_put_indexed(struct parser* p, size_t index_bytes) {
  uint64_t index = 0;
  return little(p, index_bytes, "a memo index", &index) != 0 ? -1 : memo_put(p, index);
}

static int load_proto(struct parser* p) {
  const unsigned char* b = take(p, 1, "PROTO");
  if (!b) return -1;
  if (*b < 2 || *b > 5) return fail(p, "pickle protocol %u; gpumem reads protocols 2 to 5", *b);
  return 0;
}

static int pop_value(struct parser* p) {
  if (p->depth == floor_of(p) && p->nmarks) return p->nmarks--, 0; /* as Python: POP takes a MARK */
  return pop(p, "POP") ? 0 : -1;
}

static int dup_top(struct parser* p) {
  if (p->depth == floor_of(p)) return fail(p, "DUP with no value on the stack");
  return push(p, p->stack[p->depth - 1]);
}

static int load_bool(struct parser* p, int value) {
  struct pickle_value* v = NULL;
  if (push_new(p, PICKLE_BOOL, &v) != 0) return -1;
  v->u.i = value;
  return 0;
}

static int pop_to_mark(struct parser* p) {
  size_t from = 0;
  if (pop_mark(p, "POP_MARK", &from) != 0) return -1;
  p->depth = from;
  return 0;
}

static int mark(struct parser* p) {
  if (grow_array((void**)&p->marks, &p->marks_capacity, p->nmarks, sizeof *p->marks, 16) != 0) return out_of_memory(p);
  p->marks[p->nmarks++] = p->depth;
  return 0;
}

/* The opcodes, one a line as a table reads, which clang-format would spread over four. */
/* clang-format off */

/* Opcodes of objects built from a class or function the file names: refused, never run. */
static const char* object_opcode(unsigned op) {
  switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 0x82: case 0x83: case 0x84: return "EXT";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return NULL;
  }
}

/* The opcodes of values: 1 if op is one (and it ran: 0 or -1 in *result). */
static int value_opcode(struct parser* p, unsigned op, int* result) {
  switch (op) {
    case 'N': *result = push_new(p, PICKLE_NONE, NULL); return 1;
    case 0x88: case 0x89: *result = load_bool(p, op == 0x88); return 1;
    case 'K': *result = load_int(p, 1, 0); return 1;
    case 'M': *result = load_int(p, 2, 0); return 1;
    case 'J': *result = load_int(p, 4, 1); return 1;
    case 0x8a: *result = load_long(p, 1); return 1;
    case 0x8b: *result = load_long(p, 4); return 1;
    case 'G': *result = load_float(p); return 1;
    case 0x8c: *result = load_string(p, PICKLE_STRING, 1, "a SHORT_BINUNICODE"); return 1;
    case 'X': *result = load_string(p, PICKLE_STRING, 4, "a BINUNICODE"); return 1;
    case 0x8d: *result = load_string(p, PICKLE_STRING, 8, "a BINUNICODE8"); return 1;
    case 'U': *result = load_string(p, PICKLE_STRING, 1, "a SHORT_BINSTRING"); return 1;
    case 'T': *result = load_string(p, PICKLE_STRING, 4, "a BINSTRING"); return 1;
    case 'C': *result = load_string(p, PICKLE_BYTES, 1, "a SHORT_BINBYTES"); return 1;
    case 'B': *result = load_string(p, PICKLE_BYTES, 4, "a BINBYTES"); return 1;
    case 0x8e: *result = load_string(p, PICKLE_BYTES, 8, "a BINBYTES8"); return 1;
    case 0x96: *result = load_string(p, PICKLE_BYTES, 8, "a BYTEARRAY8"); return 1;
    default: return 0;
  }
}

/* The opcodes of containers, the stack and the memo: 1 if op is one (and it ran). */
static int structure_opcode(struct parser* p, unsigned op, int* result) {
  switch (op) {
    case '}': *result = push_new(p, PICKLE_DICT, NULL); return 1;
    case ']': *result = push_new(p, PICKLE_LIST, NULL); return 1;
    case ')': *result = push_new(p, PICKLE_TUPLE, NULL); return 1;
    case '(': *result = mark(p); return 1;
    case 0x85: *result = load_sequence(p, PICKLE_TUPLE, 1, "TUPLE1"); return 1;
    case 0x86: *result = load_sequence(p, PICKLE_TUPLE, 2, "TUPLE2"); return 1;
    case 0x87: *result = load_sequence(p, PICKLE_TUPLE, 3, "TUPLE3"); return 1;
    case 't': *result = load_sequence(p, PICKLE_TUPLE, SIZE_MAX, "TUPLE"); return 1;
    case 'l': *result = load_sequence(p, PICKLE_LIST, SIZE_MAX, "LIST"); return 1;
    case 'd': *result = add_marked(p, PICKLE_DICT, "DICT", 1); return 1;
    case 'a': *result = add_items(p, PICKLE_LIST, 1, "APPEND"); return 1;
    case 'e': *result = add_marked(p, PICKLE_LIST, "APPENDS", 0); return 1;
    case 's': *result = add_items(p, PICKLE_DICT, 2, "SETITEM"); return 1;
    case 'u': *result = add_marked(p, PICKLE_DICT, "SETITEMS", 0); return 1;
    case '0': *result = pop_value(p); return 1;
    case '1': *result = pop_to_mark(p); return 1;
    case '2': *result = dup_top(p); return 1;
    case 0x94: *result = memo_put(p, p->memo_entries); return 1;
    case 'q': *result = memo_put_indexed(p, 1); return 1;
    case 'r': *result = memo_put_indexed(p, 4); return 1;
    case 'h': *result = memo_get(p, 1); return 1;
    case 'j': *result = memo_get(p, 4); return 1;
    case 0x80: *result = load_proto(p); return 1;
    case 0x95: *result = take(p, 8, "a FRAME's length") ? 0 : -1; return 1; /* frames only group reads */
    default: return 0;
  }
}

/* clang-format on */

static int run(struct parser* p, struct pickle_doc* doc) {
  for (;;) {
    p->at = p->pos;
    if (p->pos == p->size) return fail(p, "the file ends before the pickle's STOP");
    const unsigned op = p->data[p->pos++];
    int result = 0;
    if (op == '.') break;
    if (value_opcode(p, op, &result) || structure_opcode(p, op, &result)) {
      if (result != 0) return -1;
      continue;
    }
    const char* object = object_opcode(op);
    if (object) return fail(p, "opcode %s (0x%02x): a pickled object, which plain data never holds", object, op);
    return fail(p, "opcode 0x%02x, which no pickle of plain data in protocols 2 to 5 holds", op);
  }
  if (p->nmarks) return fail(p, "STOP with a MARK still open");
  if (p->depth != 1) return fail(p, "STOP with %zu values on the stack, not 1", p->depth);
  doc->root = p->stack[0];
  return 0;
}

static void arena_free(struct pickle_arena* a) {
  if (!a) return;
  for (struct chunk* c = a->chunks; c;) {
    for (size_t i = 0; i < c->used; i++)
      if (c->values[i].kind >= PICKLE_LIST) free(c->values[i].u.seq.items);
    struct chunk* next = c->next;
    free(c);
    c = next;
  }
  free(a);
}

int pickle_sniff(const unsigned char* data, size_t size) { return size >= 2 && data[0] == 0x80 && data[1] >= 2; }

int pickle_parse(const unsigned char* data, size_t size, const char* name, struct pickle_doc* doc, char* error,
                 size_t error_size) {
  memset(doc, 0, sizeof *doc);
  struct parser p;
  memset(&p, 0, sizeof p);
  p.data = data;
  p.size = size;
  p.name = name;
  p.error = error;
  p.error_size = error_size;
  if (!pickle_sniff(data, size)) {
    snprintf(error, error_size,
             "%s is not a pickle of protocol 2 or later (it does not start with 0x80 and a "
             "protocol number)",
             name);
    return -1;
  }
  p.arena = calloc(1, sizeof *p.arena);
  const int got = p.arena ? run(&p, doc) : out_of_memory(&p);
  free(p.stack);
  free(p.marks);
  free(p.memo);
  if (got != 0) {
    arena_free(p.arena);
    doc->root = NULL;
    return -1;
  }
  doc->arena = p.arena;
  return 0;
}

int pickle_load(const char* path, struct pickle_doc* doc, char* error, size_t error_size) {
  memset(doc, 0, sizeof *doc);
  FILE* f = fopen(path, "rb");
  struct stat st;
  if (!f || fstat(fileno(f), &st) != 0) {
    snprintf(error, error_size, "cannot open %s: %s", path, strerror(errno));
    if (f) fclose(f);
    return -1;
  }
  const size_t size = (size_t)st.st_size;
  unsigned char* data = malloc(size ? size : 1);
  const size_t got = data ? fread(data, 1, size, f) : 0;
  const int failed = !data || got != size || ferror(f);
  fclose(f);
  if (failed) {
    snprintf(error, error_size, data ? "reading %s failed at byte %zu" : "out of host memory to read %s", path, got);
    free(data);
    return -1;
  }
  if (pickle_parse(data, size, path, doc, error, error_size) != 0) {
    free(data);
    return -1;
  }
  doc->data = data;
  return 0;
}

void pickle_free(struct pickle_doc* doc) {
  arena_free(doc->arena);
  free(doc->data);
  memset(doc, 0, sizeof *doc);
}

const struct pickle_value* pickle_get(const struct pickle_value* v, const char* key) {
  if (!v || v->kind != PICKLE_DICT) return NULL;
  const size_t n = strlen(key);
  for (size_t i = v->u.seq.count; i >= 2; i -= 2) {
    const struct pickle_value* k = v->u.seq.items[i - 2];
    if (k->kind == PICKLE_STRING && k->u.s.length == n && !memcmp(k->u.s.bytes, key, n)) return v->u.seq.items[i - 1];
  }
  return NULL;
}

int pickle_int(const struct pickle_value* v, int64_t* out) {
  if (!v || (v->kind != PICKLE_INT && v->kind != PICKLE_BOOL) || v->wide) return 0;
  *out = v->u.i;
  return 1;
}

const char* pickle_kind_name(int kind) {
  static const char* const names[] = {"None",  "a bool", "an int",  "a float", "a string",
                                      "bytes", "a list", "a tuple", "a dict"};
  return kind >= 0 && kind <= PICKLE_DICT ? names[kind] : "an unknown value";
}
