#include "runtime/gpu_timer.h"

namespace kiln::gpu_timer {

bool capturing(int) { return false; }
void* record(int) { return nullptr; }
double elapsed_ms(void*, void*) { return -1; }
void destroy(void*) {}

}  // namespace kiln::gpu_timer
