// A scratch GPU self-check of the CUDA backend: runs every kiln::cuda kernel family on
// CUDA tensors and compares with the CPU kernels on the same inputs (random inputs are
// bit-identical on both devices by construction). Not part of any CMake target yet;
// build it against the library, e.g.
//   g++ -std=c++20 -O1 -I. tests/cuda_smoke.cpp -Lbuild-cuda -lkiln
//       -Wl,-rpath,'$ORIGIN' -o build-cuda/cuda_smoke
// and run it with --time for a few rough kernel timings.
// Prints one line per failed check and a summary; exits 1 on any failure. On a machine
// without a GPU it prints cuda_context::device_count() (0), runs a CPU op and exits 0.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ops/api.h"
#include "runtime/cuda_context.h"
#include "runtime/error.h"

using namespace kiln;

namespace {

int g_checks = 0, g_failures = 0;

void fail(const std::string& name, const std::string& why) {
  ++g_failures;
  std::printf("FAIL %s: %s\n", name.c_str(), why.c_str());
  std::fflush(stdout);
}

// ref (CPU) and got (CUDA) must agree in shape, dtype and values:
// |ref - got| <= atol + rtol * |ref|, NaN matching NaN.
void expect_close(const std::string& name, const Tensor& ref, const Tensor& got, double rtol,
                  double atol) {
  ++g_checks;
  try {
    if (!got.is_cuda()) return fail(name, "result is not on CUDA: " + got.meta_str());
    if (ref.sizes() != got.sizes())
      return fail(name, "shape " + dims_str(got.sizes()) + " != " + dims_str(ref.sizes()));
    if (ref.dtype() != got.dtype())
      return fail(
          name, std::string("dtype ") + dtype_name(got.dtype()) + " != " + dtype_name(ref.dtype()));
    const std::vector<double> a = ref.to_vector<double>(), b = got.to_vector<double>();
    size_t bad = 0, first = 0;
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
      if (a[i] == b[i]) continue;  // also equal infinities
      const double err = std::fabs(a[i] - b[i]);
      if (!(err <= atol + rtol * std::fabs(a[i]))) {
        if (bad++ == 0) first = i;
        if (!(err <= worst)) worst = err;
      }
    }
    if (bad) {
      char buf[256];
      std::snprintf(buf, sizeof(buf),
                    "%zu of %zu elements differ; first at %zu: cpu %.9g cuda %.9g; worst abs "
                    "error %.3g",
                    bad, a.size(), first, a[first], b[first], worst);
      fail(name, buf);
    }
  } catch (const std::exception& e) {
    fail(name, std::string("comparison threw ") + e.what());
  }
}

// Runs f(device) on the CPU and on CUDA (f makes its inputs on the device it is given).
void compare(const std::string& name, const std::function<Tensor(Device)>& f, double rtol = 1e-5,
             double atol = 1e-6) {
  Tensor ref, got;
  try {
    ref = f(kCPU);
  } catch (const std::exception& e) {
    ++g_checks;
    return fail(name, std::string("CPU reference threw ") + e.what());
  }
  try {
    got = f(cuda_device(0));
    cuda_context::synchronize(0);
  } catch (const std::exception& e) {
    ++g_checks;
    return fail(name, std::string("CUDA threw ") + e.what());
  }
  expect_close(name, ref, got, rtol, atol);
}

template <class E>
void expect_throw(const std::string& name, const std::function<void()>& f,
                  const std::string& needle = "") {
  ++g_checks;
  try {
    f();
    fail(name, "did not throw");
  } catch (const E& e) {
    if (!needle.empty() && std::string(e.what()).find(needle) == std::string::npos)
      fail(name, std::string("message \"") + e.what() + "\" lacks \"" + needle + "\"");
  } catch (const std::exception& e) {
    fail(name, std::string("threw the wrong type: ") + e.what());
  }
}

// Deterministic inputs: the same values on every device.
Tensor randn_on(const Dims& sizes, Device d, uint64_t seed, DType dtype = DType::Float32) {
  manual_seed(seed);
  return randn(sizes, TensorOptions(dtype, d));
}
Tensor rand_on(const Dims& sizes, Device d, uint64_t seed, DType dtype = DType::Float32) {
  manual_seed(seed);
  return rand(sizes, TensorOptions(dtype, d));
}
// Small integers as floats (so that comparisons have ties): floor-like via int cast.
Tensor ints_on(const Dims& sizes, Device d, uint64_t seed, DType dtype = DType::Float32) {
  return (rand_on(sizes, d, seed) * 6.0 - 3.0).to(DType::Int32).to(dtype);
}

