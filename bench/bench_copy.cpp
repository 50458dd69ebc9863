// The copy benchmark: gpumem's copies against the CUDA runtime's on the same buffers, in one
// process. 2D and 3D copies within device 0 (gpumem's kernel against cudaMemcpy2D and
// cudaMemcpy3D), 1D copies between device 0 and plain malloc'ed host memory (gpumem's staging
// against cudaMemcpy), and, when there is a second GPU, a 2D copy from device 0 to device 1
// (against cudaMemcpy3DPeer). What each row is: bench/README.md.
//
// Output: `#` lines, then one Markdown table whose rows are printed as they are measured,
//   | test | bytes | gpumem GB/s | driver GB/s | ratio (gpumem/driver) |
// then `WRONG <side> <test>: <what>` or `FAIL <side> <test>: <what>` for every cell that is not
// a figure, and `#` notes. The exit status is 1 when any copy was wrong or failed.
#include <cuda_runtime_api.h>
#include <gpumem/gpumem.h>

#include "bench_common.hpp"
#include "copy_rows.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace copy_rows;

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;
constexpr size_t GiB = size_t{1} << 30;
constexpr size_t kFloat = sizeof(float);

bool quick = false;

std::string size_name(size_t n) {
  if (n >= GiB && n % GiB == 0) return std::to_string(n / GiB) + "GiB";
  if (n >= MiB && n % MiB == 0) return std::to_string(n / MiB) + "MiB";
  if (n >= KiB && n % KiB == 0) return std::to_string(n / KiB) + "KiB";
  return std::to_string(n) + "B";
}

std::vector<std::string> issues;  // WRONG and FAIL lines, printed after the table
std::vector<std::string> notes;   // `#` lines, printed after the table

// What a row must reach (the targets of bench/README.md), against the driver or the limit: the
// same bytes as one flat copy between device buffers, or between device memory and page-locked
// host memory, measured in the same run.
enum class Target {
  kNearLimit,   // wide pitched rows: at least 95% of a flat copy of the same bytes
  kPastDriver,  // narrow or misaligned rows: at least 1.5 times the driver
  kStaged,      // pageable copies of 64 MiB and up: 45 GB/s or more, and not slower than the driver
  kNotSlower,   // smaller pageable copies: not slower than the driver
};

std::vector<std::string> missed;  // the rows whose target was missed, for the summary line
int met = 0;

std::string judge(Target t, const Cell& g, const Cell& d, const Cell& limit) {
  if (g.kind != Cell::kFigure || d.kind != Cell::kFigure || (t == Target::kNearLimit && limit.kind != Cell::kFigure))
    return "-";
  bool ok = false;
  const char* goal = "";
  switch (t) {
    case Target::kNearLimit:
      ok = g.gbps >= 0.95 * limit.gbps, goal = ">= 0.95 x limit";
      break;
    case Target::kPastDriver:
      ok = g.gbps >= 1.5 * d.gbps, goal = ">= 1.5 x driver";
      break;
    case Target::kStaged:
      ok = g.gbps >= 45 && g.gbps >= d.gbps, goal = ">= 45 GB/s, >= driver";
      break;
    case Target::kNotSlower:
      ok = g.gbps >= d.gbps, goal = ">= driver";
      break;
  }
  return std::string(ok ? "met (" : "missed (") + goal + ")";
}

std::string ratio_text(const Cell& a, const Cell& b) {
  if (a.kind != Cell::kFigure || b.kind != Cell::kFigure) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", a.gbps / b.gbps);
  return text;
}

