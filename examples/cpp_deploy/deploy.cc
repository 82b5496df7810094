/*!
 * \file examples/cpp_deploy/deploy.cc
 * \brief Run a library exported by relay_aot from C++, with libtvm_runtime.so only.
 *
 *     deploy LIBRARY.so [INPUT.npy ...]
 *
 * Loads the library the way every TVM artifact is loaded (tvm::runtime::Module::LoadFromFile),
 * takes its entry PackedFunc (`__tvm_main__`, which relay_aot sets to the model's entry, so no
 * name is needed), calls it with one tensor per .npy file -- in the order of @main's
 * parameters -- and prints the result in the format `relay-aot run` prints (docs/deployment.md):
 *
 *     result = adt tag 0, 2 fields
 *     result[0] = float32[1, 16] 0.0120918201 -0.0454090536 ...
 *
 * Input files are NumPy's .npy format (`numpy.save`), version 1-3, little-endian, C order;
 * dtypes bool, int8-64, uint8-64, float32 and float64.
 */
#include <tvm/runtime/container/adt.h>
#include <tvm/runtime/container/array.h>
#include <tvm/runtime/module.h>
#include <tvm/runtime/ndarray.h>
#include <tvm/runtime/packed_func.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using tvm::runtime::ADTObj;
using tvm::runtime::ArrayNode;
using tvm::runtime::Module;
using tvm::runtime::NDArray;
using tvm::runtime::ObjectRef;
using tvm::runtime::PackedFunc;
using tvm::runtime::PackedFuncObj;
using tvm::runtime::ShapeTuple;
using tvm::runtime::TVMArgs;
using tvm::runtime::TVMArgsSetter;
using tvm::runtime::TVMRetValue;

namespace {

/*! \brief The value of `'key': ...` in an .npy header dictionary (up to the next ',' or ')'). */
std::string header_field(const std::string& header, const std::string& key, const std::string& path) {
  size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) throw std::runtime_error(path + ": .npy header has no '" + key + "'");
  size_t start = header.find(':', at) + 1;
  while (header[start] == ' ') ++start;
  size_t end = header[start] == '(' ? header.find(')', start) + 1 : header.find_first_of(",}", start);
  return header.substr(start, end - start);
}

/*! \brief Read a NumPy .npy file into a CPU tensor. */
NDArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) {
    throw std::runtime_error(path + ": not a .npy file");
  }
  int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    offset = 10;
  } else {
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= size_t(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    offset = 12;
  }
  if (offset + header_len > bytes.size()) throw std::runtime_error(path + ": truncated .npy header");
  std::string header = bytes.substr(offset, header_len);

  static const std::map<std::string, DLDataType> kDtypes = {
      {"'|b1'", {kDLUInt, 1, 1}},     {"'|i1'", {kDLInt, 8, 1}},     {"'<i2'", {kDLInt, 16, 1}},
      {"'<i4'", {kDLInt, 32, 1}},     {"'<i8'", {kDLInt, 64, 1}},    {"'|u1'", {kDLUInt, 8, 1}},
      {"'<u2'", {kDLUInt, 16, 1}},    {"'<u4'", {kDLUInt, 32, 1}},   {"'<u8'", {kDLUInt, 64, 1}},
      {"'<f4'", {kDLFloat, 32, 1}},   {"'<f8'", {kDLFloat, 64, 1}},
  };
  std::string descr = header_field(header, "descr", path);
  auto dtype = kDtypes.find(descr);
  if (dtype == kDtypes.end()) throw std::runtime_error(path + ": unsupported dtype " + descr);
  if (header_field(header, "fortran_order", path) != "False") {
    throw std::runtime_error(path + ": Fortran-ordered arrays are not supported");
  }
  std::vector<int64_t> shape;
  std::string dims = header_field(header, "shape", path);
  for (size_t i = 1; i < dims.size();) {  // "(10, 1, 8)", "(3,)" or "()"
    size_t used = 0;
    if (std::isdigit(static_cast<unsigned char>(dims[i]))) {
      shape.push_back(std::stoll(dims.substr(i), &used));
    }
    i += used + 1;
  }
  NDArray array = NDArray::Empty(ShapeTuple(shape), dtype->second, DLDevice{kDLCPU, 0});
  size_t nbytes = tvm::runtime::GetDataSize(*array.operator->());
  if (offset + header_len + nbytes != bytes.size()) {
    throw std::runtime_error(path + ": data size does not match the header");
  }
  array.CopyFromBytes(bytes.data() + offset + header_len, nbytes);
  return array;
}

