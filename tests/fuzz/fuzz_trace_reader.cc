// The trace reader fuzzer: any bytes as a trace file, read by gpumem::trace::Reader through a buffer
// of 1 to 13 bytes (so a record straddles reads at every place it can) and one of 64 KiB, and
// through the C API, and checked against a reference decoder over the whole input in memory: the
// same header, the same records with the same frames (format version 2), and the same refusal, at
// the same byte, at the same point (opening, or which record).
// Built as a libFuzzer target with clang, and as a replay of the checked-in corpus under CTest
// otherwise (GPUMEM_FUZZ_REPLAY). Links the library's objects to reach the reader's buffer size.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "fuzz_check.hpp"
#include "gpumem/gpumem.h"
#include "trace/trace.hpp"

namespace {

using gpumem::trace::Header;
using gpumem::trace::Reader;
using gpumem::trace::Record;

const char* g_step = "reference";

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char* fmt, ...) {
  const std::string where = std::string("(") + g_step + ")";
  va_list ap;
  va_start(ap, fmt);
  fuzz_check::fail("fuzz_trace_reader", where.c_str(), nullptr, fmt, ap);
}

// A frame definition of format version 2, as the reference reads it.
struct RefFrame {
  uint64_t kind = 0, address = 0, module = 0, symbol_offset = 0;
  std::string text;  // a caller frame's text, or a native frame's symbol
};

// What reading the input must give, by the format (docs/trace-format.md).
struct Outcome {
  enum Kind { kRead, kNotTrace, kVersion, kDamaged } kind = kRead;
  bool at_open = false;  // refused while opening (the header), not by a record
  uint64_t offset = 0;   // of the damage
  Header header;
  std::vector<Record> records;  // those before the damage, if any
  std::vector<RefFrame> frames;
  std::vector<uint64_t> module_bases;
  std::vector<std::string> modules;
  std::vector<std::vector<uint64_t>> stacks;
};

// What the inputs reached, so the replay can insist that the corpus still reaches every path.
struct Reached {
  uint64_t complete, records, not_trace, version, header_damage, record_damage, skipped_header, definitions,
      definition_damage;
} g_reached;

class Reference {
 public:
  Reference(const uint8_t* d, size_t n) : d_(d), n_(n) {}

  Outcome run() {
    if (n_ < 8 || std::memcmp(d_, "GPUMEMTR", 8) != 0) return refused(Outcome::kNotTrace, 0);
    if (n_ < 12) return refused(Outcome::kDamaged, n_);
    o_.header.version = static_cast<uint32_t>(le(8, 4));
    if (o_.header.version != 1 && o_.header.version != 2) return refused(Outcome::kVersion, 0);
    if (n_ < 34) return refused(Outcome::kDamaged, n_);
    const uint64_t header_bytes = le(12, 4), kind_bytes = le(32, 2);
    o_.header.device = static_cast<int32_t>(le(16, 4));
    o_.header.start_unix_ns = le(24, 8);
    if (header_bytes < 34 + kind_bytes || header_bytes > Reader::kMaxHeaderBytes || header_bytes > n_)
      return refused(Outcome::kDamaged, 12);
    if (header_bytes > 34 + kind_bytes) ++g_reached.skipped_header;
    o_.header.kind.assign(reinterpret_cast<const char*>(d_ + 34), kind_bytes);
    at_ = header_bytes;
    uint64_t time = 0, address = 0;
    while (at_ < n_) {
      const uint8_t event = d_[at_];
      const bool definition = o_.header.version == 2 && event >= 6 && event <= 8;
      if (!definition && (event < 1 || event > 5)) return damaged(at_);
      ++at_;
      if (definition) {
        if (!define(event)) return defined_badly(bad_at_);
        ++g_reached.definitions;
        continue;
      }
      Record r;
      r.event = static_cast<gpumem::trace::Event>(event);
      uint64_t v[7] = {};
      const int count = event == 1 || event == 5 ? 6 : 5;
      for (int i = 0; i < count; ++i)
        if (!varint(v[i])) return damaged(bad_at_);
      time += v[0];
      address += (v[3] >> 1) ^ (0 - (v[3] & 1));
      r.time_ns = time;
      r.thread = static_cast<uint32_t>(v[1]);
      r.stream = v[2];
      r.address = address;
      r.size = v[4];
      if (event == 1) r.mem_size = v[5];
      if (event == 5) r.status = static_cast<int32_t>((v[5] >> 1) ^ (0 - (v[5] & 1)));
      if (o_.header.version == 2 && (event == 1 || event == 5) && !id(r.stack, o_.stacks.size(), true))
        return damaged(bad_at_);
      o_.records.push_back(r);
    }
    ++g_reached.complete;
    return o_;
  }

