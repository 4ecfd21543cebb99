// The tcp backend: a star through rank 0 over kiln's sockets. Rank 0 receives every
// rank's buffer, reduces in rank order (so every run sums in the same order) and sends
// the result back. Simple and deterministic; fine for a few CPU processes on one host.
// It also carries the NCCL rendezvous (runtime/cuda/nccl_group.cpp).
#include <cstring>
#include <vector>

#include "runtime/distributed/backends.h"
#include "runtime/distributed/socket.h"
#include "runtime/error.h"

namespace kiln::distributed {
namespace {

class TcpGroup final : public ProcessGroup {
 public:
  explicit TcpGroup(const Rendezvous& rv) : ProcessGroup(rv.rank, rv.world_size) {
    const int32_t hello[2] = {rv.rank, rv.world_size};
    if (rv.rank == 0) {
      peers_.resize(static_cast<size_t>(rv.world_size));
      if (rv.world_size == 1) return;
      Socket server = Socket::listen_on(rv.port);
      for (int i = 1; i < rv.world_size; ++i) {
        Socket c = server.accept_one(rv.timeout_s);
        int32_t theirs[2];
        c.recv_all(theirs, sizeof theirs, "a connecting rank");
        KILN_CHECK(theirs[1] == rv.world_size && theirs[0] > 0 && theirs[0] < rv.world_size &&
                       !peers_[static_cast<size_t>(theirs[0])].valid(),
                   ValueError, "[init_process_group] rank 0 (world size ", rv.world_size,
                   ") got a connection from rank ", theirs[0], " with world size ", theirs[1]);
        peers_[static_cast<size_t>(theirs[0])] = std::move(c);
      }
      for (int i = 1; i < rv.world_size; ++i) peer(i).send_all(hello, sizeof hello, "a rank");
    } else {
      root_ = Socket::connect_to(rv.addr, rv.port, rv.timeout_s);
      root_.send_all(hello, sizeof hello, "rank 0");
      int32_t ack[2];
      root_.recv_all(ack, sizeof ack, "rank 0");
    }
  }

  std::string backend() const override { return "tcp"; }

 protected:
  void do_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, Device) override {
    const size_t bytes = static_cast<size_t>(count * itemsize(dtype));
    if (rank() != 0) {
      root_.send_all(data, bytes, "rank 0");
      root_.recv_all(data, bytes, "rank 0");
      return;
    }
    std::vector<char> tmp(bytes);
    for (int r = 1; r < world_size(); ++r) {
      peer(r).recv_all(tmp.data(), bytes, name(r));
      reduce_into(data, tmp.data(), count, dtype, op);
    }
    if (op == ReduceOp::Avg) finish_average(data, count, dtype, world_size());
    for (int r = 1; r < world_size(); ++r) peer(r).send_all(data, bytes, name(r));
  }

  void do_broadcast(void* data, int64_t count, DType dtype, int root, Device) override {
    const size_t bytes = static_cast<size_t>(count * itemsize(dtype));
    if (rank() != 0) {
      if (rank() == root)
        root_.send_all(data, bytes, "rank 0");
      else
        root_.recv_all(data, bytes, "rank 0");
      return;
    }
    if (root != 0) peer(root).recv_all(data, bytes, name(root));
    for (int r = 1; r < world_size(); ++r)
      if (r != root) peer(r).send_all(data, bytes, name(r));
  }

  void do_all_gather(const void* input, void* output, int64_t count, DType dtype, Device) override {
    const size_t bytes = static_cast<size_t>(count * itemsize(dtype));
    const size_t total = bytes * static_cast<size_t>(world_size());
    char* out = static_cast<char*>(output);
    if (rank() != 0) {
      root_.send_all(input, bytes, "rank 0");
      root_.recv_all(out, total, "rank 0");
      return;
    }
    std::memmove(out, input, bytes);
    for (int r = 1; r < world_size(); ++r)
      peer(r).recv_all(out + bytes * static_cast<size_t>(r), bytes, name(r));
    for (int r = 1; r < world_size(); ++r) peer(r).send_all(out, total, name(r));
  }

  void do_reduce_scatter(const void* input, void* output, int64_t count, DType dtype, ReduceOp op,
                         Device) override {
    const size_t bytes = static_cast<size_t>(count * itemsize(dtype));
    const size_t total = bytes * static_cast<size_t>(world_size());
    if (rank() != 0) {
      root_.send_all(input, total, "rank 0");
      root_.recv_all(output, bytes, "rank 0");
      return;
    }
    std::vector<char> acc(static_cast<const char*>(input), static_cast<const char*>(input) + total);
    std::vector<char> tmp(total);
    const int64_t n = count * world_size();
    for (int r = 1; r < world_size(); ++r) {
      peer(r).recv_all(tmp.data(), total, name(r));
      reduce_into(acc.data(), tmp.data(), n, dtype, op);
    }
    if (op == ReduceOp::Avg) finish_average(acc.data(), n, dtype, world_size());
    for (int r = 1; r < world_size(); ++r)
      peer(r).send_all(acc.data() + bytes * static_cast<size_t>(r), bytes, name(r));
    std::memcpy(output, acc.data(), bytes);
  }

  void do_barrier() override {
    bool token = true;
    do_all_reduce(&token, 1, DType::Bool, ReduceOp::Max, kCPU);
  }

 private:
  const Socket& peer(int r) const { return peers_[static_cast<size_t>(r)]; }
  const char* name(int r) {
    names_.resize(static_cast<size_t>(world_size()));
    std::string& s = names_[static_cast<size_t>(r)];
    if (s.empty()) s = "rank " + std::to_string(r);
    return s.c_str();
  }

  Socket root_;                // ranks > 0: the connection to rank 0
  std::vector<Socket> peers_;  // rank 0: one per other rank (index 0 unused)
  std::vector<std::string> names_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_tcp_group(const Rendezvous& rv) {
  return std::make_unique<TcpGroup>(rv);
}

}  // namespace kiln::distributed
