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
 * (concat_flat, append_in_place, copy_if_same_shape), or not at all (ShapeOutput::is_shape_of, for a result no
 * caller can see): their TVM kernels divide by shape variables per element. A static kernel that
 * only reshapes shares its input's bytes (view_of).
 */
#ifndef RELAY_AOT_SHAPE_H_
#define RELAY_AOT_SHAPE_H_

#include <tvm/runtime/container/shape_tuple.h>
#include <tvm/runtime/ndarray.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
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

/*!
 * \brief The shape of a tensor as a shape function's input: int64[ndim] (0-d int64 for 0-d),
 *        copied into 64-byte-aligned storage. TVM's kernels assume every buffer they are given
 *        is aligned so (kAlignment) and load and store whole vectors with aligned instructions
 *        (AVX2's vmovdqa faults on a 16-byte-aligned address): a tensor's shape array is not.
 */
class ShapeInput {
 public:
  explicit ShapeInput(const DLTensor* tensor) : ndim_(tensor->ndim) {
    int64_t* dims = dims_;
    if (ndim_ > kInline) {
      dims = static_cast<int64_t*>(std::aligned_alloc(detail::kAlignment, detail::rounded(sizeof(int64_t) * ndim_)));
      if (dims == nullptr) throw std::bad_alloc();
      heap_.reset(dims);
    }
    if (ndim_ > 0) std::memcpy(dims, tensor->shape, sizeof(int64_t) * ndim_);
    tensor_ = DLTensor{dims, kDevice, ndim_ > 0 ? 1 : 0, DLDataType{kDLInt, 64, 1}, nullptr, nullptr, 0};
  }
  ShapeInput(const ShapeInput&) = delete;
  /*! \brief The argument (valid while this object lives: to the end of the full expression). */
  DLTensor* get() {
    tensor_.shape = &ndim_;
    return &tensor_;
  }

 private:
  static constexpr int kInline = 8;
  struct Free {
    void operator()(int64_t* block) const { std::free(block); }
  };
  alignas(detail::kAlignment) int64_t dims_[kInline] = {};  // 0 for a 0-d tensor's shape
  std::unique_ptr<int64_t, Free> heap_;
  int64_t ndim_;
  DLTensor tensor_;
};

/*! \brief Shape-function argument for the shape of \p tensor. */
inline ShapeInput shape_of(const DLTensor* tensor) { return ShapeInput(tensor); }

/*!
 * \brief Check a shape a shape function wrote (\p rank extents at \p dims) for the kernel named
 *        \p kernel: a negative extent (which TVM's shape functions compute for some arguments
 *        they do not check), an element count beyond int64 (an allocation or reshape to it would
 *        wrap) and, if \p expected is given, a shape other than that one (the output's static
 *        shape, when its type has no `?`) raise ValueError naming the kernel. Both backends check
 *        with this function (the Python one through the _fastcall extension).
 */
void check_computed_shape(const char* kernel, const int64_t* dims, int rank, const int64_t* expected);

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
   * \brief The shape written, checked (check_computed_shape, against \p expected when not null).
   */
  ShapeTuple shape(const char* kernel, const ShapeTuple* expected = nullptr) const {
    check_computed_shape(kernel, dims_, Rank, expected != nullptr ? expected->data() : nullptr);
    return expected != nullptr ? *expected : make_shape(dims_, Rank);
  }

  /*!
   * \brief Whether the shape written (checked as by shape()) is the shape of \p tensor, a
   *        compact tensor: then a kernel that would only copy \p tensor may return it instead.
   */
  bool is_shape_of(const NDArray& tensor, const char* kernel, const ShapeTuple* expected = nullptr) const {
    check_computed_shape(kernel, dims_, Rank, expected != nullptr ? expected->data() : nullptr);
    return detail::is_compact_of_shape(tensor.operator->(), dims_, Rank);
  }

  /*! \brief Whether the shape written has no elements (a zero extent). */
  bool empty() const {
    for (int i = 0; i < Rank; ++i) {
      if (dims_[i] == 0) return true;
    }
    return false;
  }

 private:
  // aligned as every buffer a kernel is given must be (ShapeInput)
  alignas(detail::kAlignment) int64_t dims_[Rank > 0 ? Rank : 1] = {};
  int64_t rank_ = Rank;
  DLTensor tensor_;
};

static_assert(alignof(ShapeOutput<1>) >= detail::kAlignment && alignof(ShapeInput) >= detail::kAlignment,
              "a shape function's buffers are aligned as TVM's kernels assume");

/*!
 * \brief Whether every one of \p outputs (ShapeOutputs) has no elements: then the kernel that
 *        would write them is not called. It has nothing to write, and TVM's kernels over `?`
 *        dimensions divide their loop indices by the output's extents, zero among them.
 */
template <typename... Outputs>
inline bool all_empty(const Outputs&... outputs) {
  return (outputs.empty() && ...);
}

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
 * \brief The concatenation of \p first and \p rest (their bytes one after another, as
 *        concat_flat writes them) as a tensor of \p shape and \p dtype, made in \p first's own
 *        block, which it then takes over (\p first is left empty): only \p rest is copied.
 *
 *        A scan output grown by a row per loop step is otherwise copied whole at every step,
 *        quadratic in the steps (an ONNX Loop's hidden states: 2.5 MB copied over 50 steps of
 *        hidden size 512). The generated code calls it where \p first is used for the last
 *        time; it holds only when, at run time, no one else holds \p first (so no one sees it
 *        change), its block is alloc_tensor's and has room (blocks are bucketed, memory.h), and
 *        every piece is compact. Otherwise it returns an undefined tensor, having done nothing:
 *        the caller allocates and concatenates.
 */
NDArray append_in_place(NDArray& first, const ShapeTuple& shape, DLDataType dtype,
                        std::initializer_list<DLTensor*> rest);

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

/*!
 * \brief \p in's bytes as a tensor of \p shape, sharing (and keeping alive) its memory: a kernel
 *        that only reshapes (kernels/copies.py's VIEW), whose result no caller sees. An
 *        undefined tensor when \p in is not compact: then the kernel runs.
 */
inline NDArray view_of(const NDArray& in, const ShapeTuple& shape) {
  if (!detail::is_compact(in.operator->())) return NDArray();
  return NDArray(in).CreateView(shape, in->dtype);
}

}  // namespace relay_aot

#endif  // RELAY_AOT_SHAPE_H_
