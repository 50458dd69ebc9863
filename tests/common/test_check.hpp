// CHECK for the C++ tests that drive the library's internals without cmocka: a failed condition
// is printed with its place and the test's name (a `test` string in scope) and counted in
// `failures`, and the test goes on.
#pragma once

#include <cstdio>

inline int failures = 0;

#define CHECK(cond)                                                    \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::printf("%s:%d: %s: %s\n", __FILE__, __LINE__, test, #cond); \
      ++failures;                                                      \
    }                                                                  \
  } while (0)
