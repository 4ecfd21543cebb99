// KernelIR -> CUDA C (see cuda_codegen.h for the argument layout). The emitter mirrors
// jit/llvm/codegen.cpp: values are memoized per level (invariant at entry, row per row,
// full per element), conversions are the same, and a pointwise op is a call of its
// functor from ops/pointwise_math.h (which the source includes: NVRTC gets it from the
// copy embedded in libkiln), the one the eager CUDA kernels run.
#include "jit/cuda/cuda_codegen.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>

namespace kiln::jit::cuda_backend {

namespace {

bool flt(DType d) { return is_floating(d); }

std::string ctype(DType d) {
  switch (d) {
    case DType::Bool:
      return "bool";
    case DType::Int32:
      return "int";
    case DType::Int64:
      return "long long";
    case DType::Float64:
      return "double";
    default:
      return "float";
  }
}
std::string stype(DType d) {
  switch (d) {
    case DType::Bool:
      return "unsigned char";
    case DType::Float16:
    case DType::BFloat16:
      return "unsigned short";
    default:
      return ctype(d);
  }
}
std::string load_as(DType d, const std::string& raw) {
  switch (d) {
    case DType::Bool:
      return "(" + raw + " != 0)";
    case DType::Float16:
      return "kiln_h2f(" + raw + ")";
    case DType::BFloat16:
      return "kiln_bf2f(" + raw + ")";
    default:
      return raw;
  }
}
std::string to_storage(DType d, const std::string& v) {
  switch (d) {
    case DType::Bool:
      return "static_cast<unsigned char>(" + v + ")";
    case DType::Float16:
      return "kiln_f2h(" + v + ")";
    case DType::BFloat16:
      return "kiln_f2bf(" + v + ")";
    default:
      return v;
  }
}
std::string round_through(DType d, const std::string& v) {
  if (d == DType::Float16) return "kiln_h2f(kiln_f2h(" + v + "))";
  if (d == DType::BFloat16) return "kiln_bf2f(kiln_f2bf(" + v + "))";
  return v;
}
std::string double_bits(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  return "__longlong_as_double(" + std::to_string(static_cast<long long>(bits)) + "LL)";
}
std::string identity(KOp op, DType d) {
  if (op == KOp::ReduceSum) return "static_cast<" + ctype(d) + ">(0)";
  const bool mx = op == KOp::ReduceMax;
  if (flt(d))
    return "static_cast<" + ctype(d) + ">(" + double_bits(mx ? -INFINITY : INFINITY) + ")";
  if (d == DType::Int32) return mx ? "(-2147483647 - 1)" : "2147483647";
  return mx ? "(-9223372036854775807LL - 1)" : "9223372036854775807LL";
}
std::string reducer(KOp op) {
  return op == KOp::ReduceSum ? "KilnSum()" : op == KOp::ReduceMax ? "KilnMax()" : "KilnMin()";
}

// The C++ name of an op id: "Exp" for OpId::Exp.
const char* op_id_name(OpId fn) {
  static const char* const names[] = {
#define KILN_OP(id, name, family, rule) #id,
#include "ops/ops.def"
#undef KILN_OP
  };
  return names[static_cast<int>(fn)];
}

// The functor of a Unary or Binary node, from ops/pointwise_math.h.
std::string functor(const KNode& n) {
  if (n.approximate) return "kiln::pm::GeluTanh{}";
  return std::string(n.op == KOp::Unary ? "kiln::pm::UnaryFn" : "kiln::pm::BinaryFn") +
         "<kiln::OpId::" + op_id_name(n.fn) + ">{}";
}

class Emitter {
 public:
  // cols >= 0 (a row kernel's row length, known when the trace is compiled): only the
  // path the launch takes for it, with as few cached slots per lane as it needs.
  Emitter(const Kernel& k, int64_t cols = -1) : k_(k), l_(args_layout(k)), cols_(cols) {}

