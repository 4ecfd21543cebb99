#include "listing.h"

#include <cmath>
#include <sstream>

#include "interpret.h"
#include "runtime/dims.h"

namespace kfuzz {
namespace {

std::string dtype_cpp(DType d) {
  switch (d) {
    case DType::Float32:
      return "kFloat32";
    case DType::Float64:
      return "kFloat64";
    case DType::Float16:
      return "kFloat16";
    case DType::BFloat16:
      return "kBFloat16";
    case DType::Int32:
      return "kInt32";
    case DType::Int64:
      return "kInt64";
    case DType::Bool:
      return "kBool";
  }
  return "?";
}

std::string dims_cpp(const Dims& d) {
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i];
  os << "}";
  return os.str();
}

std::string number(double v, bool integer) {
  std::ostringstream os;
  if (integer) {
    os << static_cast<int64_t>(std::llround(v));
  } else {
    os.precision(17);
    os << v;
    if (os.str().find_first_of(".en") == std::string::npos) os << ".0";
  }
  return os.str();
}

std::string scalar_cpp(const Step& s, double v) {
  std::string text = number(v, s.int_scalar);
  if (s.slot >= 0 && !s.int_scalar) {
    text = "(" + text + " + 0.01 * std::tanh(s" + std::to_string(s.slot) + "))";
  }
  return text;
}

std::string options_cpp(const Step& s) { return "{" + dtype_cpp(s.dtype) + ", device}"; }

std::string binary_name(OpId op) { return kiln::op_name(op); }

std::string value_expr(const Step& s) {
  auto a = [&](size_t i) { return ref_name(s.args.at(i)); };
  const std::string op = kiln::op_name(s.op);
  if (s.form == Form::Clone) return a(0) + ".clone()";
  if (s.form == Form::Contiguous) return a(0) + ".contiguous()";
  if (is_unary(s.op)) return "kiln::" + op + "(" + a(0) + ")";
  if (is_binary(s.op)) {
    if (s.form == Form::ScalarRight)
      return "kiln::" + op + "(" + a(0) + ", " + scalar_cpp(s, s.s0) + ")";
    if (s.form == Form::ScalarLeft)
      return "kiln::" + op + "(" + scalar_cpp(s, s.s0) + ", " + a(0) + ")";
    return "kiln::" + op + "(" + a(0) + ", " + a(1) + ")";
  }
  const std::string keep = s.flag ? "true" : "false";
  switch (s.op) {
    case OpId::Gelu:
      return "kiln::gelu(" + a(0) + ", " + keep + ")";
    case OpId::Cast:
      return a(0) + ".to(" + dtype_cpp(s.dtype) + ")";
    case OpId::Clamp:
      return "kiln::clamp(" + a(0) + ", " + (s.flag ? scalar_cpp(s, s.s0) : "std::nullopt") + ", " +
             (s.flag2 ? number(s.s1, s.int_scalar) : "std::nullopt") + ")";
    case OpId::Where:
      if (s.form == Form::ScalarRight)
        return "kiln::where(" + a(0) + ", " + a(1) + ", " + scalar_cpp(s, s.s0) + ")";
      if (s.form == Form::ScalarLeft)
        return "kiln::where(" + a(0) + ", " + scalar_cpp(s, s.s0) + ", " + a(1) + ")";
      return "kiln::where(" + a(0) + ", " + a(1) + ", " + a(2) + ")";
    case OpId::Sum:
    case OpId::Mean:
      return "kiln::" + op + "(" + a(0) + ", " + dims_cpp(s.ints) + ", " + keep + ")";
    case OpId::Max:
      return "kiln::amax(" + a(0) + ", " + dims_cpp(s.ints) + ", " + keep + ")";
    case OpId::Min:
      return "kiln::amin(" + a(0) + ", " + dims_cpp(s.ints) + ", " + keep + ")";
    case OpId::Argmax:
      return "kiln::argmax(" + a(0) + ", " + (s.flag2 ? std::to_string(s.a) : "std::nullopt") +
             ", " + keep + ")";
    case OpId::Var:
      return "kiln::var(" + a(0) + ", " + dims_cpp(s.ints) + ", " + std::to_string(s.c) + ", " +
             keep + ")";
    case OpId::LogSumExp:
      return "kiln::logsumexp(" + a(0) + ", " + dims_cpp(s.ints) + ", " + keep + ")";
    case OpId::Softmax:
    case OpId::LogSoftmax:
      return "kiln::" + op + "(" + a(0) + ", " + std::to_string(s.a) + ")";
    case OpId::LayerNorm:
      return "kiln::layer_norm(" + a(0) + ", " + dims_cpp(s.ints) + ", " +
             (s.flag2 ? a(1) : std::string("{}")) + ", " +
             (s.flag ? a(s.args.size() - 1) : std::string("{}")) + ", " + number(s.s0, false) + ")";
    case OpId::Matmul:
      return "kiln::matmul(" + a(0) + ", " + a(1) + (s.flag2 ? ".transpose(-1, -2))" : ")");
    case OpId::Linear:
      return "kiln::linear(" + a(0) + ", " + a(1) + (s.flag ? ", " + a(2) : "") + ")";
    case OpId::Conv2d: {
      auto at = [&](size_t i, int64_t d) { return s.ints.size() > i ? s.ints[i] : d; };
      return "kiln::conv2d(" + a(0) + ", " + a(1) + ", " + (s.flag ? a(2) : std::string("{}")) +
             ", {" + std::to_string(at(0, 1)) + ", " + std::to_string(at(1, 1)) + "}, {" +
             std::to_string(at(2, 0)) + ", " + std::to_string(at(3, 0)) + "})";
    }
    case OpId::MaxPool2d:
    case OpId::AvgPool2d: {
      auto at = [&](size_t i, int64_t d) {
        return std::to_string(s.ints.size() > i ? s.ints[i] : d);
      };
      return "kiln::" + op + "(" + a(0) + ", {" + at(0, 1) + ", " + at(1, 1) + "}, {" + at(2, 0) +
             ", " + at(3, 0) + "}, {" + at(4, 0) + ", " + at(5, 0) + "})";
    }
    case OpId::Im2Col:
    case OpId::Col2Im: {
      auto at = [&](size_t i, int64_t d) {
        return std::to_string(s.ints.size() > i ? s.ints[i] : d);
      };
      const std::string frame = "{" + at(0, 1) + ", " + at(1, 1) + "}, {" + at(2, 1) + ", " +
                                at(3, 1) + "}, {" + at(4, 0) + ", " + at(5, 0) + "}";
      if (s.op == OpId::Im2Col)
        return "kiln::im2col(" + a(0) + ", " + frame + ", " + number(s.s0, false) + ")";
      return "kiln::col2im(" + a(0) + ", {" + at(6, 0) + ", " + at(7, 0) + "}, " + frame + ")";
    }
    case OpId::Cat: {
      std::string parts;
      for (size_t i = 0; i < s.args.size(); ++i) parts += (i ? ", " : "") + a(i);
      return "kiln::cat({" + parts + "}, " + std::to_string(s.a) + ")";
    }
    case OpId::IndexSelect:
      return "kiln::index_select(" + a(0) + ", " + std::to_string(s.a) + ", " + a(1) + ")";
    case OpId::Gather:
      return "kiln::gather(" + a(0) + ", " + std::to_string(s.a) + ", " + a(1) + ")";
    case OpId::Scatter:
    case OpId::ScatterAdd:
      return "kiln::" + op + "(" + a(0) + ", " + std::to_string(s.a) + ", " + a(1) + ", " + a(0) +
             ")";
    case OpId::IndexAdd:
      return "kiln::index_add(" + a(0) + ", " + std::to_string(s.a) + ", " + a(1) + ", " + a(0) +
             ".narrow(" + std::to_string(s.a) + ", 0, " + a(1) + ".numel()), 2)";
    case OpId::Argsort:
      return "kiln::argsort(" + a(0) + ", " + std::to_string(s.a) + ", " + keep + ", true)";
    case OpId::Topk:
      return "kiln::topk(" + a(0) + ", " + std::to_string(s.b) + ", " + std::to_string(s.a) + ", " +
             keep + ").values";
    case OpId::Cumsum:
    case OpId::Cumprod:
      return "kiln::" + op + "(" + a(0) + ", " + std::to_string(s.a) + ")";
    case OpId::Prod:
      return "kiln::prod(" + a(0) + ", " + std::to_string(s.a) + ", " + keep + ")";
    case OpId::Multinomial:
      return "kiln::multinomial(kiln::abs(" + a(0) + ") + 0.25, " + std::to_string(s.b) + ", " +
             keep + ")";
    case OpId::Nonzero:
      return "kiln::nonzero(" + a(0) + ")";
    case OpId::ToDevice:
      return a(0) + ".cpu().to(device)  /* .clone() on the CPU: a copy everywhere */";
    case OpId::Empty:
      return "kiln::empty(" + dims_cpp(s.ints) + ", " + options_cpp(s) + "); v.fill_(" +
             scalar_cpp(s, s.s0) + ")";
    case OpId::Full:
      return "kiln::full(" + dims_cpp(s.ints) + ", " + scalar_cpp(s, s.s0) + ", " + options_cpp(s) +
             ")";
    case OpId::Arange:
      return "kiln::arange(" + number(s.s0, s.int_scalar) + ", " + number(s.s1, s.int_scalar) +
             ", " + number(s.s2, s.int_scalar) + ", " + options_cpp(s) + ")";
    case OpId::Rand:
    case OpId::Randn:
      return "kiln::" + op + "(" + dims_cpp(s.ints) + ", " + options_cpp(s) + ")";
    case OpId::View:
      if (s.flag2)
        return a(0) + ".flatten(" + std::to_string(s.a) + ", " + std::to_string(s.b) + ")";
      return a(0) + (s.flag ? ".reshape(" : ".view(") + dims_cpp(s.ints) + ")";
    case OpId::Permute:
      if (s.flag2) return a(0) + ".t()";
      if (s.flag)
        return a(0) + ".transpose(" + std::to_string(s.a) + ", " + std::to_string(s.b) + ")";
      return a(0) + ".permute(" + dims_cpp(s.ints) + ")";
    case OpId::Slice:
      if (s.flag)
        return a(0) + ".narrow(" + std::to_string(s.a) + ", " + std::to_string(s.b) + ", " +
               std::to_string(s.c) + ")";
      return a(0) + ".slice(" + std::to_string(s.a) + ", " + std::to_string(s.b) + ", " +
             std::to_string(s.ints.empty() ? 0 : s.ints[0]) + ", " + std::to_string(s.c) + ")";
    case OpId::Select:
      return a(0) + ".select(" + std::to_string(s.a) + ", " + std::to_string(s.b) + ")";
    case OpId::Expand:
      return a(0) + ".expand(" + dims_cpp(s.ints) + ")";
    case OpId::Squeeze:
      return a(0) + (s.flag ? ".squeeze(" + std::to_string(s.a) + ")" : ".squeeze()");
    case OpId::Unsqueeze:
      return a(0) + ".unsqueeze(" + std::to_string(s.a) + ")";
    default:
      return "/* " + op + " */";
  }
}

std::string statement(const Step& s) {
  auto a = [&](size_t i) { return ref_name(s.args.at(i)); };
  switch (s.form) {
    case Form::InPlace:
      if (s.op == OpId::Relu) return a(0) + ".relu_();";
      if (s.op == OpId::Clamp)
        return a(0) + ".clamp_(" + scalar_cpp(s, s.s0) + ", " + number(s.s1, s.int_scalar) + ");";
      return a(0) + "." + binary_name(s.op) + "_(" + a(1) + ");";
    case Form::InPlaceScalar:
      return a(0) + "." + binary_name(s.op) + "_(" + scalar_cpp(s, s.s0) + ");";
    case Form::Copy:
      return a(0) + ".copy_(" + a(1) + ");";
    case Form::Fill:
      return s.flag ? a(0) + ".zero_();" : a(0) + ".fill_(" + scalar_cpp(s, s.s0) + ");";
    case Form::HostRead:
      return "(void)" + a(0) + ".to_vector<double>();  // graph break";
    default:
      return "";
  }
}

}  // namespace

