#include "interpret.h"

#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>

#include "ops/dispatch.h"

namespace kfuzz {
namespace {

using kiln::Scalar;

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t h = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}

Host random_values(const Dims& sizes, const InputDecl& decl, uint64_t seed) {
  std::mt19937_64 g(seed);
  Host h(sizes);
  for (double& x : h.v) {
    if (decl.dtype == DType::Bool) {
      x = static_cast<double>(g() % 2);
    } else if (kt::is_int(decl.dtype)) {
      const auto lo = static_cast<int64_t>(std::llround(decl.lo));
      const auto hi = static_cast<int64_t>(std::llround(decl.hi));
      x = static_cast<double>(lo + static_cast<int64_t>(g() % static_cast<uint64_t>(hi - lo + 1)));
    } else {
      const double u = std::uniform_real_distribution<double>(decl.lo, decl.hi)(g);
      x = kt::round_to(decl.dtype, u);
    }
  }
  return h;
}

// The shape of the storage an input lives in, and how the view is cut from it.
Dims base_shape(const InputDecl& decl, const Dims& shape) {
  Dims b = shape;
  const size_t rank = b.size();
  switch (decl.layout) {
    case Layout::Transposed:
      if (rank >= 2) std::swap(b[rank - 1], b[rank - 2]);
      break;
    case Layout::Stepped:
      if (rank >= 1) b[rank - 1] = 2 * b[rank - 1] + 1;
      break;
    case Layout::Offset:
      if (rank >= 1) b[0] += 3;
      break;
    case Layout::Expanded:
      if (rank >= 1) b[0] = 1;
      break;
    case Layout::Contiguous:
      break;
  }
  return b;
}

Tensor view_of_base(const InputDecl& decl, const Tensor& base, const Dims& shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  switch (decl.layout) {
    case Layout::Transposed:
      return rank >= 2 ? base.transpose(-1, -2) : base;
    case Layout::Stepped:
      return rank >= 1 ? base.slice(-1, 1, 2 * shape.back() + 1, 2) : base;
    case Layout::Offset:
      return rank >= 1 ? base.narrow(0, 2, shape[0]) : base;
    case Layout::Expanded:
      return rank >= 1 ? base.expand(shape) : base;
    case Layout::Contiguous:
      return base;
  }
  return base;
}

// The host values of the base storage: data where the view looks, filler elsewhere.
Host base_data(const InputDecl& decl, const Host& data) {
  const Dims shape = data.sizes;
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank == 0 || decl.layout == Layout::Contiguous) return data;
  Host b(base_shape(decl, shape));
  for (double& x : b.v) x = decl.dtype == DType::Bool ? 0.0 : 7.0;  // never read
  if (decl.layout == Layout::Expanded) {
    if (shape[0] > 0) kt::for_each_index(b.sizes, [&](const Dims& i) { b.at(i) = data.at(i); });
    return b;
  }
  kt::for_each_index(shape, [&](const Dims& i) {
    Dims j = i;
    if (decl.layout == Layout::Transposed && rank >= 2) std::swap(j[rank - 1], j[rank - 2]);
    if (decl.layout == Layout::Stepped) j[rank - 1] = 2 * i[rank - 1] + 1;
    if (decl.layout == Layout::Offset) j[0] += 2;
    b.at(j) = data.at(i);
  });
  return b;
}

Scalar make_scalar(const Step& s, double v) {
  if (s.int_scalar) return Scalar(static_cast<int64_t>(std::llround(v)));
  return Scalar(v);
}

