/* The pickle reader (tools/pickle.c) and the PyTorch snapshot read through it
 * (tools/torch_snapshot.c): plain values, the memo's shared references, and refusals that name the
 * file and the byte; a snapshot's history as records with their call stacks, and those records
 * written as a trace that gpumem's own reader reads back. The pickles are written opcode by opcode
 * here; tests/tools/CMakeLists.txt has Python's own, of every protocol, read by gpumem viz. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "pickle.h"
#include "test_util.h"
#include "torch_snapshot.h"

/* A pickle being written. */
struct out {
  unsigned char b[16384];
  size_t n;
};

static void op(struct out* o, int byte) { o->b[o->n++] = (unsigned char)byte; }
static void raw(struct out* o, const void* p, size_t n) {
  memcpy(o->b + o->n, p, n);
  o->n += n;
}
static void str_n(struct out* o, const char* s, size_t n) {
  op(o, 0x8c); /* SHORT_BINUNICODE */
  op(o, (int)n);
  raw(o, s, n);
}
static void str(struct out* o, const char* s) { str_n(o, s, strlen(s)); }
static void num(struct out* o, int64_t v) {
  if (v >= 0 && v < 256) {
    op(o, 'K');
    op(o, (int)v);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    op(o, 'J');
    for (int i = 0; i < 4; i++) op(o, (int)((uint64_t)v >> (8 * i) & 0xff));
  } else {
    op(o, 0x8a); /* LONG1 of 8 bytes */
    op(o, 8);
    for (int i = 0; i < 8; i++) op(o, (int)((uint64_t)v >> (8 * i) & 0xff));
  }
}
/* key: value, for SETITEMS. */
static void key_num(struct out* o, const char* key, int64_t v) {
  str(o, key);
  num(o, v);
}
static void key_str(struct out* o, const char* key, const char* v) {
  str(o, key);
  str(o, v);
}

static struct pickle_doc doc;
static char error[512];

static int teardown(void** state) {
  (void)state;
  pickle_free(&doc);
  return 0;
}

static const struct pickle_value* parse(const struct out* o) {
  error[0] = '\0';
  pickle_free(&doc);
  if (pickle_parse(o->b, o->n, "run.pickle", &doc, error, sizeof error) != 0) fail_msg("refused: %s", error);
  return doc.root;
}

static void assert_refused(const struct out* o, const char* message) {
  error[0] = '\0';
  pickle_free(&doc);
  assert_int_equal(pickle_parse(o->b, o->n, "run.pickle", &doc, error, sizeof error), -1);
  assert_null(doc.root);
  if (!strstr(error, message)) fail_msg("\"%s\" does not contain \"%s\"", error, message);
}

