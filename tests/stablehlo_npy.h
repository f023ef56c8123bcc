// NumPy .npy files (format 1.0) for capstep Arrays: how the XLA test hands
// inputs to tests/xla/run_stablehlo.py and reads its outputs back.
// f32 <f4, f64 <f8, i32 <i4, i1 |b1; C order; little-endian hosts only.
#pragma once

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "capstep/array.h"

namespace capstep::hlo_test {

inline const char* npy_descr(DType d) {
  switch (d) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::i32: return "<i4";
    case DType::i1: return "|b1";
    case DType::bf16: return "<u2";  // the raw bits (numpy has no bfloat16 of its own); the bf16 cases keep their inputs and outputs f32
  }
  return "?";
}

inline void write_npy(const std::string& path, const Array& a) {
  std::string shape = "(";
  for (size_t i = 0; i < a.shape().size(); ++i) shape += std::to_string(a.shape()[i]) + ",";
  if (a.shape().size() > 1) shape.pop_back();
  shape += ")";
  std::string header =
      std::string("{'descr': '") + npy_descr(a.dtype()) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("cannot write " + path);
  f.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  char l[2] = {static_cast<char>(len & 0xFF), static_cast<char>(len >> 8)};
  f.write(l, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(a.raw()), static_cast<std::streamsize>(a.bytes()));
  if (!f) throw Error("short write to " + path);
}

inline Array read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read " + path);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (all.size() < 10 || all.compare(0, 6, "\x93NUMPY") != 0) throw Error(path + " is not a .npy file");
  size_t hlen, hstart;
  if (all[6] == 1) {
    hlen = static_cast<unsigned char>(all[8]) | (static_cast<size_t>(static_cast<unsigned char>(all[9])) << 8);
    hstart = 10;
  } else {
    if (all.size() < 12) throw Error(path + ": truncated header");
    hlen = 0;
    for (int i = 0; i < 4; ++i) hlen |= static_cast<size_t>(static_cast<unsigned char>(all[8 + i])) << (8 * i);
    hstart = 12;
  }
  if (all.size() < hstart + hlen) throw Error(path + ": truncated header");
  std::string h = all.substr(hstart, hlen);
  auto field = [&](const std::string& key) {
    size_t k = h.find("'" + key + "'");
    if (k == std::string::npos) throw Error(path + ": header lacks " + key);
    return h.substr(h.find(':', k) + 1);
  };
  std::string descr = field("descr");
  descr = descr.substr(descr.find('\'') + 1);
  descr = descr.substr(0, descr.find('\''));
  Type t;
  if (descr == "<f4") t.dtype = DType::f32;
  else if (descr == "<f8") t.dtype = DType::f64;
  else if (descr == "<i4") t.dtype = DType::i32;
  else if (descr == "|b1") t.dtype = DType::i1;
  else throw Error(path + ": unsupported dtype " + descr);
  if (field("fortran_order").find("False") != 0 && field("fortran_order").find(" False") != 0)
    throw Error(path + ": Fortran order is not supported");
  std::string sh = field("shape");
  sh = sh.substr(sh.find('(') + 1, sh.find(')') - sh.find('(') - 1);
  std::stringstream ss(sh);
  std::string part;
  while (std::getline(ss, part, ','))
    if (part.find_first_of("0123456789") != std::string::npos) t.shape.push_back(std::stoll(part));
  size_t data = hstart + hlen;
  if (all.size() - data != t.bytes())
    throw Error(path + ": " + std::to_string(all.size() - data) + " data bytes for " + t.str());
  return Array(t, all.data() + data);
}

}  // namespace capstep::hlo_test
