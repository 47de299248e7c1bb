#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/limits.h"
#include "nlohmann/json.hpp"
#include "runtime/runtime.h"

namespace pstrain {
namespace {

using json = nlohmann::json;

const std::set<std::string>& KnownJobs() {
  static const std::set<std::string> jobs = {"chief", "ps", "worker", "evaluator"};
  return jobs;
}

absl::Status Invalid(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// What went wrong, without the exception's "[json.exception.<kind>.<id>] ... : " prefix.
std::string Reason(const json::exception& e) {
  std::string reason = e.what();
  if (const size_t colon = reason.find(": "); colon != std::string::npos) {
    reason = reason.substr(colon + 2);
  } else if (const size_t bracket = reason.find("] "); bracket != std::string::npos) {
    reason = reason.substr(bracket + 2);
  }
  return reason;
}

// "line L, column C: <what the parser expected>" for a parse error at byte `byte` (1-based, as
// nlohmann-json counts) of `text`.
std::string WhereParseFailed(const std::string& text, const json::parse_error& e) {
  const size_t at = std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: <reason>".
  return absl::StrCat("line ", line, ", column ", at - line_start + 1, ": ", Reason(e));
}

// The "task" entry: {"type": string, "index": integer} naming a task of the cluster.
absl::Status ParseTask(const json& task, const std::string& source, ClusterSpec* spec) {
  if (!task.is_object() || !task.contains("type") || !task["type"].is_string() ||
      !task.contains("index") || !task["index"].is_number_integer()) {
    return Invalid(source, "\"task\" must be {\"type\": string, \"index\": integer}");
  }
  const std::string type = task["type"].get<std::string>();
  const int64_t index = task["index"].get<int64_t>();
  if (index < 0 || index > kMaxTasks) {
    return Invalid(source,
                   absl::StrCat("task: index ", index, " is out of range [0, ", kMaxTasks, ")"));
  }
  if (absl::StatusOr<std::string> a = spec->Address(type, static_cast<int>(index)); !a.ok()) {
    return Invalid(source, absl::StrCat("task: ", a.status().message()));
  }
  spec->task_type = type;
  spec->task_index = static_cast<int>(index);
  return absl::OkStatus();
}

absl::Status CheckAddress(const std::string& source, const std::string& job, size_t i,
                          const std::string& addr) {
  const std::string where = absl::StrCat("cluster.", job, "[", i, "] = \"", addr, "\"");
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Invalid(source, where + " is not host:port");
  }
  int port = 0;
  if (!absl::SimpleAtoi(addr.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return Invalid(source, where + " has no valid port (1-65535)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterSpec> ClusterSpec::FromJson(const std::string& text,
                                                  const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    return Invalid(source, "not valid JSON: " + WhereParseFailed(text, e));
  } catch (const json::exception& e) {
    // out_of_range 406, a number no double holds ("1E400"), says no position.
    return Invalid(source, "not valid JSON: " + Reason(e));
  }
  if (!doc.is_object()) return Invalid(source, "expected a JSON object with a \"cluster\" key");
  if (!doc.contains("cluster") || !doc["cluster"].is_object()) {
    return Invalid(source, "missing \"cluster\" object");
  }
  ClusterSpec spec;
  std::set<std::string> seen;
  for (const auto& [job, tasks] : doc["cluster"].items()) {
    if (!KnownJobs().count(job)) {
      return Invalid(
          source, absl::StrCat("unknown job \"", job, "\" (known: chief, ps, worker, evaluator)"));
    }
    if (!tasks.is_array()) {
      return Invalid(source, absl::StrCat("cluster.", job, " must be a list of \"host:port\""));
    }
    std::vector<std::string>& list = spec.jobs[job];
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (!tasks[i].is_string()) {
        return Invalid(source, absl::StrCat("cluster.", job, "[", i, "] must be a string"));
      }
      const std::string addr = tasks[i].get<std::string>();
      if (absl::Status s = CheckAddress(source, job, i, addr); !s.ok()) return s;
      if (!seen.insert(addr).second) {
        return Invalid(source, absl::StrCat("address ", addr, " is used by more than one task"));
      }
      list.push_back(addr);
    }
  }
  if (spec.NumTasks("chief") != 1) {
    return Invalid(source, absl::StrCat("cluster needs exactly one \"chief\" task, found ",
                                        spec.NumTasks("chief")));
  }
  for (const char* job : {"ps", "worker"}) {
    if (spec.NumTasks(job) < 1) {
      return Invalid(source, absl::StrCat("cluster needs at least one \"", job, "\" task"));
    }
  }
  if (doc.contains("task")) spec.task_status = ParseTask(doc["task"], source, &spec);
  return spec;
}

absl::StatusOr<ClusterSpec> ClusterSpec::Load(const std::string& file) {
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read cluster file ", file));
    std::stringstream ss;
    ss << in.rdbuf();
    return FromJson(ss.str(), file);
  }
  const char* env = std::getenv("TF_CONFIG");
  if (env == nullptr || *env == '\0') {
    return absl::InvalidArgumentError(
        "no cluster: pass --cluster FILE or set TF_CONFIG to TensorFlow's JSON cluster format");
  }
  return FromJson(env, "TF_CONFIG");
}

int ClusterSpec::NumTasks(const std::string& job) const {
  auto it = jobs.find(job);
  return it == jobs.end() ? 0 : static_cast<int>(it->second.size());
}

const std::vector<std::string>& ClusterSpec::Tasks(const std::string& job) const {
  static const std::vector<std::string> kNone;
  auto it = jobs.find(job);
  return it == jobs.end() ? kNone : it->second;
}

absl::StatusOr<std::string> ClusterSpec::Address(const std::string& job, int index) const {
  if (!KnownJobs().count(job)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown job \"", job, "\" (known: chief, ps, worker, evaluator)"));
  }
  const int n = NumTasks(job);
  if (index < 0 || index >= n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task index ", index, " is out of range for job \"", job, "\", which has ", n, " task(s)"));
  }
  return Tasks(job)[index];
}

std::string ClusterSpec::ToJson() const {
  json cluster = json::object();
  for (const auto& [job, tasks] : jobs) cluster[job] = tasks;
  json doc = {{"cluster", cluster}};
  if (task_type) doc["task"] = {{"type", *task_type}, {"index", task_index.value_or(0)}};
  return doc.dump();
}

}  // namespace pstrain