Tensor binary_call(OpId op, const Tensor& x, const Tensor& y) {
  switch (op) {
    case OpId::Add:
      return kiln::add(x, y);
    case OpId::Sub:
      return kiln::sub(x, y);
    case OpId::Mul:
      return kiln::mul(x, y);
    case OpId::Div:
      return kiln::div(x, y);
    case OpId::Pow:
      return kiln::pow(x, y);
    case OpId::Maximum:
      return kiln::maximum(x, y);
    case OpId::Minimum:
      return kiln::minimum(x, y);
    case OpId::Eq:
      return kiln::eq(x, y);
    case OpId::Ne:
      return kiln::ne(x, y);
    case OpId::Lt:
      return kiln::lt(x, y);
    case OpId::Le:
      return kiln::le(x, y);
    case OpId::Gt:
      return kiln::gt(x, y);
    default:
      return kiln::ge(x, y);
  }
}

template <class A, class B>
Tensor binary_scalar_call(OpId op, const A& x, const B& y) {
  switch (op) {
    case OpId::Add:
      return kiln::add(x, y);
    case OpId::Sub:
      return kiln::sub(x, y);
    case OpId::Mul:
      return kiln::mul(x, y);
    case OpId::Div:
      return kiln::div(x, y);
    case OpId::Pow:
      return kiln::pow(x, y);
    case OpId::Maximum:
      return kiln::maximum(x, y);
    case OpId::Minimum:
      return kiln::minimum(x, y);
    case OpId::Eq:
      return kiln::eq(x, y);
    case OpId::Ne:
      return kiln::ne(x, y);
    case OpId::Lt:
      return kiln::lt(x, y);
    case OpId::Le:
      return kiln::le(x, y);
    case OpId::Gt:
      return kiln::gt(x, y);
    default:
      return kiln::ge(x, y);
  }
}

void in_place_binary(OpId op, Tensor& x, const Tensor& y) {
  if (op == OpId::Add) x.add_(y);
  if (op == OpId::Sub) x.sub_(y);
  if (op == OpId::Mul) x.mul_(y);
  if (op == OpId::Div) x.div_(y);
}

void in_place_binary(OpId op, Tensor& x, const Scalar& y) {
  if (op == OpId::Add) x.add_(y);
  if (op == OpId::Sub) x.sub_(y);
  if (op == OpId::Mul) x.mul_(y);
  if (op == OpId::Div) x.div_(y);
}

std::array<int64_t, 2> pair(const Dims& v, size_t at, int64_t fallback) {
  return {v.size() > at ? v[at] : fallback, v.size() > at + 1 ? v[at + 1] : fallback};
}

