// The RMM CSV fuzzer: any bytes as a log of RMM's logging_resource_adaptor, read row by row by
// tools/rmm_csv.c and checked against a reference reading of each line: a row is taken exactly when
// every field is what RMM writes, with the numbers it holds, and a refusal names the file and the
// line. A log read to its end is then replayed (tools/replay.c) through a configuration over a
// simulated device of up to 2^64 - 1 bytes, both chosen by the input's length, and the replay's
// counts must add up to the rows. Built as a libFuzzer target with clang, and as a replay of the
// checked-in corpus under CTest otherwise (GPUMEM_FUZZ_REPLAY).
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "replay.h"
#include "rmm_csv.h"
}
#include "fuzz_check.hpp"

namespace {

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fuzz_check::fail("fuzz_rmm_csv", "", nullptr, fmt, ap);
}

struct Reached {
  uint64_t not_logs, rows, refused_rows, replays, replay_failed, replay_skipped, replay_refused;
} g_reached;

bool digits(const std::string& s, size_t max = SIZE_MAX) {
  return !s.empty() && s.size() <= max && s.find_first_not_of("0123456789") == std::string::npos;
}

// A number as RMM writes it, by another route than the reader's: false if it is none or > 2^64 - 1.
bool number(std::string s, bool hex, uint64_t& out) {
  if (hex && s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s = s.substr(2);
  if (s.empty() || s.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") != std::string::npos)
    return false;
  unsigned __int128 v = 0;
  for (const char c : s) {
    v = v * (hex ? 16 : 10) +
        static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 0x20) - 'a' + 10);
    if (v > UINT64_MAX) return false;
  }
  out = static_cast<uint64_t>(v);
  return true;
}

bool seconds(const std::string& s, double& out) {
  if (s.find(':') != std::string::npos) {
    size_t at = 0;
    out = 0;
    const double scale[4] = {3600, 60, 1, 1e-6};
    for (int i = 0; i < 4; ++i) {
      const size_t end = i < 3 ? s.find(':', at) : s.size();
      if (end == std::string::npos || !digits(s.substr(at, end - at), 12)) return false;
      out += static_cast<double>(std::strtoull(s.c_str() + at, nullptr, 10)) * scale[i];
      at = end + 1;
    }
    return true;
  }
  const size_t dot = s.find('.');
  if (!digits(s.substr(0, dot)) || (dot != std::string::npos && !digits(s.substr(dot + 1)))) return false;
  out = std::strtod(s.c_str(), nullptr);
  return std::isfinite(out);
}

