/* bench/bench_cuda.c: the timing, the copy reference and small helpers of the CUDA
 * benchmarks (bench_cuda.h). */
#define _POSIX_C_SOURCE 200809L /* dlopen, nanosleep */
#include "bench/bench_cuda.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *program_name = "bench";
static cudaEvent_t events[BENCH_MAX_RUNS + 1];

bool bench_cuda_ok(cudaError_t error, const char *what)
{
    if (error == cudaSuccess) return true;
    fprintf(stderr, "%s: %s: %s\n", program_name, what, cudaGetErrorString(error));
    return false;
}

bool bench_init(const char *program)
{
    program_name = program;
    for (int i = 0; i <= BENCH_MAX_RUNS; i++)
        if (!bench_cuda_ok(cudaEventCreate(&events[i]), "cudaEventCreate")) return false;
    return true;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_sort(double *values, int n) { qsort(values, (size_t)n, sizeof values[0], compare_doubles); }

double bench_quantile(const double *sorted, int n, double p)
{
    double position = p * (n - 1);
    int below = (int)position;
    if (below >= n - 1) return sorted[n - 1];
    double frac = position - below;
    return sorted[below] * (1.0 - frac) + sorted[below + 1] * frac;
}

double bench_seconds(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t bench_clock_seed(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bench_timing bench_timing_failed(const char *message)
{
    bench_timing t = {0};
    snprintf(t.error, sizeof t.error, "%s", message);
    for (char *p = t.error; *p; p++)
        if (*p == ',' || *p == '"' || *p == '\n') *p = ';';
    return t;
}

/* ---- the SM clock, through NVML ------------------------------------------------------------------- */

/* The few NVML entry points used, declared here (their C interface is stable across drivers),
 * so that the benchmarks need neither NVML's header nor its library at build time. */
typedef struct nvml_device *nvml_device;
enum { NVML_OK = 0, NVML_CLOCK_SM = 1 };
#define NVML_REASON_POWER_CAP 0x4ull
#define NVML_REASON_HW_SLOWDOWN 0x8ull
#define NVML_REASON_SW_THERMAL 0x20ull
#define NVML_REASON_HW_THERMAL 0x40ull
#define NVML_REASON_POWER_BRAKE 0x80ull

static struct {
    bool tried, ok;
    nvml_device device;
    int (*clock_info)(nvml_device, int, unsigned int *);
    int (*max_clock_info)(nvml_device, int, unsigned int *);
    int (*reasons)(nvml_device, unsigned long long *);
} nvml;

/* Opens NVML once and finds the card CUDA device 0 is (by its PCI bus id); nvml.ok says
 * whether it worked. */
static void nvml_open(void)
{
    if (nvml.tried) return;
    nvml.tried = true;
    void *library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) return;
    int (*init)(void) = (int (*)(void))dlsym(library, "nvmlInit_v2");
    int (*by_bus_id)(const char *, nvml_device *) =
        (int (*)(const char *, nvml_device *))dlsym(library, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml.clock_info = (int (*)(nvml_device, int, unsigned int *))dlsym(library, "nvmlDeviceGetClockInfo");
    nvml.max_clock_info = (int (*)(nvml_device, int, unsigned int *))dlsym(library, "nvmlDeviceGetMaxClockInfo");
    nvml.reasons = (int (*)(nvml_device, unsigned long long *))dlsym(library, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!nvml.reasons) /* its name before driver 535 */
        nvml.reasons =
            (int (*)(nvml_device, unsigned long long *))dlsym(library, "nvmlDeviceGetCurrentClocksThrottleReasons");
    char bus_id[32];
    if (!init || !by_bus_id || !nvml.clock_info || init() != NVML_OK ||
        cudaDeviceGetPCIBusId(bus_id, (int)sizeof bus_id, 0) != cudaSuccess ||
        by_bus_id(bus_id, &nvml.device) != NVML_OK)
        return;
    nvml.ok = true;
}

double bench_max_sm_mhz(void)
{
    nvml_open();
    unsigned int mhz = 0;
    if (!nvml.ok || !nvml.max_clock_info || nvml.max_clock_info(nvml.device, NVML_CLOCK_SM, &mhz) != NVML_OK)
        return NAN;
    return mhz;
}

const char *bench_clock_reason_words(unsigned long long reasons)
{
    static const struct {
        unsigned long long bit;
        const char *word;
    } names[] = {{NVML_REASON_POWER_CAP, "power cap"},
                 {NVML_REASON_HW_SLOWDOWN, "hardware slowdown"},
                 {NVML_REASON_SW_THERMAL | NVML_REASON_HW_THERMAL, "thermal"},
                 {NVML_REASON_POWER_BRAKE, "power brake"}};
    static char words[96];
    words[0] = 0;
    for (int i = 0; i < BENCH_COUNT_OF(names); i++)
        if (reasons & names[i].bit)
            snprintf(words + strlen(words), sizeof words - strlen(words), "%s%s", words[0] ? ", " : "", names[i].word);
    return words;
}

#define CLOCK_SAMPLES_MAX 4096

/* Waits for `done`, reading the SM clock about every millisecond meanwhile (the runs were all
 * queued before, so the samples fall while they execute). */
static cudaError_t wait_reading_clocks(cudaEvent_t done, bench_clocks *clocks)
{
    *clocks = (bench_clocks){.median_mhz = NAN, .min_mhz = NAN};
    nvml_open();
    static double mhz[CLOCK_SAMPLES_MAX];
    int n = 0;
    const struct timespec a_millisecond = {0, 1000000};
    while (nvml.ok && n < CLOCK_SAMPLES_MAX && cudaEventQuery(done) == cudaErrorNotReady) {
        unsigned int now = 0;
        unsigned long long reasons = 0;
        if (nvml.clock_info(nvml.device, NVML_CLOCK_SM, &now) == NVML_OK) mhz[n++] = now;
        if (nvml.reasons && nvml.reasons(nvml.device, &reasons) == NVML_OK) clocks->reasons |= reasons;
        nanosleep(&a_millisecond, NULL);
    }
    if (n > 0) {
        bench_sort(mhz, n);
        clocks->median_mhz = bench_quantile(mhz, n, 0.5);
        clocks->min_mhz = mhz[0];
    }
    return cudaEventSynchronize(done);
}

/* How many timed runs fit the budget, given one warm-up run's time. */
static int runs_for(const bench_policy *policy, double one_run_ms)
{
    int runs = policy->max_runs;
    if (one_run_ms > 0 && one_run_ms * runs > policy->budget_ms) runs = (int)(policy->budget_ms / one_run_ms);
    if (runs < policy->min_runs) runs = policy->min_runs;
    return runs < BENCH_MAX_RUNS ? runs : BENCH_MAX_RUNS;
}

/* The intervals between events[0 … runs], in µs, sorted. */
static void sorted_intervals_us(int runs, double *us)
{
    for (int i = 0; i < runs; i++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, events[i], events[i + 1]);
        us[i] = 1e3 * ms;
    }
    bench_sort(us, runs);
}

bench_timing bench_time_runs(bench_run_fn run, const void *context, int sets, const bench_policy *policy)
{
    int set = 0;
    float ms = 0;
    for (int i = 0; i < policy->warmup; i++, set = (set + 1) % sets) {
        cudaEventRecord(events[0], 0);
        if (run(context, set) != TG_OK) return bench_timing_failed(tg_last_error());
        cudaEventRecord(events[1], 0);
    }
    if (!bench_cuda_ok(cudaEventSynchronize(events[1]), "warm-up") ||
        !bench_cuda_ok(cudaEventElapsedTime(&ms, events[0], events[1]), "warm-up timing"))
        return bench_timing_failed("CUDA error in the warm-up");
    bench_timing t = {.runs = runs_for(policy, ms)};
    cudaEventRecord(events[0], 0);
    for (int i = 0; i < t.runs; i++, set = (set + 1) % sets) {
        if (run(context, set) != TG_OK) return bench_timing_failed(tg_last_error());
        cudaEventRecord(events[i + 1], 0);
    }
    if (!bench_cuda_ok(wait_reading_clocks(events[t.runs], &t.clocks), "timed runs"))
        return bench_timing_failed("CUDA error in the timed runs");
    double us[BENCH_MAX_RUNS];
    sorted_intervals_us(t.runs, us);
    t.median_us = bench_quantile(us, t.runs, 0.5);
    t.q1_us = bench_quantile(us, t.runs, 0.25);
    t.q3_us = bench_quantile(us, t.runs, 0.75);
    t.ok = true;
    return t;
}

double bench_copy_bandwidth(tg_tape *tape, tg_rng *rng, int runs)
{
    int64_t n = (int64_t)1 << 28; /* f32 elements: 1 GiB */
    size_t bytes = (size_t)n * sizeof(float);
    tg_tensor *src = tg_empty(tape, TG_F32, TG_DEVICE_CUDA, 1, &n);
    tg_tensor *dst = tg_empty(tape, TG_F32, TG_DEVICE_CUDA, 1, &n);
    if (!src || !dst || tg_fill_normal(src, rng, 0.0, 1.0) != TG_OK) {
        fprintf(stderr, "%s: copy buffers: %s\n", program_name, tg_last_error());
        return NAN;
    }
    if (runs > BENCH_MAX_RUNS) runs = BENCH_MAX_RUNS;
    for (int i = 0; i < 3; i++) cudaMemcpy(tg_bytes(dst), tg_bytes(src), bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(events[0], 0);
    for (int i = 0; i < runs; i++) {
        cudaMemcpy(tg_bytes(dst), tg_bytes(src), bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(events[i + 1], 0);
    }
    if (!bench_cuda_ok(cudaEventSynchronize(events[runs]), "copy bandwidth")) return NAN;
    double us[BENCH_MAX_RUNS];
    sorted_intervals_us(runs, us);
    return 2.0 * (double)bytes / (bench_quantile(us, runs, 0.5) * 1e-6) / 1e9;
}

int bench_sets_needed(size_t set_bytes, size_t l2_bytes, int max_sets)
{
    size_t sets = 4 * l2_bytes / set_bytes + 1;
    if (sets < 2) sets = 2;
    return sets < (size_t)max_sets ? (int)sets : max_sets;
}
