// Fuzz programs as text: the files under tests/fuzz_cases/ that the regression test
// (tests/cpp/test_fuzz_cases.cpp) replays. One line per field, input and step, each a
// keyword and its values; lines starting with '#' are comments (a saved case carries
// its C++ listing and the mismatch it reproduced there).
//
//   kiln-fuzz 1
//   seed 42
//   device cpu
//   fresh_inputs 0
//   read_each_iteration 1
//   world 0 1234                        shape set, data seed
//   schedule 0 0 0 1 0
//   input float32 transposed -2 2 [3,4] [5,4]   dtype layout lo hi, a shape per shape set
//   step add call args=in0,v1 ints= a=0 b=0 c=0 s0=0 s1=0 s2=0 slot=-1 int=0 flag=0 flag2=0
//   dtype=float32
#pragma once

#include <string>

#include "program.h"

namespace kfuzz {

std::string to_text(const Program& p);
// Parses to_text's output; throws std::runtime_error naming the line on bad input.
Program from_text(const std::string& text);

std::string dtype_text(DType d);
bool parse_dtype(const std::string& s, DType* out);

}  // namespace kfuzz
