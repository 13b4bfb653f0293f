/* bench/bench_cuda.h: what the CUDA kernel benchmarks (conv1d_bench, scan_bench) share.
 *
 * How they time: a case rotates among `sets` input sets (so that no run finds its data
 * in L2); after a warm-up the runs are queued back to back on the default stream with a
 * CUDA event between each two, and the median (and quartiles) of the intervals are
 * reported. The number of runs shrinks when the warm-up says they would take longer than
 * a budget. The reference is the device-to-device copy bandwidth, measured the same way. */
#ifndef TAPEGRAD_BENCH_CUDA_H
#define TAPEGRAD_BENCH_CUDA_H

#include "core/internal.h"
#include "tapegrad/rng.h"

#include <cuda_runtime.h>

#include <stdbool.h>
#include <stddef.h>

#define BENCH_MAX_RUNS 1000
#define BENCH_COUNT_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* How many runs a measurement makes. */
typedef struct {
    int max_runs;     /* timed runs, unless the budget says fewer */
    int min_runs;     /* never fewer than this */
    int warmup;       /* untimed runs first */
    double budget_ms; /* device time one measurement should take at most */
} bench_policy;

/* The SM clock while a measurement's runs executed, read through NVML (the driver's
 * management library, opened at run time, so that nothing links against it). A kernel
 * bound by instruction issue slows with this clock where a copy does not, so a row that
 * sits near a target needs its clock beside its time. */
typedef struct {
    double median_mhz, min_mhz; /* NaN where NVML is not there or gave no sample */
    unsigned long long reasons; /* NVML's clock event reasons seen in any sample (a bit mask) */
} bench_clocks;

typedef struct {
    double median_us, q1_us, q3_us;
    int runs;
    bool ok;
    bench_clocks clocks;
    char error[200]; /* why not ok, fit for one CSV field */
} bench_timing;

/* One run on input set `set` of the case `context`. */
typedef tg_status (*bench_run_fn)(const void *context, int set);

/* Names the program in messages and creates the events; false (with a message) on failure. */
bool bench_init(const char *program);
/* True when error is cudaSuccess; else prints "<program>: what: error" and returns false. */
bool bench_cuda_ok(cudaError_t error, const char *what);

/* Warm-up, then the timed runs, rotating over the sets. */
bench_timing bench_time_runs(bench_run_fn run, const void *context, int sets, const bench_policy *policy);
/* A failed timing carrying message (commas, quotes and newlines replaced). */
bench_timing bench_timing_failed(const char *message);

/* Device-to-device copy of 1 GiB, the median of `runs`, in GB/s of bytes read + written;
 * NaN (with a message) when it cannot run. */
double bench_copy_bandwidth(tg_tape *tape, tg_rng *rng, int runs);

/* The highest SM clock the card allows, in MHz (NaN without NVML). */
double bench_max_sm_mhz(void);
/* The reasons that lower clocks (bench_clocks.reasons) as words, e.g. "power cap, thermal";
 * "" when none of them. Idle and the applications' clock setting are left out. */
const char *bench_clock_reason_words(unsigned long long reasons);

/* Enough input sets that their bytes exceed 4× the L2 cache: at least 2, at most max_sets. */
int bench_sets_needed(size_t set_bytes, size_t l2_bytes, int max_sets);

/* The p-quantile of n sorted values, interpolating between neighbours. */
double bench_quantile(const double *sorted, int n, double p);
/* Sorts values in place. */
void bench_sort(double *values, int n);
/* Seconds on the wall clock; a seed taken from it. */
double bench_seconds(void);
uint64_t bench_clock_seed(void);

#endif
