#include "trace/trace.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <iterator>
#include <thread>

#include "core/error.hpp"
#include "core/keep.hpp"
#include "trace/coding.hpp"

namespace gpumem::trace {
namespace {

constexpr size_t kFlushBytes = 64 << 10;
constexpr size_t kMaxRecordBytes = 1 + 8 * kMaxVarintBytes;  // the event byte, seven varints and a stack

std::atomic<uint32_t> next_thread{1};
thread_local uint32_t thread_number = 0;

uint32_t this_thread() {
  if (!thread_number) thread_number = next_thread.fetch_add(1, std::memory_order_relaxed);
  return thread_number;
}

uint64_t steady_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

bool carries_frames(Event event) { return event == Event::kAlloc || event == Event::kAllocFailed; }

// A native frame on one line: "symbol+0x1a (libfoo.so+0x1234)", with the module's file name.
std::string native_text(const Frame& f) {
  if (!f.module) return format("0x%" PRIx64, f.address);
  const size_t slash = f.module->rfind('/');
  const char* file = f.module->c_str() + (slash == std::string::npos ? 0 : slash + 1);
  if (f.symbol.empty()) return format("%s+0x%" PRIx64, file, f.module_offset);
  return format("%s+0x%" PRIx64 " (%s+0x%" PRIx64 ")", f.symbol.c_str(), f.symbol_offset, file, f.module_offset);
}

// Header: magic, version, header bytes, device, flags, start time, kind (u16 length + bytes).
constexpr size_t kFixedHeader = 8 + 4 + 4 + 4 + 4 + 8 + 2;

}  // namespace

void* Recorder::operator new(size_t size) {
  void* p = ::operator new(size);
  keep_forever(p);
  return p;
}

Recorder::Recorder(const std::string& path, int device, const char* kind, const Options& options)
    : options_(options), frames_(options.any()), path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) fail(GPUMEM_ERROR_IO, "cannot create the trace file %s: %s", path.c_str(), std::strerror(errno));
  const size_t kind_bytes = std::min<size_t>(std::strlen(kind), 0xffff);
  buffer_.reserve(kFlushBytes + kMaxRecordBytes);
  buffer_.insert(buffer_.end(), std::begin(kMagic), std::end(kMagic));
  put_le<uint32_t>(buffer_, frames_ ? kFramesVersion : kVersion);  // version 1 readers read what has no frames
  put_le<uint32_t>(buffer_, static_cast<uint32_t>(kFixedHeader + kind_bytes));
  put_le<int32_t>(buffer_, device);
  put_le<uint32_t>(buffer_, 0);  // flags, none yet
  put_le<uint64_t>(buffer_, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                      std::chrono::system_clock::now().time_since_epoch())
                                                      .count()));
  put_le<uint16_t>(buffer_, static_cast<uint16_t>(kind_bytes));
  buffer_.insert(buffer_.end(), kind, kind + kind_bytes);
  if (options_.native_frames) {
    Captured warm;  // the first unwind finds libgpumem's own code and sets the unwinder up: not in a record
    capture_native(warm, 1);
  }
  start_ns_ = steady_ns();
  flush_locked();
  if (!error_.empty()) {
    std::fclose(file_);
    file_ = nullptr;
    fail(GPUMEM_ERROR_IO, "%s", error_.c_str());
  }
}

void Recorder::record(Event event, uint64_t size, uint64_t mem_size, const void* address, const void* stream,
                      gpumem_status_t status) noexcept {
  if (frames_) return record_with_frames(event, size, mem_size, address, stream, status);
  const uint64_t now = steady_ns() - start_ns_;
  const uint32_t thread = this_thread();
  std::lock_guard<std::mutex> lock(mutex_);
  append_locked(event, now, thread, size, mem_size, address, stream, status, 0);
}

void Recorder::record_with_frames(Event event, uint64_t size, uint64_t mem_size, const void* address,
                                  const void* stream, gpumem_status_t status) noexcept {
  Captured c;
  const bool carries = carries_frames(event);
  if (carries) capture(c);  // before the lock: other threads record meanwhile
  // After the capture, whose unwind and callback may take microseconds: the record's time is when
  // the allocator answered, as a recording without frames has it.
  const uint64_t now = steady_ns() - start_ns_;
  const uint32_t thread = this_thread();
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t stack = carries && !c.empty() && file_ && error_.empty() ? stack_locked(lock, c) : 0;
  append_locked(event, now, thread, size, mem_size, address, stream, status, stack);
}

