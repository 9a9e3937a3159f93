// Statistics have no cap on the number of mechanisms: this binary registers twelve more (ids past
// 16, where the old fixed arrays of accio_stats ended) and checks that requests on the last one are
// counted per handle and for the process, through the engine and the C API, while the deprecated
// fixed arrays keep the first ACCIO_MAX_MECHANISMS ids only.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "accio/accio.h"
#include "engine/file.hpp"
#include "helpers.hpp"
#include "io/mechanism.hpp"

using namespace accio;

namespace {
// A plain pread/pwrite mechanism; N only makes the name and the class distinct.
template <int N>
class Extra final : public io::Mechanism {
 public:
  const char* name() const override { return name_.c_str(); }
  int rank() const override { return 100 + N; }
  size_t read(const io::IoContext& c, void* buf, size_t n, uint64_t off) const override {
    return io::read_full(c.file.fd, buf, n, off, c.file.path);
  }
  void write(const io::IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    io::write_full(c.file.fd, buf, n, off, c.file.path);
  }

 private:
  std::string name_ = "extra" + std::to_string(N);
};
using Extra0 = Extra<0>;
using Extra1 = Extra<1>;
using Extra2 = Extra<2>;
using Extra3 = Extra<3>;
using Extra4 = Extra<4>;
using Extra5 = Extra<5>;
using Extra6 = Extra<6>;
using Extra7 = Extra<7>;
using Extra8 = Extra<8>;
using Extra9 = Extra<9>;
using Extra10 = Extra<10>;
using Extra11 = Extra<11>;
ACCIO_REGISTER_MECHANISM(Extra0);
ACCIO_REGISTER_MECHANISM(Extra1);
ACCIO_REGISTER_MECHANISM(Extra2);
ACCIO_REGISTER_MECHANISM(Extra3);
ACCIO_REGISTER_MECHANISM(Extra4);
ACCIO_REGISTER_MECHANISM(Extra5);
ACCIO_REGISTER_MECHANISM(Extra6);
ACCIO_REGISTER_MECHANISM(Extra7);
ACCIO_REGISTER_MECHANISM(Extra8);
ACCIO_REGISTER_MECHANISM(Extra9);
ACCIO_REGISTER_MECHANISM(Extra10);
ACCIO_REGISTER_MECHANISM(Extra11);
}  // namespace

TEST(ManyMechanisms, IdsPastTheOldCapAreCounted) {
  const io::Mechanism* last = io::find("extra11");
  ASSERT_NE(last, nullptr);
  ASSERT_GE(last->id, ACCIO_MAX_MECHANISMS) << "the test needs a mechanism id past the old cap";
  ASSERT_EQ(static_cast<int>(io::all().size()), accio_mechanism_count());

  testing_accio::TempDir d;
  base::Settings s;
  s.mechanism = "extra11";
  accio_global_stats_reset();
  auto f = engine::File::open(d.file("f"), "w+", s);
  std::vector<char> buf(1000, 'x');
  ASSERT_EQ(f->pwrite(buf.data(), buf.size(), 0), buf.size());
  ASSERT_EQ(f->pread(buf.data(), 600, 0), 600u);

  const engine::Stats st = f->stats();
  ASSERT_EQ(st.mechanisms.size(), io::all().size());
  EXPECT_EQ(st.mechanisms[last->id].calls, 2u);
  EXPECT_EQ(st.mechanisms[last->id].bytes, 1600u);
  EXPECT_EQ(st.last_mechanism, last->id);
  engine::MechanismCount m;
  ASSERT_TRUE(f->counters().mechanism(last->id, &m));
  EXPECT_EQ(m.calls, 2u);
  EXPECT_FALSE(f->counters().mechanism(static_cast<int>(io::all().size()), &m));

  uint64_t calls = 0, bytes = 0;
  ASSERT_EQ(accio_global_mechanism_stats(last->id, &calls, &bytes), 0);
  EXPECT_EQ(calls, 2u);
  EXPECT_EQ(bytes, 1600u);
  accio_stats cs;
  ASSERT_EQ(accio_global_stats(&cs), 0);
  EXPECT_EQ(cs.last_mechanism, last->id);
  uint64_t in_arrays = 0;
  for (int i = 0; i < ACCIO_MAX_MECHANISMS; ++i) in_arrays += cs.mechanism_calls[i];
  EXPECT_EQ(in_arrays, 0u) << "the deprecated arrays hold ids below ACCIO_MAX_MECHANISMS only";
  accio_global_stats_reset();
  ASSERT_EQ(accio_global_mechanism_stats(last->id, &calls, &bytes), 0);
  EXPECT_EQ(calls, 0u);
  EXPECT_EQ(accio_global_mechanism_stats(static_cast<int>(io::all().size()), &calls, &bytes), -EINVAL);
}
