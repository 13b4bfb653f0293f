/* bench/conv1d_bench.c: times the CUDA causal conv1d kernels against the device's own
 * copy bandwidth.
 *
 *   conv1d_bench [--quick] [--csv FILE] [--runs N] [--budget-ms MS]
 *                [--size BxCxL] [--dtype f32|bf16] [--layout cf|cl] [--width K]
 *
 * The kernel entry points are called directly (no tape) on inputs drawn with cuRAND, for
 * every size, dtype, layout and width of the table in docs/benchmarks.md, with bias and
 * SiLU on. How it measures:
 *   - The floor. Forward reads x and writes out: 2·N·size bytes. Forward + backward also
 *     reads dout and writes dx: 5·N·size (the weight and bias gradients are a few KB).
 *     The "% copy" columns are those bytes per second over the device-to-device copy
 *     bandwidth measured at the start of the same run (bytes read + bytes written).
 *   - No cache hits between runs. Each row rotates among enough input sets that their x
 *     tensors alone are over 4× the L2 cache, so no run finds its data left in L2 by the
 *     run before.
 *   - Device time per run. After a warm-up, the runs are queued back to back with an
 *     event between each two: each interval is one run on the device, and the host's
 *     launch work overlaps the previous run while the host keeps ahead. The median is
 *     reported (and the quartiles in the CSV). A run that would take more than the time
 *     budget gets fewer repetitions, never fewer than the minimum.
 *   - The copy at this size. A copy of fewer bytes runs below the 1 GiB copy's rate (on an
 *     H200 a copy of 50 MB reached about 86% of it), so each (size, dtype, layout) also
 *     times a device-to-device copy of its x (N·size bytes read and as many written),
 *     rotated over the same sets: "x copy" is that copy's time, a reference for what a
 *     pass moving the same bytes can reach at this size (the forward moves one x copy's
 *     bytes, forward + backward two and a half).
 *   - The clock. While a row's runs execute, the SM clock is read about every millisecond
 *     through NVML; "SM MHz" is the median over the forward + backward runs. A kernel
 *     bound by instruction issue slows with the clock where a copy does not, so a row's
 *     % copy depends on it.
 *   - Sanity. The outputs and gradients of the first set are filled with NaN before a
 *     row starts, so the check that they are all finite afterwards also catches elements
 *     that no kernel wrote.
 */
#include "bench/bench_cuda.h"
#include "kernels/conv1d.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SETS 16
#define HOST_CHUNK_BYTES ((size_t)64 << 20)

typedef struct {
    int64_t batch, channels, length;
} bench_size;

static const bench_size bench_sizes[] = {{16, 1536, 16384}, {8, 1536, 2048}, {32, 768, 1024}};
static const int64_t bench_widths[] = {2, 3, 4, 8};
static const tg_dtype bench_dtypes[] = {TG_F32, TG_BF16};

typedef enum { LAYOUT_CHANNEL_FIRST, LAYOUT_CHANNEL_LAST, LAYOUT_COUNT } bench_layout;
/* "cf": x is a contiguous (B, C, L) tensor; "cl": x is a (B, L, C) tensor viewed as (B, C, L). */
static const char *const layout_names[LAYOUT_COUNT] = {"cf", "cl"};

#define COUNT_OF(a) BENCH_COUNT_OF(a)

typedef struct {
    const char *csv_path;
    bench_policy runs;
    /* Filters (NULL or 0: all): one dtype, layout or width, e.g. to profile one row. */
    const char *only_dtype, *only_layout;
    int64_t only_width;
    /* --size: this one size instead of the table's (any B, C, L: also sizes outside it). */
    bool one_size;
    bench_size size;
} bench_options;

/* One (size, dtype, layout) case: the rotating sets, and the K-dependent parameters. */
typedef struct {
    int sets;
    tg_tensor *x[MAX_SETS], *dout[MAX_SETS], *out[MAX_SETS], *dx[MAX_SETS];
    tg_tensor *weight, *bias, *dweight, *dbias;
} bench_case;

