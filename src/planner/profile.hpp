// accio planner: profiles. A profile is what `accio tune` measured on one filesystem, reduced to the
// decision table `auto` consults: for each operation (read, write) and concurrency (one request in
// flight in the process, or several), size intervals, each with a ranked list of plans for a range
// that is in the page cache (hot) and one that is not (cold). Profiles are JSON files named by
// their key (filesystem, device, kernel, accio version) in the profile directory; without one the
// built-in model below answers. Format: docs/tuning.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/settings.hpp"
#include "planner/model_floor.h"

namespace accio::planner {

// One plan: a mechanism and the parameters it runs with. 0 means "the handle's setting", except
// task_size where 0 means "split evenly" (see io::task_bytes).
struct PlanSpec {
  std::string mechanism = "posix";
  uint64_t task_size = 0;
  unsigned threads = 0;
  bool direct = false;  // uring with an O_DIRECT file side (mechanism direct is always direct)
  // The mechanism's own knobs the plan sets (uring's queue_depth), by name, value as the settings
  // table prints it. A profile's plan may set any knob its mechanism reads (its registration names
  // them): a new knob needs no change here.
  std::vector<std::pair<std::string, std::string>> knobs = {};

  // Requests need O_DIRECT alignment: direct set on a mechanism that reads it, or one that is always direct.
  bool needs_alignment() const;
  std::string label() const;  // "parallel(even)", "parallel(task=1MiB, threads=2)", "uring+direct(even, qd=16)"
  // The handle's settings with this plan's parameters applied (threads capped by the handle's).
  base::Settings apply(const base::Settings& handle) const;
  // One plan object of a profile document ({"mechanism": "uring", "queue_depth": 16, ...}); throws
  // base::Error(EINVAL) naming `source` on anything malformed.
  static PlanSpec parse(const std::string& json, const std::string& source);
};

// Requests of at most max_size bytes (and more than the previous cell's) use these plans, best
// first; cold empty means the cold range was not measured (or cannot be cold): hot applies.
// cold_start: plans for a cold range that does not continue the previous request on the handle and
// reads to the end of the file (a whole file, or its rest, in one request: the kernel's readahead has
// no stream to follow and nothing after it to serve); empty: cold applies.
struct Cell {
  uint64_t max_size = UINT64_MAX;
  std::vector<int> hot, cold, cold_start;  // indexes into Profile::plans
};

struct FsKey {
  std::string filesystem, device, kernel, version;
  // Whether the block device under the filesystem says it is rotational (queue/rotational in
  // sysfs, the partition's disk for a partition; for btrfs, whose st_dev is anonymous, the block
  // device the mount names); false for a filesystem without one (tmpfs, NFS, overlayfs). Read
  // once per process. Not part of the profile's file name.
  bool rotational = false;
  std::string file_name() const;  // "ext4_dev-vda1_6.18.0_0.1.0.json"
  std::string describe() const;   // "ext4 on /dev/vda1"
};

// What the built-in model knows of the machine it plans for. detect() reads this process's CPUs
// (its affinity mask, as containers and taskset limit it); tests build models for other machines.
struct MachineFacts {
  unsigned cpus = 1;
  // The bytes one CPU copies from the page cache in the time a request's hand-off to the thread
  // pool and back costs (waking the workers, joining their tasks). An estimate, not measured per
  // machine: on the 2-vCPU VM a hot 1 MiB read split in two ran at 0.74x of one pread and a 2 MiB
  // one at 1.40x (results/tune/profile_ext4_vda.json), which puts it between 0.5 and 1 MiB.
  uint64_t handoff_bytes = ACCIO_MODEL_HANDOFF_BYTES;
  // The smallest cold read that starts a stream (one that does not continue the previous request)
  // for which O_DIRECT beats the page cache: one request at the device's depth against the
  // kernel's readahead ramping up behind the copy. An estimate: on the 2-vCPU VM a single cold
  // 8 MiB read ran 1.2x faster with direct than with posix, while a stream of cold 8 MiB reads ran
  // 2x slower with it (results/tune/evaluate_intervals_model_ext4_vda.json).
  uint64_t cold_direct_from = ACCIO_MODEL_COLD_DIRECT_FROM;
  // Whether the file's device says it is rotational (FsKey::rotational): a fact of the device, not
  // of the machine, so the planner builds the model for each (profile_for). There a cold read is
  // not split: the tasks' interleaved streams only add seeks on a disk with a head (and on the
  // 2-vCPU VM's virtio disk, which says it is one, parallel read a cold 1 GiB file in 64 MiB
  // requests at 0.91-0.94x of one pread per request: results/cold_split.json).
  bool rotational = false;
  static MachineFacts detect();
  // The smallest request an even split over the CPUs serves faster than one call, with one request
  // in flight: where the copy time the split saves, n x (1 - 1/cpus), exceeds the hand-off,
  // rounded up to a page (1.5 MiB on 2 CPUs, 1 MiB on 4, 820 KiB on 16); UINT64_MAX on one CPU.
  uint64_t split_from() const;
};

struct Profile {
  std::string source;  // the file it came from, or "built-in model"
  std::string name;    // "ext4 on /dev/vda1" or "built-in model"
  bool builtin = false;
  bool rotational = false;  // the built-in model of a rotational device (MachineFacts::rotational)
  // A device table: the plans for buffers in GPU memory (device mechanisms only; staged is every
  // cell's last resort, as posix is a host table's).
  bool device = false;
  std::vector<PlanSpec> plans;
  std::vector<Cell> table[2][2];  // [write][several requests in flight]
  // The device tables `accio tune` measured, one per GPU model ("NVIDIA H100 80GB HBM3": GPUs of
  // one model share it), from the profile's optional "devices" section.
  std::vector<std::pair<std::string, std::shared_ptr<const Profile>>> devices;
  // Bytes the preload shim asks the kernel for ahead of a sequential reader of a cold file on this
  // filesystem (the optional "prefetch": {"window": N}; `accio tune` writes N > 0 only where the
  // device measured >= 1.5x more at queue depth 16 than at 1 and than a buffered reader gets by
  // itself). 0: no prefetch.
  uint64_t prefetch_window = 0;
  // The online CPUs of the machine it was measured on ("cpus"; 0: not recorded, before session 26).
  uint64_t cpus = 0;

