// 2D and 3D copies between memory of any kind and CUDA arrays: checks, then gpumem's kernel for
// device memory of one device, the driver for everything else.
#include "memory/array.hpp"
#include "memory/copy_kernel.hpp"
#include "memory/memory.hpp"

namespace gpumem::memory {
namespace {

using Wide = __int128;

// A side after its checks.
struct Side {
  const CopySide& in;
  bool is_array = false;
  ArrayRef array{};
  size_t pitch = 0, height = 0;  // memory: defaulted
  uintptr_t start = 0, end = 0;  // memory: the region's first byte and one past its last
  size_t slice = 0;              // memory: pitch x height
  PointerInfo info;

  explicit Side(const CopySide& side) : in(side) {}
  int device() const { return is_array ? array.desc.device : info.device; }
  // Device memory, or an array: what the device holds itself.
  bool on_device() const { return is_array || info.memory_type == GPUMEM_MEMORY_DEVICE; }
  CUcontext context() const {
    if (is_array) return array.context;
    return info.memory_type == GPUMEM_MEMORY_UNREGISTERED ? nullptr : context_of(info);
  }
};

void check_shape(Side& s, const CopyRegion& r) {
  const CopySide& in = s.in;
  if (in.ptr && in.array) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s has both a pointer and an array; set one", in.role);
  if (!in.ptr && !in.array) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s has neither a pointer nor an array", in.role);
  s.is_array = in.array != nullptr;
  if (s.is_array) return;
  s.pitch = in.pitch ? in.pitch : r.width;
  if (Wide(in.x) + r.width > s.pitch)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s rows of %s bytes at %s_x %s do not fit in %s_pitch %s", in.role,
         grouped(r.width).c_str(), in.role, grouped(in.x).c_str(), in.role, grouped(s.pitch).c_str());
  if (r.rank == 3) {
    s.height = in.height ? in.height : r.height;
    if (Wide(in.y) + r.height > s.height)
      fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s rows %s to %s do not fit in a slice of %s_height %s rows", in.role,
           grouped(in.y).c_str(), grouped(in.y + r.height - 1).c_str(), in.role, grouped(s.height).c_str());
  } else {
    // One slice: only its rows matter. Saturated, as a y this large is refused as wrapping later.
    s.height = in.y > SIZE_MAX - r.height ? SIZE_MAX : in.y + r.height;
  }
}

void check_array(Side& s, const CopyRegion& r) {
  const CopySide& in = s.in;
  const gpumem_array_desc_t& d = s.array.desc;
  const size_t e = s.array.element_bytes;
  if (in.x % e || r.width % e)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s_x %s and width %s must be whole elements of the array (%s bytes each)",
         in.role, grouped(in.x).c_str(), grouped(r.width).c_str(), grouped(e).c_str());
  const size_t rows = d.height ? d.height : 1, slices = d.depth ? d.depth : 1;
  if (Wide(in.x) + r.width > Wide(d.width) * e)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "%s bytes %s to %s of each row run past the end of the %s array's rows (%s bytes)", in.role,
         grouped(in.x).c_str(), grouped(in.x + r.width - 1).c_str(), in.role, grouped(d.width * e).c_str());
  if (Wide(in.y) + r.height > rows)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s rows %s to %s run past the end of the %s array's %s row%s", in.role,
         grouped(in.y).c_str(), grouped(in.y + r.height - 1).c_str(), in.role, grouped(rows).c_str(),
         rows == 1 ? "" : "s");
  if (Wide(in.z) + r.depth > slices)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s slices %s to %s run past the end of the %s array's %s slice%s", in.role,
         grouped(in.z).c_str(), grouped(in.z + r.depth - 1).c_str(), in.role, grouped(slices).c_str(),
         slices == 1 ? "" : "s");
}

