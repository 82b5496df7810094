// ===== program.h =====
// program.h
#pragma once
#include <relay_aot/runtime.h>

namespace golden_relay_aot {
using namespace relay_aot;

const std::vector<NDArray>& constants();
const std::vector<ShapeTuple>& shapes();
extern const TypeDesc kTypes[];

ADT f0(int32_t v0);  // @main
int32_t f1(int32_t v9);  // @fib
int32_t f2(ADT v17, int32_t v18);  // @sum

}  // namespace golden_relay_aot

// ===== entry.cc =====
// entry.cc
#include <relay_aot/runtime.h>

namespace golden_relay_aot {
  using namespace relay_aot;

  extern const TypeDesc kTypes[];  // defined below, used by every unit
  ADT f0(int32_t v0);  // @main

  // 2 constant tensors
  asm(".section .rodata\n.balign 64\n.globl golden_constant_blob\n.hidden golden_constant_blob\ngolden_constant_blob:\n.incbin \"constants.bin\"\n.previous");
  extern "C" const unsigned char golden_constant_blob[];
  const int64_t kConstantShapes[] = {0};
  const ConstantSpec kConstantSpecs[] = {
    {0, 4, DLDataType{kDLInt, 32, 1}, 0, 0},  // constant 0: int32[]
    {64, 4, DLDataType{kDLInt, 32, 1}, 0, 0},  // constant 1: int32[]
  };
  const std::vector<NDArray>& constants() {
    // Built once, never destroyed: no destructor runs at exit after TVM is gone.
    static const std::vector<NDArray>* table = load_constants(golden_constant_blob, kConstantSpecs, kConstantShapes, 2);
    return *table;
  }

  // Shapes of kernel outputs (one shared ShapeTuple each: allocation only allocates data).
  const std::vector<ShapeTuple>& shapes() {
    static const std::vector<ShapeTuple>* table = new std::vector<ShapeTuple>{
    };
    return *table;
  }

  ObjectRef call_main(const ObjectRef* a) {
    return f0(unbox<int32_t>(a[0]));
  }

  // Types of the values that cross the library boundary, checked on entry (see check.h).
  const int kFields1[] = {0, 0};
  const TypeDesc kTypes[] = {
    {Kind::kTensor, "Tensor[(), int32]", DLDataType{kDLInt, 32, 1}, 0, nullptr, 0, nullptr, 0, nullptr},  // 0
    {Kind::kTuple, "(Tensor[(), int32], Tensor[(), int32])", DLDataType{kDLInt, 0, 0}, 0, nullptr, 2, kFields1, 0, nullptr},  // 1
  };

  const int kMainParamTypes[] = {0};
  const char* const kMainParamNames[] = {"n"};
  // What the kernels need of the CPU: every entry checks it before anything runs (see cpu.h).
  const char* const kCpuFeatures[] = {
    "64bit", "cx8", "sse", "sse2",
  };
  const CpuRequirement kCpu{"llvm -keys=cpu -mtriple=x86_64-unknown-linux-gnu", kCpuFeatures, 4, {0}};
  const EntrySignature kEntrySignature{1, kTypes, kMainParamTypes, kMainParamNames, &kCpu, 1};

