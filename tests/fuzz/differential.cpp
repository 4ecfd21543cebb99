#include "differential.h"

#include <algorithm>
#include <sstream>

namespace kfuzz {
namespace {

// 0: least precise; order of bfloat16 < float16 < float32 < float64.
int precision_rank(DType d) {
  switch (d) {
    case DType::BFloat16:
      return 0;
    case DType::Float16:
      return 1;
    case DType::Float32:
      return 2;
    case DType::Float64:
      return 3;
    default:
      return 4;  // integers and bool convert to float32 when they meet floats
  }
}

void read_into(Outcome& out, const Tensor& t, const std::string& label) {
  out.values.push_back(kt::read(t));
  out.labels.push_back(label);
  out.dtypes.push_back(t.dtype());
}

std::string describe(const std::exception& e) { return kt::demangled_type(e) + ": " + e.what(); }

}  // namespace

Outcome run_program(const Program& p, RunMode mode, Device device, bool symbolic_shapes) {
  kt::RunModeScope scope(mode);  // restores the tracer's settings after
  kiln::tracer::config().symbolic_shapes = symbolic_shapes;
  Outcome out;
  std::vector<std::vector<InputTensor>> holders(p.worlds.size() + 1);
  std::vector<std::pair<Tensor, std::string>> kept;
  int shape_sets = 0;
  for (const World& w : p.worlds) shape_sets = std::max(shape_sets, w.shape_set + 1);
  holders.resize(static_cast<size_t>(shape_sets));
  for (size_t it = 0; it < p.schedule.size(); ++it) {
    const World& world = p.worlds.at(static_cast<size_t>(p.schedule[it]));
    auto& held = holders.at(static_cast<size_t>(world.shape_set));
    Env env{device, {}, {}, {}};
    const std::string iteration = "iteration " + std::to_string(it);
    try {
      for (size_t i = 0; i < p.inputs.size(); ++i) {
        const Host data = input_data(p, static_cast<int>(i), world);
        if (p.fresh_inputs || held.size() <= i) {
          InputTensor t = make_input(p.inputs[i], data, world.shape_set, device);
          if (held.size() <= i) held.push_back(t);
          env.inputs.push_back(t.view);
        } else {
          refill_input(p.inputs[i], held[i], data, device);
          env.inputs.push_back(held[i].view);
        }
      }
      kiln::manual_seed(world.data_seed);
      for (size_t k = 0; k < p.steps.size(); ++k) {
        out.error_at = iteration + " step " + std::to_string(k);
        run_step(p.steps[k], env);
      }
      out.error_at = iteration + " read";
      for (size_t v = 0; v < env.values.size(); ++v) {
        const std::string label = iteration + " v" + std::to_string(v);
        if (p.read_each_iteration)
          read_into(out, env.values[v], label);
        else
          kept.emplace_back(env.values[v], label);
      }
      for (size_t i = 0; i < env.inputs.size(); ++i) {
        const std::string label = iteration + " in" + std::to_string(i);
        if (p.read_each_iteration)
          read_into(out, env.inputs[i], label);
        else
          kept.emplace_back(env.inputs[i], label);
      }
    } catch (const std::exception& e) {
      out.error = describe(e);
      return out;
    }
  }
  out.error_at = "final read";
  try {
    for (const auto& [t, label] : kept) read_into(out, t, label);
  } catch (const std::exception& e) {
    out.error = describe(e);
    return out;
  }
  out.error_at.clear();
  return out;
}

std::vector<Leg> legs_for(bool with_cuda) {
  std::vector<Leg> legs = {{"cpu/eager", RunMode::Eager, kiln::kCPU},
                           {"cpu/interpreted", RunMode::Interpreted, kiln::kCPU},
                           {"cpu/jit", RunMode::Jit, kiln::kCPU},
                           {"cpu/jit-symbolic", RunMode::Jit, kiln::kCPU, true}};
  if (with_cuda) {
    legs.push_back({"cuda/eager", RunMode::Eager, kiln::Device::parse("cuda")});
    legs.push_back({"cuda/jit", RunMode::Jit, kiln::Device::parse("cuda")});
  }
  return legs;
}

kt::Tol program_tolerance(const Program& p) {
  int lowest = precision_rank(DType::Float32);
  for (const InputDecl& d : p.inputs) lowest = std::min(lowest, precision_rank(d.dtype));
  for (const Step& s : p.steps) {
    const bool dtype_used = s.op == OpId::Cast || s.op == OpId::Empty || s.op == OpId::Full ||
                            s.op == OpId::Arange || s.op == OpId::Rand || s.op == OpId::Randn;
    if (dtype_used && s.form == Form::Call) lowest = std::min(lowest, precision_rank(s.dtype));
  }
  switch (lowest) {
    case 0:
      return {5e-2, 5e-2};  // bfloat16: 8 bits of mantissa, a fused chain rounds less often
    case 1:
      return {1e-2, 1e-2};  // float16
    case 3:
      return {1e-9, 1e-10};
    default:
      return {1e-4, 1e-5};  // float32 (DESIGN.md: well under 1e-5 pointwise, 1e-4 reductions)
  }
}

std::optional<Mismatch> find_mismatch(const Program& p, const std::vector<Leg>& legs) {
  if (legs.empty()) return std::nullopt;
  const Outcome expected = run_program(p, legs[0].mode, legs[0].device);
  const kt::Tol tol = program_tolerance(p);
  for (size_t l = 1; l < legs.size(); ++l) {
    const Outcome actual = run_program(p, legs[l].mode, legs[l].device, legs[l].symbolic_shapes);
    std::ostringstream os;
    if (!expected.error.empty() || !actual.error.empty()) {
      if (expected.error == actual.error) continue;
      os << legs[0].name << ": " << (expected.error.empty() ? "no error" : expected.error)
         << (expected.error.empty() ? "" : " at " + expected.error_at) << "; " << legs[l].name
         << ": " << (actual.error.empty() ? "no error" : actual.error)
         << (actual.error.empty() ? "" : " at " + actual.error_at);
      return Mismatch{legs[l].name, os.str()};
    }
    if (actual.values.size() != expected.values.size()) {
      os << legs[l].name << " read " << actual.values.size() << " values, " << legs[0].name
         << " read " << expected.values.size();
      return Mismatch{legs[l].name, os.str()};
    }
    for (size_t v = 0; v < expected.values.size(); ++v) {
      const bool exact = !kt::is_float(expected.dtypes[v]);
      if (actual.dtypes[v] != expected.dtypes[v]) {
        os << expected.labels[v] << ": dtype " << kt::name(actual.dtypes[v]) << ", expected "
           << kt::name(expected.dtypes[v]);
        return Mismatch{legs[l].name, os.str()};
      }
      const auto close =
          kt::all_close(actual.values[v], expected.values[v], exact ? kt::tol_exact() : tol);
      if (!close) {
        os << expected.labels[v] << " (" << kt::name(expected.dtypes[v])
           << "): " << close.message();
        return Mismatch{legs[l].name, os.str()};
      }
    }
  }
  return std::nullopt;
}

}  // namespace kfuzz
