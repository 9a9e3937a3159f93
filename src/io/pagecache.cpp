// accio mechanism `pagecache`: reads into GPU memory by DMA straight from the page cache. The file's
// pages are mapped read-only (MAP_SHARED) and registered with the driver (cuMemHostRegister with
// READ_ONLY: the pages are pinned), and the GPU's copy engines copy them: no CPU copy into a staging
// buffer, which is the ceiling of every staged path on a hot file. A request is split over `threads`
// workers on disjoint ranges; each walks its range in chunks of `pagecache_chunk`, registering chunk
// i+1 while chunk i's copy runs on its stream and unregistering chunk i while chunk i+1's runs.
// Chunks not wholly in the page cache (the planner's residency probe), and chunks whose registration
// is refused (memlock limit, the driver or the kernel refuse the pin), are read through `staged` in
// the same request; requests below `pagecache_min`, and writes, run staged (route()). The CPU never
// touches the mapping: a file truncated under a read fails the pin (staged then sees end of file) or,
// once pinned, keeps the old pages; the size is checked again after pinning and the copy clipped to
// it. Registrations may be kept for files read again, up to `pagecache_pin_limit` bytes in all,
// keyed by path and dropped when the file's device, inode, size, mtime or ctime change.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>

#include "base/error.hpp"
#include "base/fork.hpp"
#include "base/log.hpp"
#include "io/mechanism.hpp"
#include "mem/cuda.hpp"

namespace accio::io {
namespace {
namespace cu = mem::cuda;
using base::Error;

// pagecache's knobs (rows of the settings table; docs/api.md lists them).
const base::Knob kMin{{"pagecache_min", "ACCIO_PAGECACHE_MIN",
                       "GPU reads smaller than this run staged under pagecache (registration would cost more "
                       "than the CPU copy it saves)",
                       "size", "8MiB", 0, int64_t{1} << 40}};
const base::Knob kChunk{{"pagecache_chunk", "ACCIO_PAGECACHE_CHUNK",
                         "bytes of page cache registered with the driver per call (registration of the next "
                         "chunk overlaps the copy of this one)",
                         "size", "64MiB", 64 << 10, int64_t{1} << 30},
                        [](base::SettingValue& v) { v.num = (v.num + 4095) & ~int64_t{4095}; }};
const base::Knob kPinLimit{{"pagecache_pin_limit", "ACCIO_PAGECACHE_PIN_LIMIT",
                            "page-cache bytes pagecache keeps registered (pinned) after a read, for files read "
                            "again; dropped when the file changes; 0 = unregister after every read (and "
                            "leave what other handles keep)",
                            "size", "0", 0, int64_t{1} << 50}};

// Whether `device` takes cuMemHostRegister's READ_ONLY flag (asked once per device): without it
// every registration of page-cache pages would be refused, chunk after chunk.
bool read_only_registration(int device) {
  static std::atomic<int> known[64];  // 0 unknown, 1 yes, 2 no
  if (device < 0 || device >= 64) return true;
  int k = known[device].load(std::memory_order_relaxed);
  if (!k) {
    const cu::Driver& d = *cu::load();
    cu::CUdevice dev = 0;
    int v = 1;  // a driver that cannot say is tried, and a refusal then says why
    if (d.DeviceGet(&dev, device) == cu::kSuccess) d.DeviceGetAttribute(&v, cu::kAttrReadOnlyHostRegister, dev);
    k = v ? 1 : 2;
    known[device].store(k, std::memory_order_relaxed);
  }
  return k == 1;
}

uint64_t page_size() {
  static const uint64_t p = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return p;
}

// What identifies the file's contents for the registration cache.
struct Identity {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  timespec mtime{}, ctime{};
  explicit Identity(const struct stat& st)
      : dev(st.st_dev), ino(st.st_ino), size(st.st_size), mtime(st.st_mtim), ctime(st.st_ctim) {}
  bool operator==(const Identity& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
           mtime.tv_nsec == o.mtime.tv_nsec && ctime.tv_sec == o.ctime.tv_sec && ctime.tv_nsec == o.ctime.tv_nsec;
  }
};

struct stat stat_of(const IoContext& c) {
  struct stat st;
  if (fstat(c.file.fd, &st) != 0) throw Error(errno, "fstat", c.file.path, base::kNoOffset);
  return st;
}

// File pages [off, off+len) (page-aligned) mapped read-only and registered with the driver. The
// destructor unregisters and unmaps; the last owner is a finished copy or the cache.
class Pin {
 public:
  // Why a pin failed, for the advice its warning gives.
  enum class Refusal { none, map, memory, driver };
  // nullptr, *why and *cause when the mapping or the registration fails.
  static std::shared_ptr<Pin> make(const IoContext& c, uint64_t off, size_t len, std::string* why, Refusal* cause) {
    void* p = mmap(nullptr, len, PROT_READ, MAP_SHARED, c.file.fd, static_cast<off_t>(off));
    if (p == MAP_FAILED) {
      *why = std::string("mmap: ") + std::strerror(errno);
      *cause = Refusal::map;
      return nullptr;
    }
    const cu::Driver& d = *cu::load();
    const cu::CUresult rc = d.MemHostRegister(p, len, cu::kHostRegisterReadOnly | cu::kHostRegisterPortable);
    if (rc != cu::kSuccess) {
      munmap(p, len);
      *why = cu::error_text(d, rc, "cuMemHostRegister");
      *cause = rc == cu::kErrorOutOfMemory ? Refusal::memory : Refusal::driver;
      return nullptr;
    }
    return std::shared_ptr<Pin>(new Pin(static_cast<char*>(p), off, len, c.target.device));
  }
  // Whether the registration was made in an earlier instance of its GPU's primary context than `now`
  // (the program reset the GPU since: the registration died with that context).
  bool stale(uint64_t now) const { return cu::instance_gone(instance_, now); }
  int device() const { return device_; }
  ~Pin() {
    try {
      cu::ContextGuard g(device_);
      cu::load()->MemHostUnregister(map_);
    } catch (...) {  // no context can be made current: the process is going down with its GPU
    }
    munmap(map_, len_);
  }
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  bool covers(uint64_t off, size_t len) const { return off >= off_ && off + len <= off_ + len_; }
  const char* at(uint64_t file_off) const { return map_ + (file_off - off_); }
  size_t size() const { return len_; }