  // The program's signature as JSON (see relay_aot\x2fir\x2fsignature.py).
  const char kMetadata[477] = {
    123, 34, 97, 100, 116, 115, 34, 58, 32, 91, 123, 34, 99, 116, 111, 114, 115, 34, 58, 32, 91, 123, 34, 102,
    105, 101, 108, 100, 115, 34, 58, 32, 91, 91, 34, 112, 97, 114, 97, 109, 34, 44, 32, 48, 93, 44, 32, 91,
    34, 97, 100, 116, 34, 44, 32, 48, 44, 32, 91, 91, 34, 112, 97, 114, 97, 109, 34, 44, 32, 48, 93, 93,
    93, 93, 44, 32, 34, 110, 97, 109, 101, 34, 58, 32, 34, 67, 111, 110, 115, 34, 44, 32, 34, 116, 97, 103,
    34, 58, 32, 45, 50, 48, 49, 51, 50, 54, 53, 57, 50, 48, 125, 44, 32, 123, 34, 102, 105, 101, 108, 100,
    115, 34, 58, 32, 91, 93, 44, 32, 34, 110, 97, 109, 101, 34, 58, 32, 34, 78, 105, 108, 34, 44, 32, 34,
    116, 97, 103, 34, 58, 32, 45, 50, 48, 49, 51, 50, 54, 53, 57, 49, 57, 125, 93, 44, 32, 34, 110, 97,
    109, 101, 34, 58, 32, 34, 76, 105, 115, 116, 34, 44, 32, 34, 110, 117, 109, 95, 112, 97, 114, 97, 109, 115,
    34, 58, 32, 49, 125, 93, 44, 32, 34, 99, 112, 117, 34, 58, 32, 123, 34, 102, 101, 97, 116, 117, 114, 101,
    115, 34, 58, 32, 91, 34, 54, 52, 98, 105, 116, 34, 44, 32, 34, 99, 120, 56, 34, 44, 32, 34, 115, 115,
    101, 34, 44, 32, 34, 115, 115, 101, 50, 34, 93, 44, 32, 34, 116, 97, 114, 103, 101, 116, 34, 58, 32, 34,
    108, 108, 118, 109, 32, 45, 107, 101, 121, 115, 61, 99, 112, 117, 32, 45, 109, 116, 114, 105, 112, 108, 101, 61,
    120, 56, 54, 95, 54, 52, 45, 117, 110, 107, 110, 111, 119, 110, 45, 108, 105, 110, 117, 120, 45, 103, 110, 117,
    34, 125, 44, 32, 34, 102, 111, 114, 109, 97, 116, 34, 58, 32, 49, 44, 32, 34, 109, 111, 100, 101, 108, 34,
    58, 32, 34, 103, 111, 108, 100, 101, 110, 34, 44, 32, 34, 112, 97, 114, 97, 109, 115, 34, 58, 32, 91, 123,
    34, 110, 97, 109, 101, 34, 58, 32, 34, 110, 34, 44, 32, 34, 116, 121, 112, 101, 34, 58, 32, 91, 34, 116,
    101, 110, 115, 111, 114, 34, 44, 32, 91, 93, 44, 32, 34, 105, 110, 116, 51, 50, 34, 93, 125, 93, 44, 32,
    34, 114, 101, 116, 34, 58, 32, 91, 34, 116, 117, 112, 108, 101, 34, 44, 32, 91, 91, 34, 116, 101, 110, 115,
    111, 114, 34, 44, 32, 91, 93, 44, 32, 34, 105, 110, 116, 51, 50, 34, 93, 44, 32, 91, 34, 116, 101, 110,
    115, 111, 114, 34, 44, 32, 91, 93, 44, 32, 34, 105, 110, 116, 51, 50, 34, 93, 93, 93, 125,
  };
}  // namespace golden_relay_aot

// Exported entry points, in TVM's packed C calling convention.
extern "C" __attribute__((visibility("default"))) int relay_aot_main(TVMValue* args, int* type_codes, int num_args, TVMValue* ret, int* ret_type_code, void* resource) __asm__("golden");
int relay_aot_main(TVMValue* args, int* type_codes, int num_args, TVMValue* ret, int* ret_type_code, void* resource) {
  return relay_aot::packed_entry(args, type_codes, num_args, ret, ret_type_code, golden_relay_aot::kEntrySignature, golden_relay_aot::call_main);
}

extern "C" __attribute__((visibility("default"))) int relay_aot_metadata(TVMValue* args, int* type_codes, int num_args, TVMValue* ret, int* ret_type_code, void* resource) __asm__("golden__metadata");
int relay_aot_metadata(TVMValue* args, int* type_codes, int num_args, TVMValue* ret, int* ret_type_code, void* resource) {
  return relay_aot::packed_metadata(golden_relay_aot::kMetadata, sizeof(golden_relay_aot::kMetadata), ret, ret_type_code);
}

