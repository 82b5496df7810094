// TFLite Micro backend of the harness: the model as a const array in flash (model_data.c),
// a MicroMutableOpResolver with exactly the model's ops (-DOP_CONV_2D ...), a MicroInterpreter
// over a static arena of ARENA_SIZE bytes, AllocateTensors at init; per inference a memcpy of the
// input into the input tensor and Invoke(). No static constructors (startup.c runs none):
// the resolver and interpreter are placement-new'ed into static storage at init.
#include <stdint.h>
#include <string.h>

#include <new>

#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/schema/schema_generated.h"

extern "C" const unsigned char g_model[];

#ifndef ARENA_SIZE
#error "ARENA_SIZE"
#endif

namespace {
constexpr int kNumOps =
#ifdef OP_CONV_2D
    1 +
#endif
#ifdef OP_DEPTHWISE_CONV_2D
    1 +
#endif
#ifdef OP_AVERAGE_POOL_2D
    1 +
#endif
#ifdef OP_RESHAPE
    1 +
#endif
#ifdef OP_FULLY_CONNECTED
    1 +
#endif
#ifdef OP_SOFTMAX
    1 +
#endif
#ifdef OP_ADD
    1 +
#endif
    0;
using Resolver = tflite::MicroMutableOpResolver<kNumOps>;
alignas(16) uint8_t tensor_arena[ARENA_SIZE];
alignas(Resolver) uint8_t resolver_storage[sizeof(Resolver)];
alignas(tflite::MicroInterpreter) uint8_t interpreter_storage[sizeof(tflite::MicroInterpreter)];
tflite::MicroInterpreter* interpreter;
}  // namespace

// -DINT8_ONLY: the int8-only registrations CMSIS-NN's kernels offer (Register_CONV_2D_INT8, ...),
// which leave out the int16/int4 paths the default registrations link in (a variant: flash).
#ifdef INT8_ONLY
#define REG(OP) tflite::Register_##OP##_INT8()
#else
#define REG(OP) tflite::Register_##OP()
#endif

#ifdef MARK_OPS
// Profiling build only: every operator's invoke is wrapped to call harness_mark() before and
// after it; the counting plugin (mark=ADDR) records the instruction count at each call.
extern "C" __attribute__((noinline)) void harness_mark(void) { __asm volatile(""); }
template <int N>
struct Wrapped {
  static TfLiteStatus (*original)(TfLiteContext*, TfLiteNode*);
  static TfLiteStatus invoke(TfLiteContext* context, TfLiteNode* node) {
    harness_mark();
    TfLiteStatus status = original(context, node);
    harness_mark();
    return status;
  }
};
template <int N>
TfLiteStatus (*Wrapped<N>::original)(TfLiteContext*, TfLiteNode*);
template <int N>
TFLMRegistration wrap(TFLMRegistration r) {
  Wrapped<N>::original = r.invoke;
  r.invoke = Wrapped<N>::invoke;
  return r;
}
#define WRAP(N, R) wrap<N>(R)
#else
#define WRAP(N, R) R
#endif

extern "C" unsigned long tflm_arena_used(void) { return interpreter ? interpreter->arena_used_bytes() : 0; }

extern "C" int backend_init(void) {
  const tflite::Model* model = tflite::GetModel(g_model);
  Resolver* resolver = new (resolver_storage) Resolver();
#ifdef OP_CONV_2D
  if (resolver->AddConv2D(WRAP(0, REG(CONV_2D))) != kTfLiteOk) return 1;
#endif
#ifdef OP_DEPTHWISE_CONV_2D
  if (resolver->AddDepthwiseConv2D(WRAP(1, REG(DEPTHWISE_CONV_2D))) != kTfLiteOk) return 1;
#endif
#ifdef OP_AVERAGE_POOL_2D
  if (resolver->AddAveragePool2D(WRAP(2, REG(AVERAGE_POOL_2D))) != kTfLiteOk) return 1;
#endif
#ifdef OP_RESHAPE
  if (resolver->AddReshape(WRAP(3, tflite::Register_RESHAPE())) != kTfLiteOk) return 1;
#endif
#ifdef OP_FULLY_CONNECTED
  if (resolver->AddFullyConnected(WRAP(4, REG(FULLY_CONNECTED))) != kTfLiteOk) return 1;
#endif
#ifdef OP_SOFTMAX
  if (resolver->AddSoftmax(WRAP(5, REG(SOFTMAX))) != kTfLiteOk) return 1;
#endif
#ifdef OP_ADD
  if (resolver->AddAdd(WRAP(6, REG(ADD))) != kTfLiteOk) return 1;
#endif
  interpreter = new (interpreter_storage) tflite::MicroInterpreter(model, *resolver, tensor_arena, ARENA_SIZE);
  if (interpreter->AllocateTensors() != kTfLiteOk) return 2;
  return 0;
}

extern "C" int backend_run(const int8_t* input) {
  TfLiteTensor* in = interpreter->input(0);
  memcpy(in->data.int8, input, in->bytes);
  return interpreter->Invoke() == kTfLiteOk ? 0 : 1;
}

extern "C" void backend_output(int8_t* output) {
  TfLiteTensor* out = interpreter->output(0);
  memcpy(output, out->data.int8, out->bytes);
}
