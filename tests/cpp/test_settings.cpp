// The settings table: core rows, rows registered by mechanisms (base::Knob) and by libraries through
// the C API (accio_setting_register), parsing and printing by kind, environment overrides, errors,
// and the C++ header's Settings::get with long values.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "accio/accio.h"
#include "accio/accio.hpp"
#include "base/error.hpp"
#include "base/settings.hpp"
#include "helpers.hpp"
#include "io/mechanism.hpp"

using namespace accio;

namespace {
accio_setting_spec spec(const char* name, const char* env, const char* kind, const char* def, int64_t min = 0,
                        int64_t max = 0, const char* choices = nullptr) {
  return accio_setting_spec{name, env, "a test knob", kind, def, min, max, choices};
}

std::string c_get(const accio_settings* s, const char* name) {
  char buf[64];
  EXPECT_GE(accio_settings_get(s, name, buf, sizeof buf), 0) << accio_last_error();
  return buf;
}

// The smallest profile the planner takes: posix for everything.
const char* kPosixProfile =
    R"({"schema": "accio.profile/1", "plans": [{"mechanism": "posix"}], "decisions": {"read": {"1": {"hot": )"
    R"([{"max_size": null, "plans": [0]}]}, "N": {"hot": [{"max_size": null, "plans": [0]}]}}, "write": {"1": )"
    R"({"hot": [{"max_size": null, "plans": [0]}]}, "N": {"hot": [{"max_size": null, "plans": [0]}]}}}})";

std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// What from_env() throws, or "no error".
std::string env_error() {
  try {
    base::Settings::from_env();
  } catch (const base::Error& e) {
    EXPECT_EQ(e.errnum(), EINVAL);
    return e.what();
  }
  return "no error";
}

int row_of(const char* name) {
  for (int i = 0; i < accio_setting_count(); ++i)
    if (std::string(accio_setting_name(i)) == name) return i;
  return -1;
}
}  // namespace

TEST(Settings, CoreRowsRoundTrip) {
  base::Settings s = base::Settings::defaults();
  EXPECT_EQ(s.get("mechanism"), "auto");
  EXPECT_EQ(s.get("task_size"), "4194304");
  EXPECT_GT(s.threads, 0u);  // 0 in the table: one per online CPU
  s.set("task_size", "64k");
  EXPECT_EQ(s.task_size, 65536u);
  s.set("buffer_size", "5000");  // rounded up to 4KiB
  EXPECT_EQ(s.get("buffer_size"), "8192");
  s.set("huge_pages", "OFF");
  EXPECT_EQ(s.get("huge_pages"), "off");
  s.set("cache_probe", "mincore");
  EXPECT_EQ(s.cache_probe, "mincore");
  s.set("queue_depth", "32");  // uring's row
  EXPECT_EQ(s.get("queue_depth"), "32");
  s.set("ring_depth", "5");  // staged's row
  EXPECT_EQ(s.get("ring_depth"), "5");
}

