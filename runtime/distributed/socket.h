// Blocking TCP sockets for the tcp backend and the NCCL rendezvous: rank 0 listens,
// the others connect (retrying until the timeout, since rank 0 may start late). Every
// wait is bounded by the timeout; failures throw BackendError naming the peer.
#pragma once

#include <cstddef>
#include <string>

namespace kiln::distributed {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool valid() const { return fd_ >= 0; }
  // Sends / receives exactly n bytes; `peer` names the other side in errors.
  void send_all(const void* data, size_t n, const char* peer) const;
  void recv_all(void* data, size_t n, const char* peer) const;

  // Listens on port (all interfaces); throws when the port is taken.
  static Socket listen_on(int port);
  // Accepts one connection, waiting at most timeout_s.
  Socket accept_one(double timeout_s) const;
  // Connects to addr:port, retrying until timeout_s has passed.
  static Socket connect_to(const std::string& addr, int port, double timeout_s);

 private:
  void set_timeouts(double timeout_s) const;
  int fd_ = -1;
};

}  // namespace kiln::distributed
