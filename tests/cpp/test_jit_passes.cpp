// The JIT's named passes (jit/pipeline.h) switched off by name, as KILN_JIT_DISABLE does:
// with any one of them off (or all), the LLVM-fused results still equal eager results
// for pointwise chains, row reductions, softmax/layer_norm, common subexpressions, dead
// values, in-place updates, views and matmul + bias; `fuse` off gives one kernel per op;
// `cse` and `dce` off leave the work they would remove in the plan, `simplify` off the
// kernel IR as built; bad names are refused with the names that may be used.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "jit/pass_set.h"
#include "jit/pipeline.h"
#include "ops/api.h"
#include "tracer_util.h"

using namespace kt;
using kiln::Tensor;
namespace tr = kiln::tracer;

namespace {

// Only regions trace (automatic tracing off): each report holds the traces a test made.
class JitPasses : public TracerTest {
 protected:
  void SetUp() override {
    TracerTest::SetUp();
#ifndef KILN_WITH_LLVM
    GTEST_SKIP() << "built without LLVM";
#endif
    tr::config().jit = true;
    tr::set_enabled(false);
  }
};

// Runs f four times in a region (two warmups, the compile, replays); checks that one
// trace compiled with the LLVM backend, replayed, and fell back nowhere. Returns the last
// result and the trace's report.
Tensor traced(const std::function<Tensor()>& f, tr::TraceReport* report = nullptr) {
  Tensor out;
  for (int i = 0; i < 4; ++i) {
    tr::Region region;
    out = f();
  }
  const tr::ExplainReport r = tr::explain();
  EXPECT_EQ(r.traces.size(), 1u) << r.table();
  if (r.traces.empty()) return out;
  const tr::TraceReport& t = r.traces[0];
  EXPECT_EQ(t.backend, "llvm") << r.table();
  EXPECT_GE(t.replays, 1) << r.table();
  for (const std::string& n : t.notes) EXPECT_EQ(n.find("fell back"), std::string::npos) << n;
  if (report) *report = t;
  return out;
}

bool has_note(const tr::TraceReport& t, const std::string& part) {
  for (const std::string& n : t.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

struct Workload {
  const char* name;
  std::function<Tensor()> f;
  Tol tol;
};

// Programs that give every pass something to do.
std::vector<Workload> workloads() {
  Tensor x = random_tensor({24, 40}), y = random_tensor({24, 40}), b = random_tensor({40});
  Tensor w = random_tensor({40}), bias = random_tensor({40});
  Tensor m = random_tensor({40, 16}), mb = random_tensor({16});
  const Tol tol{2e-5, 2e-5};
  return {
      {"pointwise chain with broadcasting",
       [=] { return kiln::sigmoid(x * 1.5 + b) - kiln::tanh(y) / 3.0; }, tol},
      {"common subexpressions and dead values",
       [=] {
         Tensor a = kiln::exp(x * 0.5), a2 = kiln::exp(x * 0.5);
         Tensor unused = kiln::sin(y) * 2.0;  // dropped by dce
         return a + a2 * kiln::abs(y + 1.0);
       },
       tol},
      {"row reductions with producers and consumers",
       [=] {
         Tensor mu = kiln::mean(x, {1}, true);
         Tensor d = x - mu;
         return d / kiln::sqrt(kiln::mean(d * d, {1}, true) + 1e-5) + kiln::amax(y, {1}, true);
       },
       Tol{1e-5, 1e-5}},
      {"softmax and layer_norm",
       [=] { return kiln::softmax(x * 0.25, -1) + kiln::layer_norm(y + 1.0, {40}, w, bias); },
       Tol{1e-5, 1e-5}},
      {"gelu, clamp and a cast",
       [=] {
         return kiln::clamp(kiln::gelu(x, true) * 2.0 + kiln::gelu(y, false), -1.0, 1.5)
             .to(DType::Float64);
       },
       Tol{1e-6, 1e-6}},
      {"views inside the trace",
       [=] {
         return kiln::relu(x.t() * 2.0).t() + y.reshape({40, 24}).t();
       },
       tol},
      {"matmul + bias + relu", [=] { return kiln::relu(kiln::matmul(x, m) + mb) * 0.5; },
       Tol{1e-5, 1e-5}},
  };
}

}  // namespace

class JitPassOff : public JitPasses, public ::testing::WithParamInterface<std::string> {};

// The pass names a test parameter stands for ("all": every pass that can be off).
std::vector<std::string> passes_off(const std::string& param) {
  if (param == "all") return {"cse", "dce", "fuse", "attention", "epilogue", "simplify"};
  return {param};
}

TEST_P(JitPassOff, FusedResultsEqualEager) {
  for (const Workload& w : workloads()) {
    SCOPED_TRACE(w.name);
    tr::reset();
    tr::config().jit_disable = passes_off(GetParam());
    tr::TraceReport report;
    const Tensor fused = traced(w.f, &report);
    EXPECT_TRUE(has_note(report, "passes switched off (KILN_JIT_DISABLE): "))
        << tr::explain().table();
    EXPECT_EQ(fused.dtype(), eager(w.f).dtype());
    EXPECT_TRUE(all_close(fused, read(eager(w.f)), w.tol)) << tr::explain().table();
  }
}

TEST_P(JitPassOff, InPlaceUpdatesEqualEager) {
  tr::config().jit_disable = passes_off(GetParam());
  Tensor x = random_tensor({12, 9});
  Tensor acc = kiln::zeros({12, 9});
  Tensor ref = kiln::zeros({12, 9});
  for (int i = 0; i < 8; ++i) {
    {
      tr::Region region;
      acc.mul_(0.5).add_(kiln::tanh(x) * 0.5);
    }
    eager([&] { return ref.mul_(0.5).add_(kiln::tanh(x) * 0.5); });
  }
  EXPECT_TRUE(all_close(acc, read(ref), Tol{1e-5, 1e-6}));
  const tr::ExplainReport r = tr::explain();
  ASSERT_EQ(r.traces.size(), 1u) << r.table();
  EXPECT_EQ(r.traces[0].backend, "llvm") << r.table();
  EXPECT_GE(r.traces[0].replays, 1) << r.table();
}

INSTANTIATE_TEST_SUITE_P(JitPasses, JitPassOff,
                         ::testing::Values("cse", "dce", "fuse", "attention", "epilogue",
                                           "simplify", "all"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_F(JitPasses, FuseOffIsOneKernelPerOp) {
  Tensor x = random_tensor({32, 48}), y = random_tensor({32, 48});
  const std::vector<std::pair<const char*, std::function<Tensor()>>> cases = {
      {"pointwise", [&] { return kiln::relu(x * 2.0 + y) - x / 3.0; }},
      {"row", [&] { return kiln::sum(kiln::exp(x * 2.0 - 1.0), {1}, true) / 4.0; }},
      {"softmax", [&] { return kiln::softmax(x + y, -1) * 3.0; }},
  };
  for (const auto& [name, f] : cases) {
    SCOPED_TRACE(name);
    tr::reset();
    tr::TraceReport fused;
    const Tensor on = traced(f, &fused);
    EXPECT_EQ(fused.kernels, 1) << tr::explain().table();
    EXPECT_FALSE(has_note(fused, "KILN_JIT_DISABLE"));

    tr::reset();
    tr::config().jit_disable = {"fuse"};
    tr::TraceReport unfused;
    const Tensor off = traced(f, &unfused);
    tr::config().jit_disable.clear();
    EXPECT_GE(unfused.ops.size(), 3u);
    EXPECT_EQ(unfused.kernels, static_cast<int>(unfused.ops.size())) << tr::explain().table();
    EXPECT_TRUE(has_note(unfused, "passes switched off (KILN_JIT_DISABLE): fuse"));
    EXPECT_TRUE(all_close(off, read(eager(f)), Tol{1e-5, 1e-5}));
    EXPECT_TRUE(all_close(on, read(eager(f)), Tol{1e-5, 1e-5}));
  }
}

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The fusion.txt KILN_DEBUG_DIR writes for f's one trace: the plan and the kernels' IR.
std::string fusion_text(const std::function<Tensor()>& f) {
  const std::string dir =
      std::filesystem::temp_directory_path().string() + "/kiln-passes-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  setenv("KILN_DEBUG_DIR", dir.c_str(), 1);
  tr::reset();
  traced(f);
  unsetenv("KILN_DEBUG_DIR");
  std::string text;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    text += slurp(e.path().string() + "/fusion.txt");
  std::filesystem::remove_all(dir);
  return text;
}

// Its "removed: ..." line.
std::string removed_line(const std::function<Tensor()>& f) {
  const std::string text = fusion_text(f);
  const size_t at = text.find("removed: ");
  return at == std::string::npos ? "(none)" : text.substr(at, text.find('\n', at) - at);
}

}  // namespace

TEST_F(JitPasses, CseAndDceOffKeepWhatTheyWouldRemove) {
  Tensor x = random_tensor({16, 20}), y = random_tensor({16, 20});
  auto f = [&] {
    Tensor a = kiln::exp(x), a2 = kiln::exp(x);  // one is merged by cse
    Tensor unused = kiln::sin(y);                // dropped by dce
    return a * a2 + y;
  };
  EXPECT_EQ(removed_line(f), "removed: 1 dead, 1 common subexpressions");
  tr::config().jit_disable = {"cse"};
  EXPECT_EQ(removed_line(f), "removed: 1 dead, 0 common subexpressions");
  tr::config().jit_disable = {"dce"};
  EXPECT_EQ(removed_line(f), "removed: 0 dead, 1 common subexpressions");
  tr::config().jit_disable = {"cse", "dce"};
  EXPECT_EQ(removed_line(f), "(none)");
}

TEST_F(JitPasses, SimplifyOffKeepsTheKernelIrAsBuilt) {
  // With dce off, a dead value stays in its kernel group; simplify drops its node from the
  // kernel IR, and with simplify off too the node stays.
  Tensor x = random_tensor({16, 20}), y = random_tensor({16, 20});
  auto f = [&] {
    Tensor unused = kiln::sin(y);
    return kiln::exp(x) * y;
  };
  auto kernels = [](const std::string& text) { return text.substr(text.find("== kernels")); };
  tr::config().jit_disable = {"dce"};
  const std::string simplified = kernels(fusion_text(f));
  tr::config().jit_disable = {"dce", "simplify"};
  const std::string as_built = kernels(fusion_text(f));
  EXPECT_EQ(simplified.find("sin"), std::string::npos) << simplified;
  EXPECT_NE(as_built.find("sin"), std::string::npos) << as_built;
}

TEST(JitPassNames, BadNamesAreRefusedAndIgnored) {
  using kiln::jit::Pass;
  const kiln::jit::PassSet set = kiln::jit::parse_pass_names({"fuse", "simplify"});
  EXPECT_TRUE(set.has(Pass::Fuse));
  EXPECT_TRUE(set.has(Pass::Simplify));
  EXPECT_FALSE(set.has(Pass::Cse));
  EXPECT_EQ(set.str(), "fuse, simplify");
  try {
    kiln::jit::parse_pass_names({"fuse", "fusion"});
    ADD_FAILURE() << "an unknown pass name was accepted";
  } catch (const kiln::ValueError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("KILN_JIT_DISABLE"), std::string::npos) << what;
    EXPECT_NE(what.find("'fusion'"), std::string::npos) << what;
    EXPECT_NE(what.find("cse, dce, fuse, attention, epilogue, simplify"), std::string::npos)
        << what;
  }
  // `store` is a pass of the pipeline but cannot be switched off: refused with that reason.
  EXPECT_STREQ(kiln::jit::pass_name(Pass::Store), "store");
  try {
    kiln::jit::parse_pass_names({"store"});
    ADD_FAILURE() << "the store pass was switched off";
  } catch (const kiln::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("pass 'store' cannot be switched off"), std::string::npos)
        << e.what();
  }
  // The JIT's old word for it is no pass name any more.
  EXPECT_THROW(kiln::jit::parse_pass_names({"materialize"}), kiln::ValueError);
  // Through the config, a bad list is reported and ignored: every pass stays on.
  const std::vector<std::string> saved = tr::config().jit_disable;
  tr::config().jit_disable = {"fuse", "nonsense"};
  EXPECT_TRUE(kiln::jit::disabled_passes().empty());
  tr::config().jit_disable = {"dce"};
  EXPECT_TRUE(kiln::jit::disabled_passes().has(Pass::Dce));
  tr::config().jit_disable = saved;
}
