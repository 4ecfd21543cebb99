#include "runtime/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln {
namespace {

thread_local bool tls_in_parallel = false;
std::atomic<int> g_spin_holds{0};  // SpinHold scopes open (any thread)

class ThreadPool {
 public:
  explicit ThreadPool(int n) : spin_(spin_time()) { resize(n); }
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

  // Runs task(worker_index) on the caller (index 0) and on every worker that wakes up
  // before the caller has finished its own call, and waits for those only: a worker
  // that has not been scheduled by then (a busy machine: other processes hold the
  // cores) is not waited for, and skips the task when it wakes. task is expected to
  // share its work dynamically (parallel_for_impl: chunks claimed from a counter), so
  // the caller does what no worker came for.
  void run(const std::function<void(int)>& task) {
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      ++generation_;
      published_.store(generation_, std::memory_order_release);
    }
    cv_.notify_all();
    task(0);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = nullptr;  // late workers skip it
    }
    // The workers that came share the chunks evenly with the caller and finish about when
    // it does: wait for them spinning (for at most the workers' own spin time) rather than
    // sleeping, which costs an OS wake-up (no spin while a SpinHold is open). On this project's
    // 2-core VMs that wake-up took 10-20 us, longer than a 64K-element pointwise op (relu: 6.5 us
    // on one thread, 19.6 us on two before this spin, 5.7 after).
    const auto spin_until = std::chrono::steady_clock::now() + spin_;
    while (active_.load(std::memory_order_acquire) != 0 &&
           g_spin_holds.load(std::memory_order_relaxed) == 0 &&
           std::chrono::steady_clock::now() < spin_until) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [this] { return active_.load(std::memory_order_acquire) == 0; });
  }

 private:
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      ++generation_;
      published_.store(generation_, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }
  void worker_loop(int index, uint64_t seen) {
    for (;;) {
      const std::function<void(int)>* task = nullptr;
      // A short spin before sleeping: a task that comes within spin_ (the next kernel of
      // a replay, the next op) starts at once instead of after a wake-up through the OS,
      // which on this project's 2-core VMs took long enough that the caller had done
      // most chunks alone (bench/models on the CPU, traced: GPT 53 -> 35 ms a step, CNN
      // 33 -> 26 ms with 200 us).
      // No spin while a SpinHold is open: a background compile gets the core.
      const auto spin_until = std::chrono::steady_clock::now() + spin_;
      while (published_.load(std::memory_order_acquire) == seen &&
             g_spin_holds.load(std::memory_order_relaxed) == 0 &&
             std::chrono::steady_clock::now() < spin_until) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stopping_) return;
        task = task_;
        if (!task) continue;  // the caller finished without us
        active_.fetch_add(1, std::memory_order_relaxed);
      }
      (*task)(index);
      if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // Taken between the count's change and the notify, so that a caller about to
        // sleep (it checks the count under the mutex) cannot miss the notify.
        std::lock_guard<std::mutex> lock(mutex_);
        done_cv_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_, run_mutex_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<int> active_{0};  // workers inside the current task (changed under mutex_ going up)
  uint64_t generation_ = 0;
  std::atomic<uint64_t> published_{0};  // generation_, readable without the mutex
  bool stopping_ = false;
  const std::chrono::microseconds spin_;

  // KILN_POOL_SPIN_US (read once): how long an idle worker spins before it sleeps.
  static std::chrono::microseconds spin_time() {
    const char* env = std::getenv("KILN_POOL_SPIN_US");
    return std::chrono::microseconds(env ? std::max(0, std::atoi(env)) : 200);
  }
};

}  // namespace

SpinHold::SpinHold() { g_spin_holds.fetch_add(1, std::memory_order_relaxed); }
SpinHold::~SpinHold() { g_spin_holds.fetch_sub(1, std::memory_order_relaxed); }

namespace {

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
  const int64_t chunks = (total + chunk - 1) / chunk;
  // The same chunks as one per thread, claimed in order by whichever thread is free:
  // the caller takes a chunk whose worker has not woken up yet.
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  pool().run([&](int) {
    tls_in_parallel = true;
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      const int64_t lo = begin + c * chunk, hi = std::min(end, lo + chunk);
      try {
        body(lo, hi);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
    tls_in_parallel = false;
  });
  if (error) std::rethrow_exception(error);
}

}  // namespace kiln
