#include "common/prometheus.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// [a-zA-Z_:][a-zA-Z0-9_:]* for metric names; label names the same without ':'.
void AppendName(absl::string_view name, bool allow_colon, std::string* out) {
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
    out->push_back(ok ? c : '_');
  }
  if (name.empty()) out->push_back('_');
}

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string EscapeHelp(absl::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (const char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Shortest digits, as Go's strconv.FormatFloat(v, 'g', -1, 64) that Prometheus's own clients
  // use (so that bucket bounds read the same: "0.0001", "5e-05"), but with plain digits up to
  // 1e21 ("1234567", not "1.234567e+06").
  char buf[64];
  std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  *r.ptr = '\0';
  const int exponent = std::atoi(std::find(buf, r.ptr, 'e') + 1);
  if (exponent >= -4 && exponent < 21) {
    r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
  }
  return std::string(buf, r.ptr);
}

void PrometheusText::Begin(absl::string_view name, MetricType type, absl::string_view help) {
  family_.clear();
  AppendName(name, /*allow_colon=*/true, &family_);
  absl::StrAppend(&text_, "# HELP ", family_, " ", EscapeHelp(help), "\n# TYPE ", family_, " ",
                  TypeName(type), "\n");
}

void PrometheusText::Line(absl::string_view suffix, const Label* labels, size_t n,
                          const Label* extra, double value) {
  absl::StrAppend(&text_, family_, suffix);
  if (n > 0 || extra != nullptr) {
    text_.push_back('{');
    for (size_t i = 0; i < n + (extra != nullptr ? 1 : 0); ++i) {
      const Label& l = i < n ? labels[i] : *extra;
      if (i > 0) text_.push_back(',');
      AppendName(l.name, /*allow_colon=*/false, &text_);
      absl::StrAppend(&text_, "=\"", EscapeLabelValue(l.value), "\"");
    }
    text_.push_back('}');
  }
  absl::StrAppend(&text_, " ", FormatMetricValue(value), "\n");
}

void PrometheusText::Sample(Labels labels, double value) {
  Line("", labels.begin(), labels.size(), nullptr, value);
}

void PrometheusText::Sample(const std::vector<Label>& labels, double value) {
  Line("", labels.data(), labels.size(), nullptr, value);
}

void PrometheusText::Histogram(const std::vector<Label>& labels, const HistogramData& h) {
  uint64_t total = 0;
  for (size_t i = 0; i <= h.upper_bounds.size(); ++i) {
    total += i < h.counts.size() ? h.counts[i] : 0;
    const std::string le =
        i < h.upper_bounds.size() ? FormatMetricValue(h.upper_bounds[i]) : std::string("+Inf");
    const Label bound{"le", le};
    Line("_bucket", labels.data(), labels.size(), &bound, static_cast<double>(total));
  }
  Line("_sum", labels.data(), labels.size(), nullptr, h.sum);
  Line("_count", labels.data(), labels.size(), nullptr, static_cast<double>(total));
}

void PrometheusText::Counter(absl::string_view name, absl::string_view help, double value) {
  Begin(name, MetricType::kCounter, help);
  Sample({}, value);
}

void PrometheusText::Gauge(absl::string_view name, absl::string_view help, double value) {
  Begin(name, MetricType::kGauge, help);
  Sample({}, value);
}

}  // namespace pstrain