  // Every cell's last resort, which the planner appends after the cell's plans: posix, or staged in
  // a device table (it runs wherever a GPU does).
  const char* last_resort() const { return device ? "staged" : "posix"; }
  // The smallest request of one direction (one request in flight, as the preload shim asks) that
  // this table runs with anything but its last resort (posix; staged in a device table) in any
  // cache state, by each cell's first plan: a lower bound of Planner::min_accelerated, which also
  // knows which mechanisms can run on the file. UINT64_MAX: none. `accio tune` writes it into the
  // profile ("engine_from") for the launcher of `accio run` (src/preload/launcher.c).
  uint64_t engine_from(bool write) const;

  // The first cell whose max_size >= n (the last cell is unbounded).
  const Cell& cell(bool write, bool concurrent, uint64_t n) const;
  size_t cell_index(bool write, bool concurrent, uint64_t n) const;

  // Built-in model, scaled with the machine: on one CPU posix at every size (a split only adds
  // hand-offs to copies the one CPU makes anyway); else posix below MachineFacts::split_from() (with
  // several requests in flight, below 4 MiB or that if larger: the CPUs are shared), an even split
  // over the handle's threads (parallel) below cpus x 4 MiB, and
  // from there 4 MiB tasks (an even split of a huge request into one task per CPU finishes with
  // its slowest task; 4 MiB tasks keep every CPU busy to the end); posix as the fallback. Reads
  // from MachineFacts::cold_direct_from on that find their range cold and start a stream run
  // direct (cold_start), which makes the planner probe the residency of those sizes. On a
  // rotational device (MachineFacts::rotational) a read that finds its range cold runs posix where
  // the hot plan splits, and a cold start falls back from direct to posix; elsewhere the cache
  // state is not used. builtin_model() is the model for MachineFacts::detect(), built once;
  // builtin_model(true) the same for a rotational device.
  static std::shared_ptr<const Profile> builtin_model(bool rotational = false);
  static std::shared_ptr<const Profile> builtin_model(const MachineFacts& facts);
  // The device table of a GPU model: the profile's measured one, else the built-in device rule
  // (builtin_device_model: reads and writes run staged; docs/gpu.md says why not pagecache).
  std::shared_ptr<const Profile> device_table(const std::string& model) const;
  static std::shared_ptr<const Profile> builtin_device_model();
  // Parses a profile document; throws base::Error(EINVAL) naming `source` on anything malformed.
  static std::shared_ptr<const Profile> parse(const std::string& text, const std::string& source);
  // The profile as the planner reads it, as a profile document (docs/tuning.md) that parse()
  // accepts: every plan with its "label" and "needs_alignment" added, the decisions over the merged
  // cells, the device tables ("devices") and the built-in device rule ("builtin_device"). How the Python tuner and `accio tune --show` see the built-in model and parsed profiles.
  std::string to_json() const;
};

// The key of the filesystem holding fd (or path): filesystem type and mount source from
// /proc/self/mountinfo (matched by st_dev), kernel release, accio version. Cached per device.
FsKey fs_key(int fd);
FsKey fs_key(const std::string& path);
// $ACCIO_PROFILE_DIR, else $XDG_CACHE_HOME/accio/profiles, else ~/.cache/accio/profiles.
std::string profile_dir();

// The profile for an open file according to the `profile` setting: "auto" (the file for its key
// in profile_dir(), else the built-in model, with a one-time note suggesting `accio tune`), "off"
// (the built-in model of fd's device: rotational or not), or a path (that file; throws
// base::Error if unreadable or malformed). Parsed profiles are cached by path and modification time.
std::shared_ptr<const Profile> profile_for(int fd, const std::string& setting);
// Whether the built-in model for the file or directory at path is the rotational device's:
// FsKey::rotational, or the block device's own flag for a block device; a path that cannot be
// looked at throws base::Error. profile_for decides the same for an open file.
bool rotational(const std::string& path);

}  // namespace accio::planner