 private:
  Pin(char* map, uint64_t off, size_t len, int device)
      : map_(map), off_(off), len_(len), device_(device), instance_(cu::primary_instance(device)) {}
  char* map_;
  uint64_t off_;
  size_t len_;
  int device_;
  uint64_t instance_;  // the primary context's instance it was registered in (0: unknown)
};

// Registrations kept for files read again (pagecache_pin_limit), least recently used first out.
struct PinCache {
  struct Entry {
    std::string path;
    Identity id;
    std::shared_ptr<Pin> pin;
  };
  std::mutex mu;
  std::list<Entry> lru;  // most recently used first
  std::atomic<size_t> bytes{0};

  // A kept registration of `path` as it is now (`id`) covering [off, off+len); drops the path's
  // registrations of other contents, and any made in an earlier instance of its GPU's primary
  // context (the program reset that GPU: they died with it). Registrations are portable: one made
  // for GPU 0 serves GPU 1's requests too, so each is checked against its own GPU.
  std::shared_ptr<Pin> find(const std::string& path, const Identity& id, uint64_t off, size_t len) {
    std::list<Entry> stale;  // unregistered after the lock is released
    std::shared_ptr<Pin> hit;
    std::map<int, uint64_t> now;  // each GPU's primary-context instance, asked once per call
    const auto gone = [&](const Pin& p) {
      auto [at, fresh] = now.try_emplace(p.device(), 0);
      if (fresh) at->second = cu::primary_instance(p.device());
      return p.stale(at->second);
    };
    {
      std::lock_guard lk(mu);
      for (auto it = lru.begin(); it != lru.end();) {
        auto next = std::next(it);
        if ((it->path == path && !(it->id == id)) || gone(*it->pin)) {
          bytes -= it->pin->size();
          stale.splice(stale.end(), lru, it);
        } else if (!hit && it->path == path && it->pin->covers(off, len)) {
          hit = it->pin;
          lru.splice(lru.begin(), lru, it);
        }
        it = next;
      }
    }
    return hit;
  }
  void keep(const std::string& path, const Identity& id, std::shared_ptr<Pin> pin, size_t limit) {
    if (pin->size() > limit) return;
    std::list<Entry> evicted;  // unregistered after the lock is released
    std::lock_guard lk(mu);
    bytes += pin->size();
    lru.push_front(Entry{path, id, std::move(pin)});
    trim_locked(limit, evicted);
  }
  // Drops the least recently used registrations until at most `limit` bytes stay kept (a read with
  // a lower pagecache_pin_limit than earlier ones releases what they kept).
  void trim(size_t limit) {
    std::list<Entry> evicted;
    std::lock_guard lk(mu);
    trim_locked(limit, evicted);
  }
  void trim_locked(size_t limit, std::list<Entry>& evicted) {
    while (bytes > limit) {
      bytes -= lru.back().pin->size();
      evicted.splice(evicted.end(), lru, std::prev(lru.end()));
    }
  }
};
base::PerProcess<PinCache> g_pins;

// One stream and two events per worker, created on first use and kept for the process (but for a
// lane of a primary context the program has reset since: left alone, as staged's rings are).
struct Lane {
  cu::CUstream stream = nullptr;
  cu::CUevent ev[2] = {};
  uint64_t instance = 0;  // the primary context's instance it was made in (0: unknown)
};
struct Lanes {
  std::mutex mu;
  std::map<int, std::vector<std::unique_ptr<Lane>>> free;  // per device
  std::vector<std::unique_ptr<Lane>> retired;  // of a context reset since: kept, never used
};
base::PerProcess<Lanes> g_lanes;

class LaneLease {
 public:
  explicit LaneLease(int device) : device_(device) {
    Lanes& l = g_lanes.get();
    {
      std::lock_guard lk(l.mu);
      auto& v = l.free[device];
      if (!v.empty()) {  // lanes of a primary context the program reset since: their stream and events
        const uint64_t now = cu::primary_instance(device);  // died with it, and are left alone
        for (auto& x : v)
          if (cu::instance_gone(x->instance, now)) l.retired.push_back(std::move(x));
        std::erase(v, nullptr);
      }
      if (!v.empty()) {
        lane_ = std::move(v.back());
        v.pop_back();
        return;
      }
    }
    const cu::Driver& d = *cu::load();
    auto lane = std::make_unique<Lane>();
    cu::check(d, d.StreamCreate(&lane->stream, cu::kStreamBlocking), "cuStreamCreate");
    for (auto& e : lane->ev) {
      if (const cu::CUresult rc = d.EventCreate(&e, cu::kEventDisableTiming); rc != cu::kSuccess) {
        for (auto& x : lane->ev)
          if (x) d.EventDestroy(x);
        d.StreamDestroy(lane->stream);
        cu::check(d, rc, "cuEventCreate");
      }
    }
    lane->instance = cu::primary_instance(device);
    lane_ = std::move(lane);
  }
  ~LaneLease() {
    Lanes& l = g_lanes.get();
    std::lock_guard lk(l.mu);
    l.free[device_].push_back(std::move(lane_));
  }
  LaneLease(const LaneLease&) = delete;
  LaneLease& operator=(const LaneLease&) = delete;
  Lane* operator->() const { return lane_.get(); }