// TVM's name of the entry function: load_module(path).entry_func is the program.
// (Overrides the weak one TVM's kernel object defines when there is one kernel.)
extern "C" __attribute__((visibility("default"))) const char __tvm_main__[] = "golden";

// TVM's kernels call the runtime through these slots; TVM's loader would fill them. Defined
// here, hidden, so that the kernels work when a C program calls the typed entry directly.
extern "C" {
  __attribute__((visibility("hidden"))) void* __tvm_module_ctx = nullptr;
  __attribute__((visibility("hidden"))) decltype(&TVMFuncCall) __TVMFuncCall = &TVMFuncCall;
  __attribute__((visibility("hidden"))) decltype(&TVMAPISetLastError) __TVMAPISetLastError = &TVMAPISetLastError;
  __attribute__((visibility("hidden"))) decltype(&TVMBackendGetFuncFromEnv) __TVMBackendGetFuncFromEnv = &relay_aot::get_func_from_env;
  __attribute__((visibility("hidden"))) decltype(&TVMBackendAllocWorkspace) __TVMBackendAllocWorkspace = &TVMBackendAllocWorkspace;
  __attribute__((visibility("hidden"))) decltype(&TVMBackendFreeWorkspace) __TVMBackendFreeWorkspace = &TVMBackendFreeWorkspace;
  __attribute__((visibility("hidden"))) decltype(&TVMBackendParallelLaunch) __TVMBackendParallelLaunch = &relay_aot::parallel_launch;
  __attribute__((visibility("hidden"))) decltype(&TVMBackendParallelBarrier) __TVMBackendParallelBarrier = &TVMBackendParallelBarrier;
}  // extern "C"

// The C API (tvmgen_golden.h): @main on caller buffers, without TVM's calling convention.
#include "tvmgen_golden.h"

namespace golden_relay_aot {
  void run_c(const struct tvmgen_golden_inputs* inputs, const struct tvmgen_golden_outputs* outputs) {
    require_cpu(kCpu);  // before anything runs (cpu.h)
    c_require(inputs, "inputs");
    c_require(outputs, "outputs");
    int32_t in0 = c_scalar<int32_t>(inputs->n, "input n (%n)");
    ADT result = f0(in0);
    c_output(field(result, 0), outputs->output0, 4, "output output0 (result[0])");
    c_output(field(result, 1), outputs->output1, 4, "output output1 (result[1])");
  }
}  // namespace golden_relay_aot

extern "C" __attribute__((visibility("default"))) int32_t tvmgen_golden_run(struct tvmgen_golden_inputs* inputs, struct tvmgen_golden_outputs* outputs) {
  return relay_aot::c_call(golden_relay_aot::run_c, inputs, outputs);
}

extern "C" __attribute__((visibility("default"))) const char* tvmgen_golden_last_error(void) { return relay_aot::c_last_error(); }

// ===== unit0.cc =====
// unit0.cc
#include "program.h"

namespace golden_relay_aot {
  // @main(%n: Tensor[(), int32]) -> (Tensor[(), int32], Tensor[(), int32])
  ADT f0(int32_t v0) {
    if (stack_low()) return on_new_stack([&] { return f0(v0); });  // deep recursion
    int32_t v1 = f1(v0);  // @fib(...)
    ADT v2 = make_adt(-2013265919);  // Nil
    const int32_t v3 = unbox<int32_t>(constants()[0]);  // constant
    ADT v4 = make_adt(-2013265920, box(v3), std::move(v2));  // Cons
    ADT v5 = make_adt(-2013265920, box(v0), std::move(v4));  // Cons
    const int32_t v6 = unbox<int32_t>(constants()[1]);  // constant
    int32_t v7 = f2(v5, v6);  // @sum(...)
    ADT v8 = make_adt(0, box(v1), box(v7));  // tuple
    return v8;
  }

