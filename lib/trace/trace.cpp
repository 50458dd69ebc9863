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

#include "core/error.hpp"
#include "core/keep.hpp"

namespace gpumem::trace {
namespace {

constexpr size_t kFlushBytes = 64 << 10;
constexpr size_t kMaxRecordBytes = 1 + 6 * 10 + 10;  // the event byte and at most seven varints

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

// LEB128: seven bits a byte, low first, the high bit set on all but the last.
void put_varint(std::vector<unsigned char>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<unsigned char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<unsigned char>(v));
}

void put_zigzag(std::vector<unsigned char>& out, int64_t v) {
  put_varint(out, (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
}

template <class T>
void put_le(std::vector<unsigned char>& out, T v) {
  for (size_t i = 0; i < sizeof v; ++i) out.push_back(static_cast<unsigned char>(static_cast<uint64_t>(v) >> (8 * i)));
}

template <class T>
T get_le(const unsigned char* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}

// Header: magic, version, header bytes, device, flags, start time, kind (u16 length + bytes).
constexpr size_t kFixedHeader = 8 + 4 + 4 + 4 + 4 + 8 + 2;

}  // namespace

void* Recorder::operator new(size_t size) {
  void* p = ::operator new(size);
  keep_forever(p);
  return p;
}

Recorder::Recorder(const std::string& path, int device, const char* kind) : path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) fail(GPUMEM_ERROR_IO, "cannot create the trace file %s: %s", path.c_str(), std::strerror(errno));
  const size_t kind_bytes = std::min<size_t>(std::strlen(kind), 0xffff);
  buffer_.reserve(kFlushBytes + kMaxRecordBytes);
  buffer_.insert(buffer_.end(), std::begin(kMagic), std::end(kMagic));
  put_le<uint32_t>(buffer_, kVersion);
  put_le<uint32_t>(buffer_, static_cast<uint32_t>(kFixedHeader + kind_bytes));
  put_le<int32_t>(buffer_, device);
  put_le<uint32_t>(buffer_, 0);  // flags, none yet
  put_le<uint64_t>(buffer_, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                      std::chrono::system_clock::now().time_since_epoch())
                                                      .count()));
  put_le<uint16_t>(buffer_, static_cast<uint16_t>(kind_bytes));
  buffer_.insert(buffer_.end(), kind, kind + kind_bytes);
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
  const uint64_t now = steady_ns() - start_ns_;
  const uint32_t thread = this_thread();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!file_ || !error_.empty()) return;
  // Room was reserved at the start and after each flush, so nothing below allocates.
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
  std::lock_guard<std::mutex> lock(mutex_);
  if (!file_) return;
  flush_locked();
  if (std::fclose(file_) != 0 && error_.empty())
    error_ = format("closing the trace file %s failed: %s", path_.c_str(), std::strerror(errno));
  file_ = nullptr;
  std::vector<unsigned char>().swap(buffer_);
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
  if (header_.version != kVersion)
    fail(GPUMEM_ERROR_IO, "%s is a gpumem trace of format version %u; this gpumem reads version %u", path_.c_str(),
         header_.version, kVersion);
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
  if (!fill()) return false;
  const unsigned char event = buffer_[begin_];
  if (event < static_cast<unsigned char>(Event::kAlloc) || event > static_cast<unsigned char>(Event::kAllocFailed))
    bad(at_, "an unknown record kind");
  ++begin_;
  ++at_;
  Record r;
  r.event = static_cast<Event>(event);
  time_ns_ += varint();
  r.time_ns = time_ns_;
  r.thread = static_cast<uint32_t>(varint());
  r.stream = varint();
  address_ += static_cast<uint64_t>(zigzag());
  r.address = address_;
  r.size = varint();
  if (r.event == Event::kAlloc) r.mem_size = varint();
  if (r.event == Event::kAllocFailed) r.status = static_cast<int32_t>(zigzag());
  out = r;
  return true;
}

}  // namespace gpumem::trace
