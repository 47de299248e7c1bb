// A client program of the program fault tests, on the public Client: one variable "w" under SGD
// at learning rate 1, and a task loop whose every batch pulls, then pushes a gradient of ones,
// so each batch applied once moves every element by exactly -1.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"

namespace pstrain::testing {

class OnesProgram {
 public:
  // Connects as worker `task` of the job whose chief is at `chief` and creates "w" of `size`
  // floats.
  absl::Status Connect(const std::string& chief, int task, absl::Duration timeout, int size) {
    absl::StatusOr<std::unique_ptr<Client>> c =
        Client::Connect({.chief = chief, .task = task, .timeout = timeout});
    if (!c.ok()) return c.status();
    client_ = *std::move(c);
    absl::StatusOr<int> w = client_->CreateVariable(
        {.name = "w", .shape = {size}, .optimizer = OptimizerOptions{.learning_rate = 1.0}});
    if (!w.ok()) return w.status();
    ones_ = Tensor({size}, 1.0f);
    return absl::OkStatus();
  }

  // Takes tasks of batches of `batch` rows until there are none; `before_push(k)`, if given,
  // runs between the pull and the push of each task's batch k.
  absl::Status RunTasks(int batch, const std::function<void(int64_t)>& before_push = nullptr) {
    for (;;) {
      absl::StatusOr<std::optional<Task>> t = client_->NextTask(batch);
      if (!t.ok()) return t.status();
      if (!t->has_value()) return absl::OkStatus();
      for (int64_t k = 0; k < (*t)->num_batches() && !client_->task_abandoned(); ++k) {
        if (absl::Status s = client_->Pull(&values_); !s.ok()) return s;
        if (before_push) before_push(k);
        if (absl::Status s = client_->Push({ones_}, batch); !s.ok()) return s;
      }
      if (absl::Status s = client_->TaskDone(); !s.ok()) return s;
    }
  }

  // Pulls "w" and checks that every element is `expected`, naming the first that is not.
  absl::Status PullAndExpect(float expected) {
    if (absl::Status s = client_->Pull(&values_); !s.ok()) return s;
    for (int j = 0; j < ones_.size(); ++j) {
      if (values_[0][j] != expected) {
        return absl::InternalError("w[" + std::to_string(j) +
                                   "] = " + std::to_string(values_[0][j]) + ", expected " +
                                   std::to_string(expected));
      }
    }
    return absl::OkStatus();
  }

  Client& client() { return *client_; }

 private:
  std::unique_ptr<Client> client_;
  Tensor ones_;
  std::vector<const float*> values_;
};

}  // namespace pstrain::testing