  // part: a __device__ function of a combo kernel (cuda_codegen.h), its words at `v`, its
  // block index and count in kiln_block / kiln_blocks.
  std::string emit(const std::string& name, bool part) {
    if (part) {
      words_ = "v";
      block_ = "kiln_block";
      blocks_ = "kiln_blocks";
      line("__device__ __noinline__ void " + name +
           "(const long long* __restrict__ v, const unsigned kiln_block, "
           "const unsigned kiln_blocks) {");
    } else {
      line("extern \"C\" __global__ void __launch_bounds__(256) " + name + "(const KilnArgs<" +
           std::to_string(l_.words()) + "> a) {");
    }
    ++indent_;
    for (int o = 0; o < l_.operands; ++o)
      line(stype(k_.operands[o].dtype) + "* p" + std::to_string(o) + " = reinterpret_cast<" +
           stype(k_.operands[o].dtype) + "*>(" + word(o) + ");");
    line("const long long work = " + word(l_.work_at()) + ";");
    for (size_t i = 0; i < k_.nodes.size(); ++i)
      if (k_.nodes[i].level == Level::Invariant) value(static_cast<int>(i));
    if (k_.kind == Kernel::Kind::Pointwise)
      emit_pointwise();
    else
      emit_rows();
    --indent_;
    line("}");
    return out_;
  }

 private:
  void line(const std::string& s) {
    out_ += std::string(static_cast<size_t>(indent_) * 2, ' ') + s + "\n";
  }
  std::string word(int w) const { return words_ + "[" + std::to_string(w) + "]"; }
  std::string shape(int d) { return word(l_.shape_at() + d); }
  std::string stride(int o, int d) { return word(l_.strides_at() + o * l_.rank + d); }
  std::string tmp() { return "t" + std::to_string(next_++); }

  std::string compute(const KNode& n, const std::string& a, const std::string& b,
                      const std::string& c) {
    switch (n.op) {
      case KOp::Unary:
        return functor(n) + "(" + a + ")";
      case KOp::Binary:
        return functor(n) + "(" + a + ", " + b + ")";
      case KOp::Where:
        return a + " ? " + b + " : " + c;
      default:
        throw std::runtime_error("[jit] no CUDA code for " + node_name(n));
    }
  }

  std::string convert(const std::string& v, DType from, DType to) {
    if (from == to) return v;
    std::string r;
    if (to == DType::Bool)
      r = "(" + v + " != 0)";
    else
      r = "static_cast<" + ctype(to) + ">(" + v + ")";
    return round_through(to, r);
  }

  // The variable holding node i's value in the current scope (emitting it if needed).
  std::string value(int i) {
    const KNode& n = k_.nodes[i];
    std::map<int, std::string>& memo = n.level == Level::Invariant ? invariant_
                                       : (n.level == Level::Row && k_.kind == Kernel::Kind::Row)
                                           ? row_
                                           : memo_;
    auto it = memo.find(i);
    if (it != memo.end()) return it->second;
    auto pin = pinned_.find(i);
    if (pin != pinned_.end()) return pin->second + "[u]";
    std::string e;
    switch (n.op) {
      case KOp::Load:
        e = load_as(n.dtype, element_(n.operand));
        break;
      case KOp::Scalar: {
        const std::string raw = word(l_.scalars_at() + n.slot);
        e = n.dtype == DType::Float64 ? "__longlong_as_double(" + raw + ")"
            : n.dtype == DType::Bool  ? "(" + raw + " != 0)"
                                      : raw;
        break;
      }
      case KOp::Const:
        e = flt(n.dtype)             ? double_bits(n.value)
            : n.dtype == DType::Bool ? std::string(n.value != 0 ? "true" : "false")
                                     : std::to_string(static_cast<long long>(n.value)) + "LL";
        break;
      case KOp::ReduceCount:
        e = "static_cast<double>(" + shape(l_.rank - 1) + ")";
        break;
      case KOp::Random: {  // the eager kernels' draw (ops/philox.h)
        const std::string seed = "static_cast<unsigned long long>(" + value(n.in[0]) + ")";
        const std::string offset = "static_cast<unsigned long long>(" + value(n.in[1]) + ")";
        const std::string index = "static_cast<unsigned long long>(" + index_(n.operand) + ")";
        e = n.fn == OpId::Randn
                ? "kiln::philox::randn_value(" + seed + ", " + offset + ", " + index + ")"
                : "kiln::philox::rand_value(" + seed + ", " + offset + ", " + index + ", " +
                      std::to_string(static_cast<int>(n.value)) + ")";
        break;
      }
      case KOp::Cast:
        e = convert(value(n.in[0]), k_.nodes[n.in[0]].dtype, n.dtype);
        break;
      default: {
        if (is_reduction(n.op)) throw std::runtime_error("[jit] reduction used before its pass");
        const std::string a = value(n.in[0]);
        const std::string b = n.in[1] >= 0 ? value(n.in[1]) : "";
        const std::string c = n.in[2] >= 0 ? value(n.in[2]) : "";
        e = compute(n, a, b, c);
      }
    }
    const std::string v = tmp();
    line("const " + ctype(n.dtype) + " " + v + " = static_cast<" + ctype(n.dtype) + ">(" + e +
         ");");
    memo[i] = v;
    return v;
  }

