// `pstrain bench`, transport section: push+pull throughput of one dense float32 variable per
// size through `pstrain server` PS processes, with 1 PS + 1 worker and 2 PS + 2 workers, driven
// by users' programs on the public Client (a chief of client programs per size) and by forked
// workers on PsClient (the built-in trainer's client), next to ping-pongs of the same bytes
// between two processes (one pair per worker) over raw TCP and over ZeroMQ, and memcpy of the
// same bytes in this process; then the latency of a 4 KB pull against the round trips of 4 KB.
// Repetitions interleave every measurement of a size, each going first in turn.
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

// A pair of processes per worker moving the same bytes: a ping-pong over raw TCP or ZeroMQ.
struct Pairs {
  std::vector<std::unique_ptr<Helper>> servers, clients;
  std::vector<Helper*> Clients(int n) const {
    std::vector<Helper*> h;
    for (int i = 0; i < n; ++i) h.push_back(clients[i].get());
    return h;
  }
};

absl::StatusOr<Pairs> StartTcp(const std::vector<int64_t>& bytes, int pairs) {
  Pairs t;
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
        RunAll({client->get()}, {kConnect, 0, port}, kTransportTimeout);
    if (!connected.ok()) return connected.status();
    t.servers.push_back(*std::move(server));
    t.clients.push_back(*std::move(client));
  }
  return t;
}

