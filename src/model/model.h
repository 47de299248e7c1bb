// Models behind one interface (the MLP, logistic regression, Wide & Deep), the layers with
// explicit backward passes they are built from, and initializers. Public header of src/model.
//
// All matrices are row-major; a batch is a matrix with one example per row. Parameters are not
// owned by the model: callers pass pointers to their values (pulled from parameter servers), so a
// model object holds only its shape and scratch space. An Mlp is not thread-safe; use one per
// thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/status/statusor.h"
#include "common/examples.h"
#include "common/tensor.h"

namespace pstrain {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::Matrix<float, 1, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<Matrix>;
using ConstMatrixMap = Eigen::Map<const Matrix>;

namespace layers {
// y = x * w + b (b broadcast over rows). x: n x in, w: in x out, b: out values, y: n x out.
void DenseForward(const Eigen::Ref<const Matrix>& x, const Eigen::Ref<const Matrix>& w,
                  const float* b, Matrix* y);
// Given dy (n x out): dw = x^T dy, db = column sums of dy, dx = dy w^T (skipped if dx is null).
void DenseBackward(const Eigen::Ref<const Matrix>& x, const Eigen::Ref<const Matrix>& w,
                   const Matrix& dy, Matrix* dx, float* dw, float* db);
// In place: x = max(x, 0).
void ReluForward(Matrix* x);
// In place: dy = dy where y > 0, else 0. y is the ReLU output.
void ReluBackward(const Matrix& y, Matrix* dy);
// Mean softmax cross-entropy of logits (n x classes) against labels in [0, classes); writes the
// gradient of the mean loss with respect to the logits into dlogits. Numerically stable.
float SoftmaxCrossEntropy(const Matrix& logits, const int32_t* labels, Matrix* dlogits);
// Mean of (outputs[i] - targets[i])^2 over n values; writes the gradient of the mean loss with
// respect to the outputs into doutputs[0..n).
float SquaredError(const float* outputs, const float* targets, int64_t n, float* doutputs);
}  // namespace layers

// Told by a backward pass which parameters' gradients are final (indices into the model's
// params()), as it completes them: every parameter in exactly one call, the last call before
// ForwardBackward returns. A call before the last, while the backward pass of the rest goes on,
// is a promise that no gradient of the batch (dense or of a table row) will be non-finite: a
// backward pass that cannot rule that out reports every parameter in one call at its end. The
// gradients reported stay unchanged until the next ForwardBackward, so the callee may start
// pushing them at once, from another thread.
using GradientsReady = std::function<void(const std::vector<int>& params)>;

// Reports every one of `n` parameters ready in one call (nothing if `ready` is empty).
void ReportAllReady(const GradientsReady& ready, size_t n);

struct ParamSpec {
  std::string name;  // "dense0/kernel", "dense0/bias", "dense1/kernel", ...
  std::vector<int64_t> shape;
};

// Multi-layer perceptron: Dense+ReLU for every hidden layer, Dense to logits, softmax
// cross-entropy loss.
class Mlp {
 public:
  // widths: input size, hidden sizes..., number of classes (at least 2 entries, all positive).
  // Throws std::invalid_argument otherwise.
  explicit Mlp(std::vector<int> widths);

  // Kernels [in, out] then biases [out] per layer, in layer order.
  const std::vector<ParamSpec>& params() const { return params_; }
  const std::vector<int>& widths() const { return widths_; }

  // Glorot-uniform kernels and zero biases, deterministic for a seed.
  std::vector<Tensor> Initialize(uint64_t seed) const;

  // Forward and backward over a batch x (n x widths.front()) with labels. `params` points at the
  // values of params() in order. Writes one gradient per parameter into *grads (resized and
  // shaped as params()) and returns the mean loss. `ready` (may be empty) hears of each layer's
  // kernel and bias as soon as its backward pass is done, last layer first, when the forward
  // pass and a bound on the backward pass's magnitudes show that every gradient will be finite
  // (finite inputs, activations, kernels and logit gradients, and no product that can overflow
  // float); otherwise of every parameter at the end.
  float ForwardBackward(const std::vector<const float*>& params, const Eigen::Ref<const Matrix>& x,
                        const int32_t* labels, std::vector<Tensor>* grads,
                        const GradientsReady& ready = nullptr);

