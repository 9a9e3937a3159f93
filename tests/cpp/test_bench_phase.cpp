// The native timed loop of `accio bench` (src/python/bench_phase.hpp): many threads started at a
// barrier, each on its own handle and range; stamps written and verified; errors from any thread
// stop the others and reach the caller. Runs under ASan and TSan in CI like every C++ test.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

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

TEST(BenchHistogram, BucketsCoverEveryValueWithinTheirResolution) {
  using H = accio_bench::Histogram;
  size_t prev = 0;
  for (uint64_t v : {0ull, 1ull, 63ull, 64ull, 65ull, 127ull, 128ull, 129ull, 1000ull, 4095ull, 4096ull, 123456789ull,
                     (1ull << 40) + 12345, (1ull << 62) + 1}) {
    const size_t b = H::bucket(v);
    ASSERT_LT(b, H().counts.size()) << v;
    EXPECT_LE(H::lower(b), v) << v;
    EXPECT_LT(v, H::upper(b)) << v;
    // Resolution: exact below kSub, else the bucket is at most 1/kSub of its lowest value wide.
    if (v < H::kSub) EXPECT_EQ(H::upper(b) - H::lower(b), 1u);
    else EXPECT_LE(double(H::upper(b) - H::lower(b)) / double(H::lower(b)), 1.0 / H::kSub + 1e-12) << v;
    EXPECT_GE(b, prev) << "buckets are ordered like the values";
    prev = b;
  }
  // Neighbouring buckets meet: every upper bound is the next bucket's lower bound.
  for (size_t b = 0; b + 1 < 40 * H::kSub; ++b) ASSERT_EQ(H::upper(b), H::lower(b + 1)) << b;
  H h;
  h.add(-5);  // a clock that went backwards counts as 0, not as a huge unsigned value
  h.add(100);
  EXPECT_EQ(h.counts[0], 1u);
  EXPECT_EQ(h.counts[H::bucket(100)], 1u);
}

TEST(BenchPhaseModes, EveryRequestIsCountedAndTimedAtEveryQueueDepth) {
  testing_accio::TempDir dir;
  const std::string path = dir.file("qd.dat");
  const int64_t len = 1 << 20;
  auto h = shared_file(path, "posix", 2, len, "w+");
  for (int qd : {1, 4}) {
    Phase w{4096, true, false, false, false, 3};
    w.iodepth = qd;
    for (auto& iv : accio_bench::run_phase(h.jobs, w)) {
      EXPECT_EQ(iv.bytes, len);
      EXPECT_EQ(iv.ops, len / 4096);
      uint64_t n = 0;
      for (auto c : iv.latency.counts) n += c;
      EXPECT_EQ(n, uint64_t(len / 4096)) << "one latency per request at iodepth " << qd;
    }
    Phase r{4096, false, true, false, true, 4};  // random order, stamps verified
    r.iodepth = qd;
    for (auto& iv : accio_bench::run_phase(h.jobs, r)) EXPECT_EQ(iv.ops, len / 4096);
  }
  // Without request timing: the requests are counted, the histogram stays empty.
  Phase untimed{4096, false, false, false, true, 5};
  untimed.time_requests = false;
  for (auto& iv : accio_bench::run_phase(h.jobs, untimed)) {
    EXPECT_EQ(iv.ops, len / 4096);
    for (auto c : iv.latency.counts) ASSERT_EQ(c, 0u);
  }
  Phase bad{4096, false, false, false, false, 1};
  bad.iodepth = 0;
  EXPECT_THROW(accio_bench::run_phase(h.jobs, bad), std::invalid_argument);
}

TEST(BenchPhaseModes, TimeBasedGoesRoundTheRangeUntilTheTimeIsUp) {
  testing_accio::TempDir dir;
  const std::string path = dir.file("tb.dat");
  const int64_t len = 64 << 10;  // 16 records: passed over in far less than the runtime
  auto h = shared_file(path, "posix", 1, len, "w+");
  accio_bench::run_phase(h.jobs, Phase{4096, true, false, false, false, 1});
  Phase r{4096, false, false, false, true, 1};
  r.runtime_ns = 50'000'000;
  auto out = accio_bench::run_phase(h.jobs, r);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_GE(out[0].end_ns - out[0].start_ns, r.runtime_ns);
  EXPECT_GT(out[0].ops, len / 4096) << "went round the range more than once";
  EXPECT_EQ(out[0].bytes, out[0].ops * 4096);
  // A read that fails stops a time-based phase too (and is reported): the file is shorter than the range.
  h.jobs[0].length = 2 * len;
  EXPECT_THROW(accio_bench::run_phase(h.jobs, r), std::runtime_error);
}

// The caller's poll ends a phase early (Ctrl-C in accio bench: it waited for a 20 s --runtime to
// end), a phase with a poll lasts no 20 ms longer than without (review, session 25), and a poll
// that throws stops the jobs and the exception reaches the caller once they have ended.
TEST(BenchPhaseModes, ThePollStopsAPhaseAndAddsNoFloor) {
  testing_accio::TempDir dir;
  auto h = shared_file(dir.file("poll.dat"), "posix", 2, 64 << 10, "w+");
  accio_bench::run_phase(h.jobs, Phase{4096, true, false, false, false, 1});
  std::atomic<bool> stop{false};
  Phase r{4096, false, false, false, true, 1};
  r.runtime_ns = 30'000'000'000;  // 30 s unless stopped
  r.stop = &stop;
  int polls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto out = accio_bench::run_phase(h.jobs, r, [&] {
    if (++polls == 3) stop = true;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_GE(polls, 3);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_GT(out[0].ops, 0u);
  Phase once{4096, false, false, false, true, 1};
  int calls = 0;
  for (int i = 0; i < 20; ++i) accio_bench::run_phase(h.jobs, once, [&] { ++calls; });
  EXPECT_LT(calls, 20) << "a short phase waited for the poll";
  r.stop = nullptr;
  EXPECT_THROW(accio_bench::run_phase(h.jobs, r, [] { throw std::logic_error("poll"); }), std::logic_error);
}

}  // namespace