const DType kAll[] = {DType::Bool,     DType::Int32,   DType::Int64,  DType::Float16,
                      DType::BFloat16, DType::Float32, DType::Float64};

void check_unary() {
  using UFn = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, UFn>> ops = {
      {"neg", neg},       {"abs", kiln::abs},        {"exp", kiln::exp},   {"sin", kiln::sin},
      {"cos", kiln::cos}, {"tanh", kiln::tanh},      {"sigmoid", sigmoid}, {"relu", relu},
      {"silu", silu},     {"reciprocal", reciprocal}};
  for (auto& [name, fn] : ops) {
    const std::string n = name;
    compare("unary " + n, [&](Device d) { return fn(randn_on({37, 129}, d, 1)); });
    compare("unary strided " + n, [&](Device d) {
      return fn(randn_on({37, 129}, d, 1).t().slice(0, 1, 120, 3));
    });
    compare(
        "unary f16 " + n, [&](Device d) { return fn(randn_on({1001}, d, 2, DType::Float16)); },
        2e-3, 1e-3);
  }
  const std::vector<std::pair<const char*, UFn>> positive = {
      {"log", kiln::log}, {"sqrt", kiln::sqrt}, {"rsqrt", rsqrt}};
  for (auto& [name, fn] : positive) {
    compare(std::string("unary ") + name,
            [&](Device d) { return fn(rand_on({1000}, d, 3) + 0.1); });
  }
  compare("gelu erf", [](Device d) { return gelu(randn_on({333}, d, 4)); });
  compare("gelu tanh", [](Device d) { return gelu(randn_on({333}, d, 4), true); });
  compare(
      "exp bf16", [](Device d) { return kiln::exp(randn_on({515}, d, 5, DType::BFloat16)); }, 1e-2,
      1e-2);
  compare(
      "tanh f64", [](Device d) { return kiln::tanh(randn_on({515}, d, 5, DType::Float64)); }, 1e-12,
      1e-12);
  compare("neg int32",
          [](Device d) { return neg(arange(-50, 50, 1, TensorOptions(DType::Int32, d))); });
  compare("abs int64",
          [](Device d) { return kiln::abs(arange(-50, 50, 1, TensorOptions(DType::Int64, d))); });
  compare("relu int32",
          [](Device d) { return relu(arange(-50, 50, 1, TensorOptions(DType::Int32, d))); });
  compare("exp int32 -> float",
          [](Device d) { return kiln::exp(arange(-5, 5, 1, TensorOptions(DType::Int32, d))); });
  compare("relu_ in place on a transposed view", [](Device d) {
    Tensor x = randn_on({8, 9}, d, 6);
    Tensor v = x.t();
    v.relu_();
    return x;
  });

  for (DType from : kAll) {
    for (DType to : kAll) {
      auto src = [&](Device d) {
        return (arange(-24, 24, 1, TensorOptions(DType::Float32, d)) * 0.75).to(from);
      };
      const std::string n = std::string(dtype_name(from)) + "->" + dtype_name(to);
      compare("cast " + n, [&](Device d) { return src(d).to(to); });
      compare("cast strided " + n, [&](Device d) { return src(d).view({6, 8}).t().to(to); });
    }
  }
}

