#include "trace/trace.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
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
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(GPUMEM_ERROR_IO, "cannot open the trace file %s: %s", path.c_str(), std::strerror(errno));
  data_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) fail(GPUMEM_ERROR_IO, "cannot read the trace file %s", path.c_str());
  if (data_.size() < kFixedHeader || std::memcmp(data_.data(), kMagic, sizeof kMagic) != 0)
    fail(GPUMEM_ERROR_IO, "%s is not a gpumem trace (it does not start with GPUMEMTR)", path.c_str());
  const unsigned char* p = data_.data();
  header_.version = get_le<uint32_t>(p + 8);
  if (header_.version != kVersion)
    fail(GPUMEM_ERROR_IO, "%s is a gpumem trace of format version %u; this gpumem reads version %u", path.c_str(),
         header_.version, kVersion);
  const auto header_bytes = get_le<uint32_t>(p + 12);
  header_.device = get_le<int32_t>(p + 16);
  header_.start_unix_ns = get_le<uint64_t>(p + 24);
  const auto kind_bytes = get_le<uint16_t>(p + 32);
  if (header_bytes < kFixedHeader + kind_bytes || header_bytes > data_.size()) {
    at_ = 12;
    bad("a header size that does not fit the file");
  }
  header_.kind.assign(reinterpret_cast<const char*>(p + kFixedHeader), kind_bytes);
  at_ = header_bytes;
}

void Reader::bad(const char* what) const {
  fail(GPUMEM_ERROR_IO, "the trace file %s is damaged at byte %zu: %s", path_.c_str(), at_, what);
}

uint64_t Reader::varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at_ >= data_.size()) bad("a record ends early");
    const unsigned char b = data_[at_++];
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  bad("a number longer than ten bytes");
}

bool Reader::next(Record& out) {
  if (at_ == data_.size()) return false;
  const unsigned char event = data_[at_++];
  if (event < static_cast<unsigned char>(Event::kAlloc) || event > static_cast<unsigned char>(Event::kAllocFailed)) {
    --at_;
    bad("an unknown record kind");
  }
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