TEST(Settings, BadValuesSayWhy) {
  base::Settings s = base::Settings::defaults();
  auto msg = [&](const char* n, const char* v) {
    try {
      s.set(n, v);
    } catch (const base::Error& e) {
      EXPECT_EQ(e.errnum(), EINVAL);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // One sentence, errno once: "set setting: threads='lots' is not valid: not an integer (errno 22)".
  EXPECT_EQ(msg("threads", "lots"), "set setting: threads='lots' is not valid: not an integer (errno 22)");
  EXPECT_NE(msg("threads", "2000").find("not in 0..1024"), std::string::npos);
  EXPECT_NE(msg("threads", "-1").find("not in 0..1024"), std::string::npos);
  EXPECT_NE(msg("buffer_size", "2g").find("not in 4KiB..1GiB"), std::string::npos);
  EXPECT_NE(msg("task_size", "100").find("below 4KiB"), std::string::npos);
  EXPECT_NE(msg("cache_probe", "psychic").find("not auto, cachestat, nowait, mincore or off"), std::string::npos);
  EXPECT_NE(msg("direct", "maybe").find("not on/off"), std::string::npos);
  EXPECT_NE(msg("profile", "").find("empty"), std::string::npos);
  EXPECT_NE(msg("queue_depth", "0").find("not in 1..4096"), std::string::npos);
  EXPECT_NE(msg("nonesuch", "1").find("unknown setting 'nonesuch'"), std::string::npos);
  EXPECT_NE(msg("nonesuch", "1").find("(one of mechanism, threads, "), std::string::npos) << msg("nonesuch", "1");  // what there is
  EXPECT_THROW(s.get("nonesuch"), base::Error);
}

TEST(Settings, EnvironmentOverrides) {
  setenv("ACCIO_RING_DEPTH", "7", 1);
  setenv("ACCIO_TASK_SIZE", "1m", 1);
  base::Settings s = base::Settings::from_env();
  EXPECT_EQ(s.get("ring_depth"), "7");
  EXPECT_EQ(s.task_size, 1u << 20);
  setenv("ACCIO_RING_DEPTH", "900", 1);
  try {
    base::Settings::from_env();
    ADD_FAILURE() << "a bad ACCIO_RING_DEPTH was accepted";
  } catch (const base::Error& e) {
    EXPECT_EQ(std::string(e.what()), "read environment: ACCIO_RING_DEPTH='900' is not valid: not in 1..64 (errno 22)");
  }
  EXPECT_EQ(accio_settings_new(), nullptr);
  EXPECT_NE(std::string(accio_last_error()).find("ACCIO_RING_DEPTH"), std::string::npos);
  unsetenv("ACCIO_RING_DEPTH");
  unsetenv("ACCIO_TASK_SIZE");
}

// The mechanism is one that is registered and the profile a file that loads: refused where the
// value is set or read from the environment, with the variable named (the engine refused them only
// at the first open, and `accio run`'s shim then passed every call to libc without a word).
TEST(Settings, MechanismAndProfileAreCheckedWhenSet) {
  base::Settings s = base::Settings::defaults();
  try {
    s.set("mechanism", "warp");
    ADD_FAILURE() << "mechanism 'warp' accepted";
  } catch (const base::Error& e) {
    EXPECT_EQ(e.errnum(), EINVAL);
    EXPECT_EQ(std::string(e.what()), "set setting: mechanism='warp' is not valid: unknown mechanism (one of " +
                                         io::names() + ") (errno 22)");
  }
  EXPECT_EQ(s.mechanism, "auto");  // nothing changed
  s.set("mechanism", "parallel");
  EXPECT_EQ(io::names().rfind("auto, posix, parallel", 0), 0u) << io::names();

  setenv("ACCIO_MECHANISM", "bogus", 1);
  EXPECT_EQ(env_error(), "read environment: ACCIO_MECHANISM='bogus' is not valid: unknown mechanism (one of " +
                             io::names() + ") (errno 22)");
  EXPECT_EQ(accio_settings_new(), nullptr);
  EXPECT_NE(std::string(accio_last_error()).find("ACCIO_MECHANISM='bogus' is not valid: unknown mechanism"),
            std::string::npos);
  unsetenv("ACCIO_MECHANISM");

  testing_accio::TempDir d;
  const std::string good = write_file(d.file("good.json"), kPosixProfile);
  const std::string bad = write_file(d.file("bad.json"), R"({"schema": "accio.profile/1"})");
  const std::string missing = d.file("missing.json");
  s.set("profile", good);
  EXPECT_EQ(s.profile, good);
  setenv("ACCIO_PROFILE", missing.c_str(), 1);
  EXPECT_EQ(env_error(), "read environment: ACCIO_PROFILE='" + missing +
                             "' is not valid: no such file (auto, off, or a profile file that `accio tune` wrote) "
                             "(errno 22)");
  setenv("ACCIO_PROFILE", bad.c_str(), 1);
  EXPECT_EQ(env_error(), "read environment: ACCIO_PROFILE='" + bad +
                             "' is not valid: not a profile: plans must be a non-empty array (auto, off, or a profile "
                             "file that `accio tune` wrote) (errno 22)");
  setenv("ACCIO_PROFILE", d.path().c_str(), 1);  // a directory (a FIFO too, which is not opened)
  EXPECT_NE(env_error().find("is not valid: not a profile: not a regular file"), std::string::npos) << env_error();
  setenv("ACCIO_PROFILE", good.c_str(), 1);
  EXPECT_EQ(base::Settings::from_env().profile, good);
  unsetenv("ACCIO_PROFILE");
  EXPECT_THROW(s.set("profile", missing), base::Error);
  EXPECT_EQ(s.profile, good);
  for (const char* ok : {"auto", "off"}) EXPECT_NO_THROW(s.set("profile", ok));
}

// accio_settings_get(NULL, ...): a row's value from the defaults and the environment, or that row's
// own error whatever the other rows hold (what `accio info` shows per row).
TEST(Settings, EachRowsEnvironmentError) {
  setenv("ACCIO_MECHANISM", "bogus", 1);
  setenv("ACCIO_THREADS", "abc", 1);
  setenv("ACCIO_TASK_SIZE", "1m", 1);
  char buf[512];
  EXPECT_EQ(accio_settings_get(nullptr, "mechanism", buf, sizeof buf), -EINVAL);
  EXPECT_NE(std::string(accio_last_error()).find("ACCIO_MECHANISM='bogus' is not valid: unknown mechanism"),
            std::string::npos);
  EXPECT_EQ(accio_settings_get(nullptr, "threads", buf, sizeof buf), -EINVAL);
  EXPECT_EQ(std::string(accio_last_error()), "read environment: ACCIO_THREADS='abc' is not valid: not an integer (errno 22)");
  EXPECT_EQ(c_get(nullptr, "task_size"), "1048576");
  EXPECT_EQ(c_get(nullptr, "direct"), "off");
  EXPECT_EQ(accio_settings_get(nullptr, "nonesuch", buf, sizeof buf), -EINVAL);
  EXPECT_EQ(accio_settings_new(), nullptr);  // a handle still refuses to start from them
  for (const char* v : {"ACCIO_MECHANISM", "ACCIO_THREADS", "ACCIO_TASK_SIZE"}) unsetenv(v);
  EXPECT_EQ(c_get(nullptr, "mechanism"), "auto");
}

TEST(Settings, EveryMechanismKnobIsARow) {
  for (const io::Mechanism* m : io::all())
    for (const std::string& k : m->knobs) EXPECT_NE(base::find_setting(k), nullptr) << m->name() << " reads " << k;
  EXPECT_TRUE(io::find("uring")->reads("queue_depth"));
  EXPECT_FALSE(io::find("posix")->reads("threads"));
}

// A knob declared as a mechanism file declares it: a typed read without parsing.
const base::Knob kTestKnob{{"test_knob_depth", "ACCIO_TEST_KNOB_DEPTH", "a test knob", "count", "3", 1, 9}};

TEST(Settings, KnobReadsTyped) {
  base::Settings s = base::Settings::defaults();
  EXPECT_EQ(kTestKnob.num(s), 3);
  s.set("test_knob_depth", "8");
  EXPECT_EQ(kTestKnob.num(s), 8);
  base::Settings older;  // made without rows: reads the default
  EXPECT_EQ(kTestKnob.num(older), 3);
  EXPECT_EQ(kTestKnob.row().spec.env, "ACCIO_TEST_KNOB_DEPTH");
}

TEST(SettingsRegister, EveryKind) {
  const int before = accio_setting_count();
  auto count = spec("reg_timeout_ms", "ACCIO_REG_TIMEOUT_MS", "count", "250", 1, 60000);
  auto size = spec("reg_window", "ACCIO_REG_WINDOW", "size", "64k", 4096, 1 << 30);
  auto flag = spec("reg_verbose", "ACCIO_REG_VERBOSE", "bool", "off");
  auto choice = spec("reg_transport", "ACCIO_REG_TRANSPORT", "choice", "shm", 0, 0, "shm|socket");
  auto text = spec("reg_label", "ACCIO_REG_LABEL", "text", "none");
  accio_settings* early = accio_settings_new();  // made before the rows exist
  ASSERT_NE(early, nullptr);
  for (auto* sp : {&count, &size, &flag, &choice, &text}) EXPECT_EQ(accio_setting_register(sp), 0) << accio_last_error();
  EXPECT_EQ(accio_setting_count(), before + 5);
  const int i = row_of("reg_timeout_ms");
  ASSERT_GE(i, 0);
  EXPECT_STREQ(accio_setting_env(i), "ACCIO_REG_TIMEOUT_MS");
  EXPECT_STREQ(accio_setting_doc(i), "a test knob");

  // Defaults, and the environment, for settings made afterwards.
  setenv("ACCIO_REG_TRANSPORT", "socket", 1);
  accio_settings* s = accio_settings_new();
  unsetenv("ACCIO_REG_TRANSPORT");
  ASSERT_NE(s, nullptr) << accio_last_error();
  EXPECT_EQ(c_get(s, "reg_timeout_ms"), "250");
  EXPECT_EQ(c_get(s, "reg_window"), "65536");
  EXPECT_EQ(c_get(s, "reg_verbose"), "off");
  EXPECT_EQ(c_get(s, "reg_transport"), "socket");
  EXPECT_EQ(c_get(s, "reg_label"), "none");
  // Settings made before the rows existed read the defaults and accept values.
  EXPECT_EQ(c_get(early, "reg_transport"), "shm");
  EXPECT_EQ(accio_settings_set(early, "reg_timeout_ms", "1000"), 0) << accio_last_error();
  EXPECT_EQ(c_get(early, "reg_timeout_ms"), "1000");
  EXPECT_EQ(c_get(early, "reg_window"), "65536");

  // Values are validated by kind; set, get and copy carry them.
  EXPECT_EQ(accio_settings_set(s, "reg_timeout_ms", "0"), -EINVAL);
  EXPECT_NE(std::string(accio_last_error()).find("not in 1..60000"), std::string::npos) << accio_last_error();
  EXPECT_EQ(accio_settings_set(s, "reg_window", "2g"), -EINVAL);
  EXPECT_EQ(accio_settings_set(s, "reg_transport", "pigeon"), -EINVAL);
  EXPECT_NE(std::string(accio_last_error()).find("not shm or socket"), std::string::npos) << accio_last_error();
  EXPECT_EQ(accio_settings_set(s, "reg_verbose", "yes"), 0);
  EXPECT_EQ(accio_settings_set(s, "reg_window", "1m"), 0);
  EXPECT_EQ(accio_settings_set(s, "reg_label", "left"), 0);
  accio_settings* c = accio_settings_copy(s);
  EXPECT_EQ(c_get(c, "reg_verbose"), "on");
  EXPECT_EQ(c_get(c, "reg_window"), "1048576");
  EXPECT_EQ(c_get(c, "reg_label"), "left");

  // A bad value of another library's row is that library's error: accio_settings_new (what every
  // accio_open starts from) still works, and reading the row reports it, until it is set again.
  setenv("ACCIO_REG_WINDOW", "1k", 1);
  accio_settings* bad = accio_settings_new();
  ASSERT_NE(bad, nullptr) << accio_last_error();
  EXPECT_EQ(c_get(bad, "reg_verbose"), "off");
  char buf[64];
  EXPECT_EQ(accio_settings_get(bad, "reg_window", buf, sizeof buf), -EINVAL);
  EXPECT_EQ(std::string(accio_last_error()),
            "read environment: ACCIO_REG_WINDOW='1k' is not valid: not in 4KiB..1GiB (errno 22)");
  accio_settings* bad_copy = accio_settings_copy(bad);
  EXPECT_EQ(accio_settings_get(bad_copy, "reg_window", buf, sizeof buf), -EINVAL);
  EXPECT_EQ(accio_settings_set(bad, "reg_window", "8k"), 0);
  EXPECT_EQ(c_get(bad, "reg_window"), "8192");
  // An accio row's bad value still fails at once: it is this library's own error.
  setenv("ACCIO_THREADS", "lots", 1);
  EXPECT_EQ(accio_settings_new(), nullptr);
  EXPECT_NE(std::string(accio_last_error()).find("ACCIO_THREADS='lots' is not valid"), std::string::npos);
  unsetenv("ACCIO_THREADS");
  unsetenv("ACCIO_REG_WINDOW");
  for (auto* p : {early, s, c, bad, bad_copy}) accio_settings_free(p);
}

TEST(SettingsRegister, ConflictsAndBadSpecs) {
  auto a = spec("reg_conflict", "ACCIO_REG_CONFLICT", "count", "1", 0, 10);
  EXPECT_EQ(accio_setting_register(&a), 0);
  const int n = accio_setting_count();
  EXPECT_EQ(accio_setting_register(&a), 0);  // the same spec again
  auto same_copy = spec("reg_conflict", "ACCIO_REG_CONFLICT", "count", "1", 0, 10);
  EXPECT_EQ(accio_setting_register(&same_copy), 0);  // equal by content, not by pointer
  EXPECT_EQ(accio_setting_count(), n);
  auto b = spec("reg_conflict", "ACCIO_REG_CONFLICT", "count", "2", 0, 10);
  EXPECT_EQ(accio_setting_register(&b), -EEXIST);
  EXPECT_NE(std::string(accio_last_error()).find("setting 'reg_conflict' is already registered with a different spec"),
            std::string::npos);
  auto env_taken = spec("reg_other", "ACCIO_THREADS", "count", "1", 0, 10);
  EXPECT_EQ(accio_setting_register(&env_taken), -EEXIST);
  EXPECT_NE(std::string(accio_last_error()).find("ACCIO_THREADS belongs to setting 'threads'"), std::string::npos);
  auto core = spec("threads", "ACCIO_THREADS", "count", "1", 0, 10);
  EXPECT_EQ(accio_setting_register(&core), -EEXIST);

  struct Bad {
    accio_setting_spec s;
    const char* why;
  } bad[] = {
      {spec("Reg-Bad", "ACCIO_REG_BAD", "count", "1", 0, 9), "the name must be"},
      {spec("reg_bad", "accio_reg_bad", "count", "1", 0, 9), "the environment variable must be"},
      {spec("reg_bad", "ACCIO_REG_BAD", "number", "1", 0, 9), "kind 'number'"},
      {spec("reg_bad", "ACCIO_REG_BAD", "count", "1", 9, 0), "min must not exceed max"},
      {spec("reg_bad", "ACCIO_REG_BAD", "count", "99", 0, 9), "the default '99' is not a valid value (not in 0..9)"},
      {spec("reg_bad", "ACCIO_REG_BAD", "choice", "a", 0, 0, "a||b"), "choices must be"},
      {spec("reg_bad", "ACCIO_REG_BAD", "choice", "c", 0, 0, "a|b"), "the default 'c'"},
      {spec("reg_bad", "ACCIO_REG_BAD", "bool", "maybe"), "the default 'maybe'"},
      {spec("reg_bad", "ACCIO_REG_BAD", "text", ""), "the default ''"},
  };
  for (auto& x : bad) {
    EXPECT_EQ(accio_setting_register(&x.s), -EINVAL) << x.why;
    EXPECT_NE(std::string(accio_last_error()).find(x.why), std::string::npos) << accio_last_error();
  }
  auto no_doc = spec("reg_bad", "ACCIO_REG_BAD", "count", "1", 0, 9);
  no_doc.doc = nullptr;
  EXPECT_EQ(accio_setting_register(&no_doc), -EINVAL);
  EXPECT_EQ(accio_setting_register(nullptr), -EINVAL);
  EXPECT_EQ(row_of("reg_bad"), -1);
}

TEST(SettingsRegister, ConcurrentWithReaders) {
  std::vector<std::thread> t;
  std::vector<std::string> names;
  for (int i = 0; i < 8; ++i) names.push_back("reg_thread_" + std::to_string(i));
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop) {
      accio_settings* s = accio_settings_new();
      for (int i = 0; i < accio_setting_count(); ++i) {
        char buf[64];
        EXPECT_GE(accio_settings_get(s, accio_setting_name(i), buf, sizeof buf), 0);
      }
      accio_settings_free(s);
    }
  });
  for (int i = 0; i < 8; ++i)
    t.emplace_back([&, i] {
      std::string env = "ACCIO_REG_THREAD_" + std::to_string(i);
      auto sp = spec(names[size_t(i)].c_str(), env.c_str(), "count", "1", 0, 9);
      for (int k = 0; k < 50; ++k) EXPECT_EQ(accio_setting_register(&sp), 0);
    });
  for (auto& x : t) x.join();
  stop = true;
  reader.join();
  for (auto& n : names) EXPECT_GE(row_of(n.c_str()), 0) << n;
}

TEST(Settings, CppHeaderGetIsNotCut) {
  testing_accio::TempDir d;  // a profile (which must exist) at a path of over 1000 characters
  std::string dir = d.path();
  for (int i = 0; i < 5; ++i) std::filesystem::create_directory(dir += "/" + std::string(200, 'p'));
  const std::string path = write_file(dir + "/p.json", kPosixProfile);
  ASSERT_GT(path.size(), 1000u);
  accio::Settings s;
  s.set("profile", path);
  EXPECT_EQ(s.get("profile"), path);
  EXPECT_EQ(s.get("mechanism"), "auto");
  EXPECT_THROW(s.get("nonesuch"), accio::Error);
}
