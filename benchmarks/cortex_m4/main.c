/* The common C99 main of every system of benchmarks/tinyml_m4.py on QEMU's mps2-an386
 * (Cortex-M4F), linked with examples/standalone/cortex-m4's start-up code and linker script.
 *
 * A backend (tflm_backend.cc: TFLite Micro; api_backend.c, written by tinyml_m4.py: a relay_aot
 * package or TVM's AOT output, through their C API) provides backend_init / backend_run /
 * backend_output. "inputs.h" (written by tinyml_m4.py) holds the model's test inputs:
 * INPUT_SIZE, OUTPUT_SIZE, NUM_INPUTS, inputs[NUM_INPUTS][INPUT_SIZE].
 *
 *   -DRUNS=n    count build: init, then n inferences on inputs[0], then print the output once
 *               (instructions per inference = (count(RUNS=N+1) - count(RUNS=1)) / N)
 *   -DVERIFY    verification build: one inference on each input, each output printed
 *
 * The stack is painted before init and again before the inferences; the deepest word touched
 * gives the stack peak of each phase (including this file's small frames), read before anything
 * is printed (printf's frames are deeper than some models'; in the VERIFY build, which prints
 * between inferences, they are included). Output goes through newlib's semihosting; the exit
 * code is 0 on success. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "inputs.h"

int backend_init(void);
int backend_run(const int8_t* input);
void backend_output(int8_t* output);

extern uint32_t __stack_limit__, __stack_top__;

#define PAINT 0xC5C5C5C5u

static __attribute__((noinline)) void paint_stack(void) {
  uint32_t* sp;
  __asm volatile("mov %0, sp" : "=r"(sp));
  for (uint32_t* p = &__stack_limit__; p < sp - 16; p++) *p = PAINT; /* leave 64 bytes below sp */
}

static __attribute__((noinline)) uint32_t stack_used(void) {
  uint32_t* p = &__stack_limit__;
  while (p < &__stack_top__ && *p == PAINT) p++;
  return (uint32_t)((uintptr_t)&__stack_top__ - (uintptr_t)p);
}

static int8_t output[OUTPUT_SIZE];

static void print_output(int index) {
  printf("OUT %d ", index);
  for (int i = 0; i < OUTPUT_SIZE; i++) printf("%02x", (unsigned)(uint8_t)output[i]);
  printf("\n");
}

int main(void) {
  paint_stack();
  if (backend_init() != 0) {
    printf("ERROR init\n");
    return 1;
  }
  uint32_t stack_init = stack_used();
  paint_stack();
#ifdef VERIFY
  for (int k = 0; k < NUM_INPUTS; k++) {
    if (backend_run(inputs[k]) != 0) {
      printf("ERROR run\n");
      return 2;
    }
    backend_output(output);
    print_output(k);
  }
  uint32_t stack_run = stack_used();
#else
  for (int r = 0; r < RUNS; r++) {
    if (backend_run(inputs[0]) != 0) {
      printf("ERROR run\n");
      return 2;
    }
  }
  uint32_t stack_run = stack_used();
  backend_output(output);
  print_output(0);
#endif
  printf("STACK init=%lu run=%lu\n", (unsigned long)stack_init, (unsigned long)stack_run);
  return 0;
}
