// Differential test of the tracer: random op programs (pointwise, broadcasting,
// reductions, softmax, matmul, views, cat, in-place updates of inputs, random ops,
// host reads feeding scalars back in) run for several iterations eagerly, traced and
// interpreted, and traced and JIT-compiled must agree, outputs and mutated inputs alike
// (run_modes.h switches the modes). Each program's seed is printed on failure. The
// fuzzer (tests/fuzz/) goes wider: every op of the registry, dtypes, shapes, aliasing.
#include <functional>

#include "run_modes.h"
#include "tracer_util.h"

namespace kt {
namespace {

using kiln::Scalar;
constexpr int64_t kN = 6;  // every pool tensor is [kN, kN] (square, so transposes fit)

struct Program {
  // Appends one value to the pool; may mutate inputs in place.
  std::vector<std::function<void(std::vector<Tensor>& pool, int iteration)>> steps;
  int num_inputs = 3;
};

Program generate(uint64_t seed) {
  std::mt19937_64 g(seed);
  auto pick = [&](int n) { return static_cast<int>(g() % static_cast<uint64_t>(n)); };
  Program p;
  const int length = 6 + pick(14);
  int pool = p.num_inputs;
  for (int s = 0; s < length; ++s) {
    const int a = pick(pool), b = pick(pool), kind = pick(14);
    const double c = 0.1 + 0.05 * pick(10);
    switch (kind) {
      case 0: {
        const int u = pick(8);
        p.steps.push_back([a, u](std::vector<Tensor>& v, int) {
          const Tensor& x = v[a];
          static const std::function<Tensor(const Tensor&)> fns[] = {
              [](const Tensor& t) { return kiln::tanh(t); },
              [](const Tensor& t) { return kiln::sin(t); },
              [](const Tensor& t) { return kiln::sigmoid(t); },
              [](const Tensor& t) { return kiln::relu(t); },
              [](const Tensor& t) { return kiln::neg(kiln::abs(t)); },
              [](const Tensor& t) { return kiln::silu(t); },
              [](const Tensor& t) { return kiln::gelu(t, true); },
              [](const Tensor& t) { return kiln::exp(kiln::tanh(t)); }};
          v.push_back(fns[u](x));
        });
        break;
      }
      case 1: {
        const int op = pick(5);
        p.steps.push_back([a, b, op](std::vector<Tensor>& v, int) {
          const Tensor &x = v[a], &y = v[b];
          Tensor r = op == 0   ? x + y
                     : op == 1 ? x - y
                     : op == 2 ? x * y
                     : op == 3 ? kiln::maximum(x, y)
                               : kiln::minimum(x, y);
          v.push_back(r);
        });
        break;
      }
      case 2:  // scalar operands change every iteration: they are plan arguments
        p.steps.push_back([a, c](std::vector<Tensor>& v, int it) {
          v.push_back((v[a] * (c + 0.01 * it) + 0.5) - (0.25 * it));
        });
        break;
      case 3:
        p.steps.push_back(
            [a, b](std::vector<Tensor>& v, int) { v.push_back(v[a] / (kiln::abs(v[b]) + 1.0)); });
        break;
      case 4:  // compared with an offset: programs often make v[a] and v[b] equal up to
               // rounding (x - sum(x) where the row sums to ~0), and a fused reduction may
               // round differently from eager, which a bare `>` would turn into a jump
        p.steps.push_back([a, b](std::vector<Tensor>& v, int) {
          v.push_back(kiln::where(v[a] > v[b] + 0.0123, v[a],
                                  kiln::clamp(v[b], Scalar(-0.5), Scalar(0.5))));
        });
        break;
      case 5: {
        const int dim = pick(2), r = pick(3);
        p.steps.push_back([a, dim, r](std::vector<Tensor>& v, int) {
          Tensor red = r == 0   ? kiln::sum(v[a], {dim}, true)
                       : r == 1 ? kiln::mean(v[a], {dim}, true)
                                : kiln::amax(v[a], {dim}, true);
          v.push_back(v[a] - red);  // broadcast back to [kN, kN]
        });
        break;
      }
      case 6: {
        const int dim = pick(2);
        p.steps.push_back(
            [a, dim](std::vector<Tensor>& v, int) { v.push_back(kiln::softmax(v[a], dim)); });
        break;
      }
      case 7:
        p.steps.push_back(
            [a, b](std::vector<Tensor>& v, int) { v.push_back(kiln::matmul(v[a], v[b]) * 0.2); });
        break;
      case 8:
        p.steps.push_back([a](std::vector<Tensor>& v, int) { v.push_back(v[a].t() + 0.0); });
        break;
      case 9:
        p.steps.push_back([a, b](std::vector<Tensor>& v, int) {
          v.push_back(
              kiln::cat({v[a].narrow(1, 0, 2), v[b].slice(1, 0, kN, 2), v[a].narrow(1, 5, 1)}, 1));
        });
        break;
      case 10: {  // in-place update of an input the user holds
        const int target = pick(3);
        p.steps.push_back([a, target, c](std::vector<Tensor>& v, int) {
          v[target].add_(kiln::tanh(v[a]) * (c * 0.1));
          v.push_back(v[target] * 1.0);
        });
        break;
      }
      case 11:
        p.steps.push_back([a](std::vector<Tensor>& v, int) {
          v.push_back(v[a] + kiln::rand({kN, kN}, v[a].dtype()) * 0.01);
        });
        break;
      case 12:  // a graph break whose value flows back in as a scalar
        p.steps.push_back([a](std::vector<Tensor>& v, int) {
          const double s = kiln::mean(v[a]).item<double>();
          v.push_back(v[a] * (1.0 + 0.001 * s));
        });
        break;
      default:
        p.steps.push_back([a](std::vector<Tensor>& v, int) {
          v.push_back(kiln::layer_norm(v[a], {kN}, {}, {}, 1e-5) * 0.5);
        });
        break;
    }
    ++pool;
  }
  return p;
}

// Runs the program `iterations` times from copies of the inputs; returns every value
// of every iteration plus the final inputs.
std::vector<Host> run(const Program& p, const std::vector<Tensor>& inputs, int iterations,
                      uint64_t seed) {
  std::vector<Tensor> held;
  for (const Tensor& t : inputs) held.push_back(t.clone());
  std::vector<Tensor> results;
  for (int it = 0; it < iterations; ++it) {
    kiln::manual_seed(seed + static_cast<uint64_t>(it));
    std::vector<Tensor> pool = held;
    for (const auto& step : p.steps) step(pool, it);
    for (size_t i = held.size(); i < pool.size(); ++i) results.push_back(pool[i]);
  }
  std::vector<Host> out;
  for (const Tensor& t : results) out.push_back(read(t));
  for (const Tensor& t : held) out.push_back(read(t));
  return out;
}

class TracerDifferential : public TracerTest, public ::testing::WithParamInterface<int> {};

TEST_P(TracerDifferential, RandomProgramsAgreeEagerAndTraced) {
  const DType dtype = GetParam() % 2 ? DType::Float64 : DType::Float32;
  // Fused kernels sum in another order and use their own exp/tanh, and these programs chain
  // up to 20 ops with cancellations (x - sum(x)), so errors of ~50 ulps of the operands'
  // scale are expected; a wrong operand, stride or scalar is off by far more.
  const Tol tol = dtype == DType::Float64 ? Tol{1e-9, 1e-10} : Tol{1e-4, 1e-5};
  for (int program = 0; program < 25; ++program) {
    const uint64_t seed = run_seed() ^ (static_cast<uint64_t>(GetParam()) << 32) ^ program;
    const Program p = generate(seed);
    std::vector<Tensor> inputs;
    for (int i = 0; i < p.num_inputs; ++i) inputs.push_back(random_tensor({kN, kN}, dtype));
    if (GetParam() >= 2) inputs[1] = random_tensor({kN, kN}, dtype).t();  // non-contiguous
    std::vector<Host> expected;
    {
      RunModeScope eager(RunMode::Eager);
      expected = run(p, inputs, 5, seed);
    }
    for (RunMode mode : {RunMode::Interpreted, RunMode::Jit}) {
      RunModeScope traced_mode(mode);
      const std::vector<Host> traced = run(p, inputs, 5, seed);
      ASSERT_EQ(traced.size(), expected.size());
      for (size_t i = 0; i < traced.size(); ++i) {
        ASSERT_TRUE(all_close(traced[i], expected[i], tol))
            << mode_name(mode) << ", program seed " << seed << ", value " << i << " of "
            << traced.size() << "\n"
            << kiln::tracer::explain().table();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Programs, TracerDifferential, ::testing::Range(0, 4));

}  // namespace
}  // namespace kt