  // ---- pointwise
  void emit_pointwise() {
    line("const long long step = static_cast<long long>(" + blocks_ + ") * blockDim.x;");
    line("const long long first = static_cast<long long>(" + block_ +
         ") * blockDim.x + threadIdx.x;");
    bool vector = l_.rank == 1, any_contiguous = false;
    for (const KOperand& o : k_.operands) {
      vector = vector && o.inner != InnerStride::Strided;
      any_contiguous = any_contiguous || o.inner == InnerStride::Contiguous;
    }
    if (vector && any_contiguous) {
      std::string aligned;
      for (int o = 0; o < l_.operands; ++o) {
        if (k_.operands[o].inner != InnerStride::Contiguous) continue;
        if (!aligned.empty()) aligned += " | ";
        aligned += "(" + word(o) + " % (4 * sizeof(" + stype(k_.operands[o].dtype) + ")))";
      }
      line("long long tail = 0;");
      line("if ((" + aligned + ") == 0) {");
      ++indent_;
      line("for (long long q = first; q < work / 4; q += step) {");
      ++indent_;
      for (int o = 0; o < l_.operands; ++o) {
        const KOperand& op = k_.operands[o];
        if (op.inner != InnerStride::Contiguous) continue;
        const std::string vt = "KilnVec<" + stype(op.dtype) + ">";
        const std::string s = std::to_string(o);
        if (op.loaded)
          line(vt + " lv" + s + " = *reinterpret_cast<const " + vt + "*>(p" + s + " + 4 * q);");
        if (op.stored) line(vt + " sv" + s + ";");
      }
      line("#pragma unroll");
      line("for (int e = 0; e < 4; ++e) {");
      ++indent_;
      element_ = [&](int o) {
        return k_.operands[o].inner == InnerStride::Contiguous ? "lv" + std::to_string(o) + ".x[e]"
                                                               : "p" + std::to_string(o) + "[0]";
      };
      index_ = [&](int o) {
        return k_.operands[o].inner == InnerStride::Contiguous ? std::string("(4 * q + e)")
                                                               : std::string("0LL");
      };
      memo_.clear();
      for (const KStore& s : k_.stores) {
        const std::string v = value(s.node);
        const std::string dst = k_.operands[s.operand].inner == InnerStride::Contiguous
                                    ? "sv" + std::to_string(s.operand) + ".x[e]"
                                    : "p" + std::to_string(s.operand) + "[0]";
        line(dst + " = " + to_storage(k_.operands[s.operand].dtype, v) + ";");
      }
      --indent_;
      line("}");
      for (int o = 0; o < l_.operands; ++o) {
        const KOperand& op = k_.operands[o];
        if (op.inner != InnerStride::Contiguous || !op.stored) continue;
        const std::string s = std::to_string(o);
        line("*reinterpret_cast<KilnVec<" + stype(op.dtype) + ">*>(p" + s + " + 4 * q) = sv" + s +
             ";");
      }
      --indent_;
      line("}");
      line("tail = work / 4 * 4;");
      --indent_;
      line("}");
      scalar_loop("tail + first");
    } else {
      scalar_loop("first");
    }
  }

