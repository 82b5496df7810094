/*
 * examples/c_deploy/npy.c: see npy.h.
 */
#define _POSIX_C_SOURCE 200112L /* posix_memalign */

#include "npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NumPy's dtype descriptors and TVM's names for them. */
static const char* const kDtypes[][2] = {
    {"|b1", "bool"},   {"|i1", "int8"},   {"<i2", "int16"},   {"<i4", "int32"},
    {"<i8", "int64"},  {"|u1", "uint8"},  {"<u2", "uint16"},  {"<u4", "uint32"},
    {"<u8", "uint64"}, {"<f4", "float32"}, {"<f8", "float64"},
};

static int fail(const char* prog, const char* path, const char* what) {
  fprintf(stderr, "%s: error: %s: %s\n", prog, path, what);
  return 1;
}

/* The text after `'key': ` in an .npy header, or NULL. */
static const char* header_field(const char* header, const char* key) {
  char quoted[32];
  const char* at;
  snprintf(quoted, sizeof(quoted), "'%s'", key);
  at = strstr(header, quoted);
  if (at == NULL) return NULL;
  at = strchr(at + strlen(quoted), ':');
  if (at == NULL) return NULL;
  for (++at; *at == ' '; ++at) {
  }
  return at;
}

/* Element size of a TVM dtype name (bool: one byte). */
static size_t element_bytes(const char* dtype) {
  if (strcmp(dtype, "bool") == 0) return 1;
  return (size_t)atoi(dtype + strcspn(dtype, "0123456789")) / 8;
}

/* Parse the header of an .npy file of SIZE bytes; returns the data offset, 0 on failure. */
static size_t parse_npy(const char* prog, const char* path, const unsigned char* bytes, size_t size,
                        struct tensor* t) {
  size_t header_len, offset, count = 1, i;
  const char *descr, *dims;
  char header[4096];
  if (size < 10 || memcmp(bytes, "\x93NUMPY", 6) != 0) return 0;
  if (bytes[6] == 1) {
    header_len = bytes[8] | (size_t)bytes[9] << 8;
    offset = 10;
  } else {
    header_len = bytes[8] | (size_t)bytes[9] << 8 | (size_t)bytes[10] << 16 | (size_t)bytes[11] << 24;
    offset = 12;
  }
  if (offset + header_len > size || header_len >= sizeof(header)) {
    fail(prog, path, "truncated .npy header");
    return 0;
  }
  memcpy(header, bytes + offset, header_len);
  header[header_len] = '\0';
  descr = header_field(header, "descr");
  t->dtype[0] = '\0';
  for (i = 0; descr != NULL && i < sizeof(kDtypes) / sizeof(kDtypes[0]); ++i) {
    if (strncmp(descr + 1, kDtypes[i][0], 3) == 0 && descr[4] == '\'') strcpy(t->dtype, kDtypes[i][1]);
  }
  if (t->dtype[0] == '\0') {
    fail(prog, path, "unsupported .npy dtype");
    return 0;
  }
  if (header_field(header, "fortran_order") == NULL || strncmp(header_field(header, "fortran_order"), "False", 5)) {
    fail(prog, path, "Fortran-ordered arrays are not supported");
    return 0;
  }
  dims = header_field(header, "shape");
  t->ndim = 0;
  while (dims != NULL && *dims != ')' && *dims != '\0') {
    char* end;
    long long d = strtoll(dims + 1, &end, 10);
    if (end == dims + 1 || t->ndim == 8) break; /* "()" or "(3,)": no number after the comma */
    t->shape[t->ndim++] = d;
    count *= (size_t)d;
    dims = end;
  }
  t->nbytes = count * element_bytes(t->dtype);
  if (offset + header_len + t->nbytes != size) {
    fail(prog, path, "data size does not match the .npy header");
    return 0;
  }
  return offset + header_len;
}

