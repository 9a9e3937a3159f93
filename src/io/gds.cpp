// accio mechanism `gds`: GPUDirect Storage through cuFile. One cuFile handle per open file (the
// O_DIRECT descriptor where cuFile takes it, else the buffered one), registered on first use and
// dropped at close; a file cuFile refuses to register runs staged (resolve, one warning). Device
// buffers are registered with cuFile once per allocation (keyed by the driver's buffer id, so a
// reused address is noticed) when the direct path is possible; in compatibility mode registration
// buys nothing and is skipped. Requests are split over `threads` like `parallel`; submit()'s small
// requests go to cuFile as batches on the direct path (batch_limit, batch). Which path cuFile takes
// is reported by explain() and `accio info` (cufile::mode_for), never assumed.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/fork.hpp"
#include "base/log.hpp"
#include "io/mechanism.hpp"
#include "mem/cuda.hpp"
#include "mem/cufile.hpp"

namespace accio::io {
namespace {
namespace cu = mem::cuda;
namespace cf = mem::cufile;
using base::Error;

constexpr size_t kMaxRegistrations = 64;
constexpr size_t kMaxRange = size_t{8} << 30;          // see Gds::registered
constexpr size_t kDefaultPinnedBudget = size_t{32} << 30;  // cufile.json's max_device_pinned_mem_size_kb
// A buffer cuFile refused to register is asked again after this long: pinning fails while others
// hold the GPU's pinned memory (GPU_MEMORY_PINNING_FAILED), which they may give back. One failed
// cuFileBufRegister a second costs little beside the requests that run meanwhile (it is made under
// mu_, which every request into device memory takes, as the first registration is).
constexpr std::chrono::steady_clock::duration kRetryRefused = std::chrono::seconds(1);

// cuFile batch entries in flight in the process, at most kBatchEntries (cufile.json's default
// posix_pool_slab_count, 64 of 1 MiB). Where cuFile serves a batch in compatibility mode, each entry
// holds one of those POSIX bounce buffers from its submission until its status is reaped, and a
// submission that needs more than are free waits in cuFileBatchIOSubmit for ever (ai-dynamo/nixl#2070).
// accio batches only where the direct path looks possible, but cuFile may still fall back there (on a
// device that is not NVMe, say): so batches hold at most kBatchEntries entries, and a batch waits here
// until its entries fit beside those of the batches other threads have in flight.
constexpr unsigned kBatchEntries = 64;
struct BatchEntries {
  std::mutex mu;
  std::condition_variable cv;
  unsigned used = 0;
};
base::PerProcess<BatchEntries> g_batch_entries;
class BatchEntriesLease {
 public:
  explicit BatchEntriesLease(unsigned n) : e_(g_batch_entries.get()), n_(n) {
    std::unique_lock lk(e_.mu);
    e_.cv.wait(lk, [&] { return e_.used + n_ <= kBatchEntries; });
    e_.used += n_;
  }
  ~BatchEntriesLease() {
    {
      std::lock_guard lk(e_.mu);
      e_.used -= n_;
    }
    e_.cv.notify_all();
  }
  BatchEntriesLease(const BatchEntriesLease&) = delete;
  BatchEntriesLease& operator=(const BatchEntriesLease&) = delete;

 private:
  BatchEntries& e_;
  unsigned n_;
};

class Gds final : public Mechanism {
 public:
  const char* name() const override { return "gds"; }
  int rank() const override { return 12; }
  bool device() const override { return true; }
  // Whether libcufile is there; its driver is opened by the first GPU request (resolve), in that
  // buffer's context, so that listing the mechanisms makes no CUDA context.
  bool available(std::string* why) const override { return cf::library(why) != nullptr; }

