// CUDA events for timing GPU work (the profiler's GPU spans). Without CUDA (or without
// a GPU) record() returns nullptr and the rest do nothing.
#pragma once

namespace kiln::gpu_timer {

// Whether the device's kiln stream is capturing a CUDA Graph (no timing events then).
bool capturing(int device);
// An event recorded now on the device's kiln stream; nullptr when there is no CUDA or
// while the stream is capturing a graph.
void* record(int device);
// Milliseconds between two recorded events; waits for `to` to complete. -1 on failure.
double elapsed_ms(void* from, void* to);
void destroy(void* event);

}  // namespace kiln::gpu_timer
