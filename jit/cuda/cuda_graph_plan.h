// CudaGraphPlan: one compiled trace's launches recorded once as a CUDA Graph and
// replayed with one cudaGraphLaunch. Between replays only what changed is patched in
// the instantiated graph: a fused kernel's argument block (input/output pointers,
// scalars) through a kernel-node parameter update, an output copy's pointers through a
// memcpy-node update. Library calls (cuBLAS, eager kernels) are opaque: when their
// pointers or scalars change the plan records the launches again and updates the graph
// in place (counted as a re-capture). Temporaries allocated while recording come from a
// capture pool kept alive with the graph, one pool for all graphs of a thread on a device
// (they run one at a time on its stream, so they share the temporaries' bytes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln::jit::cuda_backend {

struct GraphStats {
  int64_t captures = 0, recaptures = 0, launches = 0, kernel_updates = 0, copy_updates = 0;
};

class CudaGraphPlan {
 public:
  explicit CudaGraphPlan(int device);
  ~CudaGraphPlan();
  CudaGraphPlan(const CudaGraphPlan&) = delete;
  CudaGraphPlan& operator=(const CudaGraphPlan&) = delete;

  // Launches (or, while recording, records) kernel `id` with its argument words.
  void kernel(int id, void* fn, unsigned grid, unsigned block, unsigned block_y,
              const std::vector<int64_t>& args);
  // Device-to-device copy `id` of `bytes` (a value a library call wrote, to the user's tensor).
  void copy(int id, void* dst, const void* src, size_t bytes);

  // Records `launch_all` (which calls kernel()/copy() and the library ops, all on the
  // device's stream) as the graph, or re-records it when it exists, then launches it once.
  // Returns false (and leaves nothing half-done) if the stream could not be captured; the
  // caller then runs the launches directly.
  bool record_and_launch(const std::function<void()>& launch_all, std::string* why);
  // Patches the kernels and copies whose arguments changed since the last launch (set
  // by calling kernel()/copy() between begin_patch() and launch()) and launches.
  void begin_patch();
  void launch();
  bool recorded() const;
  const GraphStats& stats() const { return stats_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  GraphStats stats_;
};

}  // namespace kiln::jit::cuda_backend
