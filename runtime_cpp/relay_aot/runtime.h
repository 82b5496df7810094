/*!
 * \file relay_aot/runtime.h
 * \brief Umbrella header of the relay_aot C++ runtime, the one include of generated code.
 */
#ifndef RELAY_AOT_RUNTIME_H_
#define RELAY_AOT_RUNTIME_H_

#include "capi.h"
#include "check.h"
#include "closure.h"
#include "constants.h"
#include "cpu.h"
#include "entry.h"
#include "errors.h"
#include "kernel.h"
#include "memory.h"
#include "profile.h"
#include "ref.h"
#include "scalar.h"
#include "shape.h"
#include "stack.h"
#include "tensor.h"
#include "values.h"

#endif  // RELAY_AOT_RUNTIME_H_
