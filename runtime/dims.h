// Dims: a small inline vector of int64 used for sizes, strides and dim lists.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include <boost/container/small_vector.hpp>

namespace kiln {

using Dims = boost::container::small_vector<int64_t, 6>;

// "[2, 3, 4]"
std::string dims_str(const Dims& d);
// Product of the entries (1 for an empty list).
int64_t dims_numel(const Dims& d);
// Row-major (C-contiguous) strides for sizes, in elements.
Dims contiguous_strides(const Dims& sizes);
// Wraps a possibly negative dim into [0, rank); throws IndexError naming op and arg.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* op, const char* arg = "dim");
// Broadcasts two shapes (numpy rules); throws ShapeError naming op.
Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op);

}  // namespace kiln