  // Where cuFile cannot serve this file (not loaded; or, for a request into GPU memory, it refuses
  // to register the file), staged runs instead, after one warning that says why.
  const Mechanism& resolve(const IoContext& c) const override {
    std::string why;
    const cf::Api* a = nullptr;
    if (c.target.on_device()) {
      cu::ContextGuard g(c.target);  // cuFile's driver is opened in the first GPU buffer's context
      a = cf::load(&why);
    } else {
      a = cf::library(&why);
    }
    if (a) {
      if (!c.target.on_device()) return *this;
      why = refusal(c);
      if (why.empty()) return *this;
      // One warning per cause (the cuFile errors and hints), naming the first file refused for it.
      base::warn_once("gds-register:" + why, "mechanism gds cannot serve '" + c.file.path + "' (" + why +
                                                 "): its GPU requests, and those of other files cuFile refuses "
                                                 "for this reason, run staged");
      return find("staged")->resolve(c);
    }
    if (!cu::load()) return *this;  // without libcuda there is no GPU buffer to serve
    base::warn_once("gds-fallback", "mechanism gds cannot run (" + why + "): GPU buffers run staged");
    return find("staged")->resolve(c);
  }

  std::string refusal(const IoContext& c) const override {
    std::string why;
    return file_handle(c, &why) ? std::string() : why;
  }
  Way way(const IoContext& c) const override {
    cf::Mode m;
    file_handle(c, nullptr, nullptr, &m);
    return {static_cast<int>(m.path), m.why};
  }

  // cuFile takes device memory only; the engine sends managed memory to staged.
  bool serves(const cu::Target& t) const override { return t.kind == cu::MemKind::device && !t.own_context; }

  size_t read(const IoContext& c, void* buf, size_t n, uint64_t off) const override {
    return run(c, static_cast<char*>(buf), n, off, false);
  }
  void write(const IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    const size_t got = run(c, static_cast<char*>(const_cast<void*>(buf)), n, off, true);
    if (got != n) throw Error(EIO, "cuFileWrite", c.file.path, static_cast<int64_t>(off + got), "write made no progress");
  }

  void forget(uint64_t file_id) const override {
    std::lock_guard lk(mu_);
    auto it = handles_.find(file_id);
    if (it == handles_.end()) return;
    if (it->second.handle)
      if (const cf::Api* a = cf::load()) a->HandleDeregister(it->second.handle);
    handles_.erase(it);
  }

  // One cuFile batch for requests gds would run as one cuFile call each (not split over threads),
  // up to the driver's batch size, kBatchEntries and a direct I/O's usual maximum, on the direct
  // path only. In compatibility mode each batch entry would hold one of cuFile's POSIX bounce buffers
  // (see kBatchEntries; KvikIO turns its batch API off there, rapidsai/kvikio#239); one cuFile call
  // per request holds one at a time. The file's handle is registered already: the engine asked
  // for_target (resolve) before it asks this.
  size_t batch_limit(const IoContext& c, size_t n) const override {
    const cf::Api* a = cf::load();
    if (!a || !a->max_batch || n == 0 || n > kMaxBatchRequest) return 0;
    if (n > task_bytes(c.settings, n, c.settings.threads, 4096)) return 0;
    bool direct = false;
    std::string why;
    if (!file_handle(c, &why, &direct) || !direct) return 0;  // refused (runs staged), or compatibility mode
    return std::min<size_t>(a->max_batch, kBatchEntries);
  }

