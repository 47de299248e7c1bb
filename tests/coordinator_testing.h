// Helpers of the Coordinator's in-process tests: a sender and a registration.
#pragma once

#include <cstdint>
#include <string>

#include "master/coordinator.h"

namespace pstrain {

inline Sender Task(const std::string& job, int task, uint64_t incarnation,
                   uint64_t generation = 0) {
  Sender s;
  s.set_job(job);
  s.set_task(task);
  s.set_incarnation(incarnation);
  s.set_generation(generation);
  return s;
}

inline absl::Status Register(Coordinator& c, const Sender& s) {
  RegisterRequest req;
  *req.mutable_sender() = s;
  req.set_address("127.0.0.1:1");
  RegisterResponse resp;
  return c.Register(req, &resp);
}

}  // namespace pstrain
