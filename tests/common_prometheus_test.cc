// The Prometheus text format as common/prometheus.h writes it, checked against hand-written
// pages, and the RPC metrics of common/rpc_metrics.h written through it.
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "common/prometheus.h"
#include "common/rpc_metrics.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(PrometheusText, Counter) {
  PrometheusText out;
  out.Begin("pstrain_rpc_requests_total", MetricType::kCounter, "RPCs served.");
  out.Sample({{"method", "Pull"}, {"code", "OK"}}, 1027);
  out.Sample({{"method", "Push"}, {"code", "NOT_FOUND"}}, 3);
  EXPECT_EQ(out.text(),
            "# HELP pstrain_rpc_requests_total RPCs served.\n"
            "# TYPE pstrain_rpc_requests_total counter\n"
            "pstrain_rpc_requests_total{method=\"Pull\",code=\"OK\"} 1027\n"
            "pstrain_rpc_requests_total{method=\"Push\",code=\"NOT_FOUND\"} 3\n");
}

TEST(PrometheusText, GaugeWithoutLabels) {
  PrometheusText out;
  out.Gauge("pstrain_worker_loss", "Mean loss.", 0.25);
  out.Gauge("pstrain_process_resident_memory_bytes", "Resident memory.", 123456789012.0);
  EXPECT_EQ(out.text(),
            "# HELP pstrain_worker_loss Mean loss.\n"
            "# TYPE pstrain_worker_loss gauge\n"
            "pstrain_worker_loss 0.25\n"
            "# HELP pstrain_process_resident_memory_bytes Resident memory.\n"
            "# TYPE pstrain_process_resident_memory_bytes gauge\n"
            "pstrain_process_resident_memory_bytes 123456789012\n");
}

TEST(PrometheusText, HistogramIsCumulativeWithInfSumAndCount) {
  PrometheusText out;
  out.Begin("pstrain_rpc_latency_seconds", MetricType::kHistogram, "Latency.");
  HistogramData h;
  h.upper_bounds = {0.00005, 0.001, 1};
  h.counts = {2, 0, 5, 1};  // the last above every bound
  h.sum = 3.5;
  out.Histogram({{"method", "Pull"}}, h);
  EXPECT_EQ(out.text(),
            "# HELP pstrain_rpc_latency_seconds Latency.\n"
            "# TYPE pstrain_rpc_latency_seconds histogram\n"
            "pstrain_rpc_latency_seconds_bucket{method=\"Pull\",le=\"5e-05\"} 2\n"
            "pstrain_rpc_latency_seconds_bucket{method=\"Pull\",le=\"0.001\"} 2\n"
            "pstrain_rpc_latency_seconds_bucket{method=\"Pull\",le=\"1\"} 7\n"
            "pstrain_rpc_latency_seconds_bucket{method=\"Pull\",le=\"+Inf\"} 8\n"
            "pstrain_rpc_latency_seconds_sum{method=\"Pull\"} 3.5\n"
            "pstrain_rpc_latency_seconds_count{method=\"Pull\"} 8\n");
}

TEST(PrometheusText, HistogramWithoutLabels) {
  PrometheusText out;
  out.Begin("h", MetricType::kHistogram, "x");
  out.Histogram({}, HistogramData{{2}, {0, 0}, 0});
  EXPECT_EQ(out.text(),
            "# HELP h x\n# TYPE h histogram\n"
            "h_bucket{le=\"2\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n");
}

TEST(PrometheusText, EscapesLabelValues) {
  PrometheusText out;
  out.Begin("pstrain_ps_variable_version", MetricType::kGauge, "Version.");
  out.Sample({{"variable", "a\\b\"c\nd"}}, 7);
  EXPECT_EQ(out.text(),
            "# HELP pstrain_ps_variable_version Version.\n"
            "# TYPE pstrain_ps_variable_version gauge\n"
            "pstrain_ps_variable_version{variable=\"a\\\\b\\\"c\\nd\"} 7\n");
  EXPECT_EQ(EscapeLabelValue("dense_1/kernel"), "dense_1/kernel");
  EXPECT_EQ(EscapeLabelValue("\\\\"), "\\\\\\\\");
  EXPECT_EQ(EscapeLabelValue("\"\"\n"), "\\\"\\\"\\n");
}

