// The bytes of gpumem_ipc_handle_t: what an importer needs to open an export, checked by a sum so
// that a forged or damaged handle is refused before anything is opened.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/error.hpp"
#include "gpumem/ipc.h"

namespace gpumem::ipc {

enum class Kind : uint16_t { kClassic = 1, kVm = 2 };

struct Wire {
  uint32_t magic;
  uint16_t version;
  Kind kind;
  uint8_t uuid[16];   // the memory's device
  uint64_t exporter;  // the exporting process's id, random: with segment, what an importer opens once
  uint32_t pid;       // the exporter's, for details
  uint32_t slot;      // in the exporter's ledger
  uint64_t serial;    // the export the slot must still stand for
  uint64_t segment;   // the exporter's address of the cuMemAlloc allocation or VM range
  uint64_t segment_size;
  uint64_t offset;    // of the allocation in the segment
  uint64_t size;      // of the allocation, as asked
  uint64_t unit;      // VM: bytes of each physical allocation, from the segment's start
  uint32_t fd_count;  // the ledger's, then one per unit the allocation touches
  int32_t device;     // the exporter's number of the device, for details
  uint8_t ipc[64];    // classic: the driver's CUipcMemHandle
  uint8_t reserved[24];
  uint64_t check;  // of every byte before it

  static constexpr uint32_t kMagic = 0x50494d47;  // "GMIP"
  static constexpr uint16_t kVersion = 1;
  static constexpr uint64_t kMaxUnits = uint64_t{1} << 24;  // 32 TiB in 2 MiB units

  uint64_t sum() const {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
    const auto* b = reinterpret_cast<const uint8_t*>(this);
    for (size_t i = 0; i < offsetof(Wire, check); ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
  }
  void seal() { check = sum(); }
  // VM: the offset of the first unit the allocation touches, and how many it touches (0 for classic).
  uint64_t first_unit() const { return unit ? offset / unit * unit : 0; }
  uint64_t units() const { return unit ? (offset + size - 1) / unit - offset / unit + 1 : 0; }

  // The handle's bytes, checked; throws INVALID_ARGUMENT for what is not a sealed handle.
  static Wire read(const gpumem_ipc_handle_t* handle) {
    require_out(handle, "handle");
    Wire w;
    std::memcpy(&w, handle->bytes, sizeof w);
    const bool vm = w.kind == Kind::kVm;
    // Checked in 64 bits, so that a handle sealed with forged sizes cannot wrap the counts.
    const bool unit_ok = w.unit >= 4096 && (w.unit & (w.unit - 1)) == 0 && w.segment_size % w.unit == 0;
    if (w.magic != kMagic || w.version != kVersion || (!vm && w.kind != Kind::kClassic) || w.check != w.sum() ||
        w.size == 0 || w.offset > w.segment_size || w.size > w.segment_size - w.offset ||
        (vm && (!unit_ok || w.units() > kMaxUnits || w.fd_count != 1 + w.units())) ||
        (!vm && (w.unit != 0 || w.fd_count != 1)))
      fail(GPUMEM_ERROR_INVALID_ARGUMENT,
           "%p is not a gpumem IPC handle (from gpumem_ipc_export, version %u), or it is damaged",
           static_cast<const void*>(handle), kVersion);
    return w;
  }
};
static_assert(sizeof(Wire) == GPUMEM_IPC_HANDLE_SIZE, "the wire format is the handle's bytes");

}  // namespace gpumem::ipc
