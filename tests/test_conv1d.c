/* Causal conv1d: values against the definition, gradient checks over the edge grid
 * (B=1, C=1, L=1, L<K, K=1, K=8, layouts, bias, SiLU, states), piecewise processing
 * with states, determinism, f32 vs f64, and the bad-input matrix. */
#include "test_util.h"

#include "core/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum { LAYOUT_CHANNEL_FIRST, LAYOUT_CHANNEL_LAST, LAYOUT_STRIDED } layout;
static const char *const layout_names[] = {"channel-first", "channel-last", "strided"};

/* A (B, C, L) leaf laid out as asked: contiguous, a view of a (B, L, C) tensor, or a
 * generally strided view. */
static tg_tensor *x_leaf(tg_tape *tape, tg_dtype dtype, layout lay, int64_t B, int64_t C, int64_t L)
{
    int64_t shape[3] = {B, C, L};
    if (lay == LAYOUT_CHANNEL_FIRST) return tt_leaf(tape, dtype, 3, shape);
    if (lay == LAYOUT_STRIDED) return tt_strided_leaf(tape, dtype, 3, shape);
    tg_tensor *base = tt_randn(tape, dtype, 3, (int64_t[]){B, L, C});
    tg_tensor *x = tg_view(tape, base, 3, shape, (int64_t[]){L * C, 1, C}, 0);
    cr_assert_eq(tg_set_requires_grad(x, true), TG_OK);
    return x;
}

/* The definition, written independently of the kernel: a causal window over x with the
 * history (or zeros) standing in for negative times. */
static double reference_output(const tg_tensor *x, const tg_tensor *w, const tg_tensor *bias, const tg_tensor *init,
                               bool silu, int64_t b, int64_t c, int64_t t)
{
    int64_t K = w->shape[1];
    double z = bias ? tg_get(bias, (int64_t[]){c}) : 0.0;
    for (int64_t k = 0; k < K; k++) {
        int64_t tau = t - (K - 1) + k; /* the input time tap k looks at */
        double v = tau >= 0 ? tg_get(x, (int64_t[]){b, c, tau})
                   : init   ? tg_get(init, (int64_t[]){b, c, K - 1 + tau})
                            : 0.0;
        z += tg_get(w, (int64_t[]){c, k}) * v;
    }
    return silu ? z / (1.0 + exp(-z)) : z;
}

typedef struct {
    bool silu;
    bool with_bias;
    bool with_initial;
    bool with_final;
} conv_case;

/* inputs: x, weight, [bias], [initial], out-weight, [final-weight] */
static tg_tensor *conv_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    const conv_case *cc = user;
    int i = 2;
    tg_tensor *final_states = NULL;
    tg_causal_conv1d_options opt = {
        .bias = cc->with_bias ? in[i++] : NULL,
        .initial_states = cc->with_initial ? in[i++] : NULL,
        .activation = cc->silu ? TG_ACT_SILU : TG_ACT_NONE,
        .final_states = cc->with_final ? &final_states : NULL,
    };
    tg_tensor *out = tg_causal_conv1d(tape, in[0], in[1], &opt);
    if (!out) return NULL;
    tg_tensor *loss = tg_sum_all(tape, tg_mul(tape, out, in[i++]));
    if (cc->with_final) loss = tg_add(tape, loss, tg_sum_all(tape, tg_mul(tape, final_states, in[i])));
    return loss;
}

