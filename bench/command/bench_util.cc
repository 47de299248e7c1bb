// Statistics and Markdown formatting of `pstrain bench`.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/command/bench_internal.h"

namespace pstrain::bench {

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
