// The native timed loop of `accio bench` (src/python/bench_phase.hpp): many threads started at a
// barrier, each on its own handle and range; stamps written and verified; errors from any thread
// stop the others and reach the caller. Runs under ASan and TSan in CI like every C++ test.
#include <gtest/gtest.h>

#include "python/bench_phase.hpp"
#include "helpers.hpp"

namespace {

using accio_bench::Job;
using accio_bench::Phase;

struct Handles {
  std::vector<accio::File> files;
  std::vector<Job> jobs;
};

// `threads` handles on one shared file, thread i owning [i*len, (i+1)*len).
Handles shared_file(const std::string& path, const std::string& mech, int threads, int64_t len, const char* mode) {
  Handles h;
  accio::Settings s;
  s.set("mechanism", mech);
  s.set("task_size", "64k");
  for (int i = 0; i < threads; ++i) {
    h.files.emplace_back(path, i == 0 ? mode : "r+", s);
    h.jobs.push_back({h.files.back().handle(), i * len, len});
  }
  return h;
}

class BenchPhase : public ::testing::TestWithParam<std::string> {};

TEST_P(BenchPhase, WritesThenVerifiesEveryRecordFromManyThreads) {
  testing_accio::TempDir dir;
  const std::string path = dir.file("phase.dat");
  const int64_t len = (1 << 20) + 12345;  // a short last record in every range
  {
    auto h = shared_file(path, GetParam(), 4, len, "w+");
    auto out = accio_bench::run_phase(h.jobs, Phase{96 * 1024, true, false, true, false, 7});
    ASSERT_EQ(out.size(), 4u);
    for (auto& iv : out) {
      EXPECT_EQ(iv.bytes, len);
      EXPECT_LE(iv.start_ns, iv.end_ns);
    }
    for (bool random : {false, true}) {
      auto rd = accio_bench::run_phase(h.jobs, Phase{96 * 1024, false, random, false, true, 8});
      for (auto& iv : rd) EXPECT_EQ(iv.bytes, len);
    }
  }
  // A clobbered stamp in thread 2's range is found, whichever thread reads it.
  {
    accio::File f(path, "r+");
    uint64_t junk = 0;
    f.pwrite(&junk, 8, 2 * len + 3 * 96 * 1024);
  }
  auto h = shared_file(path, GetParam(), 4, len, "r");
  try {
    accio_bench::run_phase(h.jobs, Phase{96 * 1024, false, false, false, true, 9});
    FAIL() << "corruption not detected";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("verification failed"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, BenchPhase, ::testing::Values("posix", "parallel", "direct", "uring"));

TEST(BenchPhaseErrors, ShortFileAndErrnoReachTheCaller) {
  testing_accio::TempDir dir;
  const std::string path = dir.file("short.dat");
  auto h = shared_file(path, "posix", 2, 1 << 16, "w+");
  accio_bench::run_phase(h.jobs, Phase{4096, true, false, false, false, 1});
  h.jobs[1].length = 1 << 17;  // past the end of the file
  EXPECT_THROW(accio_bench::run_phase(h.jobs, Phase{4096, false, false, false, false, 1}), std::runtime_error);

  accio::File ro(path, "r");
  std::vector<Job> jobs{{ro.handle(), 0, 8192}, {ro.handle(), 8192, 8192}};
  try {
    accio_bench::run_phase(jobs, Phase{4096, true, false, false, false, 1});
    FAIL() << "write to a read-only handle succeeded";
  } catch (const accio::Error& e) {
    EXPECT_EQ(e.code().value(), EBADF);
  }
  EXPECT_THROW(accio_bench::run_phase(jobs, Phase{0, false, false, false, false, 1}), std::invalid_argument);
  EXPECT_TRUE(accio_bench::run_phase({}, Phase{4096, false, false, false, false, 1}).empty());
}

}  // namespace
