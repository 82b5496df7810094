/*
 * examples/c_deploy/npy.h: reading inputs (.npy or raw files) and printing tensors the way
 * `relay-aot run` prints them, in C99. Used by deploy.c (the typed C API) and packed.c (TVM's
 * C runtime API).
 */
#ifndef C_DEPLOY_NPY_H_
#define C_DEPLOY_NPY_H_

#include <stddef.h>
#include <stdint.h>

/* A tensor read from a file: 64-byte aligned data (free with free()), dtype as TVM names it. */
struct tensor {
  void* data;
  size_t nbytes;
  char dtype[16];
  int ndim;
  int64_t shape[8];
};

/*
 * Read PATH into T: a NumPy .npy file (version 1-3, little-endian, C order; bool, int8-64,
 * uint8-64, float32, float64), or any other file as raw bytes of EXPECTED_BYTES (then T has no
 * dtype or shape). With EXPECTED_BYTES non-zero, the data must have that size. On failure,
 * prints "PROG: error: ..." to stderr and returns non-zero.
 */
int read_tensor(const char* prog, const char* path, size_t expected_bytes, struct tensor* t);

/* Print "PATH = DTYPE[SHAPE] elements..." as `relay-aot run` does (floats with %.9g/%.17g). */
void print_tensor(const char* path, const char* dtype, const int64_t* shape, int ndim, const void* data);

#endif /* C_DEPLOY_NPY_H_ */