void check_memory(Side& s, const CopyRegion& r) {
  const CopySide& in = s.in;
  // Unsigned 128-bit terms, each checked against the address space before they are added, so no
  // product or sum can wrap into a region that looks small.
  using Unsigned = unsigned __int128;
  const Unsigned limit = UINTPTR_MAX;
  const Unsigned slice = Unsigned(s.pitch) * s.height;
  const bool slices = r.depth > 1 || in.z > 0;
  const Unsigned terms[] = {slices ? slice : 0, slices ? Unsigned(in.z) * static_cast<size_t>(slice) : 0,
                            slices ? Unsigned(r.depth - 1) * static_cast<size_t>(slice) : 0, Unsigned(in.y) * s.pitch,
                            Unsigned(r.height - 1) * s.pitch};
  bool wraps = false;
  for (const Unsigned t : terms) wraps |= t > limit;
  const Unsigned start = Unsigned(reinterpret_cast<uintptr_t>(in.ptr)) + terms[1] + terms[3] + in.x;
  const Unsigned span = terms[2] + terms[4] + r.width;
  if (wraps || start + span - 1 > limit)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s region at %p wraps around the address space", in.role, in.ptr);
  s.slice = slice > limit ? 0 : static_cast<size_t>(slice);  // 0: one slice, whose size does not matter
  s.start = static_cast<uintptr_t>(start);
  s.end = static_cast<uintptr_t>(start + span);
  s.info = pointer_info(reinterpret_cast<void*>(s.start));
  require_within_allocation(reinterpret_cast<void*>(s.start), s.end - s.start, s.info, in.role);
}

Wide floor_div(Wide a, Wide b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Whether some row of b shares a byte with [lo, hi).
bool rows_touch(const Side& b, const CopyRegion& r, Wide lo, Wide hi) {
  const Wide slice_span = Wide(r.height - 1) * b.pitch + r.width;
  Wide first = 0, last = Wide(r.depth) - 1;
  if (r.depth > 1) {
    first = std::max<Wide>(0, floor_div(lo - b.start - slice_span, b.slice) + 1);
    last = std::min<Wide>(last, floor_div(hi - 1 - b.start, b.slice));
  }
  for (Wide m = first; m <= last; ++m) {
    const Wide base = b.start + m * b.slice;
    const Wide j_min = std::max<Wide>(0, floor_div(lo - base - r.width, b.pitch) + 1);
    const Wide j_max = std::min<Wide>(Wide(r.height) - 1, floor_div(hi - base - 1, b.pitch));
    if (j_min <= j_max) return true;
  }
  return false;
}

// One pass over d's rows.
bool rows_touch_all(const Side& d, const Side& s, const CopyRegion& r) {
  for (size_t k = 0; k < r.depth; ++k)
    for (size_t i = 0; i < r.height; ++i) {
      const Wide lo = Wide(d.start) + Wide(k) * d.slice + Wide(i) * d.pitch;
      if (rows_touch(s, r, lo, lo + r.width)) return true;
    }
  return false;
}

// Sides with the same pitch (and slice) are translates of each other: rows i, k of d and j, m of
// s meet where |start difference + (k - m) slice + (i - j) pitch| < width. One step per slice
// difference instead of one per row.
bool translates_touch(const Side& d, const Side& s, const CopyRegion& r) {
  const Wide delta = Wide(d.start) - Wide(s.start), p = d.pitch, w = r.width, rows = Wide(r.height) - 1;
  const Wide slices = r.depth > 1 ? Wide(r.depth) - 1 : 0;
  for (Wide dk = -slices; dk <= slices; ++dk) {
    const Wide t = delta + dk * Wide(d.slice);
    const Wide di_min = std::max<Wide>(-rows, floor_div(-w - t, p) + 1);
    const Wide di_max = std::min<Wide>(rows, floor_div(w - t - 1, p));
    if (di_min <= di_max) return true;
  }
  return false;
}

// Exact, so that interleaved rows of one buffer may be copied onto each other; only when the two
// regions' spans meet.
void check_overlap(const Side& d, const Side& s, const CopyRegion& r) {
  bool overlap = false;
  if (d.is_array && s.is_array) {
    auto meet = [](size_t a, size_t b, size_t n) { return a < b + n && b < a + n; };
    overlap = d.array.handle == s.array.handle && meet(d.in.x, s.in.x, r.width) && meet(d.in.y, s.in.y, r.height) &&
              meet(d.in.z, s.in.z, r.depth);
  } else if (!d.is_array && !s.is_array && d.start < s.end && s.start < d.end) {
    overlap = d.pitch == s.pitch && (r.depth == 1 || d.slice == s.slice) ? translates_touch(d, s, r)
                                                                         : rows_touch_all(d, s, r);
  }
  if (overlap)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "the dst and src regions overlap: a copy of %s x %s x %s bytes between them would read what it wrote",
         grouped(r.width).c_str(), grouped(r.height).c_str(), grouped(r.depth).c_str());
}

