#include "program_text.h"

#include <array>
#include <map>
#include <sstream>
#include <stdexcept>

namespace kfuzz {
namespace {

constexpr std::array<std::pair<DType, const char*>, 7> kDTypes = {{
    {DType::Bool, "bool"},
    {DType::Int32, "int32"},
    {DType::Int64, "int64"},
    {DType::Float16, "float16"},
    {DType::BFloat16, "bfloat16"},
    {DType::Float32, "float32"},
    {DType::Float64, "float64"},
}};

std::string dims_text(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

std::string double_text(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

Dims parse_dims(const std::string& s) {
  if (s.size() < 2 || s.front() != '[' || s.back() != ']')
    throw std::runtime_error("expected [..], got " + s);
  Dims d;
  for (const std::string& part : split(s.substr(1, s.size() - 2), ','))
    d.push_back(std::stoll(part));
  return d;
}

Ref parse_ref(const std::string& s) {
  if (s.rfind("in", 0) == 0) return Ref{true, std::stoi(s.substr(2))};
  if (s.rfind("v", 0) == 0) return Ref{false, std::stoi(s.substr(1))};
  throw std::runtime_error("bad reference " + s);
}

Step parse_step(std::istringstream& in) {
  Step s;
  std::string op, form;
  in >> op >> form;
  if (!kiln::find_op(op, &s.op)) throw std::runtime_error("unknown op " + op);
  if (!parse_form(form, &s.form)) throw std::runtime_error("unknown form " + form);
  std::string field;
  while (in >> field) {
    const size_t eq = field.find('=');
    if (eq == std::string::npos) throw std::runtime_error("expected key=value, got " + field);
    const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "args") {
      for (const std::string& r : split(value, ',')) s.args.push_back(parse_ref(r));
    } else if (key == "ints") {
      for (const std::string& v : split(value, ',')) s.ints.push_back(std::stoll(v));
    } else if (key == "a") {
      s.a = std::stoll(value);
    } else if (key == "b") {
      s.b = std::stoll(value);
    } else if (key == "c") {
      s.c = std::stoll(value);
    } else if (key == "s0") {
      s.s0 = std::stod(value);
    } else if (key == "s1") {
      s.s1 = std::stod(value);
    } else if (key == "s2") {
      s.s2 = std::stod(value);
    } else if (key == "slot") {
      s.slot = std::stoi(value);
    } else if (key == "int") {
      s.int_scalar = value == "1";
    } else if (key == "flag") {
      s.flag = value == "1";
    } else if (key == "flag2") {
      s.flag2 = value == "1";
    } else if (key == "dtype") {
      if (!parse_dtype(value, &s.dtype)) throw std::runtime_error("unknown dtype " + value);
    } else {
      throw std::runtime_error("unknown step field " + key);
    }
  }
  return s;
}

}  // namespace

std::string dtype_text(DType d) {
  for (const auto& [dtype, name] : kDTypes)
    if (dtype == d) return name;
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  for (const auto& [dtype, name] : kDTypes) {
    if (s == name) {
      *out = dtype;
      return true;
    }
  }
  return false;
}

std::string to_text(const Program& p) {
  std::ostringstream os;
  os << "kiln-fuzz 1\n"
     << "seed " << p.seed << "\n"
     << "device " << p.device << "\n"
     << "fresh_inputs " << p.fresh_inputs << "\n"
     << "read_each_iteration " << p.read_each_iteration << "\n";
  for (const World& w : p.worlds) os << "world " << w.shape_set << " " << w.data_seed << "\n";
  os << "schedule";
  for (int w : p.schedule) os << " " << w;
  os << "\n";
  for (const InputDecl& d : p.inputs) {
    os << "input " << dtype_text(d.dtype) << " " << layout_name(d.layout) << " "
       << double_text(d.lo) << " " << double_text(d.hi);
    for (const Dims& s : d.shapes) os << " " << dims_text(s);
    os << "\n";
  }
  for (const Step& s : p.steps) {
    os << "step " << kiln::op_name(s.op) << " " << form_name(s.form) << " args=";
    for (size_t i = 0; i < s.args.size(); ++i)
      os << (i ? "," : "") << (s.args[i].input ? "in" : "v") << s.args[i].index;
    os << " ints=";
    for (size_t i = 0; i < s.ints.size(); ++i) os << (i ? "," : "") << s.ints[i];
    os << " a=" << s.a << " b=" << s.b << " c=" << s.c << " s0=" << double_text(s.s0)
       << " s1=" << double_text(s.s1) << " s2=" << double_text(s.s2) << " slot=" << s.slot
       << " int=" << s.int_scalar << " flag=" << s.flag << " flag2=" << s.flag2
       << " dtype=" << dtype_text(s.dtype) << "\n";
  }
  return os.str();
}

Program from_text(const std::string& text) {
  Program p;
  p.worlds.clear();
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  bool header = false;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string key;
    in >> key;
    try {
      if (key == "kiln-fuzz") {
        int version = 0;
        in >> version;
        if (version != 1) throw std::runtime_error("unsupported version");
        header = true;
      } else if (key == "seed") {
        in >> p.seed;
      } else if (key == "device") {
        in >> p.device;
      } else if (key == "fresh_inputs") {
        in >> p.fresh_inputs;
      } else if (key == "read_each_iteration") {
        in >> p.read_each_iteration;
      } else if (key == "world") {
        World w;
        in >> w.shape_set >> w.data_seed;
        p.worlds.push_back(w);
      } else if (key == "schedule") {
        int w;
        while (in >> w) p.schedule.push_back(w);
      } else if (key == "input") {
        InputDecl d;
        std::string dtype, layout, shape;
        in >> dtype >> layout >> d.lo >> d.hi;
        if (!parse_dtype(dtype, &d.dtype)) throw std::runtime_error("unknown dtype " + dtype);
        if (!parse_layout(layout, &d.layout)) throw std::runtime_error("unknown layout " + layout);
        while (in >> shape) d.shapes.push_back(parse_dims(shape));
        p.inputs.push_back(d);
      } else if (key == "step") {
        p.steps.push_back(parse_step(in));
      } else {
        throw std::runtime_error("unknown keyword " + key);
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("fuzz case line " + std::to_string(number) + ": " + e.what());
    }
  }
  if (!header) throw std::runtime_error("not a kiln fuzz case (no 'kiln-fuzz 1' line)");
  return p;
}

}  // namespace kfuzz