  // The element-at-a-time loop from `start`, with offsets from the flat index. Over more
  // than one dim the index is split by division; 64-bit division is a long software
  // sequence on the GPU, so a launch of fewer than 2^31 elements (all but the largest)
  // splits a 32-bit index instead (offsets stay 64-bit).
  void scalar_loop(const std::string& start) {
    if (l_.rank == 1) {
      scalar_loop_of("long long", start);
      return;
    }
    line("if (work <= 0x7fffffffLL) {");
    ++indent_;
    scalar_loop_of("unsigned", start);
    --indent_;
    line("} else {");
    ++indent_;
    scalar_loop_of("long long", start);
    --indent_;
    line("}");
  }
  void scalar_loop_of(const std::string& index_type, const std::string& start) {
    const bool narrow = index_type != "long long";
    auto size_of = [&](int d) {
      return narrow ? "static_cast<unsigned>(" + shape(d) + ")" : shape(d);
    };
    line("for (" + index_type +
         " i = " + (narrow ? "static_cast<unsigned>(" + start + ")" : start) + "; i < " +
         (narrow ? "static_cast<unsigned>(work)" : "work") +
         "; i += " + (narrow ? "static_cast<unsigned>(step)" : "step") + ") {");
    ++indent_;
    std::vector<std::string> off(l_.operands, "0");
    if (l_.rank == 1) {
      for (int o = 0; o < l_.operands; ++o) off[o] = inner_offset(o, "i");
    } else {
      line(index_type + " r = i;");
      for (int d = l_.rank - 1; d >= 0; --d) {
        const std::string idx = "i" + std::to_string(d);
        if (d > 0) {
          line("const " + index_type + " " + idx + "_ = r % " + size_of(d) + ";");
          line("r /= " + size_of(d) + ";");
        } else {
          line("const " + index_type + " " + idx + "_ = r;");
        }
        line("const long long " + idx + " = " + idx + "_;");
        for (int o = 0; o < l_.operands; ++o) {
          const std::string term =
              d == l_.rank - 1 ? inner_offset(o, idx) : idx + " * " + stride(o, d);
          if (term != "0") off[o] = off[o] == "0" ? term : off[o] + " + " + term;
        }
      }
    }
    element_ = [off](int o) { return "p" + std::to_string(o) + "[" + off[o] + "]"; };
    index_ = [off](int o) { return "(" + off[o] + ")"; };
    memo_.clear();
    for (const KStore& s : k_.stores)
      line(element_(s.operand) + " = " + to_storage(k_.operands[s.operand].dtype, value(s.node)) +
           ";");
    memo_.clear();
    --indent_;
    line("}");
  }
  std::string inner_offset(int o, const std::string& idx) {
    switch (k_.operands[o].inner) {
      case InnerStride::Contiguous:
        return idx;
      case InnerStride::Broadcast:
        return "0";
      default:
        return idx + " * " + stride(o, l_.rank - 1);
    }
  }

  // ---- rows: one block per row
  void prepare_rows(int i, std::vector<uint8_t>& seen) {
    if (seen[i]) return;
    seen[i] = 1;
    const KNode& n = k_.nodes[i];
    if (n.level == Level::Row) {
      if (!is_reduction(n.op)) value(i);
      return;
    }
    if (n.level != Level::Full || is_reduction(n.op)) return;
    for (int32_t a : n.in)
      if (a >= 0) prepare_rows(a, seen);
  }

