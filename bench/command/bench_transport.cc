// `pstrain bench`, transport section: push+pull throughput of one dense float32 variable per
// size through `pstrain server` PS processes and forked workers driving PsClient, with 1 PS + 1
// worker and 2 PS + 2 workers, next to a raw TCP ping-pong of the same bytes between two
// processes (one pair per worker) and memcpy of the same bytes in this process; then the latency
// of a 4 KB pull against the TCP round trip of 4 KB. Repetitions interleave every measurement of
// a size, each going first in turn.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "bench/command/bench_internal.h"

namespace pstrain::bench {
namespace {

struct Size {
  const char* label;
  int64_t bytes;
  int steps, reps;  // per repetition, and repetitions, of a full run
  int quick_steps;  // 0: not measured with --quick
};
const Size kSizes[] = {
    {"4 KB", 4 << 10, 400, 7, 20},         {"64 KB", 64 << 10, 200, 7, 10},
    {"1 MB", 1 << 20, 40, 7, 4},           {"16 MB", 16 << 20, 4, 5, 0},
    {"64 MB", int64_t{64} << 20, 1, 5, 0}, {"256 MB", int64_t{256} << 20, 1, 3, 0}};
constexpr absl::Duration kTimeout = absl::Seconds(300);

// "16 MB" as a --sizes value: "16MB".
std::string Compact(const char* label) { return absl::StrReplaceAll(label, {{" ", ""}}); }

bool Chosen(const BenchOptions& o, const Size& s) {
  return o.sizes.empty() ||
         std::find(o.sizes.begin(), o.sizes.end(), Compact(s.label)) != o.sizes.end();
}

std::vector<Size> Sizes(const BenchOptions& o) {
  std::vector<Size> sizes;
  for (const Size& s : kSizes) {
    if (!Chosen(o, s)) continue;
    if (!o.quick) sizes.push_back(s);
    if (o.quick && s.quick_steps > 0) sizes.push_back({s.label, s.bytes, s.quick_steps, 1, 1});
  }
  return sizes;
}

// A pair of processes per worker moving the same bytes over plain TCP.
struct TcpPairs {
  std::vector<std::unique_ptr<Helper>> servers, clients;
  std::vector<Helper*> Clients(int n) const {
    std::vector<Helper*> h;
    for (int i = 0; i < n; ++i) h.push_back(clients[i].get());
    return h;
  }
};

absl::StatusOr<TcpPairs> StartTcp(const std::vector<int64_t>& bytes, int pairs) {
  TcpPairs t;
  for (int i = 0; i < pairs; ++i) {
    int port = 0;
    absl::StatusOr<int> fd = Listen(&port);
    if (!fd.ok()) return fd.status();
    absl::StatusOr<std::unique_ptr<Helper>> server = Helper::Fork(EchoServer(*fd));
    close(*fd);
    if (!server.ok()) return server.status();
    if (absl::Status s = (*server)->Send({kEcho, 0, 0}); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<Helper>> client = Helper::Fork(TcpClient(bytes));
    if (!client.ok()) return client.status();
    absl::StatusOr<std::vector<Reply>> connected =
        RunAll({client->get()}, {kConnect, 0, port}, kTimeout);
    if (!connected.ok()) return connected.status();
    t.servers.push_back(*std::move(server));
    t.clients.push_back(*std::move(client));
  }
  return t;
}

// PS processes of one layout and the workers that drive them.
struct Cluster {
  explicit Cluster(std::string n) : name(std::move(n)) {}
  std::string name;  // "1 PS + 1 worker"
  std::string dir;   // the PS logs
  std::vector<std::unique_ptr<Process>> ps;
  std::vector<std::unique_ptr<Helper>> workers;
  std::vector<Helper*> Workers() const {
    std::vector<Helper*> h;
    for (const auto& w : workers) h.push_back(w.get());
    return h;
  }
  // Why the cluster failed: `s`, and the last log line of a PS that ended.
  std::string Why(const absl::Status& s) {
    std::string why(s.message());
    for (size_t i = 0; i < ps.size(); ++i) {
      if (!ps[i]->Running()) {
        absl::StrAppend(&why, "; ps ", i,
                        " ended: ", LastLine(ReadFile(absl::StrCat(dir, "/ps-", i, ".log"))));
      }
    }
    return why;
  }
};

absl::StatusOr<std::string> Address() {
  absl::StatusOr<int> port = FreePort();
  if (!port.ok()) return port.status();
  return absl::StrCat("127.0.0.1:", *port);
}

// Starts `num_ps` PS tasks (`pstrain server`, no chief: they serve while they wait for one, for
// up to --connect_timeout) and forks `num_workers` workers, then sets the PS up and connects.
absl::Status StartCluster(const BenchOptions& o, const std::string& transport, bool flag,
                          const std::vector<int64_t>& floats, int num_ps, int num_workers,
                          const std::string& dir, Cluster* c) {
  std::vector<std::string> ps, workers;
  absl::StatusOr<std::string> chief = Address();
  if (!chief.ok()) return chief.status();
  for (int i = 0; i < num_ps + num_workers; ++i) {
    absl::StatusOr<std::string> a = Address();
    if (!a.ok()) return a.status();
    (i < num_ps ? ps : workers).push_back(*a);
  }
  const auto list = [](const std::vector<std::string>& v) {
    return absl::StrCat("[\"", absl::StrJoin(v, "\", \""), "\"]");
  };
  const std::string cluster = absl::StrCat("{\"chief\": [\"", *chief, "\"], \"ps\": ", list(ps),
                                           ", \"worker\": ", list(workers), "}");
  c->dir = dir;
  for (int i = 0; i < num_ps; ++i) {
    std::vector<std::string> args = {"server", "--job",           "ps",
                                     "--task", std::to_string(i), "--connect_timeout",
                                     "600",    "--log_level",     "warn"};
    if (flag) args.insert(args.end(), {"--transport", transport});
    absl::StatusOr<std::unique_ptr<Process>> p =
        Process::Start(o.self, args, {absl::StrCat("TF_CONFIG={\"cluster\": ", cluster, "}")},
                       absl::StrCat(dir, "/ps-", i, ".log"));
    if (!p.ok()) return p.status();
    c->ps.push_back(*std::move(p));
  }
  for (int i = 0; i < num_workers; ++i) {
    absl::StatusOr<std::unique_ptr<Helper>> w =
        Helper::Fork(PsWorker({ps, i, num_workers, transport, floats}));
    if (!w.ok()) return w.status();
    c->workers.push_back(*std::move(w));
  }
  absl::StatusOr<std::vector<Reply>> r = RunAll({c->workers[0].get()}, {kSetup}, kTimeout);
  if (r.ok()) r = RunAll(c->Workers(), {kConnect}, kTimeout);
  return r.status();
}

// GB/s of `bytes_per_step` per helper over their steps: every helper's bytes over the longest
// helper's time.
absl::StatusOr<double> Throughput(const std::vector<Helper*>& helpers, int size_index, int steps,
                                  double bytes_per_step) {
  absl::StatusOr<std::vector<Reply>> r = RunAll(helpers, {kStep, size_index, steps}, kTimeout);
  if (!r.ok()) return r.status();
  double seconds = 0;
  for (const Reply& x : *r) seconds = std::max(seconds, x.seconds);
  return bytes_per_step * steps * static_cast<double>(helpers.size()) / seconds / 1e9;
}

// memcpy of `n` bytes there and back, in GB/s of both directions.
double MemcpyThroughput(std::vector<char>* a, std::vector<char>* b, int64_t n, int steps) {
  if (static_cast<int64_t>(a->size()) < n) {
    a->assign(n, 1);
    b->assign(n, 2);
  }
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < steps; ++k) {
    std::memcpy(b->data(), a->data(), n);
    std::memcpy(a->data(), b->data(), n);
  }
  const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
  // Keeps the copies from being elided: their result is read.
  if ((*a)[n - 1] == 3) std::abort();
  return 2.0 * n * steps / d.count() / 1e9;
}

// True if `pstrain server` takes --transport.
bool ServerHasTransportFlag(const BenchOptions& o, const std::string& dir) {
  const std::string log = dir + "/server-help.txt";
  absl::StatusOr<std::unique_ptr<Process>> p =
      Process::Start(o.self, {"server", "--help"}, {}, log);
  if (!p.ok() || !(*p)->Wait(absl::Seconds(30)).ok()) return false;
  return ReadFile(log).find("--transport") != std::string::npos;
}

std::string Target(const std::string& transport, const Size& s, int num_ps) {
  if (num_ps != 1 || s.bytes < (1 << 20) || s.bytes > (int64_t{64} << 20)) return "-";
  return transport == "ucx" ? ">= 0.5x memcpy" : ">= 0.8x TCP";
}

struct Latency {
  std::vector<double> pstrain, tcp;  // microseconds
};

}  // namespace

absl::Status CheckSizes(const BenchOptions& o) {
  std::vector<std::string> known;
  for (const Size& s : kSizes) known.push_back(Compact(s.label));
  for (const std::string& s : o.sizes) {
    if (std::find(known.begin(), known.end(), s) == known.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown size \"", s, "\" in --sizes (", absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

std::vector<Table> TransportTables(const BenchOptions& o) {
  const std::vector<Size> sizes = Sizes(o);
  std::vector<int64_t> bytes, floats;
  for (const Size& s : sizes) {
    bytes.push_back(s.bytes);
    floats.push_back(s.bytes / 4);
  }
  char dir_template[] = "/tmp/pstrain-bench-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  std::vector<Table> tables;
  Table latency{"4 KB pull latency (microseconds; 1 PS + 1 worker)",
                {"transport", "quantile", "pstrain", "TCP round trip", "ratio", "target", "met"}};
  absl::StatusOr<TcpPairs> tcp =
      dir == nullptr ? absl::InternalError("mkdtemp failed") : StartTcp(bytes, 2);
  if (!tcp.ok()) {
    Table t{"Push+pull throughput", {"what", "result"}};
    t.rows.push_back({"TCP baseline", absl::StrCat("unavailable: ", tcp.status().message())});
    return {t};
  }
  const bool flag = ServerHasTransportFlag(o, dir);
  std::vector<char> mem_a, mem_b;
  for (const std::string& transport : o.transports) {
    Table t{absl::StrCat("Push+pull throughput over ", transport,
                         " (GB/s, both directions, all workers)"),
            {"size", "layout", "pstrain", "TCP ping-pong", "ratio", "memcpy", "ratio", "target",
             "met"}};
    Cluster one("1 PS + 1 worker"), two("2 PS + 2 workers");
    absl::Status s;
    if (!flag && transport != "grpc") {
      s = absl::UnavailableError("pstrain server has no --transport flag yet");
    }
    if (s.ok()) {
      const std::string d1 = absl::StrCat(dir, "/", transport, "-1"), d2 = d1 + "x2";
      std::error_code ignored;  // a missing directory shows as the PS's failure to log
      std::filesystem::create_directories(d1, ignored);
      std::filesystem::create_directories(d2, ignored);
      s = StartCluster(o, transport, flag, floats, 1, 1, d1, &one);
      if (!s.ok()) {
        s = absl::UnavailableError(one.Why(s));
      } else if (s = StartCluster(o, transport, flag, floats, 2, 2, d2, &two); !s.ok()) {
        s = absl::UnavailableError(two.Why(s));
      }
    }
    if (!s.ok()) {
      t.rows.push_back({"all", "all", absl::StrCat("unavailable: ", s.message())});
      latency.rows.push_back({transport, "p50, p99", absl::StrCat("unavailable: ", s.message())});
      tables.push_back(t);
      continue;
    }
    for (size_t i = 0; i < sizes.size() && s.ok(); ++i) {
      const Size& z = sizes[i];
      // 0: pstrain 1x1, 1: TCP 1 pair, 2: memcpy, 3: pstrain 2x2, 4: TCP 2 pairs.
      std::vector<double> m[5];
      for (int r = 0; r < z.reps && s.ok(); ++r) {
        for (int k = 0; k < 5 && s.ok(); ++k) {
          const int which = (k + r) % 5;
          const double per_step = 2.0 * static_cast<double>(z.bytes);
          absl::StatusOr<double> gbs =
              which == 0   ? Throughput(one.Workers(), i, z.steps, per_step)
              : which == 1 ? Throughput(tcp->Clients(1), i, z.steps, per_step)
              : which == 2 ? MemcpyThroughput(&mem_a, &mem_b, z.bytes, z.steps)
              : which == 3 ? Throughput(two.Workers(), i, z.steps, per_step)
                           : Throughput(tcp->Clients(2), i, z.steps, per_step);
          if (gbs.ok()) m[which].push_back(*gbs);
          s = gbs.status();
        }
      }
      if (!s.ok()) break;
      const double p1 = Median(m[0]), t1 = Median(m[1]), mc = Median(m[2]), p2 = Median(m[3]),
                   t2 = Median(m[4]);
      const bool shm = transport == "ucx";
      const std::string target = Target(transport, z, 1);
      const double bound_ratio = shm ? p1 / mc : p1 / t1;
      t.rows.push_back({z.label, one.name, Fixed(p1, 3), Fixed(t1, 3), Ratio(p1, t1), Fixed(mc, 2),
                        Ratio(p1, mc), target,
                        target == "-" ? "-" : Met(bound_ratio, shm ? 0.5 : 0.8, true)});
      t.rows.push_back({z.label, two.name, Fixed(p2, 3), Fixed(t2, 3), Ratio(p2, t2), Fixed(mc, 2),
                        Ratio(p2, mc), "-", "-"});
    }
    // Latency: blocks of 4 KB pulls and of TCP round trips, alternating.
    Latency lat;
    const int small = sizes.empty() || sizes[0].bytes != 4 << 10 ? -1 : 0;
    const int blocks = o.quick ? 2 : 10, per_block = o.quick ? 50 : 200;
    for (int b = 0; b < blocks && s.ok() && small == 0; ++b) {
      for (int k = 0; k < 2 && s.ok(); ++k) {
        const bool ps_side = (k + b) % 2 == 0;
        absl::StatusOr<std::vector<Reply>> r = RunAll(ps_side ? one.Workers() : tcp->Clients(1),
                                                      {kLatency, small, per_block}, kTimeout);
        s = r.status();
        if (!s.ok()) break;
        std::vector<double>& into = ps_side ? lat.pstrain : lat.tcp;
        into.insert(into.end(), (*r)[0].samples.begin(), (*r)[0].samples.end());
      }
    }
    if (!s.ok()) {
      t.rows.push_back({"-", "-", absl::StrCat("failed: ", s.message())});
    } else if (small < 0) {
      latency.rows.push_back({transport, "p50, p99", "not measured: --sizes leaves out 4KB"});
    } else {
      for (const auto& [q, name, bound] : {std::tuple{0.5, "p50", 2.0}, {0.99, "p99", 5.0}}) {
        const double p = Quantile(lat.pstrain, q), c = Quantile(lat.tcp, q);
        latency.rows.push_back({transport, name, Fixed(p, 1), Fixed(c, 1), Ratio(p, c),
                                absl::StrCat("<= ", Fixed(bound, 0), "x"),
                                Met(p / c, bound, false)});
      }
    }
    t.notes.push_back(absl::StrCat(
        "pstrain: PsClient Pull + Push of one variable (sharded by rows over the PS tasks), "
        "bytes pulled plus bytes pushed per second over all workers. TCP: a ping-pong of the same "
        "bytes each way between two processes, one pair per worker, run alongside. memcpy: the "
        "same bytes copied there and back in one process. Medians of interleaved repetitions "
        "(size: steps x repetitions): ",
        absl::StrJoin(sizes, ", ",
                      [](std::string* out, const Size& z) {
                        absl::StrAppend(out, z.label, ": ", z.steps, " x ", z.reps);
                      }),
        "."));
    tables.push_back(t);
  }
  tables.push_back(latency);
  if (dir != nullptr && std::getenv("PSTRAIN_BENCH_KEEP") == nullptr) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  return tables;
}

}  // namespace pstrain::bench
