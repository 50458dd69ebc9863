// The pickle fuzzer: any bytes as a pickle, read by tools/pickle.c. A refusal must name the file and
// a byte inside it; a value read is written back as a pickle of its own (its shared values and
// cycles through the memo) and read again, and must come back the same. The bytes are then read as
// a PyTorch snapshot (tools/torch_snapshot.c): a refusal names the file; a history read has each
// frame's text with a NUL after its length, and is written as a gpumem trace, which the library's
// reader must read back record for record. Built as a libFuzzer target with clang, and as a replay
// of the checked-in corpus under CTest otherwise (GPUMEM_FUZZ_REPLAY).
#include <gpumem/gpumem.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>

extern "C" {
#include "pickle.h"
#include "torch_snapshot.h"
}
#include "fuzz_check.hpp"

namespace {

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fuzz_check::fail("fuzz_pickle", "", nullptr, fmt, ap);
}

struct Reached {
  uint64_t parsed, refused, round_trips, too_deep, snapshots, snapshot_refusals, records;
} g_reached;

// A value written back as a pickle: containers put in the memo when first written, and referred to
// by it after; a tuple that holds itself (through a list) cannot be written so, and is given up.
struct Writer {
  std::string out;
  std::map<const pickle_value*, uint32_t> memo;
  std::set<const pickle_value*> open_tuples;
  int depth = 0;
  bool given_up = false;

  void put_memo(const pickle_value* v) {
    const uint32_t id = static_cast<uint32_t>(memo.size());
    memo[v] = id;
    out += 'r';
    for (int i = 0; i < 4; ++i) out += static_cast<char>(id >> (8 * i) & 0xff);
  }
  void bytes(char op, const pickle_value* v) {
    out += op;
    const uint64_t n = v->u.s.length;
    for (int i = 0; i < 8; ++i) out += static_cast<char>(n >> (8 * i) & 0xff);
    out.append(v->u.s.bytes, v->u.s.length);
  }
  void number(const pickle_value* v) {
    out += '\x8a';
    out += '\x09';  // nine bytes: room for 2^64 - 1; a wider int was read as its low 64 bits
    const uint64_t low = static_cast<uint64_t>(v->u.i);
    for (int i = 0; i < 8; ++i) out += static_cast<char>(low >> (8 * i) & 0xff);
    out += v->wide ? '\x00' : (v->u.i < 0 ? '\xff' : '\x00');
  }
  void write(const pickle_value* v) {
    if (given_up || ++depth > 2000) {
      given_up = true;
      return;
    }
    const auto seen = memo.find(v);
    if (seen != memo.end()) {
      out += 'j';
      for (int i = 0; i < 4; ++i) out += static_cast<char>(seen->second >> (8 * i) & 0xff);
    } else if (open_tuples.count(v)) {
      given_up = true;
    } else {
      write_new(v);
    }
    --depth;
  }
  void write_new(const pickle_value* v) {
    switch (v->kind) {
      case PICKLE_NONE:
        out += 'N';
        break;
      case PICKLE_BOOL:
        out += v->u.i ? '\x88' : '\x89';
        break;
      case PICKLE_INT:
        number(v);
        break;
      case PICKLE_FLOAT: {
        uint64_t bits;
        std::memcpy(&bits, &v->u.f, sizeof bits);
        out += 'G';
        for (int i = 7; i >= 0; --i) out += static_cast<char>(bits >> (8 * i) & 0xff);
        break;
      }
      case PICKLE_STRING:
        bytes('\x8d', v);
        break;
      case PICKLE_BYTES:
        bytes('\x8e', v);
        break;
      case PICKLE_TUPLE:
        open_tuples.insert(v);
        out += '(';
        for (size_t i = 0; i < v->u.seq.count; ++i) write(v->u.seq.items[i]);
        out += 't';
        open_tuples.erase(v);
        if (!memo.count(v)) put_memo(v);
        break;
      default:  // a list or a dict: made empty, put in the memo, then filled, so it may hold itself
        out += v->kind == PICKLE_LIST ? ']' : '}';
        put_memo(v);
        out += '(';
        for (size_t i = 0; i < v->u.seq.count; ++i) write(v->u.seq.items[i]);
        out += v->kind == PICKLE_LIST ? 'e' : 'u';
    }
  }
  std::string of(const pickle_value* root) {
    out = "\x80\x04";
    write(root);
    out += '.';
    return out;
  }
};

// "fuzz.pickle, byte N: ..." with N inside the input, or "fuzz.pickle ..." for the whole file.
void check_refusal(const char* error) {
  const size_t name = std::strlen("fuzz.pickle");
  CHECK(std::strncmp(error, "fuzz.pickle", name) == 0, "the refusal \"%s\" does not name the file", error);
  unsigned long long at = 0;
  if (std::sscanf(error + name, ", byte %llu:", &at) == 1)
    CHECK(at < fuzz_check::size + 1, "the refusal \"%s\" names a byte past the input's %zu", error, fuzz_check::size);
}

