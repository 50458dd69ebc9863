// The VM allocator's address ranges (the interface a pool grows its segments through) against the
// fake driver, with two devices that reach each other: reserve, map, unmap and unreserve as the
// driver sees them, one physical allocation per unit (of 32 MiB by default), the statistics and
// info they change, the access of every unit after peer access changes, the refusals of what a
// pool must never ask, and threads mapping and unmapping while peer access changes. Links the
// library's objects: the ranges are not in the ABI.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "alloc/vm.hpp"
#include "pool/pool.hpp"
#include "test_check.hpp"

using gpumem::Error;
using gpumem::alloc::Allocator;
using gpumem::alloc::Ranges;
using gpumem::alloc::VmAllocator;

namespace {

// Ranges::unmap, for calls that unmap all or throw.
void unmap_all(Ranges* r, uintptr_t p, size_t size) {
  size_t unmapped = 0;
  r->unmap(p, size, unmapped);
}

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kUnit = 2 * kMiB;          // the fake's granularity, the finest map unit
constexpr size_t kDefaultUnit = 32 * kMiB;  // the map unit of map_unit 0
constexpr int kNone = CU_MEM_ACCESS_FLAGS_PROT_NONE, kReadWrite = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

void* fake_symbol(const char* name) {
  static void* fake = dlopen(std::getenv("GPUMEM_CUDA_DRIVER"), RTLD_NOW | RTLD_LOCAL);
  void* symbol = fake ? dlsym(fake, name) : nullptr;
  if (!symbol) {
    std::printf("the fake driver's %s is missing\n", name);
    std::exit(1);
  }
  return symbol;
}
size_t fake_reserved() { return reinterpret_cast<size_t (*)()>(fake_symbol("fake_cuda_vmm_reserved_bytes"))(); }
size_t fake_mapped() { return reinterpret_cast<size_t (*)()>(fake_symbol("fake_cuda_vmm_mapped_bytes"))(); }
int fake_access(uintptr_t p, int device) {
  return reinterpret_cast<int (*)(const void*, int)>(fake_symbol("fake_cuda_vmm_access"))(reinterpret_cast<void*>(p),
                                                                                          device);
}
size_t fake_calls(const char* name) {
  return reinterpret_cast<size_t (*)(const char*)>(fake_symbol("fake_cuda_vmm_calls"))(name);
}

// map_unit 0: the default.
std::unique_ptr<VmAllocator> make(uint64_t range_size, uint64_t map_unit) {
  gpumem_vm_params_t params = GPUMEM_VM_PARAMS_INIT;
  params.range_size = range_size;
  params.map_unit = map_unit;
  return std::unique_ptr<VmAllocator>(static_cast<VmAllocator*>(gpumem::alloc::make_vm(params)));
}

// The status a call throws, or GPUMEM_SUCCESS.
template <class F>
gpumem_status_t status_of(F&& f, std::string* detail = nullptr) {
  try {
    f();
    return GPUMEM_SUCCESS;
  } catch (const Error& e) {
    if (detail) *detail = e.what();
    return e.status();
  }
}

bool units_have(uintptr_t p, size_t size, int device, int access) {
  for (size_t at = 0; at < size; at += kUnit)
    if (fake_access(p + at, device) != access) return false;
  return true;
}

void test_map_unmap_and_counts() {
  const char* test = "map_unmap_and_counts";
  auto vm = make(64 * kMiB, kUnit);
  Ranges* r = vm->ranges();
  CHECK(r == static_cast<Ranges*>(vm.get()));
  CHECK(r->unit() == kUnit);
  CHECK(r->range_size() == 64 * kMiB);

  const uintptr_t base = r->reserve(64 * kMiB);
  CHECK(base % kUnit == 0);
  CHECK(fake_reserved() == 64 * kMiB);
  CHECK(fake_mapped() == 0);
  CHECK(vm->info().reserved_bytes == 64 * kMiB);
  CHECK(vm->stats().reserved == 0);  // addresses are not memory

  const size_t creates = fake_calls("cuMemCreate"), maps = fake_calls("cuMemMap"),
               accesses = fake_calls("cuMemSetAccess");
  r->map(base, 3 * kUnit);
  r->map(base + 3 * kUnit, 2 * kUnit);
  CHECK(fake_calls("cuMemCreate") - creates == 5);
  CHECK(fake_calls("cuMemMap") - maps == 5);
  CHECK(fake_calls("cuMemSetAccess") - accesses == 2);
  CHECK(fake_mapped() == 5 * kUnit);
  CHECK(units_have(base, 5 * kUnit, 0, kReadWrite));
  CHECK(units_have(base, 5 * kUnit, 1, kNone));
  gpumem::alloc::Stats s = vm->stats();
  CHECK(s.reserved == 5 * kUnit);
  CHECK(s.upstream_allocs == 2);
  CHECK(s.in_use == 0);
  CHECK(vm->info().mapped_bytes == 5 * kUnit);

  // The two maps are one span: one access call opens it to the peer.
  const size_t before_enable = fake_calls("cuMemSetAccess");
  vm->set_peer_access(1, true);
  CHECK(fake_calls("cuMemSetAccess") - before_enable == 1);
  CHECK(units_have(base, 5 * kUnit, 1, kReadWrite));

  // Unmapping the middle waits for the device and unmaps unit by unit, leaving two spans.
  const size_t synchronizes = fake_calls("cuCtxSynchronize"), unmaps = fake_calls("cuMemUnmap");
  unmap_all(r, base + kUnit, 2 * kUnit);
  CHECK(fake_calls("cuCtxSynchronize") - synchronizes == 1);
  CHECK(fake_calls("cuMemUnmap") - unmaps == 2);
  CHECK(fake_mapped() == 3 * kUnit);
  CHECK(fake_access(base + kUnit, 1) == -1);
  s = vm->stats();
  CHECK(s.reserved == 3 * kUnit);
  CHECK(s.upstream_frees == 1);
  CHECK(s.peak_reserved == 5 * kUnit);

  const size_t before_disable = fake_calls("cuMemSetAccess");
  vm->set_peer_access(1, false);
  CHECK(fake_calls("cuMemSetAccess") - before_disable == 2);
  CHECK(units_have(base, kUnit, 1, kNone));
  CHECK(units_have(base + 3 * kUnit, 2 * kUnit, 1, kNone));

  // Mapped again, between the two: no access for the peer, which was taken away.
  r->map(base + kUnit, 2 * kUnit);
  CHECK(units_have(base, 5 * kUnit, 0, kReadWrite));
  CHECK(units_have(base, 5 * kUnit, 1, kNone));
  vm->set_peer_access(1, true);
  CHECK(units_have(base, 5 * kUnit, 1, kReadWrite));

  // What a pool must never ask.
  std::string detail;
  CHECK(status_of([&] { r->map(base, kUnit); }, &detail) == GPUMEM_ERROR_INTERNAL);
  CHECK(detail.find("with nothing mapped there yet") != std::string::npos);
  CHECK(status_of([&] { r->map(base + 5 * kUnit + 512, kUnit); }) == GPUMEM_ERROR_INTERNAL);
  CHECK(status_of([&] { r->map(base + 5 * kUnit, kUnit + 512); }) == GPUMEM_ERROR_INTERNAL);
  CHECK(status_of([&] { r->map(base + 63 * kUnit / 2, 2 * kUnit); }) == GPUMEM_ERROR_INTERNAL);
  CHECK(status_of([&] { r->map(base + 31 * kUnit, 2 * kUnit); }) == GPUMEM_ERROR_INTERNAL);  // past the end
  CHECK(status_of([&] { unmap_all(r, base + 5 * kUnit, kUnit); }) == GPUMEM_ERROR_INTERNAL);
  CHECK(status_of([&] { unmap_all(r, base + 4 * kUnit, 2 * kUnit); }) == GPUMEM_ERROR_INTERNAL);
  CHECK(status_of([&] { r->reserve(0); }) == GPUMEM_ERROR_INTERNAL);
  CHECK(status_of([&] { r->reserve(kUnit + 512); }) == GPUMEM_ERROR_INTERNAL);
  CHECK(status_of([&] { r->unreserve(base, 32 * kMiB); }) == GPUMEM_ERROR_INTERNAL);
  // A direct allocation is one physical allocation, unmapped whole; none of a pool's calls reach it.
  const size_t direct_creates = fake_calls("cuMemCreate");
  void* direct = vm->allocate(2 * kUnit, nullptr);
  const uintptr_t d = reinterpret_cast<uintptr_t>(direct);
  CHECK(fake_calls("cuMemCreate") - direct_creates == 1);
  CHECK(status_of([&] { unmap_all(r, d, kUnit); }) == GPUMEM_ERROR_INTERNAL);
  CHECK(status_of([&] { unmap_all(r, d, 2 * kUnit); }) == GPUMEM_ERROR_INTERNAL);
  CHECK(status_of([&] { r->unreserve(d, 2 * kUnit); }) == GPUMEM_ERROR_INTERNAL);
  // A direct allocation is opened to the peer like the rest.
  CHECK(fake_access(d, 1) == kReadWrite);
  CHECK(fake_access(d + kUnit, 1) == kReadWrite);
  const size_t direct_unmaps = fake_calls("cuMemUnmap");
  vm->deallocate(direct, nullptr);
  CHECK(fake_calls("cuMemUnmap") - direct_unmaps == 1);
  CHECK(fake_mapped() == 5 * kUnit);
  CHECK(vm->stats().reserved == 5 * kUnit);

  // Out of memory part of the way: nothing of the call stays mapped.
  const uintptr_t big = r->reserve(1024 * kMiB);
  CHECK(status_of([&] { r->map(big, 512 * kMiB); }, &detail) == GPUMEM_ERROR_OUT_OF_MEMORY);
  CHECK(detail.find("out of memory mapping 536,870,912 bytes on device 0: the device has 526,385,152 of") !=
        std::string::npos);
  CHECK(detail.find("(cuMemCreate, in units of 2,097,152 bytes)") != std::string::npos);
  CHECK(fake_mapped() == 5 * kUnit);
  CHECK(vm->stats().reserved == 5 * kUnit);
  CHECK(vm->info().mapped_bytes == 5 * kUnit);
  r->unreserve(big, 1024 * kMiB);

  // Released with memory still mapped: the memory is unmapped first, not lost.
  r->unreserve(base, 64 * kMiB);
  CHECK(fake_reserved() == 0);
  CHECK(fake_mapped() == 0);
  CHECK(vm->stats().reserved == 0);
  CHECK(vm->info().reserved_bytes == 0);
  CHECK(vm->info().mapped_bytes == 0);

  // What a pool leaves goes with the allocator, and so do direct allocations, each unmapped whole.
  const uintptr_t left = r->reserve(8 * kMiB);
  r->map(left + kUnit, kUnit);
  vm->allocate(3 * kMiB + 1, nullptr);
  CHECK(fake_mapped() == kUnit + 4 * kMiB);
  const size_t final_unmaps = fake_calls("cuMemUnmap");
  vm.reset();
  CHECK(fake_calls("cuMemUnmap") - final_unmaps == 2);
  CHECK(fake_reserved() == 0);
  CHECK(fake_mapped() == 0);
}

// By default a pool maps 32 MiB at a time, each unit one physical allocation, and direct
// allocations are still rounded to the granularity only.
void test_default_unit() {
  const char* test = "default_unit";
  auto vm = make(0, 0);
  Ranges* r = vm->ranges();
  CHECK(r->unit() == kDefaultUnit);
  CHECK(vm->info().map_unit == kDefaultUnit);
  CHECK(r->range_size() == size_t(1) << 30);  // the fake's memory, whole units

  const uintptr_t base = r->reserve(4 * kDefaultUnit);
  CHECK(base % kDefaultUnit == 0);
  const size_t creates = fake_calls("cuMemCreate"), maps = fake_calls("cuMemMap");
  r->map(base + kDefaultUnit, 2 * kDefaultUnit);
  CHECK(fake_calls("cuMemCreate") - creates == 2);
  CHECK(fake_calls("cuMemMap") - maps == 2);
  CHECK(fake_mapped() == 2 * kDefaultUnit);
  CHECK(vm->stats().reserved == 2 * kDefaultUnit);
  CHECK(vm->info().mapped_bytes == 2 * kDefaultUnit);

  // Granules are not units: a pool must ask whole units.
  std::string detail;
  CHECK(status_of([&] { r->map(base, kUnit); }, &detail) == GPUMEM_ERROR_INTERNAL);
  CHECK(detail.find("not whole units of 33,554,432 bytes") != std::string::npos);
  CHECK(status_of([&] { r->map(base + kUnit, kDefaultUnit); }) == GPUMEM_ERROR_INTERNAL);
  CHECK(status_of([&] { unmap_all(r, base + kDefaultUnit, kUnit); }) == GPUMEM_ERROR_INTERNAL);
  CHECK(status_of([&] { r->reserve(kDefaultUnit + kUnit); }) == GPUMEM_ERROR_INTERNAL);

  // 3 MiB + 1 direct: 4 MiB, one physical allocation, aligned to the granularity.
  const size_t direct_creates = fake_calls("cuMemCreate");
  void* direct = vm->allocate(3 * kMiB + 1, nullptr);
  CHECK(reinterpret_cast<uintptr_t>(direct) % kUnit == 0);
  CHECK(fake_calls("cuMemCreate") - direct_creates == 1);
  CHECK(fake_mapped() == 2 * kDefaultUnit + 4 * kMiB);
  CHECK(vm->info().reserved_bytes == 4 * kDefaultUnit + 4 * kMiB);

  // Unmapped a unit at a time.
  const size_t unmaps = fake_calls("cuMemUnmap");
  unmap_all(r, base + kDefaultUnit, 2 * kDefaultUnit);
  CHECK(fake_calls("cuMemUnmap") - unmaps == 2);
  CHECK(fake_mapped() == 4 * kMiB);
  CHECK(vm->stats().reserved == 3 * kMiB + 1);  // the direct allocation, as asked
  vm->deallocate(direct, nullptr);
  CHECK(fake_calls("cuMemUnmap") - unmaps == 3);
  r->unreserve(base, 4 * kDefaultUnit);
  CHECK(fake_mapped() == 0);
  CHECK(fake_reserved() == 0);
}

// Threads map and unmap units of their own ranges while another turns peer access on and off:
// every unit mapped at the end has the access last set.
void test_threads_with_peer_changes() {
  const char* test = "threads_with_peer_changes";
  auto vm = make(32 * kMiB, kUnit);
  Ranges* r = vm->ranges();
  constexpr int kThreads = 4, kRounds = 300;
  std::vector<uintptr_t> bases;
  for (int t = 0; t < kThreads; ++t) bases.push_back(r->reserve(32 * kMiB));
  std::atomic<int> running{kThreads};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      unsigned x = 12345u + t;
      std::vector<bool> mapped(16, false);
      for (int i = 0; i < kRounds; ++i) {
        x = x * 1103515245u + 12345u;
        const size_t k = (x >> 16) % 16;
        try {
          if (mapped[k]) {
            unmap_all(r, bases[t] + k * kUnit, kUnit);
          } else {
            r->map(bases[t] + k * kUnit, kUnit);
          }
          mapped[k] = !mapped[k];
        } catch (const Error& e) {
          std::printf("thread %d: %s\n", t, e.what());
          ++errors;
        }
      }
      --running;
    });
  }
  bool enable = true;
  while (running.load() > 0) {
    try {
      vm->set_peer_access(1, enable);
    } catch (const Error& e) {
      std::printf("set_peer_access: %s\n", e.what());
      ++errors;
    }
    enable = !enable;
  }
  for (auto& th : threads) th.join();
  CHECK(errors.load() == 0);
  const bool last = !enable;
  size_t units = 0;
  for (uintptr_t base : bases)
    for (size_t k = 0; k < 16; ++k) {
      const int access = fake_access(base + k * kUnit, 1);
      if (access == -1) continue;
      ++units;
      CHECK(access == (last ? kReadWrite : kNone));
      CHECK(fake_access(base + k * kUnit, 0) == kReadWrite);
    }
  CHECK(units * kUnit == fake_mapped());
  CHECK(vm->info().mapped_bytes == fake_mapped());
  CHECK(vm->stats().reserved == fake_mapped());
  for (uintptr_t base : bases) r->unreserve(base, 32 * kMiB);
  CHECK(fake_mapped() == 0);
  CHECK(fake_reserved() == 0);
}

