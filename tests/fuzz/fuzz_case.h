// A failing program as a saved test case: the file tests/cpp/test_fuzz_cases.cpp
// replays (comment lines with the mismatch, the reproducer command and the C++ listing,
// then the program as text).
#pragma once

#include <string>
#include <vector>

#include "differential.h"

namespace kfuzz {

// The one-line reproducer of a generated program.
std::string reproducer(uint64_t program_seed, const std::string& device);

std::string case_file_text(const Program& shrunk, const Mismatch& mismatch,
                           const std::string& reproducer_line);
// Writes the case as <dir>/case-<seed>.fuzz; returns the path ("" when it cannot write).
std::string save_case(const std::string& dir, const Program& shrunk, const std::string& text);

// The *.fuzz files of a directory, sorted.
std::vector<std::string> case_files(const std::string& dir);
std::string read_file(const std::string& path);

}  // namespace kfuzz