  // @fib(%n: Tensor[(), int32]) -> Tensor[(), int32]
  int32_t f1(int32_t v9) {
    if (stack_low()) return on_new_stack([&] { return f1(v9); });  // deep recursion
    bool v10 = (v9 < int32_t(2LL));  // kernel: less (k0)
    int32_t v11;  // if
    if (v10) {
      v11 = v9;
    } else {
      int32_t v12 = static_cast<int32_t>(v9 - int32_t(1LL));  // kernel: subtract (k1)
      int32_t v13 = f1(v12);  // @fib(...)
      int32_t v14 = static_cast<int32_t>(v9 - int32_t(2LL));  // kernel: subtract (k2)
      int32_t v15 = f1(v14);  // @fib(...)
      int32_t v16 = static_cast<int32_t>(v13 + v15);  // kernel: add (k3)
      v11 = v16;
    }
    return v11;
  }

  // @sum(%l: List[Tensor[(), int32]], %acc: Tensor[(), int32]) -> Tensor[(), int32]
  int32_t f2(ADT v17, int32_t v18) {
    if (stack_low()) return on_new_stack([&] { return f2(v17, v18); });  // deep recursion
    while (true) {  // self tail calls continue here
      int32_t v19;  // match
      if (tag(v17) == -2013265920) {  // Cons(%h, %t)
        int32_t v20 = unbox<int32_t>(field(v17, 0));  // %h
        ADT v21 = as<ADT>(field(v17, 1));  // %t
        int32_t v22 = static_cast<int32_t>(v18 + v20);  // kernel: add (k3)
        {  // self tail call
          ADT t0 = std::move(v21);
          int32_t t1 = v22;
          v17 = std::move(t0);
          v18 = std::move(t1);
        }
        continue;
      } else if (tag(v17) == -2013265919) {  // Nil
        v19 = v18;
      } else {
        raise_match_failure("@sum");
      }
      return v19;
    }
  }
}  // namespace golden_relay_aot

// ===== exports.map =====
/* Generated by relay_aot: the symbols the library of model golden exports. */
{
  global:
    "golden";
    "golden__metadata";
    "__tvm_main__";
    "tvmgen_golden_run";
    "tvmgen_golden_last_error";
    golden_k*;
  local:
    *;
};

// ===== tvmgen_golden.h =====
/* Generated by relay_aot for model golden: the C API of its library. Do not edit.
 *
 * tvmgen_golden_run runs @main on C-contiguous buffers of the declared dtype and shape (a 0-d
 * tensor is one element; bool is one byte per element): the inputs, never modified, and the
 * outputs, which the caller allocates and the run writes. It returns 0 on success; otherwise
 * non-zero, and tvmgen_golden_last_error() says why, for the calling thread. Link the model's
 * library and libtvm_runtime.so; calls from several threads may run at once.
 *
 * The kernels were compiled for this target (on a CPU without a feature it enables, the run
 * returns non-zero, naming the missing ones):
 *   llvm -keys=cpu -mtriple=x86_64-unknown-linux-gnu
 */
#ifndef TVMGEN_GOLDEN_H_
#define TVMGEN_GOLDEN_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of each buffer. */
#define TVMGEN_GOLDEN_N_SIZE 4 /* %n: Tensor[(), int32] */
#define TVMGEN_GOLDEN_OUTPUT0_SIZE 4 /* result[0]: Tensor[(), int32] */
#define TVMGEN_GOLDEN_OUTPUT1_SIZE 4 /* result[1]: Tensor[(), int32] */

/* One buffer per parameter of @main. */
struct tvmgen_golden_inputs {
  void* n; /* %n: Tensor[(), int32] */
};

/* One buffer per result tensor, depth first. */
struct tvmgen_golden_outputs {
  void* output0; /* result[0]: Tensor[(), int32] */
  void* output1; /* result[1]: Tensor[(), int32] */
};

int32_t tvmgen_golden_run(struct tvmgen_golden_inputs* inputs, struct tvmgen_golden_outputs* outputs);

/* Why the calling thread's last failed tvmgen_golden_run failed ("" if none did). */
const char* tvmgen_golden_last_error(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* TVMGEN_GOLDEN_H_ */

