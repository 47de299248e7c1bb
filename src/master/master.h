// The chief's coordinator: registration, variable creation and placement, data sharding, progress,
// evaluation and the end of the job. Public header of src/master.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps.pb.h"

namespace pstrain {

// What to train and how. Defaults are the demo job's.
struct JobConfig {
  std::string data_dir = "data/mnist";
  std::vector<int> hidden = {256, 128};
  // "mlp": the built-in MNIST job. "external": workers are client programs (client.h); the chief
  // creates their variables, runs their barriers and ends the job when all report done.
  std::string model = "mlp";
  std::string mode = "async";             // async, sync or ssp
  int replicas_to_aggregate = 0;          // sync: gradients per step; 0 = every worker
  int staleness = 0;                      // ssp: clocks a worker may run ahead of the slowest
  std::string partitioner = "none";       // none, fixed:N, min_bytes:B, max_bytes:B
  std::string placement = "round_robin";  // round_robin or greedy (by bytes)
  bool stop_on_nonfinite = false;  // a NaN/Inf gradient stops the job; else skipped and counted
  int slow_worker = -1;            // for tests: this worker sleeps slow_worker_delay_ms per step
  int slow_worker_delay_ms = 0;
  OptimizerConfig optimizer;  // name "adam", learning rate 0.001 unless set
  int batch_size = 64;
  int epochs = 3;
  uint64_t seed = 1;
  int report_every = 20;
  absl::Duration register_timeout = absl::Seconds(60);  // for every task to register
  absl::Duration task_timeout = absl::Seconds(120);     // silence after which a worker is lost
  absl::Duration rpc_timeout = absl::Seconds(30);

  JobConfig();
  // InvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

struct MasterOptions {
  std::string listen_address;             // where MasterService listens
  std::vector<std::string> ps_addresses;  // by task index
  std::vector<std::string> worker_addresses;
  JobConfig job;
};

struct JobResult {
  std::string mode;
  double test_accuracy = 0;  // mlp jobs
  double examples_per_sec = 0;
  int64_t steps = 0;  // steps of all workers together
  int64_t examples = 0;
  double seconds = 0;  // training time, from the first task started to the last finished
  double final_loss = 0;
  int num_ps = 0;
  int num_workers = 0;
  std::vector<int64_t> worker_steps;
  std::vector<int64_t> worker_stale_steps;  // sync: steps whose gradient was dropped as stale
  int64_t nonfinite_skipped = 0;            // steps whose gradient had NaN/Inf (skip policy)
  StatsResponse ps_stats;                   // summed over PS tasks (max for max_clock_gap)
  std::string ToJson() const;
};

// Runs the whole job from the chief: starts MasterService, waits for every PS and worker to
// register, configures the PS with the job's consistency mode and its workers, then
//  - model "mlp": creates, partitions and places the MLP's variables, starts the workers on their
//    data shards, and evaluates the final parameters on the test set;
//  - model "external": serves CreateVariable and Barrier to client programs;
// logs progress to stderr until every worker reported done, collects the PS counters, and finally
// tells every task to shut down (also on failure, so nothing is left waiting). Errors name the
// task or file at fault.
absl::StatusOr<JobResult> RunJob(const MasterOptions& options);

}  // namespace pstrain
