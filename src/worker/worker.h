// The worker: the WorkerService that receives a training spec from the chief and the trainer that
// pulls, computes and pushes. Public header of src/worker.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace pstrain {

struct WorkerOptions {
  int task = 0;                           // index in the "worker" job
  std::vector<std::string> ps_addresses;  // by PS task index
  std::string chief_address;
};

class Worker {
 public:
  // `on_shutdown(reason, job_succeeded)` is called once when the chief sends Shutdown or becomes
  // unreachable (job_succeeded false); the caller then stops the server and destroys the Worker.
  using ShutdownFn = std::function<void(const std::string& reason, bool job_succeeded)>;
  static absl::StatusOr<std::unique_ptr<Worker>> Create(const WorkerOptions& options,
                                                        ShutdownFn on_shutdown);
  // Stops the run in progress at once (its calls cancelled) and joins its thread.
  virtual ~Worker() = default;
  // The WorkerService to register with a grpc::Server; owned by the Worker.
  virtual grpc::Service* service() = 0;
  // The chief this worker obeys, as its Register response named it. StartTraining and Shutdown
  // are accepted only from job "chief" task 0 with this incarnation (PERMISSION_DENIED
  // otherwise), except that a StartTraining from a new incarnation (a restarted chief) is
  // obeyed and switches to it; an incarnation replaced this way or by a later call here is
  // refused from then on. Until it is called, the first chief call's incarnation is the one
  // obeyed. A new incarnation stops the run the old chief started. Thread-safe.
  //
  // A worker runs one training at a time: a StartTraining of a new (chief incarnation,
  // Sender.generation) stops the run in progress and starts the new one (the data is read once
  // while the spec's data, records and shard stay the same); the same pair again is a retry and
  // gets the first call's outcome. Every request of a run carries its generation; a run refused
  // for its generation (a rollback) ends quietly and the worker waits for the next StartTraining.
  virtual void ExpectChief(uint64_t incarnation) = 0;

  // The training so far, as of the last progress report to the chief (every report_every steps
  // and at the end), for the task's /metrics. Thread-safe.
  struct Progress {
    int64_t steps = 0;
    int64_t examples = 0;
    int epoch = 0;                // in progress, from 0
    double loss = 0;              // mean over the steps of the last report
    double examples_per_sec = 0;  // between the last two reports
    bool done = false;
  };
  virtual Progress progress() const = 0;
};

}  // namespace pstrain
