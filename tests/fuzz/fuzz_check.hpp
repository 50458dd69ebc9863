// A fuzzer's failed check: says what failed and where, prints the input in hex, and aborts, which
// libFuzzer reads as a finding and saves the input for.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace fuzz_check {

inline const uint8_t* data;  // the input being run
inline size_t size;

// "<fuzzer>: check failed <where>: <message>", then extra lines (may be NULL), then the input.
[[noreturn]] inline void fail(const char* fuzzer, const char* where, const char* extra, const char* fmt, va_list ap) {
  std::fprintf(stderr, "%s: check failed%s%s: ", fuzzer, *where ? " " : "", where);
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n%s%s: input (%zu bytes): ", extra ? extra : "", fuzzer, size);
  for (size_t i = 0; i < size; ++i) std::fprintf(stderr, "%02x", data[i]);
  std::fprintf(stderr, "\n");
  std::abort();
}

}  // namespace fuzz_check

// Each fuzzer defines die(fmt, ...) over fuzz_check::fail with its name and where it is.
#define CHECK(cond, ...)           \
  do {                             \
    if (!(cond)) die(__VA_ARGS__); \
  } while (0)
