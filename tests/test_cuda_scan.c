/* Selective scan on CUDA against the CPU kernel: output, final state and every gradient,
 * over edge shapes (L = 1, L not a multiple of the chunk or of the 16-step tile, one chunk
 * of many tiles, chunks that are not a multiple of 4, N = 1, 4, 16, D past one block of 32
 * channels), every option on and off, five layouts (contiguous, padded rows, strided,
 * channel-last, misaligned), f32, bf16 and f16, gradients asked for one input at a time,
 * a gradient reaching only the final state; sequences cut into spans (forced, and as the
 * kernels choose them for small grids); bitwise-repeatable gradients; and the clear errors
 * (mixed devices, f64, N > 16). Skipped without a GPU. */
#include "cuda_util.h"
#include "kernels/scan.h"

#include <stdio.h>

typedef enum {
    LAYOUT_CONTIGUOUS,
    LAYOUT_PADDED,
    LAYOUT_STRIDED,
    LAYOUT_CHANNEL_LAST,
    LAYOUT_MISALIGNED,
    LAYOUT_COUNT
} layout;
static const char *const layout_names[LAYOUT_COUNT] = {"contiguous", "padded", "strided", "channel-last", "misaligned"};

typedef struct {
    bool z, Dv, bias, softplus, initial, final;
    bool final_only; /* the loss reads only the final state: no gradient reaches out */
} features;

typedef struct {
    int64_t B, D, N, L, chunk;
    layout lay;
    tg_dtype dtype;
    features f;
} scan_case;

enum { IN_U, IN_DELTA, IN_A, IN_BM, IN_CM, IN_DV, IN_Z, IN_BIAS, IN_INIT, N_IN };
static const char *const input_names[N_IN] = {"du",  "ddelta", "dA",          "dBm",     "dCm",
                                              "dDv", "dz",     "ddelta_bias", "dinitial"};

static void describe(const scan_case *c, char *buf, size_t size)
{
    snprintf(buf, size, "scan B=%lld D=%lld N=%lld L=%lld chunk=%lld %s %s%s%s%s%s%s%s%s", (long long)c->B,
             (long long)c->D, (long long)c->N, (long long)c->L, (long long)c->chunk, layout_names[c->lay],
             tg_dtype_name(c->dtype), c->f.z ? " z" : "", c->f.Dv ? " Dv" : "", c->f.bias ? " bias" : "",
             c->f.softplus ? " softplus" : "", c->f.initial ? " initial" : "", c->f.final ? " final" : "",
             c->f.final_only ? " final-only" : "");
}

/* A random CPU (B, X, L) leaf in the case's layout. */
static tg_tensor *seq_input(tg_tape *tape, const scan_case *c, int64_t X)
{
    const int64_t B = c->B, L = c->L, shape[3] = {B, X, L};
    tg_tensor *t;
    switch (c->lay) {
    case LAYOUT_PADDED: { /* rows of a pitch that keeps 4-step vectors aligned, with a gap */
        int64_t pitch = (L + 3) / 4 * 4 + 4;
        tg_tensor *base = tt_randn(tape, c->dtype, 1, (int64_t[]){B * X * pitch});
        t = tg_view(tape, base, 3, shape, (int64_t[]){X * pitch, pitch, 1}, 0);
        break;
    }
    case LAYOUT_STRIDED: /* every other step, the first two dimensions swapped in memory */
        return tt_strided_leaf(tape, c->dtype, 3, shape);
    case LAYOUT_CHANNEL_LAST: { /* a (B, L, X) tensor viewed as (B, X, L) */
        tg_tensor *base = tt_randn(tape, c->dtype, 3, (int64_t[]){B, L, X});
        t = tg_view(tape, base, 3, shape, (int64_t[]){L * X, 1, X}, 0);
        break;
    }
    case LAYOUT_MISALIGNED: { /* rows one element longer than L, starting one element in */
        tg_tensor *base = tt_randn(tape, c->dtype, 1, (int64_t[]){B * X * (L + 1) + 1});
        t = tg_view(tape, base, 3, shape, (int64_t[]){X * (L + 1), L + 1, 1}, 1);
        break;
    }
    default: t = tt_randn(tape, c->dtype, 3, shape);
    }
    cr_assert(t, "%s", tg_last_error());
    cr_assert_eq(tg_set_requires_grad(t, true), TG_OK, "%s", tg_last_error());
    return t;
}

