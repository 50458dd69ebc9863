#include "memory/array.hpp"

#include <memory>

namespace gpumem::memory {
namespace {

struct Format {
  int32_t format;
  CUarray_format cuda;
  const char* name;
  size_t bytes;
};
constexpr Format kFormats[] = {
    {GPUMEM_FORMAT_U8, CU_AD_FORMAT_UNSIGNED_INT8, "u8", 1},
    {GPUMEM_FORMAT_U16, CU_AD_FORMAT_UNSIGNED_INT16, "u16", 2},
    {GPUMEM_FORMAT_U32, CU_AD_FORMAT_UNSIGNED_INT32, "u32", 4},
    {GPUMEM_FORMAT_I8, CU_AD_FORMAT_SIGNED_INT8, "i8", 1},
    {GPUMEM_FORMAT_I16, CU_AD_FORMAT_SIGNED_INT16, "i16", 2},
    {GPUMEM_FORMAT_I32, CU_AD_FORMAT_SIGNED_INT32, "i32", 4},
    {GPUMEM_FORMAT_F16, CU_AD_FORMAT_HALF, "f16", 2},
    {GPUMEM_FORMAT_F32, CU_AD_FORMAT_FLOAT, "f32", 4},
};

const Format* find_format(int32_t format) {
  for (const Format& f : kFormats)
    if (f.format == format) return &f;
  return nullptr;
}

// Throws GPUMEM_ERROR_INVALID_HANDLE unless array is a live array handle.
const gpumem_array_t* require_live(const gpumem_array_t* array) {
  if (!gpumem_array_s::live(array))
    fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is not a live gpumem array: %s", static_cast<const void*>(array),
         gpumem_array_s::why(array));
  return array;
}

int attribute(CUdevice dev, CUdevice_attribute attr) {
  int value = 0;
  const CUresult r = driver::api().cuDeviceGetAttribute(&value, attr, dev);
  if (r != CUDA_SUCCESS) driver::throw_result(r, format("cuDeviceGetAttribute(attribute %d)", static_cast<int>(attr)));
  return value;
}

void require_extent(const char* name, size_t value, int limit, int rank, int device) {
  if (value > static_cast<size_t>(limit))
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%s %s exceeds device %d's limit for %dD arrays (%s)", name,
         grouped(value).c_str(), device, rank, grouped(static_cast<uint64_t>(limit)).c_str());
}

}  // namespace

gpumem_array_t* array_create(const gpumem_array_desc_t& desc) {
  const Format* fmt = find_format(desc.format);
  if (!fmt)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "unknown array format %d (expected GPUMEM_FORMAT_*, 1 to 8)", desc.format);
  if (desc.channels != 1 && desc.channels != 2 && desc.channels != 4)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "%u channels: arrays have 1, 2 or 4", desc.channels);
  require(desc.width != 0, "width is 0");
  if (desc.height == 0 && desc.depth != 0)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "depth %s without a height: a 3D array needs all three extents",
         grouped(desc.depth).c_str());
  const int rank = desc.height == 0 ? 1 : desc.depth == 0 ? 2 : 3;

  const CUcontext ctx = driver::primary_context(desc.device);
  CUdevice dev = 0;
  driver::check(driver::api().cuDeviceGet(&dev, desc.device), "cuDeviceGet");
  if (rank == 1) {
    require_extent("width", desc.width, attribute(dev, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH), 1, desc.device);
  } else if (rank == 2) {
    require_extent("width", desc.width, attribute(dev, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH), 2, desc.device);
    require_extent("height", desc.height, attribute(dev, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT), 2, desc.device);
  } else {
    // CUDA takes a 3D shape within either its usual limits or its alternate (thin and deep) ones.
    const bool alternate =
        desc.width <= size_t(attribute(dev, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE)) &&
        desc.height <= size_t(attribute(dev, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE)) &&
        desc.depth <= size_t(attribute(dev, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE));
    if (!alternate) {
      require_extent("width", desc.width, attribute(dev, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH), 3, desc.device);
      require_extent("height", desc.height, attribute(dev, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT), 3,
                     desc.device);
      require_extent("depth", desc.depth, attribute(dev, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH), 3, desc.device);
    }
  }

  CUDA_ARRAY3D_DESCRIPTOR cd{};
  cd.Width = desc.width;
  cd.Height = desc.height;
  cd.Depth = desc.depth;
  cd.Format = fmt->cuda;
  cd.NumChannels = desc.channels;
  auto array = std::make_unique<gpumem_array_t>();
  array->context = ctx;
  driver::ContextScope scope(ctx);
  driver::refuse_during_capture("gpumem_array_create", "creating a CUDA array (cuArray3DCreate)",
                                "create it before the capture begins or after it ends");
  const driver::Api& a = driver::api();
  const CUresult r = a.cuArray3DCreate(&array->handle, &cd);
  if (r != CUDA_SUCCESS)
    driver::throw_result(
        r, format("cuArray3DCreate of a %dD %s x%u array %s x %s x %s on device %d", rank, fmt->name, desc.channels,
                  grouped(desc.width).c_str(), grouped(desc.height).c_str(), grouped(desc.depth).c_str(), desc.device));
  CUDA_ARRAY3D_DESCRIPTOR got{};
  const CUresult described = a.cuArray3DGetDescriptor(&got, array->handle);
  if (described != CUDA_SUCCESS) {
    a.cuArrayDestroy(array->handle);
    driver::throw_result(described, "cuArray3DGetDescriptor of a new array");
  }
  array->desc = desc;
  array->desc.format = 0;
  for (const Format& f : kFormats)
    if (f.cuda == got.Format) array->desc.format = f.format;
  array->desc.channels = got.NumChannels;
  array->desc.width = got.Width;
  array->desc.height = got.Height;
  array->desc.depth = got.Depth;
  return array.release();
}

void array_destroy(gpumem_array_t* array) {
  require_live(array);
  if (!array->retire())
    fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is not a live gpumem array: another thread destroyed it",
         static_cast<void*>(array));
  try {
    driver::unless_shut_down([&] {
      driver::ContextScope scope(array->context);
      driver::refuse_during_capture("gpumem_array_destroy", "destroying a CUDA array (cuArrayDestroy)",
                                    "destroy it after the capture ends");
      driver::check(driver::api().cuArrayDestroy(array->handle), "cuArrayDestroy");
    });
  } catch (...) {
    array->revive();  // still allocated: the caller keeps a working handle
    throw;
  }
  delete array;
}

void array_get_desc(const gpumem_array_t* array, gpumem_array_desc_t& out) {
  require_live(array);
  const size_t struct_size = out.struct_size;
  out = array->desc;
  out.struct_size = struct_size;
}

ArrayRef array_lookup(const gpumem_array_t* array) {
  require_live(array);
  const Format* fmt = find_format(array->desc.format);
  if (!fmt)
    fail(GPUMEM_ERROR_INTERNAL, "array %p has format %d, which gpumem does not know", static_cast<const void*>(array),
         array->desc.format);
  return {array->handle, array->context, array->desc, fmt->bytes * array->desc.channels};
}

}  // namespace gpumem::memory