  // As ForwardBackward, for a network with one output learning `targets` by the mean squared
  // error (the loss returned).
  float ForwardBackwardSquaredError(const std::vector<const float*>& params,
                                    const Eigen::Ref<const Matrix>& x, const float* targets,
                                    std::vector<Tensor>* grads,
                                    const GradientsReady& ready = nullptr);

  // The first output of every row of x, in chunks.
  void Outputs(const std::vector<const float*>& params, const Eigen::Ref<const Matrix>& x,
               std::vector<float>* outputs);

  // The arg-max class of every row of x, in chunks.
  void Classify(const std::vector<const float*>& params, const Eigen::Ref<const Matrix>& x,
                std::vector<int32_t>* classes);

  // For two outputs: the softmax probability of class 1 of every row of x, in chunks.
  void ClassOneProbabilities(const std::vector<const float*>& params,
                             const Eigen::Ref<const Matrix>& x, std::vector<float>* p);

  // Fraction of rows of x whose arg-max logit equals the label; evaluates in chunks.
  double Accuracy(const std::vector<const float*>& params, const Eigen::Ref<const Matrix>& x,
                  const int32_t* labels);

 private:
  // Runs the forward pass over chunks of x's rows; fn(first row, outputs of the chunk's rows).
  void ForwardInChunks(const std::vector<const float*>& params, const Eigen::Ref<const Matrix>& x,
                       const std::function<void(Eigen::Index, const Matrix&)>& fn);
  // The backward pass from the output's gradient in grads_.back(), after Forward.
  void Backward(const std::vector<const float*>& params, const Eigen::Ref<const Matrix>& x,
                std::vector<Tensor>* grads, const GradientsReady& ready);

  std::vector<int> widths_;
  std::vector<ParamSpec> params_;
  std::vector<Matrix> acts_;   // scratch: activations per layer
  std::vector<Matrix> grads_;  // scratch: gradients w.r.t. activations
};

// How to fill a new variable, with TensorFlow's semantics (tf.keras.initializers). The fields
// mirror proto InitializerDef; only those of `kind` are read.
struct Initializer {
  std::string kind = "zeros";       // zeros, constant, uniform, normal, truncated_normal,
                                    // glorot_uniform ("" means zeros, as an unset proto field)
  double value = 0;                 // constant
  double low = -0.05, high = 0.05;  // uniform: [low, high)
  double mean = 0, stddev = 0.05;   // normal, truncated_normal (redrawn beyond 2 stddev)
  uint64_t seed = 0;
};

// Values of a variable of `shape` drawn by `init`. Deterministic for a seed on every platform
// (std::mt19937_64 with uniforms and Box-Muller spelled out). glorot_uniform draws from
// [-limit, limit), limit = sqrt(6 / (fan_in + fan_out)): fan_in = shape[0] and fan_out =
// shape[1] for rank 2, both shape[0] for rank 1, both 1 for a scalar, and TensorFlow's
// receptive-field rule for higher ranks. InvalidArgument for an unknown kind, low >= high,
// stddev <= 0, a non-finite parameter, a negative dimension or more than 2^31 elements.
absl::StatusOr<Tensor> MakeInitialValue(const std::vector<int64_t>& shape, const Initializer& init);

// ---- The model interface: what the trainer, the chief's evaluation and the benchmarks use. ----

// How a table's rows learn, when a model picks it for the table (the fields mirror proto
// OptimizerConfig; only those of `name` are read). The chief's --table_optimizer or --table_lr,
// when given, set one optimizer for every table instead.
struct TableOptimizer {
  std::string name = "adagrad";  // sgd, adagrad, adam or ftrl
  double learning_rate = 0.1;
  double initial_accumulator_value = 0;  // adagrad (0), ftrl (0 means 0.1)
  double l1 = 0, l2 = 0;                 // ftrl
};

// An embedding table on the parameter servers: rows of `dim` floats keyed by uint64 ids, a row
// created on first touch from `initializer` seeded by (initializer.seed, key), updated by
// `optimizer` (unset: the chief's table optimizer).
struct TableSpec {
  std::string name;
  int dim = 0;
  Initializer initializer;
  std::optional<TableOptimizer> optimizer;
};

// kClassification: labels are class indices, the metric is accuracy. kBinary: labels are 0/1
// (a label > 0 counts as 1), the output a probability, the metrics AUC and log loss.
// kRegression: labels are numbers, the output a number in their units, the loss the mean squared
// error of the label standardized by ModelConfig's label_mean and label_stddev, the metrics RMSE
// and MAE.
enum class ModelTask { kClassification, kBinary, kRegression };

struct ModelConfig {
  std::string kind = "mlp";              // mlp, linear or wide_deep
  int dense_features = 0;                // dense inputs per example
  int num_classes = 10;                  // mlp
  std::vector<int> hidden = {256, 128};  // mlp, and the deep part of wide_deep
  int categorical_fields = 0;            // wide_deep: sparse fields 0..n-1 (Criteo: 26)
  int embedding_dim = 8;                 // wide_deep
  bool shared_embedding = false;         // wide_deep: one table for every field, not one per field
  // Every kind: predict a number (kRegression) rather than classify; num_classes is then unread.
  // The model learns (label - label_mean) / label_stddev (a deviation of 0 counts as 1).
  bool regression = false;
  double label_mean = 0, label_stddev = 1;
};

// What the parameter servers returned for one batch.
struct ModelInputs {
  std::vector<const float*> params;  // values of params(), in order
  std::vector<const float*> rows;    // per table: the rows of TouchedKeys()[t], in that order
};

// Gradients of one batch's mean loss.
struct ModelGrads {
  std::vector<Tensor> params;            // per parameter, shaped as it
  std::vector<std::vector<float>> rows;  // per table: one summed row per key of TouchedKeys()[t]
};

// Not thread-safe: one per thread. Parameter values are never owned by a model.
class Model {
 public:
  // InvalidArgument naming the bad field for an unknown kind or bad sizes.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const ModelConfig& config);
  virtual ~Model() = default;

