// ClientOptions from TF_CONFIG, and the option structs of client.h as protos.
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/options_proto.h"
#include "common/limits.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

using json = nlohmann::json;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG: ", what));
}

// The integer at `j`, or an error naming `where`.
absl::StatusOr<int64_t> Int(const json& j, const char* where) {
  if (!j.is_number_integer()) return Bad(absl::StrCat(where, " is ", j.dump(), ", not an integer"));
  return j.get<int64_t>();
}

}  // namespace

absl::StatusOr<ClientOptions> ClientOptions::FromTfConfig() {
  const char* env = std::getenv("TF_CONFIG");
  if (env == nullptr || *env == '\0') {
    return absl::InvalidArgumentError(
        "TF_CONFIG is not set: it describes the cluster and this task, as TensorFlow's "
        "{\"cluster\": {\"chief\": [...], \"ps\": [...], \"worker\": [...]}, "
        "\"task\": {\"type\": \"worker\", \"index\": 0}}");
  }
  return FromTfConfigJson(env);
}

absl::StatusOr<ClientOptions> ClientOptions::FromTfConfigJson(std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    return Bad(absl::StrCat("not valid JSON: ", e.what()));
  }
  if (!j.is_object()) return Bad("not a JSON object");
  if (!j.contains("cluster") || !j["cluster"].is_object()) return Bad("no \"cluster\" object");
  const json& cluster = j["cluster"];
  if (!cluster.contains("chief") || !cluster["chief"].is_array() || cluster["chief"].empty() ||
      !cluster["chief"][0].is_string() || cluster["chief"][0].get<std::string>().empty()) {
    return Bad("cluster.chief[0] is not a host:port: a client program needs the chief's address");
  }
  if (!j.contains("task") || !j["task"].is_object()) {
    return Bad("no \"task\" object: it says which worker this program is");
  }
  const json& task = j["task"];
  if (!task.contains("type") || !task["type"].is_string()) return Bad("task.type is missing");
  const std::string type = task["type"].get<std::string>();
  if (type != "worker") {
    return Bad(absl::StrCat("task.type is \"", type, "\"; a client program runs as a worker"));
  }
  if (!task.contains("index")) return Bad("task.index is missing");
  absl::StatusOr<int64_t> index = Int(task["index"], "task.index");
  if (!index.ok()) return index.status();
  int64_t workers = kMaxTasks;
  if (cluster.contains("worker")) {
    if (!cluster["worker"].is_array()) return Bad("cluster.worker is not a list");
    workers = static_cast<int64_t>(cluster["worker"].size());
  }
  if (*index < 0 || *index >= workers) {
    return Bad(absl::StrCat("task.index ", *index, " is not a worker of the cluster (it has ",
                            workers, " worker task(s))"));
  }
  ClientOptions o;
  o.chief = cluster["chief"][0].get<std::string>();
  o.task = static_cast<int>(*index);
  return o;
}

OptimizerConfig ToProto(const OptimizerOptions& o) {
  OptimizerConfig p;
  p.set_name(o.name);
  p.set_learning_rate(o.learning_rate);
  if (o.beta1) p.set_beta1(*o.beta1);
  if (o.beta2) p.set_beta2(*o.beta2);
  if (o.epsilon) p.set_epsilon(*o.epsilon);
  p.set_momentum(o.momentum);
  p.set_nesterov(o.nesterov);
  p.set_initial_accumulator_value(o.initial_accumulator_value);
  if (o.rho) p.set_rho(*o.rho);
  p.set_l1(o.l1);
  p.set_l2(o.l2);
  if (o.learning_rate_power) p.set_learning_rate_power(*o.learning_rate_power);
  p.set_clip_norm(o.clip_norm);
  LearningRateSchedule* s = p.mutable_schedule();
  s->set_kind(o.schedule.kind);
  s->set_step_size(o.schedule.step_size);
  s->set_decay_rate(o.schedule.decay_rate);
  s->set_warmup_steps(o.schedule.warmup_steps);
  s->set_total_steps(o.schedule.total_steps);
  s->set_min_lr(o.schedule.min_lr);
  return p;
}

}  // namespace pstrain