/* ---- timing ----------------------------------------------------------------------------- */

static tg_status run_forward(const void *context, int set)
{
    const bench_case *c = context;
    tg_conv1d_args args = {.x = c->x[set], .weight = c->weight, .bias = c->bias, .activation = TG_ACT_SILU};
    return tg_cuda_causal_conv1d_fwd(&args, c->out[set], NULL);
}

static tg_status run_forward_backward(const void *context, int set)
{
    const bench_case *c = context;
    tg_conv1d_args args = {.x = c->x[set], .weight = c->weight, .bias = c->bias, .activation = TG_ACT_SILU};
    tg_status status = tg_cuda_causal_conv1d_fwd(&args, c->out[set], NULL);
    if (status != TG_OK) return status;
    return tg_cuda_causal_conv1d_bwd(&args, c->dout[set], NULL, c->dx[set], c->dweight, c->dbias, NULL);
}

/* A device-to-device copy of set `set`'s x into its out (the same bytes, in one call). */
static tg_status run_x_copy(const void *context, int set)
{
    const bench_case *c = context;
    size_t bytes = (size_t)tg_numel(c->x[set]) * tg_dtype_size(c->x[set]->dtype);
    cudaError_t error = cudaMemcpyAsync(tg_bytes(c->out[set]), tg_bytes(c->x[set]), bytes, cudaMemcpyDeviceToDevice, 0);
    if (error != cudaSuccess) return tg_set_error(TG_ERR_DEVICE, "x copy: %s", cudaGetErrorString(error));
    return TG_OK;
}

/* ---- the finiteness check ----------------------------------------------------------------- */

static int64_t non_finite_in(const uint8_t *bytes, size_t n, tg_dtype dtype)
{
    int64_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (dtype == TG_F32) {
            uint32_t v;
            memcpy(&v, bytes + 4 * i, 4);
            bad += (v & 0x7f800000u) == 0x7f800000u; /* exponent all ones: inf or NaN */
        } else {
            uint16_t v; /* bf16: the upper half of an f32 */
            memcpy(&v, bytes + 2 * i, 2);
            bad += (v & 0x7f80u) == 0x7f80u;
        }
    }
    return bad;
}

/* Non-finite elements of a dense device tensor (contiguous or a permutation of it, so
 * that its elements fill numel consecutive slots from element 0 of the view); -1 when
 * the copy fails. */
static int64_t count_non_finite(const tg_tensor *t, uint8_t *host)
{
    size_t size = tg_dtype_size(t->dtype);
    size_t total = (size_t)tg_numel(t) * size;
    const char *device = tg_bytes(t);
    int64_t bad = 0;
    for (size_t done = 0; done < total; done += HOST_CHUNK_BYTES) {
        size_t chunk = total - done < HOST_CHUNK_BYTES ? total - done : HOST_CHUNK_BYTES;
        if (tg_device_memcpy(host, device + done, chunk, TG_COPY_DEVICE_TO_HOST) != TG_OK) return -1;
        bad += non_finite_in(host, chunk / size, t->dtype);
    }
    return bad;
}

/* ---- making the inputs ---------------------------------------------------------------------- */

/* A (B, C, L) tensor on the device: contiguous, or a (B, L, C) tensor viewed as (B, C, L). */
static tg_tensor *make_bcl(tg_tape *tape, tg_dtype dtype, bench_size s, bench_layout layout)
{
    int64_t shape[3] = {s.batch, s.channels, s.length};
    if (layout == LAYOUT_CHANNEL_FIRST) return tg_empty(tape, dtype, TG_DEVICE_CUDA, 3, shape);
    int64_t base_shape[3] = {s.batch, s.length, s.channels};
    tg_tensor *base = tg_empty(tape, dtype, TG_DEVICE_CUDA, 3, base_shape);
    int64_t strides[3] = {s.length * s.channels, 1, s.channels};
    return base ? tg_view(tape, base, 3, shape, strides, 0) : NULL;
}

