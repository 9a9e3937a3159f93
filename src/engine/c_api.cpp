// accio engine: the C API (include/accio/accio.h) over engine::File. The header's declarations get
// default visibility (the push below) and everything else is hidden (-fvisibility=hidden); what the
// library exports is the list in cmake/libaccio.map (docs/architecture.md, "Exports").
#pragma GCC visibility push(default)
#include "accio/accio.h"
#pragma GCC visibility pop

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "base/error.hpp"
#include "base/log.hpp"
#include "base/sys.hpp"
#include "engine/file.hpp"
#include "io/mechanism.hpp"
#include "io/odirect.hpp"
#include "mem/cuda.hpp"
#include "mem/cufile.hpp"
#include "mem/pinned.hpp"
#include "planner/profile.hpp"
#include "planner/residency.hpp"

struct accio_file {
  std::shared_ptr<accio::engine::File> f;
};
struct accio_settings {
  accio::base::Settings s;
};
struct accio_future {
  accio::engine::Future fut;
  std::atomic<accio_future_fn> fn{nullptr};  // claimed once (accio_future_on_complete)
  void* arg = nullptr;
};

namespace {
using accio::base::Error;

struct LastError {
  int errnum = 0;
  std::string op, path, message;
  int64_t offset = -1;
};
thread_local LastError t_err;

// Records the thread's last error with a message already in accio's form (an Error's what()).
int fail_as(int errnum, std::string op, std::string path, int64_t off, std::string message) {
  t_err = {errnum, std::move(op), std::move(path), std::move(message), off};
  return -errnum;
}
// Records the thread's last error in the documented form, "op 'path' at offset N: detail (errno E)"
// (base::format_error; an empty detail says strerror(errnum)).
int fail(int errnum, std::string op, std::string path, int64_t off, const std::string& detail) {
  std::string message = accio::base::format_error(errnum, op, path, off, detail);
  return fail_as(errnum, std::move(op), std::move(path), off, std::move(message));
}
int fail(const Error& e) { return fail_as(e.errnum(), e.op(), e.path(), e.offset(), e.what()); }

// Runs f, turning exceptions into a negative errno and the thread's last error.
template <class F>
auto guard(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    return fail(e);
  } catch (const std::bad_alloc&) {
    return fail(ENOMEM, "allocate", "", -1, "out of memory");
  } catch (const std::future_error& e) {
    return fail(EINVAL, "future", "", -1, e.what());
  } catch (const std::exception& e) {
    return fail(EIO, "accio", "", -1, e.what());
  }
}

int copy_out(const std::string& v, char* out, size_t len) {
  if (out && len) {
    size_t n = std::min(len - 1, v.size());
    std::memcpy(out, v.data(), n);
    out[n] = '\0';
  }
  return static_cast<int>(v.size());
}

void to_c(const accio::engine::Stats& s, accio_stats* o) {
  *o = accio_stats{};
  o->reads = s.reads;
  o->writes = s.writes;
  o->fsyncs = s.fsyncs;
  o->errors = s.errors;
  o->bytes_read = s.bytes_read;
  o->bytes_written = s.bytes_written;
  o->read_ns = s.read_ns;
  o->write_ns = s.write_ns;
  o->fsync_ns = s.fsync_ns;
  // The deprecated fixed arrays: the first ACCIO_MAX_MECHANISMS ids (accio_*_mechanism_stats has all).
  for (size_t i = 0; i < s.mechanisms.size() && i < ACCIO_MAX_MECHANISMS; ++i) {
    o->mechanism_calls[i] = s.mechanisms[i].calls;
    o->mechanism_bytes[i] = s.mechanisms[i].bytes;
  }
  o->last_mechanism = s.last_mechanism;
}

int mechanism_stats(const accio::engine::StatCounters& c, int id, uint64_t* calls, uint64_t* bytes, const char* op) {
  accio::engine::MechanismCount m;
  if (!c.mechanism(id, &m)) return fail(EINVAL, op, "", -1, "no mechanism with id " + std::to_string(id));
  if (calls) *calls = m.calls;
  if (bytes) *bytes = m.bytes;
  return 0;
}

