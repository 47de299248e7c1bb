// `pstrain bench`, memory section: the peak resident memory of a `pstrain server` PS process
// holding one 256 MB variable, against the bytes of that variable and its optimizer slots (the
// target: at most 1.2x). The PS's own baseline (VmRSS once it serves, before the variable
// exists) is subtracted; the peaks are VmHWM of /proc/<pid>/status, reset after the creation
// (clear_refs 5) so that creating the variable and serving it are measured apart. A forked
// worker creates the variable (its initial value in CreateVariablesRequest, as the chief sends
// it) and then runs pushes and pulls of the whole variable through PsClient. With
// --memory_baseline, the same trials run against a second pstrain binary's PS, alternating with
// this one's, so a change is measured before and after in one run.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "bench/command/bench_internal.h"
#include "client/ps_client.h"
#include "common/rpc.h"
#include "common/tensor_codec.h"
#include "transport/transport.h"

namespace pstrain::bench {
namespace {

// What the memory worker is asked (Command.op); Command.size_index picks the optimizer.
constexpr int32_t kMemConfigure = 11;  // Configure the PS: it serves once this answers
constexpr int32_t kMemCreate = 12;     // create the variable with its initial value
constexpr int32_t kMemServe = 13;      // Command.steps pushes + pulls of the whole variable

constexpr absl::Duration kTimeout = absl::Seconds(300);

struct OptimizerCase {
  const char* name;
  int slots;  // optimizer slots of the variable's size
};
constexpr OptimizerCase kOptimizers[] = {{"sgd", 0}, {"adam", 2}};

// The PS's memory, in bytes, from /proc/<pid>/status: "VmRSS" (now) or "VmHWM" (peak); -1 if
// it cannot be read.
int64_t StatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::atoll(line.c_str() + field.size() + 1) * 1024;
  }
  return -1;
}

