// The CSV reader (data/data.h ReadCsv) on any file, with the options a worker reads its shard
// with and each header mode and delimiter.
//   input: one byte of TextOptions (text_fuzzing.h), then the file (plain or gzip)
#include "text_fuzzing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  if (size == 0) return 0;
  CsvOptions csv;
  // The option byte's top bit picks the delimiter; the label column and header mode follow the
  // record range (so one seed reaches every mode through its first byte alone).
  csv.delimiter = (data[0] & 0x80) ? '\t' : ',';
  csv.label_column = (data[0] >> 1) & 1;
  csv.header = static_cast<CsvOptions::Header>((data[0] >> 2) % 3);
  fuzz::FuzzTextReader(data, size, "data.csv", [&](const std::string& path, const TextOptions& o) {
    return ReadCsv(path, csv, o);
  });
  return 0;
}