/* Builds the inputs for one case and runs the gradient check (and the value check). */
static void check_case(int64_t B, int64_t C, int64_t L, int64_t K, layout lay, conv_case cc)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *inputs[6];
    int n = 0;
    tg_tensor *x = inputs[n++] = x_leaf(tape, TG_F64, lay, B, C, L);
    tg_tensor *w = inputs[n++] = tt_leaf(tape, TG_F64, 2, (int64_t[]){C, K});
    tg_tensor *bias = cc.with_bias ? (inputs[n++] = tt_leaf(tape, TG_F64, 1, (int64_t[]){C})) : NULL;
    tg_tensor *init = cc.with_initial ? (inputs[n++] = tt_leaf(tape, TG_F64, 3, (int64_t[]){B, C, K - 1})) : NULL;
    inputs[n++] = tt_randn(tape, TG_F64, 3, (int64_t[]){B, C, L});
    if (cc.with_final) inputs[n++] = tt_randn(tape, TG_F64, 3, (int64_t[]){B, C, K - 1});

    char what[160];
    snprintf(what, sizeof what, "conv1d B=%lld C=%lld L=%lld K=%lld %s%s%s%s%s", (long long)B, (long long)C,
             (long long)L, (long long)K, layout_names[lay], cc.silu ? " silu" : "", cc.with_bias ? " bias" : "",
             cc.with_initial ? " initial" : "", cc.with_final ? " final" : "");

    /* Values against the definition. */
    tg_tensor *final_states = NULL;
    tg_causal_conv1d_options opt = {bias, init, cc.silu ? TG_ACT_SILU : TG_ACT_NONE, &final_states};
    tg_tensor *out = tg_causal_conv1d(tape, x, w, &opt);
    cr_assert(out, "%s: %s", what, tg_last_error());
    if (lay == LAYOUT_CHANNEL_FIRST) cr_assert(tg_is_contiguous(out), "%s: output keeps x's layout", what);
    if (lay == LAYOUT_CHANNEL_LAST && C > 1 && L > 1)
        cr_assert(out->strides[1] == 1 && out->strides[2] == C, "%s: output keeps x's layout", what);
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) {
            for (int64_t t = 0; t < L; t++) {
                double want = reference_output(x, w, bias, init, cc.silu, b, c, t);
                cr_assert_float_eq(tg_get(out, (int64_t[]){b, c, t}), want, 1e-12, "%s: out[%lld,%lld,%lld]", what,
                                   (long long)b, (long long)c, (long long)t);
            }
            for (int64_t j = 0; j < K - 1; j++) { /* final states: the last K−1 steps of history + x */
                int64_t tau = L - (K - 1) + j;
                double want = tau >= 0 ? tg_get(x, (int64_t[]){b, c, tau})
                              : init   ? tg_get(init, (int64_t[]){b, c, K - 1 + tau})
                                       : 0.0;
                cr_assert_eq(tg_get(final_states, (int64_t[]){b, c, j}), want, "%s: final[%lld]", what, (long long)j);
            }
        }
    tg_tape_reset(tape);
    tt_gradcheck(what, conv_loss, inputs, n, &cc, NULL);
    tg_tape_free(tape);
}

static conv_case random_case(void)
{
    return (conv_case){tt_randint(0, 1), tt_randint(0, 1), tt_randint(0, 1), tt_randint(0, 1)};
}

Test(conv1d, edge_grid_gradcheck)
{
    /* Every edge the kernel has to get right, each with a random feature mix. */
    const int64_t edges[][4] = {
        /* B  C  L  K */
        {1, 1, 1, 1}, {1, 1, 1, 4}, {1, 2, 3, 8}, {2, 1, 5, 3},  {1, 3, 2, 4}, /* L < K */
        {2, 2, 7, 1}, {2, 3, 9, 8}, {3, 2, 8, 2}, {1, 1, 12, 5},
    };
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
        for (int lay = 0; lay < 3; lay++)
            check_case(edges[e][0], edges[e][1], edges[e][2], edges[e][3], (layout)lay, random_case());
}

Test(conv1d, every_feature_combination)
{
    for (int mask = 0; mask < 16; mask++) {
        conv_case cc = {mask & 1, mask & 2, mask & 4, mask & 8};
        check_case(tt_randint(1, 3), tt_randint(1, 3), tt_randint(1, 8), tt_randint(1, 6), (layout)tt_randint(0, 2),
                   cc);
    }
}

Test(conv1d, random_shapes_gradcheck)
{
    for (int r = 0; r < 12; r++)
        check_case(tt_randint(1, 3), tt_randint(1, 4), tt_randint(1, 10), tt_randint(1, 8), (layout)tt_randint(0, 2),
                   random_case());
}

Test(conv1d, large_input_uses_directional_check)
{
    /* More than 256 elements per input: the gradient check switches to random directions. */
    check_case(2, 8, 40, 4, LAYOUT_CHANNEL_LAST, (conv_case){true, true, true, true});
}

/* Processing a sequence in two pieces, carrying final → initial states, gives the same
 * output as one pass. */
