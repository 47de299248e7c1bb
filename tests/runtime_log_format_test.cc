// SetLogFormat on spdlog's color sink (the one the pstrain command logs through), written to a
// file: the json format's lines from many threads at once, each one whole JSON object whose
// message comes back byte for byte, and the text format with its colors as before.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/log_format.h"
#include "spdlog/details/console_globals.h"
#include "spdlog/sinks/ansicolor_sink.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

// The default logger writes to a temporary file through a color sink that always colors, as
// on a terminal; ReadLines gives back what it wrote.
class LogFormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = std::tmpfile();
    ASSERT_NE(file_, nullptr);
    auto sink = std::make_shared<spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>>(
        file_, spdlog::color_mode::always);
    previous_ = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("pstrain", sink));
  }
  void TearDown() override {
    SetLogFormat("text", "");
    spdlog::set_default_logger(previous_);
    std::fclose(file_);
  }

  std::vector<std::string> ReadLines() {
    spdlog::default_logger()->flush();
    std::fflush(file_);
    std::rewind(file_);
    std::vector<std::string> lines(1);
    for (int c; (c = std::fgetc(file_)) != EOF;) {
      if (c == '\n') {
        lines.emplace_back();
      } else {
        lines.back().push_back(static_cast<char>(c));
      }
    }
    EXPECT_EQ(lines.back(), "") << "the last line has no newline";
    lines.pop_back();
    return lines;
  }

  std::FILE* file_ = nullptr;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(LogFormatTest, JsonLinesHoldTheFieldsInOrder) {
  SetLogFormat("json", "ps:3");
  EXPECT_EQ(LogFormat(), "json");
  spdlog::warn("disk {} is {}% full", "/data", 91);
  const std::vector<std::string> lines = ReadLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], Not(HasSubstr("\033[")));  // no color codes around the level
  const nlohmann::ordered_json line = nlohmann::ordered_json::parse(lines[0]);
  std::vector<std::string> keys;
  for (const auto& item : line.items()) keys.push_back(item.key());
  EXPECT_THAT(keys, ElementsAre("time", "level", "task", "logger", "message"));
  EXPECT_THAT(line["time"].get<std::string>(),
              MatchesRegex("20[0-9][0-9]-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]"
                           "\\.[0-9][0-9][0-9]Z"));
  EXPECT_EQ(line["level"], "warning");
  EXPECT_EQ(line["task"], "ps:3");
  EXPECT_EQ(line["logger"], "pstrain");
  EXPECT_EQ(line["message"], "disk /data is 91% full");
}

TEST_F(LogFormatTest, EveryMessageComesBackWholeFromManyThreads) {
  SetLogFormat("json", "worker:0");
  // Quotes, backslashes, newlines, a tab, a NUL-free control character and UTF-8.
  const std::string odd = "say \"hi\"\\n\nnext\tline \x01 caf\xc3\xa9 {}";
  constexpr int kThreads = 8, kEach = 400;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) spdlog::info("{} {} {}", t, i, odd);
    });
  }
  for (std::thread& t : threads) t.join();
  const std::vector<std::string> lines = ReadLines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kEach));
  std::vector<int> next(kThreads, 0);
  for (const std::string& text : lines) {
    const nlohmann::json line = nlohmann::json::parse(text);
    const std::string message = line["message"];
    int t = -1, i = -1;
    ASSERT_EQ(std::sscanf(message.c_str(), "%d %d", &t, &i), 2) << message;
    ASSERT_TRUE(t >= 0 && t < kThreads) << message;
    EXPECT_EQ(i, next[t]++) << "each thread's lines in its order";
    EXPECT_EQ(message, std::to_string(t) + " " + std::to_string(i) + " " + odd);
  }
}

TEST_F(LogFormatTest, InvalidUtf8IsReplacedNotThrown) {
  SetLogFormat("json", "chief:0");
  spdlog::error("bad bytes \xff\xfe end");
  const std::vector<std::string> lines = ReadLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["message"], "bad bytes \xef\xbf\xbd\xef\xbf\xbd end");
}

TEST_F(LogFormatTest, TextKeepsSpdlogsColoredPattern) {
  SetLogFormat("json", "chief:0");
  SetLogFormat("text", "chief:0");
  EXPECT_EQ(LogFormat(), "text");
  spdlog::info("plain {}", 1);
  const std::vector<std::string> lines = ReadLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0],
              MatchesRegex("\\[[-0-9]+ [.:0-9]+\\] \\[pstrain\\] \\[.*info.*\\] plain 1"));
  EXPECT_THAT(lines[0], HasSubstr("\033["));  // the level still colored
}

TEST_F(LogFormatTest, AnUnknownFormatKeepsTheCurrentOne) {
  SetLogFormat("json", "ps:0");
  SetLogFormat("xml", "ps:0");
  EXPECT_EQ(LogFormat(), "json");
  const std::vector<std::string> lines = ReadLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(nlohmann::json::parse(lines[0])["message"].get<std::string>(),
              HasSubstr("unknown log format \"xml\""));
}

}  // namespace
}  // namespace pstrain
