#include "runtime/status_page.h"

#include <cmath>

#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

// A number JSON can carry: NaN and infinities (a diverged loss) become null.
nlohmann::json Number(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

nlohmann::json TaskJson(const JobStatus::Task& t) {
  return {{"job", t.job},
          {"index", t.index},
          {"name", t.job + ":" + std::to_string(t.index)},
          {"address", t.address},
          {"state", t.state},
          {"detail", t.detail},
          {"seconds_since_seen", Number(t.seconds_since_seen)},
          {"steps", t.steps}};
}

}  // namespace

std::string StatusJson(const JobStatus& s) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const JobStatus::Task& t : s.tasks) tasks.push_back(TaskJson(t));
  nlohmann::json placement = nlohmann::json::array();
  for (const JobStatus::Shard& p : s.placement) {
    placement.push_back({{"name", p.name}, {"ps", p.ps}, {"bytes", p.bytes}});
  }
  nlohmann::json ps = nlohmann::json::array();
  for (size_t i = 0; i < s.ps_bytes.size(); ++i) {
    ps.push_back({{"ps", i},
                  {"bytes", s.ps_bytes[i]},
                  {"table_bytes", i < s.ps_table_bytes.size() ? s.ps_table_bytes[i] : 0},
                  {"pushes", i < s.ps_pushes.size() ? s.ps_pushes[i] : 0}});
  }
  nlohmann::json curve = nlohmann::json::array();
  for (const JobStatus::LossPoint& p : s.loss_curve) {
    curve.push_back({Number(p.seconds), p.step, Number(p.loss)});
  }
  const nlohmann::json j = {{"state", s.state},
                            {"error", s.error},
                            {"mode", s.mode},
                            {"model", s.model},
                            {"epoch", s.epoch},
                            {"epochs", s.epochs},
                            {"global_step", s.global_step},
                            {"total_steps", s.total_steps},
                            {"examples_per_sec", Number(s.examples_per_sec)},
                            {"loss", Number(s.loss)},
                            {"elapsed_seconds", Number(s.elapsed_seconds)},
                            {"eta_seconds", Number(s.eta_seconds)},
                            {"workers_alive", s.workers_alive},
                            {"tasks", tasks},
                            {"placement", placement},
                            {"ps", ps},
                            {"loss_curve", curve}};
  // Names and error texts come from the cluster: bytes that are not UTF-8 are replaced.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void ServeStatusPage(HttpListener* listener, const JobMonitor* monitor) {
  listener->Handle("/", /*open=*/false, [](const HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/html; charset=utf-8";
    r.body = StatusPageHtml();
    return r;
  });
  listener->Handle("/api/status", /*open=*/false, [monitor](const HttpRequest&) {
    HttpResponse r;
    r.content_type = "application/json";
    r.body = StatusJson(monitor->Snapshot());
    return r;
  });
}

}  // namespace pstrain