void print_row(const std::string& test, size_t bytes, const Cell& g, const Cell& d, const Cell& limit, Target t) {
  const std::string verdict = judge(t, g, d, limit);
  if (verdict.rfind("met", 0) == 0) ++met;
  if (verdict.rfind("missed", 0) == 0) missed.push_back(test);
  std::printf("| %s | %zu | %s | %s | %s | %s | %s | %s |\n", test.c_str(), bytes, cell_text(g).c_str(),
              cell_text(d).c_str(), ratio_text(g, d).c_str(), cell_text(limit).c_str(), ratio_text(g, limit).c_str(),
              verdict.c_str());
  std::fflush(stdout);
  const auto record = [&](const char* side, const Cell& c) {
    if (c.kind == Cell::kWrong) issues.push_back(std::string("WRONG ") + side + " " + test + ": " + c.what);
    if (c.kind == Cell::kFailed) issues.push_back(std::string("FAIL ") + side + " " + test + ": " + c.what);
  };
  record("gpumem", g);
  record("driver", d);
}

void print_setup_failure(const std::string& test, size_t bytes, const char* what) {
  Cell failed;
  failed.what = std::string("setting up the row: ") + what;
  print_row(test, bytes, failed, failed, failed, Target::kNotSlower);
}

// The limit of a row: `copy` timed as the row's copies are, its bytes not checked.
Cell measure_limit(const Row& row, const std::function<void()>& copy) {
  Row limit = row;
  limit.poison = [] {};
  limit.verify = [] { return std::string(); };
  return measure(limit, copy);
}

void wait_device_0() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

void wait_devices_0_and_1() {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (device 0)");
  OnDevice on(1);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (device 1)");
}

// ---------------------------------------------------------------------------------------------
// 2D and 3D copies between device buffers

struct Box {
  const char* test;
  Side src, dst;
  size_t width, height, depth;
  bool three_d;    // gpumem_copy3d and cudaMemcpy3D; otherwise gpumem_copy2d and cudaMemcpy2D
  int dst_device;  // 1: from device 0 to device 1, the driver through cudaMemcpy3DPeer
  uint64_t seed;
  Target target;
};

std::string verify_box(const Box& b, const unsigned char* src_image, const DeviceBuffer& dst) {
  HostBuffer got(dst.size), expected(dst.size);
  dst.read_back(0, dst.size, got.p);
  std::memset(expected.p, kPoison, expected.size);
  for (size_t k = 0; k < b.depth; ++k)
    for (size_t j = 0; j < b.height; ++j)
      std::memcpy(expected.p + b.dst.offset(j, k), src_image + b.src.offset(j, k), b.width);
  return differences(expected.p, got.p, dst.size, 0);
}

// on_stream: kStreamBatch copies queued on one stream (the _async forms) and waited for once, so
// that the figure is the copy's throughput, not the cost of a call and a wait.
constexpr int kStreamBatch = 10;

