// Background compiles: a hot trace compiles on the process's compile thread while the
// loop that made it hot keeps running eagerly; its plan swaps in at the next walk of its
// anchor once ready (lifecycle.h: on_trace_ended submits, take_finished_compile installs).
// On by default, CPU and CUDA traces alike (CUDA since session 38: on the H200 the GPT,
// CNN, block and LSTM training loops' plans are installed from the compile thread; a
// one-second NVRTC compile just outlasts many 2-6 ms steps). KILN_COMPILE_SYNC=1
// (config().background_compile = false) compiles on the user's thread as before, stalling that
// iteration.
//
// What runs where:
//   user thread     snapshots the trace (walk.program(): a TraceProgram copied by value,
//                   tape and guards, nothing shared with the tree), submits it, and later
//                   installs the result: the CompiledTrace, its trace id, lifecycle
//                   transitions, recompile accounting, logs, explain() and profiler events.
//                   The tree, walks and statistics are touched on this thread only.
//   compile thread  compile_trace() on the snapshot, nothing else: the JIT pipeline, LLVM
//                   ORC (LlvmJit, thread-safe, its compiles serialized by its mutex), and
//                   on CUDA NVRTC, the CUBIN load and the cuBLASLt setup. CUDA loading
//                   goes through the runtime's library API (cudaLibraryLoadData), which is
//                   context-independent, and cuBLASLt's per-device state is made with the
//                   device set explicitly (jit/cuda/cublaslt_matmul.cpp), so the compile
//                   thread needs no current context of its own (no cuCtxSetCurrent).
//                   CUDA Graph capture and instantiation are not part of a compile: they
//                   happen at the plan's first replay, on the user's thread, in its
//                   stream (jit/cuda/cuda_graph_plan.h), as in synchronous mode. The
//                   compile thread's own tracer is switched off (an op it ran would never
//                   be traced).
// One compile thread for the process, jobs in submission order: a trace's LLVM kernels
// spread over half the cores from it (on_compile_thread(); the other half keeps the eager
// loop going; jit/llvm/cpu_backend.cpp), and NVRTC spreads one trace over several threads.
// It runs at the user's threads' priority: the compile is what makes the loop fast, and
// giving it less of the cores (nice 5, until session 35) delayed it without making the
// eager steps meanwhile any faster. The pool's idle workers do not spin while it runs
// (runtime/parallel.h, SpinHold).
//
// Failure: a compile that throws is caught (in both modes) and its trace stays eager,
// reported as a CompileFailed reason (explain()'s eager anchors, KILN_LOGS=recompiles);
// groups that fail inside the JIT fall back to eager kernels with a note, as before.
//
// Lifetime: a job is owned by its anchor (Anchor::pending) and by the queue. A job
// nobody else holds when its turn comes (its anchor was evicted or reset) is skipped.
// Tracer::~Tracer (a thread_local, so destroyed when its thread ends and, for the main
// thread, inside exit() before any static object) abandons its queued jobs and waits for
// the one running (its own, or one its reset() or eviction abandoned): at process exit
// no compile runs while statics are destroyed. For jobs other threads submitted, an
// atexit handler registered after the first compile (so it runs before the destructors
// of what that compile made: the JIT, its caches) stops the queue and waits for the job
// running. The compile thread and its queue are never destroyed (it sleeps in a wait).
// fork() waits for the compile running (no JIT lock is then held by the compile thread)
// and holds the queue's lock across the fork; the child (a DataLoader worker) starts
// with an empty queue and no thread, and the jobs it inherited are skipped: their
// anchors compile again there if their paths stay hot.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tracer/backend.h"
#include "tracer/break_reason.h"

namespace kiln::tracer {

struct CompileResult {
  std::unique_ptr<Executable> executable;  // null when no backend took the program
  std::string error;                       // what() of an exception the compile threw, or ""
  int64_t start_ns = 0, end_ns = 0;        // trace_clock_ns()
  double ms() const { return (end_ns - start_ns) / 1e6; }
};

// compile_trace(program), timed, with any exception caught into `error`.
CompileResult compile_program(const TraceProgram& program);

class CompileJob {
 public:
  CompileJob(TraceProgram program, std::optional<BreakCause> exit_cause)
      : program_(std::move(program)), exit_cause_(std::move(exit_cause)) {}

  // The snapshot the compile reads (never written after construction).
  const TraceProgram& program() const { return program_; }
  // Why the walk left the anchor's last variant (the recompile's reason), when it did.
  const std::optional<BreakCause>& exit_cause() const { return exit_cause_; }

  bool done() const;     // the result is ready (take() may be called)
  bool skipped() const;  // it will never run (abandoned, or inherited by a forked child)
  void wait() const;     // until done, or until it is known never to run (abandoned, queued)
  CompileResult take();
  // The job will not be waited for: skipped if it has not started.
  void abandon();

 private:
  friend class CompileQueue;
  enum class State : uint8_t { Queued, Running, Done, Skipped };
  const TraceProgram program_;
  const std::optional<BreakCause> exit_cause_;
  // Guarded by the queue's mutex.
  State state_ = State::Queued;
  bool abandoned_ = false;
  CompileResult result_;
};

// Queues a job on the compile thread (started at the first call).
void submit_compile(const std::shared_ptr<CompileJob>& job);
// Whether this thread ever submitted a compile.
bool submitted_compiles_on_this_thread();
// Whether this is the compile thread (a compile here runs beside the user's loop).
bool on_compile_thread();
// Waits until the compile running now (if any, whoever submitted it) has finished.
void wait_for_running_compile();

}  // namespace kiln::tracer