std::string ref_name(const Ref& r) { return (r.input ? "in" : "v") + std::to_string(r.index); }

std::string cpp_listing(const Program& p) {
  std::ostringstream os;
  os << "// kiln fuzz program (seed " << p.seed << "), " << p.schedule.size() << " iterations on "
     << p.device << "; each iteration runs:\n";
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const InputDecl& d = p.inputs[i];
    os << "Tensor in" << i << " = input(" << dtype_cpp(d.dtype) << ", ";
    for (size_t k = 0; k < d.shapes.size(); ++k)
      os << (k ? " | " : "") << kiln::dims_str(d.shapes[k]);
    os << ", " << layout_name(d.layout) << ", values in [" << d.lo << ", " << d.hi << "]);\n";
  }
  int value = 0, scalar = 0;
  for (const Step& s : p.steps) {
    switch (produces(s)) {
      case Produces::Value: {
        const std::string name = "v" + std::to_string(value++);
        std::string expr = value_expr(s);
        const size_t fill = expr.find("; v.fill_");
        if (fill != std::string::npos) expr.replace(fill + 2, 1, name);
        os << "Tensor " << name << " = " << expr << ";\n";
        break;
      }
      case Produces::Scalar: {
        const std::string x = ref_name(s.args.at(0));
        const std::string one = s.op == OpId::Sum   ? "kiln::sum(" + x + ")"
                                : s.op == OpId::Max ? "kiln::amax(" + x + ")"
                                                    : x;
        os << "double s" << scalar++ << " = " << one << ".item<double>();  // graph break\n";
        break;
      }
      case Produces::Nothing:
        os << statement(s) << "\n";
        break;
    }
  }
  os << "// worlds (shape set, data seed):";
  for (const World& w : p.worlds) os << " (" << w.shape_set << ", " << w.data_seed << ")";
  os << "; schedule:";
  for (int w : p.schedule) os << " " << w;
  os << (p.fresh_inputs ? "; fresh inputs" : "; inputs kept and refilled")
     << (p.read_each_iteration ? ", values read each iteration" : ", values read at the end")
     << "\n";
  return os.str();
}

}  // namespace kfuzz