Test(conv1d, pieces_with_states_match_one_pass)
{
    tg_tape *tape = tg_tape_create();
    int64_t B = tt_randint(1, 3), C = tt_randint(1, 4), L = tt_randint(2, 20), K = tt_randint(1, 6);
    int64_t L1 = tt_randint(1, L - 1);
    tg_tensor *x = tt_randn(tape, TG_F64, 3, (int64_t[]){B, C, L});
    tg_tensor *w = tt_randn(tape, TG_F64, 2, (int64_t[]){C, K}), *bias = tt_randn(tape, TG_F64, 1, (int64_t[]){C});
    tg_tensor *whole = tg_causal_conv1d(tape, x, w, &(tg_causal_conv1d_options){bias, NULL, TG_ACT_SILU, NULL});
    tg_tensor *first = tg_view(tape, x, 3, (int64_t[]){B, C, L1}, x->strides, 0);
    tg_tensor *second = tg_view(tape, x, 3, (int64_t[]){B, C, L - L1}, x->strides, L1);
    tg_tensor *carry = NULL;
    tg_tensor *out1 = tg_causal_conv1d(tape, first, w, &(tg_causal_conv1d_options){bias, NULL, TG_ACT_SILU, &carry});
    tg_tensor *out2 = tg_causal_conv1d(tape, second, w, &(tg_causal_conv1d_options){bias, carry, TG_ACT_SILU, NULL});
    cr_assert(whole && out1 && out2, "%s", tg_last_error());
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = 0; t < L; t++) {
                double piece = t < L1 ? tg_get(out1, (int64_t[]){b, c, t}) : tg_get(out2, (int64_t[]){b, c, t - L1});
                cr_assert_float_eq(piece, tg_get(whole, (int64_t[]){b, c, t}), 1e-12, "t=%lld L1=%lld K=%lld",
                                   (long long)t, (long long)L1, (long long)K);
            }
    tg_tape_free(tape);
}

/* The backward reduces dw and dbias in a fixed order: two runs agree bit for bit. */
Test(conv1d, backward_is_deterministic)
{
    tg_tape *tape = tg_tape_create();
    int64_t B = 4, C = 3, L = 257, K = 4;
    tg_tensor *x = tt_leaf(tape, TG_F32, 3, (int64_t[]){B, C, L});
    tg_tensor *w = tt_leaf(tape, TG_F32, 2, (int64_t[]){C, K}), *bias = tt_leaf(tape, TG_F32, 1, (int64_t[]){C});
    tg_tensor *dout = tt_randn(tape, TG_F32, 3, (int64_t[]){B, C, L});
    float first[12], again[12];
    for (int run = 0; run < 2; run++) {
        tg_zero_grad(w);
        tg_tensor *out = tg_causal_conv1d(tape, x, w, &(tg_causal_conv1d_options){bias, NULL, TG_ACT_SILU, NULL});
        cr_assert_eq(tg_backward_with_grad(tape, out, dout), TG_OK, "%s", tg_last_error());
        tg_copy_to_host(w->grad, run ? again : first, TG_F32);
    }
    for (int i = 0; i < C * K; i++) cr_assert_eq(first[i], again[i], "dw[%d] differs between runs", i);
    tg_tape_free(tape);
}

/* The channels are split over CPU threads: 1, 2, 3 or many threads give the same bits
 * for the output and every gradient, channel-first and channel-last. */