// Runs a step that produces a tensor value.
Tensor run_value_step(const Step& s, Env& env) {
  auto arg = [&](size_t i) -> const Tensor& { return env.at(s.args.at(i)); };
  const kiln::TensorOptions opts(s.dtype, env.device);
  if (s.form == Form::Clone) return arg(0).clone();
  if (s.form == Form::Contiguous) return arg(0).contiguous();
  if (is_unary(s.op)) return unary_fn(s.op)(arg(0));
  if (is_binary(s.op)) {
    if (s.form == Form::ScalarRight)
      return binary_scalar_call(s.op, arg(0), step_scalar(s, s.s0, env));
    if (s.form == Form::ScalarLeft)
      return binary_scalar_call(s.op, step_scalar(s, s.s0, env), arg(0));
    return binary_call(s.op, arg(0), arg(1));
  }
  switch (s.op) {
    case OpId::Gelu:
      return kiln::gelu(arg(0), s.flag);
    case OpId::Cast:
      return arg(0).to(s.dtype);
    case OpId::Clamp:
      return kiln::clamp(arg(0),
                         s.flag ? std::optional<Scalar>(step_scalar(s, s.s0, env)) : std::nullopt,
                         s.flag2 ? std::optional<Scalar>(make_scalar(s, s.s1)) : std::nullopt);
    case OpId::Where:
      if (s.form == Form::ScalarRight)
        return kiln::where(arg(0), arg(1), step_scalar(s, s.s0, env));
      if (s.form == Form::ScalarLeft) return kiln::where(arg(0), step_scalar(s, s.s0, env), arg(1));
      return kiln::where(arg(0), arg(1), arg(2));
    case OpId::Sum:
      return kiln::sum(arg(0), s.ints, s.flag);
    case OpId::Mean:
      return kiln::mean(arg(0), s.ints, s.flag);
    case OpId::Max:
      return kiln::amax(arg(0), s.ints, s.flag);
    case OpId::Min:
      return kiln::amin(arg(0), s.ints, s.flag);
    case OpId::Argmax:
      return kiln::argmax(arg(0), s.flag2 ? std::optional<int64_t>(s.a) : std::nullopt, s.flag);
    case OpId::Var:
      return kiln::var(arg(0), s.ints, s.c, s.flag);
    case OpId::LogSumExp:
      return kiln::logsumexp(arg(0), s.ints, s.flag);
    case OpId::Softmax:
      return kiln::softmax(arg(0), s.a);
    case OpId::LogSoftmax:
      return kiln::log_softmax(arg(0), s.a);
    case OpId::LayerNorm:
      return kiln::layer_norm(arg(0), s.ints, s.flag2 ? arg(1) : Tensor(),
                              s.flag ? arg(s.args.size() - 1) : Tensor(), s.s0);
    case OpId::Matmul:
      return kiln::matmul(arg(0), s.flag2 ? arg(1).transpose(-1, -2) : arg(1));
    case OpId::Linear:
      return kiln::linear(arg(0), arg(1), s.flag ? arg(2) : Tensor());
    case OpId::Conv2d:
      return kiln::conv2d(arg(0), arg(1), s.flag ? arg(2) : Tensor(), pair(s.ints, 0, 1),
                          pair(s.ints, 2, 0));
    case OpId::MaxPool2d:
      return kiln::max_pool2d(arg(0), pair(s.ints, 0, 1), pair(s.ints, 2, 0), pair(s.ints, 4, 0));
    case OpId::AvgPool2d:
      return kiln::avg_pool2d(arg(0), pair(s.ints, 0, 1), pair(s.ints, 2, 0), pair(s.ints, 4, 0));
    case OpId::Im2Col:
      return kiln::im2col(arg(0), pair(s.ints, 0, 1), pair(s.ints, 2, 1), pair(s.ints, 4, 0), s.s0);
    case OpId::Col2Im:
      return kiln::col2im(arg(0), {s.ints.at(6), s.ints.at(7)}, pair(s.ints, 0, 1),
                          pair(s.ints, 2, 1), pair(s.ints, 4, 0));
    case OpId::Cat: {
      std::vector<Tensor> parts;
      for (size_t i = 0; i < s.args.size(); ++i) parts.push_back(arg(i));
      return kiln::cat(parts, s.a);
    }
    case OpId::IndexSelect:
      return kiln::index_select(arg(0), s.a, arg(1));
    case OpId::Gather:
      return kiln::gather(arg(0), s.a, arg(1));
    case OpId::Scatter:
      return kiln::scatter(arg(0), s.a, arg(1), arg(0));
    case OpId::ScatterAdd:
      return kiln::scatter_add(arg(0), s.a, arg(1), arg(0));
    case OpId::IndexAdd:
      return kiln::index_add(arg(0), s.a, arg(1), arg(0).narrow(s.a, 0, arg(1).numel()), 2);
    case OpId::Argsort:
      return kiln::argsort(arg(0), s.a, s.flag, true);
    case OpId::Topk:
      return kiln::topk(arg(0), s.b, s.a, s.flag).values;
    case OpId::Cumsum:
      return kiln::cumsum(arg(0), s.a);
    case OpId::Cumprod:
      return kiln::cumprod(arg(0), s.a);
    case OpId::Prod:
      return kiln::prod(arg(0), s.a, s.flag);
    case OpId::Multinomial:
      return kiln::multinomial(kiln::abs(arg(0)) + 0.25, s.b, s.flag);
    case OpId::Nonzero:
      return kiln::nonzero(arg(0));
    case OpId::ToDevice: {
      // A host round trip copies on CUDA; on the CPU both moves return the tensor itself
      // (PyTorch's semantics), so the CPU legs clone: an in-place write to the result, or
      // a refill of its source, must not show through in one leg and not in the other.
      Tensor t = arg(0).to(kiln::kCPU).to(env.device);
      return env.device.is_cpu() ? t.clone() : t;
    }
    case OpId::Empty: {
      Tensor t = kiln::empty(s.ints, opts);
      t.fill_(step_scalar(s, s.s0, env));
      return t;
    }
    case OpId::Full:
      return kiln::full(s.ints, step_scalar(s, s.s0, env), opts);
    case OpId::Arange:
      return kiln::arange(make_scalar(s, s.s0), make_scalar(s, s.s1), make_scalar(s, s.s2), opts);
    case OpId::Rand:
      return kiln::rand(s.ints, opts);
    case OpId::Randn:
      return kiln::randn(s.ints, opts);
    case OpId::View:
      if (s.flag2) return arg(0).flatten(s.a, s.b);
      return s.flag ? arg(0).reshape(s.ints) : arg(0).view(s.ints);
    case OpId::Permute:
      if (s.flag2) return arg(0).t();
      return s.flag ? arg(0).transpose(s.a, s.b) : arg(0).permute(s.ints);
    case OpId::Slice:
      return s.flag ? arg(0).narrow(s.a, s.b, s.c) : arg(0).slice(s.a, s.b, s.ints.at(0), s.c);
    case OpId::Select:
      return arg(0).select(s.a, s.b);
    case OpId::Expand:
      return arg(0).expand(s.ints);
    case OpId::Squeeze:
      return s.flag ? arg(0).squeeze(s.a) : arg(0).squeeze();
    case OpId::Unsqueeze:
      return arg(0).unsqueeze(s.a);
    default:
      break;
  }
  throw std::logic_error(std::string("fuzz: no call form for op ") + kiln::op_name(s.op));
}

}  // namespace