void check_binary() {
  using BFn = Tensor (*)(const Tensor&, const Tensor&);
  using BSFn = Tensor (*)(const Tensor&, const Scalar&);
  using SBFn = Tensor (*)(const Scalar&, const Tensor&);
  struct Row {
    const char* name;
    BFn tt;
    BSFn ts;
    SBFn st;
  };
  const std::vector<Row> ops = {{"add", add, add, add},
                                {"sub", sub, sub, sub},
                                {"mul", mul, mul, mul},
                                {"div", div, div, div},
                                {"maximum", maximum, maximum, maximum},
                                {"minimum", minimum, minimum, minimum},
                                {"eq", eq, eq, eq},
                                {"ne", ne, ne, ne},
                                {"lt", lt, lt, lt},
                                {"le", le, le, le},
                                {"gt", gt, gt, gt},
                                {"ge", ge, ge, ge}};
  for (const Row& r : ops) {
    const std::string n = r.name;
    compare("binary " + n, [&](Device d) {
      return r.tt(ints_on({4, 1, 33}, d, 6), ints_on({7, 33}, d, 7));
    });
    compare("binary dense " + n,
            [&](Device d) { return r.tt(randn_on({4099}, d, 6), randn_on({4099}, d, 7)); });
    compare("binary scalar right " + n, [&](Device d) {
      return r.ts(ints_on({5, 9}, d, 8), Scalar(1.0));
    });
    compare("binary scalar left " + n, [&](Device d) {
      return r.st(Scalar(2), ints_on({5, 9}, d, 8));
    });
    compare("binary int32+float " + n, [&](Device d) {
      return r.tt(ints_on({6, 7}, d, 9, DType::Int32), ints_on({6, 7}, d, 10));
    });
    compare("binary int64 " + n, [&](Device d) {
      return r.tt(ints_on({6, 7}, d, 9, DType::Int64), ints_on({7}, d, 10, DType::Int64) + 4);
    });
    compare(
        "binary f16 " + n,
        [&](Device d) {
          return r.tt(randn_on({3, 65}, d, 11, DType::Float16),
                      randn_on({3, 65}, d, 12, DType::Float16));
        },
        2e-3, 1e-3);
  }
  compare("pow float",
          [](Device d) { return pow(rand_on({99}, d, 13) + 0.5, randn_on({99}, d, 14)); });
  compare("pow int", [](Device d) {
    return pow(ints_on({99}, d, 15, DType::Int64), ints_on({99}, d, 16, DType::Int64) + 3);
  });
  compare("pow scalar exponent", [](Device d) { return pow(randn_on({99}, d, 13), Scalar(2)); });
  compare("int division -> float", [](Device d) {
    return div(arange(-10, 10, 1, TensorOptions(DType::Int32, d)), Scalar(4));
  });
  compare("bool add (or)", [](Device d) {
    return add(gt(randn_on({50}, d, 17), 0.0), gt(randn_on({50}, d, 18), 0.0));
  });
  compare("maximum NaN", [](Device d) {
    return maximum(log(randn_on({64}, d, 19)), randn_on({64}, d, 20));  // NaN for x < 0
  });
  compare("add_ into a strided view", [](Device d) {
    Tensor x = randn_on({16, 12}, d, 21);
    Tensor v = x.slice(1, 0, 12, 2);
    v.add_(randn_on({6}, d, 22));
    return x;
  });
  compare("mul_ float tensor by int tensor", [](Device d) {
    Tensor x = randn_on({10}, d, 23);
    x.mul_(arange(0, 10, 1, TensorOptions(DType::Int64, d)));
    return x;
  });
  compare("broadcast 6-D", [](Device d) {
    return add(randn_on({2, 1, 3, 1, 5, 1}, d, 24), randn_on({1, 4, 1, 2, 1, 3}, d, 25));
  });
  expect_throw<ShapeError>("9-D non-mergeable broadcast", [] {
    Device d = cuda_device(0);
    Tensor a = randn_on({2, 1, 2, 1, 2, 1, 2, 1, 2}, d, 26);
    Tensor b = randn_on({1, 2, 1, 2, 1, 2, 1, 2, 1}, d, 27);
    add(a, b);
    cuda_context::synchronize(0);
  });
}

void check_where_clamp() {
  compare("where broadcast", [](Device d) {
    return where(gt(randn_on({5, 1, 7}, d, 30), 0.0), randn_on({3, 7}, d, 31),
                 ints_on({5, 3, 1}, d, 32, DType::Int32));
  });
  compare("where f16", [](Device d) {
    return where(gt(randn_on({100}, d, 33), 0.0), randn_on({100}, d, 34, DType::Float16),
                 randn_on({100}, d, 35, DType::Float16));
  });
  compare("clamp both", [](Device d) { return clamp(randn_on({1000}, d, 36), -0.5, 0.5); });
  compare("clamp min", [](Device d) { return clamp(randn_on({1000}, d, 36), 0.25, std::nullopt); });
  compare("clamp max int", [](Device d) {
    return clamp(arange(-9, 9, 1, TensorOptions(DType::Int32, d)), std::nullopt, 3);
  });
  compare("clamp_ strided", [](Device d) {
    Tensor x = randn_on({9, 9}, d, 37);
    x.t().clamp_(-0.1, 0.2);
    return x;
  });
}