static bool make_sets(tg_tape *tape, tg_rng *rng, bench_case *c, tg_dtype dtype, bench_size s, bench_layout layout,
                      size_t l2_bytes)
{
    size_t x_bytes = (size_t)(s.batch * s.channels * s.length) * tg_dtype_size(dtype);
    c->sets = bench_sets_needed(x_bytes, l2_bytes, MAX_SETS);
    for (int i = 0; i < c->sets; i++) {
        c->x[i] = make_bcl(tape, dtype, s, layout);
        c->dout[i] = make_bcl(tape, dtype, s, layout);
        c->out[i] = make_bcl(tape, dtype, s, layout);
        c->dx[i] = make_bcl(tape, dtype, s, layout);
        if (!c->x[i] || !c->dout[i] || !c->out[i] || !c->dx[i]) return false;
        if (tg_fill_normal(c->x[i], rng, 0.0, 1.0) != TG_OK || tg_fill_normal(c->dout[i], rng, 0.0, 1.0) != TG_OK)
            return false;
    }
    return true;
}

/* Weight (C, K), bias (C) and their gradients, drawn afresh for each width; the outputs
 * and gradients of set 0 are poisoned so unwritten elements fail the finiteness check. */
static bool make_parameters(tg_tape *tape, tg_rng *rng, bench_case *c, tg_dtype dtype, int64_t channels, int64_t width)
{
    int64_t weight_shape[2] = {channels, width};
    c->weight = tg_empty(tape, dtype, TG_DEVICE_CUDA, 2, weight_shape);
    c->bias = tg_empty(tape, dtype, TG_DEVICE_CUDA, 1, &channels);
    c->dweight = tg_empty(tape, dtype, TG_DEVICE_CUDA, 2, weight_shape);
    c->dbias = tg_empty(tape, dtype, TG_DEVICE_CUDA, 1, &channels);
    if (!c->weight || !c->bias || !c->dweight || !c->dbias) return false;
    return tg_fill_normal(c->weight, rng, 0.0, 1.0 / sqrt((double)width)) == TG_OK &&
           tg_fill_normal(c->bias, rng, 0.0, 0.5) == TG_OK && tg_fill(c->dweight, NAN) == TG_OK &&
           tg_fill(c->dbias, NAN) == TG_OK && tg_fill(c->out[0], NAN) == TG_OK && tg_fill(c->dx[0], NAN) == TG_OK;
}

/* ---- one row ----------------------------------------------------------------------------------- */

typedef struct {
    bench_size size;
    tg_dtype dtype;
    bench_layout layout;
    int64_t width;
    bench_timing fwd, fwd_bwd;
    double x_copy_us;   /* a device copy of x at this size (NaN when it failed) */
    int64_t non_finite; /* in out, dx, dweight, dbias of set 0; -1 when not checked */
} bench_row;

static double percent_of_copy(double bytes, double us, double copy_gbps)
{
    return 100.0 * (bytes / (us * 1e-6) / 1e9) / copy_gbps;
}

static const char *finite_word(int64_t non_finite) { return non_finite == 0 ? "yes" : non_finite > 0 ? "NO" : "-"; }

static void print_header(void)
{
    printf("%-15s %-5s %-3s %2s %10s %7s %11s %7s %9s %9s %7s %7s\n", "B x C x L", "dtype", "lay", "K", "fwd us",
           "% copy", "fwd+bwd us", "% copy", "x copy us", "runs", "finite", "SM MHz");
}

