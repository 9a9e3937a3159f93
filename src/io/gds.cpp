// accio mechanism `gds`: GPUDirect Storage through cuFile. One cuFile handle per open file (the
// O_DIRECT descriptor where there is one), registered on first use and dropped at close. Device
// buffers are registered with cuFile once per allocation (keyed by the driver's buffer id, so a
// reused address is noticed) when the direct path is possible; in compatibility mode registration
// buys nothing and is skipped. Requests are split over `threads` like `parallel`. Which path cuFile
// takes is reported by explain() and `accio info` (cufile::mode_for), never assumed.
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "base/error.hpp"
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

class Gds final : public Mechanism {
 public:
  const char* name() const override { return "gds"; }
  int rank() const override { return 12; }
  bool device() const override { return true; }
  bool available(std::string* why) const override { return cf::load(why) != nullptr; }

  const Mechanism& resolve(const IoContext& c) const override {
    std::string why;
    if (cf::load(&why) || !cu::load()) return *this;  // without libcuda there is no GPU buffer to serve
    base::warn_once("gds-fallback", "mechanism gds cannot run (" + why + "): GPU buffers run staged");
    return find("staged")->resolve(c);
  }

  // cuFile takes device memory only; the engine sends managed memory to staged.
  bool serves(const cu::Target& t) const override { return t.kind == cu::MemKind::device; }

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
    if (const cf::Api* a = cf::load()) a->HandleDeregister(it->second);
    handles_.erase(it);
  }

 private:
  void* handle(const IoContext& c, const cf::Api& a) const {
    std::lock_guard lk(mu_);
    void*& h = handles_[c.file.id];
    if (!h) {
      cf::Descr d{};
      d.type = 1;  // CU_FILE_HANDLE_TYPE_OPAQUE_FD
      d.handle.fd = c.file.direct_fd >= 0 ? c.file.direct_fd : c.file.fd;
      if (cf::Error e = a.HandleRegister(&h, &d); e.err != 0) {
        handles_.erase(c.file.id);
        throw Error(EIO, "cuFileHandleRegister", c.file.path, base::kNoOffset, cf::error_text(e));
      }
    }
    return h;
  }

  // The base and offset to pass cuFile for buf: the registered allocation when there is one.
  std::pair<char*, size_t> registered(char* buf, const cf::Api& a) const {
    if (!a.nvfs) return {buf, 0};
    const cu::Driver& d = *cu::load();
    int attrs[] = {cu::kPtrBufferId, cu::kPtrRangeStart, cu::kPtrRangeSize};
    unsigned long long buf_id = 0;
    void* base = nullptr;
    size_t size = 0;
    void* data[] = {&buf_id, &base, &size};
    if (d.PointerGetAttributes(3, attrs, data, reinterpret_cast<cu::CUdeviceptr>(buf)) != cu::kSuccess || !base)
      return {buf, 0};
    std::lock_guard lk(mu_);
    auto it = regs_.find(buf_id);
    if (it == regs_.end()) {
      if (regs_.size() >= kMaxRegistrations) {
        auto old = regs_.find(order_.front());
        if (old->second) a.BufDeregister(old->second);
        regs_.erase(old);
        order_.pop_front();
      }
      void* reg = base;
      if (cf::Error e = a.BufRegister(base, size, 0); e.err != 0) {
        reg = nullptr;
        base::warn_once("gds-bufregister", "cuFileBufRegister of a " + base::format_size(size) + " buffer failed (" +
                                               cf::error_text(e) + "): cuFile uses its bounce buffers for it");
      }
      it = regs_.emplace(buf_id, reg).first;
      order_.push_back(buf_id);
    }
    if (!it->second) return {buf, 0};
    return {static_cast<char*>(it->second), static_cast<size_t>(buf - static_cast<char*>(it->second))};
  }

  size_t run(const IoContext& c, char* buf, size_t n, uint64_t off, bool write) const {
    const cf::Api& a = *cf::load();
    cu::ContextGuard g(c.target);
    void* fh = handle(c, a);
    const auto [base, boff] = registered(buf, a);
    return split_run(c.runner, c.settings.threads, off, n, task_bytes(c.settings, n, c.settings.threads, 4096),
                     [&, base = base, boff = boff](uint64_t o, size_t len, size_t bo) {
                       cu::ContextGuard tg(c.target);
                       size_t done = 0;
                       while (done < len) {
                         const off_t fo = static_cast<off_t>(o + done), po = static_cast<off_t>(boff + bo + done);
                         const ssize_t r = write ? a.Write(fh, base, len - done, fo, po) : a.Read(fh, base, len - done, fo, po);
                         if (r == -1 && errno == EINTR) continue;
                         if (r < 0) {
                           const char* op = write ? "cuFileWrite" : "cuFileRead";
                           if (r == -1) throw Error(errno, op, c.file.path, fo);
                           // cuFile returns -errno for system errors and -CUfileOpError (5000+) for its own.
                           if (-r < 5000) throw Error(static_cast<int>(-r), op, c.file.path, fo);
                           throw Error(EIO, op, c.file.path, fo, cf::error_text({static_cast<int>(-r), 0}));
                         }
                         if (r == 0) break;
                         done += static_cast<size_t>(r);
                       }
                       return done;
                     });
  }

  mutable std::mutex mu_;
  mutable std::map<uint64_t, void*> handles_;  // file id -> cuFile handle
  mutable std::map<unsigned long long, void*> regs_;  // driver buffer id -> registered base (null: refused)
  mutable std::deque<unsigned long long> order_;
};

ACCIO_REGISTER_MECHANISM(Gds);
}  // namespace
}  // namespace accio::io
