// The JIT's named passes (jit/pipeline.h runs them in order) and a set of them: the
// passes KILN_JIT_DISABLE switches off for bisecting, plus a target pass that failed for
// one trace. `store` is named too but cannot be switched off (the replay needs to
// know which values exist); parse_pass_names refuses it like an unknown name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::jit {

enum class Pass : uint8_t { Cse, Dce, Fuse, Store, Attention, Epilogue, Simplify };
inline constexpr int kPassCount = 7;

// "cse", "dce", "fuse", "store", "attention", "epilogue", "simplify".
const char* pass_name(Pass pass);

class PassSet {
 public:
  bool has(Pass p) const { return (bits_ >> static_cast<unsigned>(p)) & 1u; }
  void add(Pass p) { bits_ |= 1u << static_cast<unsigned>(p); }
  bool empty() const { return bits_ == 0; }
  std::string str() const;  // "cse, fuse" (pipeline order)

 private:
  unsigned bits_ = 0;
};

// The passes named in `names` (KILN_JIT_DISABLE's comma list, as tracer::config() holds
// it). Throws ValueError naming the variable, the name and the names that may be used.
PassSet parse_pass_names(const std::vector<std::string>& names);

}  // namespace kiln::jit