static tg_tensor *small_input(tg_tape *tape, const scan_case *c, int ndim, const int64_t *shape)
{
    return c->lay == LAYOUT_STRIDED ? tt_strided_leaf(tape, c->dtype, ndim, shape)
                                    : tt_leaf(tape, c->dtype, ndim, shape);
}

static void map_values(tg_tensor *t, double scale, double shift, bool absolute)
{
    for (int64_t i = 0; i < tg_numel(t); i++) {
        double v = tg_get_flat(t, i);
        tg_set_flat(t, i, scale * (absolute ? fabs(v) : v) + shift);
    }
}

/* CPU inputs in the ranges a Mamba layer sees (A < 0, dt > 0), every one a leaf that
 * requires a gradient; absent options are NULL. */
static void make_inputs(tg_tape *tape, const scan_case *c, tg_tensor **in)
{
    in[IN_U] = seq_input(tape, c, c->D);
    in[IN_DELTA] = seq_input(tape, c, c->D);
    if (c->f.softplus)
        map_values(in[IN_DELTA], 0.5, -0.5, false);
    else
        map_values(in[IN_DELTA], 0.4, 0.1, true);
    in[IN_A] = small_input(tape, c, 2, (int64_t[]){c->D, c->N});
    map_values(in[IN_A], -1.0, -0.2, true);
    in[IN_BM] = seq_input(tape, c, c->N);
    in[IN_CM] = seq_input(tape, c, c->N);
    in[IN_DV] = c->f.Dv ? tt_leaf(tape, c->dtype, 1, &c->D) : NULL;
    in[IN_Z] = c->f.z ? seq_input(tape, c, c->D) : NULL;
    in[IN_BIAS] = NULL;
    /* without softplus dt = delta + bias, kept > 0 by a bias ≥ 0 */
    if (c->f.bias) map_values(in[IN_BIAS] = tt_leaf(tape, c->dtype, 1, &c->D), 0.05, 0.0, !c->f.softplus);
    in[IN_INIT] = c->f.initial ? small_input(tape, c, 3, (int64_t[]){c->B, c->D, c->N}) : NULL;
}

/* The loss weights: w_out (B, D, L) for out, w_final (B, D, N) for the final state. */
typedef struct {
    tg_tensor *out, *final_state;
} loss_weights;

/* Runs the scan and backward from loss = Σ out·w_out (+ Σ final·w_final). */
static tg_tensor *run(tg_tape *tape, const scan_case *c, tg_tensor *const *in, loss_weights w, tg_tensor **final_state)
{
    tg_selective_scan_options opt = {
        in[IN_DV], in[IN_Z], in[IN_BIAS], c->f.softplus, in[IN_INIT], c->f.final ? final_state : NULL, c->chunk};
    tg_tensor *out = tg_selective_scan(tape, in[IN_U], in[IN_DELTA], in[IN_A], in[IN_BM], in[IN_CM], &opt);
    cr_assert(out, "%s", tg_last_error());
    tg_tensor *loss = NULL;
    if (!c->f.final_only) loss = tg_sum_all(tape, tg_mul(tape, out, w.out));
    if (c->f.final) {
        tg_tensor *part = tg_sum_all(tape, tg_mul(tape, *final_state, w.final_state));
        loss = loss ? tg_add(tape, loss, part) : part;
    }
    cr_assert(loss, "%s", tg_last_error());
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    return out;
}

static double silu(double z) { return z / (1.0 + exp(-z)); }

/* For each result of a case, Σ|term| over the terms of the sums that make its elements
 * (cu_assert_within_terms); NULL where the test has no such bound. */
typedef struct {
    tg_tensor *out, *final_state, *grad[N_IN];
} term_sizes;

