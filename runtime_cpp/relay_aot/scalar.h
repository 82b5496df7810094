/*!
 * \file relay_aot/scalar.h
 * \brief Unboxed 0-d tensors: boxing, unboxing, kernel arguments, and TVM's integer semantics.
 *
 * Generated code keeps 0-d tensors of numeric dtypes as C++ scalars (`int32_t`, `float`,
 * `bool`, ...). They are boxed into 0-d NDArrays only where a runtime object is needed (tuple and
 * ADT fields, closure arguments, reference cells, results), and passed to kernels as DLTensors
 * that point at the local variable -- no allocation.
 */
#ifndef RELAY_AOT_SCALAR_H_
#define RELAY_AOT_SCALAR_H_

#include <tvm/runtime/ndarray.h>

#include <algorithm>  // std::max and std::min of the scalar operators (kernels/scalar_ops.py)
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "errors.h"
#include "kernel.h"
#include "tensor.h"

namespace relay_aot {

/*! \brief The TVM dtype of native scalar type \p T. */
template <typename T>
constexpr DLDataType dtype_of() {
  if constexpr (std::is_same_v<T, bool>) {
    return DLDataType{kDLUInt, 1, 1};
  } else if constexpr (std::is_floating_point_v<T>) {
    return DLDataType{kDLFloat, static_cast<uint8_t>(8 * sizeof(T)), 1};
  } else if constexpr (std::is_signed_v<T>) {
    return DLDataType{kDLInt, static_cast<uint8_t>(8 * sizeof(T)), 1};
  } else {
    return DLDataType{kDLUInt, static_cast<uint8_t>(8 * sizeof(T)), 1};
  }
}

/*! \brief The value of a 0-d tensor. */
template <typename T>
inline T unbox(const ObjectRef& value) {
  const DLTensor& t = static_cast<const NDArray::Container*>(value.get())->dl_tensor;
  const char* data = static_cast<const char*>(t.data) + t.byte_offset;
  if constexpr (std::is_same_v<T, bool>) {
    return *reinterpret_cast<const uint8_t*>(data) != 0;
  } else {
    return *reinterpret_cast<const T*>(data);
  }
}

/*! \brief A new 0-d tensor holding \p value. */
template <typename T>
inline NDArray box(T value) {
  NDArray out = alloc_tensor(scalar_shape(), dtype_of<T>());
  void* data = const_cast<DLTensor*>(out.operator->())->data;
  if constexpr (std::is_same_v<T, bool>) {
    *static_cast<uint8_t*>(data) = value ? 1 : 0;
  } else {
    *static_cast<T*>(data) = value;
  }
  return out;
}

/*! \brief A 0-d DLTensor viewing a local scalar, for passing it to (or receiving it from) a kernel. */
class ScalarTensor {
 public:
  template <typename T>
  explicit ScalarTensor(const T* value)
      : tensor_{const_cast<T*>(value), kDevice, 0, dtype_of<T>(), nullptr, nullptr, 0} {}
  DLTensor* get() { return &tensor_; }

 private:
  DLTensor tensor_;
};

/*! \brief Kernel argument for a local scalar (valid until the end of the full expression). */
template <typename T>
inline ScalarTensor scalar_arg(const T* value) {
  return ScalarTensor(value);
}

/*! \brief The kind of a number passed through the packed calling convention. */
enum class NumberKind { kBool, kInt, kFloat };

/*!
 * \brief A 0-d tensor of dtype \p dtype holding a number passed through the packed calling
 *        convention (\p real if its kind is kFloat, else \p integer).
 *
 * The rule both backends follow (docs/guarantees.md): a bool only for a bool tensor, an
 * integer for an integer or float tensor, a float only for a float tensor; a number that does
 * not fit the dtype is a ValueError, one of the wrong kind a TypeError.
 */
NDArray scalar_of_dtype(DLDataType dtype, NumberKind kind, double real, int64_t integer, const char* what);

[[noreturn]] void raise_zero_division(const char* op);

/*! \brief Relay `divide` on integers: truncating, like C (and TVM's kernels). */
template <typename T>
inline T int_div(T a, T b) {
  if (b == 0) raise_zero_division("division");
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return static_cast<T>(T(0) - a);  // wraps for the minimum value, where C++ traps
  }
  return static_cast<T>(a / b);
}

/*! \brief Relay `mod` on integers: the remainder of truncating division. */
template <typename T>
inline T int_mod(T a, T b) {
  if (b == 0) raise_zero_division("modulo");
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return T(0);
  }
  return static_cast<T>(a % b);
}

/*! \brief Relay `floor_divide` on integers. */
template <typename T>
inline T int_floor_div(T a, T b) {
  T q = int_div(a, b);
  if constexpr (std::is_signed_v<T>) {
    if (static_cast<T>(a - static_cast<T>(q * b)) != 0 && ((a < 0) != (b < 0))) q = static_cast<T>(q - 1);
  }
  return q;
}

/*! \brief Relay `floor_mod` on integers (the sign follows the divisor). */
template <typename T>
inline T int_floor_mod(T a, T b) {
  T r = int_mod(a, b);
  if constexpr (std::is_signed_v<T>) {
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
  }
  return r;
}

}  // namespace relay_aot

#endif  // RELAY_AOT_SCALAR_H_
