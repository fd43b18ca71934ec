// SPDX-License-Identifier: MIT
/**
 * @file parallel.hpp
 * Threads for the SIMD attention kernels, only when the caller asks for them.
 *
 * - `backend::simd<Arch>`: one thread (the caller's), scratch in a `thread_local` workspace.
 * - `backend::simd_threads`: a pool the caller constructs and owns. `simd_threads pool(2)`
 *   starts one worker thread (the calling thread is the other) and one workspace per thread;
 *   the destructor joins the worker. Nothing else in the library ever starts a thread. After
 *   each parallel call a worker spins for a short while (`spin`, 200 µs by default) before it
 *   sleeps, so that back-to-back calls do not each wait for the OS to wake it.
 * - `backend::simd_policy<Arch>{&pool}`: the backend tag that uses it. Multi-head calls run
 *   the (batch, head) pairs on the pool's threads (each pair single-threaded on its thread's
 *   workspace); a single-head softmax call splits its query tiles across the threads;
 *   `simd_policy<Arch>{nullptr, &ws}` is a single-threaded call on a caller-owned workspace.
 *
 * Results do not depend on the number of threads: every query row is computed by exactly one
 * thread with the same operation order.
 */
#pragma once

#include <lrpe/backend/simd/tag.hpp>
#include <lrpe/backend/simd/workspace.hpp>
#include <lrpe/core/error.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace backend {

/**
 * A caller-owned pool of `size()` threads (the calling thread plus size() − 1 workers), each
 * with its own `simd_workspace`. `run` is a blocking parallel-for; one `run` at a time (calls
 * from several threads are serialised). Not re-entrant: a task must not call `run` on the
 * same pool.
 *
 * Several threads may share one pool: every use of workspace 0 (by `run`'s calling thread, and
 * by a whole attention call on `simd_policy{&pool}`, through `call_guard`) holds the pool's call
 * lock, so such calls run one after the other. A thread that wants its calls to overlap
 * another's owns a pool (or a workspace: `simd_policy{&pool, &ws}`) of its own.
 */
class simd_threads {
 public:
  /**
   * How long a worker (and the calling thread, waiting for the workers at the end of a call)
   * spins before it sleeps on a condition variable. Waking a sleeping thread can take a good
   * part of a short call, which the caller then spends taking the heads alone while the worker
   * wakes (bench/results/tuning.md#thread-spin). 0: sleep at once.
   */
  static constexpr std::chrono::microseconds default_spin{200};

