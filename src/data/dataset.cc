// The dataset interface: data specs, the shape of a format's examples, and training and
// held-out records read through the format's reader.
#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/data.h"

namespace pstrain {
namespace {

constexpr char kTrainSplit[] = "train";
constexpr char kTestSplit[] = "t10k";

struct FormatName {
  DataSpec::Format format;
  const char* name;
};
constexpr FormatName kFormats[] = {{DataSpec::Format::kIdx, "idx"},
                                   {DataSpec::Format::kIdx, "mnist"},
                                   {DataSpec::Format::kCsv, "csv"},
                                   {DataSpec::Format::kLibSvm, "libsvm"},
                                   {DataSpec::Format::kCriteo, "criteo"}};

// Records [begin, end) of `spec`; `split` names the IDX split (text files have none).
absl::StatusOr<Examples> ReadRecords(const DataSpec& spec, const char* split, int64_t begin,
                                     int64_t end, TextOptions::BadLines bad_lines) {
  TextOptions text;
  text.bad_lines = bad_lines;
  text.first_record = begin;
  text.end_record = end;
  switch (spec.format) {
    case DataSpec::Format::kIdx:
      return LoadMnist(spec.path, split, begin, end);
    case DataSpec::Format::kCsv:
      return ReadCsv(spec.path, CsvOptions{}, text);
    case DataSpec::Format::kLibSvm:
      return ReadLibSvm(spec.path, text);
    case DataSpec::Format::kCriteo:
      return ReadCriteo(spec.path, text);
  }
  return absl::InternalError("unknown data format");
}

// The records of the file (text) or of `split` (idx).
absl::StatusOr<int64_t> CountRecordsOf(const DataSpec& spec, const char* split) {
  if (spec.format == DataSpec::Format::kIdx) return CountMnist(spec.path, split);
  return CountRecords(spec.path);
}

}  // namespace

absl::StatusOr<DataSpec> DataSpec::Parse(absl::string_view text) {
  DataSpec spec;
  const size_t colon = text.find(':');
  if (colon == absl::string_view::npos) {
    spec.path = std::string(text);
  } else {
    const absl::string_view format = text.substr(0, colon);
    const FormatName* known = std::find_if(std::begin(kFormats), std::end(kFormats),
                                           [&](const FormatName& f) { return format == f.name; });
    if (known == std::end(kFormats)) {
      return absl::InvalidArgumentError(
          absl::StrCat("data \"", text, "\": unknown format \"", format,
                       "\" (known: idx or mnist, csv, libsvm, criteo; a bare path is an "
                       "MNIST-layout directory)"));
    }
    spec.format = known->format;
    spec.path = std::string(text.substr(colon + 1));
  }
  if (spec.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("data \"", text, "\": the path is empty"));
  }
  return spec;
}

std::string DataSpec::ToString() const {
  const FormatName* f = std::find_if(std::begin(kFormats), std::end(kFormats),
                                     [&](const FormatName& n) { return n.format == format; });
  return absl::StrCat(f->name, ":", path);
}

absl::StatusOr<DataShape> ShapeOf(const DataSpec& spec) {
  DataShape shape;
  switch (spec.format) {
    case DataSpec::Format::kIdx: {
      // From the held-out split, which the chief reads anyway: it needs only the training
      // labels (to count them), not the training images, which only the workers read.
      absl::StatusOr<Examples> none = LoadMnist(spec.path, kTestSplit, 0, 0);
      if (!none.ok()) return none.status();
      shape.dense_features = none->dense_dim;
      shape.num_classes = kMnistClasses;
      return shape;
    }
    case DataSpec::Format::kCsv: {
      // The first line fixes the columns, whether it is a header or not.
      absl::StatusOr<Examples> first =
          ReadRecords(spec, nullptr, 0, 1, TextOptions::BadLines::kSkip);
      if (!first.ok()) return first.status();
      shape.dense_features = first->dense_dim;
      return shape;
    }
    case DataSpec::Format::kLibSvm:
      return shape;
    case DataSpec::Format::kCriteo:
      shape.dense_features = kCriteoDense;
      shape.categorical_fields = kCriteoCategorical;
      return shape;
  }
  return absl::InternalError("unknown data format");
}

