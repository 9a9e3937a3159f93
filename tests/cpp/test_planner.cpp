// Planner tests: the JSON reader, profile parsing (and every way a profile can be malformed), the
// per-file Planner (size cells, concurrency, hot/cold by residency, alignment fallback, plans the
// file cannot run), even task splitting, and the engine running what the planner chose.
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <optional>
#include <thread>

#include "accio/accio.h"
#include "base/error.hpp"
#include "base/json.hpp"
#include "base/log.hpp"
#include "base/sys.hpp"
#include "engine/file.hpp"
#include "helpers.hpp"
#include "io/mechanism.hpp"
#include "planner/planner.hpp"
#include "planner/profile.hpp"

using namespace accio;
using namespace testing_accio;

namespace {

// read, 1 in flight: <64KiB posix; >=64KiB hot parallel(even), cold direct then parallel.
// read, N in flight: posix throughout.  write: <1MiB posix, >=1MiB uring(qd=4) for both.
const char* kProfile = R"({
  "schema": "accio.profile/1",
  "key": {"filesystem": "testfs", "device": "/dev/test"},
  "plans": [{"mechanism": "posix"}, {"mechanism": "parallel"}, {"mechanism": "direct"},
            {"mechanism": "uring", "queue_depth": 4}],
  "decisions": {
    "read": {"1": {"hot":  [{"max_size": 65535, "plans": [0]}, {"max_size": null, "plans": [1, 0]}],
                   "cold": [{"max_size": 65535, "plans": [0]}, {"max_size": null, "plans": [2, 1]}]},
             "N": {"hot": [{"max_size": null, "plans": [0]}], "cold": null}},
    "write": {"1": {"hot": [{"max_size": 1048575, "plans": [0]}, {"max_size": null, "plans": [3, 0]}]},
              "N": {"hot": [{"max_size": 1048575, "plans": [0]}, {"max_size": null, "plans": [3, 0]}]}}
  }
})";

std::string write_text(const TempDir& d, const std::string& name, const std::string& text) {
  std::ofstream(d.file(name)) << text;
  return d.file(name);
}

void expect_bad(const std::string& text, const std::string& what) {
  try {
    planner::Profile::parse(text, "p.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const base::Error& e) {
    EXPECT_EQ(e.errnum(), EINVAL);
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("p.json"), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Json, ParsesValuesAndEscapes) {
  auto v = base::json::parse(R"( {"a": [1, -2.5e2, true, false, null], "s": "x\"\\\n\u00e9\u20ac"} )");
  ASSERT_TRUE(v.is(base::json::Value::object));
  const auto* a = v.get("a");
  ASSERT_TRUE(a && a->items.size() == 5);
  EXPECT_EQ(a->items[1].num, -250);
  EXPECT_TRUE(a->items[2].b);
  EXPECT_TRUE(a->items[4].is(base::json::Value::null));
  EXPECT_EQ(v.get("s")->str, "x\"\\\n\xc3\xa9\xe2\x82\xac");
  EXPECT_EQ(v.get("missing"), nullptr);
}

TEST(Json, RejectsMalformed) {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "01x", "\"unterminated", "[1] 2", "tru", "\"\\q\"", "-",
                          "\"\x01\""})
    EXPECT_THROW(base::json::parse(bad), std::runtime_error) << bad;
  std::string deep(100, '[');
  EXPECT_THROW(base::json::parse(deep), std::runtime_error);
}

TEST(Json, SkipsTopLevelMembersButChecksThem) {
  const char* doc = R"({"keep": 1, "big": [{"x": [1.5, "s\u00e9", {"big": 2}]}], "inner": {"big": 3}, "last": "y"})";
  auto v = base::json::parse(doc, {"big"});
  EXPECT_EQ(v.get("big"), nullptr);                  // left out at the top level
  ASSERT_TRUE(v.get("inner") && v.get("inner")->get("big"));  // kept below it
  EXPECT_EQ(v.get("inner")->get("big")->num, 3);
  EXPECT_EQ(v.get("keep")->num, 1);
  EXPECT_EQ(v.get("last")->str, "y");
  EXPECT_EQ(v.members.size(), 3u);
  // A skipped member is read as carefully as a kept one: malformed inside it is still an error.
  for (const char* bad : {R"({"big": [1,], "a": 1})", R"({"big": "\q"})", R"({"big": 01x})", R"({"big": [1)",
                          "{\"big\": \"\x01\"}"})
    EXPECT_THROW(base::json::parse(bad, {"big"}), std::runtime_error) << bad;
  EXPECT_THROW(base::json::parse("{\"big\": " + std::string(100, '[') + "}", {"big"}), std::runtime_error);
}

// The environment variables a test changes, saved and unset at the start and restored at the end
// (a test run under mpirun or srun has some of them set).
class EnvGuard {
 public:
  explicit EnvGuard(std::initializer_list<const char*> names) {
    for (const char* n : names) {
      const char* v = std::getenv(n);
      saved_.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(n);
    }
  }
  ~EnvGuard() {
    for (const auto& [n, v] : saved_) {
      if (v) setenv(n.c_str(), v->c_str(), 1);
      else unsetenv(n.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};
const std::initializer_list<const char*> kRankEnv = {
    "ACCIO_QUIET",  "OMPI_COMM_WORLD_RANK", "PMI_RANK",      "PMIX_RANK", "MV2_COMM_WORLD_RANK", "PALS_RANKID",
    "SLURM_PROCID", "SLURM_LOCALID",        "OMPI_COMM_WORLD_LOCAL_RANK"};

// A cause that a job's ranks share (no profile for a filesystem: they look up the same file) is said
// by rank 0 only, so that 1000 ranks print one line; the other ranks record it. A process's own
// cause is said by each. The rank is the first launcher variable set, MPI's before Slurm's.
TEST(Log, JobWideWarningsAreSaidByRankZeroOnly) {
  EnvGuard env(kRankEnv);  // ACCIO_QUIET unset: this test reads stderr
  auto said = [](std::initializer_list<std::pair<const char*, const char*>> vars, const std::string& key,
                 base::Scope scope, bool* issued) {
    EnvGuard clean(kRankEnv);
    for (const auto& [n, v] : vars) setenv(n, v, 1);
    testing::internal::CaptureStderr();
    *issued = base::warn_once(key, "message " + key, scope);
    return testing::internal::GetCapturedStderr();
  };
  const auto job = base::Scope::job;
  bool issued = true;
  EXPECT_EQ(said({{"PMI_RANK", "3"}}, "j-rank3", job, &issued), "");
  EXPECT_FALSE(issued);
  const auto w = base::warnings();
  EXPECT_NE(std::find(w.begin(), w.end(), "message j-rank3"), w.end()) << "recorded on every rank";
  EXPECT_EQ(said({{"PMI_RANK", "3"}}, "p-rank3", base::Scope::process, &issued), "accio: warning: message p-rank3\n");
  EXPECT_TRUE(issued);
  EXPECT_EQ(said({{"PMI_RANK", "0"}}, "j-rank0", job, &issued), "accio: warning: message j-rank0\n");
  EXPECT_TRUE(issued);
  EXPECT_EQ(said({}, "j-solo", job, &issued), "accio: warning: message j-solo\n");
  EXPECT_TRUE(issued);
  // a local rank 0 on another machine is not the job's rank 0
  EXPECT_EQ(said({{"OMPI_COMM_WORLD_RANK", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}, "j-node1", job, &issued), "");
  EXPECT_FALSE(issued);
  // mpirun (PMIx) inside an sbatch step that left SLURM_PROCID=0: the MPI rank decides
  EXPECT_EQ(said({{"PMIX_RANK", "3"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}}, "j-pmix", job, &issued), "");
  EXPECT_FALSE(issued);
  EXPECT_EQ(said({{"SLURM_PROCID", "2"}}, "j-srun", job, &issued), "");
  EXPECT_FALSE(issued);
  EXPECT_EQ(said({{"PALS_RANKID", "0"}}, "j-pals", job, &issued), "accio: warning: message j-pals\n");
  EXPECT_TRUE(issued);
  {
    EnvGuard clean(kRankEnv);
    EXPECT_EQ(base::job_rank(), 0);
    setenv("SLURM_PROCID", "5", 1);
    EXPECT_EQ(base::job_rank(), 5);
    setenv("MV2_COMM_WORLD_RANK", "7", 1);
    EXPECT_EQ(base::job_rank(), 7) << "MPI's variable before Slurm's";
    setenv("MV2_COMM_WORLD_RANK", "7x", 1);
    EXPECT_EQ(base::job_rank(), 0) << "not a number: rank 0";
  }
}

// A forked child is the same program: what its parent said it does not say again (a DataLoader's
// workers, a multiprocessing pool), and what it meets first it says. Forks while another thread
// keeps taking the log's lock: the child never finds it held, nor the log half-written.
TEST(Log, AForkedChildKeepsWhatItsParentSaid) {
  EnvGuard env(kRankEnv);
  setenv("ACCIO_QUIET", "1", 1);  // before the thread starts: the busy warnings below say nothing
  base::warn_once("fork-parent-said", "said before the fork");
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    for (unsigned i = 0; !stop.load(std::memory_order_relaxed); ++i)
      base::warn_once("fork-busy-" + std::to_string(i % 1000), "busy");
  });
  for (int k = 0; k < 40; ++k) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const bool again = base::warn_once("fork-parent-said", "said before the fork");
      const bool fresh = base::warn_once("fork-child-" + std::to_string(k), "the child's own");
      const auto w = base::warnings();
      const bool kept = std::find(w.begin(), w.end(), "said before the fork") != w.end();
      _exit(!again && fresh && kept ? 0 : 1);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "fork " << k << " status " << st;
  }
  stop = true;
  busy.join();
  EXPECT_TRUE(base::warn_once("fork-child-0", "the parent's own")) << "the child's key stayed in the child";
}

// A profile records the online CPUs of the machine that measured it: where this machine has another
// number (a profile directory in a home that login and compute nodes share), one warning names both.
TEST(Profile, AProfileOfAMachineOfAnotherSizeIsSaidOnce) {
  const long here = sysconf(_SC_NPROCESSORS_ONLN);
  ASSERT_GT(here, 0);
  auto said = [](const std::string& source) {
    int n = 0;
    for (const auto& w : base::warnings()) n += w.find(source + " was measured on a machine with") != std::string::npos;
    return n;
  };
  auto with_cpus = [&](long cpus) {
    std::string t = kProfile;
    return t.insert(t.find('{') + 1, "\"cpus\": " + std::to_string(cpus) + ", ");
  };
  EXPECT_EQ(planner::Profile::parse(with_cpus(here), "same.json")->cpus, static_cast<uint64_t>(here));
  EXPECT_EQ(said("same.json"), 0);
  planner::Profile::parse(with_cpus(here + 7), "other.json");
  planner::Profile::parse(with_cpus(here + 7), "other.json");
  EXPECT_EQ(said("other.json"), 1);
  const std::string w = base::warnings().back();
  EXPECT_NE(w.find(std::to_string(here + 7) + " CPUs, and this one has " + std::to_string(here)), std::string::npos) << w;
  EXPECT_EQ(planner::Profile::parse(kProfile, "unrecorded.json")->cpus, 0u);  // before the field: nothing said
  EXPECT_EQ(said("unrecorded.json"), 0);
  expect_bad(with_cpus(-1), "cpus");
}

TEST(Profile, ParsesAndMergesHotAndColdBoundaries) {
  auto p = planner::Profile::parse(kProfile, "p.json");
  EXPECT_EQ(p->name, "testfs on /dev/test");
  ASSERT_EQ(p->plans.size(), 4u);
  EXPECT_EQ(p->plans[3].label(), "uring(even, qd=4)");
  const auto& r1 = p->table[0][0];
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0].max_size, 65535u);
  EXPECT_EQ(r1[1].cold, (std::vector<int>{2, 1}));
  EXPECT_TRUE(p->table[0][1][0].cold.empty());  // cold null: hot applies
  EXPECT_EQ(p->cell_index(false, false, 65535), 0u);
  EXPECT_EQ(p->cell_index(false, false, 65536), 1u);
  EXPECT_EQ(p->cell_index(true, true, 1 << 30), 1u);
}