/* |w_out·silu(z)| (|w_out| without z): the magnitude of dy, the gradient reaching y. */
static tg_tensor *gated_weights(tg_tape *tape, const tg_tensor *w_out, const tg_tensor *z)
{
    tg_tensor *dy = tt_f64_copy(tape, w_out, true);
    for (int64_t i = 0; z && i < tg_numel(dy); i++)
        tg_set_flat(dy, i, tg_get_flat(dy, i) * fabs(silu(tg_get_flat(z, i))));
    return dy;
}

/* Through the gate out = y·silu(z), y's terms are scaled by |silu(z)|; dz = dout·y·silu'(z)
 * takes them times |dout|·1.1 (silu' lies in [−0.1, 1.1]). y_terms: the ungated bound ȳ. */
static void gate_terms(tg_tape *tape, const scan_case *c, const tg_tensor *y_terms, const tg_tensor *z,
                       const tg_tensor *w_out, term_sizes *terms)
{
    terms->out = tt_f64_copy(tape, y_terms, false);
    terms->grad[IN_Z] = tt_f64_copy(tape, y_terms, false);
    for (int64_t i = 0; i < tg_numel(y_terms); i++) {
        double y = tg_get_flat(y_terms, i), dout = c->f.final_only ? 0.0 : tg_get_flat(w_out, i);
        tg_set_flat(terms->out, i, y * fabs(silu(tg_get_flat(z, i))));
        tg_set_flat(terms->grad[IN_Z], i, 1.1 * fabs(dout) * y);
    }
}

/* The term magnitudes of a case's results, from the scan run again on the CPU in f64 on
 * |u|, |Bm|, |Cm|, |Dv|, |initial state|, with no gate and the loss weights |dout·silu(z)|
 * and |dfinal|. delta, its bias and A are kept, so dt > 0 and Ā = exp(dt·A) ∈ (0, 1] are
 * the same: then h̄_t = Ā·h̄_{t−1} + dt·|u|·|Bm| ≥ |h_t| and likewise δh̄_t ≥ |δh_t| step by
 * step, and every result of that run is the sum of the magnitudes of the terms of the real
 * one: out (before the gate), the final state, du, dBm, dCm, dA, dDv, dinitial. Not ddelta:
 * ddt = Σ_n δh·(Bm·u + A·Ā·h_{t−1}) has terms of both signs (A < 0) that such a run would
 * subtract, so ddelta keeps the bound by its own norm; but ddelta_bias, its sum over b and
 * t, is bounded by Σ_{b,t} |ddelta|, from the CPU's ddelta. */
static term_sizes term_magnitudes(tg_tape *tape, scan_case c, tg_tensor *const *in, loss_weights w)
{
    tg_tensor *abs_in[N_IN] = {NULL};
    for (int i = 0; i < N_IN; i++) {
        if (!in[i] || i == IN_Z) continue;
        abs_in[i] = tt_f64_copy(tape, in[i], i != IN_DELTA && i != IN_A && i != IN_BIAS);
        cr_assert_eq(tg_set_requires_grad(abs_in[i], true), TG_OK, "%s", tg_last_error());
    }
    loss_weights abs_w = {gated_weights(tape, w.out, in[IN_Z]), tt_f64_copy(tape, w.final_state, true)};
    const bool gated = c.f.z;
    c.dtype = TG_F64;
    c.f.z = false;
    term_sizes terms = {0};
    terms.out = run(tape, &c, abs_in, abs_w, &terms.final_state);
    if (gated) gate_terms(tape, &c, terms.out, in[IN_Z], w.out, &terms);
    const int from_run[6] = {IN_U, IN_A, IN_BM, IN_CM, IN_DV, IN_INIT};
    for (int k = 0; k < 6; k++) terms.grad[from_run[k]] = abs_in[from_run[k]] ? abs_in[from_run[k]]->grad : NULL;
    if (in[IN_BIAS]) {
        tg_tensor *ddelta = tt_f64_copy(tape, in[IN_DELTA]->grad, true);
        terms.grad[IN_BIAS] = tg_sum(tape, tg_sum(tape, ddelta, 2, false), 0, false);
    }
    return terms;
}

/* A CUDA result against the CPU one, relative to the magnitude of its terms where there is
 * a bound by terms, else to its own norm. */
