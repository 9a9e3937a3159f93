// The worked example of docs/architecture.md ("Adding a mechanism with a knob"): a mechanism and
// its own knob in one file, registered beside each other, and nothing else changed. This test
// compiles the example (the block between the BEGIN and END lines is what the docs show; the
// Python test test_docs_settings.py checks that they are the same) and runs it through the engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>

#include "base/error.hpp"
#include "base/sys.hpp"
#include "engine/file.hpp"
#include "helpers.hpp"
#include "io/mechanism.hpp"
#include "planner/profile.hpp"

// BEGIN example: src/io/chunked.cpp
// accio mechanism `chunked`: plain pread/pwrite, one call per `chunk_size` bytes.
#include "io/mechanism.hpp"

namespace accio::io {
namespace {

// Its knob: a row of the settings table (ACCIO_CHUNK_SIZE, accio_settings_set, accio info, the docs).
const base::Knob kChunkSize{{"chunk_size", "ACCIO_CHUNK_SIZE", "bytes per system call (chunked)", "size", "64KiB",
                             4096, int64_t{1} << 30}};

class Chunked final : public Mechanism {
 public:
  const char* name() const override { return "chunked"; }
  int rank() const override { return 5; }
  size_t read(const IoContext& c, void* buf, size_t n, uint64_t off) const override {
    const auto chunk = static_cast<size_t>(kChunkSize.num(c.settings));  // an index, no parsing
    size_t done = 0;
    while (done < n) {
      const size_t want = std::min(chunk, n - done);
      const size_t got = read_full(c.file.fd, static_cast<char*>(buf) + done, want, off + done, c.file.path);
      done += got;
      if (got < want) break;  // end of file
    }
    return done;
  }
  void write(const IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    const auto chunk = static_cast<size_t>(kChunkSize.num(c.settings));
    for (size_t done = 0; done < n; done += chunk)
      write_full(c.file.fd, static_cast<const char*>(buf) + done, std::min(chunk, n - done), off + done, c.file.path);
  }
};

ACCIO_REGISTER_MECHANISM(Chunked, "chunk_size");  // the settings it reads

}  // namespace
}  // namespace accio::io
// END example

using namespace accio;
using testing_accio::TempDir;

namespace {
std::atomic<int> g_preads{0};
ssize_t counting_pread(int fd, void* b, size_t n, off_t o) {
  ++g_preads;
  return base::sys::real_ops().pread(fd, b, n, o);
}
}  // namespace

TEST(ExampleMechanism, OneFileAddsTheMechanismAndItsKnob) {
  // The registry and the settings table know both.
  const io::Mechanism* m = io::find("chunked");
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->reads("chunk_size"));
  const base::SettingRow* row = base::find_setting("chunk_size");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->spec.env, "ACCIO_CHUNK_SIZE");
  base::Settings s = base::Settings::defaults();
  EXPECT_EQ(s.get("chunk_size"), "65536");
  EXPECT_THROW(s.set("chunk_size", "100"), base::Error);  // below its minimum, one sentence says so

  // The engine runs it with the knob's value: 256 KiB in 16 KiB calls is 16 preads.
  s.set("mechanism", "chunked");
  s.set("chunk_size", "16k");
  TempDir d;
  std::vector<char> data(256 << 10), back(data.size());
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 1);
  {
    auto f = engine::File::open(d.file("x"), "w", s);
    f->pwrite(data.data(), data.size(), 0);
  }
  auto f = engine::File::open(d.file("x"), "r", s);
  base::sys::ops().pread = counting_pread;
  const size_t got = f->pread(back.data(), back.size(), 0);
  base::sys::ops() = base::sys::real_ops();
  EXPECT_EQ(got, data.size());
  EXPECT_EQ(back, data);
  EXPECT_EQ(g_preads.load(), 16);

  // Plans of a profile may name it; their labels show what it reads.
  EXPECT_EQ(planner::PlanSpec::parse(R"({"mechanism": "chunked", "threads": 4})", "plan").label(), "chunked");
}