  void batch(const IoContext& c, BatchItem* items, size_t count, bool write) const override {
    const cf::Api& a = *cf::load();
    cu::ContextGuard g(c.target);
    void* fh = nullptr;
    bool direct = false;
    std::vector<cf::IoParams> io(count);
    Leases leases{*this, {}};
    try {
      cu::wait_legacy_stream(c.file.path);  // see run()
      fh = handle(c, &direct);
      for (size_t i = 0; i < count; ++i) {
        const auto [base, boff, lease_id] = leases.take(static_cast<char*>(items[i].buf), items[i].n, a, direct);
        io[i].mode = 1;  // CUFILE_BATCH
        io[i].u.batch = {base, static_cast<off_t>(items[i].off), static_cast<off_t>(boff), items[i].n};
        io[i].fh = fh;
        io[i].opcode = write ? 1 : 0;
        io[i].cookie = &items[i];
      }
    } catch (...) {
      for (size_t i = 0; i < count; ++i) items[i].error = std::current_exception();
      return;
    }
    std::string why;
    {
      BatchEntriesLease entries(static_cast<unsigned>(count));  // until the batch is reaped and destroyed
      why = submit_batch(c, a, io.data(), static_cast<unsigned>(count), write);
    }
    if (!why.empty()) {
      base::warn_once("gds-batch", "cuFile batch I/O failed (" + why + "): those requests run one cuFile call each");
      for (size_t i = 0; i < count; ++i) finish(c, a, io[i], items[i], write);
      return;
    }
    // What the batch left undone, ordinary calls finish: a request that failed (retried whole:
    // reads and writes of the same bytes at the same offset are idempotent, and cuFile may refuse
    // in a batch what it takes alone), a read short of end of file, a short write.
    for (size_t i = 0; i < count; ++i) {
      BatchItem& it = items[i];
      if (it.error) {
        std::string what;
        try {
          std::rethrow_exception(it.error);
        } catch (const std::exception& e) {
          what = e.what();
        }
        base::warn_once("gds-batch-request",
                        "a cuFile batch request failed (" + what + "): such requests are retried with one cuFile call each");
        it.error = nullptr;
        it.done = 0;
        finish(c, a, io[i], it, write);
      } else if (it.done < it.n && (write || it.done > 0)) {
        finish(c, a, io[i], it, write);
      }
    }
  }

 private:
  // The file's cuFile handle, registered on first use (in the request's context); nullptr and *why
  // when cuFile refuses the file, which is remembered until it closes.
  // *direct (when asked): whether cuFile can take the direct path for the file, so that buffers
  // are worth registering: mode_for says it is possible, and cuFile took the O_DIRECT descriptor.
  // *mode (when asked): the path cuFile serves the file by, and why (Mechanism::way).
  void* file_handle(const IoContext& c, std::string* why, bool* direct = nullptr, cf::Mode* mode = nullptr) const {
    std::lock_guard lk(mu_);
    auto [it, fresh] = handles_.try_emplace(c.file.id);
    Handle& h = it->second;
    if (fresh) {
      cu::ContextGuard g(c.target);
      const cf::Mode fs = cf::mode_for(c.file.fd >= 0 ? c.file.fd : c.file.direct_fd);
      const bool possible = fs.path == cf::Mode::direct;
      bool took_direct = false;
      std::string said;
      h.handle = cf::register_file(c.file.direct_fd, c.file.fd, possible, &took_direct, &said);
      if (!h.handle) {
        h.refused = said;
        h.mode = {cf::Mode::refused, "cuFile refuses this file (" + said + "): gds requests for it run staged"};
      } else if (possible && !took_direct) {
        h.mode = {cf::Mode::compat,
                  "compat mode: the direct path is possible here, but cuFile registered only the file's buffered "
                  "descriptor (" +
                      (c.file.direct_fd < 0 ? "there is no O_DIRECT one: " + c.file.no_direct
                                            : "cuFileHandleRegister: " + said + "; cuFile's own log says more") +
                      ")"};
      } else {
        h.mode = fs;
      }
    }
    if (!h.handle && why) *why = h.refused;
    if (direct) *direct = h.mode.path == cf::Mode::direct;
    if (mode) *mode = h.mode;
    return h.handle;
  }
  // The file's cuFile handle, or an error when cuFile refuses the file.
  void* handle(const IoContext& c, bool* direct) const {
    std::string why;
    void* h = file_handle(c, &why, direct);
    if (!h) throw Error(EIO, "cuFileHandleRegister", c.file.path, base::kNoOffset, why);
    return h;
  }

