// 2D and 3D copies between plain (pageable) host memory and device 0, which gpumem stages as it
// stages 1D copies: gpumem against the driver's own pageable copy (cudaMemcpy2D/3D) and against
// the limit, a flat copy of the same bytes from or to page-locked memory, in the same run. The
// target is the 1D one: at least 0.8 x the limit (45 GB/s on the H200 machine) and never slower
// than the driver (bench/README.md).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "copy_rows.hpp"

namespace {

using namespace copy_rows;

constexpr size_t KiB = 1024, MiB = KiB * KiB;

struct Box {
  const char* test;
  Side host, device;
  size_t width, height, depth;
};

const Box kBoxes[] = {
    {"6000 of 8192 float columns x 4096 rows", {16, 3, 0, 32768, 4100, 1}, {64, 1, 0, 32768, 4100, 1}, 24000, 4096, 1},
    {"rows of 1001 bytes at pitch 1003 (device 1024) x 65536",
     {1, 0, 0, 1003, 65536, 1},
     {5, 0, 0, 1024, 65536, 1},
     1001,
     65536,
     1},
    {"contiguous host rows of 4 MiB + 8 x 24, pitched device",
     {0, 0, 0, 4 * MiB + 8, 24, 1},
     {0, 0, 0, 4 * MiB + 512, 24, 1},
     4 * MiB + 8,
     24,
     1},
    {"3D 384x448x448 floats of a 512^3 volume",
     {256, 32, 32, 2048, 512, 512},
     {256, 32, 32, 2048, 512, 512},
     1536,
     448,
     448},
};

int met = 0, missed = 0, wrong = 0;

cudaMemcpy3DParms params(const Box& b, unsigned char* host, unsigned char* device, bool to_device) {
  cudaMemcpy3DParms p{};
  const cudaPitchedPtr h{host, b.host.pitch, b.host.pitch, b.host.rows};
  const cudaPitchedPtr d{device, b.device.pitch, b.device.pitch, b.device.rows};
  const cudaPos hp{b.host.x, b.host.y, b.host.z}, dp{b.device.x, b.device.y, b.device.z};
  p.srcPtr = to_device ? h : d;
  p.srcPos = to_device ? hp : dp;
  p.dstPtr = to_device ? d : h;
  p.dstPos = to_device ? dp : hp;
  p.extent = cudaExtent{b.width, b.height, b.depth};
  p.kind = cudaMemcpyDefault;
  return p;
}

gpumem_copy3d_t gpumem_params(const Box& b, unsigned char* host, unsigned char* device, bool to_device) {
  gpumem_copy3d_t c = GPUMEM_COPY3D_INIT;
  const Side& d = to_device ? b.device : b.host;
  const Side& s = to_device ? b.host : b.device;
  c.dst = to_device ? device : host;
  c.dst_x = d.x, c.dst_y = d.y, c.dst_z = d.z, c.dst_pitch = d.pitch, c.dst_height = d.rows;
  c.src = to_device ? host : device;
  c.src_x = s.x, c.src_y = s.y, c.src_z = s.z, c.src_pitch = s.pitch, c.src_height = s.rows;
  c.width = b.width, c.height = b.height, c.depth = b.depth;
  return c;
}

// What the destination holds after a right copy: the poison, and the region from the source.
void expected_image(const Box& b, const unsigned char* src, bool to_device, unsigned char* out, size_t n) {
  const Side& d = to_device ? b.device : b.host;
  const Side& s = to_device ? b.host : b.device;
  std::memset(out, kPoison, n);
  for (size_t k = 0; k < b.depth; ++k)
    for (size_t j = 0; j < b.height; ++j) std::memcpy(out + d.offset(j, k), src + s.offset(j, k), b.width);
}

void bench(const Box& b, bool to_device, bool on_stream) {
  const size_t bytes = b.width * b.height * b.depth;
  const std::string test = std::string(to_device ? "H2D " : "D2H ") + b.test + (on_stream ? ", stream" : "");
  try {
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    HostBuffer host(b.host.buffer_bytes()), image(to_device ? b.host.buffer_bytes() : b.device.buffer_bytes());
    HostBuffer expected(to_device ? b.device.buffer_bytes() : b.host.buffer_bytes());
    DeviceBuffer device(0, b.device.buffer_bytes());
    PinnedBuffer pinned(bytes);
    fill_pattern(image.p, image.size, 7);
    if (to_device)
      std::memcpy(host.p, image.p, host.size);
    else
      device.upload(image.p);
    expected_image(b, image.p, to_device, expected.p, expected.size);

    Row row;
    row.test = test;
    row.bytes = bytes;
    row.reps = 9;
    row.poison = [&] { to_device ? device.poison() : (void)std::memset(host.p, kPoison, host.size); };
    row.wait = [&] { check(on_stream ? cudaStreamSynchronize(stream) : cudaDeviceSynchronize(), "synchronize"); };
    row.verify = [&] {
      if (!to_device) return differences(expected.p, host.p, host.size, 0);
      HostBuffer got(device.size);
      device.read_back(0, device.size, got.p);
      return differences(expected.p, got.p, got.size, 0);
    };
    const gpumem_copy3d_t c = gpumem_params(b, host.p, device.p, to_device);
    const cudaMemcpy3DParms p = params(b, host.p, device.p, to_device);
    const Cell g =
        measure(row, [&] { check(on_stream ? gpumem_copy3d_async(&c, stream) : gpumem_copy3d(&c), "gpumem_copy3d"); });
    const Cell d =
        measure(row, [&] { check(on_stream ? cudaMemcpy3DAsync(&p, stream) : cudaMemcpy3D(&p), "cudaMemcpy3D"); });
    Row flat = row;
    flat.poison = [] {};
    flat.verify = [] { return std::string(); };
    const Cell limit = measure(flat, [&] {
      void* dst = to_device ? static_cast<void*>(device.p) : pinned.p;
      const void* src = to_device ? static_cast<const void*>(pinned.p) : device.p;
      check(on_stream ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream)
                      : cudaMemcpy(dst, src, bytes, cudaMemcpyDefault),
            "cudaMemcpy (the limit)");
    });
    cudaStreamDestroy(stream);
    const bool figures = g.kind == Cell::kFigure && d.kind == Cell::kFigure && limit.kind == Cell::kFigure;
    const bool ok = figures && g.gbps >= 0.8 * limit.gbps && g.gbps >= d.gbps;
    if (!figures) ++wrong;
    ok ? ++met : ++missed;
    std::printf("| %s | %zu | %s | %s | %.3f | %s | %.3f | %s |\n", test.c_str(), bytes, cell_text(g).c_str(),
                cell_text(d).c_str(), figures ? g.gbps / d.gbps : 0.0, cell_text(limit).c_str(),
                figures ? g.gbps / limit.gbps : 0.0, ok ? "met" : "missed (>= 0.8 x limit, >= driver)");
    std::fflush(stdout);
  } catch (const Failure& f) {
    ++wrong;
    std::printf("| %s | %zu | failed: %s | | | | | |\n", test.c_str(), bytes, f.what());
  }
}

int run() {
  std::string device;
  if (!bench_open_device_0(device)) return 0;
  std::printf(
      "# %s\n# GB/s = bytes of the region / the median time of 9 copies (after %d untimed), each "
      "waited for; the limit: cudaMemcpy of as many bytes from or to cudaHostAlloc memory\n\n",
      device.c_str(), kWarmups);
  std::printf(
      "| test | bytes | gpumem GB/s | driver GB/s | gpumem / driver | limit GB/s | gpumem / limit | target |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---|\n");
  for (const Box& b : kBoxes)
    for (const bool to_device : {true, false})
      for (const bool on_stream : {false, true}) bench(b, to_device, on_stream);
  std::printf("\n# targets: %d met, %d missed\n# %d cells wrong or failed\n", met, missed, wrong);
  return wrong ? 1 : 0;
}

}  // namespace

int main() { return bench_run(run); }