absl::StatusOr<Pairs> StartZmq(const std::vector<int64_t>& bytes, int pairs) {
  Pairs t;
  for (int i = 0; i < pairs; ++i) {
    absl::StatusOr<int> port = FreePort();
    if (!port.ok()) return port.status();
    absl::StatusOr<std::unique_ptr<Helper>> server = Helper::Fork(ZmqEchoServer());
    if (!server.ok()) return server.status();
    if (absl::Status s = (*server)->Send({kEcho, 0, *port}); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<Helper>> client = Helper::Fork(ZmqClient(bytes));
    if (!client.ok()) return client.status();
    // One untimed round trip: the server is bound and the connection made.
    absl::StatusOr<std::vector<Reply>> connected =
        RunAll({client->get()}, {kConnect, 0, *port}, kTransportTimeout);
    if (connected.ok()) connected = RunAll({client->get()}, {kStep, 0, 1}, kTransportTimeout);
    if (!connected.ok()) return connected.status();
    t.servers.push_back(*std::move(server));
    t.clients.push_back(*std::move(client));
  }
  return t;
}

// GB/s of `bytes_per_step` per helper over their steps: every helper's bytes over the longest
// helper's time.
absl::StatusOr<double> Throughput(const std::vector<Helper*>& helpers, int size_index, int steps,
                                  double bytes_per_step) {
  absl::StatusOr<std::vector<Reply>> r =
      RunAll(helpers, {kStep, size_index, steps}, kTransportTimeout);
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

// The targets a row is held to: the public Client against TCP (1 to 64 MB; 0.8x with 1 PS + 1
// worker, 0.7x with 2 + 2) and against ZeroMQ (64 KB to 64 MB, 1 PS + 1 worker); over UCX
// (shared memory), PsClient against memcpy.
struct Bounds {
  double tcp = 0, zmq = 0, memcpy = 0;  // 0: not held to it
};
Bounds BoundsOf(const std::string& transport, const Size& s, int num_ps) {
  Bounds b;
  const bool mid = s.bytes >= (1 << 20) && s.bytes <= (int64_t{64} << 20);
  if (transport == "ucx") {
    if (num_ps == 1 && mid) b.memcpy = 0.5;
    return b;
  }
  if (mid) b.tcp = num_ps == 1 ? 0.8 : 0.7;
  if (num_ps == 1 && s.bytes >= (64 << 10) && s.bytes <= (int64_t{64} << 20)) b.zmq = 1.3;
  return b;
}
std::string TargetText(const Bounds& b) {
  std::vector<std::string> parts;
  if (b.tcp > 0) parts.push_back(absl::StrCat("Client >= ", Fixed(b.tcp, 1), "x TCP"));
  if (b.zmq > 0) parts.push_back(absl::StrCat("Client >= ", Fixed(b.zmq, 1), "x ZeroMQ"));
  if (b.memcpy > 0) parts.push_back(absl::StrCat("PsClient >= ", Fixed(b.memcpy, 1), "x memcpy"));
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

// One layout's medians at one size (GB/s; 0 where not measured).
struct Medians {
  double client = 0, ps_client = 0, tcp = 0, zmq = 0, memcpy = 0;
};
std::string MetText(const Bounds& b, const Medians& m) {
  if (b.tcp == 0 && b.zmq == 0 && b.memcpy == 0) return "-";
  std::vector<std::string> missed;
  if (b.tcp > 0 && !(m.client >= b.tcp * m.tcp)) missed.push_back("TCP");
  if (b.zmq > 0 && !(m.client >= b.zmq * m.zmq)) missed.push_back("ZeroMQ");
  if (b.memcpy > 0 && !(m.ps_client >= b.memcpy * m.memcpy)) missed.push_back("memcpy");
  return missed.empty() ? "yes" : absl::StrCat("no (", absl::StrJoin(missed, ", "), ")");
}
// `client`: false when the Client's job could not start (a note says why).
std::vector<std::string> Row(const Size& z, const std::string& layout, const Medians& m,
                             const Bounds& b, bool client) {
  const auto gbs = [](double v) { return v > 0 ? Fixed(v, 3) : std::string("-"); };
  return {z.label,
          layout,
          client ? gbs(m.client) : "unavailable",
          gbs(m.ps_client),
          gbs(m.tcp),
          gbs(m.zmq),
          Fixed(m.memcpy, 2),
          client ? Ratio(m.client, m.tcp) : "-",
          client && m.zmq > 0 ? Ratio(m.client, m.zmq) : "-",
          Ratio(m.ps_client, m.tcp),
          TargetText(b),
          client ? MetText(b, m) : MetText({.tcp = 0, .zmq = 0, .memcpy = b.memcpy}, m)};
}

struct Latency {
  std::vector<double> ps_client, client, tcp, zmq;  // microseconds
};

// The round trips of 4 KB of every kind, in blocks that take turns going first.
absl::Status MeasureLatency(const std::vector<std::vector<Helper*>>& kinds, int blocks,
                            int per_block, std::vector<std::vector<double>*> into) {
  for (int b = 0; b < blocks; ++b) {
    for (size_t k = 0; k < kinds.size(); ++k) {
      const size_t which = (k + b) % kinds.size();
      if (kinds[which].empty()) continue;
      absl::StatusOr<std::vector<Reply>> r =
          RunAll(kinds[which], {kLatency, 0, per_block}, kTransportTimeout);
      if (!r.ok()) return r.status();
      into[which]->insert(into[which]->end(), (*r)[0].samples.begin(), (*r)[0].samples.end());
    }
  }
  return absl::OkStatus();
}

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
                {"transport", "quantile", "PsClient", "Client", "TCP round trip",
                 "ZeroMQ round trip", "PsClient/TCP", "Client/TCP", "target", "met"}};
  absl::StatusOr<Pairs> tcp =
      dir == nullptr ? absl::InternalError("mkdtemp failed") : StartTcp(bytes, 2);
  if (!tcp.ok()) {
    Table t{"Push+pull throughput", {"what", "result"}};
    t.rows.push_back({"TCP baseline", absl::StrCat("unavailable: ", tcp.status().message())});
    return {t};
  }
  // Without ZeroMQ the tables say why and leave its columns empty.
  absl::StatusOr<Pairs> zmq = StartZmq(bytes, 2);
  const bool flag = ServerHasTransportFlag(o, dir);
  std::vector<char> mem_a, mem_b;
  for (const std::string& transport : o.transports) {
    Table t{absl::StrCat("Push+pull throughput over ", transport,
                         " (GB/s, both directions, all workers)"),
            {"size", "layout", "Client", "PsClient", "TCP ping-pong", "ZeroMQ ping-pong", "memcpy",
             "Client/TCP", "Client/ZeroMQ", "PsClient/TCP", "target", "met"}};
    Cluster one("1 PS + 1 worker"), two("2 PS + 2 workers");
    absl::Status s;
    if (!flag && transport != "grpc") {
      s = absl::UnavailableError("pstrain server has no --transport flag yet");
    }
    const std::string base = absl::StrCat(dir, "/", transport);
    const auto make_dir = [](const std::string& d) {
      std::error_code ignored;  // a missing directory shows as the processes' failure to log
      std::filesystem::create_directories(d, ignored);
      return d;
    };
    if (s.ok()) {
      s = StartCluster(o, transport, flag, floats, 1, 1, make_dir(base + "-1"), &one);
      if (!s.ok()) {
        s = absl::UnavailableError(one.Why(s));
      } else if (s = StartCluster(o, transport, flag, floats, 2, 2, make_dir(base + "-2"), &two);
                 !s.ok()) {
        s = absl::UnavailableError(two.Why(s));
      }
    }
    if (!s.ok()) {
      t.rows.push_back({"all", "all", absl::StrCat("unavailable: ", s.message())});
      latency.rows.push_back({transport, "p50, p99", absl::StrCat("unavailable: ", s.message())});
      tables.push_back(t);
      continue;
    }
    // The public Client's clusters of the 4 KB size, kept for the latency.
    std::unique_ptr<Cluster> small_clients;
    for (size_t i = 0; i < sizes.size() && s.ok(); ++i) {
      const Size& z = sizes[i];
      // A chief of client programs per layout for this size: a Client pulls every variable it
      // created, so each size has a job of its own.
      // A start that failed (a port taken between FreePort and the bind, on a busy machine) is
      // tried once more, on other ports.
      const std::string d = absl::StrCat(base, "-client-", Compact(z.label));
      const auto start = [&](int n, std::unique_ptr<Cluster>* c) {
        absl::Status st;
        for (int attempt = 0; attempt < 2; ++attempt) {
          *c = std::make_unique<Cluster>(n == 1 ? one.name : two.name);
          st = StartClientCluster(o, transport, flag, floats[i], n, n,
                                  make_dir(absl::StrCat(d, "-", n, "-", attempt)), c->get());
          if (st.ok()) return st;
          st = absl::UnavailableError((*c)->Why(st));
        }
        return st;
      };
      std::unique_ptr<Cluster> c1, c2;
      absl::Status cs = start(1, &c1);
      if (cs.ok()) cs = start(2, &c2);
      if (!cs.ok()) t.notes.push_back(absl::StrCat(z.label, ": Client ", cs.message()));
      // 0: PsClient 1x1, 1: TCP 1 pair, 2: memcpy, 3: PsClient 2x2, 4: TCP 2 pairs,
      // 5: Client 1x1, 6: Client 2x2, 7: ZeroMQ 1 pair, 8: ZeroMQ 2 pairs.
      constexpr int kKinds = 9;
      std::vector<double> m[kKinds];
      const double per_step = 2.0 * static_cast<double>(z.bytes);
      for (int r = 0; r < z.reps && s.ok(); ++r) {
        for (int k = 0; k < kKinds && s.ok(); ++k) {
          const int which = (k + r) % kKinds;
          if ((which == 5 || which == 6) && !cs.ok()) continue;
          if ((which == 7 || which == 8) && !zmq.ok()) continue;
          absl::StatusOr<double> gbs =
              which == 0   ? Throughput(one.Workers(), i, z.steps, per_step)
              : which == 1 ? Throughput(tcp->Clients(1), i, z.steps, per_step)
              : which == 2 ? MemcpyThroughput(&mem_a, &mem_b, z.bytes, z.steps)
              : which == 3 ? Throughput(two.Workers(), i, z.steps, per_step)
              : which == 4 ? Throughput(tcp->Clients(2), i, z.steps, per_step)
              : which == 5 ? Throughput(c1->Workers(), i, z.steps, per_step)
              : which == 6 ? Throughput(c2->Workers(), i, z.steps, per_step)
              : which == 7 ? Throughput(zmq->Clients(1), i, z.steps, per_step)
                           : Throughput(zmq->Clients(2), i, z.steps, per_step);
          if (gbs.ok()) m[which].push_back(*gbs);
          s = gbs.status();
        }
      }
      if (!s.ok()) break;
      const double mc = Median(m[2]);
      const Medians m1{Median(m[5]), Median(m[0]), Median(m[1]), Median(m[7]), mc};
      const Medians m2{Median(m[6]), Median(m[3]), Median(m[4]), Median(m[8]), mc};
      t.rows.push_back(Row(z, one.name, m1, BoundsOf(transport, z, 1), cs.ok()));
      t.rows.push_back(Row(z, two.name, m2, BoundsOf(transport, z, 2), cs.ok()));
      if (z.bytes == 4 << 10 && cs.ok()) small_clients = std::move(c1);
    }
    // Latency: blocks of 4 KB pulls and of round trips, taking turns.
    Latency lat;
    const bool small = !sizes.empty() && sizes[0].bytes == 4 << 10;
    if (s.ok() && small) {
      std::vector<Helper*> none;
      s = MeasureLatency({one.Workers(), small_clients ? small_clients->Workers() : none,
                          tcp->Clients(1), zmq.ok() ? zmq->Clients(1) : none},
                         o.quick ? 2 : 10, o.quick ? 50 : 200,
                         {&lat.ps_client, &lat.client, &lat.tcp, &lat.zmq});
    }
    if (!s.ok()) {
      t.rows.push_back({"-", "-", absl::StrCat("failed: ", s.message())});
    } else if (!small) {
      latency.rows.push_back({transport, "p50, p99", "not measured: --sizes leaves out 4KB"});
    } else {
      for (const auto& [q, name, bound] : {std::tuple{0.5, "p50", 2.0}, {0.99, "p99", 5.0}}) {
        const double p = Quantile(lat.ps_client, q), c = Quantile(lat.client, q),
                     r = Quantile(lat.tcp, q), zq = Quantile(lat.zmq, q);
        const auto us = [](double v) { return v > 0 ? Fixed(v, 1) : std::string("-"); };
        latency.rows.push_back(
            {transport, name, us(p), us(c), us(r), us(zq), Ratio(p, r), c > 0 ? Ratio(c, r) : "-",
             absl::StrCat("PsClient <= ", Fixed(bound, 0), "x TCP"), Met(p / r, bound, false)});
      }
    }
    t.notes.push_back(absl::StrCat(
        "Client: a user's program on the public C++ client (client/client.h), Pull + Push of one "
        "variable split over the PS tasks, in a job of its own per size (a chief of client "
        "programs). PsClient: the built-in trainer's client, the same steps. Both count bytes "
        "pulled plus bytes pushed per second over all workers. TCP and ZeroMQ: ping-pongs of the "
        "same bytes each way between two processes, one pair per worker, run alongside (ZeroMQ: "
        "REQ/REP over tcp://127.0.0.1, sent without a copy as ps-lite does). memcpy: the same "
        "bytes copied there and back in one process. Medians of interleaved repetitions (size: "
        "steps x repetitions): ",
        absl::StrJoin(sizes, ", ",
                      [](std::string* out, const Size& z) {
                        absl::StrAppend(out, z.label, ": ", z.steps, " x ", z.reps);
                      }),
        "."));
    if (!zmq.ok()) t.notes.push_back(absl::StrCat("ZeroMQ: ", zmq.status().message()));
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
