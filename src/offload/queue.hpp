// accio offload: the host side of the channel protocol (channel.hpp). A Channel is one in-order
// queue to a worker thread: requests get ids in submission order and are encoded into slots and the
// arena (put), or, while the ring or the arena has no room, wait in order in a host-side queue
// (submission never blocks, as AVEO's unbounded request queue); results are collected
// ("harvested") in order by whichever host thread waits, peeks, synchronizes or needs room, and by
// the queue's progress thread while requests wait on the host; a dead worker fails what is pending.
// Also the C handle veo_args (the arguments a call encodes). The worker process behind a queue is
// proc.hpp's business.
#pragma once
#include <pthread.h>

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "accio/ve_offload.h"
#include "offload/channel.hpp"

struct veo_args {
  struct Arg {
    uint8_t type = 0;
    uint64_t val = 0;
    char* buf = nullptr;
    size_t len = 0;
    char* back = nullptr;  // OUT/INOUT: where the result goes (nullptr: buf); set in a queue's own copy
  };
  std::vector<Arg> a;
  uint8_t ret = 0;  // 0: u64, kDouble, kFloat
};

namespace accio::offload {

struct Proc;

inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
inline bool is_stack(uint8_t t) { return t >= kStackIn && t <= kStackOut; }

// AVEO's limit on a call's stack arguments, all together: 63 MB, its VE stack being 64 MB
// (veo_args_set_stack's comment in AVEO's veo_api.cpp). Calls whose stack arguments do not fit the
// arena are staged in a worker allocation of their own, up to this size.
inline constexpr uint64_t kMaxStackArgs = 63ull << 20;

// One stack argument, a copy back into the caller's buffer, one result.
struct Copy {
  void* dst;
  uint64_t off;  // arena offset
  size_t len;
};

struct Shadow {  // host-only bookkeeping of one slot
  uint64_t reqid = 0;
  uint64_t arena_end = 0;  // arena counter once this slot's data is released
  bool last = false;       // the last piece of its request
  bool value = false;      // its result is the request's (a staged call's call piece)
  bool post = false;       // a success needs the host's work: data to copy back, an allocation to record
  Copy copy{};             // a read_mem piece
  std::vector<Copy> copies;  // OUT/INOUT stack arguments
  uint64_t (*vh)(void*) = nullptr;
  void* vh_arg = nullptr;
  int vh_state = 0;  // 0 pending, 1 running, 2 released
};

struct Result {
  uint64_t value = 0;
  uint32_t status = kUnfinished;
  int32_t err = 0;
  bool final = false;
  bool failed = false;
  bool has_value = false;  // value came from a piece before the last (a staged call)
  bool picked = false;
  std::string message;
};

// What one request piece asks for.
struct Piece {
  uint32_t op = kNop;
  uint64_t addr = 0, size = 0;
  const struct ::veo_args* args = nullptr;
  const void* in = nullptr;  // copied into the arena
  size_t in_len = 0;
  void* out = nullptr;       // the arena range is copied back here when harvested
  size_t data_len = 0;       // arena bytes (>= in_len)
  uint64_t (*vh)(void*) = nullptr;
  union {
    void* vh_arg = nullptr;  // kVhBarrier: the host function's argument
    uint64_t src;            // kCopyMem: the source address
  };
  uint16_t slot_flags = 0;   // kStageRel: addr is an offset into the worker's staging area
  bool value = false;        // a staged call's call piece: its result is the request's, and the
                             // worker keeps it for veo_prev_req_result
  bool after_value = false;  // a piece after that one: the worker keeps no result of it
};

// A piece that found no room in the ring or the arena: it waits on the host, in order, and moves
// into the ring as room frees. What it points to stays valid: a call's arguments and IN data and a
// name are copied (keep owns the copies), a transfer's host buffer is the caller's (AVEO's rule: it
// stays valid until the request completes).
struct Pending {
  Piece p;
  uint64_t reqid;
  bool last;
  std::shared_ptr<void> keep;
};

class Channel {
 public:
  Proc* proc = nullptr;
  uint32_t id = 0;
  uint32_t transport = kShm;
  char* base = nullptr;
  size_t map_len = 0;
  ChannelHeader* h = nullptr;
  Slot* slots = nullptr;
  char* arena = nullptr;
  uint32_t nslots = 0;
  uint64_t arena_size = 0;
  int sock = -1;  // socket transport
  std::mutex mu;

  ~Channel();

