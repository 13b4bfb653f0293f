/* bench/scan_accuracy.c: how far the selective scan's float paths land from float64 on long
 * sequences with parameters like a trained model's.
 *
 *   scan_accuracy [--lengths 4096,8192,16384] [--batch B] [--channels D] [--states N] [--seed S]
 *
 * Inputs (drawn once per length, in double): u, z, Bm, Cm and the upstream gradient standard
 * normal; A = −exp(log(n + 1) + 0.5·ε), so |A| spans about 0.4 to 40; delta = 0.5·ε; and the
 * channels in three equal groups by their delta_bias, which sets dt = softplus(delta + bias):
 * long memory (dt about 1e-4 to 1e-3, so a state keeps most of itself over thousands of
 * steps and the decay products are long), Mamba's initial range (dt about 1e-3 to 0.1), and
 * fast (dt about 1 to 10, a state forgets within a step or two). The gate, the skip Dv and
 * softplus are on, as in a Mamba layer.
 *
 * The scan runs forward and backward in f64 on the CPU (the reference: it computes in
 * double), then in f32 and bf16 on the CPU and, in CUDA builds with a GPU, on the GPU (whose
 * exponentials are the hardware's fast ex2). Each output and gradient is compared with the
 * reference as max|x − ref| / max|ref| (the error against the tensor's scale), and the output
 * and du also per channel group. bf16 inputs are the f64 ones rounded, so their error includes
 * that rounding. Output: one CSV line per (length, path, tensor, group):
 *   L,path,tensor,group,rel_max_err
 * and the program fails if any value is not finite. */
#include "tapegrad/autograd.h"
#include "tapegrad/ops.h"
#include "tapegrad/rng.h"
#include "tapegrad/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GROUPS = 3, INPUTS = 8 };
static const char *const group_names[GROUPS] = {"long-memory", "initial-range", "fast"};

/* The scan's inputs, in the order of the op's arguments then options. */
enum { U, DELTA, A, BM, CM, DV, Z, BIAS };
static const char *const input_names[INPUTS] = {"u", "delta", "A", "Bm", "Cm", "Dv", "z", "delta_bias"};

typedef struct {
    int64_t B, D, N, L;
    double *host[INPUTS], *dout;
    int64_t shape[INPUTS][3];
    int ndim[INPUTS];
} problem;

/* What a run gives back, in double: the output, then each input's gradient. */
typedef struct {
    double *out, *grad[INPUTS];
} result;

static int64_t count_of(const problem *p, int i)
{
    int64_t n = 1;
    for (int d = 0; d < p->ndim[i]; d++) n *= p->shape[i][d];
    return n;
}