 private:
  uint64_t le(size_t at, int bytes) const {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(d_[at + i]) << (8 * i);
    return v;
  }
  Outcome refused(Outcome::Kind kind, uint64_t offset) {
    o_.kind = kind;
    o_.at_open = true;
    o_.offset = offset;
    ++(kind == Outcome::kNotTrace  ? g_reached.not_trace
       : kind == Outcome::kVersion ? g_reached.version
                                   : g_reached.header_damage);
    return o_;
  }
  Outcome damaged(uint64_t offset) {
    o_.kind = Outcome::kDamaged;
    o_.offset = offset;
    ++g_reached.record_damage;
    return o_;
  }
  Outcome defined_badly(uint64_t offset) {
    ++g_reached.definition_damage;
    return damaged(offset);
  }
  // A definition (frame 6, module 7, stack 8) after its kind's byte; false with bad_at_ set.
  bool define(uint8_t kind) {
    uint64_t v = 0;
    if (kind == 7) {
      std::string path;
      if (!varint(v) || !text(path)) return false;
      o_.module_bases.push_back(v);
      o_.modules.push_back(path);
      return true;
    }
    if (kind == 8) {
      const size_t at = at_;
      if (!varint(v)) return false;
      if (v == 0 || v > 2 * GPUMEM_TRACE_MAX_FRAMES) return bad(at);
      std::vector<uint64_t> frames(v);
      for (uint64_t& f : frames)
        if (!id(f, o_.frames.size(), false)) return false;
      o_.stacks.push_back(frames);
      return true;
    }
    RefFrame f;
    const size_t at = at_;
    if (!varint(f.kind)) return false;
    if (f.kind == GPUMEM_TRACE_FRAME_NATIVE) {
      if (!varint(f.address) || !id(f.module, o_.modules.size(), true) || !varint(f.symbol_offset) || !text(f.text))
        return false;
    } else if (f.kind == GPUMEM_TRACE_FRAME_CALLER) {
      if (!text(f.text)) return false;
    } else {
      return bad(at);
    }
    o_.frames.push_back(f);
    return true;
  }
  // A number naming one of the `defined` definitions before it (or 0, for none, where allowed).
  bool id(uint64_t& v, size_t defined, bool none_allowed) {
    const size_t at = at_;
    if (!varint(v)) return false;
    return (v == 0 && !none_allowed) || v > defined ? bad(at) : true;
  }
  bool text(std::string& out) {
    const size_t at = at_;
    uint64_t n = 0;
    if (!varint(n)) return false;
    if (n > 4096) return bad(at);
    if (n > n_ - at_) return bad(n_);  // the bytes end early
    out.assign(reinterpret_cast<const char*>(d_ + at_), n);
    if (const size_t nul = out.find('\0'); nul != std::string::npos) return bad(at_ + nul);
    at_ += n;
    return true;
  }
  bool bad(size_t at) {
    bad_at_ = at;
    return false;
  }
  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= n_ || (shift == 63 && (d_[at_] & 0x7e))) {
        bad_at_ = at_;
        return false;
      }
      const uint8_t b = d_[at_++];
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    bad_at_ = at_;
    return false;
  }

  const uint8_t* d_;
  size_t n_;
  size_t at_ = 0, bad_at_ = 0;
  Outcome o_;
};

// The refusal's detail says what the reference found, and where.
void check_refusal(const Outcome& want, gpumem_status_t status, const char* detail) {
  CHECK(status == GPUMEM_ERROR_IO, "refused with %s, not GPUMEM_ERROR_IO: %s", gpumem_status_name(status), detail);
  char damage[64];
  std::snprintf(damage, sizeof damage, "is damaged at byte %" PRIu64 ": ", want.offset);
  const char* expected = want.kind == Outcome::kNotTrace  ? "is not a gpumem trace (it does not start with GPUMEMTR)"
                         : want.kind == Outcome::kVersion ? "is a gpumem trace of format version"
                         : want.kind == Outcome::kDamaged ? damage
                                                          : "(no refusal)";
  CHECK(std::strstr(detail, expected), "the detail \"%s\" lacks \"%s\"", detail, expected);
}