void Recorder::capture(Captured& c) noexcept {
  if (options_.native_frames) capture_native(c, options_.max_frames);
  if (!options_.caller_frames) return;
  // Counted before open_ is read, and close() clears open_ before it reads the count: either this
  // call finds the recording closed, or close() waits for it to leave the callback.
  in_callback_.fetch_add(1, std::memory_order_seq_cst);
  if (open_.load(std::memory_order_seq_cst)) capture_caller(c, options_, this);
  in_callback_.fetch_sub(1, std::memory_order_release);
}

uint64_t Recorder::stack_locked(std::unique_lock<std::mutex>& lock, const Captured& c) noexcept {
  try {
    if (const uint64_t known = table_.find(c)) return known;
    const std::vector<uintptr_t> unknown = table_.unknown_native(c);
    std::vector<Symbol> symbols;
    if (!unknown.empty()) {
      // dladdr() takes the dynamic loader's lock, which a thread inside dlopen() holds while a
      // library's constructor runs, and that constructor may be allocating, waiting for this
      // lock: new return addresses are looked up without it.
      lock.unlock();
      bool found = true;
      try {
        for (const uintptr_t pc : unknown) symbols.push_back(symbolize(pc));
      } catch (...) {
        found = false;
      }
      lock.lock();
      if (!found || !file_ || !error_.empty()) return 0;
    }
    return table_.define(c, symbols, buffer_, kMaxRecordBytes);
  } catch (...) {
    return 0;  // no memory for the tables: the record goes without its frames
  }
}

void Recorder::append_locked(Event event, uint64_t now, uint32_t thread, uint64_t size, uint64_t mem_size,
                             const void* address, const void* stream, gpumem_status_t status, uint64_t stack) noexcept {
  if (!file_ || !error_.empty()) return;
  // Room was reserved at the start, after each flush and after new definitions, so nothing below
  // allocates.
  buffer_.push_back(static_cast<unsigned char>(event));
  put_varint(buffer_, now >= last_ns_ ? now - last_ns_ : 0);  // one clock; threads race to the lock
  last_ns_ = std::max(now, last_ns_);
  put_varint(buffer_, thread);
  put_varint(buffer_, reinterpret_cast<uintptr_t>(stream));
  const auto addr = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(address));
  put_zigzag(buffer_, static_cast<int64_t>(addr - last_address_));
  last_address_ = addr;
  put_varint(buffer_, size);
  if (event == Event::kAlloc) put_varint(buffer_, mem_size);
  if (event == Event::kAllocFailed) put_zigzag(buffer_, status);
  if (frames_ && carries_frames(event)) put_varint(buffer_, stack);
  if (buffer_.size() >= kFlushBytes) flush_locked();
}

void Recorder::flush_locked() {
  if (buffer_.empty() || !error_.empty()) return;
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size())
    error_ = format("writing the trace file %s failed: %s; nothing after that was recorded", path_.c_str(),
                    std::strerror(errno));
  buffer_.clear();  // keeps its capacity: the next records need no allocation
}

void Recorder::close() {
  open_.store(false, std::memory_order_seq_cst);
  // A callback that stops its own recording is counted too, and does not wait for itself.
  const int own = inside_caller_frames(this) ? 1 : 0;
  while (in_callback_.load(std::memory_order_acquire) > own) std::this_thread::sleep_for(std::chrono::microseconds(50));
  std::lock_guard<std::mutex> lock(mutex_);
  if (!file_) return;
  flush_locked();
  if (std::fclose(file_) != 0 && error_.empty())
    error_ = format("closing the trace file %s failed: %s", path_.c_str(), std::strerror(errno));
  file_ = nullptr;
  std::vector<unsigned char>().swap(buffer_);
  // The Recorder itself is never freed (a late record() may still reach it), so what the file
  // defined would otherwise be held for the process's life.
  table_ = FrameTable();
  if (!error_.empty()) fail(GPUMEM_ERROR_IO, "%s", error_.c_str());
}

Reader::Reader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(GPUMEM_ERROR_IO, "cannot open the trace file %s: %s", path.c_str(), std::strerror(errno));
  start(kBufferBytes);
}

Reader::Reader(int fd, std::string name, size_t buffer_bytes) : fd_(fd), path_(std::move(name)) { start(buffer_bytes); }