Test(conv1d, thread_count_changes_nothing)
{
    for (int channel_last = 0; channel_last < 2; channel_last++) {
        tg_tape *tape = tg_tape_create();
        int64_t B = tt_randint(1, 4), C = tt_randint(2, 70), L = tt_randint(1, 90), K = tt_randint(1, 5);
        tg_tensor *x = x_leaf(tape, TG_F32, channel_last ? LAYOUT_CHANNEL_LAST : LAYOUT_CHANNEL_FIRST, B, C, L);
        tg_tensor *w = tt_leaf(tape, TG_F32, 2, (int64_t[]){C, K}), *bias = tt_leaf(tape, TG_F32, 1, (int64_t[]){C});
        tg_tensor *dout = tt_randn(tape, TG_F32, 3, (int64_t[]){B, C, L});
        const int64_t n = B * C * L, counts[4] = {n, n, C * K, C};
        float *base = malloc(sizeof(float) * (size_t)(2 * n + C * K + C)),
              *now = malloc(sizeof(float) * (size_t)(2 * n + C * K + C));
        const int threads[] = {1, 2, 3, 16};
        for (size_t k = 0; k < sizeof threads / sizeof threads[0]; k++) {
            tg_set_num_threads(threads[k]);
            tg_zero_grad(x), tg_zero_grad(w), tg_zero_grad(bias);
            tg_tensor *out = tg_causal_conv1d(tape, x, w, &(tg_causal_conv1d_options){bias, NULL, TG_ACT_SILU, NULL});
            cr_assert(out && tg_backward_with_grad(tape, out, dout) == TG_OK, "%s", tg_last_error());
            float *values = k ? now : base;
            const tg_tensor *results[4] = {out, x->grad, w->grad, bias->grad};
            for (int r = 0, at = 0; r < 4; at += (int)counts[r], r++) tg_copy_to_host(results[r], values + at, TG_F32);
            for (int64_t i = 0; k && i < 2 * n + C * K + C; i++)
                cr_assert(now[i] == base[i], "%d threads vs 1, %s: value %lld: %.9g vs %.9g", threads[k],
                          layout_names[channel_last], (long long)i, now[i], base[i]);
        }
        tg_set_num_threads(0);
        free(base), free(now);
        tg_tape_free(tape);
    }
}

/* Whether `low` is within tol of the f64 result `ref` by ‖low − ref‖ / ‖ref‖, or, for a
 * gradient that sums `terms` products over batch and time, within tol·√terms·scale of it
 * absolutely: such a sum may cancel to nearly nothing, and the relative error of a float32
 * sum then grows without bound although its absolute error stays at rounding level. */
static bool close_to_f64(tg_tensor *low, tg_tensor *ref, double tol, double terms, double scale)
{
    if (tt_rel_error(low, ref) < tol) return true;
    tg_tape *tape = tg_tape_create();
    const double error = tt_norm(tg_sub(tape, tg_to_dtype(tape, low, TG_F64), ref));
    tg_tape_free(tape);
    return error < tol * sqrt(terms * (double)tg_numel(ref)) * scale;
}

/* f32 against f64 on the same (f32-rounded) inputs, forward and every gradient,
 * channel-first and channel-last: only the kernels' own rounding is measured. */
Test(conv1d, f32_matches_f64)
{
    for (int lay = 0; lay < 2; lay++) {
        tg_tape *tape = tg_tape_create();
        int64_t B = tt_randint(1, 4), C = tt_randint(1, 16), L = tt_randint(1, 300), K = tt_randint(1, 8);
        tg_tensor *x32 = x_leaf(tape, TG_F32, (layout)lay, B, C, L);
        tg_tensor *w32 = tt_leaf(tape, TG_F32, 2, (int64_t[]){C, K}), *b32 = tt_leaf(tape, TG_F32, 1, (int64_t[]){C});
        tg_tensor *i32 = tt_leaf(tape, TG_F32, 3, (int64_t[]){B, C, K - 1});
        tg_tensor *dout32 = tt_randn(tape, TG_F32, 3, (int64_t[]){B, C, L});
        tg_tensor *leaves32[4] = {x32, w32, b32, i32}, *leaves64[4];
        for (int i = 0; i < 4; i++) {
            leaves64[i] = tg_detach(tape, tg_to_dtype(tape, leaves32[i], TG_F64));
            tg_set_requires_grad(leaves64[i], true);
        }
        tg_tensor *out32 = tg_causal_conv1d(tape, x32, w32, &(tg_causal_conv1d_options){b32, i32, TG_ACT_SILU, NULL});
        tg_tensor *out64 = tg_causal_conv1d(tape, leaves64[0], leaves64[1],
                                            &(tg_causal_conv1d_options){leaves64[2], leaves64[3], TG_ACT_SILU, NULL});
        cr_assert(out64 && out32, "%s", tg_last_error());
        cr_assert_lt(tt_rel_error(out32, out64), 1e-5);
        cr_assert_eq(tg_backward_with_grad(tape, out64, tg_to_dtype(tape, dout32, TG_F64)), TG_OK, "%s",
                     tg_last_error());
        cr_assert_eq(tg_backward_with_grad(tape, out32, dout32), TG_OK, "%s", tg_last_error());
        /* dx and dinitial sum K products; dweight and dbias sum B·L of them, each of size
         * about |dout|·|x| (unit normals here, and silu' is at most 1.1) */
        const double terms[4] = {(double)K, (double)(B * L), (double)(B * L), (double)K};
        for (int i = 0; i < 4; i++)
            if (tg_numel(leaves64[i]))
                cr_assert(close_to_f64(leaves32[i]->grad, leaves64[i]->grad, 1e-5, terms[i], i == 1 ? 4.0 : 1.5),
                          "input %d: relative error %.3g (B %lld, C %lld, L %lld, K %lld)", i,
                          tt_rel_error(leaves32[i]->grad, leaves64[i]->grad), (long long)B, (long long)C, (long long)L,
                          (long long)K);
        tg_tape_free(tape);
    }
}

