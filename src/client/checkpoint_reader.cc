// ReadCheckpoint (client.h): a checkpoint's trained parameters, read outside a job.
#include <algorithm>

#include "client/client.h"
#include "common/checkpoint_load.h"

namespace pstrain {

absl::StatusOr<CheckpointParameters> ReadCheckpoint(const std::string& path) {
  absl::StatusOr<LoadedCheckpoint> c = LoadCheckpointToRead(path);
  if (!c.ok()) return c.status();
  CheckpointParameters out;
  out.path = c->path;
  out.global_step = c->global_step;
  for (LoadedCheckpoint::Variable& v : c->variables) {
    out.variables.push_back({v.name, v.shape, std::move(v.values)});
  }
  for (TableRecord& t : c->tables) {
    CheckpointParameters::Table& table = out.tables.emplace_back();
    table.name = t.name;
    table.dim = t.dim;
    table.rows.resize(t.keys.size() * static_cast<size_t>(t.dim));
    // Each saved row is the row, then its optimizer slots: floats_per_row floats.
    for (size_t i = 0; i < t.keys.size(); ++i) {
      std::copy_n(t.floats.begin() + static_cast<std::ptrdiff_t>(i * t.floats_per_row), t.dim,
                  table.rows.begin() + static_cast<std::ptrdiff_t>(i * t.dim));
    }
    table.keys = std::move(t.keys);
  }
  return out;
}

}  // namespace pstrain
