#include "tracer/background_compile.h"

#include <pthread.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <new>
#include <thread>

#include "runtime/parallel.h"
#include "tracer/statistics.h"
#include "tracer/tracer.h"

namespace kiln::tracer {
namespace {
thread_local bool tls_submitted = false;
thread_local bool tls_compile_thread = false;
}  // namespace

CompileResult compile_program(const TraceProgram& program) {
  CompileResult r;
  r.start_ns = trace_clock_ns();
  try {
    r.executable = compile_trace(program);
  } catch (const std::exception& e) {
    r.executable.reset();
    r.error = e.what();
    if (r.error.empty()) r.error = "an exception without a message";
  } catch (...) {
    r.executable.reset();
    r.error = "an exception that is not a std::exception";
  }
  r.end_ns = trace_clock_ns();
  return r;
}

// The compile thread and its queue (see the header). Made once, never destroyed.
class CompileQueue {
 public:
  static CompileQueue& instance() {
    static CompileQueue* queue = [] {
      auto* q = new CompileQueue();
      // fork() waits for the compile running (so that no lock of the JIT is held in the
      // child) and holds the queue's mutex across it; a forked child (a DataLoader
      // worker) has no compile thread: it starts afresh, and the jobs it inherited never
      // run (their anchors drop them and compile again).
      pthread_atfork([] { instance().before_fork(); }, [] { instance().mutex_.unlock(); },
                     [] { instance().after_fork_in_child(); });
      return q;
    }();
    return *queue;
  }

  void submit(const std::shared_ptr<CompileJob>& job) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_down_) {  // exit() has begun: no compile starts any more
      job->abandoned_ = true;
      return;
    }
    if (!started_) {
      std::thread(&CompileQueue::loop, this).detach();
      started_ = true;
    }
    jobs_.push_back(job);
    wake_.notify_one();
  }

  bool done(const CompileJob& job) {
    std::lock_guard<std::mutex> lock(mutex_);
    return job.state_ == CompileJob::State::Done;
  }

  void wait(const CompileJob& job) {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] {
      return job.state_ == CompileJob::State::Done || job.state_ == CompileJob::State::Skipped ||
             (job.abandoned_ && job.state_ == CompileJob::State::Queued);
    });
  }

  CompileResult take(CompileJob& job) {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::move(job.result_);
  }

  bool skipped(const CompileJob& job) {
    std::lock_guard<std::mutex> lock(mutex_);
    return job.state_ == CompileJob::State::Skipped;
  }

  void before_fork() {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return running_ == nullptr; });
    lock.release();  // held until fork() returns (unlocked in the parent, made anew in the child)
  }

  void after_fork_in_child() {
    new (&mutex_) std::mutex();
    new (&wake_) std::condition_variable();
    new (&finished_) std::condition_variable();
    for (const auto& job : jobs_) job->state_ = CompileJob::State::Skipped;
    if (running_) running_->state_ = CompileJob::State::Skipped;
    running_ = nullptr;
    jobs_.clear();
    started_ = false;
    started_count_ = finished_count_ = 0;
  }

  // At exit: no job starts from now on, and the one running is waited for.
  void shut_down() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shut_down_ = true;
      for (const auto& job : jobs_) job->abandoned_ = true;
    }
    wait_for_running();
  }

  void wait_for_running() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t target = started_count_;
    finished_.wait(lock, [&] { return finished_count_ >= target; });
  }

  void abandon(CompileJob& job) {
    std::lock_guard<std::mutex> lock(mutex_);
    job.abandoned_ = true;
  }

 private:
  CompileQueue() = default;

  void loop() {
    tls_compile_thread = true;
    Tracer::current().set_enabled(false);  // an op run here is never traced
    // At the user's threads' priority. Until session 35 it ran at nice 5 (a quarter of a
    // core it shared with the eager loop): on this project's 2-core VMs the GPT step's
    // compile then landed at step 17-18 instead of 11-12, and the eager steps meanwhile
    // were no faster (bench/models gpt, cpu: the 14th step ended at 0.81-0.87 s either
    // way; docs/results/llvm_compile_time_cpu.txt).
    for (;;) {
      std::shared_ptr<CompileJob> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return !jobs_.empty(); });
        job = std::move(jobs_.front());
        jobs_.pop_front();
        // Nobody else holds it (its anchor is gone) or nobody will wait for it: skip.
        if (job->abandoned_ || shut_down_ || job.use_count() == 1) {
          job->state_ = CompileJob::State::Skipped;
          finished_.notify_all();
          continue;
        }
        job->state_ = CompileJob::State::Running;
        running_ = job.get();
        ++started_count_;
      }
      CompileResult result;
      {
        const SpinHold hold;  // the pool's idle workers leave the cores to the compile
        result = compile_program(job->program());
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        job->result_ = std::move(result);
        job->state_ = CompileJob::State::Done;
        running_ = nullptr;
        ++finished_count_;
      }
      finished_.notify_all();
      // An abandoned job's result goes with its last reference, here or on its thread.
      job.reset();
      // After the first compile, the objects it made (the JIT, its caches) exist: a
      // handler registered now runs at exit before their destructors, and keeps any
      // compile from running under them (a thread other than main may have submitted
      // it; main's own jobs are waited for by its tracer's destructor already).
      static const bool registered = std::atexit([] { CompileQueue::instance().shut_down(); }) == 0;
      (void)registered;
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  std::deque<std::shared_ptr<CompileJob>> jobs_;
  bool started_ = false;
  bool shut_down_ = false;
  CompileJob* running_ = nullptr;
  uint64_t started_count_ = 0, finished_count_ = 0;  // jobs run (serially) so far
};

bool CompileJob::done() const { return CompileQueue::instance().done(*this); }
bool CompileJob::skipped() const { return CompileQueue::instance().skipped(*this); }
void CompileJob::wait() const { CompileQueue::instance().wait(*this); }
CompileResult CompileJob::take() { return CompileQueue::instance().take(*this); }
void CompileJob::abandon() { CompileQueue::instance().abandon(*this); }

bool on_compile_thread() { return tls_compile_thread; }

void submit_compile(const std::shared_ptr<CompileJob>& job) {
  tls_submitted = true;
  CompileQueue::instance().submit(job);
}

bool submitted_compiles_on_this_thread() { return tls_submitted; }

void wait_for_running_compile() { CompileQueue::instance().wait_for_running(); }

}  // namespace kiln::tracer