  uint64_t new_request() {
    results.emplace_back();
    return next_reqid++;
  }
  // Forgets a request that could not be (fully) submitted; its published pieces still complete,
  // those waiting on the host go.
  void drop(uint64_t reqid) {
    if (npending_) forget_pending(reqid);
    Result& r = results[reqid - res_base];
    r.final = r.picked = true;
    pop_picked();
  }
  // Creates the queue's memory for `transport` (the header filled in) and the descriptor the
  // worker gets for it: the memfd (shm) or the worker's end of a socketpair. False (reported) on
  // failure. spin_us < 0: the worker never sleeps.
  bool map(uint32_t transport, uint32_t nslots, uint64_t arena, int64_t spin_us, int* worker_fd);
  // Queues one piece: publishes it when the ring and the arena have room and nothing waits on the
  // host, else keeps it on the host (never waits for long: put_slow). False (reported) when it cannot be queued.
  // keep: owns what p points to, if anything (kept while the piece waits on the host).
  // A call whose stack arguments do not fit the arena is staged (put_staged).
  bool put(std::unique_lock<std::mutex>& lk, const Piece& p, uint64_t reqid, bool last,
           const std::shared_ptr<void>* keep = nullptr);
  // Waits for (block) or peeks at a request; fills *ret and returns its VEO_COMMAND_* state.
  int result(uint64_t reqid, uint64_t* ret, bool block, std::string* message = nullptr);
  // Queues one request of one piece: its id, or VEO_REQUEST_ID_INVALID (reported) when it could
  // not be published. Takes mu.
  uint64_t submit(const Piece& p);
  // One request, waited for: its VEO_COMMAND_* state; *message gets the reason of an error.
  int call(const Piece& p, uint64_t* result, std::string* message);
  // Submits a transfer as arena-sized pieces (the worker copies piece k while we fill piece k+1);
  // *reqid is its request. 0, or -1 with the error reported. Never waits: pieces without room wait
  // on the host; those of a write read `host` when they move into the ring, unless copy_source
  // (veo_async_write_mem: the caller may reuse its buffer at once), which copies them now.
  int transfer(bool write, uint64_t addr, void* host, size_t n, uint64_t* reqid, bool copy_source = false);
  // The caller stops waiting for a request it submitted with a buffer of its own (a synchronous
  // transfer that failed or timed out): its pieces still on the host are dropped and those in the
  // ring copy nothing back, so the buffer is not touched after the caller returns.
  void abandon(uint64_t reqid);
  // Waits until every request submitted before has completed (or failed with a dead worker).
  // False (reported, errno ETIMEDOUT) when ACCIO_OFFLOAD_TIMEOUT_MS runs out first.
  bool sync();
  // veo_req_block_begin/end: until the matching end, only this thread submits here (nested
  // blocks of the same thread count). block_end by a thread that holds no block: false.
  void block_begin();
  bool block_end();
  // Takes mu for a submission: waits while another thread holds a block.
  std::unique_lock<std::mutex> lock_to_submit() {
    std::unique_lock<std::mutex> lk(mu);
    if (block_depth_) [[unlikely]] wait_unblocked(lk);
    return lk;
  }
  // The worker is gone: wakes the host threads that sleep on this queue.
  void wake_all();
  // Whether the calling thread is this queue's host-function runner (a host function closing its
  // own context or proc would wait for itself).
  bool on_vh_runner() const;
  // Ends the host-function runner (vh_loop, also the progress thread), if one was started. The destructor calls it too; the
  // proc calls it first where it holds the proc's lock (the runner takes it after the queue's).
  void stop_vh_runner();
  std::string name() const { return id == 0 ? std::string("the main context") : "context " + std::to_string(id); }

 private:
  // Every submission touches these (block_depth_ too): together, on the cache lines after mu.
  uint64_t head = 0, harvested = 0;       // published / collected requests
  uint64_t a_head = 0, a_tail = 0;        // arena allocation counters (bytes, monotonic)
  std::vector<Shadow> shadow;
  uint64_t next_reqid = 0, res_base = 0;  // request ids; results[reqid - res_base]
  unsigned block_depth_ = 0;
  std::deque<Result> results;
  size_t npending_ = 0;                   // pending_.size(), on this cache line: checked on every submission
  std::condition_variable block_cv_;
  pthread_t block_owner_{};
  std::deque<Pending> pending_;           // pieces waiting on the host for room, in order
  void wait_unblocked(std::unique_lock<std::mutex>& lk);

