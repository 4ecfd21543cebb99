#include "generator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>

#include "differential.h"
#include "interpret.h"
#include "ops/dispatch.h"

namespace kfuzz {
namespace {

using kiln::Tensor;

constexpr int64_t kMaxNumel = 4096;
constexpr double kMaxInt = 16777216.0;  // 2^24: integer values stay exact and never overflow

// A world as the generator sees it: its values, and the shadow copy whose rounding ops
// are perturbed.
struct WorldState {
  World world;
  Env env;
  Env shadow;
};

// Relative size of the perturbation that stands for one op's rounding in a fused kernel.
double rounding_noise(DType d) {
  switch (d) {
    case DType::Float64:
      return 1e-13;
    case DType::Float32:
      return 5e-7;
    case DType::Float16:
      return 1e-3;
    case DType::BFloat16:
      return 8e-3;
    default:
      return 0.0;
  }
}

bool is_random_op(const Step& s) {
  return s.form == Form::Call && (s.op == OpId::Rand || s.op == OpId::Randn);
}

// Whether a step's result may differ by rounding between eager and fused code.
bool rounds(const Step& s) {
  switch (s.form) {
    case Form::Clone:
    case Form::Contiguous:
    case Form::Copy:
    case Form::Fill:
    case Form::Item:
    case Form::HostRead:
      return false;
    default:
      break;
  }
  switch (kiln::op_info(s.op).family) {
    case kiln::OpFamily::View:
    case kiln::OpFamily::Cat:
    case kiln::OpFamily::IndexSelect:
    case kiln::OpFamily::ToDevice:
    case kiln::OpFamily::Factory:
    case kiln::OpFamily::Where:
    case kiln::OpFamily::Clamp:
      return s.op == OpId::Arange;
    default:
      break;
  }
  switch (s.op) {
    case OpId::Neg:
    case OpId::Abs:
    case OpId::Relu:
    case OpId::Cast:
    case OpId::Maximum:
    case OpId::Minimum:
    case OpId::Eq:
    case OpId::Ne:
    case OpId::Lt:
    case OpId::Le:
    case OpId::Gt:
    case OpId::Ge:
    case OpId::Max:
    case OpId::Min:
    case OpId::Argmax:
    case OpId::MaxPool2d:
    case OpId::Im2Col:
      return false;
    default:
      return true;
  }
}

// Ops whose rounding error scales with their inputs rather than their result: sums,
// and the activations whose tails cancel (gelu(-6) is 0.5 x (1 + tanh(..)) with
// 1 + tanh near 0: a few ulps of 1, not of the result).
bool accumulates(OpId op) {
  switch (op) {
    case OpId::Gelu:
    case OpId::Silu:
    case OpId::Sigmoid:
    case OpId::Sum:
    case OpId::Mean:
    case OpId::Var:
    case OpId::LogSumExp:
    case OpId::Softmax:
    case OpId::LogSoftmax:
    case OpId::LayerNorm:
    case OpId::Matmul:
    case OpId::Linear:
    case OpId::Conv2d:
    case OpId::AvgPool2d:
    case OpId::Col2Im:
      return true;
    default:
      return false;
  }
}

bool mutates(const Step& s) {
  return s.form == Form::InPlace || s.form == Form::InPlaceScalar || s.form == Form::Copy ||
         s.form == Form::Fill;
}

double max_abs_finite(const Host& h) {
  double m = 0.0;
  for (double x : h.v)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

// Adds rounding-sized noise to a shadow value, in place.
void perturb(const Tensor& t, double floor_scale, std::mt19937_64& g, double times = 1.0) {
  const double delta = times * rounding_noise(t.dtype());
  if (delta == 0.0 || t.numel() == 0) return;
  Host h = kt::read(t);
  double mean = 0.0;
  for (double x : h.v)
    if (std::isfinite(x)) mean += std::fabs(x);
  const double scale = std::max(mean / static_cast<double>(h.v.size()), floor_scale);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (double& x : h.v) {
    if (!std::isfinite(x)) continue;
    x = kt::round_to(t.dtype(), x * (1.0 + delta * u(g)) + delta * scale * u(g));
  }
  Tensor target = t;
  target.copy_(kt::make(h, t.dtype()));
}

bool overlaps_itself(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1) return true;
  return false;
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.storage_offset() == b.storage_offset() && a.dtype() == b.dtype();
}

bool broadcastable(const Dims& a, const Dims& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const int64_t x = a[a.size() - 1 - i], y = b[b.size() - 1 - i];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

// b broadcasts to exactly a's shape.
bool broadcasts_to(const Dims& b, const Dims& a) {
  if (b.size() > a.size()) return false;
  for (size_t i = 0; i < b.size(); ++i) {
    const int64_t x = a[a.size() - 1 - i], y = b[b.size() - 1 - i];
    if (x != y && y != 1) return false;
  }
  return true;
}

struct Snapshot {
  std::shared_ptr<kiln::Storage> storage;
  std::vector<char> bytes;
};

Snapshot snapshot(const Tensor& t) {
  Snapshot s{t.storage(), {}};
  s.bytes.resize(s.storage->nbytes());
  if (!s.bytes.empty()) std::memcpy(s.bytes.data(), s.storage->data(), s.bytes.size());
  return s;
}

void restore(const Snapshot& s) {
  if (!s.bytes.empty()) std::memcpy(s.storage->data(), s.bytes.data(), s.bytes.size());
}

class Builder {
 public:
  Builder(uint64_t seed, const GenerateOptions& options) : g_(seed), options_(options) {
    p_.seed = seed;
    p_.device = options.device;
  }

  Program build() {
    kt::RunModeScope eager(kt::RunMode::Eager);
    make_worlds();
    declare_inputs();
    const int length = options_.min_steps + pick(options_.max_steps - options_.min_steps + 1);
    for (int attempts = 0; static_cast<int>(p_.steps.size()) < length && attempts < length * 12;
         ++attempts) {
      Step s;
      if (build_step(s)) try_step(s);
    }
    return p_;
  }

 private:
  // ---- randomness
  int pick(int n) { return n <= 0 ? 0 : static_cast<int>(g_() % static_cast<uint64_t>(n)); }
  int64_t pick_in(int64_t lo, int64_t hi) { return lo + pick(static_cast<int>(hi - lo + 1)); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0.0, 1.0)(g_) < p; }
  template <class T>
  T one_of(std::initializer_list<T> v) {
    return *(v.begin() + pick(static_cast<int>(v.size())));
  }

  // ---- the program's frame: worlds, then inputs
  void make_worlds() {
    const int shape_sets = chance(0.45) ? 1 : 2 + pick(2);
    for (int s = 0; s < shape_sets; ++s) {
      for (int d = 0; d < 2; ++d) p_.worlds.push_back(World{s, g_() >> 16});
    }
    // Warm up and replay on shape set 0 (data changes every iteration), then visit the
    // other shape sets and come back.
    const int first = 3 + pick(3);
    for (int i = 0; i < first; ++i) p_.schedule.push_back(i % 2);
    for (int s = 1; s < shape_sets; ++s) {
      const int n = 1 + pick(3);
      for (int i = 0; i < n; ++i) p_.schedule.push_back(2 * s + i % 2);
      if (chance(0.6)) p_.schedule.push_back(pick(2));
    }
    p_.fresh_inputs = chance(0.4);
    p_.read_each_iteration = chance(0.6);
    for (const World& w : p_.worlds)
      states_.push_back(WorldState{w, {kiln::kCPU, {}, {}, {}}, {kiln::kCPU, {}, {}, {}}});
  }

  int shape_sets() const { return p_.worlds.back().shape_set + 1; }

  void declare_inputs() {
    const int rank = one_of({0, 1, 1, 2, 2, 2, 2, 3, 3, 4, 4});
    Dims base;
    for (int d = 0; d < rank; ++d) {
      const int r = pick(100);
      base.push_back(r < 3 ? 0 : r < 18 ? 1 : r < 92 ? pick_in(2, 6) : pick_in(7, 9));
    }
    std::vector<Dims> bases(static_cast<size_t>(shape_sets()), base);
    for (size_t s = 1; s < bases.size(); ++s) {
      if (rank == 0) break;
      const int64_t d = pick(rank);  // the dim that changes between shape sets
      bases[s][static_cast<size_t>(d)] = one_of<int64_t>({1, 2, 3, 4, 5, 6, 7, 0});
    }
    main_dtype_ = one_of({DType::Float32, DType::Float32, DType::Float32, DType::Float32,
                          DType::Float32, DType::Float64, DType::Float64, DType::Float16,
                          DType::BFloat16, DType::Int32, DType::Int64});
    const int n = 2 + pick(3);
    for (int i = 0; i < n; ++i) {
      InputDecl d;
      d.dtype = i == n - 1 && chance(0.4)
                    ? one_of({DType::Bool, DType::Int64, DType::Float32, DType::Int32})
                    : main_dtype_;
      const size_t drop = rank > 0 && chance(0.15) ? 1 + pick(rank) : 0;
      std::vector<bool> ones(static_cast<size_t>(rank));
      for (auto&& one : ones) one = chance(0.15);
      for (const Dims& b : bases) {
        Dims shape;
        for (size_t k = drop; k < b.size(); ++k) shape.push_back(ones[k] ? 1 : b[k]);
        d.shapes.push_back(shape);
      }
      d.layout = one_of({Layout::Contiguous, Layout::Contiguous, Layout::Contiguous,
                         Layout::Contiguous, Layout::Transposed, Layout::Transposed,
                         Layout::Stepped, Layout::Offset, Layout::Expanded});
      if (kt::is_int(d.dtype)) {
        d.lo = -9;
        d.hi = 9;
      } else if (chance(0.25)) {
        d.lo = 0.5;
        d.hi = 3.0;
      }
      add_input(d);
    }
  }

  // Appends an input (the program's or a parameter a step needs) to every world.
  Ref add_input(const InputDecl& d) {
    p_.inputs.push_back(d);
    const int index = static_cast<int>(p_.inputs.size()) - 1;
    for (WorldState& ws : states_) {
      const Host data = input_data(p_, index, ws.world);
      ws.env.inputs.push_back(make_input(d, data, ws.world.shape_set, kiln::kCPU).view);
      ws.shadow.inputs.push_back(make_input(d, data, ws.world.shape_set, kiln::kCPU).view);
    }
    return Ref{true, index};
  }

  // A parameter input of a fixed shape (the same in every shape set).
  Ref add_param(DType dtype, const Dims& shape, double lo, double hi) {
    InputDecl d;
    d.dtype = dtype;
    d.shapes.assign(static_cast<size_t>(shape_sets()), shape);
    d.lo = lo;
    d.hi = hi;
    return add_input(d);
  }

  // ---- operands (their metadata in world 0)
  const Tensor& meta(const Ref& r) const { return states_[0].env.at(r); }

  std::vector<Ref> refs() const {
    std::vector<Ref> out;
    for (size_t i = 0; i < p_.inputs.size(); ++i) out.push_back(Ref{true, static_cast<int>(i)});
    for (size_t v = 0; v < states_[0].env.values.size(); ++v)
      out.push_back(Ref{false, static_cast<int>(v)});
    return out;
  }

  // A tensor that satisfies pred, favouring recent values so that chains form.
  std::optional<Ref> pick_ref(const std::function<bool(const Tensor&)>& pred) {
    std::vector<Ref> ok;
    for (const Ref& r : refs())
      if (pred(meta(r))) ok.push_back(r);
    if (ok.empty()) return std::nullopt;
    if (chance(0.5))
      return ok[ok.size() - 1 - static_cast<size_t>(pick(std::min<int>(4, ok.size())))];
    return ok[static_cast<size_t>(pick(static_cast<int>(ok.size())))];
  }

  // The smallest size of dim d of r over all worlds.
  int64_t min_size(const Ref& r, int64_t d) const {
    int64_t m = INT64_MAX;
    for (const WorldState& ws : states_) m = std::min(m, ws.env.at(r).size(d));
    return m;
  }

  static bool floating(const Tensor& t) { return kt::is_float(t.dtype()); }
  static bool numeric(const Tensor& t) { return t.dtype() != DType::Bool; }

  int64_t random_dim(int64_t rank, bool negative_ok = true) {
    if (rank <= 0) return 0;
    const int64_t d = pick(static_cast<int>(rank));
    return negative_ok && chance(0.3) ? d - rank : d;
  }

  void set_scalar(Step& s, const Tensor& operand) {
    s.int_scalar = !floating(operand) && chance(0.7);
    s.s0 = s.int_scalar ? static_cast<double>(one_of<int>({-3, -1, 0, 1, 2, 5}))
                        : one_of({0.5, -1.5, 2.0, 0.25, 3.0, -0.75, 1e-3, 10.0});
    const int slots = static_cast<int>(states_[0].env.scalars.size());
    if (!s.int_scalar && slots > 0 && chance(0.4)) s.slot = pick(slots);
  }

  Dims shape_like_a_value() {
    const std::vector<Ref> all = refs();
    Dims shape = meta(all[static_cast<size_t>(pick(static_cast<int>(all.size())))]).sizes();
    if (!shape.empty() && chance(0.5)) shape.erase(shape.begin());  // drops the dim that may change
    return shape;
  }

  DType any_dtype() {
    return one_of({main_dtype_, main_dtype_, DType::Float32, DType::Float64, DType::Float16,
                   DType::BFloat16, DType::Int32, DType::Int64, DType::Bool});
  }

  // ---- candidates: one per registry row, plus the graph breaks
  // A candidate for the next step (false: none fits). Metadata comes from world 0; a
  // dim that another world lacks (squeeze() of a size that is 1 only there) throws.
  bool build_step(Step& s) {
    try {
      return draw_step(s);
    } catch (const kiln::Error&) {
      return false;
    }
  }

  bool draw_step(Step& s) {
    if (chance(0.06)) return build_item(s);
    if (chance(0.03)) {
      s.form = Form::HostRead;
      s.op = OpId::Cast;
      const auto x = pick_ref([](const Tensor&) { return true; });
      s.args = {*x};
      return true;
    }
    s.op = static_cast<OpId>(pick(kiln::kNumOps));
    return build_op(s);
  }

  bool build_item(Step& s) {
    s.form = Form::Item;
    s.op = one_of({OpId::Sum, OpId::Max, OpId::Cast});
    const auto x = pick_ref([&](const Tensor& t) {
      if (s.op == OpId::Cast) return t.numel() == 1;
      return t.numel() > 0 && (s.op == OpId::Sum || numeric(t));
    });
    if (!x) return false;
    s.args = {*x};
    return true;
  }

  bool build_op(Step& s) {
    const OpId op = s.op;
    switch (kiln::op_info(op).family) {
      case kiln::OpFamily::Unary:
        return build_unary(s);
      case kiln::OpFamily::Clamp:
        return build_clamp(s);
      case kiln::OpFamily::Binary:
        return build_binary(s);
      case kiln::OpFamily::Where:
        return build_where(s);
      case kiln::OpFamily::Reduce:
        return build_reduce(s);
      case kiln::OpFamily::Softmax: {
        const auto x = pick_ref(numeric);
        if (!x) return false;
        s.args = {*x};
        s.a = random_dim(meta(*x).dim());
        return true;
      }
      case kiln::OpFamily::LayerNorm:
        return build_layer_norm(s);
      case kiln::OpFamily::Attention:
        return false;  // covered by tests/python/test_attention.py (its ops take 3-6 tensors)
      case kiln::OpFamily::Recurrent:
        return false;  // covered by tests/python/test_rnn.py (nn.LSTM against torch's)
      case kiln::OpFamily::Matmul:
        return build_matmul(s);
      case kiln::OpFamily::Linear:
        return build_linear(s);
      case kiln::OpFamily::Conv2d:
        return build_conv2d(s);
      case kiln::OpFamily::Pool2d:
        // max_pool2d_backward: the CPU's max-pool gradient (the fuzz worlds include CUDA);
        // tests/python/test_pool_backward.py and the gradcheck cases cover it.
        return s.op != OpId::MaxPool2dBackward && build_pool(s);
      case kiln::OpFamily::Unfold:
        return s.op == OpId::Im2Col ? build_im2col(s) : build_col2im(s);
      case kiln::OpFamily::Cat:
        return build_cat(s);
      case kiln::OpFamily::IndexSelect:
        return build_index_select(s);
      case kiln::OpFamily::Gather:
      case kiln::OpFamily::Scatter:
      case kiln::OpFamily::Sort:
      case kiln::OpFamily::Scan:
        return build_along_dim(s);
      case kiln::OpFamily::Sample:
        return build_multinomial(s);
      case kiln::OpFamily::Nonzero: {
        // Its output shape counts the input's nonzero elements, so the legs must agree on
        // them exactly: integer and bool values do; a float value need not (gelu and tanh
        // saturate to exactly 0 in one leg and to a tiny value in another, an ulp apart).
        const auto x = pick_ref([](const Tensor& t) { return !kiln::is_floating(t.dtype()); });
        if (!x) return false;
        s.args = {*x};
        return true;
      }
      case kiln::OpFamily::ToDevice: {
        s.args = {*pick_ref([](const Tensor&) { return true; })};
        return true;
      }
      case kiln::OpFamily::Factory:
      case kiln::OpFamily::Random:
        return build_factory(s);
      case kiln::OpFamily::View:
        return build_view(s);
      case kiln::OpFamily::Collective:
        return false;  // needs a process group (tests/cpp/test_collective_op.cpp)
    }
    return false;
  }

  bool build_unary(Step& s) {
    if (s.op == OpId::Cast) return build_cast(s);
    const auto x = pick_ref(numeric);
    if (!x) return false;
    s.args = {*x};
    s.flag = chance(0.5);  // gelu: the tanh form
    if (s.op == OpId::Relu && chance(0.25)) s.form = Form::InPlace;
    return true;
  }

  bool build_cast(Step& s) {
    const int form = pick(5);
    const auto x = pick_ref([](const Tensor&) { return true; });
    s.args = {*x};
    if (form == 0) {
      s.form = Form::Clone;
    } else if (form == 1) {
      s.form = Form::Contiguous;
    } else if (form == 2) {
      s.form = Form::Copy;
      const Dims target = meta(*x).sizes();
      const auto src = pick_ref([&](const Tensor& t) { return broadcasts_to(t.sizes(), target); });
      if (!src) return false;
      s.args.push_back(*src);
    } else {
      s.dtype = any_dtype();
    }
    return true;
  }

  bool build_clamp(Step& s) {
    const auto x = pick_ref(numeric);
    if (!x) return false;
    s.args = {*x};
    set_scalar(s, meta(*x));
    s.s0 = s.int_scalar ? -2 : one_of({-0.5, -1.0, 0.0, 0.3});
    s.s1 = s.int_scalar ? 3 : one_of({0.5, 1.0, 1.5, -0.7});
    if (chance(0.25)) {
      s.form = Form::InPlace;
      return true;
    }
    s.flag = chance(0.7);
    s.flag2 = !s.flag || chance(0.6);
    return true;
  }

  bool build_binary(Step& s) {
    const auto x = pick_ref([](const Tensor&) { return true; });
    const Tensor a = meta(*x);
    s.args = {*x};
    const int form = pick(100);
    const bool in_place_ok = has_in_place_method(s.op);
    if (form < 15) {
      s.form = Form::ScalarRight;
    } else if (form < 25) {
      s.form = Form::ScalarLeft;
    } else if (form < 35 && in_place_ok) {
      s.form = Form::InPlaceScalar;
    } else if (form < 50 && in_place_ok) {
      s.form = Form::InPlace;
    }
    if (s.form == Form::ScalarRight || s.form == Form::ScalarLeft ||
        s.form == Form::InPlaceScalar) {
      set_scalar(s, a);
      if (s.op == OpId::Pow) {
        s.s0 = s.form == Form::ScalarLeft ? one_of({2.0, 0.5, 1.5})
                                          : one_of({2.0, 3.0, 0.5, -1.0, 1.5, 0.0});
        s.int_scalar = s.int_scalar && s.s0 == std::floor(s.s0) && s.s0 >= 0;
      }
      return true;
    }
    if (chance(0.15)) {  // the same tensor as both operands
      s.args.push_back(*x);
      return true;
    }
    const Dims shape = a.sizes();
    const bool in_place = s.form == Form::InPlace;
    const auto y = pick_ref([&](const Tensor& t) {
      return in_place ? broadcasts_to(t.sizes(), shape) : broadcastable(t.sizes(), shape);
    });
    if (!y) return false;
    s.args.push_back(*y);
    return true;
  }

  bool build_where(Step& s) {
    const auto c = pick_ref([](const Tensor& t) { return t.dtype() == DType::Bool; });
    if (!c) return false;
    const Dims cs = meta(*c).sizes();
    const auto a = pick_ref([&](const Tensor& t) { return broadcastable(t.sizes(), cs); });
    s.args = {*c, *a};
    const int form = pick(4);
    if (form == 0 || form == 1) {
      s.form = form == 0 ? Form::ScalarRight : Form::ScalarLeft;
      set_scalar(s, meta(*a));
      return true;
    }
    const auto b = pick_ref([&](const Tensor& t) { return broadcastable(t.sizes(), cs); });
    s.args.push_back(*b);
    return true;
  }

  bool build_reduce(Step& s) {
    const bool bool_ok = s.op == OpId::Sum || s.op == OpId::Mean;
    const auto x = pick_ref([&](const Tensor& t) { return bool_ok || numeric(t); });
    if (!x) return false;
    s.args = {*x};
    const int64_t rank = meta(*x).dim();
    s.flag = chance(0.5);
    if (s.op == OpId::Argmax) {
      s.flag2 = chance(0.7);
      s.a = random_dim(rank);
      return true;
    }
    if (chance(0.75)) {
      for (int64_t d = 0; d < rank; ++d)
        if (chance(0.45)) s.ints.push_back(chance(0.2) ? d - rank : d);
    }
    s.c = one_of<int64_t>({0, 1, 1, 2});
    return true;
  }

  bool build_layer_norm(Step& s) {
    const auto x = pick_ref([](const Tensor& t) { return floating(t) && t.dim() >= 1; });
    if (!x) return false;
    const Tensor t = meta(*x);
    const int64_t k = std::min<int64_t>(t.dim(), 1 + pick(2));
    s.ints.assign(t.sizes().end() - k, t.sizes().end());
    s.args = {*x};
    s.s0 = one_of({1e-5, 1e-3});
    s.flag2 = chance(0.5);  // weight
    s.flag = chance(0.5);   // bias
    if (s.flag2) s.args.push_back(add_param(t.dtype(), s.ints, 0.5, 1.5));
    if (s.flag) s.args.push_back(add_param(t.dtype(), s.ints, -0.5, 0.5));
    return true;
  }

  bool build_matmul(Step& s) {
    const auto x = pick_ref([](const Tensor& t) { return floating(t) && t.dim() >= 1; });
    if (!x) return false;
    const Tensor a = meta(*x);
    const int64_t k = a.size(-1);
    s.args = {*x};
    const int how = pick(3);
    if (how == 0 && a.dim() >= 2) {  // a @ a^T
      s.args.push_back(*x);
      s.flag2 = true;
      return true;
    }
    if (how == 1) {
      const auto y = pick_ref([&](const Tensor& t) {
        return t.dtype() == a.dtype() && t.dim() >= 1 &&
               (t.dim() == 1 ? t.size(0) : t.size(-2)) == k;
      });
      if (y) {
        s.args.push_back(*y);
        return true;
      }
    }
    Dims shape = chance(0.3) ? Dims{k} : Dims{k, pick_in(1, 5)};
    if (a.dim() >= 3 && chance(0.3)) shape.insert(shape.begin(), a.size(-3));
    s.args.push_back(add_param(a.dtype(), shape, -1.0, 1.0));
    return true;
  }

  bool build_linear(Step& s) {
    const auto x = pick_ref([](const Tensor& t) { return floating(t) && t.dim() >= 1; });
    if (!x) return false;
    const Tensor a = meta(*x);
    const int64_t out = pick_in(1, 5);
    s.args = {*x, add_param(a.dtype(), {out, a.size(-1)}, -1.0, 1.0)};
    s.flag = chance(0.6);
    if (s.flag) s.args.push_back(add_param(a.dtype(), {out}, -0.5, 0.5));
    return true;
  }

  bool build_conv2d(Step& s) {
    const auto x = pick_ref([](const Tensor& t) {
      return floating(t) && (t.dim() == 3 || t.dim() == 4) && t.size(-1) > 0 && t.size(-2) > 0;
    });
    if (!x) return false;
    const Tensor a = meta(*x);
    const int64_t out = pick_in(1, 4);
    const int64_t kh = pick_in(1, std::min<int64_t>(3, a.size(-2)));
    const int64_t kw = pick_in(1, std::min<int64_t>(3, a.size(-1)));
    s.args = {*x, add_param(a.dtype(), {out, a.size(-3), kh, kw}, -1.0, 1.0)};
    s.flag = chance(0.5);
    if (s.flag) s.args.push_back(add_param(a.dtype(), {out}, -0.5, 0.5));
    s.ints = {pick_in(1, 2), pick_in(1, 2), pick_in(0, 1), pick_in(0, 1)};
    return true;
  }

  bool build_pool(Step& s) {
    const auto x = pick_ref([](const Tensor& t) {
      return floating(t) && (t.dim() == 3 || t.dim() == 4) && t.size(-1) > 0 && t.size(-2) > 0;
    });
    if (!x) return false;
    const Tensor a = meta(*x);
    const int64_t kh = pick_in(1, std::min<int64_t>(3, a.size(-2)));
    const int64_t kw = pick_in(1, std::min<int64_t>(3, a.size(-1)));
    s.args = {*x};
    s.ints = {kh, kw, pick_in(0, 2), pick_in(0, 2), pick_in(0, kh / 2), pick_in(0, kw / 2)};
    return true;
  }

  bool build_im2col(Step& s) {
    const auto x = pick_ref([](const Tensor& t) {
      return floating(t) && t.dim() == 4 && t.size(-1) > 0 && t.size(-2) > 0;
    });
    if (!x) return false;
    const Tensor a = meta(*x);
    const int64_t kh = pick_in(1, std::min<int64_t>(3, a.size(-2)));
    const int64_t kw = pick_in(1, std::min<int64_t>(3, a.size(-1)));
    s.args = {*x};
    s.ints = {kh, kw, pick_in(1, 2), pick_in(1, 2), pick_in(0, kh / 2), pick_in(0, kw / 2)};
    s.s0 = one_of({0.0, -1.5});
    return true;
  }

  // col2im of a parameter holding the patches of an image of a random size.
  bool build_col2im(Step& s) {
    const int64_t h = pick_in(1, 5), w = pick_in(1, 5);
    const int64_t kh = pick_in(1, std::min<int64_t>(3, h)),
                  kw = pick_in(1, std::min<int64_t>(3, w));
    const int64_t sh = pick_in(1, 2), sw = pick_in(1, 2), ph = pick_in(0, kh / 2),
                  pw = pick_in(0, kw / 2);
    const int64_t oh = (h + 2 * ph - kh) / sh + 1, ow = (w + 2 * pw - kw) / sw + 1;
    const DType d = kt::is_float(main_dtype_) ? main_dtype_ : DType::Float32;
    s.args = {add_param(d, {pick_in(1, 2), pick_in(1, 3) * kh * kw, oh * ow}, -1.0, 1.0)};
    s.ints = {kh, kw, sh, sw, ph, pw, h, w};
    return true;
  }

  bool build_cat(Step& s) {
    const auto x = pick_ref([](const Tensor& t) { return t.dim() >= 1; });
    if (!x) return false;
    const Tensor a = meta(*x);
    const int64_t d = random_dim(a.dim());
    const int64_t dd = d < 0 ? d + a.dim() : d;
    s.args = {*x};
    s.a = d;
    const int parts = 1 + pick(3);
    for (int i = 0; i < parts; ++i) {
      const auto y = pick_ref([&](const Tensor& t) {
        if (t.dim() != a.dim()) return false;
        for (int64_t k = 0; k < t.dim(); ++k)
          if (k != dd && t.size(k) != a.size(k)) return false;
        return true;
      });
      s.args.push_back(*y);  // a itself qualifies
    }
    return true;
  }

  bool build_index_select(Step& s) {
    const auto x = pick_ref([](const Tensor&) { return true; });
    const Tensor a = meta(*x);
    s.a = random_dim(a.dim());
    const int64_t d = s.a < 0 ? s.a + a.dim() : s.a;
    const int64_t n = a.dim() == 0 ? 1 : min_size(*x, d);
    const int64_t count = n == 0 ? 0 : a.dim() == 0 ? pick_in(0, 1) : pick_in(0, 6);
    s.args = {*x, add_param(chance(0.5) ? DType::Int64 : DType::Int32, {count}, 0,
                            static_cast<double>(std::max<int64_t>(n - 1, 0)))};
    return true;
  }

  // Gathers and scatters (src: x itself; index_add's: x.narrow(dim, 0, count)), sorts
  // (s.b = topk's k, s.flag = descending / largest) and scans (s.flag = prod's keepdim),
  // all along s.a. Index sizes fit every shape set.
  bool build_along_dim(Step& s) {
    const OpId op = s.op;
    const bool needs_numeric = op == OpId::ScatterAdd || op == OpId::IndexAdd;
    const auto x = pick_ref([&](const Tensor& t) {
      return (!needs_numeric || numeric(t)) && (op != OpId::IndexAdd || t.dim() > 0);
    });
    if (!x) return false;
    const int64_t rank = meta(*x).dim();
    s.args = {*x};
    s.a = random_dim(rank);
    const int64_t d = s.a < 0 ? s.a + rank : s.a;
    const int64_t n = rank == 0 ? 1 : min_size(*x, d);
    s.flag = chance(0.5);
    if (op == OpId::Topk) s.b = pick_in(0, n);
    if (op == OpId::Gather || op == OpId::Scatter || op == OpId::ScatterAdd) {
      Dims shape;
      for (int64_t k = 0; k < rank; ++k) {
        const int64_t m = min_size(*x, k);
        if (k != d)
          shape.push_back(pick_in(0, std::min<int64_t>(m, 2)));
        else
          shape.push_back(n == 0 ? 0 : op == OpId::Gather ? pick_in(0, 4) : pick_in(0, n));
      }
      s.args.push_back(
          add_param(DType::Int64, shape, 0, static_cast<double>(std::max<int64_t>(n - 1, 0))));
    }
    if (op == OpId::IndexAdd) {
      s.args.push_back(add_param(chance(0.5) ? DType::Int64 : DType::Int32, {pick_in(0, n)}, 0,
                                 static_cast<double>(std::max<int64_t>(n - 1, 0))));
    }
    return true;
  }

  // Probabilities |x| + 0.25 of a floating input (finite by construction), rank 1 or 2.
  bool build_multinomial(Step& s) {
    std::vector<Ref> ok;
    for (const Ref& r : refs()) {
      const Tensor t = meta(r);
      if (r.input && floating(t) && (t.dim() == 1 || t.dim() == 2) && min_size(r, t.dim() - 1) > 0)
        ok.push_back(r);
    }
    if (ok.empty()) return false;
    const Ref x = ok[static_cast<size_t>(pick(static_cast<int>(ok.size())))];
    s.args = {x};
    s.flag = chance(0.5);  // replacement
    s.b = pick_in(1, s.flag ? 5 : min_size(x, meta(x).dim() - 1));
    return true;
  }

  bool build_factory(Step& s) {
    s.dtype =
        s.op == OpId::Rand || s.op == OpId::Randn
            ? one_of({main_dtype_, DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
            : any_dtype();
    if ((s.op == OpId::Rand || s.op == OpId::Randn) && !kt::is_float(s.dtype))
      s.dtype = DType::Float32;
    if (s.op == OpId::Arange) {
      if (s.dtype == DType::Bool) s.dtype = DType::Int64;
      s.int_scalar = !kt::is_float(s.dtype) || chance(0.3);
      if (s.int_scalar) {
        s.s0 = static_cast<double>(pick_in(-3, 2));
        s.s1 = s.s0 + static_cast<double>(pick_in(0, 8));
        s.s2 = static_cast<double>(pick_in(1, 3));
      } else {
        s.s0 = one_of({-1.0, 0.0, 0.5});
        s.s1 = s.s0 + one_of({1.0, 2.0, 0.0});
        s.s2 = one_of({0.25, 0.5, 0.125});
      }
      return true;
    }
    s.ints = shape_like_a_value();
    if (s.op == OpId::Empty || s.op == OpId::Full) {
      if (chance(0.35)) {  // into an existing tensor
        const auto x = pick_ref([](const Tensor&) { return true; });
        s = Step{};
        s.op = OpId::Full;
        s.form = Form::Fill;
        s.args = {*x};
        s.flag = chance(0.3);  // zero_()
        set_scalar(s, meta(*x));
        return true;
      }
      s.int_scalar = !kt::is_float(s.dtype);
      s.s0 = s.int_scalar ? static_cast<double>(pick_in(-3, 3)) : one_of({0.5, -2.0, 1.25, 0.0});
    }
    return true;
  }

  bool build_view(Step& s) {
    const auto x = pick_ref([](const Tensor&) { return true; });
    const Tensor a = meta(*x);
    const int64_t rank = a.dim();
    const Dims sizes = a.sizes();
    s.args = {*x};
    switch (s.op) {
      case OpId::View: {
        const int how = pick(4);
        if (how == 0) {
          s.flag2 = true;  // flatten(a, b)
          s.a = random_dim(rank);
          s.b = rank == 0 ? 0 : pick_in(s.a < 0 ? s.a + rank : s.a, rank - 1);
          return true;
        }
        s.flag = chance(0.4);  // reshape
        Dims target = sizes;
        if (how == 1 && rank >= 2) {  // merge two neighbours
          const size_t d = static_cast<size_t>(pick(static_cast<int>(rank - 1)));
          target[d] *= target[d + 1];
          target.erase(target.begin() + static_cast<std::ptrdiff_t>(d) + 1);
        } else if (how == 2 && rank >= 1) {  // split a dim
          const size_t d = static_cast<size_t>(pick(static_cast<int>(rank)));
          const int64_t n = target[d];
          const int64_t f = n % 2 == 0 && n > 0 ? 2 : 1;
          target[d] = n / f;
          target.insert(target.begin() + static_cast<std::ptrdiff_t>(d), f);
        } else {
          target = {a.numel()};
        }
        if (!target.empty() && chance(0.6)) target[0] = -1;
        s.ints = target;
        return true;
      }
      case OpId::Permute: {
        const int how = pick(3);
        if (how == 0 && rank <= 2) {
          s.flag2 = true;
        } else if (how == 1 && rank >= 1) {
          s.flag = true;
          s.a = random_dim(rank);
          s.b = random_dim(rank);
        } else {
          for (int64_t d = 0; d < rank; ++d) s.ints.push_back(d);
          std::shuffle(s.ints.begin(), s.ints.end(), g_);
          if (rank > 0 && chance(0.2)) s.ints[0] -= rank;
        }
        return true;
      }
      case OpId::Slice: {
        if (rank == 0) return false;
        s.a = random_dim(rank);
        const int64_t n = sizes[static_cast<size_t>(s.a < 0 ? s.a + rank : s.a)];
        if (chance(0.3)) {
          s.flag = true;  // narrow(dim, start, length)
          s.b = pick_in(0, n);
          s.c = pick_in(0, n - s.b);
          return true;
        }
        s.b = pick_in(-n, n);
        s.ints = {pick_in(-n, n + 2)};
        s.c = pick_in(1, 3);
        return true;
      }
      case OpId::Select: {
        if (rank == 0) return false;
        s.a = random_dim(rank);
        const int64_t n = sizes[static_cast<size_t>(s.a < 0 ? s.a + rank : s.a)];
        if (n == 0) return false;
        s.b = pick_in(-n, n - 1);
        return true;
      }
      case OpId::Expand: {
        for (int64_t i = 0; i < pick(3); ++i) s.ints.push_back(pick_in(1, 3));
        for (int64_t d = 0; d < rank; ++d) {
          const int64_t n = sizes[static_cast<size_t>(d)];
          s.ints.push_back(n == 1 ? pick_in(1, 4) : chance(0.5) ? -1 : n);
        }
        return true;
      }
      case OpId::Squeeze:
        s.flag = chance(0.5);
        s.a = random_dim(rank);
        return true;
      case OpId::Unsqueeze:
        s.a = pick_in(-(rank + 1), rank);
        return true;
      default:
        return false;
    }
  }

  // ---- running a candidate in every world
  void set_random_state(const WorldState& ws) {
    kiln::manual_seed(ws.world.data_seed);
    for (int i = 0; i < random_calls_; ++i) (void)kiln::next_random_state();
  }

  // In-place steps must not write through overlapping memory or read a partial alias
  // of their target while writing it (eager order would then be undefined).
  bool in_place_allowed(const Step& s) const {
    for (const WorldState& ws : states_) {
      for (const Env* env : {&ws.env, &ws.shadow}) {
        const Tensor& t = env->at(s.args.at(0));
        if (overlaps_itself(t)) return false;
        for (size_t i = 1; i < s.args.size(); ++i) {
          const Tensor& src = env->at(s.args[i]);
          if (src.storage() == t.storage() && !same_view(src, t)) return false;
        }
      }
    }
    return true;
  }

  bool try_step(const Step& s) {
    if (mutates(s) && !in_place_allowed(s)) return false;
    std::vector<Snapshot> saved;
    if (mutates(s)) {
      for (const WorldState& ws : states_) {
        saved.push_back(snapshot(ws.env.at(s.args[0])));
        saved.push_back(snapshot(ws.shadow.at(s.args[0])));
      }
    }
    const size_t values = states_[0].env.values.size(), scalars = states_[0].env.scalars.size();
    auto undo = [&] {
      for (WorldState& ws : states_) {
        for (Env* env : {&ws.env, &ws.shadow}) {
          env->values.resize(values);
          env->scalars.resize(scalars);
        }
      }
      for (const Snapshot& snap : saved) restore(snap);
      return false;
    };
    try {
      for (WorldState& ws : states_) {
        set_random_state(ws);
        run_step(s, ws.env);
        set_random_state(ws);
        run_step(s, ws.shadow);
      }
    } catch (const kiln::Error&) {
      return undo();
    }
    Program with = p_;
    with.steps.push_back(s);
    kt::Tol tol = program_tolerance(with);
    tol.rtol /= 2;
    tol.atol /= 2;
    for (WorldState& ws : states_) {
      if (!well_conditioned(s, ws, tol)) return undo();
      if (!far_from_thresholds(s, ws)) return undo();
      if (!converts_in_range(s, ws)) return undo();
      if (!pow_well_defined(s, ws)) return undo();
      if (s.slot >= 0 && !std::isfinite(ws.env.scalars.at(static_cast<size_t>(s.slot))))
        return undo();  // NaN as a fill value or a bound is no test of the tracer
    }
    if (rounds(s)) {
      for (WorldState& ws : states_) {
        const Tensor& out = mutates(s) ? ws.shadow.at(s.args[0]) : ws.shadow.values.back();
        double floor_scale = 0.0;
        if (accumulates(s.op)) floor_scale = max_abs_finite(kt::read(ws.shadow.at(s.args[0])));
        perturb(out, floor_scale, g_);
      }
    }
    p_.steps.push_back(s);
    random_calls_ += is_random_op(s);
    return true;
  }

  // The step's result is small enough, integers stay exact, and the shadow agrees.
  bool well_conditioned(const Step& s, const WorldState& ws, kt::Tol tol) const {
    switch (produces(s)) {
      case Produces::Nothing:
        if (s.form == Form::HostRead) return true;
        return agrees(ws.env.at(s.args[0]), ws.shadow.at(s.args[0]), tol);
      case Produces::Scalar: {
        const Host a({}, {ws.env.scalars.back()}), b({}, {ws.shadow.scalars.back()});
        return static_cast<bool>(kt::all_close(b, a, tol));
      }
      case Produces::Value:
        return agrees(ws.env.values.back(), ws.shadow.values.back(), tol);
    }
    return false;
  }

  // A step with an integer or bool result (a comparison, argmax, a cast to int) of
  // rounded inputs must not sit on a threshold: one shadow draw may miss a tie that a
  // fused kernel breaks the other way (tanh(9) < 1 is 1 ulp from false), so the step
  // runs again on inputs moved by a few rounding errors in random directions and must
  // give the same answer each time.
  bool far_from_thresholds(const Step& s, const WorldState& ws) {
    if (produces(s) != Produces::Value || kt::is_float(ws.env.values.back().dtype())) return true;
    const Host expected = kt::read(ws.env.values.back());
    std::vector<size_t> rounded;  // args whose values carry rounding (the shadow differs)
    for (size_t i = 0; i < s.args.size(); ++i) {
      const Tensor& a = ws.env.at(s.args[i]);
      if (!kt::is_float(a.dtype())) continue;
      if (!kt::all_close(kt::read(ws.shadow.at(s.args[i])), kt::read(a), kt::tol_exact()))
        rounded.push_back(i);
    }
    if (rounded.empty()) return true;
    if (!comparison_has_margin(s, ws, rounded)) return false;
    for (int trial = 0; trial < 4; ++trial) {
      Env moved = ws.env;
      moved.values.pop_back();
      for (size_t i : rounded) {
        Tensor copy = ws.env.at(s.args[i]).clone();
        perturb(copy, 0.0, g_, 8.0);
        (s.args[i].input ? moved.inputs : moved.values)[static_cast<size_t>(s.args[i].index)] =
            copy;
      }
      try {
        run_step(s, moved);
      } catch (const kiln::Error&) {
        return false;
      }
      if (!kt::all_close(kt::read(moved.values.back()), expected, kt::tol_exact())) return false;
    }
    return true;
  }

  // Float to integer conversion of NaN, inf or a value out of range is undefined in
  // C++ (eager and fused code may differ); such a step is redrawn.
  static bool converts_in_range(const Step& s, const WorldState& ws) {
    Tensor source;
    if (s.form == Form::Call && s.op == OpId::Cast && !kt::is_float(s.dtype))
      source = ws.env.at(s.args[0]);
    else if (s.form == Form::Copy && !kt::is_float(ws.env.at(s.args[0]).dtype()))
      source = ws.env.at(s.args[1]);
    if (!source.defined() || !kt::is_float(source.dtype())) return true;
    for (double x : kt::read(source).v)
      if (!std::isfinite(x) || std::fabs(x) >= 2147483647.0) return false;
    return true;
  }

  // pow(x, y) of a negative x is NaN unless y is an integer: with a rounded y the answer
  // hangs on the last bit (tanh(-9) is -1 in one libm and -0.99999994 in another), and
  // 0 to a rounded power near 0 flips between 0, 1 and inf.
  static bool pow_well_defined(const Step& s, const WorldState& ws) {
    if (s.op != OpId::Pow || produces(s) == Produces::Scalar) return true;
    Tensor base, exponent, exponent_shadow;
    bool scalar_exponent_rounded = false;
    if (s.form == Form::ScalarLeft) {
      exponent = ws.env.at(s.args[0]);
      exponent_shadow = ws.shadow.at(s.args[0]);
    } else {
      base = ws.env.at(s.args[0]);
      if (s.form == Form::Call || s.form == Form::InPlace) {
        exponent = ws.env.at(s.args[1]);
        exponent_shadow = ws.shadow.at(s.args[1]);
      } else {
        scalar_exponent_rounded = s.slot >= 0;
      }
    }
    bool rounded = scalar_exponent_rounded;
    if (exponent.defined() && kt::is_float(exponent.dtype()))
      rounded = !kt::all_close(kt::read(exponent_shadow), kt::read(exponent), kt::tol_exact());
    if (!rounded) return true;
    if (!base.defined()) return s.s0 > 0;  // a scalar base
    for (double x : kt::read(base).v)
      if (!(x > 0)) return false;
    return true;
  }

  // Comparisons of rounded values need a margin: eq(tanh(9), 1) is true in one libm
  // and false in another. Every pair must differ by more than a few rounding errors,
  // or be exactly equal operands that carry no rounding.
  bool comparison_has_margin(const Step& s, const WorldState& ws,
                             const std::vector<size_t>& rounded) {
    const kiln::OpFamily fam = kiln::op_info(s.op).family;
    if (fam != kiln::OpFamily::Binary || s.form != Form::Call || rounded.empty()) return true;
    const Tensor& a = ws.env.at(s.args[0]);
    const Tensor& b = ws.env.at(s.args[1]);
    const double delta = 16.0 * std::max(rounding_noise(a.dtype()), rounding_noise(b.dtype()));
    const Host gap = kt::map2(kt::read(a), kt::read(b), [delta](double x, double y) {
      if (std::isnan(x) || std::isnan(y) || std::isinf(x) || std::isinf(y)) return 1.0;
      return std::fabs(x - y) > delta * std::max({std::fabs(x), std::fabs(y), 1e-3}) ? 1.0 : 0.0;
    });
    for (double g : gap.v)
      if (g == 0.0) return false;
    return true;
  }

  static bool agrees(const Tensor& value, const Tensor& shadow, kt::Tol tol) {
    if (value.numel() > kMaxNumel || value.dim() > 6) return false;
    const Host a = kt::read(value), b = kt::read(shadow);
    if (!kt::is_float(value.dtype())) {
      for (double x : a.v)
        if (std::fabs(x) > kMaxInt) return false;
      tol = kt::tol_exact();
    }
    return static_cast<bool>(kt::all_close(b, a, tol));
  }

  std::mt19937_64 g_;
  GenerateOptions options_;
  Program p_;
  std::vector<WorldState> states_;
  int random_calls_ = 0;
  DType main_dtype_ = DType::Float32;
};

}  // namespace

Program generate(uint64_t seed, const GenerateOptions& options) {
  return Builder(seed, options).build();
}

bool runs_in_all_worlds(const Program& p) {
  kt::RunModeScope eager(kt::RunMode::Eager);
  try {
    for (const World& w : p.worlds) {
      Env env{kiln::kCPU, {}, {}, {}};
      for (size_t i = 0; i < p.inputs.size(); ++i)
        env.inputs.push_back(
            make_input(p.inputs[i], input_data(p, static_cast<int>(i), w), w.shape_set, kiln::kCPU)
                .view);
      kiln::manual_seed(w.data_seed);
      for (const Step& s : p.steps) {
        if (mutates(s)) {
          const Tensor& t = env.at(s.args.at(0));
          if (overlaps_itself(t)) return false;
          for (size_t i = 1; i < s.args.size(); ++i) {
            const Tensor& src = env.at(s.args[i]);
            if (src.storage() == t.storage() && !same_view(src, t)) return false;
          }
        }
        run_step(s, env);
      }
    }
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

}  // namespace kfuzz