static void test_pickle_reads_plain_values(void** state) {
  (void)state;
  struct out o = {{0}, 0};
  op(&o, 0x80), op(&o, 2), op(&o, '}'), op(&o, '(');
  key_num(&o, "small", 7);
  key_num(&o, "negative", -5);
  key_num(&o, "address", 0x7f0000000000LL);
  str(&o, "top"); /* 2^64 - 1: LONG1 of 9 bytes, beyond int64_t */
  op(&o, 0x8a), op(&o, 9), raw(&o, "\xff\xff\xff\xff\xff\xff\xff\xff\x00", 9);
  str(&o, "huge"); /* 2^72 */
  op(&o, 0x8a), op(&o, 10), raw(&o, "\0\0\0\0\0\0\0\0\0\x01", 10);
  str(&o, "half");
  op(&o, 'G'), raw(&o, "\x3f\xe0\0\0\0\0\0\0", 8); /* 0.5, big-endian */
  str(&o, "list");
  op(&o, ']'), op(&o, '('), op(&o, 'N'), op(&o, 0x88), op(&o, 0x89), op(&o, 'C'), op(&o, 2), raw(&o, "by", 2);
  op(&o, 'e');
  str(&o, "pair");
  num(&o, 1), num(&o, 2), op(&o, 0x86);
  key_str(&o, "small", "again"); /* a key given twice: the last wins, as in Python */
  op(&o, 'u'), op(&o, '.');
  const struct pickle_value* root = parse(&o);
  int64_t v = 0;
  assert_int_equal(root->kind, PICKLE_DICT);
  assert_int_equal(pickle_get(root, "small")->kind, PICKLE_STRING);
  assert_true(pickle_int(pickle_get(root, "negative"), &v) && v == -5);
  assert_true(pickle_int(pickle_get(root, "address"), &v) && v == 0x7f0000000000LL);
  const struct pickle_value* top = pickle_get(root, "top");
  assert_int_equal(top->wide, 1);
  assert_int_equal((uint64_t)top->u.i, UINT64_MAX);
  assert_false(pickle_int(top, &v));
  assert_int_equal(pickle_get(root, "huge")->wide, 2);
  assert_true(pickle_get(root, "half")->u.f == 0.5);
  const struct pickle_value* list = pickle_get(root, "list");
  assert_int_equal(list->u.seq.count, 4);
  assert_int_equal(list->u.seq.items[0]->kind, PICKLE_NONE);
  assert_int_equal(list->u.seq.items[1]->u.i, 1);
  assert_int_equal(list->u.seq.items[2]->u.i, 0);
  assert_int_equal(list->u.seq.items[3]->kind, PICKLE_BYTES);
  assert_memory_equal(list->u.seq.items[3]->u.s.bytes, "by", 2);
  assert_int_equal(pickle_get(root, "pair")->kind, PICKLE_TUPLE);
  assert_int_equal(pickle_get(root, "pair")->u.seq.count, 2);
  assert_null(pickle_get(root, "absent"));
}

/* What the memo holds is the same value wherever it is used again, even inside itself. */
static void test_pickle_shares_what_the_memo_holds(void** state) {
  (void)state;
  struct out o = {{0}, 0};
  op(&o, 0x80), op(&o, 4), op(&o, 0x95), raw(&o, "\x20\0\0\0\0\0\0\0", 8); /* a FRAME */
  op(&o, ']'), op(&o, 0x94);                                               /* a list, memo 0 */
  op(&o, '}'), op(&o, 'q'), op(&o, 7);                                     /* a dict, memo 7 */
  op(&o, 'a'), op(&o, 'h'), op(&o, 7), op(&o, 'a');                        /* the dict twice */
  op(&o, 'j'), raw(&o, "\0\0\0\0", 4), op(&o, 'a');                        /* and the list itself */
  op(&o, '.');
  const struct pickle_value* root = parse(&o);
  assert_int_equal(root->u.seq.count, 3);
  assert_ptr_equal(root->u.seq.items[0], root->u.seq.items[1]);
  assert_ptr_equal(root->u.seq.items[2], root);
}

/* A class, a function or a set is refused by name, before anything is built from it. */
static void test_pickle_refuses_objects(void** state) {
  (void)state;
  struct out o = {{0}, 0};
  op(&o, 0x80), op(&o, 2), op(&o, 'c'), raw(&o, "os\nsystem\n", 10), op(&o, '.');
  assert_refused(&o, "run.pickle, byte 2: opcode GLOBAL (0x63): a pickled object, which plain data never holds");
  o.n = 0;
  op(&o, 0x80), op(&o, 4), str(&o, "os"), str(&o, "system"), op(&o, 0x93), op(&o, '.');
  assert_refused(&o, "byte 14: opcode STACK_GLOBAL (0x93)");
  o.n = 0;
  op(&o, 0x80), op(&o, 4), op(&o, 0x8f), op(&o, '.');
  assert_refused(&o, "byte 2: opcode EMPTY_SET (0x8f)");
}

