// A handle and its descriptors over a Unix-domain stream socket: the handle's bytes carry the
// first descriptors (SCM_RIGHTS), and one byte more per further batch carries the rest, since the
// kernel passes at most 253 descriptors in one message.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "ipc/ipc.hpp"
#include "ipc/wire.hpp"

namespace gpumem::ipc {
namespace {

constexpr size_t kBatch = 250;

void send_part(int socket, const void* data, size_t size, const int* fds, size_t count) {
  std::vector<char> control(CMSG_SPACE(sizeof(int) * count));
  msghdr msg{};
  iovec iov{const_cast<void*>(data), size};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * count);
  }
  // The descriptors go with the first byte; what is left of the bytes is sent plainly.
  ssize_t sent;
  do sent = sendmsg(socket, &msg, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  if (sent < 0) fail(GPUMEM_ERROR_IO, "sending an IPC handle on socket %d: %s", socket, strerror(errno));
  for (size_t done = static_cast<size_t>(sent); done < size;) {
    const ssize_t n = ::send(socket, static_cast<const char*>(data) + done, size - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(GPUMEM_ERROR_IO, "sending an IPC handle on socket %d: %s", socket, strerror(errno));
    done += static_cast<size_t>(n);
  }
}

// Receives exactly size bytes, appending the descriptors that come with them to fds.
void receive_part(int socket, void* data, size_t size, std::vector<int>& fds) {
  for (size_t done = 0; done < size;) {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 253)];
    msghdr msg{};
    iovec iov{static_cast<char*>(data) + done, size - done};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); n >= 0 && c; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        const size_t at = fds.size();
        fds.resize(at + count);
        std::memcpy(fds.data() + at, CMSG_DATA(c), count * sizeof(int));
      }
    if (n < 0) fail(GPUMEM_ERROR_IO, "receiving an IPC handle on socket %d: %s", socket, strerror(errno));
    if (n == 0) fail(GPUMEM_ERROR_IO, "receiving an IPC handle on socket %d: the other end closed it", socket);
    if (msg.msg_flags & MSG_CTRUNC)
      fail(GPUMEM_ERROR_IO,
           "receiving an IPC handle on socket %d: descriptors were lost (the process's limit on "
           "open files?)",
           socket);
    done += static_cast<size_t>(n);
  }
}

struct Descriptors {  // closed whatever happens
  std::vector<int> fds;
  ~Descriptors() {
    for (int fd : fds) ::close(fd);
  }
};

}  // namespace

void send(int socket, const gpumem_ipc_handle_t* handle) {
  const Wire w = Wire::read(handle);
  Descriptors d;
  d.fds.resize(w.fd_count, -1);
  export_fds(handle, d.fds.data(), d.fds.size());
  const size_t first = std::min(d.fds.size(), kBatch);
  send_part(socket, handle->bytes, sizeof handle->bytes, d.fds.data(), first);
  for (size_t at = first; at < d.fds.size(); at += kBatch) {
    const char more = 1;
    send_part(socket, &more, 1, d.fds.data() + at, std::min(kBatch, d.fds.size() - at));
  }
}

void* receive(int socket, size_t& size) {
  gpumem_ipc_handle_t handle;
  Descriptors d;
  receive_part(socket, handle.bytes, sizeof handle.bytes, d.fds);
  const Wire w = Wire::read(&handle);
  while (d.fds.size() < w.fd_count) {
    char more;
    const size_t had = d.fds.size();
    receive_part(socket, &more, 1, d.fds);
    if (d.fds.size() == had) fail(GPUMEM_ERROR_IO, "receiving an IPC handle on socket %d: descriptors missing", socket);
  }
  return open(&handle, d.fds.data(), d.fds.size(), size);
}

}  // namespace gpumem::ipc
