/* bench/scan_bench.c: times the CUDA selective scan kernels.
 *
 *   scan_bench [--quick] [--runs N] [--spans LIST] [--size BxDxNxL] [--dtype f32|bf16] [--chunk N]
 *
 * Cases (B, D, N, L): the training programs' scans (8, 128, 16, 256), (32, 512, 16, 256),
 * (64, 128, 16, 4096) and (8, 1536, 16, 2048), and (16, 768, 16, 1024) and (2, 768, 16, 4096),
 * in f32 and bf16, with the gate z, the skip Dv and delta_bias + softplus on, no initial or
 * final state, and the op's default chunk (64). "fwd" is the forward as training runs it (the
 * chunk states are written); "fwd+bwd" is that forward followed by the backward with every
 * gradient. The kernel entry points are called directly (no tape) on inputs drawn with cuRAND.
 *
 * How it measures (bench/bench_cuda.h, as bench/conv1d_bench.c): each case rotates among
 * enough input sets that their u tensors alone exceed 4× the L2 cache; after a warm-up the
 * runs are queued back to back with a CUDA event between each two, and the median interval
 * is reported. The outputs
 * and gradients of the first set start as NaN, and the case fails unless all are finite
 * afterwards. The floor is the bytes a kernel must move (read u, delta, z, Bm, Cm, write out
 * and the chunk states; the backward also reads dout and writes du, ddelta, dz, dBm, dCm)
 * over the device-to-device copy bandwidth measured at the start.
 *
 * --size, --dtype and --chunk time one case instead of the list (for a profiler, say) and set
 * the chunk (the steps between the saved states; the backward reruns the forward inside it).
 *
 * --spans 0,2,4 times each case once per entry: 0 lets the kernels choose how many spans to
 * cut the sequence into (the default, impl "tapegrad"), N forces N (impl "tapegrad-spansN").
 *
 * Output: '#' lines describe the device, the floors and the spans each case ran with; then CSV,
 * one line per case:
 *   impl,B,D,N,L,dtype,fwd_us,fwdbwd_us,status
 * bench/scan_peers.py prints the same columns for its PyTorch peers. */
#include "bench/bench_cuda.h"
#include "kernels/scan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SETS 8
#define DEFAULT_CHUNK 64

typedef struct {
    int64_t B, D, N, L;
} scan_size;

static const scan_size bench_sizes[] = {{8, 128, 16, 256},   {32, 512, 16, 256},  {64, 128, 16, 4096},
                                        {8, 1536, 16, 2048}, {16, 768, 16, 1024}, {2, 768, 16, 4096}};
static const tg_dtype bench_dtypes[] = {TG_F32, TG_BF16};

#define COUNT_OF(a) BENCH_COUNT_OF(a)

/* One case: the rotating input sets (and their outputs), the per-channel parameters, the
 * chunk states and the gradients (shared by the sets: each run writes all of them). */
typedef struct {
    scan_size size;
    tg_dtype dtype;
    int64_t chunk;
    int sets;
    tg_tensor *u[MAX_SETS], *delta[MAX_SETS], *z[MAX_SETS], *Bm[MAX_SETS], *Cm[MAX_SETS], *dout[MAX_SETS],
        *out[MAX_SETS];
    tg_tensor *A, *Dv, *bias, *states;
    tg_scan_grads grads;
} bench_case;

/* ---- the runs ----------------------------------------------------------------------------- */

static tg_scan_args args_for(const bench_case *c, int set)
{
    return (tg_scan_args){c->u[set], c->delta[set], c->A, c->Bm[set], c->Cm[set], c->Dv,
                          c->z[set], c->bias,       NULL, true,       c->chunk};
}

static tg_status run_forward(const void *context, int set)
{
    const bench_case *c = context;
    tg_scan_args a = args_for(c, set);
    return tg_cuda_selective_scan_fwd(&a, c->out[set], NULL, c->states);
}

static tg_status run_forward_backward(const void *context, int set)
{
    const bench_case *c = context;
    tg_scan_args a = args_for(c, set);
    tg_status status = tg_cuda_selective_scan_fwd(&a, c->out[set], NULL, c->states);
    if (status != TG_OK) return status;
    return tg_cuda_selective_scan_bwd(&a, c->states, c->dout[set], NULL, &c->grads);
}

/* ---- making a case -------------------------------------------------------------------------- */

