// The thread pool behind parallel_for (see parallel.h).
//
// One job at a time: the calling thread publishes it, wakes the workers and starts claiming
// tasks itself (an atomic counter hands out task indices). When no task is left it waits only
// for tasks other threads are running, never for a worker that has not arrived: a worker that
// wakes late finds nothing to claim and goes back to sleep. This is what keeps 2 threads as
// fast as 1 when another program holds one of the cores (a fork/join team, as in OpenMP's
// static schedule, waits at its barrier for the descheduled thread).
//
// Idle workers spin for a few microseconds (training steps run parallel loops back to back),
// then sleep on a condition variable: no core is burnt while nothing runs.
#include "core/parallel.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "core/error.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define HG_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define HG_CPU_RELAX() __asm__ volatile("yield")
#else
#define HG_CPU_RELAX() ((void)0)
#endif

namespace hg {

namespace {

thread_local bool t_in_region = false;

// Marks the current thread as running parallel tasks while alive: nested parallel_for calls
// then run inline instead of queueing behind their own parent.
struct InRegion {
  bool previous = t_in_region;
  InRegion() { t_in_region = true; }
  ~InRegion() { t_in_region = previous; }
  InRegion(const InRegion&) = delete;
  InRegion& operator=(const InRegion&) = delete;
};

void run_inline(int64_t num_tasks, const std::function<void(int64_t)>& task) {
  InRegion region;
  for (int64_t t = 0; t < num_tasks; ++t) task(t);
}

struct Job {
  const std::function<void(int64_t)>* task = nullptr;
  int64_t num_tasks = 0;
  std::atomic<int64_t> next{0};       // the next unclaimed task
  std::atomic<int64_t> finished{0};   // tasks done (all of them: num_tasks)
  std::mutex mutex;                   // guards error, and the caller's sleep until all are done
  std::condition_variable all_done;
  std::exception_ptr error;
};

// Claims and runs tasks of `job` until none is left.
void work_on(Job& job) {
  InRegion region;
  for (int64_t t; (t = job.next.fetch_add(1)) < job.num_tasks;) {
    try {
      (*job.task)(t);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.mutex);
      if (!job.error) job.error = std::current_exception();
    }
    if (job.finished.fetch_add(1, std::memory_order_acq_rel) + 1 == job.num_tasks) {
      std::lock_guard<std::mutex> lock(job.mutex);  // (so the caller cannot miss the wake-up)
      job.all_done.notify_all();
    }
  }
}

class ThreadPool {
 public:
  static ThreadPool& instance() {
    static ThreadPool pool;
    return pool;
  }

  int threads() const { return threads_.load(std::memory_order_relaxed); }

  void resize(int threads) {
    std::lock_guard<std::mutex> lock(run_mutex_);
    stop_workers();
    threads_.store(threads);
    spawn_workers();
  }