bool is_unary(OpId op) { return unary_fn(op) != nullptr; }

bool is_binary(OpId op) { return kiln::op_info(op).family == kiln::OpFamily::Binary; }

bool has_in_place_method(OpId op) {
  return op == OpId::Add || op == OpId::Sub || op == OpId::Mul || op == OpId::Div;
}

UnaryFn unary_fn(OpId op) {
  switch (op) {
    case OpId::Neg:
      return [](const Tensor& x) { return kiln::neg(x); };
    case OpId::Abs:
      return [](const Tensor& x) { return kiln::abs(x); };
    case OpId::Exp:
      return [](const Tensor& x) { return kiln::exp(x); };
    case OpId::Log:
      return [](const Tensor& x) { return kiln::log(x); };
    case OpId::Sqrt:
      return [](const Tensor& x) { return kiln::sqrt(x); };
    case OpId::Rsqrt:
      return [](const Tensor& x) { return kiln::rsqrt(x); };
    case OpId::Sin:
      return [](const Tensor& x) { return kiln::sin(x); };
    case OpId::Cos:
      return [](const Tensor& x) { return kiln::cos(x); };
    case OpId::Tanh:
      return [](const Tensor& x) { return kiln::tanh(x); };
    case OpId::Sigmoid:
      return [](const Tensor& x) { return kiln::sigmoid(x); };
    case OpId::Relu:
      return [](const Tensor& x) { return kiln::relu(x); };
    case OpId::Silu:
      return [](const Tensor& x) { return kiln::silu(x); };
    case OpId::Reciprocal:
      return [](const Tensor& x) { return kiln::reciprocal(x); };
    case OpId::Erf:
      return [](const Tensor& x) { return kiln::erf(x); };
    case OpId::Log1p:
      return [](const Tensor& x) { return kiln::log1p(x); };
    default:
      return nullptr;
  }
}