 private:
  int device_;
  std::unique_ptr<Lane> lane_;
};

// How a handle's requests were served, for its statistics: zero-copy bytes, and bytes sent
// through staged with the reason.
struct Tally {
  uint64_t calls = 0, bytes = 0;
};
constexpr const char* kZeroCopy = "zero-copy";
const std::string kRefused = "registration refused: ";

class PageCache final : public Mechanism {
 public:
  const char* name() const override { return "pagecache"; }
  int rank() const override { return 13; }
  bool device() const override { return true; }
  bool available(std::string* why) const override { return cu::load(why) != nullptr; }

  const Mechanism& route(const IoContext& c, size_t n, bool write) const override {
    if (write || n < static_cast<uint64_t>(kMin.num(c.settings))) return find("staged")->route(c, n, write);
    return *this;
  }

  size_t read(const IoContext& c, void* buf, size_t n, uint64_t off) const override {
    const Mechanism& staged = *find("staged");
    if (n < static_cast<uint64_t>(kMin.num(c.settings))) return staged.read(c, buf, n, off);
    // A read with a limit releases what no longer fits in it; one with 0 leaves the cache alone
    // (neither uses nor keeps registrations), so handles that keep none do not empty it.
    if (const auto limit = static_cast<size_t>(kPinLimit.num(c.settings)); limit && g_pins->bytes > limit)
      g_pins->trim(limit);
    const struct stat st = stat_of(c);
    if (!S_ISREG(st.st_mode)) return staged.read(c, buf, n, off);  // no page cache to map (a pipe, a device)
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (off >= size) return 0;
    n = static_cast<size_t>(std::min<uint64_t>(n, size - off));
    const size_t chunk = static_cast<size_t>(kChunk.num(c.settings));
    const unsigned width = std::max(1u, c.settings.threads);
    // Whole chunks per worker, the request spread evenly over the workers.
    const size_t task = static_cast<size_t>(align_up((n + width - 1) / width, chunk));
    base::Settings one = c.settings;  // a worker's staged reads run in the worker itself
    one.threads = 1;
    const IoContext inner{c.file, one, c.runner, c.target, c.resident};
    if (!read_only_registration(c.target.device)) {
      static const std::string kWhy = "the device cannot register read-only host memory "
                                      "(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED is 0)";
      base::warn_once("pagecache-readonly", "pagecache: " + kWhy + ": GPU reads run staged");
      const size_t got = staged.read(c, buf, n, off);
      count(c.file.id, kWhy, got);
      return got;
    }
    const Identity ident(st);
    auto* dev = static_cast<char*>(buf);
    return split_run(c.runner, width, off, n, task, [&](uint64_t o, size_t len, size_t bo) {
      cu::ContextGuard g(c.target);
      return worker(inner, staged, ident, dev + bo, len, o, chunk);
    });
  }

