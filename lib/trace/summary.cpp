#include "trace/summary.hpp"

#include <cinttypes>
#include <cstring>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "trace/trace.hpp"

namespace gpumem::trace {
namespace {

constexpr uint64_t kSmallLimit = 1 << 20;  // PyTorch's small pool: blocks under 1 MiB

// An allocation live at some point of the trace.
struct Live {
  uint64_t address, size, mem_size, stream, time_ns, record, stack;
  uint32_t thread;
};

// Largest first; among allocations of one size, the earlier.
struct Larger {
  bool operator()(const Live& a, const Live& b) const {
    return a.mem_size != b.mem_size ? a.mem_size > b.mem_size : a.record < b.record;
  }
};

// Running figures: [0] all, [1] large, [2] small.
struct Figures {
  uint64_t allocated[3] = {}, allocated_peak[3] = {}, allocated_total[3] = {}, freed_total[3] = {};
  uint64_t requested[3] = {}, requested_peak[3] = {};
  uint64_t allocs[3] = {}, allocs_peak[3] = {}, allocs_total[3] = {};
  uint64_t reserved = 0, reserved_peak = 0, reserved_total = 0, released_total = 0;
  uint64_t segments = 0, segments_peak = 0, segments_total = 0;
  uint64_t upstream = 0, failed = 0, oom = 0, first_failed_size = 0, unknown_frees = 0, records = 0, peak_record = 0;
};

// One pass over a trace. The allocations live at the peak are taken when the live set is about to
// change after the peak: at the first free, or allocation that does not raise the peak, after it.
class Summarizer {
 public:
  Summarizer(Reader& reader, uint32_t top) : reader_(reader), top_(top) {}

  void run() {
    Record r;
    while (reader_.next(r)) {
      ++f.records;
      if (r.event == Event::kAlloc) {
        alloc(r);
      } else if (r.event == Event::kFree) {
        free(r);
      } else if (r.event == Event::kUpstreamAlloc || r.event == Event::kUpstreamFree) {
        upstream(r);
      } else if (r.event == Event::kAllocFailed) {
        if (f.failed++ == 0) f.first_failed_size = r.size;
        f.oom += r.status == GPUMEM_ERROR_OUT_OF_MEMORY;
      }
    }
    if (pending_) take_peak();
  }

  Figures f;
  std::vector<Live> largest;  // at the peak, largest first, at most top_
  uint64_t live_at_peak = 0, allocated_at_peak = 0;

 private:
  static int size_class(uint64_t mem_size) { return mem_size >= kSmallLimit ? 1 : 2; }

  void alloc(const Record& r) {
    const Live e{r.address, r.size,  r.mem_size ? r.mem_size : r.size, r.stream, r.time_ns, f.records,
                 r.stack,   r.thread};
    if (pending_ && f.allocated[0] + e.mem_size <= f.allocated_peak[0]) take_peak();
    // An address allocated twice (its free was never recorded): the later allocation replaces it.
    if (const auto it = by_address_.find(e.address); it != by_address_.end()) {
      live_.erase(it->second);
      by_address_.erase(it);
    }
    by_address_.emplace(e.address, live_.insert(e).first);
    const int idx[2] = {0, size_class(e.mem_size)};
    for (const int i : idx) {
      f.allocated[i] += e.mem_size;
      f.allocated_total[i] += e.mem_size;
      f.requested[i] += e.size;
      ++f.allocs[i];
      ++f.allocs_total[i];
      if (f.requested[i] > f.requested_peak[i]) f.requested_peak[i] = f.requested[i];
      if (f.allocs[i] > f.allocs_peak[i]) f.allocs_peak[i] = f.allocs[i];
      if (f.allocated[i] <= f.allocated_peak[i]) continue;
      f.allocated_peak[i] = f.allocated[i];
      if (i == 0) {
        f.peak_record = f.records;  // where the peak is first reached
        pending_ = true;
      }
    }
  }

  void free(const Record& r) {
    const auto it = by_address_.find(r.address);
    if (it == by_address_.end()) {
      ++f.unknown_frees;
      return;
    }
    if (pending_) take_peak();
    const Live e = *it->second;
    live_.erase(it->second);
    by_address_.erase(it);
    const int idx[2] = {0, size_class(e.mem_size)};
    for (const int i : idx) {
      f.allocated[i] -= e.mem_size;
      f.freed_total[i] += e.mem_size;
      f.requested[i] -= e.size;
      --f.allocs[i];
    }
  }

