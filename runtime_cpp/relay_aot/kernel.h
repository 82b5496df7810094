/*!
 * \file relay_aot/kernel.h
 * \brief Calling TVM-generated kernels by symbol, and allocating their outputs.
 *
 * Kernels are linked into the same shared library as the control code, so a call is a
 * direct C call through TVM's packed calling convention: no registry or module look-up.
 */
#ifndef RELAY_AOT_KERNEL_H_
#define RELAY_AOT_KERNEL_H_

#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/container/shape_tuple.h>
#include <tvm/runtime/ndarray.h>

#include <initializer_list>
#include <string>
#include <type_traits>

#include "errors.h"

namespace relay_aot {

using tvm::runtime::NDArray;
using tvm::runtime::Object;
using tvm::runtime::ObjectRef;

/*! \brief The packed signature TVM's LLVM backend gives every kernel. */
using KernelFn = int (*)(TVMValue* args, int* type_codes, int num_args, TVMValue* ret,
                         int* ret_type_code, void* resource_handle);

/*! \brief The device every tensor of a compiled program lives on. */
constexpr DLDevice kDevice{kDLCPU, 0};

/*! \brief The DLTensor of a tensor, as a kernel argument. */
inline DLTensor* arg(const NDArray& tensor) { return const_cast<DLTensor*>(tensor.operator->()); }

/*!
 * \brief The DLTensor of a value statically known to be a tensor (a tuple field), without
 *        touching its reference count.
 */
inline DLTensor* arg(const ObjectRef& tensor) {
  return &static_cast<NDArray::Container*>(const_cast<Object*>(tensor.get()))->dl_tensor;
}

namespace detail {

/*!
 * \brief Raise KernelError for kernel \p name, naming the shapes of the \p count tensors at
 *        \p tensors: a kernel with `?` dimensions fails on arguments whose shapes do not fit.
 */
[[noreturn]] void raise_kernel_failure_on(const char* name, DLTensor* const* tensors, int count);

/*! \brief Call \p fn on \p tensors through the packed convention; the status it returns. */
template <typename... Tensors>
inline int call_packed_c(KernelFn fn, Tensors... tensors) {
  constexpr int kCount = sizeof...(Tensors);
  static_assert((std::is_same_v<Tensors, DLTensor*> && ...), "kernel arguments are DLTensor pointers");
  TVMValue values[kCount];
  int codes[kCount];
  int i = 0;
  ((values[i].v_handle = tensors, codes[i++] = kTVMDLTensorHandle), ...);
  TVMValue ret;
  int ret_code = kTVMNullptr;
  return fn(values, codes, kCount, &ret, &ret_code, nullptr);
}

}  // namespace detail

/*!
 * \brief Run kernel \p fn on \p tensors (inputs, then outputs, flattened).
 * \param name The kernel's symbol, for the error message.
 */
template <typename... Tensors>
inline void call_kernel(KernelFn fn, const char* name, Tensors... tensors) {
  if (detail::call_packed_c(fn, tensors...) != 0) {
    DLTensor* all[] = {tensors...};
    detail::raise_kernel_failure_on(name, all, sizeof...(Tensors));
  }
}

/*!
 * \brief Run the shape function \p fn of kernel \p name on \p args (data, shapes, outputs);
 *        a failure (inputs whose shapes do not fit together) names the kernel's \p inputs.
 */
template <typename... Args>
inline void call_shape_function(KernelFn fn, const char* name, std::initializer_list<DLTensor*> inputs, Args... args) {
  if (detail::call_packed_c(fn, args...) != 0) {
    detail::raise_kernel_failure_on(name, inputs.begin(), static_cast<int>(inputs.size()));
  }
}

}  // namespace relay_aot

#endif  // RELAY_AOT_KERNEL_H_
