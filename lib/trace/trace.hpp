// Allocation traces: the recorder an allocator writes its events through, and the reader that
// gives them back. The file format is docs/trace-format.md. Knows nothing about CUDA.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "gpumem/core.h"
#include "trace/frames.hpp"

namespace gpumem::trace {

// The kinds of record; their values are the format's and never change.
enum class Event : uint8_t {
  kAlloc = 1,          // size asked, mem_size handed out, address
  kFree = 2,           // address
  kUpstreamAlloc = 3,  // a pool took a block of size bytes at address from its upstream
  kUpstreamFree = 4,   // a pool gave the block of size bytes at address back
  kAllocFailed = 5,    // size asked, status
};

// Records of format version 2 that define what the events' frames refer to; not events.
enum class Definition : uint8_t {
  kFrame = 6,   // a frame, numbered from 1 in the order of definition
  kModule = 7,  // a module that native frames name, numbered from 1
  kStack = 8,   // a stack: its frames' numbers, innermost first; numbered from 1
};

struct Record {
  Event event{};
  uint32_t thread = 0;   // a small number per thread of the recording process, from 1
  uint64_t time_ns = 0;  // since the recording started
  uint64_t stream = 0;
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t mem_size = 0;
  int32_t status = 0;
  uint64_t stack = 0;  // an allocation's or failed allocation's frames (Reader::stack()); 0 for none
};

// A frame definition as read, with its text for a person.
struct Frame {
  uint32_t kind = 0;  // GPUMEM_TRACE_FRAME_NATIVE or GPUMEM_TRACE_FRAME_CALLER
  uint64_t address = 0, module_offset = 0, symbol_offset = 0;
  const std::string* module = nullptr;  // the module's path; NULL for none
  std::string symbol, text;
};

struct Header {
  uint32_t version = 0;
  int32_t device = -1;         // the traced allocator's device; -1 for host memory
  uint64_t start_unix_ns = 0;  // wall-clock time at the start of the recording
  std::string kind;            // the traced allocator's kind ("pool", "device", ...)
};

constexpr char kMagic[8] = {'G', 'P', 'U', 'M', 'E', 'M', 'T', 'R'};
constexpr uint32_t kVersion = 1;        // the events alone
constexpr uint32_t kFramesVersion = 2;  // the events and the definitions of their frames

// Writes one allocator's events to a file, in the order they are recorded. Thread-safe. It is
// never deleted, so that a thread still inside record() when the recording stops finds it closed
// rather than gone; close() releases its buffer and file.
class Recorder {
 public:
  // A live recording carries this; stopping clears it, so a stale handle is refused.
  static constexpr uint64_t kLive = 0x7472616365616c21;  // "traceal!"
  uint64_t magic = kLive;
  // The allocator that records into it; cleared when that allocator is destroyed.
  std::atomic<void*> owner{nullptr};

  // Creates path and writes the header; throws GPUMEM_ERROR_IO.
  Recorder(const std::string& path, int device, const char* kind, const Options& options = {});
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;
  static void* operator new(size_t size);                 // kept reachable for leak checkers; never freed
  static void operator delete(void*, size_t) noexcept {}  // a constructor that threw: kept too

  // Appends a record; never throws. After a write failure nothing more is recorded and close()
  // reports it.
  void record(Event event, uint64_t size, uint64_t mem_size, const void* address, const void* stream,
              gpumem_status_t status) noexcept;
  // Waits for calls of the caller-frames callback in progress, writes what is buffered and closes
  // the file; throws GPUMEM_ERROR_IO for any failure since the start. Later calls, and records, do
  // nothing.
  void close();
  const std::string& path() const { return path_; }

 private:
  void record_with_frames(Event event, uint64_t size, uint64_t mem_size, const void* address, const void* stream,
                          gpumem_status_t status) noexcept;
  void capture(Captured& c) noexcept;
  // c's stack, defined in the file first where it is new; 0 if it cannot be. May let go of the
  // lock for a while.
  uint64_t stack_locked(std::unique_lock<std::mutex>& lock, const Captured& c) noexcept;
  void append_locked(Event event, uint64_t now, uint32_t thread, uint64_t size, uint64_t mem_size, const void* address,
                     const void* stream, gpumem_status_t status, uint64_t stack) noexcept;
  void flush_locked();  // under mutex_; notes a failure in error_