TEST(Profile, RejectsEveryMalformedShape) {
  expect_bad("{", "invalid JSON");
  expect_bad(R"({"schema": "other"})", "schema");
  std::string good = kProfile;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  expect_bad(with(R"({"mechanism": "direct"})", R"({"mechanism": "warp"})"), "mechanism");
  expect_bad(with(R"({"mechanism": "direct"})", R"({"mechanism": "auto"})"), "mechanism");
  expect_bad(with(R"("plans": [1, 0]}],)", R"("plans": [9, 0]}],)"), "out of range");
  expect_bad(with(R"({"max_size": 65535, "plans": [0]}, {"max_size": null, "plans": [1, 0]}])",
                  R"({"max_size": 65535, "plans": [0]}, {"max_size": 100, "plans": [1, 0]}])"),
             "increasing");
  expect_bad(with(R"([{"max_size": null, "plans": [0]}], "cold": null)", R"([{"max_size": 5, "plans": [0]}], "cold": null)"),
             "last cell");
  expect_bad(with(R"("queue_depth": 4})", R"("queue_depth": -4})"), "non-negative");
  expect_bad(with(R"("queue_depth": 4})", R"("queue_depth": 4, "task_size": 100})"), "task_size");
  expect_bad(with(R"("N": {"hot": [{"max_size": null, "plans": [0]}], "cold": null})", R"("M": {})"), "read.N");
}

TEST(Profile, FsKeyNamesTheFilesystem) {
  TempDir d;
  auto k = planner::fs_key(d.path());
  EXPECT_NE(k.filesystem, "");
  EXPECT_NE(k.kernel, "");
  EXPECT_NE(k.version, "");
  const std::string name = k.file_name();
  EXPECT_EQ(name.find('/'), std::string::npos);
  EXPECT_EQ(name.substr(name.size() - 5), ".json");
}

TEST(Profile, BuiltinModel) {
  auto b = planner::Profile::builtin_model();
  EXPECT_TRUE(b->builtin);
  EXPECT_EQ(b->to_json(), planner::Profile::builtin_model(planner::MachineFacts::detect())->to_json());
  EXPECT_GE(planner::MachineFacts::detect().cpus, 1u);
}

// The built-in model for machines other than this one (faked facts): its plans scale with the CPUs.
TEST(Profile, BuiltinModelScalesWithTheCpus) {
  auto label = [](unsigned cpus, bool write, bool concurrent, uint64_t n) {
    auto m = planner::Profile::builtin_model(planner::MachineFacts{cpus});
    const planner::Cell& c = m->cell(write, concurrent, n);
    EXPECT_TRUE(c.cold.empty()) << "the model does not probe the cache";
    EXPECT_EQ(m->plans[c.hot.back()].mechanism, "posix") << "posix is every cell's fallback";
    return m->plans[c.hot[0]].label();
  };
  constexpr uint64_t MiB = 1 << 20;
  // One CPU: a split only adds hand-offs, posix at every size.
  for (const uint64_t n : {uint64_t{4096}, MiB, 64 * MiB, uint64_t{2} << 30})
    for (int w = 0; w < 2; ++w) EXPECT_EQ(label(1, w, false, n), "posix") << n;
  // Two CPUs (this VM): posix below 1.5 MiB (a hot 1 MiB read split in two loses to one pread:
  // half the copy saved is less than the hand-off), even split below 2 x 4 MiB, 4 MiB tasks from there.
  EXPECT_EQ(label(2, false, false, MiB), "posix");
  EXPECT_EQ(label(2, false, false, 3 * MiB / 2 - 1), "posix");
  EXPECT_EQ(label(2, false, false, 3 * MiB / 2), "parallel(even)");
  EXPECT_EQ(label(2, false, false, 8 * MiB - 1), "parallel(even)");
  EXPECT_EQ(label(2, false, false, 8 * MiB), "parallel(task=4MiB)");
  // Several in flight on two CPUs: both already copy, posix at every size (a split lost 7-12% there).
  for (const uint64_t n : {4 * MiB - 1, 4 * MiB, 8 * MiB, 64 * MiB, uint64_t{2} << 30})
    EXPECT_EQ(label(2, false, true, n), "posix") << n;
  EXPECT_EQ(planner::Profile::builtin_model(planner::MachineFacts{2})->table[0][1].size(), 1u);
  // On four, two in flight leave two CPUs idle: split from 4 MiB.
  EXPECT_EQ(label(4, false, true, 4 * MiB - 1), "posix");
  EXPECT_EQ(label(4, false, true, 4 * MiB), "parallel(even)");
  EXPECT_EQ(label(16, false, true, 64 * MiB), "parallel(task=4MiB)");
  // Writes: posix at every size, on every machine (a buffered write holds the inode lock: the
  // tasks of a split write would run one after another).
  for (const unsigned cpus : {2u, 16u})
    for (const bool conc : {false, true})
      for (const uint64_t n : {uint64_t{4096}, MiB, 8 * MiB, 64 * MiB, uint64_t{2} << 30}) {
        EXPECT_EQ(label(cpus, true, conc, n), "posix") << cpus << " " << conc << " " << n;
        EXPECT_EQ(planner::Profile::builtin_model(planner::MachineFacts{cpus})->table[1][conc].size(), 1u);
      }
  // Sixteen CPUs: the even split runs below 64 MiB (16 tasks under 4 MiB); a hot 2 GiB read runs
  // the plan of the fixed parallel mechanism (4 MiB tasks over every CPU), not 16 tasks of 128 MiB.
  EXPECT_EQ(label(16, false, false, 64 * MiB - 1), "parallel(even)");
  EXPECT_EQ(label(16, false, false, 64 * MiB), "parallel(task=4MiB)");
  EXPECT_EQ(label(16, false, false, uint64_t{2} << 30), "parallel(task=4MiB)");
  EXPECT_EQ(label(16, false, true, 2 * MiB), "posix");
  // The crossing point falls with the CPUs (the split saves n x (1 - 1/cpus) of the copy): 1 MiB
  // on 4, just above 800 KiB on 16, where a 1 MiB read is split; and rises with a dearer hand-off.
  EXPECT_EQ(label(4, false, false, MiB - 1), "posix");
  EXPECT_EQ(label(4, false, false, MiB), "parallel(even)");
  EXPECT_EQ(label(16, false, false, 800 << 10), "posix");
  EXPECT_EQ(label(16, false, false, MiB), "parallel(even)");
  EXPECT_EQ((planner::MachineFacts{16, 768 << 10}.split_from()), 820u << 10);
  EXPECT_EQ((planner::MachineFacts{2, 2 * MiB}.split_from()), 4 * MiB);
  EXPECT_EQ(planner::MachineFacts{1}.split_from(), UINT64_MAX);
  // A hand-off so dear that no split pays below the 4 MiB tasks: posix at every size.
  auto slow = planner::Profile::builtin_model(planner::MachineFacts{2, 8 * MiB});
  EXPECT_EQ(slow->table[1][0].size(), 1u);  // writes: one cell (reads are split at 8 MiB for cold_start)
  EXPECT_EQ(slow->plans[slow->cell(false, false, uint64_t{1} << 30).hot[0]].label(), "posix");
  // Cold reads that start a stream run direct from 8 MiB, on every machine (one CPU too), with one
  // request in flight; below, for writes, and with several in flight (interleaved streams look
  // like new ones), the cache state is not looked at.
  for (const unsigned cpus : {1u, 2u, 16u}) {
    auto m = planner::Profile::builtin_model(planner::MachineFacts{cpus});
    for (const bool conc : {false, true}) {
      EXPECT_TRUE(m->cell(false, conc, 8 * MiB - 1).cold_start.empty()) << cpus;
      for (const uint64_t n : {8 * MiB, 64 * MiB, uint64_t{2} << 30}) {
        EXPECT_TRUE(m->cell(true, conc, n).cold_start.empty()) << "writes";
        const planner::Cell& c = m->cell(false, conc, n);
        if (conc) {
          EXPECT_TRUE(c.cold_start.empty()) << "several in flight: " << cpus << " " << n;
          continue;
        }
        ASSERT_FALSE(c.cold_start.empty()) << cpus << " " << n;
        EXPECT_EQ(m->plans[c.cold_start[0]].label(), "direct(even)");
        EXPECT_EQ(std::vector<int>(c.cold_start.begin() + 1, c.cold_start.end()), c.hot) << "then the hot plans";
      }
    }
  }
  // On 16 CPUs the even-split cell is split at 8 MiB; the hot plans stay as they were.
  EXPECT_EQ(label(16, false, false, 8 * MiB - 1), "parallel(even)");
  EXPECT_EQ(label(16, false, false, 8 * MiB), "parallel(even)");
  EXPECT_EQ((planner::MachineFacts{2, 768 << 10, 32 * MiB}.cold_direct_from), 32 * MiB);
  EXPECT_TRUE(planner::Profile::builtin_model(planner::MachineFacts{2, 768 << 10, 32 * MiB})
                  ->cell(false, false, 16 * MiB).cold_start.empty());
  // The model is a profile like any other: its document parses back to the same decisions.
  auto m = planner::Profile::builtin_model(planner::MachineFacts{16});
  auto decisions = [](const std::string& doc) { return doc.substr(doc.find("\"plans\"")); };
  EXPECT_EQ(decisions(planner::Profile::parse(m->to_json(), "model")->to_json()), decisions(m->to_json()));
}