// An unmap that stops part way: the pool lists what was unmapped as unmapped and the rest as
// free and mapped, so that nothing unmapped is handed out, and a later release unmaps the rest.
void test_pool_after_partial_unmap() {
  const char* test = "pool_after_partial_unmap";
  auto vm = make(0, kUnit);
  {
    gpumem::pool::Pool pool(vm.get(), 0);
    void* big = pool.allocate(20 * kMiB, nullptr);
    void* small = pool.allocate(2 * kMiB, nullptr);
    pool.deallocate(big, nullptr);
    const auto fail_unmap_after = reinterpret_cast<void (*)(int, int)>(fake_symbol("fake_cuda_fail_unmap_after"));
    fail_unmap_after(3, CUDA_ERROR_UNKNOWN);  // the 4th of big's 10 units
    CHECK(status_of([&] { pool.release(nullptr, true); }) == GPUMEM_ERROR_DRIVER);
    // Three units unmapped; the pool holds what is mapped, and checks out.
    CHECK(pool.info().total == fake_mapped());
    CHECK(pool.info().total == 22 * kMiB - 3 * kUnit);
    CHECK(status_of([&] { pool.check_invariants(); }) == GPUMEM_SUCCESS);
    // The same addresses again: mapped wherever the pool hands them out.
    void* again = pool.allocate(20 * kMiB, nullptr);
    CHECK(again == big);
    CHECK(units_have(reinterpret_cast<uintptr_t>(again), 20 * kMiB, 0, kReadWrite));
    pool.deallocate(again, nullptr);
    // The rest unmaps at the next release.
    CHECK(status_of([&] { pool.release(nullptr, true); }) == GPUMEM_SUCCESS);
    CHECK(pool.info().total == 2 * kMiB);
    CHECK(fake_mapped() == 2 * kMiB);
    CHECK(status_of([&] { pool.check_invariants(); }) == GPUMEM_SUCCESS);
    pool.deallocate(small, nullptr);
  }
  CHECK(fake_mapped() == 0);
  CHECK(fake_reserved() == 0);
}

}  // namespace

int main() {
  setenv("FAKE_CUDA_PEER_ACCESS", "1", 1);
  try {
    test_map_unmap_and_counts();
    test_default_unit();
    test_threads_with_peer_changes();
    test_pool_after_partial_unmap();
  } catch (const Error& e) {
    std::printf("unexpected error: %s\n", e.what());
    return 1;
  }
  if (failures) std::printf("%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
