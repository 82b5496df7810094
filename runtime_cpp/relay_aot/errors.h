/*!
 * \file relay_aot/errors.h
 * \brief Errors raised by compiled Relay programs at run time.
 *
 * Messages start with an error kind ("MatchError: ...") because TVM's Python FFI turns that
 * prefix into the Python exception class registered under the same name: relay_aot registers
 * one for each kind its runtime raises (relay_aot/errors.py: ArgumentTypeError,
 * ArgumentValueError, ShapeError, KernelError, MatchError, RecursionDepthError, CpuFeatureError,
 * ZeroDivisionError, MemoryError), every one a tvm.error.TVMError.
 */
#ifndef RELAY_AOT_ERRORS_H_
#define RELAY_AOT_ERRORS_H_

#include <cstdint>
#include <stdexcept>
#include <string>

#include <tvm/runtime/c_runtime_api.h>

namespace relay_aot {

/*! \brief An error of a compiled program; what() is "<Kind>: <message>". */
class Error : public std::runtime_error {
 public:
  Error(const std::string& kind, const std::string& message)
      : std::runtime_error(kind + ": " + message) {}
};

/*! \brief No clause of a `match` accepted the value. \p where names the Relay function. */
[[noreturn]] void raise_match_failure(const char* where);

/*! \brief A caller handed a value that does not fit the program's types. */
[[noreturn]] void raise_type_error(const std::string& message);

namespace detail {

/*! \brief A shape as messages write it: "(2, 3)", "(4,)", "()". */
std::string shape_text(const int64_t* dims, int rank);

}  // namespace detail

}  // namespace relay_aot

#endif  // RELAY_AOT_ERRORS_H_