static void test_pickle_refuses_damage_at_its_byte(void** state) {
  (void)state;
  struct out o = {{0}, 0};
  raw(&o, "GPUMEMTR", 8);
  assert_refused(&o, "run.pickle is not a pickle of protocol 2 or later");
  o.n = 0;
  op(&o, 0x80), op(&o, 6), op(&o, 'N'), op(&o, '.');
  assert_refused(&o, "run.pickle, byte 0: pickle protocol 6; gpumem reads protocols 2 to 5");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, 'X'), raw(&o, "\x10\0\0\0abc", 7);
  assert_refused(&o, "byte 2: a BINUNICODE of 16 bytes, longer than the file");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, 'X'), raw(&o, "\x04\0\0\0abc", 7);
  assert_refused(&o, "byte 2: the file ends inside a BINUNICODE (4 bytes wanted, 3 left)");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, ']');
  assert_refused(&o, "byte 3: the file ends before the pickle's STOP");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, 'h'), op(&o, 3), op(&o, '.');
  assert_refused(&o, "byte 2: a memo get of index 3, which nothing was put in");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, 'N'), op(&o, 'r'), raw(&o, "\xff\xff\xff\x7f", 4), op(&o, '.');
  assert_refused(&o, "byte 3: a memo index of 2147483647, more than the file's bytes");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, '}'), op(&o, 'N'), op(&o, 'a'), op(&o, '.');
  assert_refused(&o, "byte 4: APPEND on a dict, not a list");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, '}'), op(&o, '('), op(&o, 'N'), op(&o, 'u'), op(&o, '.');
  assert_refused(&o, "byte 5: SETITEMS of 1 values, not of keys and values");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, 'e'), op(&o, '.');
  assert_refused(&o, "byte 2: APPENDS with no MARK before it");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, 'N'), op(&o, 'N'), op(&o, '.');
  assert_refused(&o, "byte 4: STOP with 2 values on the stack, not 1");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, '('), op(&o, 'a'), op(&o, '.');
  assert_refused(&o, "byte 3: APPEND with fewer than 2 values on the stack");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, 'I'), raw(&o, "1\n.", 3);
  assert_refused(&o, "byte 2: opcode 0x49, which no pickle of plain data in protocols 2 to 5 holds");
}

/* Nesting costs no stack of the reader's own: a million lists in one another. */
static void test_pickle_reads_deep_nesting(void** state) {
  (void)state;
  enum { kDepth = 1000000 };
  unsigned char* b = malloc(2 * kDepth + 8);
  assert_non_null(b);
  size_t n = 0;
  b[n++] = 0x80, b[n++] = 2;
  for (int i = 0; i < kDepth; i++) b[n++] = ']';
  for (int i = 1; i < kDepth; i++) b[n++] = 'a';
  b[n++] = '.';
  pickle_free(&doc);
  assert_int_equal(pickle_parse(b, n, "deep.pickle", &doc, error, sizeof error), 0);
  assert_int_equal(doc.root->u.seq.count, 1);
  pickle_free(&doc);
  free(b);
}

/* ---- Snapshots ---- */

static FILE* file;
static char path[64];
static struct torch_snapshot snap;

static int teardown_snapshot(void** state) {
  (void)state;
  torch_snapshot_free(&snap);
  if (file) fclose(file);
  file = NULL;
  return 0;
}

/* The pickle as a file, at path. */
static void write_file(const struct out* o) {
  if (file) fclose(file);
  file = tmpfile();
  assert_non_null(file);
  assert_int_equal(fwrite(o->b, 1, o->n, file), o->n);
  fflush(file);
  snprintf(path, sizeof path, "/proc/self/fd/%d", fileno(file));
}