Host input_data(const Program& p, int input, const World& world) {
  const InputDecl& decl = p.inputs.at(static_cast<size_t>(input));
  const Dims& shape = decl.shapes.at(static_cast<size_t>(world.shape_set));
  const uint64_t seed = mix(world.data_seed, static_cast<uint64_t>(input) + 1);
  if (decl.layout != Layout::Expanded || shape.empty()) return random_values(shape, decl, seed);
  const Host row = random_values(base_shape(decl, shape), decl, seed);
  Host h(shape);
  kt::for_each_index(shape, [&](const Dims& i) {
    Dims j = i;
    j[0] = 0;
    h.at(i) = row.at(j);
  });
  return h;
}

InputTensor make_input(const InputDecl& decl, const Host& data, int shape_set, Device device) {
  kiln::NoHookScope untraced;
  InputTensor t;
  t.base = kt::make(base_data(decl, data), decl.dtype, device);
  t.view = view_of_base(decl, t.base, decl.shapes.at(static_cast<size_t>(shape_set)));
  return t;
}

void refill_input(const InputDecl& decl, const InputTensor& input, const Host& data,
                  Device device) {
  Tensor fresh;
  {
    kiln::NoHookScope untraced;  // building the host data is no part of the program
    fresh = kt::make(base_data(decl, data), decl.dtype, kiln::kCPU);
  }
  Tensor base = input.base;
  if (device.is_cpu()) {
    // What a host loader (or numpy) does: write the bytes through data_ptr(), which runs
    // any pending lazy work that still reads the old values first.
    std::memcpy(base.data_ptr(), fresh.data_ptr(),
                static_cast<size_t>(fresh.numel()) * static_cast<size_t>(fresh.element_size()));
  } else {
    base.copy_(fresh);  // a host-to-device copy, part of the program like any other op
  }
}

const Tensor& Env::at(const Ref& r) const {
  return r.input ? inputs.at(static_cast<size_t>(r.index))
                 : values.at(static_cast<size_t>(r.index));
}

Scalar step_scalar(const Step& s, double base, const Env& env) {
  if (s.slot >= 0 && !s.int_scalar) {
    return Scalar(base + 0.01 * std::tanh(env.scalars.at(static_cast<size_t>(s.slot))));
  }
  return make_scalar(s, base);
}

void run_step(const Step& s, Env& env) {
  auto target = [&]() -> Tensor {
    return env.at(s.args.at(0));  // a handle sharing the TensorImpl
  };
  switch (s.form) {
    case Form::InPlace: {
      Tensor t = target();
      if (s.op == OpId::Relu) {
        t.relu_();
      } else if (s.op == OpId::Clamp) {
        t.clamp_(step_scalar(s, s.s0, env), make_scalar(s, s.s1));
      } else {
        in_place_binary(s.op, t, env.at(s.args.at(1)));
      }
      return;
    }
    case Form::InPlaceScalar: {
      Tensor t = target();
      in_place_binary(s.op, t, step_scalar(s, s.s0, env));
      return;
    }
    case Form::Copy: {
      Tensor t = target();
      t.copy_(env.at(s.args.at(1)));
      return;
    }
    case Form::Fill: {
      Tensor t = target();
      if (s.flag)
        t.zero_();
      else
        t.fill_(step_scalar(s, s.s0, env));
      return;
    }
    case Form::Item: {
      const Tensor& x = env.at(s.args.at(0));
      const Tensor one = s.op == OpId::Sum ? kiln::sum(x) : s.op == OpId::Max ? kiln::amax(x) : x;
      env.scalars.push_back(one.item<double>());
      return;
    }
    case Form::HostRead:
      (void)env.at(s.args.at(0)).to_vector<double>();
      return;
    default:
      env.values.push_back(run_value_step(s, env));
      return;
  }
}

}  // namespace kfuzz
