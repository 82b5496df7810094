/*!
 * \file relay_aot/constants.h
 * \brief The constant tensors of a program, loaded once from a blob inside the library.
 *
 * The build assembles the constants' bytes into the library (`.incbin`), so a model's weights
 * travel inside its one .so file and cost the C++ compiler nothing to parse.
 */
#ifndef RELAY_AOT_CONSTANTS_H_
#define RELAY_AOT_CONSTANTS_H_

#include <tvm/runtime/container/shape_tuple.h>
#include <tvm/runtime/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernel.h"

namespace relay_aot {

/*! \brief Where constant number i lives in the blob, and what it is. */
struct ConstantSpec {
  size_t offset;       //!< byte offset in the blob
  size_t nbytes;       //!< size in bytes
  DLDataType dtype;    //!< element type
  int ndim;            //!< rank
  size_t shape_index;  //!< index of its first dimension in the shape table
};

/*! \brief Copy every constant out of \p blob into a new tensor (called once per process). */
std::vector<NDArray>* load_constants(const unsigned char* blob, const ConstantSpec* specs,
                                     const int64_t* shapes, int count);

}  // namespace relay_aot

#endif  // RELAY_AOT_CONSTANTS_H_
