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
};

ReaderHandle* reader_from(gpumem_trace_reader_t* handle) {
  if (!ReaderHandle::live(handle))
    fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is not an open trace reader (closed already, or never opened): %s",
         static_cast<void*>(handle), ReaderHandle::why(handle));
  return reinterpret_cast<ReaderHandle*>(handle);
}

}  // namespace

GPUMEM_API gpumem_status_t gpumem_trace_start(gpumem_allocator_t* allocator, const char* path, uint32_t flags,
                                              gpumem_trace_t** out_trace) {
  return guard([&] {
    require_out(out_trace, "out_trace");
    *out_trace = nullptr;
    require(path != nullptr, "path is NULL");
    if (flags != 0) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "flags is 0x%x; no flag is defined yet: pass 0", flags);
    const gpumem::alloc::Resolved a = gpumem::alloc::resolve(allocator);
    auto h = std::make_unique<TraceHandle>();  // before the start, which cannot be undone
    h->recorder = a->start_trace(path);
    *out_trace = reinterpret_cast<gpumem_trace_t*>(h.release());
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
      if (!h->damage.empty()) fail(GPUMEM_ERROR_IO, "%s", h->damage.c_str());
      gpumem::trace::Record r;
      try {
        if (!h->reader->next(r)) return;
      } catch (const gpumem::Error& e) {
        h->damage = e.what();
        throw;
      }
      out.event = static_cast<uint32_t>(r.event);
      out.thread = r.thread;
      out.time_ns = r.time_ns;
      out.stream = r.stream;
      out.address = r.address;
      out.size = r.size;
      out.mem_size = r.mem_size;
      out.status = r.status;
      *out_has_record = true;
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
