/* The library as FFI bindings meet it (ctypes, Julia's ccall, Rust's libloading): opened by SONAME
 * through the loader's search path, every function resolved by name. This program is not linked
 * against gpumem; it includes the headers only for constants.
 *
 * usage: test_dlopen [--expect-no-driver]
 * With --expect-no-driver, GPUMEM_CUDA_DRIVER must name a driver that cannot load, and the device
 * count must say NO_DRIVER exactly. */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <gpumem/gpumem.h>

#define SONAME "libgpumem.so.0"

typedef uint32_t (*version_number_fn)(void);
typedef const char* (*string_fn)(void);
typedef const char* (*status_name_fn)(gpumem_status_t);
typedef gpumem_status_t (*device_get_count_fn)(int32_t*);

static void* library;
static int loaded_before_open;
static int expect_no_driver;

/* POSIX guarantees a data pointer from dlsym converts to a function pointer; ISO C does not, so the
 * bytes are copied rather than cast (-pedantic refuses the cast). */
static void resolve(const char* name, void* fn_out, size_t fn_size) {
  void* sym = dlsym(library, name);
  if (sym == NULL) {
    const char* why = dlerror();
    print_error("dlsym(\"%s\") failed: %s\n", name, why ? why : "no reason given");
    fail();
  }
  assert_int_equal(fn_size, sizeof sym);
  memcpy(fn_out, &sym, fn_size);
}

#define RESOLVE(name, fn) resolve((name), &(fn), sizeof(fn))

static int open_library(void** state) {
  (void)state;
#ifdef RTLD_NOLOAD
  /* Were the program linked against gpumem, every dlsym below would pass without proving anything. */
  void* already = dlopen(SONAME, RTLD_NOW | RTLD_NOLOAD);
  loaded_before_open = already != NULL;
  if (already) dlclose(already);
#endif
  library = dlopen(SONAME, RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    const char* why = dlerror();
    print_error("dlopen(\"%s\") failed (is its folder on LD_LIBRARY_PATH?): %s\n", SONAME,
                why ? why : "no reason given");
    return -1;
  }
  return 0;
}

static int close_library(void** state) {
  (void)state;
  /* Bindings unload the library (a Python interpreter exiting, a plugin unloaded): that must work. */
  if (dlclose(library) != 0) {
    const char* why = dlerror();
    print_error("dlclose failed: %s\n", why ? why : "no reason given");
    return -1;
  }
  return 0;
}

static void test_dlopen_program_not_linked_against_library(void** state) {
  (void)state;
  assert_false(loaded_before_open);
}

static void test_dlopen_version_matches_headers(void** state) {
  (void)state;
  version_number_fn version_number = NULL;
  string_fn version_string = NULL;
  RESOLVE("gpumem_version_number", version_number);
  RESOLVE("gpumem_version_string", version_string);
  assert_int_equal(version_number(), GPUMEM_VERSION_NUMBER);
  assert_string_equal(version_string(), GPUMEM_VERSION_STRING);
}

static void test_dlopen_status_name_resolves_by_name(void** state) {
  (void)state;
  status_name_fn status_name = NULL;
  RESOLVE("gpumem_status_name", status_name);
  assert_string_equal(status_name(GPUMEM_SUCCESS), "GPUMEM_SUCCESS");
  assert_string_equal(status_name(GPUMEM_ERROR_NO_DRIVER), "GPUMEM_ERROR_NO_DRIVER");
  assert_string_equal(status_name(-12345), "GPUMEM_UNKNOWN_STATUS");
}

static void test_dlopen_device_count_answers_without_crashing(void** state) {
  (void)state;
  device_get_count_fn device_get_count = NULL;
  string_fn last_error_detail = NULL;
  status_name_fn status_name = NULL;
  RESOLVE("gpumem_device_get_count", device_get_count);
  RESOLVE("gpumem_last_error_detail", last_error_detail);
  RESOLVE("gpumem_status_name", status_name);

  int32_t count = -7;
  const gpumem_status_t st = device_get_count(&count);
  print_message("gpumem_device_get_count: %s, count %d, detail \"%s\"\n", status_name(st), (int)count,
                st == GPUMEM_SUCCESS ? "" : last_error_detail());
  if (expect_no_driver) {
    assert_int_equal(st, GPUMEM_ERROR_NO_DRIVER);
    assert_non_null(strstr(last_error_detail(), "cannot load the CUDA driver"));
  }
  if (st == GPUMEM_SUCCESS) {
    assert_true(count >= 1);
  } else {
    /* No driver and no device are the only failures a machine without a GPU may give. */
    if (st != GPUMEM_ERROR_NO_DRIVER && st != GPUMEM_ERROR_NO_DEVICE) {
      print_error("unexpected %s: %s\n", status_name(st), last_error_detail());
      fail();
    }
    assert_int_equal(count, 0);
    assert_true(strlen(last_error_detail()) > 0);
  }
}

static void test_dlopen_error_detail_resolves_by_name(void** state) {
  (void)state;
  device_get_count_fn device_get_count = NULL;
  string_fn last_error_detail = NULL;
  RESOLVE("gpumem_device_get_count", device_get_count);
  RESOLVE("gpumem_last_error_detail", last_error_detail);
  assert_int_equal(device_get_count(NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  const char* detail = last_error_detail();
  assert_non_null(detail);
  assert_non_null(strstr(detail, "out_count is NULL"));
}

static void test_dlopen_internal_symbols_not_resolvable(void** state) {
  (void)state;
  /* Functions, typeinfo and a vtable of namespace gpumem as the implementation names them. The
   * library holds them (in .symtab), so only the export list keeps them out of reach. */
  static const char* const internal[] = {
      "_ZN6gpumem6formatB5cxx11EPKcz",     /* gpumem::format(const char*, ...) */
      "_ZN6gpumem4failEiPKcz",             /* gpumem::fail(int, const char*, ...) */
      "_ZN6gpumem11status_nameEi",         /* gpumem::status_name(int) */
      "_ZN6gpumem17last_error_detailEv",   /* gpumem::last_error_detail() */
      "_ZN6gpumem14record_failureEiPKci",  /* gpumem::record_failure(int, const char*, int) */
      "_ZN6gpumem6driver12device_countEv", /* gpumem::driver::device_count() */
      "_ZTIN6gpumem5ErrorE",               /* typeinfo for gpumem::Error */
      "_ZTVN6gpumem5ErrorE",               /* vtable for gpumem::Error */
  };
  for (size_t i = 0; i < sizeof internal / sizeof internal[0]; ++i) {
    if (dlsym(library, internal[i]) != NULL) {
      print_error("internal symbol %s is exported\n", internal[i]);
      fail();
    }
  }
  /* The lookups above must fail for visibility, not for a broken handle. */
  assert_non_null(dlsym(library, "gpumem_status_string"));
}

int main(int argc, char** argv) {
  expect_no_driver = argc > 1 && strcmp(argv[1], "--expect-no-driver") == 0;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dlopen_program_not_linked_against_library),
      cmocka_unit_test(test_dlopen_version_matches_headers),
      cmocka_unit_test(test_dlopen_status_name_resolves_by_name),
      cmocka_unit_test(test_dlopen_device_count_answers_without_crashing),
      cmocka_unit_test(test_dlopen_error_detail_resolves_by_name),
      cmocka_unit_test(test_dlopen_internal_symbols_not_resolvable),
  };
  return cmocka_run_group_tests(tests, open_library, close_library);
}
