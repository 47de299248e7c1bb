// Coordinator: recovery generations and the failures survived (docs/recovery.md).
#include "master/coordinator.h"

namespace pstrain {

void Coordinator::EnableRecovery() {}

std::optional<std::string> Coordinator::RollbackReason() const { return std::nullopt; }

absl::StatusOr<uint64_t> Coordinator::BeginGeneration(const nlohmann::json&) {
  return absl::UnimplementedError("BeginGeneration");
}

uint64_t Coordinator::generation() const { return 0; }

std::vector<Sender> Coordinator::PsTasks() const {
  absl::MutexLock lock(&mu_);
  return ps_;
}

Coordinator::Failures Coordinator::failures() const { return {}; }

void Coordinator::CountChiefRestart() {}

}  // namespace pstrain
