#include "memory/memory.hpp"

namespace gpumem::memory {

PointerInfo pointer_info(const void* p) {
  const driver::Api& a = driver::device_api();
  unsigned int memory_type = 0;
  int device = -1;
  unsigned int managed = 0;  // the driver writes a bool here; zeroed so any width reads right
  void* host = nullptr;
  CUdeviceptr base = 0;
  size_t size = 0;
  CUcontext context = nullptr;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,       CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_CONTEXT};
  void* data[] = {&memory_type, &device, &managed, &host, &base, &size, &context};
  const CUresult r =
      a.cuPointerGetAttributes(sizeof attrs / sizeof attrs[0], attrs, data, reinterpret_cast<CUdeviceptr>(p));
  driver::check(r, "cuPointerGetAttributes");
  PointerInfo out;
  if (managed) {
    out.memory_type = GPUMEM_MEMORY_MANAGED;
  } else if (memory_type == CU_MEMORYTYPE_HOST) {
    out.memory_type = GPUMEM_MEMORY_HOST;
  } else if (memory_type == CU_MEMORYTYPE_DEVICE) {
    out.memory_type = GPUMEM_MEMORY_DEVICE;
  } else {
    return out;  // plain host memory: nothing else to say
  }
  out.managed = managed != 0;
  out.device = device;
  out.host = host;
  out.base = static_cast<uintptr_t>(base);
  out.size = size;
  out.context = context;
  return out;
}

void* device_address(const void* p, const PointerInfo& info) {
  if (info.memory_type == GPUMEM_MEMORY_UNREGISTERED) return nullptr;
  // The driver answers this one only for the context current on the thread.
  driver::ContextScope scope(context_of(info));
  CUdeviceptr address = 0;
  CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_DEVICE_POINTER;
  void* data = &address;
  driver::check(driver::api().cuPointerGetAttributes(1, &attr, &data, reinterpret_cast<CUdeviceptr>(p)),
                "cuPointerGetAttributes");
  return reinterpret_cast<void*>(address);
}

std::string describe_kind(const PointerInfo& info) {
  switch (info.memory_type) {
    case GPUMEM_MEMORY_DEVICE:
      return format("device memory on device %d", info.device);
    case GPUMEM_MEMORY_MANAGED:
      return "managed memory";
    case GPUMEM_MEMORY_HOST:
      return "page-locked host memory";
    default:
      return "plain host memory (or memory already freed)";
  }
}

CUcontext context_of(const PointerInfo& info) {
  if (info.context) return info.context;
  if (info.memory_type != GPUMEM_MEMORY_UNREGISTERED && info.device >= 0) return driver::primary_context(info.device);
  return driver::current_context();
}

CUcontext context_for(CUstream stream, const PointerInfo& info) {
  const CUcontext ctx = driver::stream_context(stream);
  return ctx ? ctx : context_of(info);
}

namespace {

// What the driver says of the mapping that holds an address, for the walk below.
struct Mapping {
  bool vmm = false;  // device memory mapped with cuMemMap (the virtual memory management calls)
  int device = -1;
  uintptr_t base = 0;
  size_t size = 0;
};

// False when the driver cannot say.
bool mapping_at(uintptr_t p, Mapping& out) {
  // The driver writes a bool into some of these; zeroed so any width reads right.
  unsigned int mapped = 0, memory_type = 0, managed = 0, legacy_ipc = 0;
  int device = -1;
  CUmemoryPool pool = nullptr;
  CUdeviceptr base = 0;
  size_t size = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MAPPED,           CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,       CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[] = {&mapped, &memory_type, &managed, &legacy_ipc, &pool, &device, &base, &size};
  if (driver::api().cuPointerGetAttributes(sizeof attrs / sizeof attrs[0], attrs, data, static_cast<CUdeviceptr>(p)) !=
      CUDA_SUCCESS)
    return false;
  // cuMemAlloc memory can be shared through legacy IPC, a CUDA pool's names its pool; what is left
  // of mapped device memory was mapped with cuMemMap.
  out.vmm = mapped && memory_type == CU_MEMORYTYPE_DEVICE && !managed && !legacy_ipc && !pool;
  out.device = device;
  out.base = static_cast<uintptr_t>(base);
  out.size = size;
  return true;
}

// The driver's range for memory mapped with cuMemMap may end at a mapping's end (a map unit of
// gpumem's VM allocator), though a pool's block may span several. When the mapping that
// holds start (ending at first_end) is such memory of `device`, this is where the run of such
// mappings that follows it ends, looked for up to end; else first_end.
uintptr_t end_of_mappings(uintptr_t start, uintptr_t first_end, uintptr_t end, int device) {
  Mapping m;
  if (!mapping_at(start, m) || !m.vmm || m.device != device) return first_end;
  uintptr_t reached = first_end;
  while (reached < end) {
    if (!mapping_at(reached, m) || !m.vmm || m.device != device || m.base > reached || m.base + m.size <= reached)
      break;
    reached = m.base + m.size;
  }
  return reached;
}

}  // namespace

void require_within_allocation(const void* p, size_t size, const PointerInfo& info, const char* role) {
  // Host memory may be locked by several adjacent registrations (the pinning service makes them),
  // and a copy may run across them; only device and managed allocations are bounded here.
  if (info.memory_type != GPUMEM_MEMORY_DEVICE && info.memory_type != GPUMEM_MEMORY_MANAGED) return;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  uintptr_t end = info.base + info.size;
  // Device memory may go on in the next mapping; nothing more is asked when the first covers it.
  if (start + size > end && info.memory_type == GPUMEM_MEMORY_DEVICE)
    end = end_of_mappings(start, end, start + size, info.device);
  if (start + size > end)
    fail(GPUMEM_ERROR_INVALID_POINTER, "%s range %p + %s runs %s past the end of its allocation (%s at %p, %s)", role,
         p, bytes(size).c_str(), bytes(start + size - end).c_str(), describe_kind(info).c_str(),
         reinterpret_cast<void*>(info.base), bytes(end - info.base).c_str());
}

}  // namespace gpumem::memory