void bench_box(const Box& b, int reps, bool on_stream) {
  const size_t bytes = b.width * b.height * b.depth;
  const std::string test = on_stream ? std::string(b.test) + ", stream" : std::string(b.test);
  try {
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    struct StreamGuard {
      cudaStream_t s;
      ~StreamGuard() { cudaStreamDestroy(s); }
    } stream_guard{stream};
    DeviceBuffer src(0, b.src.buffer_bytes());
    DeviceBuffer dst(b.dst_device, b.dst.buffer_bytes());
    HostBuffer image(src.size);
    fill_pattern(image.p, image.size, b.seed);
    src.upload(image.p);

    Row row;
    row.test = test;
    row.bytes = bytes;
    row.reps = reps;
    row.poison = [&] { dst.poison(); };
    row.wait = b.dst_device == 0 ? wait_device_0 : wait_devices_0_and_1;
    if (on_stream) {
      row.batch = kStreamBatch;
      row.wait = [stream] { check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); };
    }
    row.verify = [&] { return verify_box(b, image.p, dst); };

    const std::function<void()> through_gpumem = [&] {
      if (b.three_d) {
        gpumem_copy3d_t c = GPUMEM_COPY3D_INIT;
        c.dst = dst.p;
        c.dst_x = b.dst.x;
        c.dst_y = b.dst.y;
        c.dst_z = b.dst.z;
        c.dst_pitch = b.dst.pitch;
        c.dst_height = b.dst.rows;
        c.src = src.p;
        c.src_x = b.src.x;
        c.src_y = b.src.y;
        c.src_z = b.src.z;
        c.src_pitch = b.src.pitch;
        c.src_height = b.src.rows;
        c.width = b.width;
        c.height = b.height;
        c.depth = b.depth;
        check(on_stream ? gpumem_copy3d_async(&c, stream) : gpumem_copy3d(&c), "gpumem_copy3d");
      } else {
        gpumem_copy2d_t c = GPUMEM_COPY2D_INIT;
        c.dst = dst.p;
        c.dst_x = b.dst.x;
        c.dst_y = b.dst.y;
        c.dst_pitch = b.dst.pitch;
        c.src = src.p;
        c.src_x = b.src.x;
        c.src_y = b.src.y;
        c.src_pitch = b.src.pitch;
        c.width = b.width;
        c.height = b.height;
        check(on_stream ? gpumem_copy2d_async(&c, stream) : gpumem_copy2d(&c), "gpumem_copy2d");
      }
    };
    // For memory (no array) the runtime takes positions and extents in bytes and reads a pitched
    // pointer's pitch and ysize (rows per slice).
    const cudaPitchedPtr src_ptr{src.p, b.src.pitch, b.src.pitch, b.src.rows};
    const cudaPitchedPtr dst_ptr{dst.p, b.dst.pitch, b.dst.pitch, b.dst.rows};
    const std::function<void()> through_driver = [&] {
      if (b.dst_device != 0) {
        cudaMemcpy3DPeerParms p{};
        p.srcPtr = src_ptr;
        p.srcPos = cudaPos{b.src.x, b.src.y, b.src.z};
        p.srcDevice = 0;
        p.dstPtr = dst_ptr;
        p.dstPos = cudaPos{b.dst.x, b.dst.y, b.dst.z};
        p.dstDevice = b.dst_device;
        p.extent = cudaExtent{b.width, b.height, b.depth};
        check(on_stream ? cudaMemcpy3DPeerAsync(&p, stream) : cudaMemcpy3DPeer(&p), "cudaMemcpy3DPeer");
      } else if (b.three_d) {
        cudaMemcpy3DParms p{};
        p.srcPtr = src_ptr;
        p.srcPos = cudaPos{b.src.x, b.src.y, b.src.z};
        p.dstPtr = dst_ptr;
        p.dstPos = cudaPos{b.dst.x, b.dst.y, b.dst.z};
        p.extent = cudaExtent{b.width, b.height, b.depth};
        p.kind = cudaMemcpyDeviceToDevice;
        check(on_stream ? cudaMemcpy3DAsync(&p, stream) : cudaMemcpy3D(&p), "cudaMemcpy3D");
      } else if (on_stream) {
        check(cudaMemcpy2DAsync(dst.p + b.dst.offset(0, 0), b.dst.pitch, src.p + b.src.offset(0, 0), b.src.pitch,
                                b.width, b.height, cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpy2DAsync");
      } else {
        check(cudaMemcpy2D(dst.p + b.dst.offset(0, 0), b.dst.pitch, src.p + b.src.offset(0, 0), b.src.pitch, b.width,
                           b.height, cudaMemcpyDeviceToDevice),
              "cudaMemcpy2D");
      }
    };
    const Cell g = measure(row, through_gpumem);
    const Cell d = measure(row, through_driver);
    const Cell limit = measure_limit(row, [&] {
      if (b.dst_device != 0)
        check(on_stream ? cudaMemcpyPeerAsync(dst.p, b.dst_device, src.p, 0, bytes, stream)
                        : cudaMemcpyPeer(dst.p, b.dst_device, src.p, 0, bytes),
              "cudaMemcpyPeer (the limit)");
      else
        check(on_stream ? cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, stream)
                        : cudaMemcpy(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice),
              "cudaMemcpy (the limit)");
    });
    print_row(row.test, bytes, g, d, limit, b.target);
  } catch (const Failure& f) {
    print_setup_failure(test, bytes, f.what());
  }
}