static void compare(tg_tape *tape, const char *what, const char *name, const tg_tensor *gpu, const tg_tensor *cpu,
                    const tg_tensor *terms, double tol)
{
    char item[300];
    snprintf(item, sizeof item, "%s: %s", what, name);
    if (terms)
        cu_assert_within_terms(tape, item, gpu, cpu, terms);
    else
        cu_assert_within(tape, item, gpu, cpu, tol);
}

/* CUDA twins of the CPU inputs, same values and layouts. */
static void twins(tg_tape *tape, tg_tensor *const *in, tg_tensor **gpu)
{
    for (int i = 0; i < N_IN; i++) gpu[i] = in[i] ? tt_cuda_twin(tape, in[i], true) : NULL;
}

/* The scan and its backward on the CPU and on CUDA from the same inputs; out, the final
 * state and the gradient of every input that asked for one must agree. `wanted` says
 * which inputs require a gradient (bit i for input i).
 *
 * Results are held to the tolerance relative to the magnitude of their terms where the
 * test can bound it (term_magnitudes), not only to their own size: a parameter gradient
 * such as ddelta_bias, dDv or dA is a sum over every b and t, and with D = 1 (or N = 1) it
 * is one or a few such sums, which can land near zero, where the kernel's float32
 * rounding is legitimately a large relative error. A wrong result still misses by whole
 * terms: one step left out of the sums over t puts ddelta_bias and dDv tens to thousands
 * of times over the float32 limit at the sizes here. */
static void check_case_wanting(scan_case c, unsigned wanted)
{
    if (c.f.final_only) c.f.final = true;
    char what[240];
    describe(&c, what, sizeof what);
    tg_tape *tape = tg_tape_create();
    tg_tensor *cpu[N_IN], *gpu[N_IN];
    make_inputs(tape, &c, cpu);
    for (int i = 0; i < N_IN; i++)
        if (cpu[i]) cr_assert_eq(tg_set_requires_grad(cpu[i], (wanted >> i) & 1u), TG_OK, "%s", tg_last_error());
    twins(tape, cpu, gpu);
    /* the CPU computes ddelta whatever is wanted: the bound on ddelta_bias is made from it */
    cr_assert_eq(tg_set_requires_grad(cpu[IN_DELTA], true), TG_OK, "%s", tg_last_error());
    loss_weights w = {tt_randn(tape, c.dtype, 3, (int64_t[]){c.B, c.D, c.L}),
                      tt_randn(tape, c.dtype, 3, (int64_t[]){c.B, c.D, c.N})};
    loss_weights gw = {tt_cuda_twin(tape, w.out, false), tt_cuda_twin(tape, w.final_state, false)};

    tg_tensor *final_cpu = NULL, *final_gpu = NULL;
    tg_tensor *out_cpu = run(tape, &c, cpu, w, &final_cpu);
    term_sizes terms = term_magnitudes(tape, c, cpu, w);
    /* Outputs and gradients land in memory full of NaNs: an element no kernel wrote shows. */
    cu_dirty_device_memory(c.B * c.D * c.L, c.dtype, 8);
    cu_dirty_device_memory(c.B * c.N * c.L, c.dtype, 4);
    cu_dirty_device_memory(c.B * c.D * c.N, c.dtype, 4);
    tg_tensor *out_gpu = run(tape, &c, gpu, gw, &final_gpu);

    const double tol = cu_tolerance(c.dtype);
    compare(tape, what, "out", out_gpu, out_cpu, terms.out, tol);
    if (c.f.final) compare(tape, what, "final state", final_gpu, final_cpu, terms.final_state, tol);
    for (int i = 0; i < N_IN; i++) {
        if (!cpu[i] || !((wanted >> i) & 1u)) continue;
        cr_assert(gpu[i]->grad, "%s: %s: no gradient", what, input_names[i]);
        compare(tape, what, input_names[i], gpu[i]->grad, cpu[i]->grad, terms.grad[i], tol);
    }
    tg_tape_free(tape);
}

static void check_case(scan_case c) { check_case_wanting(c, (1u << N_IN) - 1); }

static features random_features(void)
{
    return (features){tt_randint(0, 1), tt_randint(0, 1), tt_randint(0, 1),     tt_randint(0, 1),
                      tt_randint(0, 1), tt_randint(0, 1), tt_randint(0, 7) == 0};
}

