// InspectCheckpoint (master.h): a checkpoint read as a restore reads it, summarized.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "master/checkpoints.h"
#include "master/master.h"
#include "master/placement.h"
#include "nlohmann/json.hpp"
#include "ps.pb.h"

namespace pstrain {
namespace {

nlohmann::json Summary(const LoadedCheckpoint& c) {
  nlohmann::json j = {{"path", c.path}, {"global_step", c.global_step}, {"num_ps", c.num_ps}};
  nlohmann::json ledger = nullptr;
  if (c.ledger.is_object()) {
    ledger = nlohmann::json::object();
    for (const char* key : {"tasks", "applied", "redone", "epochs", "rows", "task_rows"}) {
      if (c.ledger.contains(key)) ledger[key] = c.ledger[key];
    }
  }
  j["ledger"] = ledger;
  j["variables"] = nlohmann::json::array();
  for (const LoadedCheckpoint::Variable& v : c.variables) {
    std::vector<std::string> slots;
    for (const SlotValues& s : v.slots) slots.push_back(s.name);
    j["variables"].push_back({{"name", v.name},
                              {"shape", v.shape},
                              {"shards", v.pieces.size()},
                              {"optimizer", v.optimizer},
                              {"slots", slots},
                              {"version", v.version},
                              {"update_count", v.update_count}});
  }
  j["tables"] = nlohmann::json::array();
  for (const TableRecord& t : c.tables) {
    TableDef def;
    const bool parsed = def.ParseFromString(t.table_def);
    j["tables"].push_back({{"name", t.name},
                           {"dim", t.dim},
                           {"rows", t.keys.size()},
                           {"optimizer", parsed ? def.optimizer().name() : ""},
                           {"version", t.version}});
  }
  return j;
}

// Rows of cells as columns padded to their widest cell, two spaces apart.
std::string Text(const nlohmann::json& j) {
  auto str = [](const nlohmann::json& v) {
    return v.is_string() ? v.get<std::string>() : v.dump();
  };
  std::string out = absl::StrCat("checkpoint ", str(j["path"]), ": global step ",
                                 str(j["global_step"]), ", saved by ", str(j["num_ps"]), " ps\n");
  const nlohmann::json& l = j["ledger"];
  if (l.is_null()) {
    absl::StrAppend(&out, "tasks: no task ledger (a job without a task queue)\n");
  } else {
    absl::StrAppend(&out, "tasks: ", str(l.value("applied", nlohmann::json(0))), " of ",
                    str(l.value("tasks", nlohmann::json(0))), " applied, ",
                    str(l.value("redone", nlohmann::json(0))), " redone (epochs ",
                    str(l.value("epochs", nlohmann::json(0))), ", rows ",
                    str(l.value("rows", nlohmann::json(0))), ", rows a task ",
                    str(l.value("task_rows", nlohmann::json(0))), ")\n");
  }
  std::vector<std::vector<std::string>> vars = {
      {"variable", "shape", "shards", "optimizer", "slots", "version"}};
  for (const nlohmann::json& v : j["variables"]) {
    std::vector<std::string> slots = v["slots"].get<std::vector<std::string>>();
    vars.push_back({str(v["name"]), str(v["shape"]), str(v["shards"]), str(v["optimizer"]),
                    slots.empty() ? "-" : absl::StrJoin(slots, ","), str(v["version"])});
  }
  absl::StrAppend(&out, "\n", TextColumns(vars));
  if (!j["tables"].empty()) {
    std::vector<std::vector<std::string>> tables = {
        {"table", "dim", "rows", "optimizer", "version"}};
    for (const nlohmann::json& t : j["tables"]) {
      tables.push_back(
          {str(t["name"]), str(t["dim"]), str(t["rows"]), str(t["optimizer"]), str(t["version"])});
    }
    absl::StrAppend(&out, "\n", TextColumns(tables));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> InspectCheckpoint(const std::string& path, bool json) {
  absl::StatusOr<LoadedCheckpoint> c = LoadCheckpointToRead(path);
  if (!c.ok()) return c.status();
  const nlohmann::json j = Summary(*c);
  return json ? j.dump() + "\n" : Text(j);
}

}  // namespace pstrain
