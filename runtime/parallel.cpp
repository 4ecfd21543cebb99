#include "runtime/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln {
namespace {

thread_local bool tls_in_parallel = false;

class ThreadPool {
 public:
  explicit ThreadPool(int n) { resize(n); }
  ~ThreadPool() { stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    stop();
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    stopping_ = false;
    uint64_t start;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      start = generation_;
    }
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i, start] { worker_loop(i, start); });
  }

  // Runs task(worker_index) on every thread (the caller is index 0) and waits.
  void run(const std::function<void(int)>& task) {
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      pending_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    cv_.notify_all();
    task(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }
  void worker_loop(int index, uint64_t seen) {
    for (;;) {
      const std::function<void(int)>* task = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stopping_) return;
        task = task_;
      }
      if (task) (*task)(index);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_, run_mutex_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* task_ = nullptr;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

int default_threads() {
  if (const char* env = std::getenv("KILN_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& pool() {
  static ThreadPool p(default_threads());
  return p;
}

}  // namespace

int num_threads() { return pool().size(); }
void set_num_threads(int n) { pool().resize(std::max(1, n)); }

void parallel_for_impl(int64_t begin, int64_t end, int64_t grain,
                       const std::function<void(int64_t, int64_t)>& body) {
  if (tls_in_parallel) {
    body(begin, end);
    return;
  }
  const int64_t total = end - begin;
  const int64_t threads =
      std::min<int64_t>(num_threads(), (total + grain - 1) / std::max<int64_t>(grain, 1));
  const int64_t chunk = (total + threads - 1) / threads;
  std::exception_ptr error;
  std::mutex error_mutex;
  pool().run([&](int index) {
    if (index >= threads) return;
    int64_t lo = begin + index * chunk, hi = std::min(end, lo + chunk);
    if (lo >= hi) return;
    tls_in_parallel = true;
    try {
      body(lo, hi);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
    tls_in_parallel = false;
  });
  if (error) std::rethrow_exception(error);
}

}  // namespace kiln