static features all_features(void) { return (features){true, true, true, true, true, true, false}; }

Test(cuda_scan, edge_shapes_match_cpu)
{
    tt_require_cuda();
    const int64_t edges[][5] = {
        /* B  D   N   L    chunk */
        {1, 1, 1, 1, 1},      /* one step */
        {2, 3, 16, 1, 64},    /* one step, chunk past L */
        {1, 5, 4, 7, 3},      /* L not a multiple of the chunk; chunks shorter than a tile */
        {2, 33, 16, 16, 16},  /* one tile exactly; D one past a block */
        {1, 40, 16, 17, 16},  /* a one-step tail chunk */
        {2, 7, 4, 50, 1},     /* one step per chunk */
        {1, 9, 16, 100, 37},  /* chunks of odd length: 3 tiles with a tail, element-wise loads */
        {2, 64, 16, 300, 64}, /* several chunks of four tiles, L not a multiple of 16 */
        {1, 3, 1, 257, 300},  /* one chunk of 17 tiles: many checkpoints; N = 1 */
        {3, 31, 5, 130, 20},  /* N not a multiple of 4 */
    };
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
        for (int lay = 0; lay < LAYOUT_COUNT; lay++)
            check_case((scan_case){edges[e][0], edges[e][1], edges[e][2], edges[e][3], edges[e][4], (layout)lay, TG_F32,
                                   random_features()});
}

Test(cuda_scan, every_option_on_and_off)
{
    tt_require_cuda();
    for (int mask = 0; mask < 64; mask++) {
        features f = {mask & 1, mask & 2, mask & 4, mask & 8, mask & 16, mask & 32, false};
        const int64_t Ns[3] = {1, 4, 16};
        check_case((scan_case){tt_randint(1, 3), tt_randint(1, 70), Ns[mask % 3], tt_randint(1, 120), tt_randint(1, 40),
                               (layout)tt_randint(0, LAYOUT_COUNT - 1), TG_F32, f});
    }
}

Test(cuda_scan, gradient_from_the_final_state_only)
{
    tt_require_cuda();
    for (int lay = 0; lay < LAYOUT_COUNT; lay++) {
        features f = random_features();
        f.final_only = true;
        check_case((scan_case){tt_randint(1, 3), tt_randint(1, 50), tt_randint(1, 16), tt_randint(1, 90),
                               tt_randint(1, 70), (layout)lay, TG_F32, f});
    }
}

/* Each input alone requires a gradient (the others' workspaces are then skipped), and
 * random subsets. */
Test(cuda_scan, gradients_asked_for_one_at_a_time)
{
    tt_require_cuda();
    for (int i = 0; i < N_IN; i++) {
        scan_case c = {2,      tt_randint(20, 70), 16, tt_randint(20, 100), tt_randint(8, 40), LAYOUT_CONTIGUOUS,
                       TG_F32, all_features()};
        check_case_wanting(c, 1u << i);
    }
    for (int r = 0; r < 6; r++) {
        scan_case c = {tt_randint(1, 3),
                       tt_randint(1, 50),
                       tt_randint(1, 16),
                       tt_randint(1, 80),
                       tt_randint(1, 30),
                       (layout)tt_randint(0, LAYOUT_COUNT - 1),
                       TG_F32,
                       random_features()};
        check_case_wanting(c, (unsigned)tt_randint(1, (1 << N_IN) - 1) | 1u); /* u always: some input records */
    }
}

Test(cuda_scan, bf16_and_f16_match_cpu)
{
    tt_require_cuda();
    const tg_dtype dtypes[2] = {TG_BF16, TG_F16};
    for (int d = 0; d < 2; d++)
        for (int r = 0; r < 8; r++)
            check_case((scan_case){tt_randint(1, 3), tt_randint(1, 70), tt_randint(1, 16), tt_randint(1, 200),
                                   tt_randint(1, 70), (layout)tt_randint(0, LAYOUT_COUNT - 1), dtypes[d],
                                   random_features()});
}

/* A Mamba-like slice: N = 16, several blocks of channels, the default chunk (64), long
 * enough for many chunks, every option on; f32, bf16 and the channel-last layout. Walked in
 * one span, as the full-size grids these stand for are (small grids get spans of their own
 * below). */