  // The base and offset to pass cuFile for a request of n bytes at buf: the registered allocation
  // when there is one (a lease: the registration is not dropped while the request runs), else buf
  // itself (cuFile moves it through its own bounce buffers). What is registered is the allocation
  // the driver reports around buf, kept for later requests into it (a caching allocator's segment),
  // within cuFile's pinned-memory budget (max_device_pinned_mem_size, 32 GiB by default) and only
  // up to kMaxRange: memory mapped into a VMM reservation (PyTorch's expandable segments) reports
  // the whole reservation, about the GPU's memory and mostly not mapped, which is not pinned. A
  // refusal is kept for kRetryRefused. KvikIO registers nothing unless asked.
  struct Lease {
    char* base;
    size_t off;
    unsigned long long id;  // 0: nothing leased
  };
  Lease registered(char* buf, size_t n, const cf::Api& a, bool direct) const {
    if (!direct) return {buf, 0, 0};  // compatibility mode: cuFile copies through its bounce buffers anyway
    const cu::Driver& d = *cu::load();
    int attrs[] = {cu::kPtrBufferId, cu::kPtrRangeStart, cu::kPtrRangeSize};
    unsigned long long buf_id = 0;
    void* base = nullptr;
    size_t size = 0;
    void* data[] = {&buf_id, &base, &size};
    if (d.PointerGetAttributes(3, attrs, data, reinterpret_cast<cu::CUdeviceptr>(buf)) != cu::kSuccess || !base ||
        !buf_id)
      return {buf, 0, 0};
    std::lock_guard lk(mu_);
    auto it = regs_.find(buf_id);
    if (it != regs_.end() && !it->second.base && std::chrono::steady_clock::now() - it->second.refused_at >= kRetryRefused) {
      order_.erase(std::find(order_.begin(), order_.end(), buf_id));
      regs_.erase(it);
      it = regs_.end();
    }
    if (it == regs_.end()) {
      if (size > kMaxRange) {
        base::warn_once("gds-bufregister-range",
                        "cuFile buffers not registered: the driver reports a " + base::format_size(size) +
                            " allocation around a " + base::format_size(n) + " request, more than accio registers (" +
                            base::format_size(kMaxRange) +
                            "; memory mapped into a VMM reservation, such as PyTorch's expandable segments, "
                            "reports the whole reservation); cuFile uses its bounce buffers for such requests");
        return {buf, 0, 0};
      }
      const size_t budget = a.props_ok && a.props.max_device_pinned_mem_size
                                ? size_t{a.props.max_device_pinned_mem_size} << 10
                                : kDefaultPinnedBudget;
      // A registration overlapping this allocation under another buffer id is of memory freed since
      // (a caching allocator that released a segment): dropped, since cuFile knows registrations by
      // their addresses. (One in use would mean a request into freed memory: this request then runs
      // unregistered.)
      const auto lo = reinterpret_cast<uintptr_t>(base), hi = lo + size;
      for (auto o = order_.begin(); o != order_.end();) {
        Reg& r = regs_.at(*o);
        const auto rlo = reinterpret_cast<uintptr_t>(r.base), rhi = rlo + r.size;
        if (!r.base || rhi <= lo || hi <= rlo) {
          ++o;
          continue;
        }
        if (r.users) return {buf, 0, 0};
        a.BufDeregister(r.base);
        pinned_ -= r.size;
        regs_.erase(*o);
        o = order_.erase(o);
      }
      // Room by the count and the budget: the oldest registrations no request holds are dropped.
      for (auto o = order_.begin(); o != order_.end() && (regs_.size() >= kMaxRegistrations || pinned_ + size > budget);) {
        Reg& r = regs_.at(*o);
        if (r.users) {
          ++o;
          continue;
        }
        if (r.base) {
          a.BufDeregister(r.base);
          pinned_ -= r.size;
        }
        regs_.erase(*o);
        o = order_.erase(o);
      }
      if (regs_.size() >= kMaxRegistrations || pinned_ + size > budget) return {buf, 0, 0};  // all in use: not now
      Reg r{base, size, 0, {}};
      if (cf::Error e = a.BufRegister(base, size, 0); e.err != 0) {
        r = {};
        r.refused_at = std::chrono::steady_clock::now();
        base::warn_once("gds-bufregister", "cuFileBufRegister of a " + base::format_size(size) + " buffer failed (" +
                                               cf::error_text(e) + "): cuFile uses its bounce buffers for it");
      }
      pinned_ += r.size;
      it = regs_.emplace(buf_id, r).first;
      order_.push_back(buf_id);
    }
    if (!it->second.base) return {buf, 0, 0};
    ++it->second.users;
    return {static_cast<char*>(it->second.base), static_cast<size_t>(buf - static_cast<char*>(it->second.base)), buf_id};
  }
  void release(const Lease& l) const {
    if (!l.id) return;
    std::lock_guard lk(mu_);
    if (auto it = regs_.find(l.id); it != regs_.end() && it->second.users) --it->second.users;
  }
  // Takes leases (registered()) and releases them when it goes out of scope.
  struct Leases {
    const Gds& g;
    std::vector<Lease> held;
    ~Leases() {
      for (const Lease& l : held) g.release(l);
    }
    Lease take(char* buf, size_t n, const cf::Api& a, bool direct) {
      held.reserve(held.size() + 1);  // before the lease is taken: the push cannot throw after it
      return held.emplace_back(g.registered(buf, n, a, direct));
    }
  };

