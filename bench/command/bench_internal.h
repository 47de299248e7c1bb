// Internal to `pstrain bench` (bench/command/bench*.cc): options, result tables, helper processes
// and the sections' entry points. Every measurement is taken next to its baseline in the same run,
// repetitions interleaved, and reported as medians and their ratio.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pstrain::bench {

struct BenchOptions {
  std::string self;  // the pstrain binary
  bool quick = false;
  std::vector<std::string> transports = {"grpc", "tcp", "ucx"};
  std::vector<std::string> sections = {"transport", "apply", "e2e", "memory"};
  std::vector<std::string> sizes;  // transport sizes to measure ("16MB"); empty: all
  std::string data_dir = "data/mnist";
  std::string python = "/usr/bin/python3";
  std::string torch_script = "bench/torch_mlp.py";
  // Memory section: another pstrain binary whose PS is measured alongside (empty: none).
  std::string memory_baseline;
};

// A Markdown table; `notes` are printed under it.
struct Table {
  Table(std::string t, std::vector<std::string> h) : title(std::move(t)), header(std::move(h)) {}
  std::string title;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> notes;
};
std::string ToMarkdown(const Table& t);

// ---- statistics and formatting (bench_util.cc) ----
double Median(std::vector<double> v);
// The q-quantile (0..1) of v, nearest rank; 0 for an empty v.
double Quantile(std::vector<double> v, double q);
std::string Fixed(double v, int digits);
// "0.42x", or "-" when the baseline is zero.
std::string Ratio(double value, double baseline);
// "yes" / "no" for `ratio` against a lower bound (at_least) or an upper bound.
std::string Met(double ratio, double bound, bool at_least);

// ---- helper processes (bench_child.cc) ----

// What the bench asks a helper process to do, and its answer.
struct Command {
  int32_t op = 0;          // meaning is the helper's own; kQuit ends it
  int32_t size_index = 0;  // which tensor size
  int32_t steps = 0;       // repetitions of the operation
};
constexpr int32_t kQuit = -1;
struct Reply {
  double seconds = 0;           // wall time of the steps
  std::string error;            // non-empty: the command failed
  std::vector<double> samples;  // per-step times (latency commands)
};
using CommandHandler = std::function<Reply(const Command&)>;
// Runs `step` c.steps times, stopping at the first error (the reply's error, its message as
// given): the wall seconds of the steps, and with kLatency (below) each step's microseconds.
// The loop every helper that times steps shares (bench_util.cc).
Reply TimeSteps(const Command& c, const std::function<absl::Status()>& step);

// A forked process answering commands over pipes. Forked before the bench touches gRPC, so
// each helper sets up its own gRPC state. Killed (SIGKILL) and reaped when destroyed, and it
// dies with the bench (PR_SET_PDEATHSIG).
class Helper {
 public:
  static absl::StatusOr<std::unique_ptr<Helper>> Fork(CommandHandler handler);
  ~Helper();
  absl::Status Send(const Command& c);
  // The answer to the last command; DeadlineExceeded after `timeout`, Unavailable if the
  // process ended.
  absl::StatusOr<Reply> Receive(absl::Duration timeout);
  pid_t pid() const { return pid_; }

 private:
  Helper(pid_t pid, int to, int from) : pid_(pid), to_(to), from_(from) {}
  pid_t pid_;
  int to_, from_;  // pipe ends: commands to the helper, replies from it
};

// Sends `c` to every helper, then collects every answer; the first error (a failed command or
// a lost helper) is returned. Wall seconds: the longest of the helpers'.
absl::StatusOr<std::vector<Reply>> RunAll(const std::vector<Helper*>& helpers, const Command& c,
                                          absl::Duration timeout);

// A process of the pstrain binary with `args`, `env` added to the environment, output to `log`.
class Process {
 public:
  static absl::StatusOr<std::unique_ptr<Process>> Start(const std::string& binary,
                                                        const std::vector<std::string>& args,
                                                        const std::vector<std::string>& env,
                                                        const std::string& log);
  ~Process();  // SIGKILL and reap if still running
  // Waits up to `timeout` for the exit; its exit code, or DeadlineExceeded (the process is left
  // running).
  absl::StatusOr<int> Wait(absl::Duration timeout);
  bool Running();
  pid_t pid() const { return pid_; }

