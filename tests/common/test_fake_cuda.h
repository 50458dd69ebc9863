/* The fake driver's test hooks (tests/driver/fake_cuda.c), for suites run with GPUMEM_CUDA_DRIVER
 * naming it. dlopen by the same path finds the copy gpumem opened. */
#ifndef GPUMEM_TEST_FAKE_CUDA_H
#define GPUMEM_TEST_FAKE_CUDA_H

#include <dlfcn.h>
#include <stdlib.h>

#include "test_util.h"

static inline void* fake_symbol(const char* name) {
  static void* fake;
  if (fake == NULL) fake = dlopen(getenv("GPUMEM_CUDA_DRIVER"), RTLD_NOW | RTLD_LOCAL);
  assert_non_null(fake);
  void* symbol = dlsym(fake, name);
  assert_non_null(symbol);
  return symbol;
}

/* Every context gpumem pushed was popped again. */
static inline void assert_contexts_restored(void) {
  int (*depth)(void) = (int (*)(void))fake_symbol("fake_cuda_context_depth");
  assert_int_equal(depth(), 0);
}

#endif /* GPUMEM_TEST_FAKE_CUDA_H */