// ---------------------------------------------------------------------------------------------
// 1D copies between device 0 and plain host memory. The destination has a poisoned margin on
// either side of the region; the source buffer is laid out the same way, its region at kMargin.

constexpr size_t kMargin = 4 * KiB;
// Device destinations up to this size are read back whole; larger ones in windows: the head and
// the tail with their margins, and kSamples windows of kSampleBytes spread over the rest.
constexpr size_t kWholeCheckBytes = 256 * MiB;
constexpr size_t kSamples = 64;
constexpr size_t kSampleBytes = 64 * KiB;

int reps_1d(size_t n) {
  if (n <= MiB) return quick ? 31 : 101;
  if (n <= 16 * MiB) return quick ? 9 : 31;
  if (n <= 256 * MiB) return quick ? 5 : 11;
  return 5;
}

// image: the source buffer's bytes, the region at kMargin of n + 2 kMargin.
std::string verify_device_1d(const DeviceBuffer& dst, const unsigned char* image, size_t n) {
  std::vector<std::pair<size_t, size_t>> windows;  // offset, bytes
  if (n <= kWholeCheckBytes) {
    windows.emplace_back(0, dst.size);
  } else {
    windows.emplace_back(0, kMargin + MiB);
    windows.emplace_back(dst.size - kMargin - MiB, kMargin + MiB);
    const size_t stride = n / kSamples;
    for (size_t k = 0; k < kSamples; ++k)
      windows.emplace_back(kMargin + k * stride + mix64(k) % (stride - kSampleBytes), kSampleBytes);
  }
  size_t largest = 0;
  for (const auto& w : windows) largest = std::max(largest, w.second);
  HostBuffer got(largest), expected(largest);
  for (const auto& [offset, bytes] : windows) {
    dst.read_back(offset, bytes, got.p);
    std::memset(expected.p, kPoison, bytes);
    const size_t from = std::max(offset, kMargin), to = std::min(offset + bytes, kMargin + n);
    if (from < to) std::memcpy(expected.p + (from - offset), image + from, to - from);
    if (std::string wrong = differences(expected.p, got.p, bytes, offset); !wrong.empty()) return wrong;
  }
  return "";
}

// Whether gpumem staged a row's copies: staging buffers held after its timed copies, having been
// released before them (0: the driver copied).
std::string staging_after(const Row& row, const std::function<void()>& through_gpumem, Cell& g) {
  check(gpumem_copy_staging_release(), "gpumem_copy_staging_release");
  g = measure(row, through_gpumem);
  size_t held = 0;
  if (gpumem_copy_staging_get_held(&held) != GPUMEM_SUCCESS) return row.test + " ?";
  return row.test + " " + std::to_string(held);
}

std::vector<std::string> staging_h2d, staging_d2h;

void bench_h2d(size_t n) {
  const std::string test = "H2D " + size_name(n);
  try {
    HostBuffer host(n + 2 * kMargin);
    fill_pattern(host.p, host.size, 1000 + n);
    DeviceBuffer dev(0, n + 2 * kMargin);

    Row row;
    row.test = test;
    row.bytes = n;
    row.reps = reps_1d(n);
    row.poison = [&] { dev.poison(); };
    row.wait = wait_device_0;
    row.verify = [&] { return verify_device_1d(dev, host.p, n); };
    Cell g;
    staging_h2d.push_back(staging_after(
        row, [&] { check(gpumem_copy(dev.p + kMargin, host.p + kMargin, n), "gpumem_copy"); }, g));
    const Cell d = measure(
        row, [&] { check(cudaMemcpy(dev.p + kMargin, host.p + kMargin, n, cudaMemcpyHostToDevice), "cudaMemcpy"); });
    PinnedBuffer pinned(n);
    const Cell limit = measure_limit(
        row, [&] { check(cudaMemcpy(dev.p + kMargin, pinned.p, n, cudaMemcpyHostToDevice), "cudaMemcpy (pinned)"); });
    print_row(test, n, g, d, limit, n >= 64 * MiB ? Target::kStaged : Target::kNotSlower);
  } catch (const Failure& f) {
    print_setup_failure(test, n, f.what());
  }
}