void check_reduce() {
  const std::vector<Dims> dim_sets = {{}, {0}, {1}, {2}, {0, 2}, {1, 2}};
  for (const Dims& dims : dim_sets) {
    for (bool keep : {false, true}) {
      const std::string n = dims_str(dims) + (keep ? " keepdim" : "");
      compare(
          "sum " + n,
          [&](Device d) {
            return sum(randn_on({8, 33, 65}, d, 40), dims, keep);
          },
          1e-4, 1e-4);
      compare(
          "mean " + n,
          [&](Device d) {
            return mean(randn_on({8, 33, 65}, d, 40), dims, keep);
          },
          1e-4, 1e-5);
      compare("amax " + n, [&](Device d) {
        return amax(randn_on({8, 33, 65}, d, 40), dims, keep);
      });
      compare("amin " + n, [&](Device d) {
        return amin(randn_on({8, 33, 65}, d, 40), dims, keep);
      });
      compare(
          "var " + n,
          [&](Device d) {
            return var(randn_on({8, 33, 65}, d, 40), dims, 1, keep);
          },
          1e-4, 1e-5);
    }
  }
  compare(
      "var correction 0",
      [](Device d) {
        return var(randn_on({7, 300}, d, 41), {1}, 0);
      },
      1e-4, 1e-6);
  compare("var one element", [](Device d) { return var(randn_on({5, 1}, d, 41), {1}, 1); });
  compare("sum int32 -> int64", [](Device d) {
    return sum(ints_on({50, 70}, d, 42, DType::Int32), {1});
  });
  compare("sum bool", [](Device d) { return sum(gt(randn_on({1000}, d, 43), 0.0)); });
  compare(
      "sum f16",
      [](Device d) {
        return sum(randn_on({64, 300}, d, 44, DType::Float16), {1});
      },
      1e-2, 1e-2);
  compare(
      "sum f64",
      [](Device d) {
        return sum(randn_on({3, 100000}, d, 45, DType::Float64), {1});
      },
      1e-12, 1e-10);
  compare("mean int -> float", [](Device d) {
    return mean(ints_on({10, 10}, d, 46, DType::Int64));
  });
  compare("amax int64", [](Device d) { return amax(ints_on({10, 10}, d, 47, DType::Int64), {0}); });
  compare("amax NaN", [](Device d) { return amax(log(randn_on({4, 50}, d, 48)), {1}); });
  compare("argmax dim", [](Device d) { return argmax(ints_on({13, 17}, d, 49), 1); });
  compare("argmax dim 0 keepdim", [](Device d) {
    return argmax(ints_on({13, 17}, d, 49), 0, true);
  });
  compare("argmax flat", [](Device d) { return argmax(randn_on({13, 17}, d, 50)); });
  compare("argmax big row ties", [](Device d) { return argmax(ints_on({3, 100000}, d, 51), 1); });
  compare(
      "sum strided input",
      [](Device d) {
        return sum(randn_on({40, 50}, d, 52).t().slice(0, 0, 50, 2), {1});
      },
      1e-4, 1e-5);
  compare(
      "sum many short rows",
      [](Device d) {
        return sum(randn_on({100000, 3}, d, 53), {1});
      },
      1e-4, 1e-5);
  // Accuracy: 1M float32 values vs the float64 sum (1e-4 relative).
  {
    ++g_checks;
    Tensor x = rand_on({1 << 20}, cuda_device(0), 54);
    const double exact = sum(x.to(DType::Float64)).item<double>();
    const double got = sum(x).item<double>();
    if (!(std::fabs(got - exact) <= 1e-4 * std::fabs(exact)))
      fail("sum 1M accuracy", "got " + std::to_string(got) + ", float64 " + std::to_string(exact));
    const double exact_mean = mean(x.to(DType::Float64)).item<double>();
    const double got_mean = mean(x).item<double>();
    ++g_checks;
    if (!(std::fabs(got_mean - exact_mean) <= 1e-4 * std::fabs(exact_mean)))
      fail("mean 1M accuracy", "got " + std::to_string(got_mean));
  }
  compare(
      "sum 1M over rows of 16 columns",
      [](Device d) {
        return sum(rand_on({1 << 16, 16}, d, 55), {0});
      },
      1e-4, 1e-4);
}

