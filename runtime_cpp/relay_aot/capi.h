/*!
 * \file relay_aot/capi.h
 * \brief The plain C API of a compiled library: `tvmgen_<model>_run(inputs, outputs)` on caller
 *        buffers, and the runtime hooks TVM's kernels need when no TVM loader ran.
 *
 * The generated header `tvmgen_<model>.h` (relay_aot/backends/cpp/capi.py) declares one `void*`
 * per parameter of @main and one per result tensor; the generated entry reads the inputs with
 * `c_input`/`c_scalar`, calls @main's C++ function, writes every result tensor with `c_output`,
 * and reports failures through `c_call`: a non-zero status, and the message in
 * `c_last_error()` for the calling thread. Nothing here throws across the C boundary.
 *
 * Inputs are wrapped, not copied, when they are aligned as TVM's kernels assume (64 bytes);
 * otherwise copied into an aligned tensor. Generated code never writes into a tensor it did
 * not allocate, so inputs are never modified.
 */
#ifndef RELAY_AOT_CAPI_H_
#define RELAY_AOT_CAPI_H_

#include <tvm/runtime/c_backend_api.h>
#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/container/shape_tuple.h>
#include <tvm/runtime/ndarray.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <string>
#include <vector>

#include "errors.h"
#include "kernel.h"
#include "memory.h"
#include "tensor.h"

namespace relay_aot {

/*! \brief The calling thread's message of the last failed C API call ("" before any failure). */
std::string& c_error_text();

/*! \brief The C string `tvmgen_<model>_last_error` returns; valid until the thread's next failure. */
inline const char* c_last_error() { return c_error_text().c_str(); }

/*!
 * \brief Run \p run on the caller's structs and turn any exception into a status: 0 on success,
 *        -1 with the message kept for `c_last_error()` otherwise.
 */
template <typename Inputs, typename Outputs>
inline int32_t c_call(void (*run)(const Inputs*, const Outputs*), const Inputs* inputs, const Outputs* outputs) {
  try {
    run(inputs, outputs);
    return 0;
  } catch (const std::exception& e) {
    c_error_text() = e.what();
  } catch (...) {
    c_error_text() = "Error: an unknown C++ exception";
  }
  return -1;
}

/*! \brief Raise the C API's error for a null pointer where \p what must be given. */
void c_require(const void* pointer, const char* what);

/*! \brief A shape that lives as long as the program (generated code keeps one per parameter). */
const ShapeTuple& leaked_shape(std::initializer_list<int64_t> dims);

namespace detail {

inline void delete_view(Object* obj) { delete static_cast<NDArray::Container*>(obj); }

}  // namespace detail

/*!
 * \brief The caller's input buffer \p data as a tensor of \p shape and \p dtype: a view of the
 *        buffer when it is 64-byte aligned, else an aligned copy. \p what names the parameter.
 */
NDArray c_input(const void* data, const ShapeTuple& shape, DLDataType dtype, const char* what);

/*! \brief The caller's 0-d input \p data as a native scalar (any alignment). */
template <typename T>
inline T c_scalar(const void* data, const char* what) {
  c_require(data, what);
  T value;
  std::memcpy(&value, data, sizeof(T));
  return value;
}

/*! \brief Copy result tensor \p tensor (of \p nbytes bytes, by its static type) to \p out. */
void c_output(const ObjectRef& tensor, void* out, size_t nbytes, const char* what);

/*! \brief Store native scalar result \p value to \p out. */
template <typename T>
inline void c_output_scalar(T value, void* out, const char* what) {
  c_require(out, what);
  std::memcpy(out, &value, sizeof(T));
}

/*!
 * \brief `__TVMBackendGetFuncFromEnv` of a library that no TVM loader set up: TVM's own needs the
 *        module context the loader stores; the functions kernels look up (`tvm.contrib.*`
 *        extern calls) are global ones, found the same way the module would find them.
 */
int get_func_from_env(void* /*module_context*/, const char* name, TVMFunctionHandle* out);

/*!
 * \brief `__TVMBackendParallelLaunch`: TVM's `TVMBackendParallelLaunch`, which runs the loop's
 *        body on the calling thread where one thread is to run it, with that count known
 *        without a system call. TVM's asks for it at every parallel loop: where neither
 *        TVM_NUM_THREADS nor OMP_NUM_THREADS is set, std::thread::hardware_concurrency, which
 *        opens and reads /sys (20 of MLPerf Tiny's ResNet-8's 68 us a call, on 2 cores where TVM
 *        then runs one thread). Here the environment is read at every launch as TVM does, the
 *        processor count once per process; any other count goes to TVM's thread pool.
 */
int parallel_launch(FTVMParallelLambda flambda, void* cdata, int num_task);

}  // namespace relay_aot

#endif  // RELAY_AOT_CAPI_H_