Test(cuda_scan, mamba_like_sizes_match_cpu)
{
    tt_require_cuda();
    const int previous = tg_cuda_scan_force_spans(1);
    check_case((scan_case){2, 96, 16, 1000, 0, LAYOUT_CONTIGUOUS, TG_F32, all_features()});
    check_case((scan_case){2, 96, 16, 1000, 0, LAYOUT_CONTIGUOUS, TG_BF16, all_features()});
    check_case((scan_case){2, 80, 16, 515, 0, LAYOUT_CHANNEL_LAST, TG_F32, all_features()});
    check_case((scan_case){1, 64, 16, 700, 700, LAYOUT_CONTIGUOUS, TG_F32, all_features()}); /* one chunk, 44 tiles */
    /* the Selective Copying length of the Mamba paper (4096 + 2·16): 65 chunks, the last one half full */
    check_case((scan_case){2, 64, 16, 4128, 0, LAYOUT_CONTIGUOUS, TG_F32, all_features()});
    tg_cuda_scan_force_spans(previous);
}

/* The sequence cut into a given number of spans, each walked by its own blocks from the
 * state (forward) or state gradient (backward) its summary pass hands it: spans of one
 * chunk, of many, a short last span, more spans asked for than there are chunks, chunks
 * that are not a multiple of the tile, and every option on or off. */
Test(cuda_scan, spans_of_a_sequence_match_cpu)
{
    tt_require_cuda();
    const int64_t cases[][6] = {
        /* B  D   N   L     chunk spans */
        {2, 40, 16, 1000, 64, 2}, {1, 33, 16, 777, 64, 3}, /* the last span shorter */
        {2, 8, 5, 300, 20, 8},                             /* 15 chunks of 20 steps in 8 spans of two */
        {1, 70, 16, 130, 16, 9},                           /* 9 asked: at most 8 */
        {2, 16, 4, 100, 37, 5},                            /* 3 chunks, 5 spans asked */
        {1, 5, 3, 64, 1, 8},                               /* chunks of one step */
        {3, 64, 16, 2048, 64, 6},                          /* 32 chunks in 6 spans of 6 and a last of 2 */
    };
    const tg_dtype dtypes[3] = {TG_F32, TG_BF16, TG_F16};
    for (size_t e = 0; e < sizeof cases / sizeof cases[0]; e++) {
        const int previous = tg_cuda_scan_force_spans((int)cases[e][5]);
        check_case((scan_case){cases[e][0], cases[e][1], cases[e][2], cases[e][3], cases[e][4],
                               (layout)tt_randint(0, LAYOUT_COUNT - 1), dtypes[e % 3],
                               e % 2 ? all_features() : random_features()});
        tg_cuda_scan_force_spans(previous);
    }
}

/* One block per (b, group) would leave nearly every SM idle here, so the kernels cut the
 * sequence into spans on their own. */
Test(cuda_scan, small_grids_are_cut_into_spans)
{
    tt_require_cuda();
    const int previous = tg_cuda_scan_force_spans(0);
    check_case((scan_case){1, 32, 16, 1024, 64, LAYOUT_CONTIGUOUS, TG_F32, all_features()});
    int fwd_spans, bwd_spans;
    tg_cuda_scan_last_spans(&fwd_spans, &bwd_spans);
    tg_cuda_scan_force_spans(previous);
    cr_assert(fwd_spans > 1 && bwd_spans > 1, "one block of 32 channels ran in %d forward and %d backward spans",
              fwd_spans, bwd_spans);
}

/* Two backward passes over the same data give the same bits for every gradient (the sums
 * over d, and over b and t, run in a fixed order), in one span and in several. */