void bench_d2h(size_t n) {
  const std::string test = "D2H " + size_name(n);
  try {
    HostBuffer image(n + 2 * kMargin);
    fill_pattern(image.p, image.size, 2000 + n);
    DeviceBuffer dev(0, image.size);
    dev.upload(image.p);
    HostBuffer host(image.size);
    HostBuffer poison(kMargin);
    std::memset(poison.p, kPoison, kMargin);

    Row row;
    row.test = test;
    row.bytes = n;
    row.reps = reps_1d(n);
    row.poison = [&] { std::memset(host.p, kPoison, host.size); };
    row.wait = wait_device_0;
    row.verify = [&] {
      std::string wrong = differences(poison.p, host.p, kMargin, 0);
      if (wrong.empty()) wrong = differences(image.p + kMargin, host.p + kMargin, n, kMargin);
      if (wrong.empty()) wrong = differences(poison.p, host.p + kMargin + n, kMargin, kMargin + n);
      return wrong;
    };
    Cell g;
    staging_d2h.push_back(staging_after(
        row, [&] { check(gpumem_copy(host.p + kMargin, dev.p + kMargin, n), "gpumem_copy"); }, g));
    const Cell d = measure(
        row, [&] { check(cudaMemcpy(host.p + kMargin, dev.p + kMargin, n, cudaMemcpyDeviceToHost), "cudaMemcpy"); });
    PinnedBuffer pinned(n);
    const Cell limit = measure_limit(
        row, [&] { check(cudaMemcpy(pinned.p, dev.p + kMargin, n, cudaMemcpyDeviceToHost), "cudaMemcpy (pinned)"); });
    print_row(test, n, g, d, limit, n >= 64 * MiB ? Target::kStaged : Target::kNotSlower);
  } catch (const Failure& f) {
    print_setup_failure(test, n, f.what());
  }
}

// ---------------------------------------------------------------------------------------------

// 8192 x 8192 floats, the region the first 6000 columns.
constexpr Side kPlane{0, 0, 0, 8192 * kFloat, 8192, 1};
constexpr size_t kPlaneWidth = 6000 * kFloat;

constexpr Box kBoxes[] = {
    {"2D D2D 6000 of 8192 float columns x 8192 rows", kPlane, kPlane, kPlaneWidth, 8192, 1, false, 0, 1,
     Target::kNearLimit},
    // 384 x 448 x 448 floats at (16 floats, 8, 8) of a 512^3 float volume, to (0, 0, 0) of another.
    {"3D D2D 384x448x448 floats of a 512^3 volume", Side{16 * kFloat, 8, 8, 512 * kFloat, 512, 512},
     Side{0, 0, 0, 512 * kFloat, 512, 512}, 384 * kFloat, 448, 448, true, 0, 2, Target::kNearLimit},
    // Rows that start on no alignment at all, and end one byte before the pitch.
    {"2D D2D width 1001 pitch 1003 x 8192 rows, src x=1", Side{1, 0, 0, 1003, 8192, 1}, Side{0, 0, 0, 1003, 8192, 1},
     1001, 8192, 1, false, 0, 3, Target::kPastDriver},
    // The source 4 bytes into its rows, the destination at their start: 4-byte relative alignment.
    {"2D D2D width 24000 pitch 32768 x 8192 rows, src x=4", Side{4, 0, 0, 8192 * kFloat, 8192, 1}, kPlane, kPlaneWidth,
     8192, 1, false, 0, 4, Target::kNearLimit},
    {"2D D2D width 1 pitch 1024 x 65536 rows, src x=5", Side{5, 0, 0, 1024, 65536, 1}, Side{0, 0, 0, 1024, 65536, 1}, 1,
     65536, 1, false, 0, 5, Target::kPastDriver},
};
constexpr Box kPeerBox{"2D device 0 -> 1, 6000 of 8192 float columns x 8192 rows",
                       kPlane,
                       kPlane,
                       kPlaneWidth,
                       8192,
                       1,
                       false,
                       1,
                       6,
                       Target::kNearLimit};

