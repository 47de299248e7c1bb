// PsServer: one PS task's serving side, as every caller assembles it (ps.h).
#include "ps/ps.h"

namespace pstrain {
namespace {

class PsServerImpl : public PsServer {
 public:
  ~PsServerImpl() override { Stop(); }

  ParameterServer* ps() const override { return ps_.get(); }
  std::vector<grpc::Service*> services() const override {
    std::vector<grpc::Service*> out = {service_.get()};
    for (grpc::Service* s : data_plane_->services()) out.push_back(s);
    return out;
  }
  void Stop() override {
    ps_->Stop();
    if (data_plane_ != nullptr) data_plane_->Stop();
  }

  // In the order they are built, destroyed in reverse: the data plane's servers before the
  // handler they call, the handler and the service before the PS.
  std::unique_ptr<ParameterServer> ps_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<DataHandler> data_;
  std::unique_ptr<DataPlaneServer> data_plane_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Create(const PsServerOptions& o) {
  absl::StatusOr<std::unique_ptr<ParameterServer>> ps = ParameterServer::Create({.task = o.task});
  if (!ps.ok()) return ps.status();
  auto server = std::make_unique<PsServerImpl>();
  server->ps_ = *std::move(ps);
  server->service_ = MakeParameterServerService(server->ps_.get(), o.on_shutdown);
  server->data_ = MakeDataHandler(server->ps_.get());
  absl::StatusOr<std::unique_ptr<DataPlaneServer>> data_plane =
      DataPlaneServer::Start(server->data_.get(), o.transport, o.name, o.listen_host);
  if (!data_plane.ok()) return data_plane.status();
  server->data_plane_ = *std::move(data_plane);
  server->ps_->SetDataPlane(server->data_plane_->data_plane());
  return server;
}

}  // namespace pstrain