// Sets the process's VmHWM back to its VmRSS (Linux 4.0 and later).
bool ResetPeak(pid_t pid) {
  std::ofstream out(absl::StrCat("/proc/", pid, "/clear_refs"));
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

struct MemoryWorker {
  std::string address, transport;
  int64_t floats = 0;
  std::unique_ptr<PsClient> client;
  std::vector<Tensor> grads;
};

absl::Status Configure(const MemoryWorker& w) {
  auto stub = ParameterServerService::NewStub(MakeChannel(w.address));
  ConfigureRequest req;
  *req.mutable_sender() = MakeSender("chief", 0);
  req.mutable_consistency()->set_mode("async");
  req.mutable_consistency()->set_num_workers(1);
  req.mutable_consistency()->set_replicas_to_aggregate(1);
  ConfigureResponse resp;
  return FromGrpcStatus(
      stub->Configure(ContextWithTimeout(absl::Seconds(60), true).get(), req, &resp), "Configure",
      w.address);
}

absl::Status Create(const MemoryWorker& w, const OptimizerCase& opt) {
  auto stub = ParameterServerService::NewStub(MakeChannel(w.address));
  CreateVariablesRequest req;
  *req.mutable_sender() = MakeSender("chief", 0);
  VariableDef* def = req.add_variables();
  def->set_name("memory");
  {
    const std::vector<float> init(w.floats, 0.25f);
    EncodeTensor(std::vector<int64_t>{w.floats}, init.data(), def->mutable_initial_value());
  }
  def->mutable_optimizer()->set_name(opt.name);
  def->mutable_optimizer()->set_learning_rate(1e-4);
  CreateVariablesResponse resp;
  return FromGrpcStatus(stub->CreateVariables(ContextWithTimeout(kTimeout).get(), req, &resp),
                        "CreateVariables", w.address);
}

absl::Status Serve(MemoryWorker& w, int steps) {
  if (!w.client) {
    SetTransportOptions({.transport = w.transport});
    VariableRef v{"memory", {w.floats}, {{"memory", 0, 0, w.floats}}};
    w.client =
        std::make_unique<PsClient>(std::vector<std::string>{w.address}, std::vector<VariableRef>{v},
                                   MakeSender("worker", 0), kTimeout);
    Tensor g(std::vector<int64_t>{w.floats});
    g.values.assign(w.floats, 1e-3f);
    w.grads = {std::move(g)};
  }
  for (int k = 0; k < steps; ++k) {
    std::vector<const float*> values;
    if (absl::Status s = w.client->Pull(&values); !s.ok()) return s;
    if (absl::Status s = w.client->Push(w.grads); !s.ok()) return s;
  }
  return absl::OkStatus();
}

CommandHandler MemoryWorkerHandler(std::string address, std::string transport, int64_t floats) {
  auto w = std::make_shared<MemoryWorker>();
  w->address = std::move(address);
  w->transport = std::move(transport);
  w->floats = floats;
  return [w](const Command& c) {
    absl::Status s;
    const bool known_opt = c.size_index >= 0 && c.size_index < 2;
    if (c.op == kMemConfigure) {
      s = Configure(*w);
    } else if (c.op == kMemCreate && known_opt) {
      s = Create(*w, kOptimizers[c.size_index]);
    } else if (c.op == kMemServe) {
      s = Serve(*w, c.steps);
    } else {
      s = absl::InvalidArgumentError("bench memory worker: bad command");
    }
    Reply r;
    if (!s.ok()) r.error = std::string(s.message());
    return r;
  };
}

// One trial's measurements, in bytes.
struct Trial {
  int64_t baseline = 0;  // VmRSS once the PS serves
  int64_t created = 0;   // VmHWM through the creation
  int64_t served = 0;    // VmHWM through the pushes and pulls (reset after the creation)
  int64_t after = 0;     // VmRSS at the end
};

// Runs one PS of `binary` with one variable of `floats` floats and optimizer `opt`.
absl::StatusOr<Trial> RunTrial(const std::string& binary, const std::string& transport, int opt,
                               int64_t floats, int steps, const std::string& dir) {
  absl::StatusOr<int> ps_port = FreePort(), chief_port = FreePort();
  if (!ps_port.ok()) return ps_port.status();
  if (!chief_port.ok()) return chief_port.status();
  const std::string address = absl::StrCat("127.0.0.1:", *ps_port);
  const std::string config =
      absl::StrCat("TF_CONFIG={\"cluster\": {\"chief\": [\"127.0.0.1:", *chief_port,
                   "\"], \"ps\": [\"", address, "\"], \"worker\": [\"127.0.0.1:1\"]}}");
  const std::string log = absl::StrCat(dir, "/ps.log");
  absl::StatusOr<std::unique_ptr<Process>> ps =
      Process::Start(binary,
                     {"server", "--job", "ps", "--task", "0", "--connect_timeout", "600",
                      "--log_level", "warn", "--transport", transport},
                     {config}, log);
  if (!ps.ok()) return ps.status();
  absl::StatusOr<std::unique_ptr<Helper>> worker =
      Helper::Fork(MemoryWorkerHandler(address, transport, floats));
  if (!worker.ok()) return worker.status();
  const pid_t pid = (*ps)->pid();
  const auto run = [&](const Command& c) -> absl::Status {
    absl::Status s = RunAll({worker->get()}, c, kTimeout).status();
    if (!s.ok() && !(*ps)->Running()) {
      s = absl::UnavailableError(
          absl::StrCat(s.message(), "; the PS ended: ", LastLine(ReadFile(log))));
    }
    return s;
  };
  Trial t;
  if (absl::Status s = run({kMemConfigure, 0, 0}); !s.ok()) return s;
  t.baseline = StatusBytes(pid, "VmRSS");
  if (absl::Status s = run({kMemCreate, opt, 0}); !s.ok()) return s;
  t.created = StatusBytes(pid, "VmHWM");
  if (!ResetPeak(pid)) return absl::UnavailableError("cannot reset the PS's VmHWM (clear_refs)");
  if (absl::Status s = run({kMemServe, opt, steps}); !s.ok()) return s;
  t.served = StatusBytes(pid, "VmHWM");
  t.after = StatusBytes(pid, "VmRSS");
  if (t.baseline < 0 || t.created < 0 || t.served < 0) {
    return absl::UnavailableError(absl::StrCat("cannot read /proc/", pid, "/status"));
  }
  return t;
}

std::string Mb(double bytes) { return Fixed(bytes / (1 << 20), 0); }

}  // namespace