  void run(int64_t num_tasks, const std::function<void(int64_t)>& task) {
    // NOTE: one job at a time; a second user thread calling in meanwhile runs its loop alone.
    std::unique_lock<std::mutex> lock(run_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return run_inline(num_tasks, task);
    if (respawn_after_fork_) spawn_workers();
    if (workers_.empty()) return run_inline(num_tasks, task);
    // NOTE: the job is shared with the workers that pick it up, so the caller never waits for a
    // worker that was descheduled after it woke: a late worker finds every task claimed and drops
    // its reference. (Waiting for such workers to let go of a job on the caller's stack cost a
    // scheduler time slice whenever another program held the other core.)
    auto job = std::make_shared<Job>();
    job->task = &task;
    job->num_tasks = num_tasks;
    job_.store(job);
    publish();
    work_on(*job);
    // Wait for the tasks other threads claimed: a short spin, then sleep.
    const auto all_finished = [&] { return job->finished.load(std::memory_order_acquire) == num_tasks; };
    for (int i = 0; i < 2000 && !all_finished(); ++i) HG_CPU_RELAX();
    if (!all_finished()) {
      std::unique_lock<std::mutex> sleep(job->mutex);
      job->all_done.wait(sleep, all_finished);
    }
    job_.store(nullptr);
    if (job->error) std::rethrow_exception(job->error);
  }

  ~ThreadPool() { stop_workers(); }

 private:
  ThreadPool() {
    threads_.store(default_threads());
    spawn_workers();
    pthread_atfork([] { instance().let_workers_settle_before_fork(); }, nullptr,
                   [] { instance().forget_workers_after_fork(); });
  }

  void spawn_workers() {
    respawn_after_fork_ = false;
    stop_.store(false);
    // NOTE: each worker starts from the generation current now; reading it in the new thread
    // instead could miss a job (or the stop) published before that thread first ran.
    const uint32_t start = generation_.load();
    for (int i = 1; i < threads(); ++i) {
      busy_workers_.fetch_add(1);  // (a starting thread allocates: it counts as busy until it waits)
      workers_.emplace_back([this, start] { worker_loop(start); });
    }
  }

  // Announces a new job (or the stop) to the workers.
  void publish() {
    {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      generation_.fetch_add(1);
    }
    wake_.notify_all();
  }

  // NOTE: a worker that still holds the last reference to a finished job frees it, and a fork
  // while it is inside free() leaves the child with the allocator's lock held by a thread the
  // child does not have: the child's first allocation then waits forever. glibc's malloc takes
  // its locks around fork itself; AddressSanitizer's allocator (clang 14) does not (the likely
  // cause of one CI run's hang in the fork test; not reproduced here). Before a fork, wait
  // (briefly: a descheduled worker gets 100 ms) for every worker to be back waiting for work.
  // A fork from inside a parallel task does not wait.
  void let_workers_settle_before_fork() {
    if (t_in_region) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (busy_workers_.load() != 0 && std::chrono::steady_clock::now() < deadline) sched_yield();
  }

  // A forked child has only the thread that called fork(): the workers' handles name threads
  // that do not exist there and can be neither joined nor destroyed. They are moved into a
  // vector that is deliberately never freed, and new workers start on first use.
  void forget_workers_after_fork() {
    new std::vector<std::thread>(std::move(workers_));
    workers_.clear();
    // The locks may have been held by threads the child does not have.
    new (&run_mutex_) std::mutex;
    new (&sleep_mutex_) std::mutex;
    new (&wake_) std::condition_variable;
    new (&job_) std::atomic<std::shared_ptr<Job>>();  // (a parent worker may have held it locked)
    busy_workers_.store(0);
    respawn_after_fork_ = true;
  }

  // The cores this process may run on, unless HG_NUM_THREADS (or OMP_NUM_THREADS) says otherwise.
  static int default_threads() {
    for (const char* name : {"HG_NUM_THREADS", "OMP_NUM_THREADS"})
      if (const char* value = std::getenv(name)) {
        const int n = std::atoi(value);
        if (n >= 1) return std::min(n, 1024);
      }
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) return std::max(1, CPU_COUNT(&allowed));
    return std::max(1u, std::thread::hardware_concurrency());
  }

  void worker_loop(uint32_t seen) {
    while (true) {
      busy_workers_.fetch_sub(1);
      wait_for_job(seen);
      if (stop_.load()) return;
      busy_workers_.fetch_add(1);
      seen = generation_.load();
      if (const std::shared_ptr<Job> job = job_.load()) work_on(*job);  // (the last holder frees it)
    }
  }

  // Spins about 20 microseconds for the next job, then sleeps until one is published.
  void wait_for_job(uint32_t seen) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
    for (int i = 0; generation_.load(std::memory_order_relaxed) == seen; ++i) {
      HG_CPU_RELAX();
      if (i % 64 == 63 && std::chrono::steady_clock::now() > deadline) {
        std::unique_lock<std::mutex> lock(sleep_mutex_);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        return;
      }
    }
  }

  void stop_workers() {
    stop_.store(true);
    publish();
    for (std::thread& worker : workers_) worker.join();
    workers_.clear();
  }

  std::mutex run_mutex_;
  std::vector<std::thread> workers_;
  std::atomic<int> threads_{1};
  std::atomic<std::shared_ptr<Job>> job_;  // the job being run (shared with the workers that picked it up)
  std::atomic<uint32_t> generation_{0};  // bumped for every job (and to stop): workers wait on it
  std::mutex sleep_mutex_;               // idle workers sleep on wake_ under it
  std::condition_variable wake_;
  std::atomic<bool> stop_{false};
  std::atomic<int> busy_workers_{0};  // workers starting, running a job or letting go of one
  bool respawn_after_fork_ = false;
};

}  // namespace

void set_num_threads(int n) {
  HG_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  HG_CHECK(n <= 1024, "set_num_threads: ", n, " threads is more than the 1024 supported");
  if (n != ThreadPool::instance().threads()) ThreadPool::instance().resize(n);
}

int get_num_threads() { return ThreadPool::instance().threads(); }

namespace detail {

bool in_parallel_region() { return t_in_region; }

void run_tasks(int64_t num_tasks, const std::function<void(int64_t)>& task) {
  if (num_tasks <= 0) return;
  if (num_tasks == 1 || t_in_region) return run_inline(num_tasks, task);
  ThreadPool::instance().run(num_tasks, task);
}

}  // namespace detail

}  // namespace hg