  /// @param threads total threads, ≥ 1 (1: no worker is started).
  /// @param spin    how long a waiting thread spins before it sleeps, ≥ 0 (`default_spin`).
  explicit simd_threads(int threads = 2, std::chrono::microseconds spin = default_spin) : spin_(spin) {
    lrpe::detail::require_parameter(threads >= 1, "lrpe::backend::simd_threads", "threads", "must be >= 1", threads);
    lrpe::detail::require_parameter(spin.count() >= 0, "lrpe::backend::simd_threads", "spin", "must be >= 0 (microseconds)",
                                    static_cast<long long>(spin.count()));
    for (int t = 0; t < threads; ++t) workspaces_.push_back(std::make_unique<simd_workspace>());
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { worker(t); });
  }
  simd_threads(const simd_threads&) = delete;
  simd_threads& operator=(const simd_threads&) = delete;
  ~simd_threads() {
    {
      std::lock_guard lock(m_);
      stop_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }

  [[nodiscard]] int size() const noexcept { return static_cast<int>(workspaces_.size()); }
  /// The workspace of thread t (0 = the calling thread).
  [[nodiscard]] simd_workspace& workspace(int t) noexcept { return *workspaces_[static_cast<std::size_t>(t)]; }

  /// The pool's call lock (recursive: `run` inside a held call takes it again): held by `run`
  /// and by an attention call on workspace 0 (`call_guard`), so that calls from several threads
  /// never share that workspace at the same time.
  [[nodiscard]] std::unique_lock<std::recursive_mutex> lock_calls() { return std::unique_lock(run_m_); }

  /**
   * Calls `f(item, thread)` for item = 0 … count−1 on all threads (dynamic scheduling, items
   * taken in increasing order) and returns when all are done. The first exception thrown by a
   * task is rethrown here (remaining items are skipped).
   */
  template <class F>
  void run(index_t count, F&& f) {
    if (count <= 0) return;
    std::lock_guard run_lock(run_m_);  // workspace 0 is the calling thread's: one run at a time
    if (workers_.empty() || count == 1) {
      for (index_t i = 0; i < count; ++i) f(i, 0);
      return;
    }
    auto invoke = [](void* ctx, index_t i, int t) { (*static_cast<std::remove_reference_t<F>*>(ctx))(i, t); };
    {
      std::lock_guard lock(m_);
      invoke_ = invoke;
      ctx_ = static_cast<void*>(&f);
      count_ = count;
      next_.store(0, std::memory_order_relaxed);
      busy_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
      error_ = nullptr;
      // release: a worker that sees the new generation without the lock (spinning) sees the task
      generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
    cv_.notify_all();
    work(0);
    if (!spin_until([this] { return busy_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock lock(m_);
      done_cv_.wait(lock, [this] { return busy_.load(std::memory_order_acquire) == 0; });
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void work(int t) {
    for (index_t i = next_.fetch_add(1, std::memory_order_relaxed); i < count_;
         i = next_.fetch_add(1, std::memory_order_relaxed)) {
      try {
        invoke_(ctx_, i, t);
      } catch (...) {
        std::lock_guard lock(error_m_);
        if (!error_) error_ = std::current_exception();
        next_.store(count_, std::memory_order_relaxed);
      }
    }
  }

  /// Spins (with a pause) until `ready()` or for `spin_`; true when ready.
  template <class Ready>
  bool spin_until(Ready ready) const noexcept {
    if (ready()) return true;
    if (spin_.count() == 0) return false;
    const auto end = std::chrono::steady_clock::now() + spin_;
    for (unsigned i = 1;; ++i) {
      for (int k = 0; k < 16; ++k) pause();
      if (ready()) return true;
      if (i % 16 == 0 && std::chrono::steady_clock::now() >= end) return ready();
    }
  }

  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  void worker(int t) {
    std::uint64_t seen = 0;
    const auto news = [&] {
      return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    for (;;) {
      if (!spin_until(news)) {
        std::unique_lock lock(m_);
        cv_.wait(lock, news);
      }
      if (stop_.load(std::memory_order_acquire)) return;
      seen = generation_.load(std::memory_order_acquire);
      work(t);
      {
        std::lock_guard lock(m_);  // the caller may be about to sleep on done_cv_
        busy_.fetch_sub(1, std::memory_order_release);
      }
      done_cv_.notify_one();
    }
  }

  std::vector<std::unique_ptr<simd_workspace>> workspaces_;
  std::vector<std::thread> workers_;
  std::mutex m_, error_m_;
  std::recursive_mutex run_m_;
  std::condition_variable cv_, done_cv_;
  std::chrono::microseconds spin_;
  std::atomic<std::uint64_t> generation_{0};  ///< written under m_, read by spinning threads without it
  std::atomic<bool> stop_{false};
  void (*invoke_)(void*, index_t, int) = nullptr;
  void* ctx_ = nullptr;
  index_t count_ = 0;
  std::atomic<index_t> next_{0};
  std::atomic<int> busy_{0};  ///< workers still in the current run
  std::exception_ptr error_{};
};

/**
 * The SIMD backend bound to caller-owned resources: a thread pool and/or a workspace (both
 * optional, both must outlive the call). `simd_policy<Arch>{}` behaves as `simd<Arch>{}`.
 */
template <class Arch = xsimd::default_arch>
struct simd_policy {
  using arch_type = Arch;
  static constexpr const char* name = "simd";
  simd_threads* threads = nullptr;      ///< null: the calling thread only
  simd_workspace* workspace = nullptr;  ///< null: the pool's workspace 0, else the thread's own
};

/// A `simd_policy` is a SIMD backend tag too.
template <class Arch>
inline constexpr bool is_simd_backend_v<simd_policy<Arch>> = true;

namespace simd_detail {

/// Where a call's scratch lives and which threads it may use.
struct resources {
  simd_workspace* ws;
  simd_threads* pool;  ///< non-null only with ≥ 2 threads
};

template <class Arch>
resources resolve(const simd<Arch>&) {
  return {&simd_workspace::this_thread(), nullptr};
}
template <class Arch>
resources resolve(const simd_policy<Arch>& p) {
  simd_threads* pool = p.threads != nullptr && p.threads->size() > 1 ? p.threads : nullptr;
  simd_workspace* ws = p.workspace != nullptr  ? p.workspace
                       : p.threads != nullptr ? &p.threads->workspace(0)
                                              : &simd_workspace::this_thread();
  return {ws, pool};
}

}  // namespace simd_detail

/// A call on the pool's workspace 0 (no workspace of its own) holds the pool's call lock
/// (several threads may share a pool); other calls hold nothing.
template <class Arch>
std::unique_lock<std::recursive_mutex> call_guard(const simd_policy<Arch>& p) {
  if (p.threads != nullptr && p.workspace == nullptr) return p.threads->lock_calls();
  return {};
}

/// Multi-head calls with a pool: one (batch, head) pair per task, each on its thread's workspace.
template <class Arch, class F>
void for_each_head(const simd_policy<Arch>& p, index_t count, F&& f) {
  if (p.threads == nullptr || p.threads->size() < 2 || count < 2) {
    for (index_t i = 0; i < count; ++i) f(i, p);
    return;
  }
  simd_threads& pool = *p.threads;
  pool.run(count, [&](index_t i, int t) { f(i, simd_policy<Arch>{nullptr, &pool.workspace(t)}); });
}

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
