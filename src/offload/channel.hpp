// accio offload: the wire format shared by the host side (queue.cpp, proc.cpp) and the worker
// (worker.cpp), both in libaccio_offload.
//
// A channel is one in-order request queue between the host and one worker thread: the proc's own
// channel (libraries, symbols, memory, synchronous calls; also the main context, the first one
// opened) and one per further context. Its memory is a
// memfd mapped by both sides (transport "shm") or a private copy on each side whose updates travel
// over a socketpair (transport "socket", the baseline the benchmark compares against):
//
//   [ChannelHeader | Slot[nslots] | arena bytes]
//
// The host writes request i into slot i % nslots (with its out-of-line data in the arena) and
// publishes it by storing head = i + 1; the worker executes requests in order, writes the response
// fields of the slot and stores done = i + 1. Both sides poll these counters, then sleep on them
// with a futex (the low 32 bits) once a configurable spin time has passed; the *_sleeping words
// tell the other side that a wake-up is needed (Dekker: store own flag, then load the counter).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>

namespace accio::offload {

inline constexpr uint32_t kMagic = 0x4f434341;  // "ACCO"
inline constexpr uint32_t kProtocol = 2;  // 2: the staging area (kStageAlloc, kStageRef, kStageRel)
inline constexpr int kInlineArgs = 20;  // arguments that fit in the slot itself
inline constexpr int kMaxArgs = 256;    // VEO_MAX_NUM_ARGS

enum Op : uint32_t {
  kCall = 1,    // addr = function, size = return type (0 u64, kDouble, kFloat); arguments inline or in the arena
  kLoadLib,     // data = path (NUL-terminated) followed by room for dlerror(); result = handle
  kUnloadLib,   // addr = handle
  kGetSym,      // addr = library handle (0: the worker program and everything it loaded); data = name
  kAlloc,       // size = bytes; result = address
  kFree,        // addr = address
  kWriteMem,    // addr = destination; data = bytes
  kReadMem,     // addr = source; data = room for the bytes
  kExit,        // the worker thread of this channel ends
  kNop,         // nothing (measures the bare round trip)
  kVhBarrier,   // veo_call_async_vh: the worker waits until the host has run the function
  kVhRelease,   // socket transport only: the frame that releases the barrier at `index`
  kCopyMem,     // addr = destination, size = bytes, vals[0] = source (both worker memory)
  kStageAlloc,  // size = bytes: the channel's staging area for one call's stack arguments
  kStageFree,   // frees the staging area
};

// Argument types. kStack* arguments carry an offset into the request's arena data; the worker
// passes a pointer to that copy (the "stack" of VEO: valid for the duration of the call).
enum ArgType : uint8_t {
  kI64 = 1, kU64, kI32, kU32, kI16, kU16, kI8, kU8, kDouble, kFloat,
  kStackIn, kStackInOut, kStackOut,
  kStageRef,  // a pointer to the staging area plus the value (stack arguments too large for the arena)
};

// Request flags.
inline constexpr uint16_t kArgsInArena = 1;  // types[nargs] (padded to 8) then vals[nargs] in the arena
inline constexpr uint16_t kDataBack = 2;     // socket transport: the response carries the data range back
inline constexpr uint16_t kDataIn = 4;       // socket transport: the request carries the data range in
inline constexpr uint16_t kDataInSlot = 8;   // shm: read/write_mem data of up to kSlotDataBytes is in
                                             // the slot (types..vals), not the arena: one cache line less
inline constexpr uint16_t kMorePieces = 16;  // not the last piece of its request: the worker keeps no
                                             // result of it for veo_prev_req_result
inline constexpr uint16_t kStageRel = 32;    // kWriteMem/kReadMem: addr is an offset into the staging area

// Response status: VEO's command states.
enum Status : uint32_t { kOk = 0, kException = 1, kError = 2, kUnfinished = 3 };

struct alignas(64) Slot {
  // request (written by the host)
  uint32_t op;
  uint16_t nargs;
  uint16_t flags;
  uint64_t addr;
  uint64_t size;
  uint64_t data_off;  // arena offset of this request's data
  uint64_t data_len;
  // response (written by the worker)
  uint32_t status;
  int32_t err;        // errno for kError, signal number for kException
  uint64_t result;
  // inline arguments
  uint8_t types[kInlineArgs];
  uint8_t pad_[4];
  uint64_t vals[kInlineArgs];
};
static_assert(sizeof(Slot) == 256);
inline constexpr size_t kSlotDataBytes = sizeof(Slot) - offsetof(Slot, types);
inline char* slot_data(Slot& s) { return reinterpret_cast<char*>(s.types); }
inline constexpr size_t kResponseOffset = offsetof(Slot, status);
inline constexpr size_t kResponseSize = offsetof(Slot, types) - offsetof(Slot, status);

struct ChannelHeader {
  uint32_t magic, protocol;
  uint32_t nslots;
  uint32_t spin_us;    // worker's spin before it sleeps (0: sleep at once); UINT32_MAX: spin forever
  uint64_t arena_off;  // from the start of the mapping
  uint64_t arena_size;
  alignas(64) std::atomic<uint64_t> head;  // published requests (host)
  alignas(64) std::atomic<uint64_t> done;  // completed requests (worker)
  alignas(64) std::atomic<uint32_t> worker_sleeping;  // the worker sleeps on head's low word
  alignas(64) std::atomic<uint32_t> host_sleeping;    // host threads sleeping on done's low word
  alignas(64) std::atomic<uint64_t> vh_released;      // barriers released by the host (index + 1)
  alignas(64) std::atomic<uint32_t> worker_vh_sleeping;
  alignas(64) std::atomic<int32_t> crash_signal;      // set by the worker's fatal-signal handler
};

inline constexpr size_t kSlotsOffset = 4096;
inline constexpr size_t kHeaderPrefix = offsetof(ChannelHeader, head);  // the fixed fields

inline size_t channel_bytes(uint32_t nslots, uint64_t arena) {
  return kSlotsOffset + size_t(nslots) * sizeof(Slot) + arena;
}

// The low 32 bits of a 64-bit counter (little-endian): the futex word the other side sleeps on.
inline uint32_t* low_word(std::atomic<uint64_t>& c) { return reinterpret_cast<uint32_t*>(&c); }

// Futexes on MAP_SHARED memory: not FUTEX_PRIVATE, the two sides are different processes.
// timeout_ns < 0: no timeout. Returns 0, or -errno (ETIMEDOUT, EAGAIN, EINTR).
int futex_wait(uint32_t* word, uint32_t expected, int64_t timeout_ns);
void futex_wake_all(uint32_t* word);

// All of n bytes over a socket, through EINTR (and, for a non-blocking socket, EAGAIN: recv_all
// waits up to a second for the rest of a frame). False at EOF or on an error. send_all is
// async-signal-safe (the worker's fatal-signal handler uses it).
bool send_all(int fd, const void* p, size_t n);
bool recv_all(int fd, void* p, size_t n);

inline void cpu_relax() { __builtin_ia32_pause(); }

inline uint64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}
inline constexpr uint64_t kSpinForever = UINT64_MAX;