static tg_tensor *device_tensor(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape)
{
    return tg_empty(tape, dtype, TG_DEVICE_CUDA, ndim, shape);
}

/* Inputs in the ranges of a Mamba layer: delta + bias around softplus⁻¹ of small steps,
 * A = −uniform(0.5, 16) (as −exp(A_log) with A_log = log(1 … 16)), Dv around 1. */
static bool make_case(tg_tape *tape, tg_rng *rng, bench_case *c, scan_size s, tg_dtype dtype, int64_t chunk,
                      size_t l2_bytes)
{
    memset(c, 0, sizeof *c);
    c->size = s;
    c->dtype = dtype;
    c->chunk = chunk;
    const int64_t bdl[3] = {s.B, s.D, s.L}, bnl[3] = {s.B, s.N, s.L}, dn[2] = {s.D, s.N};
    const int64_t states_shape[4] = {s.B, s.D, s.N, (s.L - 1) / chunk + 1};
    size_t u_bytes = (size_t)(s.B * s.D * s.L) * tg_dtype_size(dtype);
    c->sets = bench_sets_needed(u_bytes, l2_bytes, MAX_SETS);
    for (int i = 0; i < c->sets; i++) {
        c->u[i] = device_tensor(tape, dtype, 3, bdl);
        c->delta[i] = device_tensor(tape, dtype, 3, bdl);
        c->z[i] = device_tensor(tape, dtype, 3, bdl);
        c->dout[i] = device_tensor(tape, dtype, 3, bdl);
        c->out[i] = device_tensor(tape, dtype, 3, bdl);
        c->Bm[i] = device_tensor(tape, dtype, 3, bnl);
        c->Cm[i] = device_tensor(tape, dtype, 3, bnl);
        if (!c->u[i] || !c->delta[i] || !c->z[i] || !c->dout[i] || !c->out[i] || !c->Bm[i] || !c->Cm[i]) return false;
        if (tg_fill_normal(c->u[i], rng, 0.0, 1.0) != TG_OK || tg_fill_normal(c->delta[i], rng, -4.0, 1.0) != TG_OK ||
            tg_fill_normal(c->z[i], rng, 0.0, 1.0) != TG_OK || tg_fill_normal(c->dout[i], rng, 0.0, 1.0) != TG_OK ||
            tg_fill_normal(c->Bm[i], rng, 0.0, 1.0) != TG_OK || tg_fill_normal(c->Cm[i], rng, 0.0, 1.0) != TG_OK)
            return false;
    }
    c->A = device_tensor(tape, dtype, 2, dn);
    c->Dv = device_tensor(tape, dtype, 1, &s.D);
    c->bias = device_tensor(tape, dtype, 1, &s.D);
    c->states = device_tensor(tape, TG_F32, 4, states_shape);
    tg_scan_grads *g = &c->grads;
    g->du = device_tensor(tape, dtype, 3, bdl);
    g->ddelta = device_tensor(tape, dtype, 3, bdl);
    g->dz = device_tensor(tape, dtype, 3, bdl);
    g->dA = device_tensor(tape, dtype, 2, dn);
    g->dBm = device_tensor(tape, dtype, 3, bnl);
    g->dCm = device_tensor(tape, dtype, 3, bnl);
    g->dDv = device_tensor(tape, dtype, 1, &s.D);
    g->ddelta_bias = device_tensor(tape, dtype, 1, &s.D);
    tg_tensor *poisoned[] = {c->out[0], g->du, g->ddelta, g->dz, g->dA, g->dBm, g->dCm, g->dDv, g->ddelta_bias};
    for (int i = 0; i < COUNT_OF(poisoned); i++)
        if (!poisoned[i] || tg_fill(poisoned[i], NAN) != TG_OK) return false;
    return c->A && c->Dv && c->bias && c->states && tg_fill_uniform(c->A, rng, -16.0, -0.5) == TG_OK &&
           tg_fill_normal(c->Dv, rng, 1.0, 0.1) == TG_OK && tg_fill_normal(c->bias, rng, 0.0, 0.5) == TG_OK;
}

/* Non-finite (or never written) elements among the first set's output and the gradients;
 * -1 when they cannot be read back. */