Reader::~Reader() { ::close(fd_); }

void Reader::start(size_t buffer_bytes) {
  try {
    buffer_.resize(std::max<size_t>(buffer_bytes, 1));
    read_header();
  } catch (...) {
    ::close(fd_);  // the destructor does not run for a constructor that throws
    throw;
  }
}

// Each part is checked as soon as its bytes are in, so a file that is not a trace is refused after
// its first eight bytes, however long it is and however slowly a pipe delivers it.
void Reader::read_header() {
  unsigned char fixed[kFixedHeader];
  if (take(fixed, sizeof kMagic) < sizeof kMagic || std::memcmp(fixed, kMagic, sizeof kMagic) != 0)
    fail(GPUMEM_ERROR_IO, "%s is not a gpumem trace (it does not start with GPUMEMTR)", path_.c_str());
  if (take(fixed + 8, 4) < 4) bad(at_, "the header ends early");
  header_.version = get_le<uint32_t>(fixed + 8);
  if (header_.version != kVersion && header_.version != kFramesVersion)
    fail(GPUMEM_ERROR_IO, "%s is a gpumem trace of format version %u; this gpumem reads versions %u and %u",
         path_.c_str(), header_.version, kVersion, kFramesVersion);
  if (take(fixed + 12, kFixedHeader - 12) < kFixedHeader - 12) bad(at_, "the header ends early");
  const auto header_bytes = get_le<uint32_t>(fixed + 12);
  header_.device = get_le<int32_t>(fixed + 16);
  header_.start_unix_ns = get_le<uint64_t>(fixed + 24);
  const auto kind_bytes = get_le<uint16_t>(fixed + 32);
  if (header_bytes < kFixedHeader + kind_bytes)
    bad(12, format("a header size of %u bytes, less than the %zu that its fields and its %u-byte kind take",
                   header_bytes, kFixedHeader + kind_bytes, kind_bytes));
  if (header_bytes > kMaxHeaderBytes)
    bad(12, format("a header size of %u bytes, more than the %u a gpumem trace's header may have", header_bytes,
                   kMaxHeaderBytes));
  header_.kind.resize(kind_bytes);
  if (take(reinterpret_cast<unsigned char*>(header_.kind.data()), kind_bytes) < kind_bytes)
    bad(12, format("a header size of %u bytes, past the end of the file at byte %" PRIu64, header_bytes, at_));
  // Fields of a later revision, which this version does not know, are skipped.
  while (at_ < header_bytes) {
    if (!fill())
      bad(12, format("a header size of %u bytes, past the end of the file at byte %" PRIu64, header_bytes, at_));
    const size_t skip = std::min<uint64_t>(end_ - begin_, header_bytes - at_);
    begin_ += skip;
    at_ += skip;
  }
}

bool Reader::fill() {
  if (begin_ < end_) return true;
  if (at_end_) return false;
  ssize_t n;
  do {
    n = ::read(fd_, buffer_.data(), buffer_.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0)
    fail(GPUMEM_ERROR_IO, "reading the trace file %s failed at byte %" PRIu64 ": %s", path_.c_str(), at_,
         std::strerror(errno));
  begin_ = 0;
  end_ = static_cast<size_t>(n);
  at_end_ = n == 0;
  return n > 0;
}

size_t Reader::take(unsigned char* out, size_t n) {
  size_t got = 0;
  while (got < n && fill()) {
    const size_t k = std::min(n - got, end_ - begin_);
    std::memcpy(out + got, buffer_.data() + begin_, k);
    begin_ += k;
    at_ += k;
    got += k;
  }
  return got;
}

void Reader::bad(uint64_t offset, const std::string& what) const {
  fail(GPUMEM_ERROR_IO, "the trace file %s is damaged at byte %" PRIu64 ": %s", path_.c_str(), offset, what.c_str());
}

uint64_t Reader::varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (!fill()) bad(at_, "a record ends early");
    const unsigned char b = buffer_[begin_];
    // The tenth byte holds the 64th bit only: anything more would be lost, so it is damage.
    if (shift == 63 && (b & 0x7e)) bad(at_, "a number larger than 64 bits");
    ++begin_;
    ++at_;
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  bad(at_, "a number longer than ten bytes");
}