// Waits until `c` exceeds `past` or stop() is true: polls for spin_ns (kSpinForever: never
// sleeps), then sleeps on c's low word in slices of slice_ns, calling stop() after each. The
// sleepers count tells the publishing side to wake it. Returns false when stopped.
template <class Stop>
inline bool wait_above(std::atomic<uint64_t>& c, uint64_t past, std::atomic<uint32_t>& sleepers,
                       uint64_t spin_ns, int64_t slice_ns, Stop&& stop) {
  if (c.load(std::memory_order_acquire) > past) return true;
  const uint64_t t0 = now_ns();
  for (unsigned k = 1;; ++k) {
    if (c.load(std::memory_order_acquire) > past) return true;
    cpu_relax();
    if ((k & 63) == 0) {
      if (stop()) return false;
      if (spin_ns != kSpinForever && now_ns() - t0 >= spin_ns) break;
    }
  }
  for (;;) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint64_t v = c.load(std::memory_order_seq_cst);
    if (v <= past) futex_wait(low_word(c), uint32_t(v), slice_ns);
    sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (c.load(std::memory_order_acquire) > past) return true;
    if (stop()) return false;
  }
}

// Stores a counter the other side waits on with wait_above, waking it if it sleeps.
inline void publish(std::atomic<uint64_t>& c, uint64_t v, std::atomic<uint32_t>& sleepers) {
  c.store(v, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst)) futex_wake_all(low_word(c));
}

// Control messages over the proc's socketpair (worker main thread).
enum Control : uint32_t {
  kCtlOpenChannel = 1,  // + the channel's fd (SCM_RIGHTS): its memfd, or its socket; reply: status
  kCtlExit,             // the worker exits
};
enum Transport : uint32_t { kShm = 0, kSocket = 1 };
struct ControlMsg {
  uint32_t kind;
  uint32_t transport;
  uint32_t channel_id;
  uint32_t stack_kib;  // worker thread stack size (0: default)
  uint64_t map_len;    // the channel's mapping (a multiple of the huge page size when it is one)
};
struct ControlReply {
  int32_t status;  // 0 or -errno
  uint32_t pad_;
  uint64_t pid;
};

// Socket transport frames. Host -> worker: the slot, then data_len bytes of data when the request
// carries data in (write, call with arena arguments, names); a frame whose op is kVhRelease releases
// the barrier at `index`. Worker -> host: the response fields, then the data range when the
// request has kDataBack.
struct SocketRequest {
  uint64_t index;
  Slot slot;
};
struct SocketResponse {
  uint64_t index;
  uint32_t status;
  int32_t err;
  uint64_t result;
};

}  // namespace accio::offload
