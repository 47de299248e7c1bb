// DataPlaneServer: the server ends of every carrier of one PS task (transport.h).
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "transport/grpc_stream.h"
#include "transport/tcp.h"
#include "transport/transport.h"
#include "transport/ucx.h"

namespace pstrain {
namespace {

class DataPlaneServerImpl : public DataPlaneServer {
 public:
  ~DataPlaneServerImpl() override { Stop(); }
  std::vector<grpc::Service*> services() const override {
    if (streams_ == nullptr) return {};
    return {streams_.get()};
  }
  DataPlaneResponse data_plane() const override {
    DataPlaneResponse info = ucx_ != nullptr ? ucx_->data_plane() : DataPlaneResponse();
    if (tcp_ != nullptr) info.set_tcp_port(tcp_->port());
    return info;
  }
  void Stop() override {
    if (ucx_ != nullptr) ucx_->Stop();
    if (tcp_ != nullptr) tcp_->Stop();
  }

  std::unique_ptr<grpc::Service> streams_;  // null while the stream service is not built
  std::unique_ptr<UcxServer> ucx_;          // null but with ucx or auto
  std::unique_ptr<TcpServer> tcp_;          // null but with tcp
};

}  // namespace

absl::StatusOr<std::unique_ptr<DataPlaneServer>> DataPlaneServer::Start(
    DataHandler* handler, const std::string& transport, const std::string& task,
    const std::string& listen_host) {
  if (transport != "grpc" && transport != "ucx" && transport != "auto" && transport != "tcp") {
    return absl::InvalidArgumentError(
        absl::StrCat("transport \"", transport, "\" is not one of grpc, tcp, ucx, auto"));
  }
  auto server = std::make_unique<DataPlaneServerImpl>();
  server->streams_ = MakeTensorStreamService(handler);
  if (transport == "grpc") return server;
  if (transport == "tcp") {
    absl::StatusOr<std::unique_ptr<TcpServer>> tcp = TcpServer::Start(handler, listen_host);
    if (!tcp.ok()) {
      return absl::Status(tcp.status().code(),
                          absl::StrCat("--transport tcp: ", tcp.status().message()));
    }
    server->tcp_ = *std::move(tcp);
    spdlog::info("{} serving the TCP data plane on {}:{}", task,
                 listen_host.empty() ? "every interface" : listen_host, server->tcp_->port());
    return server;
  }
  absl::StatusOr<std::unique_ptr<UcxServer>> ucx = UcxServer::Start(handler);
  if (!ucx.ok()) {
    if (transport == "ucx") {
      return absl::Status(ucx.status().code(),
                          absl::StrCat("--transport ucx: ", ucx.status().message()));
    }
    spdlog::warn("{}: UCX cannot start ({}); the data plane stays on gRPC", task,
                 ucx.status().ToString());
    return server;
  }
  server->ucx_ = *std::move(ucx);
  spdlog::info("{} serving UCX to the workers of its host (shared memory)", task);
  return server;
}

}  // namespace pstrain