  // One row's passes. Block modes: the block's threads share the row; cached: this
  // thread's elements are j = threadIdx.x + u * blockDim.x for u < kCached, loaded once
  // into registers c<operand>[u]. Warp mode: one warp per row, j = lane + 32 u for
  // u < warp_cached(), reductions by shuffles only.
  enum class RowMode { BlockCached, BlockStreamed, Warp };
  void row_body(RowMode mode) {
    const bool cached = mode != RowMode::BlockStreamed;
    const int slots = mode == RowMode::Warp ? warp_slots() : kCached;
    auto streamed = [&](int o) {
      const KOperand& op = k_.operands[o];
      const std::string b = "b" + std::to_string(o);
      if (op.row_level || op.inner == InnerStride::Broadcast) return b + "[0]";
      return b + "[" + inner_offset(o, "j") + "]";
    };
    auto is_cached = [&](int o) {
      const KOperand& op = k_.operands[o];
      return cached && op.loaded && !op.row_level && op.inner != InnerStride::Broadcast;
    };
    row_.clear();
    if (cached) {  // load every element this thread covers once
      for (int o = 0; o < l_.operands; ++o)
        if (is_cached(o))
          line(stype(k_.operands[o].dtype) + " c" + std::to_string(o) + "[" +
               std::to_string(slots) + "];");
      open_cols_loop(mode);
      for (int o = 0; o < l_.operands; ++o)
        if (is_cached(o)) line("c" + std::to_string(o) + "[u] = " + streamed(o) + ";");
      close_cols_loop();
    }
    element_ = [=](int o) { return is_cached(o) ? "c" + std::to_string(o) + "[u]" : streamed(o); };
    index_ = [=, this](int o) {  // an index-only operand: b<o> is its row's element offset
      const KOperand& op = k_.operands[o];
      const std::string b = "b" + std::to_string(o);
      if (op.row_level || op.inner == InnerStride::Broadcast) return b;
      return "(" + b + " + " + inner_offset(o, "j") + ")";
    };
    pinned_.clear();
    if (cached) pin_draws(slots, mode);
    const int stages = k_.stages();
    for (int s = 1; s <= stages; ++s) {
      std::vector<int> reds;
      for (size_t i = 0; i < k_.nodes.size(); ++i)
        if (is_reduction(k_.nodes[i].op) && k_.nodes[i].stage == s)
          reds.push_back(static_cast<int>(i));
      if (reds.empty()) continue;
      std::vector<uint8_t> seen(k_.nodes.size(), 0);
      for (int i : reds) prepare_rows(k_.nodes[i].in[0], seen);
      std::vector<std::string> acc;
      for (int i : reds) {
        acc.push_back(tmp());
        line(ctype(k_.nodes[i].dtype) + " " + acc.back() + " = " +
             identity(k_.nodes[i].op, k_.nodes[i].dtype) + ";");
      }
      open_cols_loop(mode);
      memo_.clear();
      for (size_t q = 0; q < reds.size(); ++q) {
        const KNode& n = k_.nodes[reds[q]];
        line(acc[q] + " = " + reducer(n.op) + "(" + acc[q] + ", " + value(n.in[0]) + ");");
      }
      memo_.clear();
      close_cols_loop();
      for (size_t q = 0; q < reds.size(); ++q) {
        const KNode& n = k_.nodes[reds[q]];
        line(acc[q] + (mode == RowMode::Warp ? " = kiln_warp_reduce(" : " = kiln_block_reduce(") +
             acc[q] + ", " + reducer(n.op) + (mode == RowMode::Warp ? ");" : ", smem);"));
        row_[reds[q]] = acc[q];
      }
    }
    std::vector<KStore> full;
    for (const KStore& st : k_.stores) {
      if (!k_.operands[st.operand].row_level) {
        full.push_back(st);
        continue;
      }
      std::vector<uint8_t> seen(k_.nodes.size(), 0);
      prepare_rows(st.node, seen);
      line("if (threadIdx.x == 0) {");
      ++indent_;
      line("const long long j = 0;");
      line("const int u = 0;");
      memo_.clear();
      line(element_(st.operand) + " = " +
           to_storage(k_.operands[st.operand].dtype, value(st.node)) + ";");
      memo_.clear();
      close_cols_loop();
    }
    if (!full.empty()) {
      std::vector<uint8_t> seen(k_.nodes.size(), 0);
      for (const KStore& st : full) prepare_rows(st.node, seen);
      open_cols_loop(mode);
      memo_.clear();
      // Stores go to memory, never to the register copy of an operand the kernel also
      // reads (an in-place op fused into a row kernel: `v.add_(v)` next to a var(...)).
      for (const KStore& st : full)
        line(streamed(st.operand) + " = " +
             to_storage(k_.operands[st.operand].dtype, value(st.node)) + ";");
      memo_.clear();
      close_cols_loop();
    }
  }
  // Every pass of a row kernel recomputes its element values from the operands; a
  // random draw (Philox, the costly one: dropout before a layer_norm is drawn in the
  // mean, the variance and the store pass) is drawn once into registers r<node>[u].
  void pin_draws(int slots, RowMode mode) {
    std::vector<int> draws;
    for (size_t i = 0; i < k_.nodes.size(); ++i)
      if (k_.nodes[i].op == KOp::Random && k_.nodes[i].level == Level::Full)
        draws.push_back(static_cast<int>(i));
    if (draws.empty()) return;
    for (int i : draws)
      line(ctype(k_.nodes[i].dtype) + " r" + std::to_string(i) + "[" + std::to_string(slots) +
           "];");
    open_cols_loop(mode);
    memo_.clear();
    for (int i : draws) line("r" + std::to_string(i) + "[u] = " + value(i) + ";");
    memo_.clear();
    close_cols_loop();
    for (int i : draws) pinned_[i] = "r" + std::to_string(i);
  }
  void open_cols_loop(RowMode mode) {
    if (mode == RowMode::Warp) {
      line("#pragma unroll");
      line("for (int u = 0; u < " + std::to_string(warp_slots()) + "; ++u) {");
      ++indent_;
      line("const long long j = threadIdx.x + 32LL * u;");
      line("if (j >= cols) break;");
    } else if (mode == RowMode::BlockCached) {
      line("#pragma unroll");
      line("for (int u = 0; u < " + std::to_string(kCached) + "; ++u) {");
      ++indent_;
      line("const long long j = threadIdx.x + static_cast<long long>(u) * blockDim.x;");
      line("if (j >= cols) break;");
    } else {
      line("for (long long j = threadIdx.x; j < cols; j += blockDim.x) {");
      ++indent_;
    }
  }
  void close_cols_loop() {
    --indent_;
    line("}");
  }