void check_record(const Record& got, const Record& want, size_t i) {
  CHECK(got.event == want.event && got.thread == want.thread && got.time_ns == want.time_ns &&
            got.stream == want.stream && got.address == want.address && got.size == want.size &&
            got.mem_size == want.mem_size && got.status == want.status && got.stack == want.stack,
        "record %zu differs from the reference", i);
}

// A frame as the reader gives it (its kind, address, module and symbol or text) against the reference's.
void check_frame(uint32_t kind, uint64_t address, uint64_t module_offset, uint64_t symbol_offset, const char* module,
                 const char* symbol, const char* text, const Outcome& want, uint64_t id, size_t record) {
  const RefFrame& f = want.frames[id - 1];
  const bool native = f.kind == GPUMEM_TRACE_FRAME_NATIVE;
  const std::string& path = native && f.module ? want.modules[f.module - 1] : std::string();
  const uint64_t offset = native && f.module ? f.address - want.module_bases[f.module - 1] : 0;
  CHECK(kind == f.kind && address == f.address && symbol_offset == f.symbol_offset && module_offset == offset &&
            path == module && (native ? f.text == symbol : f.text == text),
        "frame %" PRIu64 " of record %zu differs from the reference", id, record);
}

void check_frames(const Reader& reader, const Record& r, const Outcome& want, size_t i) {
  const auto got = reader.stack(r.stack);
  const size_t count = r.stack ? want.stacks[r.stack - 1].size() : 0;
  CHECK(got.size() == count, "record %zu has %zu frames; the reference %zu", i, got.size(), count);
  for (size_t k = 0; k < count; ++k) {
    CHECK(got[k] == want.stacks[r.stack - 1][k], "frame %zu of record %zu is another", k, i);
    const gpumem::trace::Frame& f = reader.frame(got[k]);
    check_frame(f.kind, f.address, f.module_offset, f.symbol_offset, f.module ? f.module->c_str() : "",
                f.symbol.c_str(), f.text.c_str(), want, got[k], i);
  }
}

// Through gpumem::trace::Reader, reading buffer bytes at a time.
void read_internal(int file, const Outcome& want, size_t buffer) {
  CHECK(lseek(file, 0, SEEK_SET) == 0, "lseek");
  size_t n = 0;
  try {
    Reader reader(dup(file), "fuzz.trace", buffer);
    CHECK(!want.at_open, "the header was accepted; the reference refuses it at byte %" PRIu64, want.offset);
    const Header& h = reader.header();
    CHECK(h.version == want.header.version && h.device == want.header.device &&
              h.start_unix_ns == want.header.start_unix_ns && h.kind == want.header.kind,
          "the header differs from the reference");
    for (Record r; reader.next(r); ++n) {
      CHECK(n < want.records.size(), "record %zu read; the reference has %zu", n, want.records.size());
      check_record(r, want.records[n], n);
      check_frames(reader, r, want, n);
    }
    Record r;
    CHECK(!reader.next(r), "a record after the end");
    CHECK(want.kind == Outcome::kRead, "read to the end; the reference refuses at byte %" PRIu64, want.offset);
    CHECK(n == want.records.size(), "%zu records read; the reference has %zu", n, want.records.size());
  } catch (const gpumem::Error& e) {
    CHECK(want.kind != Outcome::kRead, "refused (%s); the reference reads it", e.what());
    CHECK(n == want.records.size(), "refused after %zu records; the reference after %zu", n, want.records.size());
    check_refusal(want, e.status(), e.what());
  }
}