// accio_mechanism_for: the mechanism a request would run (NULL and a last error on failure).
const char* mechanism_for(accio_file* f, const void* buf, size_t size, int64_t offset, int op) {
  if (!f) {  // said, as every other call's NULL handle: the caller would read the previous error
    fail(EINVAL, "plan", "", -1, "null argument");
    return nullptr;
  }
  if (offset < 0) {
    fail(EINVAL, "plan", f->f->ref().path, offset, "negative offset");
    return nullptr;
  }
  const int dir = op & ~ACCIO_OP_FRESH_CACHE;
  if (dir != ACCIO_OP_READ && dir != ACCIO_OP_WRITE) {
    fail(EINVAL, "plan", f->f->ref().path, offset,
         "op must be ACCIO_OP_READ or ACCIO_OP_WRITE, with ACCIO_OP_FRESH_CACHE or'ed in or not (got " + std::to_string(op) + ")");
    return nullptr;
  }
  try {
    return f->f->plan(buf, size, static_cast<uint64_t>(offset), dir == ACCIO_OP_WRITE,
                      (op & ACCIO_OP_FRESH_CACHE) != 0).name();
  } catch (const Error& e) {
    fail(e);
    return nullptr;
  }
}

#define ACCIO_CHECK(ptr, op)                                                          \
  do {                                                                                \
    if (!(ptr)) return fail(EINVAL, op, "", -1, "null argument");                    \
  } while (0)

int64_t check_off(int64_t off, const char* op, accio_file* f) {
  if (off < 0) return fail(EINVAL, op, f->f->ref().path, off, "negative offset");
  return 0;
}
}  // namespace

