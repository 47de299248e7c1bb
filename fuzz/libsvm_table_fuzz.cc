// A LibSVM file read as a table of columns through a schema (features/features.h: OpenCsvTable
// with the LibSVM layout, a schema inferred from it, its statistics and the transform), with the
// options a worker reads its shard with. Every error is InvalidArgument or DataLoss naming the
// file; a table has the label and at most kMaxLibSvmColumns columns; what is read holds together
// and has the transform's number of dense inputs per row.
//   input: one byte of TextOptions (text_fuzzing.h), then the file (plain or gzip)
#include "features/features.h"
#include "text_fuzzing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  fuzz::FuzzTextReader(
      data, size, "data.svm",
      [](const std::string& path, const TextOptions& o) -> absl::StatusOr<Examples> {
        DataSpec spec;  // --data libsvm:PATH
        spec.format = DataSpec::Format::kLibSvm;
        spec.path = path;
        absl::StatusOr<CsvLayout> layout = TableLayout(spec);
        FUZZ_CHECK(layout.ok(), layout.status().ToString());
        absl::StatusOr<CsvTable> table = OpenCsvTable(path, *layout);
        if (!table.ok()) return table.status();
        const std::vector<std::string>& names = table->header.names;
        FUZZ_CHECK(!names.empty() && names[0] == "label" &&
                       names.size() <= static_cast<size_t>(kMaxLibSvmColumns) + 1,
                   "the label and at most kMaxLibSvmColumns columns");
        // The chief's passes: the training records from the first.
        TextOptions training = o;
        training.first_record = 0;
        absl::StatusOr<InferredSchema> inferred = InferCsvSchema(*table, "label", training);
        if (!inferred.ok()) return inferred.status();
        absl::StatusOr<FeatureStats> stats = ComputeCsvStats(inferred->schema, *table, training);
        if (!stats.ok()) return stats.status();
        absl::StatusOr<Transform> transform =
            CsvTransform(inferred->schema, *std::move(stats), *table);
        if (!transform.ok()) return transform.status();
        absl::StatusOr<Examples> e = ReadCsvThrough(*transform, *table, o);
        FUZZ_CHECK(!e.ok() || e->dense_dim == transform->shape().dense_features,
                   "the transform's dense inputs per row");
        return e;
      });
  return 0;
}