std::vector<Table> MemoryTables(const BenchOptions& o) {
  const int64_t bytes = o.quick ? int64_t{16} << 20 : int64_t{256} << 20;
  const int steps = o.quick ? 1 : 3, reps = o.quick ? 1 : 3;
  std::vector<std::pair<std::string, std::string>> builds = {{"this build", o.self}};
  if (!o.memory_baseline.empty()) builds.insert(builds.begin(), {"baseline", o.memory_baseline});
  Table t{absl::StrCat("Peak memory of a PS serving one ", bytes >> 20, " MB variable (MB)"),
          {"build", "transport", "optimizer", "variable + slots", "PS baseline RSS",
           "creation peak", "ratio", "serving peak", "ratio", "RSS after", "target", "met"}};
  char dir_template[] = "/tmp/pstrain-bench-memory-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    t.rows.push_back({"all", "all", "all", "unavailable: mkdtemp failed"});
    return {t};
  }
  for (const std::string& transport : o.transports) {
    for (int opt = 0; opt < 2; ++opt) {
      const double held = static_cast<double>(bytes) * (1 + kOptimizers[opt].slots);
      // Per build: baseline, creation peak, serving peak and RSS after, above the baseline.
      std::vector<std::vector<double>> m[4];
      for (auto& v : m) v.resize(builds.size());
      absl::Status s;
      for (int r = 0; r < reps && s.ok(); ++r) {
        for (size_t k = 0; k < builds.size() && s.ok(); ++k) {
          const size_t b = (k + r) % builds.size();  // each build goes first in turn
          absl::StatusOr<Trial> trial =
              RunTrial(builds[b].second, transport, opt, bytes / 4, steps, dir);
          s = trial.status();
          if (!s.ok()) break;
          m[0][b].push_back(static_cast<double>(trial->baseline));
          m[1][b].push_back(static_cast<double>(trial->created - trial->baseline));
          m[2][b].push_back(static_cast<double>(trial->served - trial->baseline));
          m[3][b].push_back(static_cast<double>(trial->after - trial->baseline));
        }
      }
      if (!s.ok()) {
        t.rows.push_back(
            {"-", transport, kOptimizers[opt].name, absl::StrCat("unavailable: ", s.message())});
        continue;
      }
      for (size_t b = 0; b < builds.size(); ++b) {
        const double created = Median(m[1][b]), served = Median(m[2][b]);
        t.rows.push_back({builds[b].first, transport, kOptimizers[opt].name, Mb(held),
                          Mb(Median(m[0][b])), Mb(created), Ratio(created, held), Mb(served),
                          Ratio(served, held), Mb(Median(m[3][b])), "<= 1.2x (serving)",
                          Met(served / held, 1.2, false)});
      }
    }
  }
  t.notes.push_back(absl::StrCat(
      "One `pstrain server` PS process per trial. PS baseline RSS: VmRSS once it serves, before "
      "the variable exists; every other column is above it. Creation peak: VmHWM while the "
      "chief's CreateVariables (carrying the initial value) is served. Serving peak: VmHWM, "
      "reset after the creation, through ",
      steps,
      " pulls and pushes of the whole variable from a PsClient in another process. "
      "Ratio: to the variable and its slots (adam: 2). Medians of ",
      reps, " trials per build, the builds alternating."));
  if (std::getenv("PSTRAIN_BENCH_KEEP") == nullptr) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  return {t};
}

}  // namespace pstrain::bench
