// The trace file's numbers (docs/trace-format.md): LEB128 varints, zigzag for signed ones,
// little-endian fixed-size fields, and length-prefixed strings. Shared by the writer's parts.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace gpumem::trace {

// Bytes a varint takes at most.
constexpr size_t kMaxVarintBytes = 10;

// LEB128: seven bits a byte, low first, the high bit set on all but the last.
inline void put_varint(std::vector<unsigned char>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<unsigned char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<unsigned char>(v));
}

inline void put_zigzag(std::vector<unsigned char>& out, int64_t v) {
  put_varint(out, (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
}

// A string: its length as a varint, then its bytes.
inline void put_string(std::vector<unsigned char>& out, std::string_view s) {
  put_varint(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
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

}  // namespace gpumem::trace
