// Mean, deviation and range of a stream of numbers in one pass.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace pstrain {

// Mean and variance in one pass (Welford), with the range. In long double: a square of a
// double near its largest overflows a double.
struct Moments {
  int64_t n = 0;
  long double mean = 0, m2 = 0, min = 0, max = 0;
  void Add(double x) {
    if (n == 0) min = max = x;
    min = std::min<long double>(min, x);
    max = std::max<long double>(max, x);
    ++n;
    const long double d = x - mean;
    mean += d / n;
    m2 += d * (x - mean);
  }
  // The population deviation as a double, at most the largest one.
  double stddev() const {
    if (n == 0) return 0;
    return static_cast<double>(
        std::min<long double>(std::sqrt(m2 / n), std::numeric_limits<double>::max()));
  }
};

}  // namespace pstrain
