// SPDX-License-Identifier: MIT
// The whitespace-separated inputs the upstream-comparison scripts write for their dump programs
// (bench/upstream/*_dump.cpp): words, doubles as Python's repr writes them (exact), integers.
#pragma once

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace upstream {

struct text_reader {
  std::ifstream in;
  explicit text_reader(const char* path) : in(path) {
    if (!in) throw std::runtime_error(std::string("cannot open ") + path);
  }
  std::string word() {
    std::string w;
    if (!(in >> w)) throw std::runtime_error("unexpected end of input");
    return w;
  }
  double number() {
    const std::string w = word();
    char* end = nullptr;
    const double x = std::strtod(w.c_str(), &end);
    if (end != w.c_str() + w.size()) throw std::runtime_error("not a number: " + w);
    return x;
  }
  long long integer() {
    const std::string w = word();
    std::size_t used = 0;
    const long long x = std::stoll(w, &used);
    if (used != w.size()) throw std::runtime_error("not an integer: " + w);
    return x;
  }
  std::vector<double> numbers(long long n) {
    std::vector<double> x(static_cast<std::size_t>(n));
    for (auto& e : x) e = number();
    return x;
  }
};

}  // namespace upstream