  virtual ModelTask task() const = 0;
  virtual const std::vector<ParamSpec>& params() const = 0;
  virtual const std::vector<TableSpec>& tables() const = 0;
  // Initial values of params(), deterministic for a seed.
  virtual std::vector<Tensor> Initialize(uint64_t seed) const = 0;

  // Per table, the distinct keys `batch` touches, ascending: the rows to look up before
  // ForwardBackward or Predict on the same batch. Valid until the next call.
  virtual const std::vector<std::vector<uint64_t>>& TouchedKeys(const Examples& batch) = 0;
  // Forward and backward over `batch` (TouchedKeys must have been called on it last); fills
  // *grads and returns the mean loss. `ready` (may be empty) hears of the parameters' gradients
  // as they are final (GradientsReady): the MLP layer by layer, last layer first, when it can
  // promise finite gradients; the linear and Wide & Deep models all at the end.
  virtual float ForwardBackward(const ModelInputs& in, const Examples& batch, ModelGrads* grads,
                                const GradientsReady& ready = nullptr) = 0;
  // Per row: the predicted class (kClassification), the probability of label 1 (kBinary) or the
  // predicted number (kRegression).
  virtual void Predict(const ModelInputs& in, const Examples& batch, std::vector<float>* out) = 0;
  // A kClassification model of two classes: per row the probability of class 1 into *out (for
  // AUC and log loss, as a kBinary model's Predict gives them), and true. Others: false.
  virtual bool ClassOneProbabilities(const ModelInputs& /*in*/, const Examples& /*batch*/,
                                     std::vector<float>* /*out*/) {
    return false;
  }
};

struct Metrics {
  int64_t examples = 0;
  double accuracy = 0;  // kClassification
  double macro_f1 = 0;  // kClassification: the mean F1 of the classes labelled or predicted
  double auc = 0;       // kBinary: area under the ROC curve (ties count half; 0 if one class)
  double log_loss = 0;  // kBinary: mean binary cross-entropy, probabilities clipped to 1e-7
  // kBinary: the log loss of predicting the labels' own positive rate for every row (the
  // entropy of the labels: a model must do better to beat the prior)
  double base_log_loss = 0;
  double rmse = 0;  // kRegression: root mean squared error
  double mae = 0;   // kRegression: mean absolute error
  // auc, log_loss and base_log_loss are set: kBinary, or kClassification of two classes given
  // the probabilities of class 1.
  bool scored = false;
};
// The metrics of `task` for predictions as Predict writes them against `labels`; with
// `class_one` (kClassification of two classes: ClassOneProbabilities, per row) also AUC and log
// loss, class 1 the positive one.
Metrics Evaluate(ModelTask task, const std::vector<float>& predictions,
                 const std::vector<float>& labels, const std::vector<float>* class_one = nullptr);

}  // namespace pstrain
