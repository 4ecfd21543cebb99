// POSIX sockets behind runtime/distributed/socket.h.
#include "runtime/distributed/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "runtime/error.h"

namespace kiln::distributed {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw BackendError("[distributed] " + what + ": " + std::strerror(errno));
}

}  // namespace

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::set_timeouts(double timeout_s) const {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_s);
  tv.tv_usec = static_cast<suseconds_t>((timeout_s - static_cast<double>(tv.tv_sec)) * 1e6);
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void Socket::send_all(const void* data, size_t n, const char* peer) const {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fail(std::string("sending to ") + peer + " failed (did it exit or time out?)");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void Socket::recv_all(void* data, size_t n, const char* peer) const {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t k = ::recv(fd_, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) {
      errno = ECONNRESET;
      fail(std::string(peer) + " closed the connection (did it exit?)");
    }
    if (k < 0) fail(std::string("receiving from ") + peer + " failed (timed out?)");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

Socket Socket::listen_on(int port) {
  Socket s(::socket(AF_INET, SOCK_STREAM, 0));
  if (!s.valid()) fail("socket()");
  int one = 1;
  setsockopt(s.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(s.fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    fail("rank 0 cannot listen on port " + std::to_string(port) + " (MASTER_PORT)");
  if (::listen(s.fd_, 128) != 0) fail("listen()");
  return s;
}

Socket Socket::accept_one(double timeout_s) const {
  pollfd p{fd_, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
  } while (r < 0 && errno == EINTR);
  if (r == 0) {
    errno = ETIMEDOUT;
    fail("rank 0 waited " + std::to_string(timeout_s) + " s for the other ranks to connect");
  }
  if (r < 0) fail("poll()");
  Socket c(::accept(fd_, nullptr, nullptr));
  if (!c.valid()) fail("accept()");
  c.set_timeouts(timeout_s);
  return c;
}

Socket Socket::connect_to(const std::string& addr, int port, double timeout_s) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(port);
  if (::getaddrinfo(addr.c_str(), port_str.c_str(), &hints, &res) != 0 || !res) {
    errno = EINVAL;
    fail("cannot resolve MASTER_ADDR '" + addr + "'");
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    Socket s(::socket(AF_INET, SOCK_STREAM, 0));
    if (!s.valid()) {
      ::freeaddrinfo(res);
      fail("socket()");
    }
    if (::connect(s.fd_, res->ai_addr, res->ai_addrlen) == 0) {
      ::freeaddrinfo(res);
      s.set_timeouts(timeout_s);
      return s;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::freeaddrinfo(res);
      fail("cannot connect to rank 0 at " + addr + ":" + port_str + " within " +
           std::to_string(timeout_s) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace kiln::distributed