/* One entry of a history: {action, addr, size, stream, time_us (unless 0), frames (memo ids)}. */
static void entry(struct out* o, const char* action, int64_t addr, int64_t size, int64_t time_us, int frames) {
  op(o, '}'), op(o, '(');
  key_str(o, "action", action);
  key_num(o, "addr", addr);
  key_num(o, "size", size);
  key_num(o, "stream", 0x77);
  if (time_us) key_num(o, "time_us", time_us);
  str(o, "frames");
  op(o, ']');
  if (frames == 1) { /* a new frame, put in the memo as 1, and a new copy of a common one */
    op(o, '('), op(o, '}'), op(o, '('), key_str(o, "filename", "train.py"), key_num(o, "line", 42);
    key_str(o, "name", "forward"), op(o, 'u'), op(o, 'q'), op(o, 1);
    op(o, '}'), op(o, '('), key_str(o, "filename", "train.py"), key_num(o, "line", 100);
    key_str(o, "name", "<step>"), op(o, 'u'), op(o, 'e');
  } else if (frames == 2) { /* the same frames: the memo's one, and an equal copy of the other */
    op(o, '('), op(o, 'h'), op(o, 1);
    op(o, '}'), op(o, '('), key_str(o, "filename", "train.py"), key_num(o, "line", 100);
    key_str(o, "name", "<step>"), op(o, 'u'), op(o, 'e');
  }
  op(o, 'u');
}

/* {"device_traces": [[], [entries...]]}: device 1's history. */
static void history(struct out* o, int timed) {
  const int64_t t0 = 1796018772627876LL;
  op(o, 0x80), op(o, 4), op(o, '}'), str(o, "device_traces"), op(o, ']'), op(o, '('), op(o, ']'), op(o, ']'),
      op(o, '(');
  entry(o, "segment_alloc", 0x7f0000000000LL, 4 << 20, t0, 0);
  entry(o, "alloc", 0x7f0000000000LL, 1 << 20, timed ? t0 + 250000 : 0, 1);
  entry(o, "alloc", 0x7f0000100000LL, 2 << 20, t0 + 500000, 2);
  entry(o, "free_requested", 0x7f0000000000LL, 1 << 20, t0 + 600000, 0);
  entry(o, "free_completed", 0x7f0000000000LL, 1 << 20, t0 + 750000, 0);
  entry(o, "oom", 0, 64LL << 30, t0 + 800000, 0);
  op(o, 'e'), op(o, 'e'), op(o, 's'), op(o, '.');
}

static void test_torch_snapshot_reads_a_history_with_its_stacks(void** state) {
  (void)state;
  struct out o = {{0}, 0};
  history(&o, 1);
  write_file(&o);
  if (torch_snapshot_read(path, -1, &snap, error, sizeof error) != 0) fail_msg("%s", error);
  assert_int_equal(snap.device, 1); /* the first with a history */
  assert_int_equal(snap.count, 5);  /* free_requested is not replayed */
  assert_int_equal(snap.start_ns, 1796018772627876000ULL);
  const gpumem_trace_record_t* r = snap.records;
  assert_int_equal(r[0].event, GPUMEM_TRACE_UPSTREAM_ALLOC);
  assert_int_equal(r[1].event, GPUMEM_TRACE_ALLOC);
  assert_int_equal(r[1].time_ns, 250000000);
  assert_int_equal(r[1].mem_size, 1 << 20);
  assert_int_equal(r[1].stream, 0x77);
  assert_int_equal(r[3].event, GPUMEM_TRACE_FREE);
  assert_int_equal(r[3].size, 0);
  assert_int_equal(r[3].time_ns, 750000000);
  assert_int_equal(r[4].event, GPUMEM_TRACE_ALLOC_FAILED);
  assert_int_equal(r[4].status, GPUMEM_ERROR_OUT_OF_MEMORY);
  /* Both allocations have the same frames, one shared, one an equal copy: one stack of two. */
  assert_int_equal(snap.stacks[0], -1);
  assert_int_equal(snap.stacks[1], 0);
  assert_int_equal(snap.stacks[2], 0);
  assert_int_equal(snap.stack_count, 1);
  assert_int_equal(snap.frame_count, 2);
  assert_string_equal(snap.frames[snap.stack_frames[0]], "forward (train.py:42)");
  assert_string_equal(snap.frames[snap.stack_frames[1]], "<step> (train.py:100)");
}