extern "C" {

const char* accio_version(void) { return ACCIO_VERSION_STRING; }

const char* accio_last_error(void) { return t_err.message.c_str(); }
int accio_last_errno(void) { return t_err.errnum; }
const char* accio_last_error_op(void) { return t_err.op.c_str(); }
const char* accio_last_error_path(void) { return t_err.path.c_str(); }
int64_t accio_last_error_offset(void) { return t_err.offset; }

accio_settings* accio_settings_new(void) {
  try {
    return new accio_settings{accio::base::Settings::from_env()};
  } catch (const Error& e) {
    fail(e);
  } catch (const std::bad_alloc&) {
    fail(ENOMEM, "allocate", "", -1, "out of memory");
  }
  return nullptr;
}
accio_settings* accio_settings_copy(const accio_settings* s) {
  if (!s) return nullptr;
  try {
    return new accio_settings{s->s};
  } catch (const std::bad_alloc&) {
    fail(ENOMEM, "allocate", "", -1, "out of memory");
    return nullptr;
  }
}
void accio_settings_free(accio_settings* s) { delete s; }
int accio_settings_set(accio_settings* s, const char* name, const char* value) {
  ACCIO_CHECK(s && name && value, "accio_settings_set");
  return guard([&] {
    s->s.set(name, value);
    return 0;
  });
}
int accio_settings_get(const accio_settings* s, const char* name, char* out, size_t len) {
  ACCIO_CHECK(name, "accio_settings_get");
  if (!s)  // defaults + environment, row by row: this row's value or its own error
    return guard([&] { return copy_out(accio::base::Settings::from_env(/*keep_errors=*/true).get(name), out, len); });
  return guard([&] { return copy_out(s->s.get(name), out, len); });
}
int64_t accio_parse_size(const char* text) {
  ACCIO_CHECK(text, "accio_parse_size");
  try {
    size_t v = accio::base::parse_size(text);
    if (v > size_t(INT64_MAX)) throw std::invalid_argument("too large");
    return static_cast<int64_t>(v);
  } catch (const std::exception&) {
    return fail(EINVAL, "parse size", "", -1, std::string("not a size: '") + text + "' (use e.g. 4096, 4k, 16m, 1g)");
  }
}
int accio_setting_count(void) { return static_cast<int>(accio::base::setting_count()); }
const char* accio_setting_name(int i) {
  return i >= 0 && i < accio_setting_count() ? accio::base::setting_row(size_t(i)).spec.name.c_str() : nullptr;
}
const char* accio_setting_env(int i) {
  return i >= 0 && i < accio_setting_count() ? accio::base::setting_row(size_t(i)).spec.env.c_str() : nullptr;
}
const char* accio_setting_doc(int i) {
  return i >= 0 && i < accio_setting_count() ? accio::base::setting_row(size_t(i)).spec.doc.c_str() : nullptr;
}
int accio_setting_spec_of(int i, accio_setting_spec* out) {
  ACCIO_CHECK(out, "accio_setting_spec_of");
  if (i < 0 || i >= accio_setting_count())
    return fail(EINVAL, "accio_setting_spec_of", "", -1, "no setting " + std::to_string(i));
  const accio::base::SettingSpec& s = accio::base::setting_row(size_t(i)).spec;
  *out = accio_setting_spec{s.name.c_str(), s.env.c_str(), s.doc.c_str(), s.kind.c_str(),
                            s.default_value.c_str(), s.min, s.max, s.choices.c_str()};
  return 0;
}
int accio_setting_register(const accio_setting_spec* spec) {
  ACCIO_CHECK(spec && spec->name && spec->env && spec->doc && spec->kind && spec->default_value,
              "accio_setting_register");
  return guard([&] {
    accio::base::register_setting({spec->name, spec->env, spec->doc, spec->kind, spec->default_value, spec->min,
                                   spec->max, spec->choices ? spec->choices : ""},
                                  {}, /*foreign=*/true);
    return 0;
  });
}

int accio_open(accio_file** out, const char* path, const char* mode, const accio_settings* settings) {
  if (out) *out = nullptr;  // whatever else fails: a caller that closes *out on failure closes nothing
  ACCIO_CHECK(out && path && mode, "accio_open");
  return guard([&] {
    auto s = settings ? settings->s : accio::base::Settings::from_env();
    *out = new accio_file{accio::engine::File::open(path, mode, s)};
    return 0;
  });
}

int accio_open_fd(accio_file** out, int fd, const accio_settings* settings) {
  if (out) *out = nullptr;
  ACCIO_CHECK(out, "accio_open_fd");
  return guard([&] {
    auto s = settings ? settings->s : accio::base::Settings::from_env();
    *out = new accio_file{accio::engine::File::open_fd(fd, s)};
    return 0;
  });
}

int accio_close(accio_file* f) {
  if (!f) return 0;
  int rc = guard([&] {
    f->f->close();
    return 0;
  });
  delete f;
  return rc;
}

int accio_file_fd(accio_file* f) {
  ACCIO_CHECK(f, "accio_file_fd");
  return guard([&] { return f->f->fd(); });
}

int64_t accio_pread(accio_file* f, void* buf, size_t size, int64_t offset) {
  ACCIO_CHECK(f, "pread");
  if (int64_t rc = check_off(offset, "pread", f)) return rc;
  return guard([&] { return static_cast<int64_t>(f->f->pread(buf, size, static_cast<uint64_t>(offset))); });
}
int64_t accio_pwrite(accio_file* f, const void* buf, size_t size, int64_t offset) {
  ACCIO_CHECK(f, "pwrite");
  if (int64_t rc = check_off(offset, "pwrite", f)) return rc;
  return guard([&] { return static_cast<int64_t>(f->f->pwrite(buf, size, static_cast<uint64_t>(offset))); });
}
int64_t accio_append(accio_file* f, const void* buf, size_t size) {
  ACCIO_CHECK(f, "append");
  return guard([&] { return static_cast<int64_t>(f->f->append(buf, size)); });
}
int accio_fsync(accio_file* f) {
  ACCIO_CHECK(f, "fsync");
  return guard([&] {
    f->f->fsync();
    return 0;
  });
}
int64_t accio_size(accio_file* f) {
  ACCIO_CHECK(f, "size");
  return guard([&] { return static_cast<int64_t>(f->f->size()); });
}
const char* accio_mechanism_for(accio_file* f, size_t size, int op) { return mechanism_for(f, nullptr, size, 0, op); }
const char* accio_mechanism_for_at(accio_file* f, const void* buf, size_t size, int64_t offset, int op) {
  return mechanism_for(f, buf, size, offset, op);
}
const char* accio_plan(accio_file* f, size_t size, int op) { return mechanism_for(f, nullptr, size, 0, op); }
const char* accio_plan_at(accio_file* f, const void* buf, size_t size, int64_t offset, int op) {
  return mechanism_for(f, buf, size, offset, op);
}
int64_t accio_min_accelerated(accio_file* f, int op) {
  ACCIO_CHECK(f, "accio_min_accelerated");
  const int dir = op & ~ACCIO_OP_FRESH_CACHE;  // the op its siblings take; 99 was answered as a read
  if (dir != ACCIO_OP_READ && dir != ACCIO_OP_WRITE)
    return fail(EINVAL, "accio_min_accelerated", f->f->ref().path, -1,
                "op must be ACCIO_OP_READ or ACCIO_OP_WRITE, with ACCIO_OP_FRESH_CACHE or'ed in or not (got " +
                    std::to_string(op) + ")");
  const uint64_t n = f->f->min_accelerated(dir == ACCIO_OP_WRITE);
  return n > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(n);
}

int accio_explain(accio_file* f, const void* buf, size_t size, int64_t offset, int op, char* plan, size_t plan_len,
                  char* why, size_t why_len) {
  ACCIO_CHECK(f, "accio_explain");
  if (offset < 0) return fail(EINVAL, "explain", f->f->ref().path, offset, "negative offset");
  const int dir = op & ~ACCIO_OP_FRESH_CACHE;  // as accio_mechanism_for: 99 was taken as a read
  if (dir != ACCIO_OP_READ && dir != ACCIO_OP_WRITE)
    return fail(EINVAL, "explain", f->f->ref().path, offset,
                "op must be ACCIO_OP_READ or ACCIO_OP_WRITE, with ACCIO_OP_FRESH_CACHE or'ed in or not (got " +
                    std::to_string(op) + ")");
  return guard([&] {
    const auto e = f->f->explain(buf, size, static_cast<uint64_t>(offset), dir == ACCIO_OP_WRITE,
                                 (op & ACCIO_OP_FRESH_CACHE) != 0);
    copy_out(e.plan, plan, plan_len);
    copy_out(e.why, why, why_len);
    return 0;
  });
}
int accio_file_plans(accio_file* f, accio_plan_stat* out, int max) {
  ACCIO_CHECK(f, "accio_file_plans");
  return guard([&] {
    const auto all = f->f->plan_stats();
    for (int i = 0; i < max && out && i < static_cast<int>(all.size()); ++i) {
      copy_out(all[i].plan, out[i].plan, sizeof out[i].plan);
      copy_out(all[i].why, out[i].why, sizeof out[i].why);
      out[i].calls = all[i].calls;
      out[i].bytes = all[i].bytes;
    }
    return static_cast<int>(all.size());
  });
}
int accio_profile_key_of(const char* path, accio_profile_key* out) {
  ACCIO_CHECK(path && out, "accio_profile_key_of");
  return guard([&] {
    const accio::planner::FsKey k = accio::planner::fs_key(std::string(path));
    *out = accio_profile_key{};
    copy_out(k.filesystem, out->filesystem, sizeof out->filesystem);
    copy_out(k.device, out->device, sizeof out->device);
    copy_out(k.kernel, out->kernel, sizeof out->kernel);
    copy_out(k.version, out->version, sizeof out->version);
    copy_out(accio::planner::profile_dir() + "/" + k.file_name(), out->file, sizeof out->file);
    return 0;
  });
}
int64_t accio_prefetch_window(int fd, const accio_settings* settings) {
  return guard([&]() -> int64_t {
    const auto s = settings ? settings->s : accio::base::Settings::from_env();
    const uint64_t w = accio::planner::profile_for(fd, s.profile)->prefetch_window;
    return w > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(w);
  });
}
int accio_file_stats(accio_file* f, accio_stats* out) {
  ACCIO_CHECK(f && out, "accio_file_stats");
  to_c(f->f->stats(), out);
  return 0;
}
int accio_file_mechanism_stats(accio_file* f, int id, uint64_t* calls, uint64_t* bytes) {
  ACCIO_CHECK(f, "accio_file_mechanism_stats");
  return mechanism_stats(f->f->counters(), id, calls, bytes, "accio_file_mechanism_stats");
}
int accio_file_setting(accio_file* f, const char* name, char* out, size_t len) {
  ACCIO_CHECK(f && name, "accio_file_setting");
  return guard([&] { return copy_out(f->f->settings().get(name), out, len); });
}

static int start_async(accio_file* f, void* buf, size_t size, int64_t offset, bool write, accio_future** out) {
  if (out) *out = nullptr;
  ACCIO_CHECK(f && out, write ? "pwrite_async" : "pread_async");
  if (int64_t rc = check_off(offset, write ? "pwrite_async" : "pread_async", f)) return static_cast<int>(rc);
  return guard([&] {
    auto fut = std::make_unique<accio_future>();
    fut->fut = write ? f->f->pwrite_async(buf, size, static_cast<uint64_t>(offset))
                     : f->f->pread_async(buf, size, static_cast<uint64_t>(offset));
    *out = fut.release();
    return 0;
  });
}
int accio_pread_async(accio_file* f, void* buf, size_t size, int64_t offset, accio_future** out) {
  return start_async(f, buf, size, offset, false, out);
}
int accio_pwrite_async(accio_file* f, const void* buf, size_t size, int64_t offset, accio_future** out) {
  return start_async(f, const_cast<void*>(buf), size, offset, true, out);
}
int accio_submit(accio_file* f, int op, const accio_request* reqs, size_t n, accio_future** futures) {
  if (futures)  // none, unless all
    for (size_t i = 0; i < n; ++i) futures[i] = nullptr;
  ACCIO_CHECK(f && (reqs || n == 0) && (futures || n == 0), "accio_submit");
  if (op != ACCIO_OP_READ && op != ACCIO_OP_WRITE) return fail(EINVAL, "accio_submit", "", -1, "op must be ACCIO_OP_READ or ACCIO_OP_WRITE");
  std::vector<accio::engine::Request> rs;
  for (size_t i = 0; i < n; ++i) {
    if (reqs[i].offset < 0) return fail(EINVAL, "accio_submit", f->f->ref().path, reqs[i].offset, "negative offset");
    rs.push_back({reqs[i].buf, reqs[i].size, static_cast<uint64_t>(reqs[i].offset)});
  }
  // All or none: the wrappers first, so that nothing can fail once the requests are under way.
  std::vector<std::unique_ptr<accio_future>> held;
  return guard([&] {
    held.reserve(n);
    for (size_t i = 0; i < n; ++i) held.push_back(std::make_unique<accio_future>());
    auto futs = f->f->submit(rs, op == ACCIO_OP_WRITE);
    for (size_t i = 0; i < n; ++i) {
      held[i]->fut = std::move(futs[i]);
      futures[i] = held[i].release();
    }
    return 0;
  });
}
int64_t accio_future_wait(accio_future* fut) {
  ACCIO_CHECK(fut, "accio_future_wait");
  return guard([&] { return static_cast<int64_t>(fut->fut.get()); });
}
int accio_future_ready(accio_future* fut, int64_t timeout_ns) {
  if (!fut) return fail(EINVAL, "accio_future_ready", "", -1, "null future");
  return fut->fut.wait_for(std::chrono::nanoseconds(timeout_ns > 0 ? timeout_ns : 0));
}
// The engine's callback for a C one: after fn returns, fut may be freed (fn may free it), so nothing
// here touches it then.
static void call_c_callback(void* p) {
  auto* fut = static_cast<accio_future*>(p);
  fut->fn.load(std::memory_order_relaxed)(fut, fut->fut.result(), fut->arg);
}
int accio_future_on_complete(accio_future* fut, accio_future_fn fn, void* arg) {
  ACCIO_CHECK(fut && fn, "accio_future_on_complete");
  accio_future_fn none = nullptr;
  if (!fut->fn.compare_exchange_strong(none, fn))
    return fail(EBUSY, "accio_future_on_complete", "", -1, "the future has a completion callback already");
  fut->arg = arg;  // before the engine can run the callback: on_complete below publishes both
  fut->fut.on_complete(&call_c_callback, fut);
  return 0;
}
void accio_future_free(accio_future* fut) {
  if (!fut) return;
  fut->fut.finish();
  delete fut;
}

int accio_global_stats(accio_stats* out) {
  ACCIO_CHECK(out, "accio_global_stats");
  to_c(accio::engine::global_stats().snapshot(), out);
  return 0;
}
int accio_global_mechanism_stats(int id, uint64_t* calls, uint64_t* bytes) {
  return mechanism_stats(accio::engine::global_stats(), id, calls, bytes, "accio_global_mechanism_stats");
}
void accio_global_stats_reset(void) { accio::engine::global_stats().reset(); }
int accio_mechanism_count(void) { return static_cast<int>(accio::io::all().size()); }
const char* accio_mechanism_name(int id) {
  return id >= 0 && id < accio_mechanism_count() ? accio::io::all()[id]->name() : nullptr;
}
int accio_mechanism_available(int id, char* why, size_t len) {
  if (id < 0 || id >= accio_mechanism_count()) return fail(EINVAL, "accio_mechanism_available", "", -1, "no such mechanism");
  std::string w;
  bool ok = accio::io::all()[id]->available(&w);
  copy_out(w, why, len);
  return ok ? 1 : 0;
}
const char* accio_mechanism_knob(int id, int k) {
  if (id < 0 || id >= accio_mechanism_count() || k < 0) return nullptr;
  const auto& knobs = accio::io::all()[id]->knobs;
  return size_t(k) < knobs.size() ? knobs[size_t(k)].c_str() : nullptr;
}
int64_t accio_plan_describe(const char* plan_json, char* label, size_t len, int* needs_alignment) {
  ACCIO_CHECK(plan_json, "accio_plan_describe");
  return guard([&]() -> int64_t {
    const accio::planner::PlanSpec p = accio::planner::PlanSpec::parse(plan_json, "plan");
    if (needs_alignment) *needs_alignment = p.needs_alignment() ? 1 : 0;
    return copy_out(p.label(), label, len);
  });
}
int64_t accio_profile_describe(const char* text, const char* source, char* out, size_t len) {
  return guard([&]() -> int64_t {
    // Without text: the built-in model of the device under `source` (a file or directory), or of
    // a device that is not rotational.
    const auto p = text ? accio::planner::Profile::parse(text, source ? source : "profile")
                        : accio::planner::Profile::builtin_model(source && accio::planner::rotational(std::string(source)));
    const std::string doc = p->to_json();
    copy_out(doc, out, len);
    return static_cast<int64_t>(doc.size());
  });
}

int accio_probe(const char* feature, const char* path, char* detail, size_t len) {
  ACCIO_CHECK(feature, "accio_probe");
  std::string f = feature;
  if (f == "io_uring") return accio_mechanism_available(accio::io::find("uring")->id, detail, len);
  if (f == "cachestat") {
    bool ok = accio::base::sys::cachestat_available();
    copy_out(ok ? "cachestat(2) present" : "cachestat(2) missing (Linux < 6.5)", detail, len);
    return ok;
  }
  if (f == "mincore") {
    copy_out("mmap + mincore(2)", detail, len);
    return 1;
  }
  if (f == "slow_misaligned_copy") {
    const bool slow = accio::io::slow_misaligned_copy();
    copy_out(slow ? "the kernel's copy into a buffer misaligned against the page cache is slow here: realign=auto "
                    "reads such buffers through an aligned one"
                  : "the kernel's copy is as fast into misaligned buffers here, or the CPU lacks the FSRM string "
                    "copy that is slow with them: realign=auto leaves them",
             detail, len);
    return slow;
  }
  if (f == "o_direct") {
    if (!path) return fail(EINVAL, "accio_probe", "", -1, "o_direct needs a path");
    struct stat st;
    if (stat(path, &st) != 0) return fail(errno, "stat", path, -1, "");
    const accio::io::DirectOpen d =
        accio::io::open_direct(path, S_ISDIR(st.st_mode) ? O_TMPFILE | O_RDWR : O_RDONLY);
    if (d.fd < 0) {
      copy_out(d.refused, detail, len);
      return 0;
    }
    ::close(d.fd);
    std::string text = "supported";
    if (d.reported_off_align)
      text += "; offset alignment " + std::to_string(d.reported_off_align) + " B, memory alignment " +
              std::to_string(d.reported_mem_align) + " B";
    copy_out(text, detail, len);
    return 1;
  }
  return fail(EINVAL, "accio_probe", "", -1, std::string("unknown feature '") + feature + "'");
}

int accio_residency(accio_file* f, int64_t offset, int64_t len, int64_t* cached, int64_t* dirty, int64_t* total) {
  ACCIO_CHECK(f, "accio_residency");
  if (offset < 0 || len < 0) return fail(EINVAL, "residency", f->f->ref().path, offset, "negative offset or length");
  accio::planner::Residency r;
  if (!accio::planner::residency(f->f->ref().fd, static_cast<uint64_t>(offset), static_cast<uint64_t>(len), &r))
    return fail(errno, "residency", f->f->ref().path, offset, "");
  if (cached) *cached = static_cast<int64_t>(r.cached);
  if (dirty) *dirty = static_cast<int64_t>(r.dirty);
  if (total) *total = static_cast<int64_t>(r.total);
  return 0;
}

size_t accio_warnings(char* out, size_t len) {
  std::string all;
  for (auto& w : accio::base::warnings()) all += w + "\n";
  copy_out(all, out, len);
  return all.size();
}

void accio_set_log_callback(accio_log_fn fn, void* user) { accio::base::set_sink(fn, user); }

int accio_mechanism_device(int id) {
  if (id < 0 || id >= static_cast<int>(accio::io::all().size()))
    return fail(EINVAL, "accio_mechanism_device", "", -1, "no mechanism " + std::to_string(id));
  return accio::io::all()[static_cast<size_t>(id)]->device();
}

int accio_cuda_available(char* why, size_t len) {
  std::string w;
  if (accio::mem::cuda::load(&w)) {
    copy_out("", why, len);
    return 1;
  }
  copy_out(w, why, len);
  return 0;
}

int accio_gpu_count(void) {
  const accio::mem::cuda::Driver* d = accio::mem::cuda::load();
  return d ? d->devices : 0;
}

int accio_cuda_current_device(void) { return accio::mem::cuda::current_device(); }

int accio_gpu_info_get(int ordinal, accio_gpu_info* out) {
  ACCIO_CHECK(out, "accio_gpu_info_get");
  return guard([&] {
    for (const auto& g : accio::mem::cuda::gpus()) {
      if (g.ordinal != ordinal) continue;
      *out = accio_gpu_info{};
      out->ordinal = g.ordinal;
      copy_out(g.name, out->name, sizeof out->name);
      copy_out(g.pci_bus_id, out->pci_bus_id, sizeof out->pci_bus_id);
      out->memory = g.memory;
      out->cc_major = g.cc_major;
      out->cc_minor = g.cc_minor;
      out->multiprocessors = g.multiprocessors;
      out->copy_engines = g.copy_engines;
      out->numa_node = g.numa_node;
      copy_out(g.link, out->link, sizeof out->link);
      copy_out(g.cpus, out->cpus, sizeof out->cpus);
      return 0;
    }
    return fail(ENODEV, "accio_gpu_info_get", "", -1, "no GPU cuda:" + std::to_string(ordinal));
  });
}

int accio_mem_kind(const void* p, int* device) {
  const accio::mem::cuda::Target t = accio::mem::cuda::classify(p, true);
  if (device) *device = t.kind == accio::mem::cuda::MemKind::host ? -1 : t.device;
  return static_cast<int>(t.kind);
}

int accio_device_alloc(int device, size_t size, int managed, void** out) {
  if (out) *out = nullptr;  // never a stale pointer for a caller that did not check the result
  ACCIO_CHECK(out, "accio_device_alloc");
  return guard([&] {
    *out = accio::mem::cuda::alloc(device, size, managed != 0);
    return 0;
  });
}

int accio_device_free(void* p) {
  return guard([&] {  // -EINVAL for memory accio_device_alloc did not give
    accio::mem::cuda::free(p);
    return 0;
  });
}

int accio_host_alloc(size_t size, void** out, int* how) {
  ACCIO_CHECK(out, "accio_host_alloc");
  *out = nullptr;
  return guard([&] {
    accio::mem::Pin pin;
    *out = accio::mem::host_alloc(size, &pin);
    if (how) *how = static_cast<int>(pin);
    return 0;
  });
}

int accio_host_free(void* p) {
  if (!p) return 0;
  return accio::mem::host_free(p) ? 0 : fail(EINVAL, "accio_host_free", "", -1, "not memory from accio_host_alloc");
}

int accio_device_copy(void* dst, const void* src, size_t size) {
  if ((!dst || !src) && size) return fail(EFAULT, "accio_device_copy", "", -1, "null pointer");
  return guard([&] {
    accio::mem::cuda::copy(dst, src, size);
    return 0;
  });
}

int accio_cuda_stream_sync(int device, uintptr_t stream) {
  if (stream == 0)
    return fail(EINVAL, "accio_cuda_stream_sync", "", -1,
                "stream 0 is ambiguous (refused by the CAI v3 and DLPack specifications): pass 1 for the legacy "
                "default stream, 2 for the per-thread default stream, or a CUstream handle");
  return guard([&] {
    namespace cu = accio::mem::cuda;
    std::string why;
    const cu::Driver* d = cu::load(&why);
    if (!d) throw Error(ENODEV, "cuStreamSynchronize", "", accio::base::kNoOffset, why);
    cu::ContextGuard g(device);
    cu::check(*d, d->StreamSynchronize(reinterpret_cast<cu::CUstream>(stream)), "cuStreamSynchronize");
    return 0;
  });
}

int accio_cuda_with_device(int device, void (*fn)(void* arg), void* arg) {
  ACCIO_CHECK(fn, "accio_cuda_with_device");
  return guard([&] {
    namespace cu = accio::mem::cuda;
    cu::require_device(device, "accio_cuda_with_device");
    // The calling thread's own context where it is on that GPU already (a framework that made the
    // array's GPU current, or a context of the program's own); else the GPU's primary context, if
    // some code in the process made it active: accio makes none.
    std::optional<cu::ContextGuard> g;
    if (cu::current_device() != device && cu::primary_active(device)) g.emplace(device);
    try {
      fn(arg);
    } catch (...) {  // a C++ callback that throws: not through this C function
      throw Error(ECANCELED, "accio_cuda_with_device", "", accio::base::kNoOffset, "the callback threw an exception");
    }
    return 0;
  });
}

int accio_gds_info(char* detail, size_t len) {
  std::string why;
  const bool ok = accio::mem::cufile::load(&why) != nullptr;
  copy_out(ok ? accio::mem::cufile::describe() : why, detail, len);
  return ok;
}

int accio_gds_mode(accio_file* f, char* detail, size_t len) {
  ACCIO_CHECK(f, "accio_gds_mode");
  return guard([&] {
    namespace cf = accio::mem::cufile;
    namespace cu = accio::mem::cuda;
    std::string why;
    if (!cf::load(&why)) {
      copy_out(why, detail, len);
      return static_cast<int>(cf::Mode::compat);
    }
    // The gds mechanism's own answer (it holds the file's cuFile handle), in the context of the GPU
    // the program uses (not one of its own on GPU 0).
    cu::ContextGuard g(cu::ContextGuard::HostWork{});
    cu::Target t;
    t.kind = cu::MemKind::device;
    t.device = 0;
    cu::load()->CtxGetCurrent(&t.ctx);
    const accio::io::Mechanism::Way w = f->f->way(*accio::io::find("gds"), t);
    copy_out(w.why, detail, len);
    return w.code;
  });
}

int accio_cuda_copy_seconds(int device, int to_device, size_t bytes, size_t chunk, int threads, double* seconds) {
  ACCIO_CHECK(seconds, "accio_cuda_copy_seconds");
  if (threads <= 0) return fail(EINVAL, "accio_cuda_copy_seconds", "", -1, "threads must be positive");
  return guard([&] {
    *seconds = accio::mem::cuda::measure_copy(device, to_device != 0, bytes, chunk, static_cast<unsigned>(threads));
    return 0;
  });
}

int accio_set_last_error(int errnum, const char* op, const char* path, const char* detail) {
  if (errnum <= 0 || !op) return -EINVAL;
  return fail(errnum, op, path ? path : "", -1, detail ? detail : "");
}

int accio_log(int level, const char* key, const char* message) {
  using accio::base::Level;
  if (!key || !message || (level != ACCIO_LOG_INFO && level != ACCIO_LOG_WARNING && level != ACCIO_LOG_ERROR))
    return -EINVAL;
  accio::base::log(static_cast<Level>(level), key, message);
  return 0;
}

}  // extern "C"