// The floor the launcher of `accio run` computes in C without the engine (model_floor.h) is where
// the built-in model for that many CPUs starts to run anything but posix, and a lower bound of what
// the planner tells the shim (min_accelerated) on a file; a profile's engine_from is its own.
TEST(Planner, ModelFloorInCIsTheModelsEngineFrom) {
  constexpr uint64_t MiB = 1 << 20;
  for (unsigned cpus = 1; cpus <= 1024; ++cpus) {
    const auto m = planner::Profile::builtin_model(planner::MachineFacts{cpus});
    ASSERT_EQ(accio_model_read_floor(cpus), m->engine_from(false)) << cpus << " CPUs";
    ASSERT_EQ(m->engine_from(true), UINT64_MAX) << "the model writes posix at every size";
    ASSERT_EQ(accio_model_split_from(cpus, ACCIO_MODEL_HANDOFF_BYTES), planner::MachineFacts{cpus}.split_from());
  }
  EXPECT_EQ(accio_model_read_floor(1), 8 * MiB);         // one CPU: only the cold reads that start a stream
  EXPECT_EQ(accio_model_read_floor(2), 3 * MiB / 2);     // the 2-vCPU VM: 1 MiB reads stay posix
  EXPECT_EQ(accio_model_read_floor(16), uint64_t{820} << 10);
  // A profile's own: the first cell whose first plan (in any cache state) is not posix.
  const auto p = planner::Profile::parse(R"({"schema": "accio.profile/1", "plans": [{"mechanism": "posix"},
      {"mechanism": "uring", "queue_depth": 16}, {"mechanism": "parallel"}],
    "decisions": {"read": {"1": {"hot": [{"max_size": 4194303, "plans": [0]}, {"max_size": null, "plans": [2, 0]}],
                                 "cold": [{"max_size": 262143, "plans": [0]}, {"max_size": null, "plans": [1]}]},
                           "N": {"hot": [{"max_size": null, "plans": [1]}]}},
                  "write": {"1": {"hot": [{"max_size": null, "plans": [0, 1]}]}, "N": {"hot": [{"max_size": null, "plans": [1]}]}}}})",
                                         "test");
  EXPECT_EQ(p->engine_from(false), 256u << 10) << "cold reads run uring from 256 KiB";
  EXPECT_EQ(p->engine_from(true), UINT64_MAX) << "one request in flight writes posix (N is not the shim's)";
  EXPECT_NE(p->to_json().find(R"("engine_from": {"read": 262144, "write": null})"), std::string::npos) << p->to_json();
  // A profile whose engine_from no longer matches its table (edited by hand) is said so, once.
  auto with = [&](const char* ef, const char* source) {
    std::string doc = p->to_json();
    const size_t at = doc.find(R"("engine_from": {)");
    doc.replace(at, doc.find('}', at) + 1 - at, std::string("\"engine_from\": ") + ef);
    planner::Profile::parse(doc, source);
    size_t n = 0;
    for (const std::string& w : base::warnings()) n += w.find(source) != std::string::npos && w.find("engine_from") != std::string::npos;
    return n;
  };
  EXPECT_EQ(with(R"({"read": 262144, "write": null})", "matching-engine-from"), 0u);
  EXPECT_EQ(with(R"({"read": 1048576, "write": null})", "stale-engine-from"), 1u);
  TempDir d;
  const std::string path = d.file("f");
  auto s = base::Settings::defaults();
  s.set("profile", "off");
  auto f = engine::File::open(path, "w", s);
  for (const unsigned cpus : {1u, 2u, 16u}) {
    planner::Planner pl(planner::Profile::builtin_model(planner::MachineFacts{cpus}), f->ref(), s);
    EXPECT_LE(accio_model_read_floor(cpus), pl.min_accelerated(false)) << cpus;
  }
}