  // Row bases b<operand> from the row index over the outer dims.
  void row_bases() {
    std::vector<std::string> base(l_.operands, "0");
    if (l_.rank > 1) {
      line("long long r = row;");
      for (int d = l_.rank - 2; d >= 0; --d) {
        const std::string idx = "i" + std::to_string(d);
        if (d > 0) {
          line("const long long " + idx + " = r % " + shape(d) + ";");
          line("r /= " + shape(d) + ";");
        } else {
          line("const long long " + idx + " = r;");
        }
        for (int o = 0; o < l_.operands; ++o)
          base[o] = (base[o] == "0" ? "" : base[o] + " + ") + idx + " * " + stride(o, d);
      }
    }
    for (int o = 0; o < l_.operands; ++o)
      line(k_.operands[o].index_only
               ? "const long long b" + std::to_string(o) + " = " + base[o] + ";"
               : stype(k_.operands[o].dtype) + "* b" + std::to_string(o) + " = p" +
                     std::to_string(o) + " + (" + base[o] + ");");
  }

  // Cached elements per lane in warp mode: enough for a known row length (rounded up to
  // a power of two, so that near lengths share a kernel), else the most there is room for.
  int warp_slots() const {
    const int most = warp_cached_elements(k_);
    if (cols_ < 0) return most;
    int slots = 1;
    while (slots < most && 32LL * slots < cols_) slots *= 2;
    return slots;
  }