// The driver's description of one side; M is CUDA_MEMCPY3D or CUDA_MEMCPY3D_PEER, which name
// their fields alike.
#define GPUMEM_DESCRIBE_SIDE(m, side, s)                        \
  do {                                                          \
    m.side##XInBytes = s.in.x;                                  \
    m.side##Y = s.in.y;                                         \
    m.side##Z = s.in.z;                                         \
    if (s.is_array) {                                           \
      m.side##MemoryType = CU_MEMORYTYPE_ARRAY;                 \
      m.side##Array = s.array.handle;                           \
    } else {                                                    \
      m.side##MemoryType = CU_MEMORYTYPE_UNIFIED;               \
      m.side##Device = reinterpret_cast<CUdeviceptr>(s.in.ptr); \
      m.side##Pitch = s.pitch;                                  \
      m.side##Height = s.height;                                \
    }                                                           \
  } while (0)

template <class M>
M describe(const Side& d, const Side& s, const CopyRegion& r) {
  M m{};
  GPUMEM_DESCRIBE_SIDE(m, dst, d);
  GPUMEM_DESCRIBE_SIDE(m, src, s);
  m.WidthInBytes = r.width;
  m.Height = r.height;
  m.Depth = r.depth;
  return m;
}
#undef GPUMEM_DESCRIBE_SIDE

std::string describe_side(const Side& s) {
  if (s.is_array) return format("an array on device %d", s.array.desc.device);
  return format("%p (%s)", reinterpret_cast<void*>(s.start), describe_kind(s.info).c_str());
}

// gpumem's kernel, when both sides are device memory of one device in its primary context and the
// stream (if any) belongs there too.
bool try_kernel(const Side& d, const Side& s, const CopyRegion& r, CUstream stream, bool async) {
  if (d.is_array || s.is_array || d.info.memory_type != GPUMEM_MEMORY_DEVICE ||
      s.info.memory_type != GPUMEM_MEMORY_DEVICE || d.info.device != s.info.device)
    return false;
  const CUcontext primary = driver::primary_context(d.info.device);
  if (context_of(d.info) != primary || context_of(s.info) != primary) return false;
  if (async) {
    const CUcontext sc = driver::stream_context(stream);
    if (sc && sc != primary) return false;
  }
  driver::ContextScope scope(primary);
  gpumem_copy_rows_t rows{};
  rows.dst = d.start;
  rows.src = s.start;
  rows.dst_pitch = d.pitch;
  rows.src_pitch = s.pitch;
  // One slice has no slice pitch; leaving it out keeps equally aligned rows on the faster kernel.
  rows.dst_slice_pitch = r.depth > 1 ? d.slice : 0;
  rows.src_slice_pitch = r.depth > 1 ? s.slice : 0;
  rows.width = r.width;
  rows.height = r.height;
  rows.rows = uint64_t(r.height) * r.depth;
  if (!launch_copy_rows(d.info.device, rows, async ? stream : CU_STREAM_LEGACY)) return false;
  if (!async) wait_legacy_stream("waiting for the copy");
  return true;
}

