// tls_bench: what security costs on the data path. A PsClient Pull + Push of one variable of
// 1 MB and of 4 KB through one PS on 127.0.0.1, with mutual TLS and the job token, and with the
// token alone, against plaintext without a token, in the same run: repetitions interleave the
// three (each goes first in turn), and the medians of the per-step times are printed with their
// ratios to plaintext.
//
//   tls_bench [repetitions]      default 15
//
// Security is process-wide (common/security.h): channel and server credentials are fixed when
// they are made, so each setup is built under its own SetSecurity; the servers check the token
// that is set when a call arrives, so it is set again before each setup is timed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "client/ps_client.h"
#include "common/rpc.h"
#include "common/security.h"
#include "common/tensor_codec.h"
#include "local_ps_testing.h"
#include "runtime/certs.h"

namespace pstrain {
namespace {

struct Size {
  const char* label;
  int64_t floats;
  int steps;  // Pull + Push steps per repetition
};
const Size kSizes[] = {{"1 MB", 1 << 18, 40}, {"4 KB", 1 << 10, 400}};

// A PS and one client per size, made under `security`.
struct Setup {
  explicit Setup(const Security& s) : security(s) {
    SetSecurity(security);
    ps = std::make_unique<ps_testing::LocalPs>();
    if (!ps->status.ok()) Fail(ps->status);
    for (const Size& size : kSizes) {
      const std::string name = std::string("v") + std::to_string(size.floats);
      CreateVariablesRequest req;
      *req.mutable_sender() = MakeSender("chief", 0);
      VariableDef* def = req.add_variables();
      def->set_name(name);
      const std::vector<float> init(size.floats, 0.5f);
      EncodeTensor(std::vector<int64_t>{size.floats}, init.data(), def->mutable_initial_value());
      def->mutable_optimizer()->set_name("sgd");
      def->mutable_optimizer()->set_learning_rate(1e-6);
      CreateVariablesResponse resp;
      if (absl::Status st = ps->ps->CreateVariables(req, &resp); !st.ok()) Fail(st);
      const VariableRef var{name, {size.floats}, {{name, 0, 0, size.floats}}};
      clients.push_back(std::make_unique<PsClient>(std::vector<std::string>{ps->address},
                                                   std::vector<VariableRef>{var},
                                                   MakeSender("worker", 0), absl::Seconds(30)));
      Tensor g(std::vector<int64_t>{size.floats});
      g.values.assign(size.floats, 1e-3f);
      grads.push_back({std::move(g)});
      Step(clients.size() - 1);  // connects (and, with TLS, handshakes) before any timing
    }
  }

  static void Fail(const absl::Status& s) {
    std::fprintf(stderr, "tls_bench: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }

  void Step(size_t i) {
    std::vector<const float*> values;
    absl::Status s = clients[i]->Pull(&values);
    if (s.ok()) s = clients[i]->Push(grads[i]);
    if (!s.ok()) Fail(s);
  }

  // Microseconds per step over `steps` steps of size `i`.
  double Time(size_t i, int steps) {
    SetSecurity(security);
    const auto start = std::chrono::steady_clock::now();
    for (int k = 0; k < steps; ++k) Step(i);
    const std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - start;
    return d.count() / steps;
  }

  Security security;
  std::unique_ptr<ps_testing::LocalPs> ps;
  std::vector<std::unique_ptr<PsClient>> clients;
  std::vector<std::vector<Tensor>> grads;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int Run(int repetitions) {
  absl::StatusOr<CertBundle> certs = MakeCertificates({});
  absl::StatusOr<std::string> token = RandomToken();
  if (!certs.ok()) Setup::Fail(certs.status());
  if (!token.ok()) Setup::Fail(token.status());
  Security secure;
  secure.token = *token;
  secure.cert = certs->cert;
  secure.key = certs->key;
  secure.ca = certs->ca_cert;
  Security token_only;
  token_only.token = *token;
  Setup plain{Security{}}, tok{token_only}, tls{secure};
  Setup* setups[] = {&plain, &tok, &tls};
  std::printf("%-5s %13s %13s %13s %7s %7s   (Pull + Push, 1 PS, %d repetitions)\n", "size",
              "plaintext us", "token us", "TLS+token us", "token", "TLS", repetitions);
  for (size_t i = 0; i < std::size(kSizes); ++i) {
    std::vector<double> times[3];
    for (int r = 0; r < repetitions; ++r) {
      for (int k = 0; k < 3; ++k) {
        const int which = (k + r) % 3;  // each setup goes first, second and third in turn
        times[which].push_back(setups[which]->Time(i, kSizes[i].steps));
      }
    }
    const double p = Median(times[0]), t = Median(times[1]), s = Median(times[2]);
    std::printf("%-5s %13.1f %13.1f %13.1f %6.2fx %6.2fx\n", kSizes[i].label, p, t, s, t / p,
                s / p);
  }
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 15;
  if (repetitions < 1) {
    std::fprintf(stderr, "tls_bench: repetitions must be a positive number, not %s\n", argv[1]);
    return 2;
  }
  return pstrain::Run(repetitions);
}
