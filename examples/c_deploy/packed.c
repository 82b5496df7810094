/*
 * examples/c_deploy/packed.c: run any library relay_aot exported through TVM's C runtime API
 * (the W1b path: the PackedFunc entry called from C), linking only libtvm_runtime.so.
 *
 *     packed LIBRARY.so [INPUT.npy ...]
 *
 * TVMModLoadFromFile loads the library, TVMModGetFunction takes its entry (`__tvm_main__`,
 * which relay_aot sets to the model's entry), TVMFuncCall calls it with one tensor per .npy
 * file, and the result -- a tensor, or a tuple/constructor value (an ADT, read through the
 * runtime's `runtime.GetADTTag`/`GetADTSize`/`GetADTFields` functions) -- prints as
 * `relay-aot run` prints it. Any other value prints its type key.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tvm/runtime/c_runtime_api.h>

#include "npy.h"

static TVMFunctionHandle adt_tag, adt_size, adt_field;

/* Check a TVM C API status: on failure print TVM's message (its first line) and exit. */
static void check(int status) {
  if (status != 0) {
    const char* message = TVMGetLastError();
    fprintf(stderr, "packed: error: %.*s\n", (int)strcspn(message, "\n"), message);
    exit(1);
  }
}

/* Call a global function on one object (and an index); the result's value and type code. */
static TVMValue call_global(TVMFunctionHandle f, TVMValue object, int index, int* code) {
  TVMValue args[2], ret;
  int codes[2] = {kTVMObjectHandle, kDLInt};
  args[0] = object;
  args[1].v_int64 = index;
  check(TVMFuncCall(f, args, codes, 2, &ret, code));
  return ret;
}

static void dtype_name(DLDataType t, char* out, size_t size) {
  if (t.code == kDLUInt && t.bits == 1) {
    snprintf(out, size, "bool");
  } else {
    snprintf(out, size, "%s%d", t.code == kDLInt ? "int" : t.code == kDLUInt ? "uint" : "float", t.bits);
  }
}

/* Print a returned value and release it. */
static void print_value(TVMValue value, int code, const char* path) {
  if (code == kTVMNDArrayHandle) {
    DLTensor* t = (DLTensor*)value.v_handle;
    char dtype[16];
    dtype_name(t->dtype, dtype, sizeof(dtype));
    print_tensor(path, dtype, t->shape, t->ndim, (const char*)t->data + t->byte_offset);
    check(TVMArrayFree(t));
  } else if (code == kTVMObjectHandle) {
    unsigned index, adt_index;
    check(TVMObjectGetTypeIndex(value.v_handle, &index));
    check(TVMObjectTypeKey2Index("runtime.ADT", &adt_index));
    if (index == adt_index) {
      int tag_code, size_code, i;
      int64_t tag = call_global(adt_tag, value, 0, &tag_code).v_int64;
      int64_t size = call_global(adt_size, value, 0, &size_code).v_int64;
      printf("%s = adt tag %lld, %lld fields\n", path, (long long)tag, (long long)size);
      for (i = 0; i < size; ++i) {
        char field_path[256];
        int field_code;
        TVMValue field = call_global(adt_field, value, i, &field_code);
        snprintf(field_path, sizeof(field_path), "%s[%d]", path, i);
        print_value(field, field_code, field_path);
      }
    } else {
      char* key;
      check(TVMObjectTypeIndex2Key(index, &key));
      printf("%s = %s\n", path, key);
      free(key);
    }
    check(TVMObjectFree(value.v_handle));
  } else {
    printf("%s = (type code %d)\n", path, code);
  }
}

int main(int argc, char** argv) {
  TVMModuleHandle module;
  TVMFunctionHandle entry;
  TVMValue* args;
  TVMValue result;
  int *codes, result_code, i, n = argc - 2;
  if (argc < 2) {
    fprintf(stderr, "usage: %s LIBRARY.so [INPUT.npy ...]\n", argv[0]);
    return 2;
  }
  check(TVMModLoadFromFile(argv[1], "so", &module));
  check(TVMModGetFunction(module, "__tvm_main__", 0, &entry));
  if (entry == NULL) {
    fprintf(stderr, "packed: error: %s has no entry function\n", argv[1]);
    return 1;
  }
  check(TVMFuncGetGlobal("runtime.GetADTTag", &adt_tag));
  check(TVMFuncGetGlobal("runtime.GetADTSize", &adt_size));
  check(TVMFuncGetGlobal("runtime.GetADTFields", &adt_field));

  args = calloc(n + 1, sizeof(TVMValue));
  codes = calloc(n + 1, sizeof(int));
  for (i = 0; i < n; ++i) {
    struct tensor t;
    DLTensor* array;
    DLDataType dtype;
    if (read_tensor("packed", argv[i + 2], 0, &t) != 0) return 1;
    if (t.dtype[0] == '\0') {
      fprintf(stderr, "packed: error: %s: expected a .npy file\n", argv[i + 2]);
      return 1;
    }
    dtype.code = t.dtype[0] == 'f' ? kDLFloat : t.dtype[0] == 'i' ? kDLInt : kDLUInt;
    dtype.bits = strcmp(t.dtype, "bool") == 0 ? 1 : (uint8_t)atoi(t.dtype + strcspn(t.dtype, "0123456789"));
    dtype.lanes = 1;
    check(TVMArrayAlloc(t.shape, t.ndim, dtype.code, dtype.bits, dtype.lanes, kDLCPU, 0, &array));
    check(TVMArrayCopyFromBytes(array, t.data, t.nbytes));
    free(t.data);
    args[i].v_handle = array;
    codes[i] = kTVMDLTensorHandle;
  }
  check(TVMFuncCall(entry, args, codes, n, &result, &result_code));
  print_value(result, result_code, "result");
  for (i = 0; i < n; ++i) check(TVMArrayFree((DLTensor*)args[i].v_handle));
  free(args);
  free(codes);
  check(TVMFuncFree(entry));
  check(TVMModFree(module));
  return 0;
}