void round_trip(const pickle_value* root) {
  Writer first;
  const std::string once = first.of(root);
  if (first.given_up) return static_cast<void>(++g_reached.too_deep);
  pickle_doc again;
  char error[512];
  CHECK(pickle_parse(reinterpret_cast<const unsigned char*>(once.data()), once.size(), "again.pickle", &again, error,
                     sizeof error) == 0,
        "the value written back is refused: %s", error);
  Writer second;
  const std::string twice = second.of(again.root);
  pickle_free(&again);
  CHECK(once == twice, "the value read back differs (%zu bytes written, %zu the second time)", once.size(),
        twice.size());
  ++g_reached.round_trips;
}

// The snapshot's records written as a trace, read back by the library's reader.
void check_trace(const torch_snapshot& s) {
  FILE* f = std::tmpfile();
  CHECK(f, "tmpfile: %s", std::strerror(errno));
  CHECK(torch_snapshot_write_trace(&s, f) == 0, "writing the trace failed");
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fileno(f));
  gpumem_trace_reader_t* reader = nullptr;
  CHECK(gpumem_trace_reader_open(path, &reader) == GPUMEM_SUCCESS, "the trace is refused: %s",
        gpumem_last_error_detail());
  for (size_t i = 0;; ++i) {
    gpumem_trace_record_t rec;
    std::memset(&rec, 0, sizeof rec);
    rec.struct_size = sizeof rec;
    bool more = false;
    CHECK(gpumem_trace_reader_next(reader, &rec, &more) == GPUMEM_SUCCESS, "record %zu is refused: %s", i,
          gpumem_last_error_detail());
    CHECK(more == (i < s.count), "the trace has %s records than the snapshot's %zu", more ? "more" : "fewer", s.count);
    if (!more) break;
    const gpumem_trace_record_t& want = s.records[i];
    CHECK(rec.event == want.event && rec.time_ns == want.time_ns && rec.address == want.address &&
              rec.size == want.size && rec.mem_size == want.mem_size && rec.stream == want.stream &&
              rec.status == want.status,
          "record %zu read back differs", i);
    CHECK(s.stacks[i] < static_cast<int64_t>(s.stack_count), "record %zu has stack %d of %zu", i, s.stacks[i],
          s.stack_count);
  }
  CHECK(gpumem_trace_reader_close(reader) == GPUMEM_SUCCESS, "closing the reader failed");
  std::fclose(f);
  g_reached.records += s.count;
}

void snapshot(int file) {
  char path[64], error[1024] = "";
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", file);
  torch_snapshot s;
  if (torch_snapshot_read(path, -1, &s, error, sizeof error) != 0) {
    CHECK(std::strncmp(error, path, std::strlen(path)) == 0 || std::strstr(error, path),
          "the refusal \"%s\" does not name the file", error);
    ++g_reached.snapshot_refusals;
    return;
  }
  ++g_reached.snapshots;
  for (size_t i = 0; i < s.frame_count; ++i)  // NULs and all, then a C string's end
    CHECK(s.frame_lengths[i] <= 2100 && s.frames[i][s.frame_lengths[i]] == '\0', "frame %zu of %zu bytes is not ended",
          i, s.frame_lengths[i]);
  check_trace(s);
  torch_snapshot_free(&s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_check::data = data;
  fuzz_check::size = size;
  pickle_doc doc;
  char error[512] = "";
  if (pickle_parse(data, size, "fuzz.pickle", &doc, error, sizeof error) != 0) {
    CHECK(!doc.root, "a refused pickle has a value");
    check_refusal(error);
    ++g_reached.refused;
  } else {
    CHECK(doc.root, "a pickle read has no value");
    ++g_reached.parsed;
    round_trip(doc.root);
    pickle_free(&doc);
  }
  static const int file = memfd_create("fuzz.pickle", MFD_CLOEXEC);
  CHECK(file >= 0 && ftruncate(file, 0) == 0, "memfd: %s", std::strerror(errno));
  CHECK(size == 0 || pwrite(file, data, size, 0) == static_cast<ssize_t>(size), "pwrite: %s", std::strerror(errno));
  snapshot(file);
  return 0;
}

#ifdef GPUMEM_FUZZ_REPLAY
#include "fuzz_replay.hpp"

namespace {

bool reached() {
  const Reached& r = g_reached;
  std::printf("fuzz_pickle_replay: %" PRIu64 " pickles read, %" PRIu64 " refused, %" PRIu64
              " read back the same, %" PRIu64 " too deep to write back; %" PRIu64 " snapshots (%" PRIu64
              " records), %" PRIu64 " refused\n",
              r.parsed, r.refused, r.round_trips, r.too_deep, r.snapshots, r.records, r.snapshot_refusals);
  for (const uint64_t n : {r.parsed, r.refused, r.round_trips, r.snapshots, r.records, r.snapshot_refusals})
    if (!n) {
      std::fprintf(stderr, "fuzz_pickle_replay: a path was never reached\n");
      return false;
    }
  return true;
}

}  // namespace

int main(int argc, char** argv) { return fuzz_replay::main(argc, argv, "fuzz_pickle_replay", reached); }
#endif