// Plain host memory on one side and device memory on the other: staged as 1D copies are
// (staging.cpp), in the current context.
bool try_staged(const Side& d, const Side& s, const CopyRegion& r, CUstream stream, bool async) {
  if (d.is_array || s.is_array) return false;
  const bool to_device = s.info.memory_type == GPUMEM_MEMORY_UNREGISTERED && d.info.memory_type == GPUMEM_MEMORY_DEVICE;
  const bool to_host = d.info.memory_type == GPUMEM_MEMORY_UNREGISTERED && s.info.memory_type == GPUMEM_MEMORY_DEVICE;
  if (!to_device && !to_host) return false;
  return staged_copy({reinterpret_cast<char*>(d.start), d.pitch, d.slice},
                     {reinterpret_cast<char*>(s.start), s.pitch, s.slice}, r.width, r.height, r.depth, to_device,
                     stream, async);
}

}  // namespace

void copy3d(CopyRegion r, CUstream stream, bool async) {
  Side d(r.dst), s(r.src);
  check_shape(d, r);
  check_shape(s, r);
  if (d.is_array) d.array = array_lookup(r.dst.array);
  if (s.is_array) s.array = array_lookup(r.src.array);
  if (r.width == 0 || r.height == 0 || r.depth == 0) return;
  for (Side* side : {&d, &s}) {
    if (side->is_array)
      check_array(*side, r);
    else
      check_memory(*side, r);
  }
  check_overlap(d, s, r);

  const CUcontext dc = d.context(), sc = s.context();
  const Side& device_side = d.on_device() ? d : s.on_device() ? s : dc ? d : s;
  const CUcontext work = async ? driver::stream_context(stream) : nullptr;
  const CUcontext here = work ? work : device_side.context() ? device_side.context() : driver::current_context();
  if (!async || driver::is_legacy_stream(stream)) {
    // Before gpumem's kernel too, which a synchronous copy launches on the legacy stream. The
    // contexts of both sides: a copy between the memory of two devices runs on both.
    // Literals, so that nothing is formatted unless a capture refuses.
    static const char* const kFn[2][2] = {{"gpumem_copy2d", "gpumem_copy2d_async"},
                                          {"gpumem_copy3d", "gpumem_copy3d_async"}};
    static const char* const kInstead[2] = {
        "queue it on the capturing stream with gpumem_copy2d_async, or call gpumem_copy2d after the capture ends",
        "queue it on the capturing stream with gpumem_copy3d_async, or call gpumem_copy3d after the capture ends"};
    const char* fn = kFn[r.rank == 3][async];
    const char* instead =
        async ? "queue it on the capturing stream, or on a stream of your own" : kInstead[r.rank == 3];
    driver::refuse_during_capture(fn, async ? "work queued on the legacy stream" : "a synchronous copy", instead,
                                  {here, d.on_device() ? dc : nullptr, s.on_device() ? sc : nullptr});
  }

  if (try_kernel(d, s, r, stream, async)) return;

  const driver::Api& a = driver::api();
  driver::ContextScope scope(here);
  if (try_staged(d, s, r, stream, async)) return;
  CUresult result;
  if (d.on_device() && s.on_device() && dc != sc) {
    ensure_peer_access(d.device(), s.device());
    CUDA_MEMCPY3D_PEER m = describe<CUDA_MEMCPY3D_PEER>(d, s, r);
    m.dstContext = dc;
    m.srcContext = sc;
    result = async ? a.cuMemcpy3DPeerAsync(&m, stream) : a.cuMemcpy3DPeer(&m);
  } else {
    const CUDA_MEMCPY3D m = describe<CUDA_MEMCPY3D>(d, s, r);
    result = async ? a.cuMemcpy3DAsync(&m, stream) : a.cuMemcpy3D(&m);
  }
  if (result != CUDA_SUCCESS)
    driver::throw_result(result, format("%dD copy of %s x %s x %s bytes from %s to %s", r.rank,
                                        grouped(r.width).c_str(), grouped(r.height).c_str(), grouped(r.depth).c_str(),
                                        describe_side(s).c_str(), describe_side(d).c_str()));
  if (!async && (d.is_array || copy_lands_later(d.info))) wait_legacy_stream("waiting for the copy");
}

}  // namespace gpumem::memory
