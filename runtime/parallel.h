// parallel_for: splits [begin, end) into chunks of at least `grain` iterations and runs
// them on a persistent pool of worker threads (KILN_NUM_THREADS, default: the cores).
// Small ranges run inline on the calling thread. Nested calls run inline. Exceptions
// thrown by the body are rethrown on the caller. An idle worker spins for
// KILN_POOL_SPIN_US (default 200 us) before it sleeps, so that back-to-back parallel ops
// start without an OS wake-up.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln {

int num_threads();
void set_num_threads(int n);

// While one is open (on any thread), idle workers sleep at once instead of spinning: for
// work off the pool that needs the cores (the tracer's background compile thread).
class SpinHold {
 public:
  SpinHold();
  ~SpinHold();
  SpinHold(const SpinHold&) = delete;
  SpinHold& operator=(const SpinHold&) = delete;
};

void parallel_for_impl(int64_t begin, int64_t end, int64_t grain,
                       const std::function<void(int64_t, int64_t)>& body);

template <class F>
inline void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& body) {
  if (end - begin <= grain || num_threads() == 1) {
    if (end > begin) body(begin, end);
    return;
  }
  parallel_for_impl(begin, end, grain, std::function<void(int64_t, int64_t)>(body));
}

}  // namespace kiln
