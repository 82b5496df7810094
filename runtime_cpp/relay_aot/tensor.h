/*!
 * \file relay_aot/tensor.h
 * \brief Allocating kernel outputs: one block per tensor, recycled per thread.
 *
 * NDArray::Empty makes three heap allocations (the container, its shape, its data, the last
 * through the device API). Control-heavy programs allocate a small output for every kernel call
 * (an LSTM step of hidden size 16 makes seven), so this matters: here the container and the data
 * share one 64-byte-aligned block, shapes are shared constants of the program, and freed blocks
 * go to a small per-thread cache keyed by size, from which the next allocation of that size is
 * served without calling malloc. Block sizes are bucketed (memory.h's ``bucketed``) so that a
 * tensor growing by a row per step finds a cached block most of the time.
 */
#ifndef RELAY_AOT_TENSOR_H_
#define RELAY_AOT_TENSOR_H_

#include <tvm/runtime/container/shape_tuple.h>
#include <tvm/runtime/ndarray.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "kernel.h"
#include "memory.h"

namespace relay_aot {

using tvm::runtime::ShapeTuple;

namespace detail {

constexpr size_t kHeaderBytes = rounded(sizeof(NDArray::Container));

/*!
 * \brief Whether a tensor's data fits in its header block's padding: 0-d tensors (the boxed
 *        scalars of lists and tuples) take one 128-byte block instead of 192. Their element is
 *        16-byte aligned there, which is enough: no kernel loads a 0-d tensor as a vector, and
 *        kernels already read unboxed scalars from C++ locals (scalar.h).
 */
inline bool data_in_header(const DLTensor& t, size_t data_bytes) {
  static_assert(sizeof(NDArray::Container) % 16 == 0, "data after the header is 16-byte aligned");
  return t.ndim == 0 && data_bytes <= kHeaderBytes - sizeof(NDArray::Container);
}

inline size_t block_bytes(const DLTensor& t) {
  size_t data_bytes = tvm::runtime::GetDataSize(t);
  return data_in_header(t, data_bytes) ? kHeaderBytes : kHeaderBytes + bucketed(data_bytes);
}

/*! \brief Where the data of a tensor starts in its block (see data_in_header). */
inline size_t data_offset(const DLTensor& t) {
  return data_in_header(t, tvm::runtime::GetDataSize(t)) ? sizeof(NDArray::Container) : kHeaderBytes;
}

/*! \brief The deleter of tensors in cached blocks (out of line: only its address is taken). */
void free_tensor_block(tvm::runtime::Object* obj);
/*! \brief The deleter of a view_tensor: its block holds the header only. */
void free_tensor_header(tvm::runtime::Object* obj);

/*!
 * \brief Bytes of the block of \p container, a tensor of a cached block: block_bytes of its
 *        shape, unless it was made bigger for a tensor that grows (append_in_place), whose
 *        container keeps the block's bytes in its otherwise unused ``manager_ctx``.
 */
inline size_t block_capacity(const NDArray::Container* container) {
  return container->manager_ctx != nullptr ? reinterpret_cast<size_t>(container->manager_ctx)
                                           : block_bytes(container->dl_tensor);
}

/*!
 * \brief A ShapeTuple whose extents follow it in the same cached block. TVM's own makes two
 *        heap allocations (the object, a std::vector); a tensor with `?` dimensions needs a new
 *        shape at every allocation, so these come from the block cache like tensors.
 */
struct InlineShape : tvm::runtime::ShapeTupleObj {
  InlineShape(const int64_t* dims, int rank, FDeleter deleter) {
    // Object's header is protected: only a subclass (or TVM's allocator) can set it.
    type_index_ = RuntimeTypeIndex();
    deleter_ = deleter;
    data = reinterpret_cast<int64_t*>(this + 1);
    size = static_cast<uint64_t>(rank);
    for (int i = 0; i < rank; ++i) data[i] = dims[i];
  }
  static size_t block_bytes(uint64_t rank) { return rounded(sizeof(InlineShape) + rank * sizeof(int64_t)); }
};

/*! \brief The deleter of InlineShape (out of line: only its address is taken). */
void free_inline_shape(tvm::runtime::Object* obj);

}  // namespace detail

/*! \brief The shape of 0-d tensors, shared. */
inline const ShapeTuple& scalar_shape() {
  static const ShapeTuple* shape = new ShapeTuple(std::vector<int64_t>());
  return *shape;
}

namespace detail {

/*!
 * \brief Makes tensor headers by copying a prototype.
 *
 * NDArray::Container's constructors first default-construct its ShapeTuple member, and TVM's
 * default ShapeTuple is a new heap object: a malloc and a free around every tensor made, the
 * largest cost of boxing a scalar. Its (implicit) copy constructor shares the source's shape
 * instead, and Object's copy constructor gives the copy a fresh header (count 0, no deleter).
 * So a new tensor is a copy of one prototype, then given its data, dtype, type index and shape
 * (the prototype's is null: no count to take and drop again, each atomic).
 */
struct ContainerAccess : NDArray::Container {
  static NDArray::Container* make(void* block, void* data, const ShapeTuple& shape, DLDataType dtype) {
    // Never freed: outlives every tensor. Its shape is null, so that copying it counts nothing.
    static const NDArray::Container* prototype = [] {
      auto* p = static_cast<ContainerAccess*>(new NDArray::Container(nullptr, scalar_shape(), DLDataType{kDLInt, 32, 1}, kDevice));
      p->shape_ = ShapeTuple(tvm::runtime::ObjectPtr<Object>(nullptr));
      return static_cast<const NDArray::Container*>(p);
    }();
    auto* made = static_cast<ContainerAccess*>(new (block) NDArray::Container(*prototype));
    made->type_index_ = RuntimeTypeIndex();
    made->shape_ = shape;
    made->dl_tensor.data = data;
    made->dl_tensor.ndim = static_cast<int>(shape.size());
    made->dl_tensor.shape = const_cast<int64_t*>(shape.data());
    made->dl_tensor.dtype = dtype;
    return made;
  }

