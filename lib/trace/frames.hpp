// Where allocations came from, for a recording that keeps frames: the native stack unwound on the
// allocating thread, the caller's own frames from its callback, and the writer's table of what
// the file has defined already, so that each frame and each stack is written once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumem/trace.h"

namespace gpumem::trace {

constexpr uint32_t kMaxFrames = GPUMEM_TRACE_MAX_FRAMES;  // of each kind, per record
constexpr size_t kMaxText = 4096;                         // bytes of a frame's text, symbol or module path

// What a recording keeps beside the events.
struct Options {
  bool native_frames = false;
  uint32_t max_frames = 16;
  gpumem_trace_frames_fn caller_frames = nullptr;
  void* caller_data = nullptr;
  bool any() const { return native_frames || caller_frames; }
};

// One record's frames, taken on the recording thread before the recorder's lock. The caller
// lines point into a buffer of the thread's, valid until its next capture.
struct Captured {
  uintptr_t native[kMaxFrames];
  uint32_t native_count = 0;
  std::string_view caller[kMaxFrames];
  uint32_t caller_count = 0;
  bool empty() const { return native_count == 0 && caller_count == 0; }
};

// Unwinds the calling thread's stack into out: up to max_frames return addresses, those of
// libgpumem itself left out.
void capture_native(Captured& out, uint32_t max_frames) noexcept;

// Asks options.caller_frames for the caller's frames, as lines into out. Nothing while this thread
// is inside that callback already (an allocation it makes). owner marks the call as the
// recording's, for inside_caller_frames().
void capture_caller(Captured& out, const Options& options, const void* owner) noexcept;

// Whether this thread is inside the caller-frames callback of the recording owner.
bool inside_caller_frames(const void* owner) noexcept;

// A return address as the dynamic loader names it.
struct Symbol {
  uintptr_t address = 0;
  uintptr_t base = 0;  // its module's load address; 0 if no module holds it
  uintptr_t symbol_offset = 0;
  std::string module;  // the module's path, "" if unknown
  std::string name;    // the exported symbol, demangled; "" if none
};
Symbol symbolize(uintptr_t address);

// Hashes a string_view and the std::string keys alike, so that a lookup copies nothing.
struct TextHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using TextMap = std::unordered_map<std::string, uint64_t, TextHash, std::equal_to<>>;

// The writer's side of the definitions: which frames, modules and stacks the file has, and their
// numbers. The recorder's lock guards it.
class FrameTable {
 public:
  // The stack of c when every frame of it and the stack itself are defined already; else 0.
  uint64_t find(const Captured& c) const;
  // The native frames of c that are not defined yet.
  std::vector<uintptr_t> unknown_native(const Captured& c) const;
  // Defines what c needs that the file lacks, appending the definitions to out, and returns c's
  // stack. symbols holds those of c's undefined native frames. Room is made in out first, for the
  // definitions and `after` bytes more, so that what follows appends without allocating. Throws
  // std::bad_alloc, leaving out with whole definitions only.
  uint64_t define(const Captured& c, const std::vector<Symbol>& symbols, std::vector<unsigned char>& out, size_t after);

 private:
  uint64_t define_native(uintptr_t address, const Symbol& symbol, std::vector<unsigned char>& out);
  uint64_t define_caller(std::string_view text, std::vector<unsigned char>& out);
  // The ids of c's frames, in order; false if one is not defined.
  bool frame_ids(const Captured& c, uint64_t* ids) const;
  static std::string_view key(const uint64_t* ids, uint32_t count) {
    return {reinterpret_cast<const char*>(ids), count * sizeof *ids};
  }

  std::unordered_map<uintptr_t, uint64_t> native_;   // return address -> frame
  std::unordered_map<uintptr_t, uint64_t> modules_;  // load address -> module
  TextMap caller_;                                   // text -> frame
  TextMap stacks_;                                   // the frames' ids, as bytes -> stack
  uint64_t frames_ = 0, module_count_ = 0, stack_count_ = 0;
};

}  // namespace gpumem::trace
