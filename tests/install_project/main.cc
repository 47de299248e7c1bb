// Fits w [4] to a fixed target through pstrain, using only the installed client library: each
// worker pushes the gradient of 0.5 * |w - target|^2, then all meet at a barrier and check the
// final value. Prints one line, {"task": 0, "steps": 40, "w_error": ..., "w": [...]}; exits 1 on
// an error or when w did not reach the target.
#include <cmath>
#include <cstdio>
#include <vector>

#include "client/client.h"

int main() {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "fit_target: %s\n", std::string(s.message()).c_str());
    return 1;
  };
  absl::StatusOr<pstrain::ClientOptions> options = pstrain::ClientOptions::FromTfConfig();
  if (!options.ok()) return fail(options.status());
  absl::StatusOr<std::unique_ptr<pstrain::Client>> client = pstrain::Client::Connect(*options);
  if (!client.ok()) return fail(client.status());
  pstrain::Client& c = **client;

  const std::vector<float> target = {1, -2, 3, 0.5};
  absl::StatusOr<int> w = c.CreateVariable(
      {.name = "w",
       .shape = {4},
       .optimizer = pstrain::OptimizerOptions{.name = "sgd", .learning_rate = 0.2}});
  if (!w.ok()) return fail(w.status());
  constexpr int kSteps = 40;
  std::vector<const float*> values;
  std::vector<pstrain::Tensor> grads = {pstrain::Tensor({4})};
  for (int step = 0; step < kSteps; ++step) {
    if (absl::Status s = c.Pull(&values); !s.ok()) return fail(s);
    for (int i = 0; i < 4; ++i) grads[0].values[i] = values[*w][i] - target[i];
    if (absl::Status s = c.Push(grads, 1); !s.ok()) return fail(s);
  }
  if (absl::Status s = c.Barrier("fitted"); !s.ok()) return fail(s);
  if (absl::Status s = c.Pull(&values); !s.ok()) return fail(s);
  double error = 0;
  for (int i = 0; i < 4; ++i) error = std::fmax(error, std::fabs(values[*w][i] - target[i]));
  if (absl::Status s = c.Done(); !s.ok()) return fail(s);
  std::printf("{\"task\": %d, \"steps\": %d, \"w_error\": %g, \"w\": [%.9g, %.9g, %.9g, %.9g]}\n",
              options->task, kSteps, error, values[*w][0], values[*w][1], values[*w][2],
              values[*w][3]);
  return error < 1e-3 ? 0 : 1;
}