static int64_t non_finite(const bench_case *c)
{
    const tg_scan_grads *g = &c->grads;
    const tg_tensor *checked[] = {c->out[0], g->du, g->ddelta, g->dz, g->dA, g->dBm, g->dCm, g->dDv, g->ddelta_bias};
    int64_t bad = 0;
    for (int i = 0; i < COUNT_OF(checked); i++) {
        int64_t n = tg_numel(checked[i]);
        float *host = malloc(sizeof(float) * (size_t)n);
        if (!host || tg_copy_to_host(checked[i], host, TG_F32) != TG_OK) {
            free(host);
            return -1;
        }
        for (int64_t j = 0; j < n; j++) bad += !isfinite(host[j]);
        free(host);
    }
    return bad;
}

/* Bytes the kernels must move at the least (see the top of this file). */
static void floor_bytes(scan_size s, tg_dtype dtype, int64_t chunk, double *fwd, double *bwd)
{
    double size = (double)tg_dtype_size(dtype), bdl = (double)(s.B * s.D * s.L), bnl = (double)(s.B * s.N * s.L);
    double states = (double)(s.B * s.D * s.N * ((s.L - 1) / chunk + 1)) * 4.0;
    *fwd = (4 * bdl + 2 * bnl) * size + states;
    *bwd = (7 * bdl + 4 * bnl) * size + states;
}

/* ---- main ------------------------------------------------------------------------------------ */

#define MAX_SPAN_SETTINGS 9

typedef struct {
    int count, values[MAX_SPAN_SETTINGS];
} span_settings;

/* "0,2,4": the span counts to time each case with (0: the kernels' choice). */
static bool parse_spans(const char *text, span_settings *spans)
{
    spans->count = 0;
    while (*text && spans->count < MAX_SPAN_SETTINGS) {
        char *end;
        long v = strtol(text, &end, 10);
        if (end == text || v < 0 || v > 8 || (*end && *end != ',')) return false;
        spans->values[spans->count++] = (int)v;
        text = *end ? end + 1 : end;
    }
    return spans->count > 0 && !*text;
}

/* The cases to time: the list above in both dtypes, or one picked on the command line. */
typedef struct {
    scan_size sizes[COUNT_OF(bench_sizes)];
    tg_dtype dtypes[COUNT_OF(bench_dtypes)];
    int n_sizes, n_dtypes;
    int64_t chunk;
} case_list;

static bool parse_size(const char *text, scan_size *s)
{
    long long b, d, n, l;
    char tail;
    if (sscanf(text, "%lldx%lldx%lldx%lld%c", &b, &d, &n, &l, &tail) != 4) return false;
    *s = (scan_size){b, d, n, l};
    return b > 0 && d > 0 && n > 0 && l > 0;
}

static bool parse_options(int argc, char **argv, bench_policy *o, span_settings *spans, case_list *cases)
{
    *o = (bench_policy){.max_runs = 100, .min_runs = 10, .warmup = 3, .budget_ms = 2000.0};
    *spans = (span_settings){1, {0}};
    *cases = (case_list){.n_sizes = COUNT_OF(bench_sizes), .n_dtypes = COUNT_OF(bench_dtypes), .chunk = DEFAULT_CHUNK};
    memcpy(cases->sizes, bench_sizes, sizeof bench_sizes);
    memcpy(cases->dtypes, bench_dtypes, sizeof bench_dtypes);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            *o = (bench_policy){.max_runs = 5, .min_runs = 2, .warmup = 1, .budget_ms = 100.0};
        } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            o->max_runs = atoi(argv[++i]);
            if (o->max_runs < 1 || o->max_runs > BENCH_MAX_RUNS) return false;
            if (o->min_runs > o->max_runs) o->min_runs = o->max_runs;
        } else if (!strcmp(argv[i], "--spans") && i + 1 < argc) {
            if (!parse_spans(argv[++i], spans)) return false;
        } else if (!strcmp(argv[i], "--size") && i + 1 < argc) {
            if (!parse_size(argv[++i], &cases->sizes[0])) return false;
            cases->n_sizes = 1;
        } else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            const char *name = argv[++i];
            if (strcmp(name, "f32") && strcmp(name, "bf16")) return false;
            cases->dtypes[0] = strcmp(name, "f32") ? TG_BF16 : TG_F32;
            cases->n_dtypes = 1;
        } else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) {
            cases->chunk = atoll(argv[++i]);
            if (cases->chunk < 1) return false;
        } else {
            return false;
        }
    }
    return true;
}