  void write(const IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    find("staged")->write(c, buf, n, off);
  }

  std::vector<Detail> details(uint64_t file_id) const override {
    std::vector<Detail> out;
    std::lock_guard lk(mu_);
    auto it = tallies_.find(file_id);
    if (it == tallies_.end()) return out;
    for (const auto& [why, t] : it->second) {
      if (why == kZeroCopy)
        out.push_back({"pagecache(zero-copy)", "range in the page cache: its pages registered and copied by DMA",
                       t.calls, t.bytes});
      else
        out.push_back({"pagecache(staged)", why, t.calls, t.bytes});
    }
    return out;
  }
  void forget(uint64_t file_id) const override {
    std::lock_guard lk(mu_);
    tallies_.erase(file_id);
  }

 private:
  // Reads [off, off+n) into dev chunk by chunk; returns the bytes read (short only at end of file).
  size_t worker(const IoContext& c, const Mechanism& staged, const Identity& ident, char* dev, size_t n, uint64_t off,
                size_t chunk) const {
    const cu::Driver& d = *cu::load();
    LaneLease lane(c.target.device);
    std::shared_ptr<Pin> busy[2];  // the registrations the copies in flight read, by event
    // Whatever happens, no copy reads a registration after it is released.
    struct Drain {
      const cu::Driver& d;
      cu::CUstream s;
      std::shared_ptr<Pin>* busy;
      ~Drain() {
        if (busy[0] || busy[1]) d.StreamSynchronize(s);
        busy[0].reset();
        busy[1].reset();
      }
    } drain{d, lane->stream, busy};
    size_t done = 0;
    std::string refused;  // once the driver refuses a pin, the rest of this worker's range runs staged
    for (unsigned k = 0; done < n; k ^= 1) {
      const uint64_t o = off + done;
      const size_t len = static_cast<size_t>(std::min<uint64_t>(n - done, align_down(o, chunk) + chunk - o));
      std::string why = refused;
      std::shared_ptr<Pin> pin = refused.empty() ? pinned(c, ident, o, len, &why) : nullptr;
      if (!pin && why.rfind(kRefused, 0) == 0) refused = why;
      size_t got = len;
      if (pin) {
        // Pinned pages stay the file's old pages if it shrank since: copy only what is still in it.
        const uint64_t now = static_cast<uint64_t>(stat_of(c).st_size);
        got = now <= o ? 0 : static_cast<size_t>(std::min<uint64_t>(len, now - o));
        if (got) {
          cu::check(d, d.MemcpyHtoDAsync(reinterpret_cast<cu::CUdeviceptr>(dev + done), pin->at(o), got, lane->stream),
                    "cuMemcpyHtoDAsync", c.file.path, static_cast<int64_t>(o));
          cu::check(d, d.EventRecord(lane->ev[k], lane->stream), "cuEventRecord");
          busy[k] = std::move(pin);
        }
        count(c.file.id, kZeroCopy, got);
      } else {
        got = staged.read(c, dev + done, len, o);
        if (!why.empty()) count(c.file.id, why, got);
      }
      // Chunk i-1's copy is done (or runs on): release its registration while chunk i's copy runs.
      if (busy[k ^ 1]) {
        cu::check(d, d.EventSynchronize(lane->ev[k ^ 1]), "cuEventSynchronize", c.file.path, static_cast<int64_t>(o));
        busy[k ^ 1].reset();
      }
      done += got;
      if (got < len) break;  // end of file
    }
    cu::check(d, d.StreamSynchronize(lane->stream), "cuStreamSynchronize", c.file.path, static_cast<int64_t>(off));
    busy[0].reset();
    busy[1].reset();
    return done;
  }