  size_t run(const IoContext& c, char* buf, size_t n, uint64_t off, bool write) const {
    const cf::Api& a = *cf::load();
    cu::ContextGuard g(c.target);
    // cuFile's DMA is ordered with no CUDA stream: wait for what the caller queued on the legacy
    // default stream (a kernel still writing or reading the buffer), as staged's copies do.
    cu::wait_legacy_stream(c.file.path, static_cast<int64_t>(off));
    bool direct;
    void* fh = handle(c, &direct);
    Leases leases{*this, {}};
    const auto [base, boff, lease_id] = leases.take(buf, n, a, direct);
    return split_run(c.runner, c.settings.threads, off, n, task_bytes(c.settings, n, c.settings.threads, 4096),
                     [&, base = base, boff = boff](uint64_t o, size_t len, size_t bo) {
                       cu::ContextGuard tg(c.target);
                       return call(c, a, fh, base, boff + bo, o, len, write);
                     });
  }

  // cuFileRead/cuFileWrite of len bytes at file offset off, from base + boff, until done or end of
  // file; returns the bytes moved.
  static size_t call(const IoContext& c, const cf::Api& a, void* fh, char* base, size_t boff, uint64_t off,
                     size_t len, bool write) {
    const char* op = write ? "cuFileWrite" : "cuFileRead";
    size_t done = 0;
    for (int interrupted = 0; done < len;) {
      const off_t fo = static_cast<off_t>(off + done), po = static_cast<off_t>(boff + done);
      errno = 0;
      const ssize_t r = write ? a.Write(fh, base, len - done, fo, po) : a.Read(fh, base, len - done, fo, po);
      // -1 with errno for a system error, or -errno itself (KvikIO reads it so): an interrupted call
      // either way is made again, up to kMaxInterrupted times in a row (a signal storm that leaves
      // no call time to finish is an error, not a hang).
      if ((r == -EINTR || (r == -1 && errno == EINTR)) && ++interrupted < kMaxInterrupted) continue;
      if (r == -1 && errno == 0) throw Error(EIO, op, c.file.path, fo, "cuFile returned -1 without errno");
      if (r < 0) throw io_error(c, op, r == -1 ? -errno : r, fo);
      interrupted = 0;
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }

  // cuFile returns -errno for system errors and -CUfileOpError (5000+) for its own.
  static Error io_error(const IoContext& c, const char* op, ssize_t r, off_t off) {
    if (-r < 5000) return Error(static_cast<int>(-r), op, c.file.path, off);
    return Error(EIO, op, c.file.path, off, cf::error_text({static_cast<int>(-r), 0}));
  }

  static constexpr size_t kMaxBatchRequest = 16u << 20;  // cuFile's default max_direct_io_size_kb
  static constexpr int kMaxInterrupted = 64;              // cuFile calls interrupted in a row

  // Submits the batch and waits for every event; fills each item (the cookie) with its result.
  // Returns why the batch could not run (nothing was transferred then), or "" once all completed.
  static std::string submit_batch(const IoContext& c, const cf::Api& a, cf::IoParams* io, unsigned count, bool write) {
    void* b = nullptr;
    if (cf::Error e = a.BatchSetUp(&b, count); e.err != 0) return "cuFileBatchIOSetUp: " + cf::error_text(e);
    if (cf::Error e = a.BatchSubmit(b, count, io, 0); e.err != 0) {
      a.BatchDestroy(b);
      return "cuFileBatchIOSubmit: " + cf::error_text(e);
    }
    const char* op = write ? "cuFileBatchIO write" : "cuFileBatchIO read";
    std::vector<cf::IoEvent> ev(count);
    std::vector<bool> reaped(count);
    for (unsigned left = count; left;) {
      unsigned nr = left;
      timespec timeout{1, 0};
      if (cf::Error e = a.BatchGetStatus(b, left, &nr, ev.data(), &timeout); e.err != 0) {
        // The requests still in flight may yet move bytes: cancel them before the batch goes, and
        // fail the ones without a result.
        if (a.BatchCancel) a.BatchCancel(b);
        a.BatchDestroy(b);
        for (unsigned i = 0; i < count; ++i)
          if (!reaped[i])
            static_cast<BatchItem*>(io[i].cookie)->error = std::make_exception_ptr(
                Error(EIO, op, c.file.path, io[i].u.batch.file_offset, "cuFileBatchIOGetStatus: " + cf::error_text(e)));
        return "";
      }
      for (unsigned k = 0; k < nr; ++k) {
        auto* item = static_cast<BatchItem*>(ev[k].cookie);
        const ssize_t r = static_cast<ssize_t>(ev[k].ret);  // bytes, or -errno / -CUfileOpError
        if (ev[k].status == cf::kStatusComplete && r >= 0) {
          item->done = static_cast<size_t>(r);
        } else {
          char what[32];
          snprintf(what, sizeof what, "request status 0x%x", static_cast<unsigned>(ev[k].status));
          item->error = std::make_exception_ptr(r < 0 ? io_error(c, op, r, static_cast<off_t>(item->off))
                                                      : Error(EIO, op, c.file.path, static_cast<int64_t>(item->off), what));
        }
        reaped[static_cast<size_t>(item - static_cast<BatchItem*>(io[0].cookie))] = true;  // cookies: &items[i]
      }
      left -= nr;
    }
    a.BatchDestroy(b);
    return "";
  }

  // Moves what the batch left of item (all of it when the batch could not run) with cuFile calls.
  static void finish(const IoContext& c, const cf::Api& a, const cf::IoParams& p, BatchItem& item, bool write) {
    try {
      char* base = static_cast<char*>(p.u.batch.devPtr_base);
      const size_t boff = static_cast<size_t>(p.u.batch.devPtr_offset);
      item.done += call(c, a, p.fh, base, boff + item.done, item.off + item.done, item.n - item.done, write);
      if (write && item.done != item.n)
        throw Error(EIO, "cuFileWrite", c.file.path, static_cast<int64_t>(item.off + item.done), "write made no progress");
    } catch (...) {
      item.error = std::current_exception();
    }
  }

  mutable std::mutex mu_;
  struct Handle {
    void* handle = nullptr;
    std::string refused;  // why cuFile refused the file (handle null)
    // The path cuFile serves the file by, and why: direct only where mode_for says it is possible
    // and cuFile took the O_DIRECT descriptor.
    cf::Mode mode;
  };
  mutable std::map<uint64_t, Handle> handles_;  // file id -> cuFile handle
  struct Reg {
    void* base = nullptr;  // null: cuFile refused it
    size_t size = 0;
    unsigned users = 0;    // requests running with it (leases): not dropped meanwhile
    std::chrono::steady_clock::time_point refused_at{};  // when cuFile refused it (base null)
  };
  mutable std::map<unsigned long long, Reg> regs_;  // driver buffer id -> registration
  mutable std::deque<unsigned long long> order_;    // oldest first
  mutable size_t pinned_ = 0;                       // bytes registered
};

ACCIO_REGISTER_MECHANISM(Gds, "threads", "task_size");
}  // namespace
}  // namespace accio::io
