#include "client/session.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "client/call_thread.h"
#include "client/ps_client.h"
#include "client/table_client.h"

namespace pstrain {
namespace {

// The status of `call`, waited for until it returned: it refers to the caller's data, and it
// ends by its own deadline (the session's timeout on every request it makes).
absl::Status Returned(CallThread::Call& call) { return call.Wait(absl::InfiniteFuture()); }

// Points at the rows of each table's last lookup.
void PointAt(const std::vector<std::vector<float>>& rows, std::vector<const float*>* out) {
  out->clear();
  for (const std::vector<float>& r : rows) out->push_back(r.data());
}

}  // namespace

struct ParameterSession::Pending::Rep {
  std::shared_ptr<CallThread::Call> call;
  int target = 0;  // the connections it runs on
  // Of a push, written by the call.
  int stale = 0;
  uint64_t min_version = 0;
};

ParameterSession::Pending::Pending(std::shared_ptr<Rep> rep) : rep_(std::move(rep)) {}

absl::Status ParameterSession::Pending::Wait(absl::Time deadline) {
  return rep_->call->Wait(deadline);
}

bool ParameterSession::Pending::done() const { return rep_->call->done(); }
int ParameterSession::Pending::stale_dropped() const { return rep_->stale; }
uint64_t ParameterSession::Pending::min_version() const { return rep_->min_version; }

// Two clients of the dense variables used in turn: dense[current] read the values in hand and
// pushes their gradients; the other takes a read ahead (a prefetch, a pull in flight).
class ParameterSession::Engine {
 public:
  std::unique_ptr<PsClient> dense[2];
  int current = 0;
  std::vector<const float*> values[2];         // of each client's last pull
  std::unique_ptr<TableClient> tables;         // null without tables
  std::vector<std::vector<float>> rows;        // of the last lookup, by table
  std::shared_ptr<CallThread::Call> prefetch;  // in flight on dense[1 - current], or null
  // PushSome's pushes on thread[current], and the shards they saw dropped (written there).
  std::vector<std::shared_ptr<CallThread::Call>> pushes;
  int pushes_dropped = 0;
  // Last: their calls use the clients. thread[i] runs dense[i]'s calls; thread[0] also runs the
  // table calls made beside a dense pull, thread[current] those beside a dense push.
  CallThread thread[2];
};

ParameterSession::ParameterSession(SessionOptions options, std::vector<VariableRef> variables,
                                   std::vector<TableRef> tables)
    : options_(std::move(options)), engine_(std::make_unique<Engine>()) {
  SetVariables(std::move(variables));
  SetTables(std::move(tables));
}

ParameterSession::~ParameterSession() {
  if (engine_->prefetch != nullptr) (void)Returned(*engine_->prefetch);
}

void ParameterSession::SetVariables(std::vector<VariableRef> variables) {
  variables_ = std::move(variables);
  Engine& e = *engine_;
  for (int i = 0; i < 2; ++i) {
    e.dense[i] = std::make_unique<PsClient>(options_.ps_addresses, variables_, options_.sender,
                                            options_.timeout);
    e.dense[i]->set_push_dtype(options_.push_dtype);
    if (!options_.transport.empty()) e.dense[i]->set_transport(options_.transport);
    if (options_.canceller != nullptr) e.dense[i]->set_canceller(options_.canceller);
    e.values[i].clear();
  }
  e.current = 0;
}

void ParameterSession::SetTables(std::vector<TableRef> tables) {
  tables_ = std::move(tables);
  Engine& e = *engine_;
  e.rows.clear();
  e.tables = nullptr;
  if (tables_.empty()) return;
  e.tables = std::make_unique<TableClient>(options_.ps_addresses, tables_, options_.sender,
                                           options_.timeout);
  if (options_.canceller != nullptr) e.tables->set_canceller(options_.canceller);
}

// --- a training step ---

namespace {

// Runs `here` on this thread and `there` on `side` at the same time; the first error wins.
absl::Status Both(CallThread* side, const std::function<absl::Status()>& here,
                  const std::function<absl::Status()>& there) {
  std::shared_ptr<CallThread::Call> call = side->Start(there);
  absl::Status s = here();
  absl::Status t = Returned(*call);
  return s.ok() ? t : s;
}

}  // namespace

void ParameterSession::Prefetch(int64_t clock) {
  Engine& e = *engine_;
  if (e.prefetch != nullptr) return;
  const int next = 1 - e.current;
  PsClient* dense = e.dense[next].get();
  std::vector<const float*>* out = &e.values[next];
  e.prefetch = e.thread[next].Start([dense, out, clock] { return dense->Pull(out, 0, clock); });
}

absl::Status ParameterSession::Read(const std::vector<std::vector<uint64_t>>& keys, ReadAt at,
                                    std::vector<const float*>* values,
                                    std::vector<const float*>* rows) {
  Engine& e = *engine_;
  absl::Status s;
  auto lookup = [&] { return e.tables->Lookup(keys, &e.rows, at.min_version, at.clock); };
  if (e.prefetch != nullptr) {  // the dense pull is in flight: look up meanwhile
    s = e.tables == nullptr ? absl::OkStatus() : lookup();
    absl::Status p = DropPrefetch();
    e.current = 1 - e.current;
    if (s.ok()) s = p;
  } else {
    PsClient& dense = *e.dense[e.current];
    std::vector<const float*>* out = &e.values[e.current];
    auto pull = [&] { return dense.Pull(out, at.min_version, at.clock, at.sync); };
    s = e.tables == nullptr ? pull() : Both(&e.thread[0], pull, lookup);
  }
  if (!s.ok()) return s;
  *values = e.values[e.current];
  PointAt(e.rows, rows);
  return absl::OkStatus();
}

absl::Status ParameterSession::DropPrefetch() {
  absl::Status s = Returned(*engine_->prefetch);
  engine_->prefetch = nullptr;
  return s;
}

uint64_t ParameterSession::step() const {
  const uint64_t dense = dense_step();
  return engine_->tables == nullptr ? dense : std::min(dense, table_step());
}

uint64_t ParameterSession::dense_step() const {
  return engine_->dense[engine_->current]->min_version_read();
}

uint64_t ParameterSession::table_step() const { return engine_->tables->min_version_read(); }

absl::Status ParameterSession::Write(const std::vector<std::vector<uint64_t>>& keys,
                                     const std::vector<Tensor>& dense,
                                     const std::vector<std::vector<float>>& rows, bool every_ps,
                                     int* stale_dropped, const PushTag* tag) {
  Engine& e = *engine_;
  int dense_dropped = 0, table_dropped = 0;
  // dense[current] holds the versions the gradients were computed from; a prefetch in flight
  // runs on the other client.
  auto push = [&] { return e.dense[e.current]->Push(dense, &dense_dropped, tag); };
  absl::Status s = e.tables == nullptr ? push() : Both(&e.thread[e.current], push, [&] {
    return e.tables->Push(keys, rows, every_ps, &table_dropped, tag);
  });
  *stale_dropped = dense_dropped + table_dropped;
  return s;
}

void ParameterSession::PushSome(const std::vector<int>& vars, const std::vector<Tensor>& grads,
                                const PushTag* tag) {
  Engine& e = *engine_;
  PsClient* dense = e.dense[e.current].get();
  std::optional<PushTag> copy;
  if (tag != nullptr) copy = *tag;
  Engine* engine = &e;
  e.pushes.push_back(e.thread[e.current].Start([engine, dense, vars, &grads, copy] {
    int dropped = 0;
    absl::Status s = dense->PushSome(vars, grads, &dropped, copy ? &*copy : nullptr);
    engine->pushes_dropped += dropped;
    return s;
  }));
}

absl::Status ParameterSession::FinishPush(int* stale_dropped) {
  Engine& e = *engine_;
  absl::Status s;
  for (const std::shared_ptr<CallThread::Call>& call : e.pushes) {
    absl::Status t = Returned(*call);
    if (s.ok()) s = t;
  }
  e.pushes.clear();
  *stale_dropped = e.pushes_dropped;
  e.pushes_dropped = 0;
  return s;
}

// --- the calls of the public Client ---

ParameterSession::Pending ParameterSession::StartPull(ReadAt at, bool ahead) {
  Engine& e = *engine_;
  auto rep = std::make_shared<Pending::Rep>();
  rep->target = ahead ? 1 - e.current : e.current;
  PsClient* dense = e.dense[rep->target].get();
  std::vector<const float*>* out = &e.values[rep->target];
  auto pull = [dense, out, at] { return dense->Pull(out, at.min_version, at.clock, at.sync); };
  CallThread& thread = e.thread[rep->target];
  rep->call = ahead ? thread.Start(std::move(pull)) : thread.RunHereOrStart(std::move(pull));
  return Pending(std::move(rep));
}

void ParameterSession::FinishPull(const Pending& p) { engine_->current = p.rep_->target; }

absl::Status ParameterSession::Pull(ReadAt at, std::vector<const float*>* values) {
  Engine& e = *engine_;
  absl::Status s =
      e.dense[e.current]->Pull(&e.values[e.current], at.min_version, at.clock, at.sync);
  if (s.ok()) *values = e.values[e.current];
  return s;
}

ParameterSession::Pending ParameterSession::StartPush(std::vector<TensorView> grads,
                                                      std::optional<PushTag> tag, bool blocking) {
  Engine& e = *engine_;
  auto rep = std::make_shared<Pending::Rep>();
  rep->target = e.current;
  PsClient* dense = e.dense[e.current].get();
  auto push = [dense, grads = std::move(grads), out = rep, tag = std::move(tag)] {
    absl::Status s = dense->Push(grads, &out->stale, tag ? &*tag : nullptr);
    out->min_version = dense->min_version_read();
    return s;
  };
  CallThread& thread = e.thread[e.current];
  rep->call = blocking ? thread.RunHereOrStart(std::move(push)) : thread.Start(std::move(push));
  return Pending(std::move(rep));
}

const std::vector<const float*>& ParameterSession::values() const {
  return engine_->values[engine_->current];
}

absl::Status ParameterSession::Lookup(const std::vector<std::vector<uint64_t>>& keys, ReadAt at,
                                      std::vector<const float*>* rows) {
  Engine& e = *engine_;
  absl::Status s = e.tables->Lookup(keys, &e.rows, at.min_version, at.clock);
  if (s.ok()) PointAt(e.rows, rows);
  return s;
}

absl::Status ParameterSession::PushSparse(const std::vector<std::vector<uint64_t>>& keys,
                                          const std::vector<std::vector<float>>& grads,
                                          bool every_ps, int* stale_dropped, const PushTag* tag) {
  return engine_->tables->Push(keys, grads, every_ps, stale_dropped, tag);
}

absl::Status ParameterSession::Leave(bool pause) {
  Engine& e = *engine_;
  // A pull in flight would otherwise race this Leave on the PS (and its values would be read
  // at the clock this worker had before pausing).
  if (e.prefetch != nullptr) (void)DropPrefetch();
  return e.dense[e.current]->Leave(pause);
}

absl::StatusOr<std::vector<StatsResponse>> ParameterSession::Stats() {
  return engine_->dense[engine_->current]->Stats();
}

std::vector<std::string> ParameterSession::data_plane() const {
  // A read ahead goes through the client that is not current, so both may have made channels.
  const Engine& e = *engine_;
  std::vector<std::string> names = e.dense[e.current]->channel_transports();
  const std::vector<std::string> other = e.dense[1 - e.current]->channel_transports();
  for (size_t i = 0; i < names.size() && i < other.size(); ++i) {
    if (names[i].empty()) names[i] = other[i];
  }
  return names;
}

}  // namespace pstrain
