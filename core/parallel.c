/* core/parallel.c: CPU threads for the kernels whose work splits into independent parts
 * (the selective scan's rows, conv1d's channels, RMSNorm's rows). A call hands its parts to
 * a pool of threads, started on first use and kept, and waits until all are done before it
 * returns, so the rest of the library stays single-threaded: kernels only split work whose
 * parts write disjoint memory, and they sum across parts afterwards in a fixed order, so
 * results never depend on the number of threads. Starting a thread costs tens of
 * microseconds, waking a waiting one a few: at the small sizes, where a step makes hundreds
 * of these calls, the pool is what keeps the threads worth having. */
#define _GNU_SOURCE /* clock_gettime; sched_getaffinity and CPU_COUNT on Linux */
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sched.h>
#endif

enum { MAX_THREADS = 64 };

static int requested_threads; /* 0: the default */

/* The CPUs this process may run on: its affinity mask where the system has one (taskset, a
 * container's cpuset), so that a program given 2 of 64 cores starts 2 threads, not 64 that
 * would take turns on them; else the online CPUs. On Linux, no more than its control
 * groups' CPU quota allows (a container's CPU limit). */
static long usable_cpus(void)
{
#ifdef __linux__
    cpu_set_t allowed;
    long cpus = sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0
                    ? CPU_COUNT(&allowed)
                    : sysconf(_SC_NPROCESSORS_ONLN);
    const int64_t quota = tg_cgroup_cpu_limit("/proc/self/cgroup", "/sys/fs/cgroup");
    return quota > 0 && quota < cpus ? (long)quota : cpus;
#else
    return sysconf(_SC_NPROCESSORS_ONLN);
#endif
}