static double normal(tg_rng *rng)
{
    const double u1 = 1.0 - tg_rng_uniform(rng), u2 = tg_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static int group_of(const problem *p, int64_t d) { return (int)(d * GROUPS / p->D); }

/* log(e^dt − 1): the bias that gives dt through softplus when delta is 0. */
static double softplus_inverse(double dt) { return dt > 20 ? dt : log(expm1(dt)); }

static void set_shape(problem *p, int i, int ndim, int64_t a, int64_t b, int64_t c)
{
    p->ndim[i] = ndim;
    p->shape[i][0] = a, p->shape[i][1] = b, p->shape[i][2] = c;
}

static problem make_problem(int64_t B, int64_t D, int64_t N, int64_t L, uint64_t seed)
{
    problem p = {.B = B, .D = D, .N = N, .L = L};
    set_shape(&p, U, 3, B, D, L), set_shape(&p, DELTA, 3, B, D, L), set_shape(&p, Z, 3, B, D, L);
    set_shape(&p, BM, 3, B, N, L), set_shape(&p, CM, 3, B, N, L), set_shape(&p, A, 2, D, N, 0);
    set_shape(&p, DV, 1, D, 0, 0), set_shape(&p, BIAS, 1, D, 0, 0);
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    for (int i = 0; i < INPUTS; i++) {
        const int64_t n = count_of(&p, i);
        p.host[i] = malloc(sizeof(double) * (size_t)n);
        for (int64_t k = 0; k < n; k++) p.host[i][k] = normal(&rng);
    }
    p.dout = malloc(sizeof(double) * (size_t)(B * D * L));
    for (int64_t k = 0; k < B * D * L; k++) p.dout[k] = normal(&rng);
    for (int64_t k = 0; k < B * D * L; k++) p.host[DELTA][k] *= 0.5;
    static const double log10_dt[GROUPS][2] = {{-4, -3}, {-3, -1}, {0, 1}};
    for (int64_t d = 0; d < D; d++) {
        const int g = group_of(&p, d);
        const double lo = log10_dt[g][0], hi = log10_dt[g][1];
        p.host[BIAS][d] = softplus_inverse(pow(10.0, lo + (hi - lo) * tg_rng_uniform(&rng)));
        for (int64_t n = 0; n < N; n++) p.host[A][d * N + n] = -exp(log((double)n + 1) + 0.5 * normal(&rng));
    }
    return p;
}

static void free_problem(problem *p)
{
    for (int i = 0; i < INPUTS; i++) free(p->host[i]);
    free(p->dout);
}

static void free_result(result *r)
{
    free(r->out);
    for (int i = 0; i < INPUTS; i++) free(r->grad[i]);
    *r = (result){0};
}

static tg_tensor *upload(tg_tape *tape, const double *host, int ndim, const int64_t *shape, tg_dtype dtype,
                         tg_device device)
{
    tg_tensor *t = tg_empty(tape, dtype, device, ndim, shape);
    if (!t || tg_copy_from_host(t, host, TG_F64) != TG_OK) return NULL;
    return t;
}

static double *download(const tg_tensor *t)
{
    double *host = malloc(sizeof(double) * (size_t)tg_numel(t));
    if (host && tg_copy_to_host(t, host, TG_F64) != TG_OK) {
        free(host);
        return NULL;
    }
    return host;
}

/* The scan forward and backward in dtype on device; false (message printed) on failure. */
static bool run_scan(const problem *p, tg_dtype dtype, tg_device device, result *r)
{
    *r = (result){0};
    tg_tape *tape = tg_tape_create();
    tg_tensor *in[INPUTS];
    bool ok = tape != NULL;
    for (int i = 0; ok && i < INPUTS; i++) {
        in[i] = upload(tape, p->host[i], p->ndim[i], p->shape[i], dtype, device);
        ok = in[i] && tg_set_requires_grad(in[i], true) == TG_OK;
    }
    tg_tensor *out = NULL, *dout = NULL;
    if (ok) {
        const tg_selective_scan_options options = {
            .Dv = in[DV], .z = in[Z], .delta_bias = in[BIAS], .delta_softplus = true};
        out = tg_selective_scan(tape, in[U], in[DELTA], in[A], in[BM], in[CM], &options);
        dout = upload(tape, p->dout, 3, p->shape[U], dtype, device);
        ok = out && dout && tg_backward_with_grad(tape, out, dout) == TG_OK;
    }
    if (ok) r->out = download(out);
    for (int i = 0; ok && i < INPUTS; i++) ok = (r->grad[i] = download(in[i]->grad)) != NULL;
    if (!ok) {
        fprintf(stderr, "scan_accuracy: %s on %s: %s\n", tg_dtype_name(dtype), tg_device_name(device), tg_last_error());
        free_result(r);
    }
    tg_tape_free(tape);
    return ok;
}

/* max|x − ref| / max|ref| over the elements whose channel is in `group` (−1: all). Elements
 * of a (B, D, L) tensor have channel (k / L) % D; other tensors are taken whole. NaN if any
 * x is not finite. */
static double relative_error(const problem *p, const double *x, const double *ref, int64_t n, bool per_channel,
                             int group)
{
    double err = 0, scale = 0;
    for (int64_t k = 0; k < n; k++) {
        if (per_channel && group >= 0 && group_of(p, (k / p->L) % p->D) != group) continue;
        if (!isfinite(x[k])) return NAN;
        err = fmax(err, fabs(x[k] - ref[k]));
        scale = fmax(scale, fabs(ref[k]));
    }
    return scale > 0 ? err / scale : err;
}

/* Prints one path's lines; false if a value was not finite. */
static bool report(const problem *p, const char *path, const result *r, const result *ref)
{
    bool finite = true;
    const int64_t n_seq = p->B * p->D * p->L;
    for (int g = -1; g < GROUPS; g++) {
        const double e_out = relative_error(p, r->out, ref->out, n_seq, true, g);
        const double e_du = relative_error(p, r->grad[U], ref->grad[U], n_seq, true, g);
        const char *name = g < 0 ? "all" : group_names[g];
        printf("%lld,%s,out,%s,%.3e\n", (long long)p->L, path, name, e_out);
        printf("%lld,%s,du,%s,%.3e\n", (long long)p->L, path, name, e_du);
        finite = finite && isfinite(e_out) && isfinite(e_du);
    }
    for (int i = 0; i < INPUTS; i++) {
        if (i == U) continue;
        const double e = relative_error(p, r->grad[i], ref->grad[i], count_of(p, i), false, -1);
        printf("%lld,%s,d%s,all,%.3e\n", (long long)p->L, path, input_names[i], e);
        finite = finite && isfinite(e);
    }
    return finite;
}

static bool parse_lengths(const char *text, int64_t *lengths, int *count)
{
    *count = 0;
    for (const char *s = text; *s && *count < 16;) {
        char *end;
        const long long v = strtoll(s, &end, 10);
        if (end == s || v < 1) return false;
        lengths[(*count)++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return false;
    }
    return *count > 0;
}

int main(int argc, char **argv)
{
    int64_t lengths[16] = {4096, 8192, 16384}, B = 2, D = 48, N = 16;
    int n_lengths = 3;
    unsigned long long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = value != NULL;
        if (ok && !strcmp(argv[i], "--lengths"))
            ok = parse_lengths(value, lengths, &n_lengths);
        else if (ok && !strcmp(argv[i], "--batch"))
            ok = (B = strtoll(value, NULL, 10)) > 0;
        else if (ok && !strcmp(argv[i], "--channels"))
            ok = (D = strtoll(value, NULL, 10)) >= GROUPS;
        else if (ok && !strcmp(argv[i], "--states"))
            ok = (N = strtoll(value, NULL, 10)) > 0 && N <= 16;
        else if (ok && !strcmp(argv[i], "--seed"))
            seed = strtoull(value, NULL, 10);
        else
            ok = false;
        if (!ok) {
            fprintf(stderr, "usage: scan_accuracy [--lengths L,...] [--batch B] [--channels D >= 3] [--states N <= 16] "
                            "[--seed S]\n");
            return 2;
        }
        i++;
    }
    const bool gpu = tg_device_available(TG_DEVICE_CUDA);
    printf("# selective scan against float64: B %lld, D %lld, N %lld, seed %llu; CUDA %s\n", (long long)B, (long long)D,
           (long long)N, seed, gpu ? "on" : "not available");
    printf("L,path,tensor,group,rel_max_err\n");
    bool ok = true;
    for (int l = 0; ok && l < n_lengths; l++) {
        problem p = make_problem(B, D, N, lengths[l], seed + (uint64_t)l);
        result ref;
        ok = run_scan(&p, TG_F64, TG_DEVICE_CPU, &ref);
        const struct {
            const char *name;
            tg_dtype dtype;
            tg_device device;
        } paths[] = {{"cpu-f32", TG_F32, TG_DEVICE_CPU},
                     {"cpu-bf16", TG_BF16, TG_DEVICE_CPU},
                     {"cuda-f32", TG_F32, TG_DEVICE_CUDA},
                     {"cuda-bf16", TG_BF16, TG_DEVICE_CUDA}};
        for (size_t k = 0; ok && k < sizeof paths / sizeof paths[0]; k++) {
            if (paths[k].device == TG_DEVICE_CUDA && !gpu) continue;
            result r;
            ok = run_scan(&p, paths[k].dtype, paths[k].device, &r);
            if (ok) ok = report(&p, paths[k].name, &r, &ref);
            free_result(&r);
        }
        free_result(&ref);
        free_problem(&p);
    }
    if (!ok) fprintf(stderr, "scan_accuracy: failed (a run failed or gave a value that is not finite)\n");
    return ok ? 0 : 1;
}
