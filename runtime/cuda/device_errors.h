// The host side of DeviceErrorRecord (runtime/cuda_context.h), for the sync points of
// cuda_context.cpp: prepare() allocates a device's record when its stream is created;
// fetch() enqueues a copy of the record to the host before the stream is synchronized
// (nothing when no kernel ever asked for the record); raise_fetched() runs after that
// synchronization and throws the recorded error, clearing it first.
#pragma once

namespace kiln::cuda_context::device_errors {

void prepare(int device, void* stream);
void fetch(int device, void* stream);
void raise_fetched(int device, void* stream);

}  // namespace kiln::cuda_context::device_errors