void check_norm() {
  for (int64_t dim : {0, 1, 2, -1}) {
    compare("softmax dim " + std::to_string(dim), [&](Device d) {
      return softmax(randn_on({6, 37, 41}, d, 60), dim);
    });
    compare(
        "log_softmax dim " + std::to_string(dim),
        [&](Device d) {
          return log_softmax(randn_on({6, 37, 41}, d, 60), dim);
        },
        1e-5, 1e-5);
  }
  compare("softmax long rows", [](Device d) {
    return softmax(randn_on({4, 5000}, d, 61) * 10.0, 1);
  });
  compare(
      "softmax rows beyond the register cache",
      [](Device d) {
        return log_softmax(randn_on({3, 10000}, d, 61), 1);
      },
      1e-5, 1e-5);
  compare(
      "layer_norm rows beyond the register cache",
      [](Device d) {
        return layer_norm(randn_on({3, 9000}, d, 66), {9000}, Tensor(), Tensor(), 1e-5);
      },
      1e-4, 1e-5);
  compare(
      "layer_norm f16",
      [](Device d) {
        return layer_norm(randn_on({5, 700}, d, 66, DType::Float16), {700}, Tensor(), Tensor(),
                          1e-5);
      },
      1e-2, 1e-2);
  compare("softmax few long columns", [](Device d) {
    return softmax(randn_on({2, 3000, 3}, d, 62), 1);
  });
  compare(
      "softmax f16",
      [](Device d) {
        return softmax(randn_on({8, 100}, d, 63, DType::Float16), 1);
      },
      1e-2, 1e-3);
  compare("softmax -inf row", [](Device d) {
    return softmax(log(gt(randn_on({3, 8}, d, 64), 5.0).to(DType::Float32)), 1);  // all -inf
  });
  compare("softmax int input", [](Device d) {
    return softmax(ints_on({4, 9}, d, 65, DType::Int32), 1);
  });
  compare(
      "layer_norm weight bias",
      [](Device d) {
        return layer_norm(randn_on({16, 1500}, d, 66) * 3.0 + 1.0, {1500}, randn_on({1500}, d, 67),
                          randn_on({1500}, d, 68), 1e-5);
      },
      1e-4, 1e-5);
  compare(
      "layer_norm 2 dims",
      [](Device d) {
        return layer_norm(randn_on({64, 8, 12}, d, 69), {8, 12}, Tensor(), Tensor(), 1e-5);
      },
      1e-4, 1e-5);
  compare(
      "layer_norm strided",
      [](Device d) {
        return layer_norm(randn_on({40, 30}, d, 70).t(), {40}, randn_on({40}, d, 71), Tensor(),
                          1e-3);
      },
      1e-4, 1e-5);
}

void check_linalg() {
  const double rt = 2e-5, at = 2e-5;
  compare(
      "matmul 2d",
      [](Device d) {
        return matmul(randn_on({33, 17}, d, 80), randn_on({17, 29}, d, 81));
      },
      2e-5, 2e-5);
  compare(
      "matmul batched broadcast",
      [](Device d) {
        return matmul(randn_on({3, 1, 5, 7}, d, 82), randn_on({4, 7, 6}, d, 83));
      },
      rt, at);
  compare(
      "matmul 3d @ 2d",
      [](Device d) {
        return matmul(randn_on({3, 5, 7}, d, 82), randn_on({7, 6}, d, 83));
      },
      rt, at);
  compare(
      "matmul 1d @ 2d",
      [](Device d) {
        return matmul(randn_on({7}, d, 84), randn_on({7, 6}, d, 85));
      },
      rt, at);
  compare(
      "matmul 2d @ 1d",
      [](Device d) {
        return matmul(randn_on({5, 7}, d, 86), randn_on({7}, d, 87));
      },
      rt, at);
  compare(
      "matmul dot", [](Device d) { return matmul(randn_on({300}, d, 88), randn_on({300}, d, 89)); },
      rt, 1e-4);
  compare(
      "matmul batched @ 1d",
      [](Device d) {
        return matmul(randn_on({2, 5, 7}, d, 86), randn_on({7}, d, 87));
      },
      rt, at);
  compare(
      "matmul transposed",
      [](Device d) {
        return matmul(randn_on({17, 33}, d, 90).t(), randn_on({29, 17}, d, 91).t());
      },
      rt, at);
  compare(
      "matmul sliced",
      [](Device d) {
        return matmul(randn_on({33, 40}, d, 92).slice(1, 3, 20),
                      randn_on({17, 60}, d, 93).slice(1, 0, 60, 2));
      },
      rt, at);
  compare(
      "matmul permuted batch",
      [](Device d) {
        return matmul(randn_on({5, 3, 7}, d, 94).transpose(0, 1), randn_on({3, 7, 4}, d, 95));
      },
      rt, at);
  compare(
      "matmul big",
      [](Device d) {
        return matmul(randn_on({256, 512}, d, 96), randn_on({512, 384}, d, 97));
      },
      1e-4, 1e-4);
  compare(
      "matmul f16",
      [](Device d) {
        return matmul(randn_on({64, 96}, d, 98, DType::Float16),
                      randn_on({96, 32}, d, 99, DType::Float16));
      },
      1e-2, 2e-2);
  compare(
      "matmul bf16",
      [](Device d) {
        return matmul(randn_on({64, 96}, d, 98, DType::BFloat16),
                      randn_on({96, 32}, d, 99, DType::BFloat16));
      },
      2e-2, 1e-1);
  compare(
      "matmul f64",
      [](Device d) {
        return matmul(randn_on({31, 47}, d, 100, DType::Float64),
                      randn_on({47, 13}, d, 101, DType::Float64));
      },
      1e-12, 1e-12);
  compare("matmul k = 0", [](Device d) {
    return matmul(randn_on({3, 0}, d, 102), randn_on({0, 4}, d, 103));
  });
  compare(
      "linear bias",
      [](Device d) {
        return linear(randn_on({2, 5, 17}, d, 104), randn_on({9, 17}, d, 105),
                      randn_on({9}, d, 106));
      },
      rt, at);
  compare(
      "linear no bias 1-D",
      [](Device d) {
        return linear(randn_on({17}, d, 107), randn_on({9, 17}, d, 108));
      },
      rt, at);
  compare(
      "linear strided x and weight",
      [](Device d) {
        return linear(randn_on({17, 6}, d, 109).t(), randn_on({17, 9}, d, 110).t(),
                      randn_on({9}, d, 111));
      },
      rt, at);
  compare(
      "conv2d stride pad bias",
      [](Device d) {
        return conv2d(randn_on({2, 3, 11, 13}, d, 112), randn_on({4, 3, 3, 5}, d, 113),
                      randn_on({4}, d, 114), {2, 1}, {1, 2});
      },
      1e-4, 1e-4);
  compare(
      "conv2d 1x1",
      [](Device d) {
        return conv2d(randn_on({2, 8, 5, 6}, d, 115), randn_on({4, 8, 1, 1}, d, 116));
      },
      1e-4, 1e-4);
  compare(
      "conv2d unbatched",
      [](Device d) {
        return conv2d(randn_on({3, 9, 9}, d, 117), randn_on({2, 3, 3, 3}, d, 118),
                      randn_on({2}, d, 119));
      },
      1e-4, 1e-4);
  compare("max_pool2d", [](Device d) {
    return max_pool2d(randn_on({2, 3, 11, 13}, d, 120), {3, 3}, {2, 2}, {1, 1});
  });
  compare("avg_pool2d", [](Device d) {
    return avg_pool2d(randn_on({2, 3, 11, 13}, d, 120), {3, 2}, {2, 1}, {1, 1});
  });
  compare("max_pool2d unbatched strided", [](Device d) {
    return max_pool2d(randn_on({12, 12, 3}, d, 121).permute({2, 0, 1}), {2, 2});
  });
}