  /*! \brief Whether \p container is one that make() made (its block is from the block cache). */
  static bool in_cached_block(const NDArray::Container* container) {
    return static_cast<const ContainerAccess*>(container)->deleter_ == &free_tensor_block;
  }

  /*! \brief Give \p container (in a cached block) the shape \p shape: its block must still fit it. */
  static void reshape(NDArray::Container* container, const ShapeTuple& shape) {
    auto* access = static_cast<ContainerAccess*>(container);
    access->shape_ = shape;
    access->dl_tensor.ndim = static_cast<int>(shape.size());
    access->dl_tensor.shape = const_cast<int64_t*>(shape.data());
  }
};

}  // namespace detail

/*! \brief A new shape (\p rank extents from \p dims). */
inline ShapeTuple make_shape(const int64_t* dims, int rank) {
  void* block = detail::block_cache().Take(detail::InlineShape::block_bytes(rank));
  return adopt<ShapeTuple>(new (block) detail::InlineShape(dims, rank, &detail::free_inline_shape));
}

/*!
 * \brief A new, uninitialised CPU tensor; \p shape is shared (one of the program's constants).
 *        Out of line: it is called, not inlined, and compiling it into every unit cost each
 *        one more than a tenth of its compile time.
 */
NDArray alloc_tensor(const ShapeTuple& shape, DLDataType dtype);

/*!
 * \brief A tensor of \p shape and \p dtype whose data is \p whole's from byte \p offset (a
 *        multiple of 64): a piece of a concatenation that its kernel writes in place
 *        (ir/in_place.py). It does not hold \p whole: the generated code lets it go before.
 */
NDArray view_tensor(const NDArray& whole, const ShapeTuple& shape, DLDataType dtype, size_t offset);

/*!
 * \brief A new tensor with the contents of \p tensor (a constant of the program that may reach
 *        a caller, who may write into it).
 */
inline NDArray copy_tensor(const NDArray& tensor) {
  const DLTensor* from = tensor.operator->();
  NDArray out = alloc_tensor(tensor.Shape(), from->dtype);
  std::memcpy(const_cast<DLTensor*>(out.operator->())->data, static_cast<const char*>(from->data) + from->byte_offset,
              tvm::runtime::GetDataSize(*from));
  return out;
}

/*! \brief A new zero-filled tensor shaped like \p like (a fresh copy of an all-zero constant). */
inline NDArray zero_tensor(const NDArray& like) {
  NDArray out = alloc_tensor(like.Shape(), like->dtype);
  std::memset(const_cast<DLTensor*>(out.operator->())->data, 0, tvm::runtime::GetDataSize(*out.operator->()));
  return out;
}

}  // namespace relay_aot

#endif  // RELAY_AOT_TENSOR_H_