absl::StatusOr<int64_t> CountTrainingRecords(const DataSpec& spec) {
  return CountRecordsOf(spec, kTrainSplit);
}

absl::StatusOr<Examples> ReadTrainingRecords(const DataSpec& spec, int64_t begin, int64_t end,
                                             TextOptions::BadLines bad_lines) {
  return ReadRecords(spec, kTrainSplit, begin, end, bad_lines);
}

absl::StatusOr<Dataset> Dataset::Open(const DataSpec& train, const Options& options) {
  Dataset d;
  d.train_ = train;
  d.options_ = options;
  absl::StatusOr<DataShape> shape = ShapeOf(train);
  if (!shape.ok()) return shape.status();
  d.shape_ = *shape;
  absl::StatusOr<int64_t> records = CountTrainingRecords(train);
  if (!records.ok()) return records.status();
  const bool idx = train.format == DataSpec::Format::kIdx;
  if (options.test) {
    absl::StatusOr<DataShape> test_shape = ShapeOf(*options.test);
    if (!test_shape.ok()) return test_shape.status();
    if (test_shape->dense_features != shape->dense_features ||
        test_shape->categorical_fields != shape->categorical_fields) {
      return absl::InvalidArgumentError(absl::StrCat(
          "test data ", options.test->ToString(), " has ", test_shape->dense_features,
          " dense features and ", test_shape->categorical_fields, " categorical fields; ",
          train.ToString(), " has ", shape->dense_features, " and ", shape->categorical_fields));
    }
    absl::StatusOr<int64_t> test_records = CountRecordsOf(
        *options.test, options.test->format == DataSpec::Format::kIdx ? kTestSplit : kTrainSplit);
    if (!test_records.ok()) return test_records.status();
    d.train_records_ = *records;
    d.test_end_ = *test_records;
  } else if (idx) {
    absl::StatusOr<int64_t> test_records = CountMnist(train.path, kTestSplit);
    if (!test_records.ok()) return test_records.status();
    d.train_records_ = *records;
    d.test_end_ = *test_records;
  } else {
    // The last records of the file are held out.
    if (!(options.holdout > 0 && options.holdout < 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--holdout ", options.holdout,
                       " must be in (0, 1) without --test_data: it is the fraction of ", train.path,
                       " held out for evaluation"));
    }
    const int64_t held = static_cast<int64_t>(std::llround(*records * options.holdout));
    if (held < 1 || held >= *records) {
      return absl::InvalidArgumentError(absl::StrCat(
          train.path, " has ", *records, " records: a held-out fraction of ", options.holdout,
          " leaves ", held < 1 ? "none for evaluation" : "none for training"));
    }
    d.train_records_ = *records - held;
    d.test_begin_ = d.train_records_;
    d.test_end_ = *records;
  }
  if (d.train_records_ < 1) {
    return absl::InvalidArgumentError(absl::StrCat(train.ToString(), " has no training records"));
  }
  if (d.test_end_ <= d.test_begin_) {
    return absl::InvalidArgumentError(absl::StrCat(
        (options.test ? *options.test : train).ToString(), " has no held-out records"));
  }
  return d;
}

absl::StatusOr<Examples> Dataset::ReadTrain(int64_t begin, int64_t end) const {
  return ReadTrainingRecords(train_, begin, std::min(end, train_records_), options_.bad_lines);
}

absl::StatusOr<Examples> Dataset::ReadTest() const {
  const DataSpec& spec = test_spec();
  const char* split = spec.format == DataSpec::Format::kIdx ? kTestSplit : kTrainSplit;
  return ReadRecords(spec, split, test_begin_, test_end_, options_.bad_lines);
}

}  // namespace pstrain
