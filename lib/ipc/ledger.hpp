// The bookkeeping an exporting process shares with the processes that open its handles: a table
// of slots in a memory file (memfd) that travels with every handle. A slot stands for one export.
// An importer holds a read lock on its slot's byte for as long as it has the export open (an
// open-file-description lock, which the kernel drops when the process dies), and marks the slot
// claimed once it has; the exporter asks the kernel whether anyone holds the lock. So the exporter
// knows when memory it freed is no longer used elsewhere, without a server thread, and a crashed
// importer lets go of everything it held.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpumem::ipc {

struct Slot {
  std::atomic<uint64_t> serial;   // the export it stands for; 0: retired, no more opens
  std::atomic<uint32_t> claimed;  // 1 once an importer has opened it
  uint32_t unused;
};
static_assert(sizeof(Slot) == 16 && std::atomic<uint64_t>::is_always_lock_free, "a slot is shared memory");

// Slots in a ledger: its file is sparse, so only the slots used cost memory.
constexpr uint32_t kLedgerSlots = uint32_t{1} << 20;
constexpr size_t kLedgerBytes = size_t{kLedgerSlots} * sizeof(Slot);

// The exporter's side. Not thread-safe: the exporter's lock guards it.
class Ledger {
 public:
  Ledger();  // throws IO if the file cannot be made
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  int fd() const { return fd_; }
  // A slot for a new export with this serial; throws OUT_OF_MEMORY when all are taken.
  uint32_t take(uint64_t serial);
  // Whether every importer of the slot has let go: it was opened, and no one holds its lock now.
  // A slot found so is retired first (no more opens), so an importer that comes later is refused.
  bool spent(uint32_t slot);
  void give_back(uint32_t slot);  // a spent slot, for another export
  uint64_t serial(uint32_t slot) const { return slots_[slot].serial.load(std::memory_order_acquire); }

 private:
  int fd_ = -1;
  Slot* slots_ = nullptr;
  uint32_t next_ = 0;
  std::vector<uint32_t> free_;
};

// An importer's view of an exporter's ledger, opened from the descriptor that came with a handle
// as a file description of its own (a lock belongs to its description).
class LedgerView {
 public:
  explicit LedgerView(int received_fd);  // throws INVALID_ARGUMENT if it is not a ledger
  ~LedgerView();
  LedgerView(const LedgerView&) = delete;
  LedgerView& operator=(const LedgerView&) = delete;

  // Takes the slot's lock and claims it if it still stands for serial; false (and no lock) if not.
  bool hold(uint32_t slot, uint64_t serial);
  void let_go(uint32_t slot) noexcept;

 private:
  int fd_ = -1;
  Slot* slots_ = nullptr;
};

}  // namespace gpumem::ipc