void check_data_movement() {
  compare("cat mixed dtypes", [](Device d) {
    return cat({randn_on({2, 3}, d, 130), ints_on({2, 4}, d, 131, DType::Int32),
                randn_on({3, 2}, d, 132).t()},
               1);
  });
  compare("cat dim 0 f16", [](Device d) {
    return cat({randn_on({2, 3}, d, 133, DType::Float16), randn_on({1, 3}, d, 134, DType::Float16)},
               0);
  });
  compare("index_select dim 0 int64", [](Device d) {
    return index_select(randn_on({5, 7}, d, 135), 0, from_vector<int64_t>({0, 4, 2, 2}, {4}, d));
  });
  compare("index_select dim 1 int32 strided x", [](Device d) {
    return index_select(randn_on({7, 5}, d, 136).t(), 1, from_vector<int32_t>({6, 0, 3}, {3}, d));
  });
  compare("embedding", [](Device d) {
    return embedding(randn_on({10, 16}, d, 137),
                     from_vector<int64_t>({1, 9, 9, 0, 3, 3}, {2, 3}, d));
  });
  expect_throw<IndexError>(
      "index_select bad index",
      [] {
        Device d = cuda_device(0);
        index_select(randn_on({5, 7}, d, 138), 0, from_vector<int64_t>({1, 7, 2}, {3}, d));
      },
      "index 7 is out of range for dim 0 with size 5");
  expect_throw<IndexError>(
      "index_select negative index",
      [] {
        Device d = cuda_device(0);
        index_select(randn_on({5, 7}, d, 138), 1, from_vector<int32_t>({-1}, {1}, d));
      },
      "index -1 is out of range for dim 1 with size 7");
  compare("transpose copy odd sizes", [](Device d) {
    return randn_on({67, 45}, d, 141).t().contiguous();
  });
  compare("permute copy 3-D", [](Device d) {
    return randn_on({5, 40, 33}, d, 142).permute({2, 0, 1}).contiguous();
  });
  compare("transpose copy batched f16", [](Device d) {
    return randn_on({3, 4, 50, 60}, d, 143, DType::Float16).transpose(2, 3).contiguous();
  });
  compare("transpose copy int64", [](Device d) {
    return arange(0, 4000, 1, TensorOptions(DType::Int64, d)).view({40, 100}).t().contiguous();
  });
  compare("transpose copy bool", [](Device d) {
    return gt(randn_on({70, 90}, d, 144), 0.0).t().contiguous();
  });
  compare("transpose copy of a slice", [](Device d) {
    return randn_on({64, 80}, d, 145).slice(1, 3, 77, 2).t().contiguous();
  });
  compare("to cuda strided, back", [](Device d) { return randn_on({9, 8}, kCPU, 139).t().to(d); });
  compare("copy_ across devices into a view", [](Device d) {
    Tensor x = zeros({6, 6}, TensorOptions(DType::Float32, d));
    x.slice(0, 0, 6, 2).copy_(randn_on({3, 6}, kCPU, 140));
    return x;
  });
}

