// The host's worker threads (parallel.h).
#include "backend/host/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "capstep/ir.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CAPSTEP_PAUSE() _mm_pause()
#else
#define CAPSTEP_PAUSE() std::this_thread::yield()
#endif

namespace capstep::host {
namespace {

// The thread's floating-point mode: x86's MXCSR less its sticky exception
// flags (bits 0-5), i.e. rounding, exception masks, DAZ and FTZ; setting it
// keeps the thread's flags. Elsewhere nothing to carry.
#if defined(__x86_64__) || defined(__i386__)
constexpr unsigned kDazFtz = 0x8040;  // MXCSR bit 6 (denormals are zero) and bit 15 (flush to zero)
constexpr unsigned kFlags = 0x3f;
unsigned float_mode() { return _mm_getcsr() & ~kFlags; }
void set_float_mode(unsigned m) {
  const unsigned now = _mm_getcsr();
  const unsigned want = (m & ~kFlags) | (now & kFlags);
  if (now != want) _mm_setcsr(want);
}
#else
constexpr unsigned kDazFtz = 0;
unsigned float_mode() { return 0; }
void set_float_mode(unsigned) {}
#endif

// This thread in float mode m for a scope, then in its own again.
struct FloatModeScope {
  explicit FloatModeScope(unsigned m) : own(float_mode()) { set_float_mode(m); }
  ~FloatModeScope() { set_float_mode(own); }
  FloatModeScope(const FloatModeScope&) = delete;
  FloatModeScope& operator=(const FloatModeScope&) = delete;
  const unsigned own;
};

struct ThreadCount {
  int n = 1;
  std::string line;
};

ThreadCount count_threads() {
  ThreadCount t;
  int cpus = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus < 1) cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (cpus < 1) cpus = 1;
  t.n = std::min(cpus, kDefaultMaxThreads);
  t.line = std::to_string(t.n) + (t.n == 1 ? " thread" : " threads") + " (of " + std::to_string(cpus) +
           (cpus == 1 ? " CPU" : " CPUs") + " this process may run on)";
  return t;
}

// The claim word: generation in the high 32 bits, the next part in the low 32.
// A new task first stores (gen, kLocked), then its fields, then (gen, 0): a
// worker still holding an older generation's word cannot claim (its compare-
// exchange fails), and one that reads the fields while they are written sees
// kLocked, which is no part.
constexpr uint64_t kLocked = 0xffffffffu;
// How long a worker spins after its last part before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(300);

class Pool {
 public:
  explicit Pool(int threads) : threads_(threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  int threads() const { return threads_; }

  // Background work (parallel.h, Background): false when it has to run on
  // the caller alone (one thread, or another Background under way).
  bool bg_begin(void (*f)(void*, int), void* ctx, unsigned mode) {
    if (workers_.empty() || bg_busy_.test_and_set(std::memory_order_acquire)) return false;
    const uint64_t gen = (bg_word_.load(std::memory_order_relaxed) >> 32) + 1;
    bg_word_.store(gen << 32 | kLocked, std::memory_order_seq_cst);
    bg_fn_.store(f, std::memory_order_relaxed);
    bg_ctx_.store(ctx, std::memory_order_relaxed);
    bg_released_.store(0, std::memory_order_relaxed);
    bg_done_.store(0, std::memory_order_relaxed);
    bg_error_ = nullptr;
    bg_mode_.store(mode, std::memory_order_relaxed);
    bg_word_.store(gen << 32, std::memory_order_seq_cst);
    return true;
  }
  int bg_done() const { return bg_done_.load(std::memory_order_acquire); }
  void bg_release(int n) { bg_released_.store(n, std::memory_order_release); }
  // Claims and runs one released chunk; false when none is left to claim.
  bool bg_try() {
    uint64_t w = bg_word_.load(std::memory_order_acquire);
    const uint64_t i = w & 0xffffffffu;
    if (i == kLocked || i >= static_cast<uint64_t>(bg_released_.load(std::memory_order_acquire))) return false;
    void (*f)(void*, int) = bg_fn_.load(std::memory_order_relaxed);
    void* ctx = bg_ctx_.load(std::memory_order_relaxed);
    const unsigned mode = bg_mode_.load(std::memory_order_relaxed);
    // A word of another generation (or a chunk another thread took) fails
    // the exchange: fn_, ctx_ and the mode read above are then never used.
    if (!bg_word_.compare_exchange_strong(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
    const FloatModeScope in(mode);  // the float mode of the thread that made the Background
    run_one(f, ctx, static_cast<int>(i), bg_error_, bg_done_);
    return true;
  }
  // Every chunk of [0, n) released; runs them on the caller and the workers
  // (as parallel parts, which wakes sleeping workers) and returns when all
  // are done; rethrows the first exception of a chunk.
  void bg_finish(int n) {
    bg_release(n);
    run(threads_, [](void* self, int) { while (static_cast<Pool*>(self)->bg_try()) {} }, this);
    while (bg_done_.load(std::memory_order_acquire) < n) CAPSTEP_PAUSE();
    std::exception_ptr e = bg_error_;
    bg_error_ = nullptr;
    bg_busy_.clear(std::memory_order_release);
    if (e) std::rethrow_exception(e);
  }

  ~Pool() {
    stop_.store(true);
    wake_.fetch_add(1);
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void run(int parts, void (*f)(void*, int), void* ctx) {
    if (parts <= 1 || workers_.empty() || busy_.test_and_set(std::memory_order_acquire)) {
      for (int i = 0; i < parts; ++i) f(ctx, i);
      return;
    }
    const uint64_t gen = (word_.load(std::memory_order_relaxed) >> 32) + 1;
    word_.store(gen << 32 | kLocked, std::memory_order_seq_cst);
    fn_.store(f, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    parts_.store(parts, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    mode_.store(float_mode(), std::memory_order_relaxed);
    word_.store(gen << 32, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      wake_.fetch_add(1, std::memory_order_seq_cst);
      wake_.notify_all();
    }
    claim(gen, f, ctx, parts);
    // Waiting for the workers' parts: background chunks fill the wait.
    while (done_.load(std::memory_order_acquire) < parts)
      if (!bg_try()) CAPSTEP_PAUSE();
    std::exception_ptr e = error_;
    error_ = nullptr;
    busy_.clear(std::memory_order_release);
    if (e) std::rethrow_exception(e);
  }

 private:
  // f(ctx, i), keeping the first exception in `error`, then one more `done`.
  void run_one(void (*f)(void*, int), void* ctx, int i, std::exception_ptr& error, std::atomic<int>& done) {
    try {
      f(ctx, i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error) error = std::current_exception();
    }
    done.fetch_add(1, std::memory_order_acq_rel);
  }

  // Claims and runs parts of generation gen until none is left.
  void claim(uint64_t gen, void (*f)(void*, int), void* ctx, int parts) {
    uint64_t w = word_.load(std::memory_order_acquire);
    for (;;) {
      if ((w >> 32) != gen) return;
      const uint64_t i = w & 0xffffffffu;
      if (i >= static_cast<uint64_t>(parts)) return;
      if (!word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      run_one(f, ctx, static_cast<int>(i), error_, done_);
      w = word_.load(std::memory_order_acquire);
    }
  }

  void work() {
    uint64_t seen = 0;  // the generation before the first task (not the word now: a task may already be out)
    auto last = std::chrono::steady_clock::now();
    unsigned spins = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      const uint64_t w = word_.load(std::memory_order_acquire);
      const uint64_t gen = w >> 32;
      if (gen != seen && (w & 0xffffffffu) != kLocked) {
        seen = gen;
        // the caller's float mode, so that a part's bits do not depend on the thread
        set_float_mode(mode_.load(std::memory_order_relaxed));
        claim(gen, fn_.load(std::memory_order_relaxed), ctx_.load(std::memory_order_relaxed),
              parts_.load(std::memory_order_relaxed));
        last = std::chrono::steady_clock::now();
        spins = 0;
        continue;
      }
      if (bg_try()) {  // background chunks while no parts are out
        last = std::chrono::steady_clock::now();
        spins = 0;
        continue;
      }
      CAPSTEP_PAUSE();
      if (++spins % 1024 != 0) continue;
      if (std::chrono::steady_clock::now() - last < kSpin) continue;
      // Sleep until a run wakes us (see run: sleepers_ before the word's check).
      const uint32_t ticket = wake_.load(std::memory_order_seq_cst);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if ((word_.load(std::memory_order_seq_cst) >> 32) == seen && !stop_.load())
        wake_.wait(ticket, std::memory_order_seq_cst);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      last = std::chrono::steady_clock::now();
    }
  }

  int threads_ = 1;
  std::vector<std::thread> workers_;
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  std::atomic<uint64_t> word_{0};
  std::atomic<void (*)(void*, int)> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int> parts_{0};
  std::atomic<unsigned> mode_{0};  // the caller's float mode, for its parts
  std::atomic<int> done_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<uint32_t> wake_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  // Background (its own cache lines: the workers read them while they spin).
  std::atomic_flag bg_busy_ = ATOMIC_FLAG_INIT;
  alignas(64) std::atomic<uint64_t> bg_word_{kLocked};  // generation << 32 | next chunk, as word_
  std::atomic<int> bg_released_{0};
  alignas(64) std::atomic<int> bg_done_{0};
  std::atomic<void (*)(void*, int)> bg_fn_{nullptr};
  std::atomic<void*> bg_ctx_{nullptr};
  std::atomic<unsigned> bg_mode_{0};  // the float mode of the thread that began it
  std::exception_ptr bg_error_;
};

struct Global {
  std::mutex mutex;
  ThreadCount count;
  std::unique_ptr<Pool> pool;
  std::atomic<Pool*> current{nullptr};
};

Global& global() {
  static Global g;
  return g;
}

Pool& pool() {
  Global& g = global();
  if (Pool* p = g.current.load(std::memory_order_acquire)) return *p;
  std::lock_guard<std::mutex> lock(g.mutex);
  if (!g.pool) {
    g.count = count_threads();
    g.pool = std::make_unique<Pool>(g.count.n);
    g.current.store(g.pool.get(), std::memory_order_release);
  }
  return *g.pool;
}

}  // namespace

int host_threads() { return pool().threads(); }

std::string host_threads_line() {
  pool();
  std::lock_guard<std::mutex> lock(global().mutex);
  return global().count.line;
}

void set_host_threads(int n) {
  if (n < 1 || n > 64) throw Error("set_host_threads: " + std::to_string(n) + " threads; expected 1 to 64");
  pool();
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.current.store(nullptr, std::memory_order_release);
  g.pool.reset();
  g.count.n = n;
  g.count.line = std::to_string(n) + (n == 1 ? " thread" : " threads") + " (set by the program)";
  g.pool = std::make_unique<Pool>(n);
  g.current.store(g.pool.get(), std::memory_order_release);
}

void parallel_parts(int parts, void (*f)(void*, int), void* ctx) { pool().run(parts, f, ctx); }

SubnormalMode::SubnormalMode(bool flush) : saved_(float_mode()) {
  set_float_mode(flush ? saved_ | kDazFtz : saved_ & ~kDazFtz);
}
SubnormalMode::~SubnormalMode() { set_float_mode(saved_); }
bool SubnormalMode::available() { return kDazFtz != 0; }

Background::Background(void (*f)(void* ctx, int chunk), void* ctx) : f_(f), ctx_(ctx), mode_(float_mode()) {
  Pool& p = pool();
  if (p.bg_begin(f, ctx, mode_)) pool_ = &p;
}

void Background::release(int n) {
  if (n <= released_) return;
  released_ = n;
  if (pool_) static_cast<Pool*>(pool_)->bg_release(n);
}

int Background::done_so_far() const { return pool_ ? static_cast<Pool*>(pool_)->bg_done() : finished_ ? released_ : 0; }

void Background::finish() {
  if (finished_) return;
  finished_ = true;
  if (pool_) return static_cast<Pool*>(pool_)->bg_finish(released_);
  const FloatModeScope in(mode_);
  for (int i = 0; i < released_; ++i) f_(ctx_, i);
}

Background::~Background() {
  try {
    finish();
  } catch (...) {  // finish() was not called: its exception has nobody to go to
  }
}

double threads_round_trip_ns() {
  if (host_threads() < 2) return 0;
  constexpr int kTrips = 1000, kBatches = 5;
  struct alignas(64) Line {
    std::atomic<int> v{0};
  };
  Line ball, started;
  double ns[kBatches] = {};  // part 0's: it starts and ends each trip
  std::atomic<bool> met{true};
  parallel_parts(2, [&](int part) {
    // The first part to start waits for the other (on another thread) or,
    // after 50 ms, calls it off; the second goes on unless it was called off.
    // (Run inline, nested in another parallel_parts, part 1 starts only
    // after part 0 has returned.)
    constexpr int kOff = 1 << 20;
    const int order = started.v.fetch_add(1);
    if (order >= kOff) return;
    const auto t0 = std::chrono::steady_clock::now();
    while (order == 0 && started.v.load() < 2) {
      if (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(50)) continue;
      int one = 1;
      if (started.v.compare_exchange_strong(one, kOff)) {
        met.store(false);
        return;
      }
    }
    for (int b = 0; b < kBatches; ++b) {
      const auto b0 = std::chrono::steady_clock::now();
      for (int i = b * kTrips; i < (b + 1) * kTrips; ++i) {
        const int mine = part == 0 ? 2 * i : 2 * i + 1;  // part 0 takes the even values, part 1 the odd ones
        while (ball.v.load(std::memory_order_acquire) != mine) CAPSTEP_PAUSE();
        ball.v.store(mine + 1, std::memory_order_release);
      }
      if (part == 0)
        ns[b] = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - b0).count() / kTrips;
    }
  });
  if (!met.load()) return 0;
  std::sort(ns, ns + kBatches);
  return ns[kBatches / 2];
}

}  // namespace capstep::host