  void warp_rows() {
    line("for (long long row = static_cast<long long>(" + block_ +
         ") * blockDim.y + threadIdx.y; row < work; row += static_cast<long long>(" + blocks_ +
         ") * blockDim.y) {");
    ++indent_;
    row_bases();
    row_body(RowMode::Warp);
    --indent_;
    line("}");
  }

  // One block per row. Rows of up to kCached elements per thread keep the loaded values
  // in registers (one read of global memory per element); longer rows stream every pass.
  void block_rows() {
    line("for (long long row = " + block_ + "; row < work; row += " + blocks_ + ") {");
    ++indent_;
    row_bases();
    if (cols_ >= 0) {  // the launch's block (cuda_backend.cpp) holds a row of <= 2048
      row_body(cols_ <= kCached * 256LL ? RowMode::BlockCached : RowMode::BlockStreamed);
    } else {
      line("if (cols <= " + std::to_string(kCached) + "LL * blockDim.x) {");
      ++indent_;
      row_body(RowMode::BlockCached);
      --indent_;
      line("} else {");
      ++indent_;
      row_body(RowMode::BlockStreamed);
      --indent_;
      line("}");
    }
    // The next row reuses smem: nobody may still be reading this row's partials.
    if (k_.stages() > 0) line("__syncthreads();");
    --indent_;
    line("}");
  }

  // Warp mode when blockDim.y > 1 (the host launches 32 x rows-per-block threads for rows
  // of at most warp_row_limit() elements); else one block per row. With the row length
  // known, only its path: each path unrolls every op over the cached slots, so the three
  // together took NVRTC three times as long (a GPT step's row kernels with dropout's
  // Philox draws: 0.7-2 s each, docs/results/nvrtc_program_balance.txt).
  void emit_rows() {
    line("__shared__ unsigned long long smem[32];");
    line("const long long cols = " + shape(l_.rank - 1) + ";");
    if (cols_ >= 0 && cols_ <= warp_row_limit(k_)) {
      warp_rows();
      return;
    }
    if (cols_ >= 0) {
      block_rows();
      return;
    }
    line("if (blockDim.y > 1) {");
    ++indent_;
    warp_rows();
    line("return;");
    --indent_;
    line("}");
    block_rows();
  }

  static constexpr int kCached = 8;  // elements per thread a row keeps in registers
  const Kernel& k_;
  ArgsLayout l_;
  int64_t cols_ = -1;
  std::string out_;
  int indent_ = 0;
  int next_ = 0;
  std::function<std::string(int)> element_;
  std::function<std::string(int)> index_;  // an index-only operand's element index
  std::map<int, std::string> invariant_, row_, memo_;
  std::map<int, std::string> pinned_;  // node -> register array of its per-element values
  std::string words_ = "a.v", block_ = "blockIdx.x", blocks_ = "gridDim.x";
};

}  // namespace

int warp_cached_elements(const Kernel& kernel) {
  int n = 0;
  for (const KOperand& op : kernel.operands)
    n += op.loaded && !op.row_level && op.inner != InnerStride::Broadcast;
  return n <= 2 ? 32 : 16;  // registers: at most ~64 cached values per thread
}

int64_t warp_row_limit(const Kernel& kernel) { return 32LL * warp_cached_elements(kernel); }

std::string emit_cuda_kernel(const Kernel& kernel, const std::string& name, int64_t cols) {
  return Emitter(kernel, kernel.kind == Kernel::Kind::Pointwise ? -1 : cols).emit(name, false);
}

std::string emit_cuda_part(const Kernel& kernel, const std::string& name) {
  return Emitter(kernel).emit(name, true);
}

}  // namespace kiln::jit::cuda_backend