  // The registration of file bytes [o, o+len) if they are all in the page cache and the driver pins
  // them; nullptr otherwise, with *why (empty when the file shrank under the read: staged then
  // reads what is left).
  std::shared_ptr<Pin> pinned(const IoContext& c, const Identity& ident, uint64_t o, size_t len, std::string* why) const {
    const uint64_t from = align_down(o, page_size()), to = align_up(o + len, page_size());
    const size_t limit = static_cast<size_t>(kPinLimit.num(c.settings));
    PinCache& cache = g_pins.get();
    if (limit)
      if (auto hit = cache.find(c.file.path, ident, from, to - from)) return hit;
    if (c.resident && !c.resident(c.file.fd, o, len)) {
      *why = "range not wholly in the page cache";
      return nullptr;
    }
    Pin::Refusal cause = Pin::Refusal::none;
    auto pin = Pin::make(c, from, to - from, why, &cause);
    if (!pin) {
      if (static_cast<uint64_t>(stat_of(c).st_size) < o + len) {
        why->clear();  // truncated under the read: the pin of pages past the new end failed
        return nullptr;
      }
      // The advice by the cause: out of memory is the memlock limit (or the pinned memory the
      // machine has); a mapping that fails is the process's (vm.max_map_count, address space);
      // anything else is the driver refusing (no read-only registration of file pages before
      // CUDA 11.1).
      const char* advice =
          cause == Pin::Refusal::memory ? "; raise the memlock limit (ulimit -l) or lower pagecache_chunk/threads"
          : cause == Pin::Refusal::map  ? "; the file could not be mapped (vm.max_map_count, address space): lower "
                                          "pagecache_chunk/threads"
                                        : "; this driver does not allow it, so mechanism=staged does the same without "
                                          "the attempt";
      base::warn_once("pagecache-register:" + *why, "pagecache cannot pin page-cache pages of '" + c.file.path +
                                                        "' (" + *why + "): those ranges run staged" + advice);
      *why = kRefused + *why;
      return nullptr;
    }
    if (limit) cache.keep(c.file.path, ident, pin, limit);
    return pin;
  }

  void count(uint64_t file_id, const std::string& why, uint64_t bytes) const {
    std::lock_guard lk(mu_);
    Tally& t = tallies_[file_id][why];
    ++t.calls;
    t.bytes += bytes;
  }

  mutable std::mutex mu_;
  mutable std::map<uint64_t, std::map<std::string, Tally>> tallies_;  // file id -> reason -> counts
};

// The chunks it reads through staged read staged's settings (direct, buffer_size, ring_depth,
// huge_pages): the table lists them under staged.
ACCIO_REGISTER_MECHANISM(PageCache, "threads", "pagecache_min", "pagecache_chunk", "pagecache_pin_limit");
}  // namespace
}  // namespace accio::io
