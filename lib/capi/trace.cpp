// Trace recording and reading at the C boundary.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "capi/guard.hpp"
#include "core/handle.hpp"
#include "core/keep.hpp"
#include "defaults/defaults.hpp"
#include "gpumem/trace.h"
#include "trace/summary.hpp"

using gpumem::fail;
using gpumem::require;
using gpumem::require_out;
using gpumem::alloc::Allocator;
using gpumem::capi::guard;
using gpumem::trace::Recorder;

namespace {

// What a caller's gpumem_trace_t* and gpumem_trace_reader_t* point at: handles (core/handle.hpp),
// refused once stopped or closed. The Recorder and Reader behind them are separate objects.
// A recording behind a handle. The Recorder is never deleted either (trace/trace.hpp).
struct TraceHandle : gpumem::Handle<0x7472616365616c21> {  // "traceal!"
  Recorder* recorder = nullptr;
};

// A reader behind a handle; closing closes the file.
struct ReaderHandle : gpumem::Handle<0x7472726561646572> {  // "trreader"
  std::unique_ptr<gpumem::trace::Reader> reader;
  std::string damage;  // the first failure of next(), repeated by later calls
  uint64_t stack = 0;  // that of the record next() returned last, for gpumem_trace_reader_get_frame()
};

ReaderHandle* reader_from(gpumem_trace_reader_t* handle) {
  if (!ReaderHandle::live(handle))
    fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is not an open trace reader (closed already, or never opened): %s",
         static_cast<void*>(handle), ReaderHandle::why(handle));
  return reinterpret_cast<ReaderHandle*>(handle);
}

// The recording options of a caller's params, checked.
gpumem::trace::Options options_from(const gpumem_trace_params_t& p) {
  if (p.flags & ~uint32_t{GPUMEM_TRACE_NATIVE_FRAMES})
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "params->flags is 0x%x; the flags are GPUMEM_TRACE_NATIVE_FRAMES (0x%x)",
         p.flags, GPUMEM_TRACE_NATIVE_FRAMES);
  if (p.max_frames == 0 || p.max_frames > GPUMEM_TRACE_MAX_FRAMES)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "params->max_frames is %u; it is 1 to GPUMEM_TRACE_MAX_FRAMES (%d)",
         p.max_frames, GPUMEM_TRACE_MAX_FRAMES);
  gpumem::trace::Options o;
  o.native_frames = p.flags & GPUMEM_TRACE_NATIVE_FRAMES;
  o.max_frames = p.max_frames;
  o.caller_frames = p.frames;
  o.caller_data = p.frames_user_data;
  return o;
}

void start(gpumem_allocator_t* allocator, const char* path, const gpumem::trace::Options& options,
           gpumem_trace_t** out_trace) {
  const gpumem::alloc::Resolved a = gpumem::alloc::resolve(allocator);
  auto h = std::make_unique<TraceHandle>();  // before the start, which cannot be undone
  h->recorder = a->start_trace(path, options);
  *out_trace = reinterpret_cast<gpumem_trace_t*>(h.release());
}

}  // namespace

GPUMEM_API gpumem_status_t gpumem_trace_start(gpumem_allocator_t* allocator, const char* path, uint32_t flags,
                                              gpumem_trace_t** out_trace) {
  return guard([&] {
    require_out(out_trace, "out_trace");
    *out_trace = nullptr;
    require(path != nullptr, "path is NULL");
    if (flags != 0)
      fail(GPUMEM_ERROR_INVALID_ARGUMENT,
           "flags is 0x%x; no flag is defined for this call: pass 0 (frames: gpumem_trace_start_with_params)", flags);
    start(allocator, path, {}, out_trace);
  });
}

GPUMEM_API gpumem_status_t gpumem_trace_params_init(gpumem_trace_params_t* params, size_t struct_size) {
  return guard([&] { gpumem::capi::init_struct(params, "params", struct_size); });
}

GPUMEM_API gpumem_status_t gpumem_trace_start_with_params(gpumem_allocator_t* allocator, const char* path,
                                                          const gpumem_trace_params_t* params,
                                                          gpumem_trace_t** out_trace) {
  return guard([&] {
    require_out(out_trace, "out_trace");
    *out_trace = nullptr;
    require(path != nullptr, "path is NULL");
    start(allocator, path, options_from(gpumem::capi::in_struct(params, "params")), out_trace);
  });
}

GPUMEM_API gpumem_status_t gpumem_trace_stop(gpumem_trace_t* trace) {
  return guard([&] {
    if (!TraceHandle::live(trace))
      fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is not a trace being recorded (stopped already, or never started): %s",
           static_cast<void*>(trace), TraceHandle::why(trace));
    auto* h = reinterpret_cast<TraceHandle*>(trace);
    if (!h->retire())
      fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is not a trace being recorded: another thread stopped it",
           static_cast<void*>(trace));
    Recorder* r = h->recorder;
    delete h;
    if (void* owner = r->owner.exchange(nullptr))
      static_cast<Allocator*>(owner)->stop_trace(r);
    else
      r->close();  // its allocator is gone and completed the file
  });
}