void check_factories() {
  compare("full", [](Device d) { return full({5, 7}, 2.5, TensorOptions(DType::Float32, d)); });
  compare("full f16", [](Device d) {
    return full({5, 7}, -1.5, TensorOptions(DType::Float16, d));
  });
  compare("full int64",
          [](Device d) { return full({3}, int64_t{1} << 40, TensorOptions(DType::Int64, d)); });
  compare("zeros", [](Device d) { return zeros({1000}, TensorOptions(DType::Float64, d)); });
  compare("ones bool", [](Device d) { return ones({10}, TensorOptions(DType::Bool, d)); });
  compare("arange float",
          [](Device d) { return arange(-3.0, 7.5, 0.25, TensorOptions(DType::Float32, d)); });
  compare("arange int",
          [](Device d) { return arange(-3, 1000, 7, TensorOptions(DType::Int64, d)); });
  compare("fill_ strided", [](Device d) {
    Tensor x = zeros({6, 6}, TensorOptions(DType::Float32, d));
    x.t().slice(0, 1, 6, 2).fill_(3.0);
    return x;
  });
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    compare(
        std::string("rand bit-identical ") + dtype_name(dt),
        [&](Device d) {
          return rand_on({3, 1001}, d, 150, dt);
        },
        0, 0);
    compare(
        std::string("randn ") + dtype_name(dt),
        [&](Device d) {
          return randn_on({3, 1001}, d, 151, dt);
        },
        1e-6, 1e-6);
  }
}

void check_runtime() {
  ++g_checks;
  const size_t before = cuda_context::allocated_bytes(0);
  {
    Tensor a = randn_on({1 << 20}, cuda_device(0), 160);
    if (cuda_context::allocated_bytes(0) < before + (4u << 20))
      fail("allocator accounting", "allocated_bytes did not grow by 4 MiB");
  }
  ++g_checks;
  if (cuda_context::allocated_bytes(0) != before)
    fail("allocator release", "allocated_bytes " +
                                  std::to_string(cuda_context::allocated_bytes(0)) +
                                  " != " + std::to_string(before));
  expect_throw<OutOfMemoryError>(
      "out of memory",
      [] { empty({int64_t{1} << 40}, TensorOptions(DType::Float32, cuda_device(0))); }, "cuda:0");
  compare("usable after OOM", [](Device d) { return add(randn_on({100}, d, 161), 1.0); });
  ++g_checks;
  cuda_context::empty_cache();
  if (cuda_context::cached_bytes(0) != 0) fail("empty_cache", "cached bytes left");
  expect_throw<DeviceError>("missing device", [] {
    zeros({3}, TensorOptions(DType::Float32, cuda_device(cuda_context::device_count())));
  });
}

