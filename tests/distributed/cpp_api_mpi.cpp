// The C++ distributed API under mpirun (ctest kiln_distributed_cpp_mpi, 2 ranks): every
// collective against values computed on the host in double, and GradientReducer on a
// least-squares model against one process's gradient of the combined batch. Each rank
// prints "ok" and returns 0, or prints what failed and returns 1.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "ops/api.h"
#include "ops/distributed/data_parallel.h"
#include "runtime/distributed/process_group.h"
#include "runtime/error.h"

namespace {

namespace dist = kiln::distributed;
int failures = 0;

void expect_close(const kiln::Tensor& t, const std::vector<double>& want, const char* what) {
  const std::vector<double> got = t.to_vector<double>();
  bool ok = got.size() == want.size();
  for (size_t i = 0; ok && i < got.size(); ++i)
    ok = std::abs(got[i] - want[i]) <= 1e-5 * (1 + std::abs(want[i]));
  if (!ok) {
    std::printf("FAIL %s\n", what);
    ++failures;
  }
}

std::vector<float> values(int rank, int salt, size_t n) {
  std::mt19937 gen(static_cast<unsigned>(1000 * salt + rank));
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

}  // namespace

int main() {
  dist::Options options;
  options.backend = "mpi";
  auto group = dist::init_process_group(options);
  const int rank = group->rank(), world = group->world_size();
  if (world < 2) {
    std::printf("run me with mpirun -np 2 or more\n");
    return 1;
  }
  // all_reduce (sum, max, avg), broadcast, all_gather, reduce_scatter, barrier
  for (auto op : {dist::ReduceOp::Sum, dist::ReduceOp::Max, dist::ReduceOp::Avg}) {
    kiln::Tensor t = kiln::from_vector(values(rank, 1, 6), {2, 3});
    group->all_reduce(t, op);
    std::vector<double> want(6, op == dist::ReduceOp::Max ? -1e30 : 0.0);
    for (int r = 0; r < world; ++r) {
      const auto v = values(r, 1, 6);
      for (size_t i = 0; i < 6; ++i)
        want[i] = op == dist::ReduceOp::Max ? std::max(want[i], double(v[i])) : want[i] + v[i];
    }
    if (op == dist::ReduceOp::Avg)
      for (double& w : want) w /= world;
    expect_close(t, want, dist::reduce_op_name(op));
  }
  kiln::Tensor b = kiln::from_vector(values(rank, 2, 5), {5});
  group->broadcast(b, 1);
  const auto src = values(1, 2, 5);
  expect_close(b, std::vector<double>(src.begin(), src.end()), "broadcast");
  kiln::Tensor gathered = kiln::zeros({world, 3});
  group->all_gather(gathered, kiln::from_vector(values(rank, 3, 3), {3}));
  std::vector<double> want_gather;
  for (int r = 0; r < world; ++r)
    for (float v : values(r, 3, 3)) want_gather.push_back(v);
  expect_close(gathered, want_gather, "all_gather");
  kiln::Tensor part = kiln::zeros({2});
  group->reduce_scatter(part, kiln::from_vector(values(rank, 4, 2 * world), {2 * world}));
  std::vector<double> want_part(2, 0.0);
  for (int r = 0; r < world; ++r)
    for (int i = 0; i < 2; ++i) want_part[i] += values(r, 4, 2 * world)[2 * rank + i];
  expect_close(part, want_part, "reduce_scatter");
  group->barrier();

  // DDP: rank r's slice of a batch of 8; the averaged gradient equals the full batch's.
  kiln::manual_seed(7);
  kiln::Tensor w = kiln::randn({4, 3});  // the same on every rank (same seed)
  if (rank == 1) w = w + 1.0;            // ... until broadcast_tensors makes it rank 0's
  w.set_requires_grad();
  dist::broadcast_tensors(*group, {w});
  const int per = 8 / world;
  std::vector<kiln::Tensor> xs, ys;
  for (int r = 0; r < world; ++r) {
    xs.push_back(kiln::from_vector(values(r, 5, per * 4), {per, 4}));
    ys.push_back(kiln::from_vector(values(r, 6, per * 3), {per, 3}));
  }
  const auto loss = [&](const kiln::Tensor& x, const kiln::Tensor& y) {
    kiln::Tensor d = kiln::matmul(x, w) - y;
    return kiln::mean(d * d);
  };
  dist::GradientReducer reducer(group, {w}, 16);  // 16 bytes: one bucket per parameter
  loss(xs[rank], ys[rank]).backward();
  reducer.all_reduce_gradients();
  const kiln::Tensor mine = w.grad().clone();
  w.set_grad({});
  loss(kiln::cat(xs), kiln::cat(ys)).backward();
  expect_close(mine, w.grad().to_vector<double>(), "GradientReducer vs the combined batch");

  // shapes that differ across ranks: a ValueError on every rank, and the group still works
  try {
    group->all_reduce(kiln::ones({3 + rank}));
    std::printf("FAIL mismatched shapes were accepted\n");
    ++failures;
  } catch (const kiln::ValueError& e) {
    if (rank == 0) std::printf("mismatch: %s\n", e.what());
  }
  group->barrier();
  dist::destroy_process_group();
  std::printf("rank %d of %d: %s\n", rank, world, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