GPUMEM_API gpumem_status_t gpumem_trace_reader_open(const char* path, gpumem_trace_reader_t** out_reader) {
  return guard([&] {
    require_out(out_reader, "out_reader");
    *out_reader = nullptr;
    require(path != nullptr, "path is NULL");
    auto h = std::make_unique<ReaderHandle>();
    h->reader = std::make_unique<gpumem::trace::Reader>(path);
    *out_reader = reinterpret_cast<gpumem_trace_reader_t*>(h.release());
  });
}

GPUMEM_API gpumem_status_t gpumem_trace_reader_get_header(gpumem_trace_reader_t* reader,
                                                          gpumem_trace_header_t* out_header) {
  return guard([&] {
    gpumem::capi::fill_struct(out_header, "out_header", [&](gpumem_trace_header_t& out) {
      const gpumem::trace::Header& h = reader_from(reader)->reader->header();
      out.version = h.version;
      out.device = h.device;
      out.start_unix_ns = h.start_unix_ns;
      const size_t n = std::min(h.kind.size(), sizeof out.kind - 1);
      std::memcpy(out.kind, h.kind.data(), n);
      out.kind[n] = '\0';
    });
  });
}

GPUMEM_API gpumem_status_t gpumem_trace_reader_next(gpumem_trace_reader_t* reader, gpumem_trace_record_t* out_record,
                                                    bool* out_has_record) {
  return guard([&] {
    require_out(out_has_record, "out_has_record");
    *out_has_record = false;
    gpumem::capi::fill_struct(out_record, "out_record", [&](gpumem_trace_record_t& out) {
      ReaderHandle* h = reader_from(reader);
      h->stack = 0;
      if (!h->damage.empty()) fail(GPUMEM_ERROR_IO, "%s", h->damage.c_str());
      gpumem::trace::Record r;
      try {
        if (!h->reader->next(r)) return;
      } catch (const gpumem::Error& e) {
        h->damage = e.what();
        throw;
      }
      h->stack = r.stack;
      out.event = static_cast<uint32_t>(r.event);
      out.thread = r.thread;
      out.time_ns = r.time_ns;
      out.stream = r.stream;
      out.address = r.address;
      out.size = r.size;
      out.mem_size = r.mem_size;
      out.status = r.status;
      out.stack = r.stack;
      out.frame_count = static_cast<uint32_t>(h->reader->stack(r.stack).size());
      *out_has_record = true;
    });
  });
}

GPUMEM_API gpumem_status_t gpumem_trace_reader_get_frame(gpumem_trace_reader_t* reader, uint32_t index,
                                                         gpumem_trace_frame_t* out_frame) {
  return guard([&] {
    gpumem::capi::fill_struct(out_frame, "out_frame", [&](gpumem_trace_frame_t& out) {
      const ReaderHandle* h = reader_from(reader);
      const auto frames = h->reader->stack(h->stack);
      if (index >= frames.size())
        fail(GPUMEM_ERROR_INVALID_ARGUMENT, "index is %u; the last record has %zu frames", index, frames.size());
      const gpumem::trace::Frame& f = h->reader->frame(frames[index]);
      out.kind = f.kind;
      out.address = f.address;
      out.module_offset = f.module_offset;
      out.symbol_offset = f.symbol_offset;
      out.module = f.module ? f.module->c_str() : "";
      out.symbol = f.symbol.c_str();
      out.text = f.text.c_str();
    });
  });
}

GPUMEM_API gpumem_status_t gpumem_trace_reader_close(gpumem_trace_reader_t* reader) {
  return guard([&] {
    if (!reader) return;
    ReaderHandle* h = reader_from(reader);
    if (!h->retire())
      fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is not an open trace reader: another thread closed it",
           static_cast<void*>(reader));
    delete h;
  });
}

GPUMEM_API gpumem_status_t gpumem_trace_summarize(const char* path, uint32_t top, gpumem_trace_text_fn write_text,
                                                  void* user_data, gpumem_trace_summary_t* out_summary) {
  return guard([&] {
    if (out_summary) gpumem::capi::clear_out_struct(out_summary, "out_summary");
    require(path != nullptr, "path is NULL");
    const gpumem::trace::Summary s = gpumem::trace::summarize(path, top);
    if (out_summary)
      gpumem::capi::fill_struct(out_summary, "out_summary", [&](gpumem_trace_summary_t& out) {
        const size_t struct_size = out.struct_size;
        out = s.figures;
        out.struct_size = struct_size;
      });
    if (!write_text) return;
    // Pieces of a bounded size, so that a caller that copies each into a buffer of its own (a
    // binding's, a pipe's) need not hold the whole text twice.
    constexpr size_t kPiece = 64 << 10;
    for (size_t at = 0; at < s.text.size(); at += kPiece)
      write_text(s.text.data() + at, std::min(kPiece, s.text.size() - at), user_data);
  });
}