  // veo_call_async_vh's host functions run on a thread of the queue's own (AVEO's progress thread,
  // API 16), started at the first one: as soon as every request before one has completed, whether
  // or not a host thread waits on the queue, and never inside another thread's wait, peek or
  // submission. It is also the queue's progress thread while pieces wait on the host (started at
  // the first that does): it moves them into the ring as room frees. It sleeps while neither is
  // queued, and stops when the queue is freed.
  std::thread* vh_runner_ = nullptr;
  pid_t vh_runner_pid_ = 0;       // a forked child has no such thread: it neither joins nor frees it
  uint64_t vh_queued_ = 0;        // host functions published and not yet run
  bool vh_stop_ = false;
  std::condition_variable vh_cv_;
  void vh_loop();
  static constexpr int kDrainPollUs = 100;  // vh_loop's poll while only pieces wait for room,
  static constexpr int kDrainPollMaxUs = 5000;  // doubled while nothing completes, up to this
  bool host_harvested_ = false;             // a host thread collected since vh_loop last looked
  bool start_runner();  // starts vh_loop's thread if it is not running; false (reported) if it cannot

  // Whether the ring has a slot and the arena len bytes (*start: where); an empty queue starts its
  // arena over, so any len up to the arena's size fits it.
  bool room(size_t len, uint64_t* start) {
    if (head == harvested && a_tail == a_head) {  // nothing in flight: the arena starts over
      a_head = a_tail = align_up(a_head, arena_size);
    }
    uint64_t st = align_up(a_head, 64);
    if (len && st % arena_size + len > arena_size) st += arena_size - st % arena_size;
    *start = st;
    return head - harvested < nslots && (len == 0 || st + len - a_tail <= arena_size);
  }
  // Writes one piece into the slot at head (room checked) and publishes it.
  bool publish_piece(std::unique_lock<std::mutex>& lk, const Piece& p, uint64_t reqid, bool last, uint64_t start,
                     size_t len, bool in_slot);
  [[gnu::always_inline]] inline bool publish_piece_inline(std::unique_lock<std::mutex>& lk, const Piece& p, uint64_t reqid,
                                                          bool last, uint64_t start, size_t len, bool in_slot);
  // put without room at once: waits briefly for a worker that makes progress, else defers.
  bool put_slow(std::unique_lock<std::mutex>& lk, const Piece& p, uint64_t reqid, bool last, size_t len,
                bool in_slot, const std::shared_ptr<void>* keep);
  // How long put_slow waits for room while the worker completes requests (shm).
  static constexpr uint64_t kRoomWaitNs = 50000;
  uint64_t stalled_at_ = UINT64_MAX;  // harvested when a wait for room last saw no progress
  uint64_t call_wait_until_ = 0;      // the current call's deadline for waiting for room (0: not begun)
  bool progress_within(uint64_t until) const;
  // Keeps a piece on the host (copying what it points to that the caller may free).
  bool defer(const Piece& p, uint64_t reqid, bool last, const std::shared_ptr<void>* keep);
  // Moves waiting pieces into the ring while there is room.
  void drain(std::unique_lock<std::mutex>& lk);
  // A call whose arguments do not fit the arena: its stack arguments are staged in a worker
  // allocation of the call's own (kStageAlloc, kWriteMem pieces, the call, kReadMem pieces, kStageFree).
  bool put_staged(std::unique_lock<std::mutex>& lk, const Piece& p, uint64_t reqid);
  // Every argument of a call is set (reported if not).
  bool args_set(const struct ::veo_args* a) const;

  bool dead() const;
  uint64_t deadline() const;
  // Collects completed requests in order and moves waiting pieces into the freed room; run_vh (the
  // runner only): and runs the host function at the head once every request before it has completed.
  void harvest(std::unique_lock<std::mutex>& lk, bool run_vh = false);
  bool send_frame(std::unique_lock<std::mutex>& lk, const void* p, size_t n);
  void flush_out();
  std::string outbuf_;  // socket transport: frame bytes the socket did not take yet (from out_off_)
  size_t out_off_ = 0;
  void pop_picked() {
    while (!results.empty() && results.front().picked) {
      results.pop_front();
      ++res_base;
    }
  }
  void finish(uint64_t i);
  void fail_pending();
  void fail_request(uint64_t reqid, int err, const std::string& why);
  void forget_pending(uint64_t reqid);  // drops the request's pieces that wait on the host
  bool wait_progress(std::unique_lock<std::mutex>& lk, uint64_t deadline);
  bool encode_call(const Piece& p, Slot& s, Shadow& sh, char* data);
  size_t call_bytes(const struct ::veo_args* a) const;
};

}  // namespace accio::offload