  const Options options_;
  const bool frames_;                // options_.any(), read on every record
  std::atomic<bool> open_{true};     // cleared by close() before it waits for the callbacks
  std::atomic<int> in_callback_{0};  // threads inside options_.caller_frames
  FrameTable table_;                 // under mutex_
  std::mutex mutex_;
  const std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<unsigned char> buffer_;
  uint64_t start_ns_ = 0;  // steady clock at the start
  uint64_t last_ns_ = 0;
  uint64_t last_address_ = 0;
  std::string error_;  // the first failure, reported by close()
};

// Reads a trace file written by Recorder, as a stream: the header is checked as its bytes arrive
// and records are decoded through a buffer of a fixed size, so neither a huge file nor a pipe
// that never ends (/dev/zero) grows its memory; only frame definitions are kept, as many as the
// file has distinct frames and stacks. Throws GPUMEM_ERROR_IO for a file that cannot be read or is
// not a gpumem trace, naming the offset of the first bad byte.
class Reader {
 public:
  static constexpr size_t kBufferBytes = 64 << 10;
  // The largest header it accepts: room for fields a later version may add, bounded so that a
  // damaged header size is refused rather than read through.
  static constexpr uint32_t kMaxHeaderBytes = 1 << 20;

  explicit Reader(const std::string& path);
  // Reads from fd, which it then owns, naming it name in its errors, at most buffer_bytes at a time
  // (small buffers let the fuzzer reach every place where a record can straddle two reads).
  Reader(int fd, std::string name, size_t buffer_bytes = kBufferBytes);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // The most bytes of frame definitions a reader keeps: a damaged file cannot make it grow past.
  static constexpr uint64_t kMaxDefinitionBytes = 256 << 20;

  const Header& header() const { return header_; }
  // The next record; false at the end of the file. Definitions are read on the way.
  bool next(Record& out);
  // A stack's frames (numbers for frame()), native first, each kind innermost first; empty for 0.
  std::span<const uint64_t> stack(uint64_t id) const {
    if (id == 0) return {};
    const auto [first, count] = stacks_[id - 1];
    return {stack_frames_.data() + first, count};
  }
  const Frame& frame(uint64_t id) const { return frames_[id - 1]; }

 private:
  void start(size_t buffer_bytes);  // the buffer and the header; closes the file if either fails
  void read_header();
  bool fill();                                // false at the end of the file
  size_t take(unsigned char* out, size_t n);  // up to n bytes; fewer only at the end of the file
  uint64_t varint();
  int64_t zigzag() {
    const uint64_t v = varint();
    return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
  }
  [[noreturn]] void bad(uint64_t offset, const std::string& what) const;
  void read_definition(Definition kind);  // the definition whose kind byte was just read
  std::string read_text(const char* what);
  uint64_t read_id(uint64_t defined, const char* what, bool none_allowed);
  void hold(uint64_t bytes);  // counts what definitions keep, against kMaxDefinitionBytes

  int fd_ = -1;
  std::string path_;
  std::vector<unsigned char> buffer_;
  size_t begin_ = 0, end_ = 0;  // the bytes read but not yet decoded: buffer_[begin_, end_)
  bool at_end_ = false;
  uint64_t at_ = 0;  // the offset in the file of buffer_[begin_]
  Header header_;
  uint64_t time_ns_ = 0;
  uint64_t address_ = 0;
  // Definitions, numbered from 1: a deque, so that what frame() returns stays where it is.
  std::deque<Frame> frames_;
  std::deque<std::string> modules_;
  std::vector<uint64_t> module_bases_;
  std::vector<std::pair<size_t, size_t>> stacks_;  // first and count in stack_frames_
  std::vector<uint64_t> stack_frames_;
  uint64_t held_ = 0;
};

}  // namespace gpumem::trace