/* Without a time on every entry, the order is kept: a microsecond an entry, as the converter does. */
static void test_torch_snapshot_without_times_keeps_the_order(void** state) {
  (void)state;
  struct out o = {{0}, 0};
  history(&o, 0);
  write_file(&o);
  if (torch_snapshot_read(path, 1, &snap, error, sizeof error) != 0) fail_msg("%s", error);
  assert_int_equal(snap.start_ns, 0);
  for (size_t i = 0; i < snap.count; i++) assert_int_equal(snap.records[i].time_ns, i * 1000);
}

/* The records written as a trace read back the same through the library's reader. */
static void test_torch_snapshot_writes_a_trace_gpumem_reads(void** state) {
  (void)state;
  struct out o = {{0}, 0};
  history(&o, 1);
  write_file(&o);
  if (torch_snapshot_read(path, -1, &snap, error, sizeof error) != 0) fail_msg("%s", error);
  FILE* trace = tmpfile();
  assert_non_null(trace);
  assert_int_equal(torch_snapshot_write_trace(&snap, trace), 0);
  char trace_path[64];
  snprintf(trace_path, sizeof trace_path, "/proc/self/fd/%d", fileno(trace));
  gpumem_trace_reader_t* reader = NULL;
  assert_ok(gpumem_trace_reader_open(trace_path, &reader));
  gpumem_trace_header_t header;
  memset(&header, 0, sizeof header);
  header.struct_size = sizeof header;
  assert_ok(gpumem_trace_reader_get_header(reader, &header));
  assert_int_equal(header.device, 1);
  assert_int_equal(header.start_unix_ns, snap.start_ns);
  assert_string_equal(header.kind, "pytorch caching allocator");
  for (size_t i = 0; i <= snap.count; i++) {
    gpumem_trace_record_t rec;
    memset(&rec, 0, sizeof rec);
    rec.struct_size = sizeof rec;
    bool more = false;
    assert_ok(gpumem_trace_reader_next(reader, &rec, &more));
    assert_int_equal(more, i < snap.count);
    if (!more) break;
    const gpumem_trace_record_t* want = &snap.records[i];
    assert_int_equal(rec.event, want->event);
    assert_int_equal(rec.time_ns, want->time_ns);
    assert_int_equal(rec.address, want->address);
    assert_int_equal(rec.size, want->size);
    assert_int_equal(rec.mem_size, want->mem_size);
    assert_int_equal(rec.stream, want->stream);
    assert_int_equal(rec.status, want->status);
  }
  assert_ok(gpumem_trace_reader_close(reader));
  fclose(trace);
}

/* A frame's name as the snapshot has it, NULs and all: names that differ after a NUL are two frames. */
static void test_torch_snapshot_keeps_frames_whole(void** state) {
  (void)state;
  struct out o = {{0}, 0};
  op(&o, 0x80), op(&o, 4), op(&o, '}'), str(&o, "device_traces"), op(&o, ']'), op(&o, ']'), op(&o, '(');
  for (int i = 0; i < 2; i++) {
    op(&o, '}'), op(&o, '(');
    key_str(&o, "action", "alloc"), key_num(&o, "addr", 0x1000 * (i + 1)), key_num(&o, "size", 4096);
    str(&o, "frames"), op(&o, ']'), op(&o, '}'), op(&o, '(');
    str(&o, "name"), str_n(&o, i ? "op\0b" : "op\0a", 4), key_str(&o, "filename", "x.py"), key_num(&o, "line", 3);
    op(&o, 'u'), op(&o, 'a'), op(&o, 'u');
  }
  op(&o, 'e'), op(&o, 'a'), op(&o, 's'), op(&o, '.');
  write_file(&o);
  if (torch_snapshot_read(path, -1, &snap, error, sizeof error) != 0) fail_msg("%s", error);
  assert_int_equal(snap.frame_count, 2);
  assert_int_equal(snap.stack_count, 2);
  static const char kFirst[] = "op\0a (x.py:3)";
  assert_int_equal(snap.frame_lengths[snap.stack_frames[0]], sizeof kFirst - 1);
  assert_memory_equal(snap.frames[snap.stack_frames[0]], kFirst, sizeof kFirst);
  assert_memory_equal(snap.frames[snap.stack_frames[1]], "op\0b (x.py:3)", sizeof kFirst);
}

