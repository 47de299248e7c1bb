// The clusters of `pstrain bench`'s transport section: PS processes (`pstrain server`), with
// forked workers that drive PsClient and set the PS up as a chief would, or with a chief of
// client programs (--model external) and forked programs on the public Client.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/command/bench_internal.h"

namespace pstrain::bench {
namespace {

absl::StatusOr<std::string> Address() {
  absl::StatusOr<int> port = FreePort();
  if (!port.ok()) return port.status();
  return absl::StrCat("127.0.0.1:", *port);
}

// TF_CONFIG's cluster of a chief, `num_ps` PS and `num_workers` workers on free ports of
// 127.0.0.1; *chief and *ps get their addresses.
absl::StatusOr<std::string> ClusterJson(int num_ps, int num_workers, std::string* chief,
                                        std::vector<std::string>* ps) {
  std::vector<std::string> workers;
  absl::StatusOr<std::string> a = Address();
  if (!a.ok()) return a.status();
  *chief = *a;
  for (int i = 0; i < num_ps + num_workers; ++i) {
    if (a = Address(); !a.ok()) return a.status();
    (i < num_ps ? *ps : workers).push_back(*a);
  }
  const auto list = [](const std::vector<std::string>& v) {
    return absl::StrCat("[\"", absl::StrJoin(v, "\", \""), "\"]");
  };
  return absl::StrCat("{\"chief\": [\"", *chief, "\"], \"ps\": ", list(*ps),
                      ", \"worker\": ", list(workers), "}");
}

// Starts task `index` of `job` of `cluster` (`pstrain server`, its log in c->dir/<log>).
absl::StatusOr<std::unique_ptr<Process>> StartTask(const BenchOptions& o,
                                                   const std::string& cluster,
                                                   const std::string& job, int index,
                                                   std::vector<std::string> flags,
                                                   const std::string& log, const Cluster& c) {
  std::vector<std::string> args = {
      "server", "--job",       job,   "--task", std::to_string(index), "--connect_timeout",
      "600",    "--log_level", "warn"};
  args.insert(args.end(), flags.begin(), flags.end());
  return Process::Start(o.self, args, {absl::StrCat("TF_CONFIG={\"cluster\": ", cluster, "}")},
                        absl::StrCat(c.dir, "/", log));
}

// Starts the PS tasks of `cluster` with --transport `transport` when `flag`. Without a chief
// they serve while they wait for one, for up to --connect_timeout.
absl::Status StartPs(const BenchOptions& o, const std::string& cluster, int num_ps,
                     const std::string& transport, bool flag, Cluster* c) {
  for (int i = 0; i < num_ps; ++i) {
    std::vector<std::string> flags;
    if (flag) flags = {"--transport", transport};
    absl::StatusOr<std::unique_ptr<Process>> p =
        StartTask(o, cluster, "ps", i, flags, absl::StrCat("ps-", i, ".log"), *c);
    if (!p.ok()) return p.status();
    c->ps.push_back(*std::move(p));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StartCluster(const BenchOptions& o, const std::string& transport, bool flag,
                          const std::vector<int64_t>& floats, int num_ps, int num_workers,
                          const std::string& dir, Cluster* c) {
  std::string chief;
  std::vector<std::string> ps;
  absl::StatusOr<std::string> cluster = ClusterJson(num_ps, num_workers, &chief, &ps);
  if (!cluster.ok()) return cluster.status();
  c->dir = dir;
  if (absl::Status s = StartPs(o, *cluster, num_ps, transport, flag, c); !s.ok()) return s;
  for (int i = 0; i < num_workers; ++i) {
    absl::StatusOr<std::unique_ptr<Helper>> w =
        Helper::Fork(PsWorker({ps, i, num_workers, transport, floats}));
    if (!w.ok()) return w.status();
    c->workers.push_back(*std::move(w));
  }
  absl::StatusOr<std::vector<Reply>> r = RunAll({c->workers[0].get()}, {kSetup}, kTransportTimeout);
  if (r.ok()) r = RunAll(c->Workers(), {kConnect}, kTransportTimeout);
  return r.status();
}

absl::Status StartClientCluster(const BenchOptions& o, const std::string& transport, bool flag,
                                int64_t floats, int num_ps, int num_workers, const std::string& dir,
                                Cluster* c) {
  std::string chief;
  std::vector<std::string> ps;
  absl::StatusOr<std::string> cluster = ClusterJson(num_ps, num_workers, &chief, &ps);
  if (!cluster.ok()) return cluster.status();
  c->dir = dir;
  if (absl::Status s = StartPs(o, *cluster, num_ps, transport, flag, c); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<Process>> p =
      StartTask(o, *cluster, "chief", 0, {"--model", "external"}, "chief.log", *c);
  if (!p.ok()) return p.status();
  c->chief = *std::move(p);
  for (int i = 0; i < num_workers; ++i) {
    absl::StatusOr<std::unique_ptr<Helper>> w =
        Helper::Fork(ClientWorker({chief, i, num_ps, transport, floats}));
    if (!w.ok()) return w.status();
    c->workers.push_back(*std::move(w));
  }
  // Every program at once: the chief's start barrier waits for all of them.
  return RunAll(c->Workers(), {kConnect}, kTransportTimeout).status();
}

std::string Cluster::Why(const absl::Status& s) {
  std::string why(s.message());
  if (chief != nullptr && !chief->Running()) {
    absl::StrAppend(&why, "; the chief ended: ", LastLine(ReadFile(dir + "/chief.log")));
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    if (!ps[i]->Running()) {
      absl::StrAppend(&why, "; ps ", i,
                      " ended: ", LastLine(ReadFile(absl::StrCat(dir, "/ps-", i, ".log"))));
    }
  }
  return why;
}

}  // namespace pstrain::bench