/* ---- bad input ------------------------------------------------------------------------------ */

Test(conv1d, bad_inputs_fail_cleanly)
{
    const char *op = "tg_causal_conv1d";
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F32, 3, (int64_t[]){2, 3, 5});
    tg_tensor *w = tt_leaf(tape, TG_F32, 2, (int64_t[]){3, 4});
    tg_tensor *x64 = tt_randn(tape, TG_F64, 3, (int64_t[]){2, 3, 5});
    tg_tensor *x2d = tt_randn(tape, TG_F32, 2, (int64_t[]){3, 5});
    tg_tensor *w_wrong_c = tt_randn(tape, TG_F32, 2, (int64_t[]){4, 4});
    tg_tensor *w_k0 = tt_randn(tape, TG_F32, 2, (int64_t[]){3, 0});
    tg_tensor *w3d = tt_randn(tape, TG_F32, 3, (int64_t[]){3, 4, 1});
    tg_tensor *x_l0 = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 3, 0});
    tg_tensor *ids = tt_ids(tape, 3, (int64_t[]){2, 3, 5}, 4);
    tg_tensor *bias_wrong = tt_randn(tape, TG_F32, 1, (int64_t[]){4});
    tg_tensor *bias64 = tt_randn(tape, TG_F64, 1, (int64_t[]){3});
    tg_tensor *init_wrong = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 3, 4});
    tg_tensor *cuda = tt_fake_cuda(tape, x);
    tg_tensor *final_states = NULL;
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_causal_conv1d(NULL, x, w, NULL), op, "tape", NULL);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, NULL, w, NULL), op, "x is NULL", NULL);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, x, NULL, NULL), op, "weight is NULL", NULL);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, x2d, w, NULL), op, "3 dimensions", "[3, 5]", NULL);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, x, w3d, NULL), op, "2 dimensions", NULL);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, x, w_wrong_c, NULL), op, "[2, 3, 5]", "[4, 4]", NULL);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, x, w_k0, NULL), op, "K ≥ 1", NULL);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, x_l0, w, NULL), op, "L ≥ 1", "[2, 3, 0]", NULL);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, x64, w, NULL), op, "dtype", "f64", "f32", NULL);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, ids, w, NULL), op, "i32", NULL);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, cuda, w, NULL), op, "cuda", NULL);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, x, w, &(tg_causal_conv1d_options){.bias = bias_wrong}), op, "bias",
                          "[3]", NULL);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, x, w, &(tg_causal_conv1d_options){.bias = bias64}), op, "bias",
                          "f64", NULL);
    tt_assert_failed_with(
        &s,
        tg_causal_conv1d(tape, x, w,
                         &(tg_causal_conv1d_options){.initial_states = init_wrong, .final_states = &final_states}),
        op, "initial_states", "[2, 3, 3]", NULL);
    cr_assert_null(final_states, "a failed call must not hand out final states");
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, x, w, &(tg_causal_conv1d_options){.activation = 7}), op,
                          "activation", NULL);
    for (int64_t i = 0; i < tg_numel(w); i++) cr_assert_eq(tg_get_flat(w->grad, i), 0.0);
    tg_tape_free(tape);
}