static void assert_snapshot_refused(const struct out* o, int32_t device, const char* message) {
  write_file(o);
  error[0] = '\0';
  assert_int_equal(torch_snapshot_read(path, device, &snap, error, sizeof error), -1);
  assert_int_equal(snap.count, 0);
  if (!strstr(error, message)) fail_msg("\"%s\" does not contain \"%s\"", error, message);
}

static void test_torch_snapshot_refuses_what_is_no_snapshot(void** state) {
  (void)state;
  struct out o = {{0}, 0};
  op(&o, 0x80), op(&o, 2), op(&o, ']'), op(&o, '.');
  assert_snapshot_refused(&o, -1,
                          "is a pickle but not a PyTorch memory snapshot: it is a list with no list "
                          "\"device_traces\"");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, '}'), str(&o, "device_traces"), op(&o, ']'), op(&o, ']'), op(&o, 'a'), op(&o, 's');
  op(&o, '.');
  assert_snapshot_refused(&o, -1,
                          "the snapshot holds no allocation history (of 1 device): record one with "
                          "torch.cuda.memory._record_memory_history()");
  o.n = 0;
  history(&o, 1);
  assert_snapshot_refused(&o, 2, "the snapshot has histories for 2 devices, none for device 2");
  /* Asked for by number, an empty history is refused as none is: it would picture nothing. */
  assert_snapshot_refused(&o, 0,
                          "the snapshot holds no allocation history for device 0: record one with "
                          "torch.cuda.memory._record_memory_history()");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, '}'), str(&o, "device_traces"), op(&o, ']'), op(&o, ']'), op(&o, '}'), op(&o, '(');
  key_str(&o, "action", "alloc"), key_str(&o, "addr", "0x10"), key_num(&o, "size", 1);
  op(&o, 'u'), op(&o, 'a'), op(&o, 'a'), op(&o, 's'), op(&o, '.');
  assert_snapshot_refused(&o, -1, "device_traces[0][0]: \"addr\" is a string, not a number of 0 to 2^64 - 1");
  o.n = 0;
  op(&o, 0x80), op(&o, 2), op(&o, ']');
  assert_snapshot_refused(&o, -1, ", byte 3: the file ends before the pickle's STOP");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_pickle_reads_plain_values, teardown),
      cmocka_unit_test_teardown(test_pickle_shares_what_the_memo_holds, teardown),
      cmocka_unit_test_teardown(test_pickle_refuses_objects, teardown),
      cmocka_unit_test_teardown(test_pickle_refuses_damage_at_its_byte, teardown),
      cmocka_unit_test_teardown(test_pickle_reads_deep_nesting, teardown),
      cmocka_unit_test_teardown(test_torch_snapshot_reads_a_history_with_its_stacks, teardown_snapshot),
      cmocka_unit_test_teardown(test_torch_snapshot_without_times_keeps_the_order, teardown_snapshot),
      cmocka_unit_test_teardown(test_torch_snapshot_writes_a_trace_gpumem_reads, teardown_snapshot),
      cmocka_unit_test_teardown(test_torch_snapshot_keeps_frames_whole, teardown_snapshot),
      cmocka_unit_test_teardown(test_torch_snapshot_refuses_what_is_no_snapshot, teardown_snapshot),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