static int default_threads(void)
{
    static long usable; /* asked once: kernels ask for the count at every call */
    if (!usable) usable = usable_cpus();
    const char *env = getenv("TG_NUM_THREADS");
    long n = env ? strtol(env, NULL, 10) : 0;
    if (n < 1) n = usable;
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

int tg_num_threads(void) { return requested_threads > 0 ? requested_threads : default_threads(); }

void tg_set_num_threads(int n) { requested_threads = n < 1 ? 0 : n > MAX_THREADS ? MAX_THREADS : n; }

/* One call's work, taken in chunks by whichever threads are running: a thread that another
 * program keeps off its core delays the call by the chunk it holds, not by a fixed share
 * (on shared machines one of two vCPUs is often away for milliseconds). Which thread runs a
 * chunk changes nothing in the results: the kernels' parts are independent. */
enum { CHUNKS_PER_THREAD = 4 };

typedef struct {
    tg_range_fn fn;
    void *context;
    int64_t n, chunk;          /* parts [i·chunk, min((i + 1)·chunk, n)) */
    _Atomic int64_t next_part; /* the next i to take */
} shared_work;

static void take_parts(shared_work *w)
{
    for (;;) {
        const int64_t begin = atomic_fetch_add(&w->next_part, 1) * w->chunk;
        if (begin >= w->n) return;
        w->fn(w->context, begin, w->n - begin < w->chunk ? w->n : begin + w->chunk);
    }
}

/* ---- the pool --------------------------------------------------------------------------------
 * One call at a time uses it (dispatch_lock); a call that finds it busy (another thread's, or
 * a part that itself splits) starts threads of its own. Workers 1 .. active − 1 take parts of
 * each new generation's work they see, then count themselves out of `pending`.
 *
 * Waking a thread that sleeps on a condition variable takes a system call and, on a virtual
 * machine, often tens of microseconds before it runs: at the demo's sizes a step makes
 * hundreds of calls only a little longer than that. So a worker first spins on the
 * generation for a while after its last part (and the caller on `pending`), and only then
 * sleeps; a new generation is published with a release store after the work it describes,
 * and the sleepers are woken under the lock as before. */
enum { SPIN_NS = 200000 }; /* how long a thread spins before it sleeps */

static struct {
    pthread_mutex_t dispatch_lock, lock;
    pthread_cond_t work, done;
    shared_work *current;
    int workers;         /* started so far: workers 1 .. workers */
    int active;          /* workers 1 .. active − 1 join this generation */
    _Atomic int pending; /* workers of this generation still running */
    _Atomic unsigned generation;
    unsigned started_at[MAX_THREADS]; /* the generation at each worker's start */
    pid_t owner;                      /* the process that started them: a forked child has none */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spins until done(arg) holds or SPIN_NS pass; whether it holds. */
static bool spin_until(bool (*done)(const void *), const void *arg)
{
    const int64_t start = now_ns();
    for (int i = 1;; i++) {
        if (done(arg)) return true;
        cpu_relax();
        if (i % 64 == 0 && now_ns() - start > SPIN_NS) return done(arg);
    }
}

static bool generation_moved(const void *seen)
{
    return atomic_load_explicit(&pool.generation, memory_order_acquire) != *(const unsigned *)seen;
}

static bool workers_done(const void *unused)
{
    (void)unused;
    return atomic_load_explicit(&pool.pending, memory_order_acquire) == 0;
}

static void *worker_main(void *arg)
{
    const int k = (int)(intptr_t)arg;
    /* The generation current when it was started (no call was running then): the first it
     * runs is the next one, however late this thread gets going. */
    unsigned seen = pool.started_at[k];
    for (;;) {
        if (!spin_until(generation_moved, &seen)) {
            pthread_mutex_lock(&pool.lock);
            while (atomic_load(&pool.generation) == seen) pthread_cond_wait(&pool.work, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = atomic_load_explicit(&pool.generation, memory_order_acquire);
        if (k >= pool.active) continue; /* not needed this time */
        take_parts(pool.current);
        if (atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool.lock); /* the caller may be asleep: wake it under the lock */
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
    }
    return NULL;
}

/* Makes sure workers 1 .. threads − 1 exist (called holding dispatch_lock); false when
 * they cannot be started. */
static bool pool_ready(int threads)
{
    if (pool.owner != getpid()) pool.workers = 0, pool.owner = getpid(); /* after a fork */
    while (pool.workers < threads - 1) {
        pthread_t id;
        pool.started_at[pool.workers + 1] = atomic_load(&pool.generation);
        if (pthread_create(&id, NULL, worker_main, (void *)(intptr_t)(pool.workers + 1)) != 0) return false;
        pthread_detach(id);
        pool.workers++;
    }
    return true;
}

/* Runs the work on `threads` threads of the pool, the calling thread one of them; false
 * when the pool is busy or cannot grow (nothing has run then). */
static bool run_on_pool(shared_work *w, int threads)
{
    if (pthread_mutex_trylock(&pool.dispatch_lock) != 0) return false;
    if (!pool_ready(threads)) {
        pthread_mutex_unlock(&pool.dispatch_lock);
        return false;
    }
    pthread_mutex_lock(&pool.lock);
    pool.current = w;
    pool.active = threads;
    atomic_store_explicit(&pool.pending, threads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool.generation, 1, memory_order_release); /* publishes the three above */
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    take_parts(w);
    if (!spin_until(workers_done, NULL)) {
        pthread_mutex_lock(&pool.lock);
        while (atomic_load(&pool.pending) > 0) pthread_cond_wait(&pool.done, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
    }
    pthread_mutex_unlock(&pool.dispatch_lock);
    return true;
}

static void *run_parts(void *w)
{
    take_parts(w);
    return NULL;
}

/* The way without the pool: threads of its own, joined before returning (the calling
 * thread takes whatever parts threads that could not start leave). */
static void run_on_new_threads(shared_work *w, int threads)
{
    pthread_t ids[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    for (int k = 1; k < threads; k++) started[k] = pthread_create(&ids[k], NULL, run_parts, w) == 0;
    take_parts(w);
    for (int k = 1; k < threads; k++)
        if (started[k]) pthread_join(ids[k], NULL);
}

void tg_parallel_ranges(int64_t n, int64_t min_per_thread, tg_range_fn fn, void *context)
{
    if (n <= 0) return;
    int64_t threads = tg_num_threads(), most = min_per_thread > 0 ? (n + min_per_thread - 1) / min_per_thread : n;
    if (threads > most) threads = most;
    if (threads <= 1) {
        fn(context, 0, n);
        return;
    }
    int64_t chunk = (n + threads * CHUNKS_PER_THREAD - 1) / (threads * CHUNKS_PER_THREAD);
    if (chunk < min_per_thread) chunk = min_per_thread;
    shared_work w = {fn, context, n, chunk, 0};
    if (!run_on_pool(&w, (int)threads)) run_on_new_threads(&w, (int)threads);
}