// Rough timings of a few kernels (after warm-up), for a first look at bandwidth.
void timings() {
  using clock = std::chrono::steady_clock;
  auto time_it = [](const char* name, double bytes, const std::function<void()>& f) {
    f();
    cuda_context::synchronize(0);
    const int reps = 20;
    auto t0 = clock::now();
    for (int i = 0; i < reps; ++i) f();
    cuda_context::synchronize(0);
    const double s = std::chrono::duration<double>(clock::now() - t0).count() / reps;
    std::printf("time %-34s %9.1f us  %7.1f GB/s\n", name, s * 1e6, bytes / s / 1e9);
  };
  const Device d = cuda_device(0);
  const int64_t n = int64_t{1} << 26;
  Tensor x = randn_on({n}, d, 170), y = randn_on({n}, d, 171);
  time_it("add 64M float32", 12.0 * n, [&] { add(x, y); });
  time_it("mul scalar 64M float32", 8.0 * n, [&] { mul(x, 2.0); });
  time_it("exp 64M float32", 8.0 * n, [&] { kiln::exp(x); });
  time_it("add broadcast [8192,8192]+[8192]", 8.0 * n, [&, b = randn_on({8192}, d, 172)] {
    add(x.view({8192, 8192}), b);
  });
  time_it("transpose copy 8192^2", 8.0 * n, [&] { x.view({8192, 8192}).t().contiguous(); });
  time_it("sum 64M", 4.0 * n, [&] { sum(x); });
  time_it("sum rows [8192,8192] dim 1", 4.0 * n, [&] { sum(x.view({8192, 8192}), {1}); });
  time_it("sum cols [8192,8192] dim 0", 4.0 * n, [&] { sum(x.view({8192, 8192}), {0}); });
  time_it("softmax [8192,8192]", 8.0 * n, [&] { softmax(x.view({8192, 8192}), 1); });
  time_it("layer_norm [65536,1024]", 8.0 * n, [&] {
    layer_norm(x.view({65536, 1024}), {1024}, Tensor(), Tensor(), 1e-5);
  });
  Tensor a = randn_on({4096, 4096}, d, 173), b = randn_on({4096, 4096}, d, 174);
  time_it("matmul 4096^3 float32 (no TF32)", 0, [&] { matmul(a, b); });
  Tensor s1 = randn_on({4096, 1024}, d, 175);
  time_it("softmax [4096,1024]", 8.0 * 4096 * 1024, [&] { softmax(s1, 1); });
  time_it("log_softmax [4096,1024]", 8.0 * 4096 * 1024, [&] { log_softmax(s1, 1); });
  time_it("softmax [4096,1000]", 8.0 * 4096 * 1000,
          [&, s2 = randn_on({4096, 1000}, d, 178)] { softmax(s2, 1); });
  time_it("softmax [4096,2048]", 8.0 * 4096 * 2048,
          [&, s2 = randn_on({4096, 2048}, d, 178)] { softmax(s2, 1); });
  time_it("amax [4096,1024] dim 1", 4.0 * 4096 * 1024, [&] { amax(s1, {1}); });
  time_it("exp [4096,1024]", 8.0 * 4096 * 1024, [&] { kiln::exp(s1); });
  time_it("layer_norm [4096,1024]", 8.0 * 4096 * 1024,
          [&] { layer_norm(s1, {1024}, Tensor(), Tensor(), 1e-5); });
  time_it("x - amax(x, -1, keepdim) [4096,1024]", 12.0 * 4096 * 1024,
          [&] { sub(s1, amax(s1, {1}, true)); });
  Tensor t1 = randn_on({4096}, d, 176), t2 = randn_on({4096}, d, 177);
  time_it("tiny add 4096 (launch + host)", 0, [&] {
    for (int i = 0; i < 100; ++i) add(t1, t2);
  });
  time_it("tiny sum 4096 (launch + host)", 0, [&] {
    for (int i = 0; i < 100; ++i) sum(t1);
  });
}

// One call of each kernel of interest, for a profiler (ncu) to time.
void profile_targets() {
  const Device d = cuda_device(0);
  Tensor s1 = randn_on({4096, 1024}, d, 175);
  Tensor x = randn_on({8192, 8192}, d, 170);
  cuda_context::synchronize(0);
  softmax(s1, 1);
  layer_norm(s1, {1024}, Tensor(), Tensor(), 1e-5);
  amax(s1, {1});
  kiln::exp(s1);
  x.t().contiguous();
  add(x, randn_on({8192}, d, 172));
  softmax(x, 1);
  cuda_context::synchronize(0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--profile") {
    profile_targets();
    return 0;
  }
  const int count = cuda_context::device_count();
  std::printf("built_with_cuda=%d device_count=%d\n", cuda_context::built_with_cuda(), count);
  if (count == 0) {
    Tensor x = add(arange(0, 4, 1, TensorOptions(DType::Float32)), 1.0);
    std::printf("no GPU: CPU op add(arange(4), 1) = %s\n", x.str().c_str());
    return 0;
  }
  std::printf("device 0: %s\n", cuda_context::device_name(0).c_str());
  const std::vector<std::pair<const char*, void (*)()>> groups = {
      {"unary", check_unary},
      {"binary", check_binary},
      {"where_clamp", check_where_clamp},
      {"reduce", check_reduce},
      {"norm", check_norm},
      {"linalg", check_linalg},
      {"data_movement", check_data_movement},
      {"factories", check_factories},
      {"runtime", check_runtime}};
  for (auto& [name, fn] : groups) {
    const int before = g_failures;
    try {
      fn();
    } catch (const std::exception& e) {
      fail(name, std::string("group threw ") + e.what());
    }
    std::printf("group %-14s %s\n", name, g_failures == before ? "ok" : "FAILED");
    std::fflush(stdout);
  }
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  if (argc > 1 && std::string(argv[1]) == "--time") timings();
  return g_failures == 0 ? 0 : 1;
}
