// The Prometheus text exposition format (version 0.0.4), written in this one place: families of
// counters, gauges and histograms with their # HELP and # TYPE lines, labels, and the escaping
// the format asks for.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace pstrain {

// The Content-Type of a page written by PrometheusText.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { kCounter, kGauge, kHistogram };

struct Label {
  absl::string_view name;
  absl::string_view value;
};
using Labels = std::initializer_list<Label>;

// One histogram's observations: counts[i] of them at most upper_bounds[i] (and above the bound
// before it), the last of counts (counts.size() == upper_bounds.size() + 1) above every bound.
// Not cumulative: the writer sums them into the format's cumulative buckets.
struct HistogramData {
  std::vector<double> upper_bounds;  // ascending, finite
  std::vector<uint64_t> counts;
  double sum = 0;
};

// Builds one page. Each family is begun once, and its samples follow before the next begins.
// Metric and label names are those of pstrain's code; a character the format does not allow in
// a name becomes '_'. Label values and HELP texts may hold anything: they are escaped
// (a label value's backslash, double quote and newline as \\, \" and \n; HELP's backslash and
// newline). Values are written in the shortest form that reads back exactly; NaN, +Inf and
// -Inf as the format spells them.
class PrometheusText {
 public:
  // The # HELP and # TYPE lines of family `name`.
  void Begin(absl::string_view name, MetricType type, absl::string_view help);
  // A sample of the counter or gauge begun last: name{labels} value.
  void Sample(Labels labels, double value);
  void Sample(const std::vector<Label>& labels, double value);
  // The samples of the histogram begun last: name_bucket{labels,le="..."} for each bound and
  // +Inf (cumulative counts), then name_sum and name_count.
  void Histogram(const std::vector<Label>& labels, const HistogramData& h);

  // A family with one unlabelled sample.
  void Counter(absl::string_view name, absl::string_view help, double value);
  void Gauge(absl::string_view name, absl::string_view help, double value);

  const std::string& text() const { return text_; }
  std::string Take() { return std::move(text_); }

 private:
  // name{labels[,extra]} value\n, with `suffix` after the family's name.
  void Line(absl::string_view suffix, const Label* labels, size_t n, const Label* extra,
            double value);

  std::string text_;
  std::string family_;  // the name of the family begun last, as written
};

// Exposed for tests: the escaped forms.
std::string EscapeLabelValue(absl::string_view value);
std::string EscapeHelp(absl::string_view help);
// The shortest text that reads back as `v` ("1", "0.25", "5e-05", "NaN", "+Inf", "-Inf").
std::string FormatMetricValue(double v);

}  // namespace pstrain
