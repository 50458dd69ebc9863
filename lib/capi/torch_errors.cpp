// c10::Error and c10::OutOfMemoryError without PyTorch's headers: libc10.so exports Error's
// constructor and both classes' type information and virtual tables, which is all it takes to
// build an Error and give it OutOfMemoryError's dynamic type (OutOfMemoryError adds no members:
// it is Error with another vtable). Each symbol is looked up by its Itanium name; a PyTorch that
// lacks one (another C++ library ABI, a renamed member) gets no exception and sees the NULL.
#include "capi/torch_errors.hpp"

#include <cxxabi.h>
#include <dlfcn.h>

#include <atomic>
#include <string>
#include <typeinfo>

#include "gpumem/core.h"

namespace gpumem::capi {
namespace {

// c10::SourceLocation, which Error's constructor takes by value.
struct SourceLocation {
  const char* function;
  const char* file;
  uint32_t line;
};

using ErrorConstructor = void (*)(void* self, SourceLocation where, std::string message);

struct C10 {
  ErrorConstructor construct;
  std::type_info* error_type;
  std::type_info* oom_type;
  void* oom_vtable;  // the address point: the symbol plus offset-to-top and type-info slots
};

// Far above sizeof(c10::Error) (128 bytes in PyTorch 2.11): the exception is never copied, so
// spare room costs nothing, and a member PyTorch adds later still fits.
constexpr size_t kErrorRoom = 1024;

// Found once; nullptr until a libc10 with every symbol is loaded (PyTorch may be imported late).
std::atomic<const C10*> found{nullptr};

const C10* c10() {
  if (const C10* c = found.load(std::memory_order_acquire)) return c;
  void* lib = dlopen("libc10.so", RTLD_NOW | RTLD_NOLOAD);  // PyTorch's, only if already loaded
  if (!lib) return nullptr;
  // The complete-object constructor (C1); a class with no virtual base may export only the base one (C2),
  // which is the same code.
  void* construct =
      dlsym(lib, "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
  if (!construct)
    construct = dlsym(lib, "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
  void* error_type = dlsym(lib, "_ZTIN3c105ErrorE");
  void* oom_type = dlsym(lib, "_ZTIN3c1016OutOfMemoryErrorE");
  auto* oom_vtable = static_cast<void**>(dlsym(lib, "_ZTVN3c1016OutOfMemoryErrorE"));
  dlclose(lib);  // PyTorch keeps it loaded: this only drops the reference RTLD_NOLOAD took
  if (!construct || !error_type || !oom_type || !oom_vtable) return nullptr;
  static const C10 symbols{reinterpret_cast<ErrorConstructor>(construct), static_cast<std::type_info*>(error_type),
                           static_cast<std::type_info*>(oom_type), oom_vtable + 2};
  found.store(&symbols, std::memory_order_release);
  return &symbols;
}

// The destructor __cxa_throw runs when the handler is done: the object's own, through its vtable
// (the complete-object destructor is the first slot of a class whose root is std::exception).
void destroy(void* error) { (*static_cast<void (***)(void*)>(error))[0](error); }

}  // namespace

void throw_as_torch(int32_t status, const char* detail) {
  const C10* c = c10();
  if (!c) return;
  void* error = __cxxabiv1::__cxa_allocate_exception(kErrorRoom);
  try {
    c->construct(error, SourceLocation{"gpumem_torch_alloc_raising", "gpumem", 0}, std::string(detail));
  } catch (...) {
    __cxxabiv1::__cxa_free_exception(error);
    return;
  }
  const bool oom = status == GPUMEM_ERROR_OUT_OF_MEMORY;
  if (oom) *static_cast<void**>(error) = c->oom_vtable;
  __cxxabiv1::__cxa_throw(error, oom ? c->oom_type : c->error_type, destroy);
}

}  // namespace gpumem::capi
