/*
 * examples/c_deploy/deploy.c: run the LSTM example (examples/lstm.relay) through its plain C
 * API, a C99 program that links only the model's library and libtvm_runtime.so.
 *
 *     relay-aot compile examples/lstm.relay -o lstm.so --name lstm --c-header tvmgen_lstm.h
 *     deploy XS W_IH W_HH BIAS
 *
 * Each input is a .npy file (numpy.save) or a raw file of the buffer's bytes, in the order of
 * @main's parameters. The result prints as `relay-aot run` prints it (docs/deployment.md).
 */
#include <stdio.h>
#include <stdlib.h>

#include "npy.h"
#include "tvmgen_lstm.h"

int main(int argc, char** argv) {
  static const size_t kSizes[4] = {TVMGEN_LSTM_XS_SIZE, TVMGEN_LSTM_W_IH_SIZE, TVMGEN_LSTM_W_HH_SIZE,
                                   TVMGEN_LSTM_BIAS_SIZE};
  static const int64_t kOutputShape[2] = {1, 16}; /* result[0] and result[1]: Tensor[(1, 16), float32] */
  struct tensor in[4];
  struct tvmgen_lstm_inputs inputs;
  struct tvmgen_lstm_outputs outputs;
  float h[TVMGEN_LSTM_OUTPUT0_SIZE / sizeof(float)], c[TVMGEN_LSTM_OUTPUT1_SIZE / sizeof(float)];
  int i;
  if (argc != 5) {
    fprintf(stderr, "usage: %s XS W_IH W_HH BIAS (.npy or raw files)\n", argv[0]);
    return 2;
  }
  for (i = 0; i < 4; ++i) {
    if (read_tensor("deploy", argv[i + 1], kSizes[i], &in[i]) != 0) return 1;
  }
  inputs.xs = in[0].data;
  inputs.w_ih = in[1].data;
  inputs.w_hh = in[2].data;
  inputs.bias = in[3].data;
  outputs.output0 = h;
  outputs.output1 = c;

  if (tvmgen_lstm_run(&inputs, &outputs) != 0) {
    fprintf(stderr, "deploy: error: %s\n", tvmgen_lstm_last_error());
    return 1;
  }
  printf("result = adt tag 0, 2 fields\n");
  print_tensor("result[0]", "float32", kOutputShape, 2, h);
  print_tensor("result[1]", "float32", kOutputShape, 2, c);
  for (i = 0; i < 4; ++i) free(in[i].data);
  return 0;
}