int main(int argc, char **argv)
{
    bench_policy o;
    span_settings spans;
    case_list cases;
    if (!parse_options(argc, argv, &o, &spans, &cases)) {
        fprintf(stderr, "usage: scan_bench [--quick] [--runs N] [--spans N,N,... (0 … 8)] [--size BxDxNxL] "
                        "[--dtype f32|bf16] [--chunk N]\n");
        return 2;
    }
    if (!tg_device_available(TG_DEVICE_CUDA)) {
        fprintf(stderr, "scan_bench: no usable CUDA device\n");
        return 2;
    }
    struct cudaDeviceProp prop;
    if (!bench_init("scan_bench") || !bench_cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"))
        return 1;
    uint64_t seed = bench_clock_seed();
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    tg_tape *tape = tg_tape_create();

    double copy_gbps = bench_copy_bandwidth(tape, &rng, 20);
    tg_tape_reset(tape);
    tg_memory_empty_cache();
    printf("# device: %s, %d SMs, %.0f MiB L2; seed %llu; copy bandwidth (1 GiB, read + write) %.1f GB/s\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize / 1048576.0, (unsigned long long)seed, copy_gbps);
    printf("# tapegrad: z, Dv, delta_bias + softplus on, chunk %lld; fwd keeps the chunk states\n",
           (long long)cases.chunk);
    printf("impl,B,D,N,L,dtype,fwd_us,fwdbwd_us,status\n");
    fflush(stdout);

    int failed = 0;
    bool device_ok = isfinite(copy_gbps);
    for (int si = 0; device_ok && si < cases.n_sizes; si++)
        for (int di = 0; device_ok && di < cases.n_dtypes; di++)
            for (int pi = 0; device_ok && pi < spans.count; pi++) {
                scan_size s = cases.sizes[si];
                tg_dtype dtype = cases.dtypes[di];
                char impl[32] = "tapegrad";
                if (spans.values[pi]) snprintf(impl, sizeof impl, "tapegrad-spans%d", spans.values[pi]);
                tg_cuda_scan_force_spans(spans.values[pi]);
                bench_case c;
                bench_timing fwd, both;
                int64_t bad = -1;
                if (!make_case(tape, &rng, &c, s, dtype, cases.chunk, (size_t)prop.l2CacheSize)) {
                    fwd = both = bench_timing_failed(tg_last_error());
                } else {
                    fwd = bench_time_runs(run_forward, &c, c.sets, &o);
                    both = bench_time_runs(run_forward_backward, &c, c.sets, &o);
                    if (both.ok) bad = non_finite(&c);
                }
                const char *status = !fwd.ok ? fwd.error : !both.ok ? both.error : bad != 0 ? "not finite" : "ok";
                printf("%s,%lld,%lld,%lld,%lld,%s,%.1f,%.1f,%s\n", impl, (long long)s.B, (long long)s.D, (long long)s.N,
                       (long long)s.L, tg_dtype_name(dtype), fwd.ok ? fwd.median_us : NAN,
                       both.ok ? both.median_us : NAN, status);
                double fwd_bytes, bwd_bytes;
                floor_bytes(s, dtype, cases.chunk, &fwd_bytes, &bwd_bytes);
                printf("#   floor: fwd %.1f MB (%.1f us at copy speed), fwd+bwd %.1f MB (%.1f us); runs %d/%d\n",
                       fwd_bytes / 1e6, fwd_bytes / copy_gbps / 1e3, (fwd_bytes + bwd_bytes) / 1e6,
                       (fwd_bytes + bwd_bytes) / copy_gbps / 1e3, fwd.runs, both.runs);
                int fwd_spans, bwd_spans;
                tg_cuda_scan_last_spans(&fwd_spans, &bwd_spans);
                printf("#   spans: fwd %d, bwd %d\n", fwd_spans, bwd_spans);
                fflush(stdout);
                if (strcmp(status, "ok") != 0) failed++;
                device_ok = bench_cuda_ok(cudaDeviceSynchronize(), "after a case");
                tg_tape_reset(tape);
                tg_memory_empty_cache();
            }
    tg_tape_free(tape);
    printf("# %d cases failed%s\n", failed, device_ok ? "" : "; stopped early: the device is in an error state");
    return failed == 0 && device_ok ? 0 : 1;
}