Test(cuda_scan, gradients_are_bitwise_repeatable)
{
    tt_require_cuda();
    for (int lay = 0; lay < 3; lay++) {
        const int previous = tg_cuda_scan_force_spans(lay == 0 ? 1 : lay == 1 ? 0 : 3); /* one, chosen, three */
        scan_case c = {3, 100, 16, 333, 64, lay == 1 ? LAYOUT_CHANNEL_LAST : LAYOUT_CONTIGUOUS, TG_F32, all_features()};
        c.f.final = true;
        tg_tape *tape = tg_tape_create();
        tg_tensor *cpu[N_IN], *gpu[2][N_IN];
        make_inputs(tape, &c, cpu);
        loss_weights w = {tt_cuda_twin(tape, tt_randn(tape, TG_F32, 3, (int64_t[]){c.B, c.D, c.L}), false),
                          tt_cuda_twin(tape, tt_randn(tape, TG_F32, 3, (int64_t[]){c.B, c.D, c.N}), false)};
        for (int r = 0; r < 2; r++) {
            tg_tensor *final_state = NULL;
            twins(tape, cpu, gpu[r]);
            run(tape, &c, gpu[r], w, &final_state);
        }
        for (int i = 0; i < N_IN; i++)
            cr_assert(cu_bitwise_equal(tape, gpu[0][i]->grad, gpu[1][i]->grad), "%s (%s): differs between two runs",
                      input_names[i], layout_names[c.lay]);
        tg_tape_free(tape);
        tg_cuda_scan_force_spans(previous);
    }
}

Test(cuda_scan, bad_inputs_fail_cleanly)
{
    tt_require_cuda();
    const char *op = "tg_selective_scan";
    tg_tape *tape = tg_tape_create();
    tg_tensor *u = tt_leaf(tape, TG_F32, 3, (int64_t[]){2, 3, 5});
    tg_tensor *delta = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 3, 5});
    tg_tensor *A = tt_randn(tape, TG_F32, 2, (int64_t[]){3, 4});
    tg_tensor *Bm = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 4, 5}),
              *Cm = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 4, 5});
    tg_tensor *z = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 3, 5});
    tg_tensor *ug = tt_cuda_twin(tape, u, false), *deltag = tt_cuda_twin(tape, delta, false);
    tg_tensor *Ag = tt_cuda_twin(tape, A, false), *Bmg = tt_cuda_twin(tape, Bm, false);
    tg_tensor *Cmg = tt_cuda_twin(tape, Cm, false);
    tg_tensor *in64[5], *A17 = tt_cuda_twin(tape, tt_randn(tape, TG_F32, 2, (int64_t[]){3, 17}), false);
    tg_tensor *B17 = tt_cuda_twin(tape, tt_randn(tape, TG_F32, 3, (int64_t[]){2, 17, 5}), false);
    tg_tensor *C17 = tt_cuda_twin(tape, tt_randn(tape, TG_F32, 3, (int64_t[]){2, 17, 5}), false);
    tg_tensor *cpu_in[5] = {u, delta, A, Bm, Cm};
    for (int i = 0; i < 5; i++) in64[i] = tt_cuda_twin(tape, tg_to_dtype(tape, cpu_in[i], TG_F64), false);
    cr_assert_eq(tg_set_requires_grad(in64[0], true), TG_OK, "%s", tg_last_error());
    tt_state s = tt_snapshot(tape);

    tt_assert_failed_with(&s, tg_selective_scan(tape, ug, delta, Ag, Bmg, Cmg, NULL), op, "different devices", "cuda",
                          "cpu", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, ug, deltag, Ag, Bm, Cmg, NULL), op, "different devices", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A, Bmg, Cm, NULL), op, "different devices", NULL);
    tg_selective_scan_options with_cpu_z = {.z = z};
    tt_assert_failed_with(&s, tg_selective_scan(tape, ug, deltag, Ag, Bmg, Cmg, &with_cpu_z), op, "z",
                          "different devices", NULL);
    /* Within the checks but outside what the CUDA kernels take: a clear refusal. */
    tt_assert_failed_with(&s, tg_selective_scan(tape, in64[0], in64[1], in64[2], in64[3], in64[4], NULL), op,
                          "f32, bf16 and f16", "f64", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, ug, deltag, A17, B17, C17, NULL), op, "N up to 16", "[3, 17]",
                          NULL);
    for (int64_t i = 0; i < tg_numel(u); i++) cr_assert_eq(tg_get_flat(u->grad, i), 0.0, "u's gradient was touched");
    tg_tape_free(tape);
}