int read_tensor(const char* prog, const char* path, size_t expected_bytes, struct tensor* t) {
  FILE* f = fopen(path, "rb");
  unsigned char* bytes;
  long size;
  size_t offset = 0, suffix = strlen(path);
  if (f == NULL) return fail(prog, path, "cannot open");
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  fseek(f, 0, SEEK_SET);
  bytes = malloc(size > 0 ? (size_t)size : 1);
  if (bytes == NULL || fread(bytes, 1, (size_t)size, f) != (size_t)size) {
    fclose(f);
    free(bytes);
    return fail(prog, path, "cannot read");
  }
  fclose(f);
  memset(t, 0, sizeof(*t));
  if (suffix >= 4 && strcmp(path + suffix - 4, ".npy") == 0) {
    int is_npy = size >= 6 && memcmp(bytes, "\x93NUMPY", 6) == 0;
    offset = parse_npy(prog, path, bytes, (size_t)size, t);
    if (offset == 0) {
      free(bytes);
      return is_npy ? 1 : fail(prog, path, "not a .npy file");
    }
  } else {
    t->nbytes = (size_t)size; /* raw bytes */
  }
  if (expected_bytes != 0 && t->nbytes != expected_bytes) {
    char what[96];
    snprintf(what, sizeof(what), "%lu bytes of data, expected %lu", (unsigned long)t->nbytes,
             (unsigned long)expected_bytes);
    free(bytes);
    return fail(prog, path, what);
  }
  /* 64-byte aligned, as TVM allocates tensors: the run reads it in place, without a copy. */
  if (posix_memalign(&t->data, 64, t->nbytes > 0 ? t->nbytes : 1) != 0) {
    free(bytes);
    return fail(prog, path, "out of memory");
  }
  memcpy(t->data, bytes + offset, t->nbytes);
  free(bytes);
  return 0;
}

/* Element I of DATA as Python prints it: format(x, ".9g") for float32, ".17g" for float64. */
static void print_element(const char* dtype, const void* data, int64_t i) {
  double x;
  if (strcmp(dtype, "float32") == 0 || strcmp(dtype, "float64") == 0) {
    x = dtype[5] == '3' ? ((const float*)data)[i] : ((const double*)data)[i];
    if (x != x) {
      printf(" nan");
    } else {
      printf(" %.*g", dtype[5] == '3' ? 9 : 17, x);
    }
  } else if (strcmp(dtype, "bool") == 0) {
    printf(" %s", ((const uint8_t*)data)[i] ? "true" : "false");
  } else if (strcmp(dtype, "int8") == 0) {
    printf(" %d", ((const int8_t*)data)[i]);
  } else if (strcmp(dtype, "int16") == 0) {
    printf(" %d", ((const int16_t*)data)[i]);
  } else if (strcmp(dtype, "int32") == 0) {
    printf(" %ld", (long)((const int32_t*)data)[i]);
  } else if (strcmp(dtype, "int64") == 0) {
    printf(" %lld", (long long)((const int64_t*)data)[i]);
  } else if (strcmp(dtype, "uint8") == 0) {
    printf(" %u", ((const uint8_t*)data)[i]);
  } else if (strcmp(dtype, "uint16") == 0) {
    printf(" %u", ((const uint16_t*)data)[i]);
  } else if (strcmp(dtype, "uint32") == 0) {
    printf(" %lu", (unsigned long)((const uint32_t*)data)[i]);
  } else if (strcmp(dtype, "uint64") == 0) {
    printf(" %llu", (unsigned long long)((const uint64_t*)data)[i]);
  } else {
    printf(" ?");
  }
}

void print_tensor(const char* path, const char* dtype, const int64_t* shape, int ndim, const void* data) {
  int64_t count = 1, i;
  int d;
  printf("%s = %s[", path, dtype);
  for (d = 0; d < ndim; ++d) {
    printf("%s%lld", d ? ", " : "", (long long)shape[d]);
    count *= shape[d];
  }
  printf("]");
  for (i = 0; i < count; ++i) print_element(dtype, data, i);
  printf("\n");
}