// The built-in model's cold_start: a cold read of 8 MiB or more that does not continue the previous
// request and runs to the end of the file runs direct; one that continues it (the kernel's readahead
// follows the stream), the first of a stream that goes on past it, and a cached one run the hot
// plan; writes never look.
TEST(Planner, ColdReadsThatStartAStreamRunDirect) {
  TempDir d;
  auto s = base::Settings::defaults();
  s.set("profile", "off");
  s.set("threads", "2");
  const std::string path = d.file("data");
  constexpr uint64_t MiB = 1 << 20, kSize = 32 * MiB;
  {
    auto f = engine::File::open(path, "w", s);
    std::vector<char> buf(kSize, 'x');
    f->pwrite(buf.data(), buf.size(), 0);
    f->fsync();
  }
  auto f = engine::File::open(path, "r", s);
  if (f->ref().direct_fd < 0) GTEST_SKIP() << "no O_DIRECT here: " << f->ref().no_direct;
  const auto model = planner::Profile::builtin_model(planner::MachineFacts{2});
  Buffer b(8 * MiB);
  ASSERT_EQ(posix_fadvise(f->ref().fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  planner::Residency res;
  ASSERT_TRUE(planner::residency(f->ref().fd, 0, kSize, &res));
  if (res.cached * 100 > res.total) GTEST_SKIP() << "this filesystem keeps pages cached (tmpfs?)";
  planner::Planner p(model, f->ref(), s);
  auto plan = [&](uint64_t n, uint64_t off, const void* buf = nullptr, bool write = false) {
    const planner::Choice c = p.choose({buf ? buf : b.data(), n, off, write, 1, kSize});
    return c.plan->spec.label() + " | " + p.why(c.route);
  };
  auto label = [](const std::string& text) { return text.substr(0, text.find(" | ")); };
  std::string first = plan(8 * MiB, 24 * MiB);  // a first read, to the end of the file
  EXPECT_EQ(label(first), "direct(even)");
  EXPECT_NE(first.find("range cold, starts a stream (does not continue the previous request) and reads to the end of the file"),
            std::string::npos) << first;
  EXPECT_EQ(label(plan(8 * MiB, 24 * MiB)), "direct(even)");  // the same request asked again (plan, then run)
  // The first request of a stream that goes on: the cold plan, the readahead starts with it.
  std::string head = plan(8 * MiB, 0);
  EXPECT_EQ(label(head), "parallel(task=4MiB)");
  EXPECT_NE(head.find("continues the previous request or stops before the end of the file"), std::string::npos) << head;
  std::string next = plan(8 * MiB, 8 * MiB);  // continues it
  EXPECT_EQ(label(next), "parallel(task=4MiB)");
  EXPECT_NE(next.find("continues the previous request"), std::string::npos) << next;
  EXPECT_EQ(label(plan(8 * MiB, 8 * MiB)), "parallel(task=4MiB)");  // asked again: still continues
  EXPECT_EQ(label(plan(8 * MiB, 16 * MiB)), "parallel(task=4MiB)");  // continues it
  {  // A question about another offset (explain) leaves the stream where the requests left it.
    planner::Signals q{b.data(), 8 * MiB, 0, false, 1, kSize};
    q.peek = true;
    EXPECT_EQ(p.choose(q).plan->spec.label(), "parallel(task=4MiB)");
  }
  EXPECT_EQ(label(plan(8 * MiB, 24 * MiB)), "parallel(task=4MiB)");  // continues it to the end
  EXPECT_EQ(label(plan(8 * MiB, 0)), "parallel(task=4MiB)");         // a jump back, the file goes on
  EXPECT_EQ(label(plan(16 * MiB, 16 * MiB)), "direct(even)");        // a jump to the rest of the file
  EXPECT_EQ(label(plan(kSize, 0)), "direct(even)");                  // the whole file in one request
  EXPECT_EQ(label(plan(64 * MiB, 0)), "direct(even)");               // more than the file: to its end
  // At or beyond the end the handle knows (the file grew where the handle did not see it, its pages
  // maybe dirty in the page cache): never direct, a stream of them neither.
  for (const uint64_t off : {kSize, kSize + 8 * MiB, kSize + 16 * MiB, kSize + 40 * MiB})
    EXPECT_EQ(label(plan(8 * MiB, off)), "parallel(task=4MiB)") << off;
  EXPECT_EQ(label(plan(8 * MiB, 24 * MiB, b.data(1))), "parallel(task=4MiB)");  // unaligned: no direct
  EXPECT_EQ(label(plan(4 * MiB, 28 * MiB)), "parallel(even)");     // below 8 MiB: the hot plan
  EXPECT_EQ(label(plan(8 * MiB, 24 * MiB, nullptr, true)), "posix");  // a write
  // Several in flight: two streams read by two threads (or async reads) interleave, so nearly
  // every request looks like a new stream; they get the cold plan, never direct (on two CPUs that
  // is posix: with several in flight both CPUs already copy).
  auto concurrent = [&](uint64_t off) {
    return p.choose({b.data(), 8 * MiB, off, false, 2, kSize}).plan->spec.label();
  };
  for (const uint64_t off : {uint64_t{0}, 16 * MiB, 8 * MiB, 24 * MiB})  // streams at 0 and 16 MiB
    EXPECT_EQ(concurrent(off), "posix") << off;
  // Threads sharing the handle, one request each in flight: the stream memory is updated without
  // a lock (atomics: the TSan build checks there is no data race) and every answer is one of the
  // cell's plans.
  std::atomic<int> odd{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t)
    readers.emplace_back([&, t] {
      for (uint64_t i = 0; i < 64; ++i) {
        const std::string l = p.choose({b.data(), 8 * MiB, (2 * i + t) * 8 * MiB % kSize, false, 1, kSize}).plan->spec.label();
        if (l != "direct(even)" && l != "parallel(task=4MiB)") odd.fetch_add(1);
      }
    });
  for (auto& r : readers) r.join();
  EXPECT_EQ(odd.load(), 0);
  // Cached: the hot plan, starting a stream or not.
  std::vector<char> all(kSize);
  ASSERT_EQ(pread(f->ref().fd, all.data(), all.size(), 0), static_cast<ssize_t>(all.size()));
  EXPECT_EQ(label(plan(8 * MiB, 16 * MiB)), "parallel(task=4MiB)");
  ASSERT_EQ(posix_fadvise(f->ref().fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  // The fallback where the file takes no O_DIRECT is the hot plan: cold_start lists them after direct.
  EXPECT_EQ(model->plans[model->cell(false, false, 8 * MiB).cold_start[1]].label(), "parallel(task=4MiB)");
}

// A device that says it is rotational (a disk with a head; the 2-vCPU VM's virtio disk says so
// too): a cold range is read in one stream where the hot plan splits (the tasks' interleaved
// streams add seeks), and a cold start falls back from direct to posix. The hot plans are the
// same as on any other device.
TEST(Planner, ARotationalDeviceReadsColdRangesInOneStream) {
  constexpr uint64_t MiB = 1 << 20;
  EXPECT_TRUE(planner::Profile::builtin_model(true)->rotational);
  EXPECT_FALSE(planner::Profile::builtin_model(false)->rotational);
  for (const unsigned cpus : {1u, 2u, 4u, 16u}) {  // the cells split differently (cpus x 4 MiB vs 8 MiB)
    planner::MachineFacts rot{cpus};
    rot.rotational = true;
    const auto model = planner::Profile::builtin_model(rot), flat = planner::Profile::builtin_model(planner::MachineFacts{cpus});
    EXPECT_TRUE(model->rotational);
    EXPECT_FALSE(flat->rotational);
    for (const bool conc : {false, true})
      for (uint64_t n = 4096; n <= 4096 * MiB; n *= 2)
        for (const uint64_t size : {n - 1, n, n + 1}) {
          const planner::Cell& c = model->cell(false, conc, size);
          const planner::Cell& f = flat->cell(false, conc, size);
          ASSERT_EQ(c.hot, f.hot) << cpus << " " << size;  // the same hot plans
          if (model->plans[c.hot[0]].mechanism == "posix") {
            EXPECT_TRUE(c.cold.empty()) << cpus << " " << size;
          } else {  // every size the hot plan splits: posix when cold
            ASSERT_EQ(c.cold.size(), 1u) << cpus << " " << size;
            EXPECT_EQ(model->plans[c.cold[0]].label(), "posix") << cpus << " " << size;
          }
          if (!conc && size >= ACCIO_MODEL_COLD_DIRECT_FROM) {
            ASSERT_EQ(c.cold_start.size(), 2u) << cpus << " " << size;
            EXPECT_EQ(model->plans[c.cold_start[0]].mechanism, "direct") << cpus << " " << size;
            EXPECT_EQ(model->plans[c.cold_start[1]].label(), "posix") << cpus << " " << size;
          }
          EXPECT_TRUE(model->cell(true, conc, size).cold.empty()) << "writes: posix throughout";
        }
    EXPECT_EQ(model->engine_from(false), flat->engine_from(false)) << "the shim's floor is the hot split's";
  }
  {  // 4 CPUs: 2 MiB is split hot (parallel(even)) and read in one stream cold; so is 12 MiB
    planner::MachineFacts rot{4};
    rot.rotational = true;
    const auto m4 = planner::Profile::builtin_model(rot);
    EXPECT_EQ(m4->plans[m4->cell(false, false, 2 * MiB).hot[0]].label(), "parallel(even)");
    EXPECT_EQ(m4->plans[m4->cell(false, false, 2 * MiB).cold[0]].label(), "posix");
    EXPECT_EQ(m4->plans[m4->cell(false, false, 12 * MiB).cold[0]].label(), "posix");
  }
  planner::MachineFacts rot{2};
  rot.rotational = true;
  const auto model = planner::Profile::builtin_model(rot);
  // The planner on a cold file: the cold range that continues a stream runs posix, and says why.
  TempDir d;
  auto s = base::Settings::defaults();
  s.set("threads", "2");
  const std::string path = d.file("data");
  constexpr uint64_t kSize = 32 * MiB;
  {
    auto f = engine::File::open(path, "w", s);
    std::vector<char> buf(kSize, 'x');
    f->pwrite(buf.data(), buf.size(), 0);
    f->fsync();
  }
  auto f = engine::File::open(path, "r", s);
  ASSERT_EQ(posix_fadvise(f->ref().fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  planner::Residency res;
  ASSERT_TRUE(planner::residency(f->ref().fd, 0, kSize, &res));
  if (res.cached * 100 > res.total) GTEST_SKIP() << "this filesystem keeps pages cached (tmpfs?)";
  Buffer b(8 * MiB);
  planner::Planner p(model, f->ref(), s);
  const planner::Choice cold = p.choose({b.data(), 8 * MiB, 0, false, 1, kSize});
  EXPECT_EQ(cold.plan->spec.label(), "posix");
  EXPECT_NE(p.why(cold.route).find("range cold, continues the previous request or stops before the end of the file, "
                                   "rotational device (a cold range is read in one stream)"),
            std::string::npos) << p.why(cold.route);
  EXPECT_EQ(p.choose({b.data(), 8 * MiB, 8 * MiB, false, 2, kSize}).plan->spec.label(), "posix");  // several in flight
  if (f->ref().direct_fd >= 0) {  // a cold start to the end of the file: direct, and no word of the rotational rule
    const planner::Choice start = p.choose({b.data(), 8 * MiB, 24 * MiB, false, 1, kSize});
    EXPECT_EQ(start.plan->spec.label(), "direct(even)");
    EXPECT_EQ(p.why(start.route).find("rotational"), std::string::npos) << p.why(start.route);
  }
  std::vector<char> all(kSize);
  ASSERT_EQ(pread(f->ref().fd, all.data(), all.size(), 0), static_cast<ssize_t>(all.size()));
  const planner::Choice hot = p.choose({b.data(), 8 * MiB, 8 * MiB, false, 1, kSize, true});
  EXPECT_EQ(hot.plan->spec.label(), "parallel(task=4MiB)");
  EXPECT_EQ(p.why(hot.route).find("rotational"), std::string::npos) << p.why(hot.route);
  ASSERT_EQ(posix_fadvise(f->ref().fd, 0, 0, POSIX_FADV_DONTNEED), 0);
}

// fs_key reads the device's rotational flag from sysfs: the disk's for a partition, none for a
// filesystem without a block device.
TEST(Profile, FsKeyKnowsWhetherTheDeviceIsRotational) {
  TempDir d;
  struct stat st;
  ASSERT_EQ(stat(d.path().c_str(), &st), 0);
  bool want = false;
  if (major(st.st_dev) != 0) {
    char dev[PATH_MAX];
    const std::string link = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
    if (realpath(link.c_str(), dev)) {
      std::string dir = dev;
      if (access((dir + "/partition").c_str(), F_OK) == 0) dir = dir.substr(0, dir.rfind('/'));
      std::ifstream in(dir + "/queue/rotational");
      std::string v;
      want = (in >> v) && v == "1";
    }
  }
  EXPECT_EQ(planner::fs_key(d.path()).rotational, want);
  EXPECT_FALSE(planner::fs_key("/proc/self").rotational) << "procfs: no block device";
}

// The cachestat probe samples a head and a tail window: a cold range whose head the kernel read
// ahead (a request continuing a stream) is cold, not half cached.
TEST(Residency, AReadAheadHeadDoesNotMakeAColdRangeCached) {
  if (!base::sys::cachestat_available()) GTEST_SKIP() << "no cachestat in this kernel";
  TempDir d;
  constexpr size_t kSize = 8 << 20;
  const std::string path = d.file("data");
  {
    std::ofstream out(path, std::ios::binary);
    std::vector<char> buf(kSize, 'x');
    out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fdatasync(fd), 0);
  ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  planner::Residency res;
  ASSERT_TRUE(planner::residency(fd, 0, kSize, &res));
  if (res.cached * 100 > res.total) {
    ::close(fd);
    GTEST_SKIP() << "this filesystem keeps pages cached (tmpfs?)";
  }
  ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);  // no readahead: only the head is read
  std::vector<char> head(32 << 10);
  ASSERT_EQ(pread(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  EXPECT_FALSE(planner::mostly_cached(fd, 0, kSize, planner::Probe::cachestat));
  EXPECT_FALSE(planner::mostly_cached(fd, 0, kSize, planner::Probe::nowait));
  // Both ends read by the program itself (a header and an index at the end, as torch.load reads a
  // zip archive before a tensor's bytes), the body cold: still a cold range (head and tail alone
  // counted it cached, and the tensor's read took the hot plan).
  std::vector<char> tail(32 << 10);
  ASSERT_EQ(pread(fd, tail.data(), tail.size(), kSize - tail.size()), static_cast<ssize_t>(tail.size()));
  const uint64_t mid = (kSize - base::sys::kSampleWindow) / 2;  // the probe's middle window
  auto middle_cold = [&] {  // the nowait probe above may have brought its middle byte's page in
    uint64_t c = 1, p = 0;
    for (int i = 0; i < 200 && c; ++i) {  // (RWF_NOWAIT starts the read it declines)
      if (i) usleep(1000);
      posix_fadvise(fd, kSize / 4, kSize / 2, POSIX_FADV_DONTNEED);
      ASSERT_TRUE(base::sys::sample_cached(fd, mid, base::sys::kSampleWindow, &c, &p));
    }
    ASSERT_EQ(c, 0u) << "the middle stays cached after POSIX_FADV_DONTNEED";
  };
  middle_cold();
  EXPECT_FALSE(planner::mostly_cached(fd, 0, kSize, planner::Probe::cachestat));
  EXPECT_FALSE(planner::mostly_cached(fd, 0, kSize, planner::Probe::nowait));
  // One stray page in the middle window does not make it cached (two thirds of the windows did).
  middle_cold();
  std::vector<char> page(4096);
  ASSERT_EQ(pread(fd, page.data(), page.size(), mid + 8192), static_cast<ssize_t>(page.size()));
  EXPECT_FALSE(planner::mostly_cached(fd, 0, kSize, planner::Probe::cachestat));
  std::vector<char> middle(base::sys::kSampleWindow);  // the body too, or the middle of it: cached
  ASSERT_EQ(pread(fd, middle.data(), middle.size(), mid), static_cast<ssize_t>(middle.size()));
  EXPECT_TRUE(planner::mostly_cached(fd, 0, kSize, planner::Probe::cachestat));
  EXPECT_TRUE(planner::mostly_cached(fd, 0, kSize, planner::Probe::nowait));
  // sample_cached's mincore half (kernels without cachestat) sees what cachestat sees in the same
  // windows: the head cached and the tail not (counts may differ by a page where a large folio
  // straddles a window's edge); then all of it, for ranges of every alignment
  auto both = [&](uint64_t off, uint64_t len) {
    uint64_t c1, p1, c2, p2;
    EXPECT_TRUE(base::sys::sample_cached(fd, off, len, &c1, &p1));
    EXPECT_TRUE(base::sys::sample_cached_mincore(fd, off, len, &c2, &p2));
    EXPECT_EQ(p1, p2) << off << " " << len;
    EXPECT_EQ(c1 == p1, c2 == p2) << off << " " << len << ": " << c1 << " and " << c2 << " of " << p1;
    return std::make_pair(c2, p2);
  };
  ASSERT_EQ(posix_fadvise(fd, kSize / 2, 0, POSIX_FADV_DONTNEED), 0);  // the second half cold again
  const auto cold = both(0, kSize);
  EXPECT_GT(cold.first, 0u) << "the head was read";
  EXPECT_LT(cold.first, cold.second) << "the tail was not";
  std::vector<char> all(kSize);
  ASSERT_EQ(pread(fd, all.data(), all.size(), 0), static_cast<ssize_t>(all.size()));
  EXPECT_TRUE(planner::mostly_cached(fd, 0, kSize, planner::Probe::cachestat));
  EXPECT_TRUE(planner::mostly_cached(fd, 0, kSize, planner::Probe::nowait));
  for (const auto& [off, len] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, kSize}, {100, 65536}, {4095, 100000}, {1 << 20, 64 << 10}, {5, 1}, {kSize - 100, 100}}) {
    const auto hot = both(off, len);
    EXPECT_EQ(hot.first, hot.second) << off << " " << len;
  }
  ::close(fd);
}

TEST(Planner, FollowsSizeConcurrencyCacheAndAlignment) {
  TempDir d;
  const std::string prof = write_text(d, "p.json", kProfile);
  auto s = base::Settings::defaults();
  s.set("profile", prof);
  s.set("threads", "2");
  const std::string path = d.file("data");
  {
    auto f = engine::File::open(path, "w", s);
    std::vector<char> buf(8 << 20, 'x');
    f->pwrite(buf.data(), buf.size(), 0);
    f->fsync();
  }
  auto f = engine::File::open(path, "r+", s);
  if (f->ref().direct_fd < 0) GTEST_SKIP() << "no O_DIRECT here: " << f->ref().no_direct;
  auto fresh = [&] { return std::make_unique<planner::Planner>(planner::Profile::parse(kProfile, prof), f->ref(), s); };
  std::unique_ptr<planner::Planner> hot = fresh();
  const planner::Planner* now = hot.get();
  Buffer b(1 << 20);
  auto plan = [&](uint64_t n, uint64_t off, unsigned inflight, const void* buf, bool write = false) {
    return now->choose({buf, n, off, write, inflight, 8 << 20}).plan->spec.label();
  };
  // The written pages are cached: hot.
  EXPECT_EQ(plan(4096, 0, 1, b.data()), "posix");
  EXPECT_EQ(plan(1 << 20, 0, 1, b.data()), "parallel(even)");
  EXPECT_EQ(plan(1 << 20, 0, 2, b.data()), "posix");  // several in flight
  // Dropped from the cache: cold -> direct when aligned, parallel otherwise.
  ASSERT_EQ(posix_fadvise(f->ref().fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  planner::Residency res;
  ASSERT_TRUE(planner::residency(f->ref().fd, 0, 1 << 20, &res));
  if (res.cached * 100 > res.total) GTEST_SKIP() << "this filesystem keeps pages cached (tmpfs?)";
  // The planner that probed a moment ago reuses its verdict (1 MiB of the 4 MiB it serves)...
  EXPECT_EQ(plan(1 << 20, 0, 1, b.data()), "parallel(even)");
  // ...a fresh one probes.
  const std::unique_ptr<planner::Planner> cold = fresh();
  const planner::Planner& r = *cold;
  now = cold.get();
  EXPECT_EQ(plan(1 << 20, 0, 1, b.data()), "direct(even)");
  EXPECT_EQ(plan(1 << 20, 512, 1, b.data()), "parallel(even)");     // unaligned offset
  EXPECT_EQ(plan(1 << 20, 0, 1, b.data(1)), "parallel(even)");      // unaligned buffer
  EXPECT_EQ(plan(1 << 20, 0, 2, b.data()), "posix");                // N: cold null -> hot plan, no probe
  // Writes: uring above 1 MiB whatever the cache; writes past the known end count as cold.
  EXPECT_EQ(plan(2 << 20, 9 << 20, 1, b.data(), true), "uring(even, qd=4)");
  EXPECT_EQ(plan(4096, 0, 1, b.data(), true), "posix");

  // Below 4 MiB a verdict is reused until 4 MiB of requests has gone by, then probed again.
  {
    planner::Planner ra(planner::Profile::parse(kProfile, prof), f->ref(), s);
    auto quarter = [&] { return ra.choose({b.data(), 256 << 10, 0, false, 1, 8 << 20}).plan->spec.label(); };
    EXPECT_EQ(quarter(), "direct(even)");  // probed: cold
    std::vector<char> all(8 << 20);
    ASSERT_EQ(pread(f->ref().fd, all.data(), all.size(), 0), static_cast<ssize_t>(all.size()));  // now cached
    for (int i = 0; i < 15; ++i) EXPECT_EQ(quarter(), "direct(even)") << i;  // verdict reused
    EXPECT_EQ(quarter(), "parallel(even)");  // 4 MiB later: probed again, hot
    ASSERT_EQ(posix_fadvise(f->ref().fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    // A request that asks for a fresh probe (ACCIO_OP_FRESH_CACHE) gets one at once; the next
    // ones reuse that verdict.
    EXPECT_EQ(quarter(), "parallel(even)");  // the hot verdict reused
    planner::Signals fresh_one{b.data(), 256 << 10, 0, false, 1, 8 << 20};
    fresh_one.fresh_cache = true;
    EXPECT_EQ(ra.choose(fresh_one).plan->spec.label(), "direct(even)");
    EXPECT_EQ(quarter(), "direct(even)");
  }

  // explain() is a question (tune audit, session 26): it takes ACCIO_OP_FRESH_CACHE as the decision
  // does (accio_explain dropped it), and moves neither the reuse count nor the verdict (asking moved
  // them: sixteen questions made the next request probe, and run another plan).
  {
    std::vector<char> all(8 << 20);
    ASSERT_EQ(pread(f->ref().fd, all.data(), all.size(), 0), static_cast<ssize_t>(all.size()));  // cached
    auto asked = [&](bool fresh_cache) { return f->explain(b.data(), 256 << 10, 0, false, fresh_cache).plan; };
    f->plan(b.data(), 256 << 10, 0, false, /*fresh_cache=*/true);  // a request's probe: hot
    ASSERT_EQ(posix_fadvise(f->ref().fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    EXPECT_EQ(asked(false), "parallel(even)");  // the hot verdict, reused
    EXPECT_EQ(asked(true), "direct(even)");     // probed for the question: cold
    for (int i = 0; i < 20; ++i) asked(false);  // 5 MiB of questions
    EXPECT_EQ(asked(false), "parallel(even)");  // ...kept nothing: still the request's hot verdict
  }

  // The same decisions with every probe method.
  for (const char* m : {"cachestat", "nowait", "mincore"}) {
    auto s2 = s;
    s2.set("cache_probe", m);
    planner::Planner r2(planner::Profile::parse(kProfile, prof), f->ref(), s2);
    EXPECT_EQ(r2.choose({b.data(), 1 << 20, 0, false, 1, 8 << 20}).plan->spec.label(), "direct(even)") << m;
  }
  auto s3 = s;
  s3.set("cache_probe", "off");  // never probes: counts as hot
  planner::Planner r3(planner::Profile::parse(kProfile, prof), f->ref(), s3);
  EXPECT_EQ(r3.choose({b.data(), 1 << 20, 0, false, 1, 8 << 20}).plan->spec.label(), "parallel(even)");

  // Where a cell's plans do not differ by alignment, an unaligned request takes the aligned route
  // (its alignment is not looked at); where they do, it has a route of its own.
  {
    planner::Planner rh(planner::Profile::parse(kProfile, prof), f->ref(), s);
    const planner::Choice small = rh.choose({b.data(1), 4096, 512, false, 1, 8 << 20});
    EXPECT_EQ(small.route, rh.choose({b.data(), 4096, 0, false, 1, 8 << 20}).route);
    const planner::Choice big = rh.choose({b.data(1), 1 << 20, 512, false, 1, 8 << 20});
    EXPECT_NE(big.route, rh.choose({b.data(), 1 << 20, 0, false, 1, 8 << 20}).route);
    EXPECT_EQ(big.plan->spec.label(), "parallel(even)");
  }

  // Statistics name the plan and why.
  auto c = r.choose({b.data(), 1 << 20, 0, false, 1, 8 << 20});
  r.record(c, 1 << 20);
  r.record(c, 1 << 20);
  auto st = r.stats(0, 0);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].plan, "direct(even)");
  EXPECT_EQ(st[0].calls, 2u);
  EXPECT_EQ(st[0].bytes, 2u << 20);
  EXPECT_NE(st[0].why.find("testfs on /dev/test: read, one request in flight, >= 64 KiB"), std::string::npos) << st[0].why;
  EXPECT_NE(st[0].why.find("range cold"), std::string::npos) << st[0].why;
  // A bounded cell reads as the half-open range --show writes (not "0B..65535B bytes", nor "0 B..64 KiB").
  auto small = r.choose({b.data(), 4096, 0, false, 1, 8 << 20});
  r.record(small, 4096);
  bool found = false;
  for (auto& x : r.stats(0, 0)) found |= x.why.find("one request in flight, < 64 KiB") != std::string::npos;
  EXPECT_TRUE(found);
}

TEST(Planner, SkipsPlansTheFileCannotRun) {
  TempDir d;
  const std::string prof = write_text(d, "p.json", kProfile);
  auto s = base::Settings::defaults();
  auto f = engine::File::open(d.file("x"), "w+", s);
  io::FileRef ref = f->ref();
  ref.direct_fd = -1;  // as on a filesystem without O_DIRECT
  ref.no_direct = "test";
  planner::Planner r(planner::Profile::parse(kProfile, prof), ref, s);
  Buffer b(4096);
  // Cold (past the end), aligned: direct is ranked first but cannot run -> parallel.
  EXPECT_EQ(r.choose({b.data(), 1 << 20, 0, false, 1, 0}).plan->spec.label(), "parallel(even)");
}

namespace {
struct InlineRunner final : io::TaskRunner {
  void run(size_t ntasks, unsigned, const std::function<void(size_t)>& fn) override {
    for (size_t i = 0; i < ntasks; ++i) fn(i);
  }
};
}  // namespace

TEST(Planner, AFixedMechanismIsAOnePlanPlanner) {
  TempDir d;
  auto s = base::Settings::defaults();
  s.set("mechanism", "direct");
  auto f = engine::File::open(d.file("x"), "w+", s);
  io::FileRef ref = f->ref();
  ref.direct_fd = -1;  // as on a filesystem without O_DIRECT: direct resolves to posix (one warning)
  ref.no_direct = "test";
  InlineRunner runner;
  const planner::Planner p(*io::find("direct"), io::IoContext{ref, s, runner});
  EXPECT_TRUE(p.fixed());
  ASSERT_NE(p.only_plan(), nullptr);
  Buffer b(4096);
  for (const uint64_t n : {uint64_t{1}, uint64_t{4096}, uint64_t{1} << 30}) {
    const planner::Choice c = p.choose({b.data(1), n, 7, n % 2 == 0, 3, 0});
    EXPECT_EQ(c.plan, p.only_plan()) << n;  // every request: the one plan and its one route
    EXPECT_EQ(c.route, 0u);
  }
  EXPECT_STREQ(p.only_plan()->mechanism->name(), "posix");
  EXPECT_EQ(p.only_plan()->label, "posix");  // a fixed mechanism's plan is its name
  EXPECT_EQ(p.why(0), "mechanism=direct is set but cannot run here (see the warning): it runs as posix");
  EXPECT_EQ(p.min_accelerated(false), UINT64_MAX);  // it runs as posix
  // The one route's counts are the handle's (every request, those another mechanism ran as well):
  // recording adds nothing of its own, and no requests means no entry.
  const planner::Choice c = p.choose({b.data(), 4096, 0, false, 1, 0});
  p.record(c, 4096);
  EXPECT_TRUE(p.stats(0, 0).empty());
  const auto st = p.stats(2, 4196);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].plan, "posix");
  EXPECT_EQ(st[0].why, p.why(0));
  EXPECT_EQ(st[0].calls, 2u);
  EXPECT_EQ(st[0].bytes, 4196u);

  auto sp = s;
  sp.set("mechanism", "parallel");
  const planner::Planner q(*io::find("parallel"), io::IoContext{ref, sp, runner});
  EXPECT_EQ(q.why(0), "mechanism=parallel is set");
  EXPECT_EQ(q.min_accelerated(true), 0u);
}

TEST(Planner, AutoCountsOnlyTheRequestsItsPlanRan) {
  TempDir d;
  const std::string prof = write_text(d, "p.json", kProfile);
  auto s = base::Settings::defaults();
  auto f = engine::File::open(d.file("x"), "w+", s);
  const planner::Planner r(planner::Profile::parse(kProfile, prof), f->ref(), s);
  EXPECT_FALSE(r.fixed());
  EXPECT_EQ(r.only_plan(), nullptr);
  Buffer b(4096);
  const planner::Choice c = r.choose({b.data(), 4096, 0, false, 1, 0});
  r.record(c, 4096, /*rerouted=*/true);  // a GPU buffer served by staged: not this plan's
  EXPECT_TRUE(r.stats(7, 7).empty()) << "auto counts its routes, not the handle";
  r.record(c, 4096);
  ASSERT_EQ(r.stats(7, 7).size(), 1u);
  EXPECT_EQ(r.stats(7, 7)[0].calls, 1u);
}

TEST(Engine, AutoRunsThePlannedMechanismAndCountsIt) {
  TempDir d;
  const std::string prof = write_text(d, "p.json", kProfile);
  auto s = base::Settings::defaults();
  s.set("profile", prof);
  auto f = engine::File::open(d.file("w"), "w+", s);
  Buffer b(4 << 20);
  std::memset(b.data(), 7, 4 << 20);
  f->pwrite(b.data(), 4 << 20, 0);  // uring
  f->pwrite(b.data(), 4096, 0);     // posix
  EXPECT_EQ(std::string(f->plan(4 << 20, true).name()), "uring");
  const auto st = f->stats();
  EXPECT_EQ(st.mechanisms[io::find("uring")->id].calls, 1u);
  EXPECT_EQ(st.mechanisms[io::find("posix")->id].calls, 1u);
  const auto ps = f->plan_stats();
  ASSERT_EQ(ps.size(), 2u);
  auto e = f->explain(nullptr, 4 << 20, 0, true);
  EXPECT_EQ(e.mechanism, "uring");
  EXPECT_EQ(e.plan, "uring(even, qd=4)");
}

TEST(Engine, BadProfileFailsOpenBeforeTouchingTheFile) {
  TempDir d;
  const std::string data = d.file("keep");
  std::ofstream(data) << "precious";
  auto s = base::Settings::defaults();
  // The setting refuses a malformed or missing file; a profile that goes bad or goes away after it
  // was set fails the open.
  const std::string prof = write_text(d, "p.json", kProfile);
  s.set("profile", prof);
  write_text(d, "p.json", "{\"schema\": \"accio.profile/1\"}");
  try {
    engine::File::open(data, "w", s);
    ADD_FAILURE() << "opened with a malformed profile";
  } catch (const base::Error& e) {
    EXPECT_EQ(e.errnum(), EINVAL);
    EXPECT_NE(std::string(e.what()).find("p.json"), std::string::npos);
  }
  EXPECT_THROW(s.set("profile", prof), base::Error);
  std::remove(prof.c_str());
  EXPECT_THROW(engine::File::open(data, "w", s), base::Error);
  EXPECT_THROW(s.set("profile", d.file("missing.json")), base::Error);
  std::ifstream in(data);
  std::string got;
  in >> got;
  EXPECT_EQ(got, "precious");  // O_TRUNC never happened
}

TEST(Mechanisms, EvenTaskSplit) {
  auto s = base::Settings::defaults();
  s.set("task_size", "0");
  EXPECT_EQ(io::task_bytes(s, 64 << 20, 4, 1), 16u << 20);
  EXPECT_EQ(io::task_bytes(s, 100 << 10, 4, 1), io::kMinEvenTask);
  EXPECT_EQ(io::task_bytes(s, (8 << 20) + 1, 2, 4096) % 4096, 0u);
  s.set("task_size", "1m");
  EXPECT_EQ(io::task_bytes(s, 64 << 20, 4, 1), 1u << 20);
}

// Labels and alignment needs come from the mechanisms' registrations (the settings they read).
TEST(Profile, LabelsShowWhatTheMechanismReads) {
  auto label = [](const char* json) { return planner::PlanSpec::parse(json, "plan").label(); };
  EXPECT_EQ(label(R"j({"mechanism": "posix", "task_size": 65536, "threads": 2})j"), "posix");
  EXPECT_EQ(label(R"j({"mechanism": "parallel"})j"), "parallel(even)");
  EXPECT_EQ(label(R"j({"mechanism": "parallel", "task_size": 1048576, "threads": 2, "queue_depth": 0})j"),
            "parallel(task=1MiB, threads=2)");
  EXPECT_EQ(label(R"j({"mechanism": "uring", "queue_depth": 16, "threads": 4, "direct": true})j"),
            "uring+direct(even, qd=16)");
  EXPECT_EQ(label(R"j({"mechanism": "direct", "task_size": 4194304})j"), "direct(task=4MiB)");
  EXPECT_TRUE(planner::PlanSpec::parse(R"j({"mechanism": "direct"})j", "plan").needs_alignment());
  EXPECT_TRUE(planner::PlanSpec::parse(R"j({"mechanism": "uring", "direct": true})j", "plan").needs_alignment());
  EXPECT_FALSE(planner::PlanSpec::parse(R"j({"mechanism": "parallel"})j", "plan").needs_alignment());
  // posix and parallel have no direct knob: direct set on them changes nothing (they stay buffered)
  EXPECT_FALSE(planner::PlanSpec::parse(R"j({"mechanism": "posix", "direct": true})j", "plan").needs_alignment());
  EXPECT_FALSE(planner::PlanSpec::parse(R"j({"mechanism": "parallel", "direct": true})j", "plan").needs_alignment());
  char buf[64];
  int aligned = -1;
  EXPECT_EQ(accio_plan_describe(R"j({"mechanism": "direct", "threads": 2})j", buf, sizeof buf, &aligned), 23);
  EXPECT_STREQ(buf, "direct(even, threads=2)");
  EXPECT_EQ(aligned, 1);
  EXPECT_EQ(accio_plan_describe(R"j({"mechanism": "posix"})j", buf, sizeof buf, &aligned), 5);
  EXPECT_EQ(aligned, 0);
  // A short buffer: the label is cut there, and the return value says how long it really is.
  char small[8];
  EXPECT_EQ(accio_plan_describe(R"j({"mechanism": "uring", "direct": true})j", small, sizeof small, nullptr),
            int64_t(std::string("uring+direct(even)").size()));
  EXPECT_STREQ(small, "uring+d");
  EXPECT_EQ(accio_plan_describe(R"j({"mechanism": "warp"})j", buf, sizeof buf, nullptr), -EINVAL);
  EXPECT_NE(std::string(accio_last_error()).find("plan mechanism must name a mechanism (warp)"), std::string::npos);
  EXPECT_EQ(accio_plan_describe("{", buf, sizeof buf, nullptr), -EINVAL);
}

// What accio_profile_describe writes is a profile the parser reads back to the same decisions.
TEST(Profile, DescribeRoundTrips) {
  auto describe = [](const char* text, const char* source = "p.json") {
    const int64_t n = accio_profile_describe(text, source, nullptr, 0);
    EXPECT_GT(n, 0) << accio_last_error();
    std::string out(size_t(n) + 1, '\0');
    EXPECT_EQ(accio_profile_describe(text, source, out.data(), out.size()), n);
    out.resize(size_t(n));
    return out;
  };
  const std::string once = describe(kProfile);
  EXPECT_NE(once.find(R"j("label": "uring(even, qd=4)", "needs_alignment": false)j"), std::string::npos) << once;
  EXPECT_NE(once.find(R"j("label": "direct(even)", "needs_alignment": true)j"), std::string::npos) << once;
  auto a = planner::Profile::parse(kProfile, "a"), b = planner::Profile::parse(once, "b");
  ASSERT_EQ(a->plans.size(), b->plans.size());
  for (size_t i = 0; i < a->plans.size(); ++i) EXPECT_EQ(a->plans[i].label(), b->plans[i].label());
  for (int w = 0; w < 2; ++w)
    for (int c = 0; c < 2; ++c) {
      ASSERT_EQ(a->table[w][c].size(), b->table[w][c].size());
      for (size_t k = 0; k < a->table[w][c].size(); ++k) {
        EXPECT_EQ(a->table[w][c][k].max_size, b->table[w][c][k].max_size);
        EXPECT_EQ(a->table[w][c][k].hot, b->table[w][c][k].hot);
        EXPECT_EQ(a->table[w][c][k].cold, b->table[w][c][k].cold);
      }
    }
  auto from_plans = [](const std::string& doc) { return doc.substr(doc.find("\"plans\"")); };
  EXPECT_EQ(from_plans(describe(once.c_str())), from_plans(once));  // a fixed point
  const std::string builtin = describe(nullptr, nullptr);
  EXPECT_NE(builtin.find(R"j("builtin": true)j"), std::string::npos);
  EXPECT_EQ(builtin, planner::Profile::builtin_model()->to_json());  // this machine's model
  EXPECT_NO_THROW(planner::Profile::parse(builtin, "builtin"));
  // With a path: the model of the device under it (rotational or not); a missing path: its errno.
  TempDir d;
  EXPECT_EQ(describe(nullptr, d.path().c_str()),
            planner::Profile::builtin_model(planner::fs_key(d.path()).rotational)->to_json());
  EXPECT_EQ(accio_profile_describe(nullptr, d.file("missing").c_str(), nullptr, 0), -ENOENT);
  EXPECT_NE(std::string(accio_last_error()).find("missing"), std::string::npos);
  EXPECT_EQ(accio_profile_describe("{\"schema\": 1}", "bad.json", nullptr, 0), -EINVAL);
  EXPECT_NE(std::string(accio_last_error()).find("bad.json"), std::string::npos);
}

// The optional device section: one table per GPU model, parsed as the host table is (device
// mechanisms only), looked up by model with the built-in device rule for any other, kept by to_json;
// a planner over a device table falls back to staged, as a host one falls back to posix.
TEST(Profile, DeviceTablesByGpuModel) {
  std::string text = kProfile;
  text.insert(text.rfind('}'), R"(, "devices": [{"model": "GPU A", "measured_on": {"ordinal": 0},
    "plans": [{"mechanism": "naive"}, {"mechanism": "pagecache", "pagecache_min": 4096}, {"mechanism": "staged"}],
    "decisions": {"read": {"1": {"hot": [{"max_size": 1048575, "plans": [0]}, {"max_size": null, "plans": [1, 2]}]},
                           "N": {"hot": [{"max_size": null, "plans": [2]}]}},
                  "write": {"1": {"hot": [{"max_size": null, "plans": [0]}]}, "N": {"hot": [{"max_size": null, "plans": [2]}]}}}}])");
  auto p = planner::Profile::parse(text, "p.json");
  ASSERT_EQ(p->devices.size(), 1u);
  auto a = p->device_table("GPU A");
  EXPECT_TRUE(a->device && !a->builtin);
  EXPECT_EQ(a->name, "GPU A (testfs on /dev/test)");
  EXPECT_EQ(a->cell(false, false, 4096).hot, std::vector<int>{0});
  EXPECT_EQ(a->cell(false, false, 1 << 20).hot, (std::vector<int>{1, 2}));
  EXPECT_EQ(a->plans[1].label(), "pagecache(pagecache_min=4KiB)");
  EXPECT_EQ(p->device_table("GPU B"), planner::Profile::builtin_device_model());
  EXPECT_EQ(planner::Profile::parse(kProfile, "old.json")->device_table("GPU A"), planner::Profile::builtin_device_model());
  // to_json keeps the tables and names the built-in rule; parsing it again gives the same tables.
  const std::string once = p->to_json();
  EXPECT_NE(once.find(R"("builtin_device": {"plans": [{"mechanism": "staged", "label")"), std::string::npos) << once;
  auto again = planner::Profile::parse(once, "again.json");
  ASSERT_EQ(again->devices.size(), 1u);
  EXPECT_EQ(again->devices[0].first, "GPU A");
  EXPECT_EQ(again->device_table("GPU A")->cell(false, false, 1 << 20).hot, (std::vector<int>{1, 2}));
  // Malformed sections: every one names the file and the member.
  auto with = [&](const std::string& devices) {
    std::string t = kProfile;
    return t.insert(t.rfind('}'), ", \"devices\": " + devices);
  };
  expect_bad(with("{}"), "devices must be an array");
  expect_bad(with("[{\"plans\": []}]"), "devices[0].model");
  expect_bad(with(R"([{"model": "X", "plans": [{"mechanism": "posix"}], "decisions": {}}])"), "posix does not serve GPU memory");
  expect_bad(with(R"([{"model": "X", "plans": [{"mechanism": "staged"}], "decisions": {}}])"), "devices[0].decisions.read is missing");
  expect_bad(with(R"([{"model": "X", "plans": [{"mechanism": "staged"}], "decisions": {"read": {"1": {"hot": [{"max_size": null, "plans": [3]}]}}}}])"),
             "plan index 3 out of range");
  // A planner over a device table: plans that cannot run here fall to staged, the last resort.
  TempDir d;
  auto s = base::Settings::defaults();
  const std::string path = write_text(d, "data", std::string(1 << 20, 'x'));
  auto f = engine::File::open(path, "r", s);
  planner::Planner dev(a, f->ref(), s);
  const planner::Choice c = dev.choose(planner::Signals{nullptr, 4096, 0, false, 1, 1 << 20});
  const char* want = io::find("naive")->available(nullptr) ? "naive" : "staged";
  EXPECT_EQ(c.plan->spec.mechanism, want);
  EXPECT_NE(dev.why(c.route).find("GPU A (testfs on /dev/test): read, one request in flight"), std::string::npos)
      << dev.why(c.route);
  planner::Planner builtin(planner::Profile::builtin_device_model(), f->ref(), s);
  const planner::Choice w = builtin.choose(planner::Signals{nullptr, 4096, 0, true, 1, 1 << 20});
  EXPECT_EQ(w.plan->spec.mechanism, "staged");
  EXPECT_NE(builtin.why(w.route).find("built-in device rule: write"), std::string::npos) << builtin.why(w.route);
  // Reads run staged too, at every size (pagecache lost to staged on the first real GPU, docs/gpu.md).
  for (uint64_t size : {uint64_t{4096}, uint64_t{8} << 20, uint64_t{1} << 30}) {
    const planner::Choice r = builtin.choose(planner::Signals{nullptr, size, 0, false, 1, 1 << 20});
    EXPECT_EQ(r.plan->spec.mechanism, "staged") << size;
  }
}

// A plan sets a mechanism's own knobs by name, checked as the settings table checks them.
TEST(Profile, PlansSetTheMechanismsKnobs) {
  auto p = planner::PlanSpec::parse(R"({"mechanism": "uring", "queue_depth": 4, "label": "ignored"})", "plan");
  ASSERT_EQ(p.knobs.size(), 1u);
  EXPECT_EQ(p.apply(base::Settings::defaults()).get("queue_depth"), "4");
  EXPECT_EQ(planner::PlanSpec::parse(R"({"mechanism": "uring", "queue_depth": 0})", "plan").knobs.size(), 0u);
  // A profile is input: a knob the mechanism does not read (parallel has no queue depth) or a member
  // that is no setting (a misspelling) is refused, not ignored; 0 ("the handle's setting") is fine.
  EXPECT_TRUE(planner::PlanSpec::parse(R"({"mechanism": "parallel", "queue_depth": 0})", "plan").knobs.empty());
  expect_bad(R"({"schema": "accio.profile/1", "plans": [{"mechanism": "parallel", "queue_depth": 4}]})",
             "plan queue_depth: mechanism parallel does not read it");
  expect_bad(R"({"schema": "accio.profile/1", "plans": [{"mechanism": "uring", "queue_dept": 4}]})",
             "plan member 'queue_dept' is not a setting");
  expect_bad(R"({"schema": "accio.profile/1", "plans": [{"mechanism": "uring", "queue_depth": 5000}]})",
             "plan queue_depth '5000' is not valid (not in 1..4096)");
  expect_bad(R"({"schema": "accio.profile/1", "plans": [{"mechanism": "uring", "queue_depth": "deep"}]})",
             "plan queue_depth 'deep' is not valid (not an integer)");
  expect_bad(R"({"schema": "accio.profile/1", "plans": [{"mechanism": "uring", "queue_depth": [1]}]})",
             "plan queue_depth must be a non-negative integer");
}

// The optional prefetch section: the window `accio tune` decided (0 or absent: no prefetch); any
// other value is refused naming the profile, as every field.
TEST(Profile, PrefetchWindowIsParsedAndChecked) {
  auto with = [](const std::string& section) {
    std::string t = kProfile;
    return t.insert(t.find("\"plans\""), "\"prefetch\": " + section + ", ");
  };
  EXPECT_EQ(planner::Profile::parse(kProfile, "p.json")->prefetch_window, 0u);
  EXPECT_EQ(planner::Profile::builtin_model()->prefetch_window, 0u);
  const auto p = planner::Profile::parse(with(R"({"qd1_mibps": [100.5], "gain": null, "window": 33554432})"), "p.json");
  EXPECT_EQ(p->prefetch_window, 32u << 20);
  EXPECT_NE(p->to_json().find(R"("prefetch": {"window": 33554432})"), std::string::npos);
  EXPECT_EQ(planner::Profile::parse(with(R"({"window": 0})"), "p.json")->prefetch_window, 0u);
  EXPECT_EQ(planner::Profile::parse(with("null"), "p.json")->prefetch_window, 0u);
  EXPECT_EQ(planner::Profile::parse(with("{}"), "p.json")->prefetch_window, 0u);
  expect_bad(with("1"), "prefetch must be an object");
  expect_bad(with(R"({"window": -1})"), "prefetch.window must be a non-negative integer");
  expect_bad(with(R"({"window": 1.5})"), "prefetch.window must be a non-negative integer");
  expect_bad(with(R"({"window": "32m"})"), "prefetch.window must be a non-negative integer");
  expect_bad(with(R"({"window": null})"), "prefetch.window must be a non-negative integer");
}
