// A fuzz program as readable C++ (the calls interpret.cpp makes, one line per step):
// what a failing program's report prints after its one-line reproducer.
#pragma once

#include <string>

#include "program.h"

namespace kfuzz {

std::string cpp_listing(const Program& p);
std::string ref_name(const Ref& r);  // "in0", "v3"

}  // namespace kfuzz
