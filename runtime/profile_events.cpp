#include "runtime/profile_events.h"

#include <chrono>

#include "runtime/cuda_context.h"
#include "runtime/gpu_timer.h"

namespace kiln::profiler {

constinit thread_local EventSink* tls_active = nullptr;

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Op:
      return "op";
    case Kind::Replay:
      return "replay";
    case Kind::Compile:
      return "compile";
    case Kind::GraphBreak:
      return "graph_break";
    case Kind::Materialize:
      return "materialize";
    case Kind::Kernel:
      return "kernel";
  }
  return "?";
}

EventSink::EventSink() : outer_(tls_active), origin_ns_(steady_ns()) {
  events_.reserve(1024);
  tls_active = this;
}

EventSink::~EventSink() { stop(); }

int64_t EventSink::now() const { return steady_ns() - origin_ns_; }

void EventSink::stop() {
  if (!running_) return;
  stop_ns_ = now();
  running_ = false;
  // Unlink this profile from the thread's chain (it may be stopped out of order).
  if (tls_active == this) {
    tls_active = outer_;
  } else {
    for (EventSink* p = tls_active; p; p = p->outer_) {
      if (p->outer_ == this) {
        p->outer_ = outer_;
        break;
      }
    }
  }
  resolve_gpu();
}

int64_t EventSink::elapsed_ns() const { return running_ ? now() : stop_ns_; }

size_t EventSink::begin(Kind kind, std::string name, const Device& device) {
  Event e;
  e.kind = kind;
  e.name = std::move(name);
  e.device = device.is_cuda() ? device.str() : "cpu";
  if (device.is_cuda()) {
    // The first CUDA work of the profile on this device: an event the host time is
    // known at (the stream is idle after the synchronize), the GPU clock's origin.
    bool have_ref = false;
    for (const GpuRef& r : gpu_refs_) have_ref |= r.device == device.index;
    if (!have_ref && !gpu_timer::capturing(device.index)) {
      try {
        cuda_context::synchronize(device.index);
      } catch (...) {
      }
      if (void* ref = gpu_timer::record(device.index))
        gpu_refs_.push_back(GpuRef{device.index, ref, now()});
    }
  }
  e.start_ns = now();
  events_.push_back(std::move(e));
  gpu_marks_.push_back(GpuMarks{device.is_cuda() ? gpu_timer::record(device.index) : nullptr,
                                nullptr, device.index});
  return events_.size() - 1;
}

void EventSink::end(size_t index) {
  GpuMarks& marks = gpu_marks_[index];
  if (marks.start) marks.end = gpu_timer::record(marks.device);
  events_[index].end_ns = now();
}

void EventSink::resolve_gpu() {
  for (size_t i = 0; i < gpu_marks_.size(); ++i) {
    GpuMarks& m = gpu_marks_[i];
    if (!m.start) continue;
    for (const GpuRef& r : gpu_refs_) {
      if (r.device != m.device || !m.end) continue;
      const double a = gpu_timer::elapsed_ms(r.event, m.start);
      const double b = gpu_timer::elapsed_ms(r.event, m.end);
      if (a >= 0 && b >= a) {
        events_[i].gpu_start_ns = r.host_ns + static_cast<int64_t>(a * 1e6);
        events_[i].gpu_end_ns = r.host_ns + static_cast<int64_t>(b * 1e6);
      }
    }
    gpu_timer::destroy(m.start);
    gpu_timer::destroy(m.end);
    m = GpuMarks{};
  }
  for (const GpuRef& r : gpu_refs_) gpu_timer::destroy(r.event);
  gpu_refs_.clear();
}

}  // namespace kiln::profiler