 private:
  explicit Process(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  bool reaped_ = false;
};

// A port of 127.0.0.1 free when asked.
absl::StatusOr<int> FreePort();
// The file's text, or "" if it cannot be read; the last non-empty line of it.
std::string ReadFile(const std::string& path);
std::string LastLine(const std::string& text);

// Operations the transport helpers answer (Command.op).
constexpr int32_t kSetup = 1;    // worker 0: configure the PS tasks and create the variables
constexpr int32_t kConnect = 2;  // make the clients (TCP: connect to port Command.steps)
constexpr int32_t kStep = 3;     // `steps` push+pull (TCP: round trips) of size `size_index`
constexpr int32_t kLatency = 4;  // as kStep, pull only, with per-step samples in microseconds
constexpr int32_t kEcho = 5;     // TCP echo server: serve one connection until it closes

// ---- raw TCP baseline (bench_tcp.cc) ----
// A listening socket on 127.0.0.1 (its port in *port) for EchoServer.
absl::StatusOr<int> Listen(int* port);
// Handles kEcho: accepts one connection on `listen_fd` and answers every round trip (an 8-byte
// length, then that many bytes) with as many bytes back.
CommandHandler EchoServer(int listen_fd);
// Handles kConnect, kStep and kLatency as the client of EchoServer; sizes[i] bytes each way.
CommandHandler TcpClient(std::vector<int64_t> sizes);

// ---- pstrain worker (bench_worker.cc) ----
struct WorkerSpec {
  std::vector<std::string> ps;  // addresses of the PS tasks, in task order
  int index = 0;                // this worker's task index
  int num_workers = 1;
  std::string transport;        // for SetTransportOptions
  std::vector<int64_t> floats;  // one variable per size, sharded by rows over every PS
};
// Handles kSetup (as the chief would: Configure every PS for async workers, CreateVariables),
// kConnect (one PsClient per size, one untimed step each), kStep (PsClient Pull + Push) and
// kLatency (Pull alone).
CommandHandler PsWorker(WorkerSpec spec);

// ---- public client (bench_client.cc) ----
struct ClientSpec {
  std::string chief;      // the chief's address (--model external)
  int index = 0;          // this program's worker task index
  int num_ps = 1;         // the variable is split in as many parts (fixed:N)
  std::string transport;  // ClientOptions::transport
  int64_t floats = 0;     // of the one variable
};
// Handles kConnect (Client::Connect, CreateVariable, one untimed step), kStep (Client::Pull +
// Client::Push) and kLatency (Pull alone).
CommandHandler ClientWorker(ClientSpec spec);

// ---- ZeroMQ baseline (bench_zmq.cc) ----
// Handles kEcho: binds a REP socket to tcp://127.0.0.1:<Command.steps> and sends every message
// back until the helper is killed.
CommandHandler ZmqEchoServer();
// Handles kConnect (a REQ socket to port Command.steps), kStep and kLatency as the client of
// ZmqEchoServer; sizes[i] bytes each way. Built without libzmq, every command fails saying so.
CommandHandler ZmqClient(std::vector<int64_t> sizes);

// ---- clusters (bench_cluster.cc) ----
inline constexpr absl::Duration kTransportTimeout = absl::Seconds(300);
struct Cluster {
  explicit Cluster(std::string n) : name(std::move(n)) {}
  std::string name;                // "1 PS + 1 worker"
  std::string dir;                 // the logs of its processes
  std::unique_ptr<Process> chief;  // with Client workers only
  std::vector<std::unique_ptr<Process>> ps;
  std::vector<std::unique_ptr<Helper>> workers;
  std::vector<Helper*> Workers() const {
    std::vector<Helper*> h;
    for (const auto& w : workers) h.push_back(w.get());
    return h;
  }
  // Why the cluster failed: `s`, and the last log line of a process that ended.
  std::string Why(const absl::Status& s);
};

// `num_ps` PS tasks (`pstrain server`, with --transport `transport` when `flag`, no chief) and
// `num_workers` forked PsWorkers over `floats`; the first sets the PS up, then all connect.
absl::Status StartCluster(const BenchOptions& o, const std::string& transport, bool flag,
                          const std::vector<int64_t>& floats, int num_ps, int num_workers,
                          const std::string& dir, Cluster* c);
// The same PS with a chief of client programs (--model external) and `num_workers` forked
// ClientWorkers over one variable of `floats`, connected.
absl::Status StartClientCluster(const BenchOptions& o, const std::string& transport, bool flag,
                                int64_t floats, int num_ps, int num_workers, const std::string& dir,
                                Cluster* c);

// ---- sections ----
// Push+pull throughput per transport and the 4 KB pull latency (bench_transport.cc).
// InvalidArgument naming a size of o.sizes that is not one of the transport's sizes.
absl::Status CheckSizes(const BenchOptions& o);
std::vector<Table> TransportTables(const BenchOptions& o);
// PS optimizer apply throughput, dense and sparse (bench_apply.cc).
std::vector<Table> ApplyTables(const BenchOptions& o);
// MNIST MLP examples/s: a cluster, one process, PyTorch (bench_e2e.cc).
std::vector<Table> EndToEndTables(const BenchOptions& o);
// Peak memory of a PS serving one large variable, against the variable and its slots
// (bench_memory.cc).
std::vector<Table> MemoryTables(const BenchOptions& o);

}  // namespace pstrain::bench
