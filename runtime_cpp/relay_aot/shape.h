/*!
 * \file relay_aot/shape.h
 * \brief Shapes known only at run time: the arguments and results of a kernel's shape function.
 *
 * A kernel with `?` dimensions comes with a shape function (TVM's, as its VM uses them): it
 * reads the shapes -- or, for operators such as `arange` or `dyn.reshape`, the values -- of the
 * kernel's inputs and writes each output's shape, checking on the way that the inputs' shapes
 * fit together. Generated code calls it, allocates the outputs at those shapes, then calls the
 * kernel. The shapes travel as small int64 DLTensors viewing memory on the C++ stack.
 *
 * Kernels with `?` dimensions that only move data are done here with memcpy when they can be
 * (concat_flat, copy_if_same_shape), or not at all (ShapeOutput::is_shape_of, for a result no
 * caller can see): their TVM kernels divide by shape variables per element.
 */
#ifndef RELAY_AOT_SHAPE_H_
#define RELAY_AOT_SHAPE_H_

#include <tvm/runtime/container/shape_tuple.h>
#include <tvm/runtime/ndarray.h>

#include <cstring>
#include <initializer_list>
#include <string>

#include "errors.h"
#include "kernel.h"
#include "tensor.h"

namespace relay_aot {

namespace detail {

inline bool is_compact(const DLTensor* t) { return t->strides == nullptr && t->byte_offset == 0; }

/*! \brief Whether \p t is a compact tensor of shape \p dims (\p ndim extents). */
inline bool is_compact_of_shape(const DLTensor* t, const int64_t* dims, int ndim) {
  if (t->ndim != ndim || !is_compact(t)) return false;
  for (int i = 0; i < ndim; ++i) {
    if (t->shape[i] != dims[i]) return false;
  }
  return true;
}

}  // namespace detail

/*! \brief The shape of a tensor as a shape function's input: int64[ndim] (0-d int64 for 0-d). */
class ShapeInput {
 public:
  explicit ShapeInput(const DLTensor* tensor) : ndim_(tensor->ndim) {
    static int64_t zero = 0;
    tensor_ = DLTensor{ndim_ > 0 ? tensor->shape : &zero, kDevice, ndim_ > 0 ? 1 : 0, DLDataType{kDLInt, 64, 1},
                       nullptr, nullptr, 0};
  }
  ShapeInput(const ShapeInput&) = delete;
  /*! \brief The argument (valid while this object lives: to the end of the full expression). */
  DLTensor* get() {
    tensor_.shape = &ndim_;
    return &tensor_;
  }

 private:
  int64_t ndim_;
  DLTensor tensor_;
};

/*! \brief Shape-function argument for the shape of \p tensor. */
inline ShapeInput shape_of(const DLTensor* tensor) { return ShapeInput(tensor); }

/*!
 * \brief A shape a shape function writes: int64[Rank] on the stack, then the shape of a new
 *        tensor.
 */
template <int Rank>
class ShapeOutput {
 public:
  ShapeOutput() : tensor_{dims_, kDevice, 1, DLDataType{kDLInt, 64, 1}, &rank_, nullptr, 0} {}
  ShapeOutput(const ShapeOutput&) = delete;
  /*! \brief The shape function's output argument. */
  DLTensor* arg() { return &tensor_; }
  /*!
   * \brief The shape written, checked: a negative extent (which TVM's shape functions compute
   *        for some arguments they do not check, e.g. `arange` with a step of the wrong sign)
   *        raises ValueError naming the kernel, and so does a shape other than \p expected
   *        (the output's static shape, when its type has no `?`).
   */
  ShapeTuple shape(const char* kernel, const ShapeTuple* expected = nullptr) const {
    check(kernel, expected);
    return expected != nullptr ? *expected : make_shape(dims_, Rank);
  }

  /*!
   * \brief Whether the shape written (checked as by shape()) is the shape of \p tensor, a
   *        compact tensor: then a kernel that would only copy \p tensor may return it instead.
   */
  bool is_shape_of(const NDArray& tensor, const char* kernel, const ShapeTuple* expected = nullptr) const {
    check(kernel, expected);
    return detail::is_compact_of_shape(tensor.operator->(), dims_, Rank);
  }

 private:
  void check(const char* kernel, const ShapeTuple* expected) const {
    bool bad = false;
    for (int i = 0; i < Rank; ++i) bad = bad || dims_[i] < 0 || (expected != nullptr && (*expected)[i] != dims_[i]);
    if (bad) {
      std::string message = std::string("kernel ") + kernel + " would make a tensor of shape " + text(dims_);
      if (expected != nullptr) message += " where its type says " + text(expected->data());
      throw Error("ValueError", message);
    }
  }

  static std::string text(const int64_t* dims) {
    std::string out = "(";
    for (int j = 0; j < Rank; ++j) out += (j ? ", " : "") + std::to_string(dims[j]);
    return out + (Rank == 1 ? ",)" : ")");
  }

  int64_t dims_[Rank > 0 ? Rank : 1] = {};
  int64_t rank_ = Rank;
  DLTensor tensor_;
};

/*!
 * \brief Write \p pieces one after another into \p out (a concatenate whose output holds its
 *        inputs' bytes in order: kernels/copies.py). False, having written nothing, when a
 *        piece is not a compact tensor: then the kernel runs instead.
 */
inline bool concat_flat(DLTensor* out, std::initializer_list<DLTensor*> pieces) {
  for (const DLTensor* piece : pieces) {
    if (!detail::is_compact(piece)) return false;
  }
  char* to = static_cast<char*>(out->data);
  for (const DLTensor* piece : pieces) {
    size_t bytes = tvm::runtime::GetDataSize(*piece);
    if (bytes != 0) std::memcpy(to, piece->data, bytes);
    to += bytes;
  }
  return true;
}

/*!
 * \brief Copy \p in into \p out when both have the same shape (a broadcast that broadcasts
 *        nothing); false otherwise, and then the kernel runs.
 */
inline bool copy_if_same_shape(DLTensor* out, const DLTensor* in) {
  if (!detail::is_compact_of_shape(in, out->shape, out->ndim)) return false;
  size_t bytes = tvm::runtime::GetDataSize(*in);
  if (bytes != 0) std::memcpy(out->data, in->data, bytes);
  return true;
}

}  // namespace relay_aot

#endif  // RELAY_AOT_SHAPE_H_
