// c10::Error and c10::OutOfMemoryError without PyTorch's headers: PyTorch's libraries export
// Error's constructor and both classes' type information and virtual tables, which is all it takes to
// build an Error and give it OutOfMemoryError's dynamic type (OutOfMemoryError adds no members:
// it is Error with another vtable). Each symbol is looked up by its Itanium name; a PyTorch that
// lacks one (another C++ library ABI, a renamed member) gets no exception and sees the NULL.
#include "capi/torch_errors.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <string>
#include <typeinfo>
#include <vector>

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

// The paths of the PyTorch libraries loaded in the process. OutOfMemoryError's type information
// and vtable are emitted where it is used (libc10_cuda.so, libtorch_python.so), not always in
// libc10.so, and PyTorch loads its libraries RTLD_LOCAL, so each is searched in turn.
std::vector<std::string> torch_libraries() {
  std::vector<std::string> paths;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const char* path = info->dlpi_name;
        if (path && (std::strstr(path, "libc10") || std::strstr(path, "libtorch")))
          static_cast<std::vector<std::string>*>(data)->emplace_back(path);
        return 0;
      },
      &paths);
  return paths;
}

// dlsym of `name` in the first of `libraries` that has it; opened after the walk, which holds
// the loader's lock.
void* torch_symbol(const std::vector<std::string>& libraries, const char* name) {
  for (const std::string& path : libraries) {
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);  // loaded already, or nothing
    if (!lib) continue;
    void* found = dlsym(lib, name);
    dlclose(lib);  // PyTorch keeps it loaded: this only drops the reference RTLD_NOLOAD took
    if (found) return found;
  }
  return nullptr;
}

const C10* c10() {
  if (const C10* c = found.load(std::memory_order_acquire)) return c;
  const std::vector<std::string> libs = torch_libraries();
  // The complete-object constructor (C1); a class with no virtual base may export only the base
  // one (C2), which is the same code.
  void* construct =
      torch_symbol(libs, "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
  if (!construct)
    construct =
        torch_symbol(libs, "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
  void* error_type = torch_symbol(libs, "_ZTIN3c105ErrorE");
  void* oom_type = torch_symbol(libs, "_ZTIN3c1016OutOfMemoryErrorE");
  auto* oom_vtable = static_cast<void**>(torch_symbol(libs, "_ZTVN3c1016OutOfMemoryErrorE"));
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
