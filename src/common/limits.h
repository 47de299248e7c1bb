// The one set of limits every request is checked against. Servers refuse what passes them with
// INVALID_ARGUMENT or RESOURCE_EXHAUSTED naming the limit, before doing any work; clients split
// their requests so that none passes them. All arithmetic on sizes taken from a request goes
// through the overflow-checked helpers below.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace pstrain {

// Largest gRPC message any pstrain channel or server sends or receives.
constexpr int64_t kMaxMessageBytes = int64_t{512} << 20;
// What a message may carry besides tensor bytes (names, shapes, versions) is bounded by the
// limits below; a response is refused if its tensor bytes exceed this.
constexpr int64_t kMaxPayloadBytes = kMaxMessageBytes - (int64_t{16} << 20);
// A single tensor (a variable or one of its shards, on the PS or in a push or pull). Pushes and
// pulls past kMaxPayloadBytes travel as chunks of a stream (transport/grpc_stream.h), so this is
// bounded by memory, not by a message. What still travels inside one message is bounded by
// kMaxPayloadBytes instead: a variable's initial value (CreateVariables, so the chief shards
// variables to at most that) and a shard's optimizer slots in a checkpoint's Import.
constexpr int64_t kMaxTensorBytes = int64_t{16} << 30;
// Dimensions of a tensor's shape.
constexpr int kMaxTensorRank = 32;
// Names of variables, shards, barriers, optimizers, initializers, partitioners.
constexpr int kMaxNameBytes = 1024;
// Variables (or gradients) named in one request.
constexpr int kMaxVariablesPerRequest = 65536;
// Tasks of one job (ps or worker) in a cluster.
constexpr int kMaxTasks = 4096;
// Barriers open at once on the chief (each may have many arrivals).
constexpr int kMaxOpenBarriers = 1024;
// Pulls waiting at one PS for a step (sync) or a clock (ssp); more are refused, not queued.
constexpr int kMaxWaitingPulls = 16384;
// Floats per embedding row.
constexpr int kMaxTableDim = 65536;
// Keys of one table in one Lookup or PushSparse request (the client splits larger batches).
constexpr int64_t kMaxKeysPerRequest = int64_t{4} << 20;
// Embedding tables held by one PS task.
constexpr int kMaxTables = 4096;
// Free-text fields (error messages, shutdown reasons) in requests.
constexpr int kMaxTextBytes = 64 * 1024;
// Checkpoints (docs/checkpoints.md), checked when one is read, before anything is sized by them:
// its manifest.json, the variables it lists (and the shard records of one part file, which a PS
// receives in one request), and the optimizer slots of a shard or a table row. Every other field
// is checked against the limits above (names, ranks, tensor bytes, tables, tasks, table dims).
constexpr int64_t kMaxManifestBytes = int64_t{256} << 20;
constexpr int kMaxCheckpointVariables = kMaxVariablesPerRequest;
// The largest variable the chief creates: it draws every initial value in its own memory
// (2^31 floats, the most an initializer draws).
constexpr int64_t kMaxVariableBytes = int64_t{8} << 30;
constexpr int kMaxOptimizerSlots = 8;

// Bytes of one float32 value, the type every variable and table holds.
constexpr int64_t kFloatBytes = sizeof(float);

// a / b rounded up, for a >= 0 and b > 0.
inline int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// a * b and a + b for non-negative operands, or nullopt on overflow.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
// Elements of `shape` (1 for a scalar), or nullopt if a dimension is negative, the rank exceeds
// kMaxTensorRank, or the product overflows int64.
inline std::optional<int64_t> CheckedNumElements(const std::vector<int64_t>& shape) {
  if (shape.size() > static_cast<size_t>(kMaxTensorRank)) return std::nullopt;
  int64_t n = 1;
  for (int64_t d : shape) {
    std::optional<int64_t> m = CheckedMul(n, d);
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

}  // namespace pstrain