TEST(PrometheusText, EscapesHelpButNotItsQuotes) {
  PrometheusText out;
  out.Counter("c_total", "a \"quoted\" C:\\path\nsecond line", 0);
  EXPECT_EQ(out.text(),
            "# HELP c_total a \"quoted\" C:\\\\path\\nsecond line\n"
            "# TYPE c_total counter\n"
            "c_total 0\n");
}

TEST(PrometheusText, NamesOutsideTheFormatBecomeUnderscores) {
  PrometheusText out;
  out.Begin("9bad-name:x", MetricType::kGauge, "");
  out.Sample({{"bad:label", "v"}}, 1);
  EXPECT_EQ(out.text(),
            "# HELP _bad_name:x \n# TYPE _bad_name:x gauge\n_bad_name:x{bad_label=\"v\"} 1\n");
}

TEST(PrometheusText, Values) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-3), "-3");
  EXPECT_EQ(FormatMetricValue(9007199254740992.0), "9007199254740992");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(0.0001), "0.0001");
  EXPECT_EQ(FormatMetricValue(0.00005), "5e-05");
  EXPECT_EQ(FormatMetricValue(2.5e-10), "2.5e-10");
  EXPECT_EQ(FormatMetricValue(1e20), "100000000000000000000");
  EXPECT_EQ(FormatMetricValue(1e21), "1e+21");
  EXPECT_EQ(FormatMetricValue(1.5e300), "1.5e+300");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(std::stod(FormatMetricValue(1.0 / 3)), 1.0 / 3);
}

TEST(RpcMetrics, CountsBytesAndLatencyPerMethodFromManyThreads) {
  const int kThreads = 4, kCalls = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kCalls; ++i) {
        ObserveServedRpc("TestPull", absl::StatusCode::kOk, 10, 4096, absl::Microseconds(75));
      }
      ObserveServedRpc("TestPull", absl::StatusCode::kNotFound, 7, 0, absl::Seconds(20));
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ServedRpcCount("TestPull", absl::StatusCode::kOk), kThreads * kCalls);
  EXPECT_EQ(ServedRpcCount("TestPull", absl::StatusCode::kNotFound), kThreads);
  EXPECT_EQ(ServedRpcCount("NeverCalled", absl::StatusCode::kOk), 0);

  PrometheusText out;
  WriteRpcMetrics(&out);
  const std::string& t = out.text();
  auto has = [&t](const std::string& line) { return t.find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("pstrain_rpc_requests_total{method=\"TestPull\",code=\"OK\"} 40000")) << t;
  EXPECT_TRUE(has("pstrain_rpc_requests_total{method=\"TestPull\",code=\"NOT_FOUND\"} 4")) << t;
  // 75us lands in (50us, 100us]; the 20 s calls only in +Inf.
  EXPECT_TRUE(has("pstrain_rpc_latency_seconds_bucket{method=\"TestPull\",le=\"5e-05\"} 0")) << t;
  EXPECT_TRUE(has("pstrain_rpc_latency_seconds_bucket{method=\"TestPull\",le=\"0.0001\"} 40000"))
      << t;
  EXPECT_TRUE(has("pstrain_rpc_latency_seconds_bucket{method=\"TestPull\",le=\"10\"} 40000")) << t;
  EXPECT_TRUE(has("pstrain_rpc_latency_seconds_bucket{method=\"TestPull\",le=\"+Inf\"} 40004"))
      << t;
  EXPECT_TRUE(has("pstrain_rpc_latency_seconds_sum{method=\"TestPull\"} 83")) << t;
  EXPECT_TRUE(has("pstrain_rpc_latency_seconds_count{method=\"TestPull\"} 40004")) << t;
  EXPECT_TRUE(has("pstrain_rpc_received_bytes_total{method=\"TestPull\"} 400028")) << t;
  EXPECT_TRUE(has("pstrain_rpc_sent_bytes_total{method=\"TestPull\"} 163840000")) << t;

  SetRpcMetricsEnabled(false);
  ObserveServedRpc("TestPull", absl::StatusCode::kOk, 1, 1, absl::Microseconds(1));
  SetRpcMetricsEnabled(true);
  EXPECT_EQ(ServedRpcCount("TestPull", absl::StatusCode::kOk), kThreads * kCalls);
}

}  // namespace
}  // namespace pstrain
