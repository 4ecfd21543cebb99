// kiln's error hierarchy. Every user-facing check throws one of these with a message
// that names the op, the argument, and expected vs actual ("[reshape] cannot ...").
// Python maps them to ValueError / TypeError / IndexError / RuntimeError.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ShapeError : public Error {  // bad shapes or sizes (Python ValueError)
 public:
  using Error::Error;
};
class ValueError : public Error {  // bad values of arguments (Python ValueError)
 public:
  using Error::Error;
};
class DTypeError : public Error {  // dtype not supported / bad argument type (TypeError)
 public:
  using Error::Error;
};
class IndexError : public Error {  // dims or indices out of range (IndexError)
 public:
  using Error::Error;
};
class DeviceError : public Error {  // tensors on different devices, no GPU (RuntimeError)
 public:
  using Error::Error;
};
class OutOfMemoryError : public Error {  // host or device allocation failed (RuntimeError)
 public:
  using Error::Error;
};
class BackendError : public Error {  // a CUDA / BLAS / compiler call failed (RuntimeError)
 public:
  using Error::Error;
};

namespace detail {
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace kiln

// KILN_CHECK(cond, ErrorType, "[op] message parts", ...): throw ErrorType unless cond.
#define KILN_CHECK(cond, ErrType, ...)                            \
  do {                                                            \
    if (!(cond)) throw ErrType(::kiln::detail::cat(__VA_ARGS__)); \
  } while (0)