// One line's record by the reference; false if RMM would not have written it.
bool reference_row(std::string line, double& first_time, gpumem_trace_record_t& rec) {
  if (line.size() > 511 || line.find('\0') != std::string::npos) return false;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::vector<std::string> f;
  for (size_t at = 0;;) {
    const size_t comma = line.find(',', at);
    f.push_back(line.substr(at, comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  uint64_t thread, pointer, size, stream;
  double t;
  if (f.size() != 6 || !number(f[0], false, thread) || !number(f[3], true, pointer) || !number(f[4], false, size) ||
      !number(f[5], true, stream) || !seconds(f[1], t))
    return false;
  if (first_time < 0) first_time = t;
  const double ns = t > first_time ? (t - first_time) * 1e9 : 0;
  if (ns >= 18446744073709551615.0) return false;
  const uint32_t event = f[2] == "allocate"                       ? GPUMEM_TRACE_ALLOC
                         : f[2] == "free" || f[2] == "deallocate" ? GPUMEM_TRACE_FREE
                         : f[2] == "allocate failure"             ? GPUMEM_TRACE_ALLOC_FAILED
                                                                  : 0;
  if (!event) return false;
  rec = {};
  rec.event = event;
  rec.thread = static_cast<uint32_t>(thread);
  rec.time_ns = static_cast<uint64_t>(ns);
  rec.address = pointer;
  rec.size = size;
  rec.stream = stream;
  return true;
}

struct Rows {
  uint64_t rows = 0, allocs = 0, zero_allocs = 0, frees = 0;
};

// Reads the input with rmm_csv and the reference side by side; true if it was read to its end.
bool read_log(FILE* file, Rows& rows) {
  const std::string text(reinterpret_cast<const char*>(fuzz_check::data), fuzz_check::size);
  const size_t first_end = std::min(text.find('\n'), text.size());
  std::string head = text.substr(0, first_end);
  if (!head.empty() && head.back() == '\r') head.pop_back();
  const bool is_log = head == RMM_CSV_HEADER && head.find('\0') == std::string::npos;
  struct rmm_csv csv;
  CHECK(rmm_csv_open(&csv, file, "fuzz.csv") == is_log, "the header is %s; the reference says otherwise",
        is_log ? "refused" : "taken");
  if (!is_log) return ++g_reached.not_logs, false;
  double first_time = -1;
  for (size_t at = first_end + 1; at <= text.size(); ++rows.rows) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const bool last = end == text.size();
    if (last && at == end) break;  // the log ends with its last row's newline
    gpumem_trace_record_t want = {}, got;
    std::memset(&got, 0, sizeof got);
    got.struct_size = sizeof got;
    const bool valid = reference_row(text.substr(at, end - at), first_time, want);
    char error[256] = "";
    const int n = rmm_csv_next(&csv, &got, error, sizeof error);
    const uint64_t line = rows.rows + 2;
    CHECK(n == (valid ? 1 : -1), "line %" PRIu64 ": rmm_csv_next gave %d (%s); the reference %s it", line, n, error,
          valid ? "takes" : "refuses");
    if (!valid) {
      char where[64];
      std::snprintf(where, sizeof where, "fuzz.csv, line %" PRIu64 ": ", line);
      CHECK(std::strncmp(error, where, std::strlen(where)) == 0, "the refusal \"%s\" does not start with \"%s\"", error,
            where);
      return ++g_reached.refused_rows, false;
    }
    CHECK(got.event == want.event && got.thread == want.thread && got.time_ns == want.time_ns &&
              got.address == want.address && got.size == want.size && got.stream == want.stream &&
              got.mem_size == (want.event == GPUMEM_TRACE_ALLOC ? want.size : 0),
          "line %" PRIu64 ": the record differs from the reference", line);
    ++g_reached.rows;
    rows.allocs += want.event == GPUMEM_TRACE_ALLOC;
    rows.zero_allocs += want.event == GPUMEM_TRACE_ALLOC && want.size == 0;
    rows.frees += want.event == GPUMEM_TRACE_FREE;
    at = end + 1;
  }
  gpumem_trace_record_t rec;
  rec.struct_size = sizeof rec;
  char error[256] = "";
  CHECK(rmm_csv_next(&csv, &rec, error, sizeof error) == 0, "a row after the end: %s", error);
  return true;
}

// The log replayed: every allocation row made, failed, refused or skipped, every free row made,
// unmatched or skipped, within the device's capacity.
void replay(int file, const Rows& rows) {
  static const char* const configs[] = {"pool", "device", "pool:vm", "pool:vm,unit=2MiB,limit=8MiB"};
  static const uint64_t capacities[] = {80ULL << 30, 20ULL << 20, UINT64_MAX, 1ULL << 63};
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", file);
  struct replay_result r;
  std::memset(&r, 0, sizeof r);
  r.name = configs[fuzz_check::size % 4];
  const uint64_t capacity = capacities[fuzz_check::size / 4 % 4];
  replay_run(path, capacity, rows.rows, &r, nullptr);
  ++g_reached.replays;
  CHECK(!r.tool_failed, "the replay's bookkeeping failed: %s", r.error);
  if (r.error[0]) {
    CHECK(std::strstr(r.error, "at address 0, which no allocator hands out"), "%s: the replay failed: %s", r.name,
          r.error);
    return;
  }
  CHECK(r.allocs + r.failed + r.refused + rows.zero_allocs == rows.allocs,
        "%s: %" PRIu64 " allocations made, %" PRIu64 " failed, %" PRIu64 " refused, %" PRIu64
        " of 0 bytes skipped; the log has %" PRIu64,
        r.name, r.allocs, r.failed, r.refused, rows.zero_allocs, rows.allocs);
  CHECK(r.frees + r.unmatched_frees + (r.skipped - rows.zero_allocs) == rows.frees,
        "%s: %" PRIu64 " frees made, %" PRIu64 " unmatched, %" PRIu64 " skipped; the log has %" PRIu64, r.name, r.frees,
        r.unmatched_frees, r.skipped - rows.zero_allocs, rows.frees);
  CHECK(r.peak_reserved <= capacity, "%s: %" PRIu64 " bytes reserved of %" PRIu64, r.name, r.peak_reserved, capacity);
  g_reached.replay_failed += r.failed;
  g_reached.replay_skipped += r.skipped;
  g_reached.replay_refused += r.refused;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_check::data = data;
  fuzz_check::size = size;
  static const int file = memfd_create("fuzz.csv", MFD_CLOEXEC);
  CHECK(file >= 0 && ftruncate(file, 0) == 0, "memfd: %s", std::strerror(errno));
  CHECK(size == 0 || pwrite(file, data, size, 0) == static_cast<ssize_t>(size), "pwrite: %s", std::strerror(errno));
  CHECK(lseek(file, 0, SEEK_SET) == 0, "lseek");
  FILE* f = fdopen(dup(file), "rb");
  CHECK(f, "fdopen: %s", std::strerror(errno));
  Rows rows;
  const bool complete = read_log(f, rows);
  std::fclose(f);
  if (complete) replay(file, rows);
  return 0;
}

#ifdef GPUMEM_FUZZ_REPLAY
#include "fuzz_replay.hpp"

namespace {

bool reached() {
  const Reached& r = g_reached;
  std::printf("fuzz_rmm_csv_replay: %" PRIu64 " rows taken, %" PRIu64 " refused, %" PRIu64
              " files not RMM logs; %" PRIu64 " replays: %" PRIu64 " allocations out of memory, %" PRIu64
              " refused, %" PRIu64 " records skipped\n",
              r.rows, r.refused_rows, r.not_logs, r.replays, r.replay_failed, r.replay_refused, r.replay_skipped);
  for (const uint64_t n : {r.rows, r.refused_rows, r.not_logs, r.replays, r.replay_failed, r.replay_skipped})
    if (!n) {
      std::fprintf(stderr, "fuzz_rmm_csv_replay: a path was never reached\n");
      return false;
    }
  return true;
}

}  // namespace

int main(int argc, char** argv) { return fuzz_replay::main(argc, argv, "fuzz_rmm_csv_replay", reached); }
#endif
