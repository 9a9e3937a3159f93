// Number parsing does not follow the host program's locale (issue 21): a program that calls
// setlocale(LC_ALL, "") under a comma-decimal locale (de_DE) reads sizes, integer settings and
// profile numbers exactly as under "C". The locale is generated into a temporary directory with
// localedef and found through LOCPATH, so the test needs no locale installed system-wide.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "base/json.hpp"
#include "base/settings.hpp"

using namespace accio;

namespace {
// A comma-decimal locale set for the whole process, or a reason why none could be made.
std::string set_comma_locale() {
  for (const char* name : {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8"})
    if (std::setlocale(LC_ALL, name)) return "";
  char dir[] = "/tmp/accio-locale-XXXXXX";
  if (!mkdtemp(dir)) return "mkdtemp failed";
  const std::string cmd = "localedef -i de_DE -f UTF-8 " + std::string(dir) + "/de_DE.UTF-8 >/dev/null 2>&1";
  const bool made = std::system(cmd.c_str()) == 0;
  setenv("LOCPATH", dir, 1);
  const bool set = made && std::setlocale(LC_ALL, "de_DE.UTF-8");
  std::filesystem::remove_all(dir);  // the locale is loaded (mapped) by now: its 3 MB of files go
  if (!made) return "no de_DE locale installed and localedef could not make one";
  if (!set) return "setlocale(de_DE.UTF-8) failed with LOCPATH=" + std::string(dir);
  return "";
}
}  // namespace

TEST(Locale, NumbersParseTheSameUnderACommaDecimalLocale) {
  const std::string why = set_comma_locale();
  if (!why.empty()) GTEST_SKIP() << why;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.1f", 0.5);
  ASSERT_EQ(std::string(buf), "0,5") << "the locale did not take effect";

  EXPECT_EQ(base::parse_size("64k"), 64u << 10);
  EXPECT_EQ(base::parse_size(" 16 MiB"), 16u << 20);
  EXPECT_THROW(base::parse_size("1,5m"), std::invalid_argument);  // no locale-style fractions either
  EXPECT_THROW(base::parse_size("1 0m"), std::invalid_argument);  // blanks only around the parts (was 10 MiB)
  EXPECT_EQ(base::parse_size("4096B"), 4096u);                     // b alone: bytes (was refused)
  EXPECT_EQ(base::parse_size(base::format_size(0)), 0u);           // what the engine prints, it reads
  EXPECT_EQ(base::parse_size(" 2kib "), 2048u);
  EXPECT_THROW(base::parse_size("99999999999999999999"), std::invalid_argument);

  base::Settings s = base::Settings::defaults();
  s.set("threads", "3");
  EXPECT_EQ(s.get("threads"), "3");
  s.set("buffer_size", "8m");
  EXPECT_EQ(s.get("buffer_size"), "8388608");

  // Profiles and stats hold fractions: '.' is the decimal point in JSON whatever the locale says.
  const base::json::Value v = base::json::parse(R"({"a": 0.5, "b": -1.25e2, "c": 3, "u": "\u00e9"})");
  EXPECT_DOUBLE_EQ(v.get("a")->num, 0.5);
  EXPECT_DOUBLE_EQ(v.get("b")->num, -125.0);
  EXPECT_DOUBLE_EQ(v.get("c")->num, 3.0);
  EXPECT_EQ(v.get("u")->str, "\xc3\xa9");
  EXPECT_THROW(base::json::parse("[1e999]"), std::runtime_error);
  EXPECT_THROW(base::json::parse(R"(["\u 0x1"])"), std::runtime_error);
  std::setlocale(LC_ALL, "C");
}