static void print_row(const bench_row *r, double copy_gbps, FILE *csv)
{
    double n = (double)(r->size.batch * r->size.channels * r->size.length);
    double size = (double)tg_dtype_size(r->dtype);
    double fwd_pct = r->fwd.ok ? percent_of_copy(2 * n * size, r->fwd.median_us, copy_gbps) : NAN;
    double both_pct = r->fwd_bwd.ok ? percent_of_copy(5 * n * size, r->fwd_bwd.median_us, copy_gbps) : NAN;
    char shape[48];
    snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)r->size.batch, (long long)r->size.channels,
             (long long)r->size.length);
    printf("%-15s %-5s %-3s %2lld %10.1f %7.1f %11.1f %7.1f %9.1f %4d/%-4d %7s %7.0f\n", shape, tg_dtype_name(r->dtype),
           layout_names[r->layout], (long long)r->width, r->fwd.ok ? r->fwd.median_us : NAN, fwd_pct,
           r->fwd_bwd.ok ? r->fwd_bwd.median_us : NAN, both_pct, r->x_copy_us, r->fwd.runs, r->fwd_bwd.runs,
           finite_word(r->non_finite), r->fwd_bwd.clocks.median_mhz);
    const unsigned long long reasons = r->fwd.clocks.reasons | r->fwd_bwd.clocks.reasons;
    const char *held_by = bench_clock_reason_words(reasons);
    if (*held_by) printf("    clocks held down by: %s\n", held_by);
    if (!r->fwd.ok) printf("    forward failed: %s\n", r->fwd.error);
    if (!r->fwd_bwd.ok) printf("    forward+backward failed: %s\n", r->fwd_bwd.error);
    if (r->non_finite > 0) printf("    %lld non-finite or unwritten elements\n", (long long)r->non_finite);
    if (!csv) return;
    const char *status = !r->fwd.ok           ? r->fwd.error
                         : !r->fwd_bwd.ok     ? r->fwd_bwd.error
                         : r->non_finite != 0 ? "not finite"
                                              : "ok";
    fprintf(
        csv,
        "%lld,%lld,%lld,%s,%s,%lld,%.2f,%.2f,%.2f,%d,%.1f,%.2f,%.2f,%.2f,%d,%.1f,%s,%.1f,%.2f,%.0f,%.0f,%.0f,%#llx,%s\n",
        (long long)r->size.batch, (long long)r->size.channels, (long long)r->size.length, tg_dtype_name(r->dtype),
        layout_names[r->layout], (long long)r->width, r->fwd.median_us, r->fwd.q1_us, r->fwd.q3_us, r->fwd.runs,
        fwd_pct, r->fwd_bwd.median_us, r->fwd_bwd.q1_us, r->fwd_bwd.q3_us, r->fwd_bwd.runs, both_pct,
        finite_word(r->non_finite), copy_gbps, r->x_copy_us, r->fwd.clocks.median_mhz, r->fwd_bwd.clocks.median_mhz,
        r->fwd_bwd.clocks.min_mhz, reasons, status);
    fflush(csv);
}

static int64_t check_finite(const bench_case *c, uint8_t *host)
{
    const tg_tensor *checked[4] = {c->out[0], c->dx[0], c->dweight, c->dbias};
    int64_t bad = 0;
    for (int i = 0; i < 4; i++) {
        int64_t n = count_non_finite(checked[i], host);
        if (n < 0) return -1;
        bad += n;
    }
    return bad;
}

/* All widths of one (size, dtype, layout), counting the rows that failed; false when the
 * device is in an error state (after a faulting kernel, nothing more can run). */
