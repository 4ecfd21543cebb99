// runtime/parallel.h: parallel_for covers every index exactly once whichever thread
// claims a chunk (the caller takes the chunks of workers that have not woken up), with
// more threads than cores, back-to-back calls and nested calls; the first exception of a
// body reaches the caller and the pool keeps working after it.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "runtime/parallel.h"

namespace {

class ParallelFor : public ::testing::Test {
 protected:
  void SetUp() override { threads_ = kiln::num_threads(); }
  void TearDown() override { kiln::set_num_threads(threads_); }
  int threads_ = 1;
};

TEST_F(ParallelFor, EveryIndexOnceAcrossThreadCountsAndBackToBackCalls) {
  for (int threads : {2, 3, 8}) {
    kiln::set_num_threads(threads);
    for (int64_t n : {2, 7, 64, 1000, 4099}) {
      for (int round = 0; round < 50; ++round) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        kiln::parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
          ASSERT_LT(lo, hi);
          for (int64_t i = lo; i < hi; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
              << "index " << i << " of " << n << ", " << threads << " threads";
      }
    }
  }
}

TEST_F(ParallelFor, NestedCallsRunInlineAndCoverTheRange) {
  kiln::set_num_threads(4);
  std::atomic<int64_t> total{0};
  kiln::parallel_for(0, 8, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      kiln::parallel_for(0, 100, 1, [&](int64_t a, int64_t b) { total.fetch_add(b - a); });
  });
  EXPECT_EQ(total.load(), 800);
}

TEST_F(ParallelFor, AnExceptionReachesTheCallerAndThePoolKeepsWorking) {
  kiln::set_num_threads(3);
  EXPECT_THROW(kiln::parallel_for(0, 300, 1,
                                  [&](int64_t lo, int64_t) {
                                    if (lo >= 100) throw std::runtime_error("chunk failed");
                                  }),
               std::runtime_error);
  std::atomic<int64_t> covered{0};
  kiln::parallel_for(0, 300, 1, [&](int64_t lo, int64_t hi) { covered.fetch_add(hi - lo); });
  EXPECT_EQ(covered.load(), 300);
}

}  // namespace
