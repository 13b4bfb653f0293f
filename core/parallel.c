/* core/parallel.c: CPU threads for the kernels whose work splits into independent parts
 * (the selective scan's rows). A call starts its threads and joins them before it
 * returns, so the rest of the library stays single-threaded: kernels only split work
 * whose parts write disjoint memory, and they sum across parts afterwards in a fixed
 * order, so results never depend on the number of threads. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

enum { MAX_THREADS = 64 };

static int requested_threads; /* 0: the default */

static int default_threads(void)
{
    const char *env = getenv("TG_NUM_THREADS");
    long n = env ? strtol(env, NULL, 10) : 0;
    if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

int tg_num_threads(void) { return requested_threads > 0 ? requested_threads : default_threads(); }

void tg_set_num_threads(int n) { requested_threads = n < 1 ? 0 : n > MAX_THREADS ? MAX_THREADS : n; }

typedef struct {
    tg_range_fn fn;
    void *context;
    int64_t begin, end;
} range_job;

static void *run_range(void *job)
{
    range_job *j = job;
    j->fn(j->context, j->begin, j->end);
    return NULL;
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
    range_job jobs[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    for (int64_t k = 0; k < threads; k++) jobs[k] = (range_job){fn, context, k * n / threads, (k + 1) * n / threads};
    for (int64_t k = 1; k < threads; k++) started[k] = pthread_create(&ids[k], NULL, run_range, &jobs[k]) == 0;
    run_range(&jobs[0]);
    for (int64_t k = 1; k < threads; k++) {
        if (started[k]) pthread_join(ids[k], NULL);
        else run_range(&jobs[k]); /* no thread to be had: this one does the work */
    }
}
