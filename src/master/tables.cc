#include "master/tables.h"

#include <algorithm>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/limits.h"
#include "common/rpc.h"
#include "google/protobuf/util/message_differencer.h"

namespace pstrain {
namespace {

// "dim: 8 -> 16; optimizer.learning_rate: 0.05 -> 0.1" (existing -> asked for), or "" if the
// definitions are the same.
std::string Differences(const TableDef& existing, const TableDef& asked) {
  std::string report;
  google::protobuf::util::MessageDifferencer d;
  d.ReportDifferencesToString(&report);
  if (d.Compare(existing, asked)) return "";
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(report, '\n', absl::SkipEmpty())) {
    // A proto3 field at its default is absent: "added: x: 3" means 0 -> 3, "deleted" 3 -> 0.
    if (absl::ConsumePrefix(&line, "modified: ")) {
      lines.emplace_back(line);
    } else if (absl::ConsumePrefix(&line, "added: ")) {
      lines.push_back(absl::StrCat(line, " (unset before)"));
    } else if (absl::ConsumePrefix(&line, "deleted: ")) {
      lines.push_back(absl::StrCat(line, " (unset now)"));
    } else {
      lines.emplace_back(line);
    }
  }
  return absl::StrJoin(lines, "; ");
}

}  // namespace

struct TableCreator::Impl {
  Impl(const std::vector<std::string>& ps_addresses, absl::Duration timeout)
      : addresses(ps_addresses), rpc_timeout(timeout) {
    for (const std::string& a : addresses) {
      stubs.push_back(ParameterServerService::NewStub(MakeChannel(a)));
    }
  }

  const std::vector<std::string> addresses;
  std::vector<std::unique_ptr<ParameterServerService::Stub>> stubs;
  const absl::Duration rpc_timeout;
  mutable absl::Mutex mu;  // held while a table is created, so creations do not interleave
  std::vector<TableDef> tables ABSL_GUARDED_BY(mu);  // in creation order

  // Creates `def` on PS `t`, retried while it is unreachable. A retry that finds the table
  // there (the earlier attempt arrived but its answer was lost) counts as created.
  absl::Status CreateOn(int t, const TableDef& def) {
    CreateTablesRequest req;
    *req.mutable_sender() = MakeSender("chief", 0);
    *req.add_tables() = def;
    const std::string peer = absl::StrCat(TaskName("ps", t), " ", addresses[t]);
    bool maybe_arrived = false;
    return RetryUntil(rpc_timeout, absl::StrCat("CreateTables at ", peer), [&] {
      std::unique_ptr<grpc::ClientContext> ctx = ContextWithTimeout(rpc_timeout, true);
      CreateTablesResponse resp;
      absl::Status s =
          FromGrpcStatus(stubs[t]->CreateTables(ctx.get(), req, &resp), "CreateTables", peer);
      if (absl::IsAlreadyExists(s) && maybe_arrived) return absl::OkStatus();
      if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) maybe_arrived = true;
      return s;
    });
  }
};

TableCreator::TableCreator(const std::vector<std::string>& ps_addresses, absl::Duration rpc_timeout)
    : impl_(new Impl(ps_addresses, rpc_timeout)) {}

TableCreator::~TableCreator() { delete impl_; }

absl::Status TableCreator::GetOrCreate(const TableDef& def) {
  if (def.name().empty()) return absl::InvalidArgumentError("a table needs a name");
  if (def.name().size() > static_cast<size_t>(kMaxNameBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("a table name has at most ", kMaxNameBytes,
                                                   " bytes, got ", def.name().size()));
  }
  absl::MutexLock lock(&impl_->mu);
  for (const TableDef& t : impl_->tables) {
    if (t.name() != def.name()) continue;
    const std::string diff = Differences(t, def);
    if (diff.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("table \"", def.name(),
                                                   "\" exists with another definition: ", diff,
                                                   " (existing -> asked for)"));
  }
  if (impl_->tables.size() >= static_cast<size_t>(kMaxTables)) {
    return absl::ResourceExhaustedError(absl::StrCat("table \"", def.name(), "\": the job has ",
                                                     kMaxTables, " tables, the most a PS holds"));
  }
  std::vector<std::string> holding;
  for (int t = 0; t < static_cast<int>(impl_->stubs.size()); ++t) {
    absl::Status s = impl_->CreateOn(t, def);
    if (s.ok()) {
      holding.push_back(TaskName("ps", t));
      continue;
    }
    return absl::Status(
        s.code(), absl::StrCat("table \"", def.name(), "\": ", s.message(),
                               holding.empty() ? std::string("; no PS holds it")
                                               : absl::StrCat("; it now exists on ",
                                                              absl::StrJoin(holding, ", "),
                                                              " only (tables are never deleted)")));
  }
  impl_->tables.push_back(def);
  return absl::OkStatus();
}

void TableCreator::Forget() {
  absl::MutexLock lock(&impl_->mu);
  impl_->tables.clear();
}

std::vector<TableDef> TableCreator::tables() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->tables;
}

std::vector<TableStats> SumTableStats(const std::vector<StatsResponse>& per_ps) {
  std::vector<TableStats> sum;
  absl::flat_hash_map<std::string, size_t> index;  // name -> position in `sum`
  for (const StatsResponse& ps : per_ps) {
    for (const TableStats& t : ps.tables()) {
      auto [it, inserted] = index.try_emplace(t.name(), sum.size());
      if (inserted) {
        sum.push_back(t);
        continue;
      }
      TableStats& s = sum[it->second];
      s.set_version(std::max(s.version(), t.version()));
      s.set_rows(s.rows() + t.rows());
      s.set_bytes(s.bytes() + t.bytes());
      s.set_keys_looked_up(s.keys_looked_up() + t.keys_looked_up());
      s.set_admitted(s.admitted() + t.admitted());
      s.set_filtered_lookups(s.filtered_lookups() + t.filtered_lookups());
      s.set_filtered_gradients(s.filtered_gradients() + t.filtered_gradients());
      s.set_evicted_by_age(s.evicted_by_age() + t.evicted_by_age());
      s.set_evicted_by_cap(s.evicted_by_cap() + t.evicted_by_cap());
      s.set_gradient_rows_applied(s.gradient_rows_applied() + t.gradient_rows_applied());
    }
  }
  return sum;
}

}  // namespace pstrain