static bool bench_case_rows(tg_tape *tape, tg_rng *rng, bench_size s, tg_dtype dtype, bench_layout layout,
                            size_t l2_bytes, double copy_gbps, uint8_t *host, const bench_options *o, FILE *csv,
                            int *failed_rows)
{
    bench_case c = {0};
    bool made = make_sets(tape, rng, &c, dtype, s, layout, l2_bytes);
    bench_timing x_copy = made ? bench_time_runs(run_x_copy, &c, c.sets, &o->runs) : bench_timing_failed("no sets");
    /* --width K measures that K alone, also one outside the default list (e.g. 16). */
    const int64_t *widths = o->only_width ? &o->only_width : bench_widths;
    const int count = o->only_width ? 1 : COUNT_OF(bench_widths);
    for (int k = 0; k < count; k++) {
        bench_row r = {.size = s,
                       .dtype = dtype,
                       .layout = layout,
                       .width = widths[k],
                       .non_finite = -1,
                       .x_copy_us = x_copy.ok ? x_copy.median_us : NAN};
        if (!made || !make_parameters(tape, rng, &c, dtype, s.channels, r.width)) {
            r.fwd = r.fwd_bwd = bench_timing_failed(tg_last_error());
        } else {
            r.fwd = bench_time_runs(run_forward, &c, c.sets, &o->runs);
            r.fwd_bwd = bench_time_runs(run_forward_backward, &c, c.sets, &o->runs);
            if (r.fwd_bwd.ok) r.non_finite = check_finite(&c, host);
        }
        print_row(&r, copy_gbps, csv);
        if (!r.fwd.ok || !r.fwd_bwd.ok || r.non_finite != 0) (*failed_rows)++;
        if (!bench_cuda_ok(cudaDeviceSynchronize(), "after a row")) return false;
    }
    return true;
}

/* ---- main ------------------------------------------------------------------------------------------ */

static bool selected(const bench_options *o, tg_dtype dtype, bench_layout layout)
{
    return (!o->only_dtype || !strcmp(o->only_dtype, tg_dtype_name(dtype))) &&
           (!o->only_layout || !strcmp(o->only_layout, layout_names[layout]));
}

/* "BxCxL" with each part positive. */
static bool parse_size(const char *text, bench_size *s)
{
    long long b, c, l;
    char tail;
    if (sscanf(text, "%lldx%lldx%lld%c", &b, &c, &l, &tail) != 3 || b < 1 || c < 1 || l < 1) return false;
    *s = (bench_size){b, c, l};
    return true;
}

static void usage(void)
{
    fprintf(stderr, "usage: conv1d_bench [--quick] [--csv FILE] [--runs N] [--budget-ms MS]\n"
                    "  --quick        few runs: a smoke test, not a measurement\n"
                    "  --csv FILE     also write one machine-readable row per case\n"
                    "  --runs N       timed runs per measurement (default 100)\n"
                    "  --budget-ms MS device time one measurement may take before it gets fewer runs\n"
                    "                 (default 1500; never fewer than 10 runs)\n"
                    "  --size BxCxL   this size instead of the table's three (any size)\n"
                    "  --dtype f32|bf16, --layout cf|cl, --width K (any K up to 16)\n"
                    "                 run only the matching rows (e.g. under a profiler)\n");
}

static bool parse_options(int argc, char **argv, bench_options *o)
{
    *o = (bench_options){.runs = {.max_runs = 100, .min_runs = 10, .warmup = 3, .budget_ms = 1500.0}};
    for (int i = 1; i < argc; i++) {
        bool has_value = i + 1 < argc;
        if (!strcmp(argv[i], "--quick")) {
            o->runs = (bench_policy){.max_runs = 5, .min_runs = 2, .warmup = 1, .budget_ms = 100.0};
        } else if (!strcmp(argv[i], "--csv") && has_value) {
            o->csv_path = argv[++i];
        } else if (!strcmp(argv[i], "--runs") && has_value) {
            o->runs.max_runs = atoi(argv[++i]);
            if (o->runs.max_runs < 1 || o->runs.max_runs > BENCH_MAX_RUNS) return false;
            if (o->runs.min_runs > o->runs.max_runs) o->runs.min_runs = o->runs.max_runs;
        } else if (!strcmp(argv[i], "--size") && has_value) {
            if (!parse_size(argv[++i], &o->size)) return false;
            o->one_size = true;
        } else if (!strcmp(argv[i], "--dtype") && has_value) {
            o->only_dtype = argv[++i];
        } else if (!strcmp(argv[i], "--layout") && has_value) {
            o->only_layout = argv[++i];
        } else if (!strcmp(argv[i], "--width") && has_value) {
            o->only_width = atoll(argv[++i]);
            if (o->only_width < 1) return false;
        } else if (!strcmp(argv[i], "--budget-ms") && has_value) {
            o->runs.budget_ms = atof(argv[++i]);
            if (!(o->runs.budget_ms > 0)) return false;
        } else {
            return false;
        }
    }
    return true;
}

