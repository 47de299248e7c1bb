// ParameterServerImpl::ReadMetrics: what the task's /metrics shows of its variables and tables.
#include <algorithm>

#include "ps/parameter_server_impl.h"

namespace pstrain {

void ParameterServerImpl::ReadMetrics(StatsResponse* stats, std::vector<VariableState>* variables) {
  consistency_.FillStats(stats);
  FillTableStats(stats);
  std::vector<std::pair<std::string, VariablePtr>> vars;
  {
    absl::MutexLock lock(&mu_);
    vars.assign(vars_.begin(), vars_.end());
  }
  std::sort(vars.begin(), vars.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  variables->clear();
  variables->reserve(vars.size());
  for (const auto& [name, var] : vars) {
    VariableState& v = variables->emplace_back();
    v.name = name;
    absl::MutexLock lock(&var->mu);
    v.version = var->version;
    const int64_t slots = var->optimizer != nullptr ? var->optimizer->slots().size() : 0;
    v.bytes = var->bytes * (1 + slots) + static_cast<int64_t>(var->accum.size() * sizeof(float));
  }
}

}  // namespace pstrain