// Peer access is left as it is throughout; whether it was on during the peer row shows only
// afterwards, since asking turns it on.
std::string peer_access_after_the_row() {
  const cudaError_t e = cudaDeviceEnablePeerAccess(1, 0);
  cudaGetLastError();
  if (e == cudaErrorPeerAccessAlreadyEnabled) return "on";
  if (e == cudaSuccess) {
    cudaDeviceDisablePeerAccess(1);
    return "off";
  }
  return std::string("unavailable (") + cudaGetErrorName(e) + ")";
}

int run() {
  std::string device;
  if (!bench_open_device_0(device)) return 0;
  std::printf("# %s\n", device.c_str());
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count >= 2) {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 1), "cudaGetDeviceProperties");
    int can = 0;
    check(cudaDeviceCanAccessPeer(&can, 0, 1), "cudaDeviceCanAccessPeer");
    std::printf("# device 1: %s; cudaDeviceCanAccessPeer(0, 1) = %d\n", prop.name, can);
  } else {
    std::printf("# one GPU: no peer row\n");
  }
  std::printf(
      "# %s run: GB/s = bytes copied / the median time of the timed copies (after %d untimed), each timed "
      "with steady_clock from the call to the end of the cudaDeviceSynchronize after it; \", stream\" rows: %d "
      "copies queued on one stream with the _async forms, then one cudaStreamSynchronize, per sample\n\n",
      quick ? "quick (--quick)" : "full", kWarmups, kStreamBatch);

  std::printf(
      "| test | bytes | gpumem GB/s | driver GB/s | gpumem / driver | limit GB/s | gpumem / limit | target |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---|\n");
  std::fflush(stdout);
  for (const Box& b : kBoxes)
    for (const bool on_stream : {false, true}) bench_box(b, quick ? 9 : 31, on_stream);

  std::vector<size_t> sizes{4 * KiB, 64 * KiB, 256 * KiB, MiB, 2 * MiB, 4 * MiB, 16 * MiB, 64 * MiB};
  if (!quick) {
    sizes.push_back(256 * MiB);
    sizes.push_back(GiB);
  }
  for (const size_t n : sizes) bench_h2d(n);
  for (const size_t n : sizes) bench_d2h(n);

  if (count >= 2) {
    for (const bool on_stream : {false, true}) bench_box(kPeerBox, quick ? 7 : 21, on_stream);
    notes.push_back("peer access 0 -> 1 after the peer row: " + peer_access_after_the_row());
  }

  std::printf("\n");
  for (const std::string& line : issues) std::printf("%s\n", line.c_str());
  for (const auto& [direction, list] : {std::pair{"H2D", &staging_h2d}, std::pair{"D2H", &staging_d2h}}) {
    std::string line = std::string("# gpumem staging bytes held after each ") + direction +
                       " row (released before it; 0: the driver copied):";
    for (const std::string& entry : *list) {  // appended piece by piece: GCC 12 warns falsely on " " + string
      line += ' ';
      line.append(entry, 4);
      if (&entry != &list->back()) line += ',';
    }
    std::printf("%s\n", line.c_str());
  }
  for (const std::string& line : notes) std::printf("# %s\n", line.c_str());
  std::string list;
  for (const std::string& m : missed) list += (list.empty() ? ": " : "; ") + m;
  std::printf("# targets: %d met, %zu missed%s\n", met, missed.size(), list.c_str());
  std::printf("# %zu cells wrong or failed\n", issues.size());
  return issues.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--quick") == 0) {
    quick = true;
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: bench_copy [--quick]\n");
    return 2;
  }
  return bench_run(run);
}
