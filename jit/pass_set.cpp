#include "jit/pass_set.h"

#include "runtime/error.h"

namespace kiln::jit {
namespace {

constexpr const char* kNames[kPassCount] = {"cse",       "dce",      "fuse",    "store",
                                            "attention", "epilogue", "simplify"};

}  // namespace

const char* pass_name(Pass pass) { return kNames[static_cast<int>(pass)]; }

std::string PassSet::str() const {
  std::string out;
  for (int i = 0; i < kPassCount; ++i)
    if (has(static_cast<Pass>(i))) out += (out.empty() ? "" : ", ") + std::string(kNames[i]);
  return out;
}

PassSet parse_pass_names(const std::vector<std::string>& names) {
  PassSet set;
  for (const std::string& name : names) {
    int found = -1;
    for (int i = 0; i < kPassCount; ++i)
      if (name == kNames[i] && static_cast<Pass>(i) != Pass::Store) found = i;
    if (found < 0)
      throw ValueError("[KILN_JIT_DISABLE] " +
                       std::string(name == pass_name(Pass::Store)
                                       ? "pass 'store' cannot be switched off"
                                       : "unknown pass '" + name + "'") +
                       " (expected a comma list of cse, dce, fuse, attention, epilogue, simplify)");
    set.add(static_cast<Pass>(found));
  }
  return set;
}

}  // namespace kiln::jit