static FILE *open_csv(const char *path)
{
    if (!path) return NULL;
    FILE *csv = fopen(path, "w");
    if (!csv) {
        perror(path);
        return NULL;
    }
    fprintf(csv, "B,C,L,dtype,layout,K,fwd_us,fwd_q1_us,fwd_q3_us,fwd_runs,fwd_pct_copy,fwdbwd_us,fwdbwd_q1_us,"
                 "fwdbwd_q3_us,fwdbwd_runs,fwdbwd_pct_copy,finite,copy_GBps,xcopy_us,fwd_sm_mhz,fwdbwd_sm_mhz,"
                 "fwdbwd_sm_mhz_min,clock_reasons,status\n");
    return csv;
}

int main(int argc, char **argv)
{
    bench_options o;
    if (!parse_options(argc, argv, &o)) {
        usage();
        return 2;
    }
    if (!tg_device_available(TG_DEVICE_CUDA)) {
        fprintf(stderr, "conv1d_bench: no usable CUDA device\n");
        return 2;
    }
    struct cudaDeviceProp prop;
    if (!bench_init("conv1d_bench") || !bench_cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"))
        return 1;
    uint8_t *host = NULL;
    if (!bench_cuda_ok(cudaMallocHost((void **)&host, HOST_CHUNK_BYTES), "cudaMallocHost")) return 1;
    FILE *csv = open_csv(o.csv_path);
    if (o.csv_path && !csv) return 1;

    uint64_t seed = bench_clock_seed(); /* fresh inputs every run */
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    tg_tape *tape = tg_tape_create();
    double started = bench_seconds();

    double copy_gbps = bench_copy_bandwidth(tape, &rng, o.runs.max_runs < 30 ? o.runs.max_runs : 30);
    tg_tape_reset(tape);
    tg_memory_empty_cache();
    printf("device: %s, %d SMs, %.0f MiB L2; seed %llu; runs ≤ %d per measurement, budget %.0f ms\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize / 1048576.0, (unsigned long long)seed, o.runs.max_runs,
           o.runs.budget_ms);
    printf("copy bandwidth (device to device, 1 GiB, read + write): %.1f GB/s\n", copy_gbps);
    printf("SM clock: at most %.0f MHz; \"SM MHz\" is the median read while a row's forward + backward ran "
           "(NVML; nan where it cannot be read)\n\n",
           bench_max_sm_mhz());
    print_header();

    bool device_ok = isfinite(copy_gbps);
    int failed_rows = 0;
    const bench_size *sizes = o.one_size ? &o.size : bench_sizes;
    const int size_count = o.one_size ? 1 : COUNT_OF(bench_sizes);
    for (int si = 0; device_ok && si < size_count; si++)
        for (int di = 0; device_ok && di < COUNT_OF(bench_dtypes); di++)
            for (int li = 0; device_ok && li < LAYOUT_COUNT; li++) {
                if (!selected(&o, bench_dtypes[di], (bench_layout)li)) continue;
                device_ok = bench_case_rows(tape, &rng, sizes[si], bench_dtypes[di], (bench_layout)li,
                                            (size_t)prop.l2CacheSize, copy_gbps, host, &o, csv, &failed_rows);
                tg_tape_reset(tape);
                tg_memory_empty_cache();
            }
    printf("\nelapsed %.1f s; %d rows failed%s\n", bench_seconds() - started, failed_rows,
           device_ok ? "" : "; stopped early: the device is in an error state");

    if (csv) fclose(csv);
    tg_tape_free(tape);
    cudaFreeHost(host);
    return device_ok && failed_rows == 0 ? 0 : 1;
}