bool Reader::next(Record& out) {
  for (;;) {
    if (!fill()) return false;
    const unsigned char kind = buffer_[begin_];
    const bool definition = header_.version >= kFramesVersion &&
                            kind >= static_cast<unsigned char>(Definition::kFrame) &&
                            kind <= static_cast<unsigned char>(Definition::kStack);
    if (!definition &&
        (kind < static_cast<unsigned char>(Event::kAlloc) || kind > static_cast<unsigned char>(Event::kAllocFailed)))
      bad(at_, "an unknown record kind");
    ++begin_;
    ++at_;
    if (definition) {
      read_definition(static_cast<Definition>(kind));
      continue;
    }
    Record r;
    r.event = static_cast<Event>(kind);
    time_ns_ += varint();
    r.time_ns = time_ns_;
    r.thread = static_cast<uint32_t>(varint());
    r.stream = varint();
    address_ += static_cast<uint64_t>(zigzag());
    r.address = address_;
    r.size = varint();
    if (r.event == Event::kAlloc) r.mem_size = varint();
    if (r.event == Event::kAllocFailed) r.status = static_cast<int32_t>(zigzag());
    if (header_.version >= kFramesVersion && carries_frames(r.event)) r.stack = read_id(stacks_.size(), "stack", true);
    out = r;
    return true;
  }
}

std::string Reader::read_text(const char* what) {
  const uint64_t at = at_;
  const uint64_t n = varint();
  if (n > kMaxText)
    bad(at, format("%s of %" PRIu64 " bytes, more than the %zu a frame's text, symbol or module path may have", what, n,
                   kMaxText));
  std::string text(n, '\0');
  const uint64_t bytes_at = at_;
  if (take(reinterpret_cast<unsigned char*>(text.data()), n) < n) bad(at_, "a record ends early");
  // The C API hands texts out as C strings, which a NUL would cut short.
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    bad(bytes_at + nul, format("a NUL byte in %s", what));
  return text;
}

// A number that refers to a definition: one made before it, or 0 for none where none is allowed.
uint64_t Reader::read_id(uint64_t defined, const char* what, bool none_allowed) {
  const uint64_t at = at_;
  const uint64_t id = varint();
  if ((id == 0 && !none_allowed) || id > defined)
    bad(at, format("%s %" PRIu64 ", which no definition before it defines", what, id));
  return id;
}

void Reader::hold(uint64_t bytes) {
  held_ += bytes;
  if (held_ > kMaxDefinitionBytes)
    bad(at_, format("more frame definitions than a reader keeps (%" PRIu64 " bytes)", kMaxDefinitionBytes));
}

void Reader::read_definition(Definition kind) {
  if (kind == Definition::kModule) {
    const uint64_t base = varint();
    std::string path = read_text("a module's path");
    hold(sizeof path + path.size() + sizeof base);
    modules_.push_back(std::move(path));
    module_bases_.push_back(base);
  } else if (kind == Definition::kStack) {
    const uint64_t at = at_;
    const uint64_t count = varint();
    if (count == 0 || count > 2 * kMaxFrames)
      bad(at, format("a stack of %" PRIu64 " frames; a stack has 1 to %u", count, 2 * kMaxFrames));
    hold((count + 2) * sizeof(uint64_t));
    const size_t first = stack_frames_.size();
    for (uint64_t i = 0; i < count; ++i) stack_frames_.push_back(read_id(frames_.size(), "frame", false));
    stacks_.emplace_back(first, static_cast<size_t>(count));
  } else {
    const uint64_t at = at_;
    Frame f;
    // Compared before it is narrowed: a kind of 2^32 + 1 is damage, not a native frame.
    const uint64_t frame_kind = varint();
    if (frame_kind != GPUMEM_TRACE_FRAME_NATIVE && frame_kind != GPUMEM_TRACE_FRAME_CALLER)
      bad(at, "an unknown kind of frame");
    f.kind = static_cast<uint32_t>(frame_kind);
    if (f.kind == GPUMEM_TRACE_FRAME_NATIVE) {
      f.address = varint();
      const uint64_t module = read_id(modules_.size(), "module", true);
      f.symbol_offset = varint();
      f.symbol = read_text("a symbol");
      if (module) {
        f.module = &modules_[module - 1];
        f.module_offset = f.address - module_bases_[module - 1];
      }
      f.text = native_text(f);
    } else {
      f.text = read_text("a frame's text");
    }
    hold(sizeof f + f.symbol.size() + f.text.size());
    frames_.push_back(std::move(f));
  }
}

}  // namespace gpumem::trace