  void upstream(const Record& r) {
    ++f.upstream;
    if (r.event == Event::kUpstreamAlloc) {
      f.reserved += r.size;
      f.reserved_total += r.size;
      ++f.segments;
      ++f.segments_total;
    } else {
      f.reserved -= r.size < f.reserved ? r.size : f.reserved;
      f.released_total += r.size;
      if (f.segments) --f.segments;
    }
    if (f.reserved > f.reserved_peak) f.reserved_peak = f.reserved;
    if (f.segments > f.segments_peak) f.segments_peak = f.segments;
  }

  void take_peak() {
    largest.clear();
    for (auto it = live_.begin(); it != live_.end() && largest.size() < top_; ++it) largest.push_back(*it);
    live_at_peak = live_.size();
    allocated_at_peak = f.allocated[0];
    pending_ = false;
  }

  Reader& reader_;
  const uint32_t top_;
  std::set<Live, Larger> live_;
  std::unordered_map<uint64_t, std::set<Live, Larger>::iterator> by_address_;
  bool pending_ = false;  // the peak was reached and the live set has not changed since
};

std::string bytes_text(uint64_t b) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  if (u == 0) return format("%" PRIu64 " B", b);
  return format("%.2f %s", v, units[u]);
}

void bytes_row(std::string& out, const char* label, uint64_t current, uint64_t peak, const uint64_t* total,
               const uint64_t* freed) {
  out += format("| %-22s | %12s | %12s | %15s | %15s |\n", label, bytes_text(current).c_str(), bytes_text(peak).c_str(),
                total ? bytes_text(*total).c_str() : "-", freed ? bytes_text(*freed).c_str() : "-");
}

void count_row(std::string& out, const char* label, uint64_t current, uint64_t peak, uint64_t total, uint64_t ended) {
  out += format("| %-22s | %12" PRIu64 " | %12" PRIu64 " | %15" PRIu64 " | %15" PRIu64 " |\n", label, current, peak,
                total, ended);
}

void table(std::string& out, const Figures& f) {
  static const char* const classes[3] = {"Allocated memory", "  from large blocks", "  from small blocks"};
  static const char* const counts[3] = {"Allocations", "  large (>= 1 MiB)", "  small (< 1 MiB)"};
  out += format("| %-22s | %12s | %12s | %15s | %15s |\n", "", "Current", "Peak", "Total allocated", "Total freed");
  out += "|------------------------|--------------|--------------|-----------------|-----------------|\n";
  for (int i = 0; i < 3; ++i)
    bytes_row(out, classes[i], f.allocated[i], f.allocated_peak[i], &f.allocated_total[i], &f.freed_total[i]);
  bytes_row(out, "Requested memory", f.requested[0], f.requested_peak[0], nullptr, nullptr);
  if (f.upstream) bytes_row(out, "Reserved memory", f.reserved, f.reserved_peak, &f.reserved_total, &f.released_total);
  for (int i = 0; i < 3; ++i)
    count_row(out, counts[i], f.allocs[i], f.allocs_peak[i], f.allocs_total[i], f.allocs_total[i] - f.allocs[i]);
  if (f.upstream)
    count_row(out, "Reserved segments", f.segments, f.segments_peak, f.segments_total, f.segments_total - f.segments);
}

// The largest allocations live at the peak, each followed by the frames it was allocated from
// (named once: a later allocation from the same frames points at the first).
void largest(std::string& out, const Summarizer& s, const Reader& reader) {
  out += format("\nLargest allocations live at the peak (record %" PRIu64 ": %" PRIu64 " allocations, %s):\n",
                s.f.peak_record, s.live_at_peak, bytes_text(s.allocated_at_peak).c_str());
  out += format("  %12s %12s %18s %6s %12s %8s\n", "size", "asked", "stream", "thread", "since (s)", "record");
  std::unordered_map<uint64_t, uint64_t> shown;  // stack -> the record whose frames were printed
  for (const Live& e : s.largest) {
    out += format("  %12s %12" PRIu64 " %#18" PRIx64 " %6u %12.6f %8" PRIu64 "\n", bytes_text(e.mem_size).c_str(),
                  e.size, e.stream, e.thread, static_cast<double>(e.time_ns) / 1e9, e.record);
    if (!e.stack) continue;
    if (const auto [it, first] = shown.emplace(e.stack, e.record); !first) {
      out += format("      at the frames of record %" PRIu64 "\n", it->second);
      continue;
    }
    for (const uint64_t frame : reader.stack(e.stack)) out += format("      at %s\n", reader.frame(frame).text.c_str());
  }
  if (s.live_at_peak > s.largest.size())
    out += format("  ... and %" PRIu64 " smaller\n", s.live_at_peak - static_cast<uint64_t>(s.largest.size()));
}

std::string text(const std::string& path, const Summarizer& s, const Reader& reader) {
  const Figures& f = s.f;
  std::string out = format("%s: %" PRIu64 " records\n\n", path.c_str(), f.records);
  table(out, f);
  if (!f.upstream) out += "(no upstream records: the traced allocator is not a pool, so nothing was reserved apart)\n";
  out += format("\nFailed allocations (out of memory or refused): %" PRIu64, f.failed);
  if (f.failed)
    out += format(", the first of %" PRIu64 " bytes; %" PRIu64 " out of memory", f.first_failed_size, f.oom);
  out += format("\nFrees of addresses the trace did not allocate: %" PRIu64 "\n", f.unknown_frees);
  if (f.peak_record) largest(out, s, reader);
  return out;
}

gpumem_trace_summary_t figures(const Summarizer& s, const Header& h) {
  const Figures& f = s.f;
  gpumem_trace_summary_t o{};
  o.struct_size = sizeof o;
  o.records = f.records;
  o.peak_record = f.peak_record;
  o.peak_record_alloc_count = s.live_at_peak;
  uint64_t* bytes[3][4] = {
      {&o.allocated_bytes, &o.allocated_bytes_peak, &o.allocated_bytes_total, &o.freed_bytes_total},
      {&o.large_allocated_bytes, &o.large_allocated_bytes_peak, &o.large_allocated_bytes_total,
       &o.large_freed_bytes_total},
      {&o.small_allocated_bytes, &o.small_allocated_bytes_peak, &o.small_allocated_bytes_total,
       &o.small_freed_bytes_total}};
  uint64_t* counts[3][4] = {
      {&o.alloc_count, &o.alloc_count_peak, &o.alloc_count_total, &o.free_count_total},
      {&o.large_alloc_count, &o.large_alloc_count_peak, &o.large_alloc_count_total, &o.large_free_count_total},
      {&o.small_alloc_count, &o.small_alloc_count_peak, &o.small_alloc_count_total, &o.small_free_count_total}};
  for (int i = 0; i < 3; ++i) {
    *bytes[i][0] = f.allocated[i];
    *bytes[i][1] = f.allocated_peak[i];
    *bytes[i][2] = f.allocated_total[i];
    *bytes[i][3] = f.freed_total[i];
    *counts[i][0] = f.allocs[i];
    *counts[i][1] = f.allocs_peak[i];
    *counts[i][2] = f.allocs_total[i];
    *counts[i][3] = f.allocs_total[i] - f.allocs[i];
  }
  o.requested_bytes = f.requested[0];
  o.requested_bytes_peak = f.requested_peak[0];
  o.reserved_bytes = f.reserved;
  o.reserved_bytes_peak = f.reserved_peak;
  o.reserved_bytes_total = f.reserved_total;
  o.released_bytes_total = f.released_total;
  o.segment_count = f.segments;
  o.segment_count_peak = f.segments_peak;
  o.segment_count_total = f.segments_total;
  o.segment_release_count_total = f.segments_total - f.segments;
  o.upstream_record_count = f.upstream;
  o.failed_count = f.failed;
  o.oom_count = f.oom;
  o.first_failed_size = f.first_failed_size;
  o.unknown_free_count = f.unknown_frees;
  o.version = h.version;
  o.device = h.device;
  std::strncpy(o.kind, h.kind.c_str(), sizeof o.kind - 1);
  return o;
}

}  // namespace

Summary summarize(const std::string& path, uint32_t top) {
  Reader reader(path);
  Summarizer s(reader, top);
  s.run();
  return Summary{figures(s, reader.header()), text(path, s, reader)};
}

}  // namespace gpumem::trace
