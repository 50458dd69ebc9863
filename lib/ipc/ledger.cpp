#include "ipc/ledger.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace gpumem::ipc {
namespace {

Slot* map_slots(int fd) {
  void* p = mmap(nullptr, kLedgerBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<Slot*>(p);
}

// An open-file-description lock on the slot's byte: read locks of importers, and the exporter's
// question whether any is held.
bool lock_slot(int fd, short type, uint32_t slot, int command) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = static_cast<off_t>(slot);
  lock.l_len = 1;
  if (fcntl(fd, command, &lock) != 0) return command == F_OFD_GETLK;  // unknown: taken as held
  return command != F_OFD_GETLK || lock.l_type != F_UNLCK;
}

}  // namespace

Ledger::Ledger() {
  fd_ = memfd_create("gpumem-ipc-ledger", MFD_CLOEXEC);
  if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(kLedgerBytes)) != 0 || !(slots_ = map_slots(fd_))) {
    const int e = errno;
    if (fd_ >= 0) close(fd_);
    fail(GPUMEM_ERROR_IO, "making the shared ledger of this process's IPC handles (memfd_create, mmap): %s",
         strerror(e));
  }
}

Ledger::~Ledger() {
  munmap(slots_, kLedgerBytes);
  close(fd_);
}

uint32_t Ledger::take(uint64_t serial) {
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else if (next_ < kLedgerSlots) {
    slot = next_++;
  } else {
    fail(GPUMEM_ERROR_OUT_OF_MEMORY, "this process has %u IPC handles out, the most it may have at once", kLedgerSlots);
  }
  slots_[slot].claimed.store(0, std::memory_order_relaxed);
  slots_[slot].serial.store(serial, std::memory_order_release);
  return slot;
}

bool Ledger::spent(uint32_t slot) {
  if (!slots_[slot].claimed.load(std::memory_order_acquire)) return false;  // sent, not opened yet
  // Retired before the lock is asked about: an importer takes the lock before it reads the serial,
  // so one that reads it unretired holds the lock by the time it is asked about.
  slots_[slot].serial.store(0, std::memory_order_seq_cst);
  return !lock_slot(fd_, F_WRLCK, slot, F_OFD_GETLK);
}

void Ledger::give_back(uint32_t slot) {
  slots_[slot].serial.store(0, std::memory_order_release);
  free_.push_back(slot);
}

LedgerView::LedgerView(int received_fd) {
  struct stat st {};
  if (fstat(received_fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) != kLedgerBytes)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "descriptor %d is not the exporter's IPC ledger (the first descriptor of a handle, as sent)", received_fd);
  // A description of its own, so that its locks are this process's.
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", received_fd);
  fd_ = open(path, O_RDWR | O_CLOEXEC);
  if (fd_ < 0 || !(slots_ = map_slots(fd_))) {
    const int e = errno;
    if (fd_ >= 0) close(fd_);
    fail(GPUMEM_ERROR_IO, "opening the exporter's IPC ledger (%s): %s", path, strerror(e));
  }
}

LedgerView::~LedgerView() {
  munmap(slots_, kLedgerBytes);
  close(fd_);  // drops any lock still held
}

bool LedgerView::hold(uint32_t slot, uint64_t serial) {
  if (slot >= kLedgerSlots || serial == 0) return false;
  if (!lock_slot(fd_, F_RDLCK, slot, F_OFD_SETLK))
    fail(GPUMEM_ERROR_IO, "locking slot %u of the exporter's IPC ledger: %s", slot, strerror(errno));
  if (slots_[slot].serial.load(std::memory_order_seq_cst) != serial) {
    let_go(slot);
    return false;
  }
  slots_[slot].claimed.store(1, std::memory_order_release);
  return true;
}

void LedgerView::let_go(uint32_t slot) noexcept { lock_slot(fd_, F_UNLCK, slot, F_OFD_SETLK); }

}  // namespace gpumem::ipc