/*! \brief TVM's name of a dtype (bool is TVM's 1-bit unsigned integer, stored in bytes). */
std::string dtype_name(DLDataType t) {
  if (t.code == kDLUInt && t.bits == 1) return "bool";
  const char* base = t.code == kDLInt ? "int" : t.code == kDLUInt ? "uint" : t.code == kDLFloat ? "float" : "?";
  return base + std::to_string(t.bits);
}

template <typename T>
std::string integer(const void* data, int64_t i) {
  return std::to_string(static_cast<const T*>(data)[i]);
}

/*! \brief Element \p i, as Python prints it: format(x, ".9g") for float32, ".17g" for float64. */
std::string element(const void* data, DLDataType t, int64_t i) {
  auto real = [](double x, int digits) {
    if (std::isnan(x)) return std::string("nan");
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.*g", digits, x);
    return std::string(buf);
  };
  int kind = t.code * 100 + t.bits;
  switch (kind) {
    case kDLFloat * 100 + 32: return real(static_cast<const float*>(data)[i], 9);
    case kDLFloat * 100 + 64: return real(static_cast<const double*>(data)[i], 17);
    case kDLUInt * 100 + 1: return static_cast<const uint8_t*>(data)[i] ? "true" : "false";
    case kDLInt * 100 + 8: return integer<int8_t>(data, i);
    case kDLInt * 100 + 16: return integer<int16_t>(data, i);
    case kDLInt * 100 + 32: return integer<int32_t>(data, i);
    case kDLInt * 100 + 64: return integer<int64_t>(data, i);
    case kDLUInt * 100 + 8: return integer<uint8_t>(data, i);
    case kDLUInt * 100 + 16: return integer<uint16_t>(data, i);
    case kDLUInt * 100 + 32: return integer<uint32_t>(data, i);
    case kDLUInt * 100 + 64: return integer<uint64_t>(data, i);
    default: return "?";
  }
}

/*! \brief Print a runtime value: one line per tensor, tuple/ADT, reference or function. */
void print_value(const ObjectRef& value, const std::string& path) {
  if (!value.defined()) {
    std::cout << path << " = null\n";
  } else if (const auto* adt = value.as<ADTObj>()) {
    std::cout << path << " = adt tag " << adt->tag << ", " << adt->size << " fields\n";
    for (uint32_t i = 0; i < adt->size; ++i) print_value((*adt)[i], path + "[" + std::to_string(i) + "]");
  } else if (value.as<NDArray::ContainerType>()) {
    NDArray array = tvm::runtime::Downcast<NDArray>(value);
    std::cout << path << " = " << dtype_name(array->dtype) << "[";
    int64_t count = 1;
    for (int d = 0; d < array->ndim; ++d) {
      std::cout << (d ? ", " : "") << array->shape[d];
      count *= array->shape[d];
    }
    std::cout << "]";
    const char* data = static_cast<const char*>(array->data) + array->byte_offset;
    for (int64_t i = 0; i < count; ++i) std::cout << " " << element(data, array->dtype, i);
    std::cout << "\n";
  } else if (const auto* cell = value.as<ArrayNode>()) {  // a Relay reference: a one-element array
    std::cout << path << " = ref\n";
    print_value(cell->at(0), path + ".value");
  } else if (value.as<PackedFuncObj>()) {
    std::cout << path << " = function\n";
  } else {
    std::cout << path << " = " << value->GetTypeKey() << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cerr << "usage: " << argv[0] << " LIBRARY.so [INPUT.npy ...]\n"
              << "Runs a relay_aot library on one tensor per .npy file and prints the result.\n";
    return argc < 2 ? 2 : 0;
  }
  try {
    // An absolute path: dlopen looks a bare file name up in the library search path instead.
    std::string path = std::filesystem::absolute(argv[1]).string();
    Module library = Module::LoadFromFile(path, "so");
    PackedFunc entry = library.GetFunction("__tvm_main__");
    if (entry == nullptr) throw std::runtime_error(path + ": no entry function (__tvm_main__)");

    std::vector<NDArray> inputs;
    for (int i = 2; i < argc; ++i) inputs.push_back(read_npy(argv[i]));
    std::vector<TVMValue> values(inputs.size());
    std::vector<int> codes(inputs.size());
    TVMArgsSetter setter(values.data(), codes.data());
    for (size_t i = 0; i < inputs.size(); ++i) setter(i, inputs[i]);

    TVMRetValue result;
    entry.CallPacked(TVMArgs(values.data(), codes.data(), static_cast<int>(inputs.size())), &result);
    print_value(result.operator ObjectRef(), "result");
    return 0;
  } catch (const std::exception& e) {
    // TVM's errors carry a backtrace after the message; the first line is what went wrong.
    std::string message = e.what();
    std::cerr << "deploy: error: " << message.substr(0, message.find('\n')) << "\n";
    return 1;
  }
}
