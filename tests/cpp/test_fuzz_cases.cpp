// The differential fuzzer's regression tests: every saved case under tests/fuzz_cases/
// (a shrunk program that once made a leg disagree with eager) must now agree in every
// leg; the generator reaches every row of the op registry; the text format and the
// shrinker do what the fuzzer relies on.
#include <gtest/gtest.h>

#include "../fuzz/differential.h"
#include "../fuzz/fuzz_case.h"
#include "../fuzz/generator.h"
#include "../fuzz/listing.h"
#include "../fuzz/program_text.h"
#include "../fuzz/shrink.h"

namespace kfuzz {
namespace {

class SavedFuzzCase : public ::testing::TestWithParam<std::string> {};

TEST_P(SavedFuzzCase, AllLegsAgreeWithEager) {
  const Program p = from_text(read_file(GetParam()));
  ASSERT_FALSE(p.steps.empty()) << GetParam();
  ASSERT_TRUE(runs_in_all_worlds(p)) << GetParam() << " no longer runs eagerly";
  const std::optional<Mismatch> m =
      find_mismatch(p, legs_for(kt::have_gpu() && p.device == "cuda"));
  EXPECT_FALSE(m.has_value()) << GetParam() << ": " << m->leg
                              << " disagrees with cpu/eager: " << m->detail << "\n"
                              << cpp_listing(p);
}

std::vector<std::string> saved_cases() {
  std::vector<std::string> files = case_files(KILN_FUZZ_CASES_DIR);
  return files;
}

std::string case_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string stem = info.param.substr(info.param.find_last_of('/') + 1);
  stem = stem.substr(0, stem.find('.'));
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return stem;
}

INSTANTIATE_TEST_SUITE_P(Cases, SavedFuzzCase, ::testing::ValuesIn(saved_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SavedFuzzCase);

TEST(FuzzGenerator, ReachesEveryRegistryOp) {
  std::vector<int> uses(kiln::kNumOps, 0);
  const uint64_t base = kt::run_seed();
  for (uint64_t i = 0; i < 150; ++i) {
    const Program p = generate(base + i);
    for (const Step& s : p.steps) ++uses[static_cast<size_t>(s.op)];
  }
  for (int op = 0; op < kiln::kNumOps; ++op) {
    // Not generated yet: the fused attention ops (3-6 tensor arguments with a packed
    // layout), nor the fused LSTM ops (the same, one per nn.LSTM layer);
    // tests/python/test_attention.py, test_rnn.py and the gradcheck cases cover them.
    // Nor the collectives (a process group; tests/cpp/test_collective_op.cpp).
    const kiln::OpFamily family = kiln::op_info(static_cast<OpId>(op)).family;
    // Nor the CPU's max-pool gradient (tests/python/test_pool_backward.py).
    if (family == kiln::OpFamily::Attention || family == kiln::OpFamily::Recurrent ||
        family == kiln::OpFamily::Collective || op == static_cast<int>(OpId::MaxPool2dBackward))
      continue;
    EXPECT_GT(uses[static_cast<size_t>(op)], 0)
        << "no generated step calls " << kiln::op_name(static_cast<OpId>(op));
  }
}

TEST(FuzzGenerator, ProgramsRunInAllWorldsAndSurviveTheTextFormat) {
  const uint64_t base = kt::run_seed() ^ 0x5eed;
  for (uint64_t i = 0; i < 20; ++i) {
    const Program p = generate(base + i);
    ASSERT_TRUE(runs_in_all_worlds(p)) << "seed " << p.seed << "\n" << cpp_listing(p);
    const Program back = from_text(to_text(p));
    EXPECT_EQ(to_text(back), to_text(p));
    EXPECT_EQ(cpp_listing(back), cpp_listing(p));
  }
}

TEST(FuzzShrinker, KeepsOnlyWhatTheFailureNeeds) {
  // A stand-in bug: "fails" while the program still calls matmul. The shrunk program
  // must still fail, run, and be 1-minimal: dropping any one step (with the steps that
  // use its value) loses the failure; no input is left unread.
  Program p;
  for (uint64_t seed = kt::run_seed();; ++seed) {
    p = generate(seed);
    bool has = false;
    for (const Step& s : p.steps) has |= s.op == OpId::Matmul;
    if (has && p.steps.size() >= 6) break;
  }
  auto fails = [](const Program& c) {
    for (const Step& s : c.steps)
      if (s.op == OpId::Matmul) return true;
    return false;
  };
  const Program small = shrink(p, fails, {400, 60.0});
  ASSERT_TRUE(fails(small));
  EXPECT_TRUE(runs_in_all_worlds(small));
  EXPECT_LT(small.steps.size(), p.steps.size()) << cpp_listing(p);
  for (size_t i = 0; i < small.steps.size(); ++i) {
    std::vector<bool> drop(small.steps.size(), false);
    drop[i] = true;
    const Program fewer = remove_steps(small, drop);
    EXPECT_FALSE(runs_in_all_worlds(fewer) && fails(fewer)) << "step " << i << " is not needed:\n"
                                                            << cpp_listing(small);
  }
  EXPECT_EQ(remove_unused_inputs(small).inputs.size(), small.inputs.size());
}

}  // namespace
}  // namespace kfuzz
