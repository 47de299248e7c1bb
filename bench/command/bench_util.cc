// Statistics, step timing and Markdown formatting of `pstrain bench`.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/command/bench_internal.h"

namespace pstrain::bench {

Reply TimeSteps(const Command& c, const std::function<absl::Status()>& step) {
  Reply r;
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < c.steps; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    if (absl::Status s = step(); !s.ok()) {
      r.error = std::string(s.message());
      return r;
    }
    if (c.op == kLatency) {
      const std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - t0;
      r.samples.push_back(d.count());
    }
  }
  const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
  r.seconds = d.count();
  return r;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(q * static_cast<double>(v.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size())));
  return v[i - 1];
}

std::string Fixed(double v, int digits) { return absl::StrFormat("%.*f", digits, v); }

std::string Ratio(double value, double baseline) {
  if (!(baseline > 0)) return "-";
  return absl::StrFormat("%.2fx", value / baseline);
}

std::string Met(double ratio, double bound, bool at_least) {
  if (!std::isfinite(ratio)) return "-";
  return (at_least ? ratio >= bound : ratio <= bound) ? "yes" : "no";
}

std::string ToMarkdown(const Table& t) {
  std::string out =
      absl::StrCat("### ", t.title, "\n\n| ", absl::StrJoin(t.header, " | "), " |\n|");
  for (size_t i = 0; i < t.header.size(); ++i) out += "---|";
  out += "\n";
  for (const std::vector<std::string>& row : t.rows) {
    std::vector<std::string> cells = row;
    cells.resize(std::max(cells.size(), t.header.size()));
    absl::StrAppend(&out, "| ", absl::StrJoin(cells, " | "), " |\n");
  }
  for (const std::string& n : t.notes) absl::StrAppend(&out, "\n", n, "\n");
  return out + "\n";
}

}  // namespace pstrain::bench