// Through the C API, as a program reads a trace: the same, and a refusal repeated by later calls.
void read_public(int file, const Outcome& want) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", file);
  gpumem_trace_reader_t* reader = nullptr;
  const gpumem_status_t st = gpumem_trace_reader_open(path, &reader);
  if (want.at_open) {
    CHECK(!reader, "a reader despite the refusal");
    return check_refusal(want, st, gpumem_last_error_detail());
  }
  CHECK(st == GPUMEM_SUCCESS, "gpumem_trace_reader_open: %s: %s", gpumem_status_name(st), gpumem_last_error_detail());
  gpumem_trace_header_t h;
  h.struct_size = sizeof h;
  CHECK(gpumem_trace_reader_get_header(reader, &h) == GPUMEM_SUCCESS, "gpumem_trace_reader_get_header");
  const size_t kind = std::min(want.header.kind.size(), sizeof h.kind - 1);
  CHECK(
      h.device == want.header.device && std::memcmp(h.kind, want.header.kind.data(), kind) == 0 && h.kind[kind] == '\0',
      "the header differs from the reference");
  gpumem_trace_record_t r;
  r.struct_size = sizeof r;
  bool more = true;
  size_t n = 0;
  gpumem_status_t next = GPUMEM_SUCCESS;
  while ((next = gpumem_trace_reader_next(reader, &r, &more)) == GPUMEM_SUCCESS && more) {
    CHECK(n < want.records.size(), "record %zu read; the reference has %zu", n, want.records.size());
    const Record& w = want.records[n];
    CHECK(r.event == static_cast<uint32_t>(w.event) && r.address == w.address && r.size == w.size &&
              r.time_ns == w.time_ns && r.stack == w.stack,
          "record %zu differs from the reference", n);
    const size_t count = w.stack ? want.stacks[w.stack - 1].size() : 0;
    CHECK(r.frame_count == count, "record %zu has %u frames; the reference %zu", n, r.frame_count, count);
    for (uint32_t k = 0; k <= r.frame_count; ++k) {
      gpumem_trace_frame_t f;
      f.struct_size = sizeof f;
      const gpumem_status_t got = gpumem_trace_reader_get_frame(reader, k, &f);
      if (k == r.frame_count) {
        CHECK(got == GPUMEM_ERROR_INVALID_ARGUMENT, "a frame past the record's %u", r.frame_count);
        break;
      }
      CHECK(got == GPUMEM_SUCCESS, "gpumem_trace_reader_get_frame: %s", gpumem_last_error_detail());
      check_frame(f.kind, f.address, f.module_offset, f.symbol_offset, f.module, f.symbol, f.text, want,
                  want.stacks[w.stack - 1][k], n);
    }
    ++n;
  }
  CHECK(n == want.records.size(), "%zu records read; the reference has %zu", n, want.records.size());
  if (want.kind == Outcome::kRead) {
    CHECK(next == GPUMEM_SUCCESS, "refused (%s); the reference reads it", gpumem_last_error_detail());
  } else {
    check_refusal(want, next, gpumem_last_error_detail());
    const std::string first = gpumem_last_error_detail();
    CHECK(gpumem_trace_reader_next(reader, &r, &more) == GPUMEM_ERROR_IO && first == gpumem_last_error_detail(),
          "a second call after the damage does not repeat it");
  }
  CHECK(gpumem_trace_reader_close(reader) == GPUMEM_SUCCESS, "gpumem_trace_reader_close");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_check::data = data;
  fuzz_check::size = size;
  static const int file = memfd_create("fuzz.trace", MFD_CLOEXEC);
  CHECK(file >= 0 && ftruncate(file, 0) == 0, "memfd: %s", std::strerror(errno));
  CHECK(size == 0 || pwrite(file, data, size, 0) == static_cast<ssize_t>(size), "pwrite: %s", std::strerror(errno));
  g_step = "reference";
  const Outcome want = Reference(data, size).run();
  g_reached.records += want.records.size();
  // A small buffer of 1 to 13 bytes, picked by the length so that the fuzzer tries them all, puts a
  // read's end at every place in a record; each byte read is a system call, so not 1 for all.
  g_step = "Reader, small reads";
  read_internal(file, want, 1 + size % 13);
  g_step = "Reader, 64 KiB reads";
  read_internal(file, want, Reader::kBufferBytes);
  g_step = "C API";
  read_public(file, want);
  return 0;
}

#ifdef GPUMEM_FUZZ_REPLAY
#include "fuzz_replay.hpp"

namespace {

bool reached() {
  const Reached& r = g_reached;
  std::printf("fuzz_trace_reader_replay: %" PRIu64 " read to the end (%" PRIu64 " records, %" PRIu64
              " with header fields skipped, %" PRIu64 " frame definitions); refused: %" PRIu64 " not traces, %" PRIu64
              " other versions, %" PRIu64 " damaged headers, %" PRIu64 " damaged records (%" PRIu64 " definitions)\n",
              r.complete, r.records, r.skipped_header, r.definitions, r.not_trace, r.version, r.header_damage,
              r.record_damage, r.definition_damage);
  for (const uint64_t n : {r.complete, r.records, r.skipped_header, r.definitions, r.not_trace, r.version,
                           r.header_damage, r.record_damage, r.definition_damage})
    if (!n) {
      std::fprintf(stderr, "fuzz_trace_reader_replay: a path was never reached\n");
      return false;
    }
  return true;
}

}  // namespace

int main(int argc, char** argv) { return fuzz_replay::main(argc, argv, "fuzz_trace_reader_replay", reached); }
#endif
