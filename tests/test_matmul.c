/* tg_matmul: values against a naive triple loop, gradient checks over every transpose
 * combination, batch structure and input layout, lower precisions against f64, empty
 * sizes, and the bad-input matrix. */
#include "matmul_cases.h"

#include "core/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- the reference ------------------------------------------------------------------ */

/* The result's expected shape, from the shapes alone. */
static void expected_shape(const tg_tensor *a, const tg_tensor *b, bool ta, bool tb, int *ndim, int64_t *shape)
{
    const tg_tensor *batched = a->ndim >= b->ndim ? a : b;
    *ndim = batched->ndim;
    memcpy(shape, batched->shape, sizeof(int64_t) * (size_t)*ndim);
    shape[*ndim - 2] = a->shape[a->ndim - (ta ? 1 : 2)];
    shape[*ndim - 1] = b->shape[b->ndim - (tb ? 2 : 1)];
}

/* Σ_k op(a)[batch, m, k] · op(b)[batch, k, n] by a plain loop. */
static double naive_entry(const tg_tensor *a, const tg_tensor *b, bool ta, bool tb, int ndim, const int64_t *index)
{
    int64_t ia[TG_MAX_DIMS] = {0}, ib[TG_MAX_DIMS] = {0};
    int n_batch = ndim - 2;
    if (a->ndim == ndim) memcpy(ia, index, sizeof(int64_t) * (size_t)n_batch);
    if (b->ndim == ndim) memcpy(ib, index, sizeof(int64_t) * (size_t)n_batch);
    int64_t m = index[ndim - 2], n = index[ndim - 1], depth = a->shape[a->ndim - (ta ? 2 : 1)];
    double sum = 0;
    for (int64_t k = 0; k < depth; k++) {
        ia[a->ndim - 2] = ta ? k : m;
        ia[a->ndim - 1] = ta ? m : k;
        ib[b->ndim - 2] = tb ? n : k;
        ib[b->ndim - 1] = tb ? k : n;
        sum += tg_get(a, ia) * tg_get(b, ib);
    }
    return sum;
}

static void unravel(int ndim, const int64_t *shape, int64_t flat, int64_t *index)
{
    for (int i = ndim - 1; i >= 0; i--) {
        index[i] = flat % shape[i];
        flat /= shape[i];
    }
}

/* y has the expected shape, is contiguous, and matches the naive loop within tol·(1 + |ref|). */
static void assert_matches_naive(const char *what, const tg_tensor *a, const tg_tensor *b, bool ta, bool tb,
                                 const tg_tensor *y, double tol)
{
    cr_assert(y, "%s: %s (seed %llu)", what, tg_last_error(), (unsigned long long)tt_seed());
    int ndim;
    int64_t shape[TG_MAX_DIMS], index[TG_MAX_DIMS];
    expected_shape(a, b, ta, tb, &ndim, shape);
    cr_assert_eq(y->ndim, ndim, "%s", what);
    for (int i = 0; i < ndim; i++) cr_assert_eq(y->shape[i], shape[i], "%s: axis %d", what, i);
    cr_assert(tg_is_contiguous(y), "%s: the result should be contiguous", what);
    for (int64_t e = 0; e < tg_numel(y); e++) {
        unravel(ndim, shape, e, index);
        double ref = naive_entry(a, b, ta, tb, ndim, index), got = tg_get_flat(y, e);
        cr_assert(fabs(got - ref) <= tol * (1 + fabs(ref)), "%s: element %lld is %.17g, expected %.17g (seed %llu)",
                  what, (long long)e, got, ref, (unsigned long long)tt_seed());
    }
}

/* ---- values ---------------------------------------------------------------------------- */

Test(matmul, values_match_naive_loop)
{
    for (int flags = 0; flags < 4; flags++) {
        bool ta = flags & 1, tb = flags & 2;
        for (int kind = 0; kind < BATCH_KIND_COUNT; kind++) {
            for (int lay = 0; lay < LAYOUT_COUNT; lay++) {
                tg_tape *tape = tg_tape_create();
                case_shapes s = mm_random_shapes((batch_kind)kind, ta, tb, 1, 7);
                tg_tensor *a = mm_leaf(tape, TG_F64, s.ndim_a, s.shape_a, (layout)lay);
                tg_tensor *b = mm_leaf(tape, TG_F64, s.ndim_b, s.shape_b, (layout)((lay + flags) % LAYOUT_COUNT));
                char what[128];
                snprintf(what, sizeof what, "ta %d tb %d, %s, a %s", ta, tb, batch_names[kind], layout_names[lay]);
                assert_matches_naive(what, a, b, ta, tb, tg_matmul(tape, a, b, ta, tb), 1e-12);
                tg_tape_free(tape);
            }
        }
    }
}

Test(matmul, larger_values_match_naive_loop)
{
    /* Sizes past BLAS's small-matrix paths, one case per transpose combination. */
    for (int flags = 0; flags < 4; flags++) {
        bool ta = flags & 1, tb = flags & 2;
        tg_tape *tape = tg_tape_create();
        case_shapes s = mm_random_shapes(flags % 2 ? SHARED_B : BATCH_3D, ta, tb, 1, 40);
        tg_tensor *a = mm_leaf(tape, TG_F64, s.ndim_a, s.shape_a, (layout)flags);
        tg_tensor *b = mm_leaf(tape, TG_F64, s.ndim_b, s.shape_b, LAYOUT_CONTIGUOUS);
        assert_matches_naive("larger", a, b, ta, tb, tg_matmul(tape, a, b, ta, tb), 1e-12);
        tg_tape_free(tape);
    }
}

Test(matmul, overlapping_and_broadcast_views_match_naive_loop)
{
    /* Layouts BLAS cannot take in place: rows that overlap (row stride 1 < row length,
     * a sliding window) and a batch axis of stride 0 (one matrix repeated). */
    for (int flags = 0; flags < 4; flags++) {
        bool ta = flags & 1, tb = flags & 2;
        tg_tape *tape = tg_tape_create();
        int64_t B = tt_randint(2, 3), R = tt_randint(2, 6), C = tt_randint(2, 6), N = tt_randint(1, 6);
        tg_tensor *window_base = tt_randn(tape, TG_F64, 1, (int64_t[]){R + C - 1});
        tg_tensor *window = tg_view(tape, window_base, 2, (int64_t[]){R, C}, (int64_t[]){1, 1}, 0);
        tg_tensor *repeated_base = tt_randn(tape, TG_F64, 2, (int64_t[]){C, N});
        tg_tensor *repeated = tg_view(tape, repeated_base, 3, (int64_t[]){B, C, N}, (int64_t[]){0, N, 1}, 0);
        tg_tensor *other = tt_randn(tape, TG_F64, 2, tb ? (int64_t[]){N, ta ? R : C} : (int64_t[]){ta ? R : C, N});
        assert_matches_naive("sliding window a", window, other, ta, tb, tg_matmul(tape, window, other, ta, tb), 1e-12);
        /* repeated (B, C, N) as a: op(a) is C x N or N x C */
        tg_tensor *rhs = tt_randn(tape, TG_F64, 2, tb ? (int64_t[]){R, ta ? C : N} : (int64_t[]){ta ? C : N, R});
        assert_matches_naive("stride-0 batch a", repeated, rhs, ta, tb, tg_matmul(tape, repeated, rhs, ta, tb), 1e-12);
        tg_tensor *lhs = tt_randn(tape, TG_F64, 3, ta ? (int64_t[]){B, tb ? N : C, R} : (int64_t[]){B, R, tb ? N : C});
        assert_matches_naive("stride-0 batch b", lhs, repeated, ta, tb, tg_matmul(tape, lhs, repeated, ta, tb), 1e-12);
        tg_tape_free(tape);
    }
}

/* ---- gradients --------------------------------------------------------------------------- */

typedef struct {
    bool ta, tb;
} flags;

/* loss = Σ matmul(a, b) · w, with w a fixed random weight. */
static tg_tensor *matmul_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    const flags *f = user;
    return tg_sum_all(tape, tg_mul(tape, tg_matmul(tape, in[0], in[1], f->ta, f->tb), in[2]));
}

static tg_tensor *random_weight_for(tg_tape *tape, tg_dtype dtype, const tg_tensor *a, const tg_tensor *b, bool ta,
                                    bool tb)
{
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    expected_shape(a, b, ta, tb, &ndim, shape);
    return tt_randn(tape, dtype, ndim, shape);
}

Test(matmul, gradcheck_all_transposes_batches_and_layouts)
{
    for (int fl = 0; fl < 4; fl++) {
        flags f = {fl & 1, fl & 2};
        for (int kind = 0; kind < BATCH_KIND_COUNT; kind++) {
            for (int lay = 0; lay < LAYOUT_COUNT; lay++) {
                tg_tape *tape = tg_tape_create();
                case_shapes s = mm_random_shapes((batch_kind)kind, f.ta, f.tb, 1, 4);
                tg_tensor *a = mm_leaf(tape, TG_F64, s.ndim_a, s.shape_a, (layout)lay);
                tg_tensor *b = mm_leaf(tape, TG_F64, s.ndim_b, s.shape_b, (layout)((lay + 1) % LAYOUT_COUNT));
                tg_tensor *inputs[3] = {a, b, random_weight_for(tape, TG_F64, a, b, f.ta, f.tb)};
                char what[128];
                snprintf(what, sizeof what, "ta %d tb %d, %s, a %s", f.ta, f.tb, batch_names[kind], layout_names[lay]);
                tt_gradcheck(what, matmul_loss, inputs, 3, &f, NULL);
                tg_tape_free(tape);
            }
        }
    }
}

Test(matmul, linear_layer_weight_gradient_sums_over_batch)
{
    /* y = x @ W (or x @ Wᵀ with W stored (N, D)); dW[d, n] = Σ_{b,t} x[b,t,d] · dy[b,t,n]. */
    for (int tb = 0; tb < 2; tb++) {
        tg_tape *tape = tg_tape_create();
        int64_t B = tt_randint(1, 4), T = tt_randint(1, 6), D = tt_randint(1, 8), N = tt_randint(1, 8);
        tg_tensor *x = tt_leaf(tape, TG_F64, 3, (int64_t[]){B, T, D});
        tg_tensor *w = tt_leaf(tape, TG_F64, 2, tb ? (int64_t[]){N, D} : (int64_t[]){D, N});
        tg_tensor *dy = tt_randn(tape, TG_F64, 3, (int64_t[]){B, T, N});
        tg_tensor *y = tg_matmul(tape, x, w, false, tb);
        cr_assert(y, "%s", tg_last_error());
        cr_assert_eq(tg_backward_with_grad(tape, y, dy), TG_OK, "%s", tg_last_error());
        for (int64_t d = 0; d < D; d++)
            for (int64_t n = 0; n < N; n++) {
                double ref = 0;
                for (int64_t b = 0; b < B; b++)
                    for (int64_t t = 0; t < T; t++)
                        ref += tg_get(x, (int64_t[]){b, t, d}) * tg_get(dy, (int64_t[]){b, t, n});
                double got = tg_get(w->grad, tb ? (int64_t[]){n, d} : (int64_t[]){d, n});
                cr_assert_float_eq(got, ref, 1e-12 * (1 + fabs(ref)), "d %lld n %lld", (long long)d, (long long)n);
            }
        tg_tape_free(tape);
    }
}

/* ---- lower precisions ------------------------------------------------------------------------ */

/* A leaf copy of x in another dtype (with x's values rounded to it), laid out as asked. */
static tg_tensor *converted_leaf(tg_tape *tape, const tg_tensor *x, tg_dtype dtype, bool transposed)
{
    int nd = x->ndim;
    int64_t shape[TG_MAX_DIMS], strides[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    if (transposed) {
        shape[nd - 2] = x->shape[nd - 1];
        shape[nd - 1] = x->shape[nd - 2];
    }
    tg_tensor *base = tg_empty(tape, dtype, TG_DEVICE_CPU, nd, shape);
    memcpy(strides, base->strides, sizeof strides);
    if (transposed) {
        strides[nd - 2] = base->strides[nd - 1];
        strides[nd - 1] = base->strides[nd - 2];
    }
    tg_tensor *view = tg_view(tape, base, nd, x->shape, strides, 0);
    cr_assert_eq(tg_copy(view, x), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_set_requires_grad(view, true), TG_OK, "%s", tg_last_error());
    return view;
}

Test(matmul, f32_and_bf16_match_f64_forward_and_backward)
{
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    const double tolerance[2] = {1e-5, 1e-2};
    for (int d = 0; d < 2; d++) {
        for (int kind = 0; kind < BATCH_KIND_COUNT; kind++) {
            for (int fl = 0; fl < 4; fl++) {
                bool ta = fl & 1, tb = fl & 2, transposed_storage = tt_randint(0, 1);
                tg_tape *tape = tg_tape_create();
                case_shapes s = mm_random_shapes((batch_kind)kind, ta, tb, 1, 24);
                tg_tensor *a64 = tt_randn(tape, TG_F64, s.ndim_a, s.shape_a);
                tg_tensor *b64 = tt_randn(tape, TG_F64, s.ndim_b, s.shape_b);
                tg_tensor *a = converted_leaf(tape, a64, dtypes[d], transposed_storage);
                tg_tensor *b = converted_leaf(tape, b64, dtypes[d], false);
                /* The f64 reference starts from the same rounded values. */
                tg_tensor *a_ref = converted_leaf(tape, a, TG_F64, false);
                tg_tensor *b_ref = converted_leaf(tape, b, TG_F64, false);
                tg_tensor *dy_ref = random_weight_for(tape, TG_F64, a, b, ta, tb);
                tg_tensor *dy = tg_empty_as(tape, dy_ref, dtypes[d]);
                cr_assert_eq(tg_copy(dy, dy_ref), TG_OK);
                cr_assert_eq(tg_copy(dy_ref, dy), TG_OK); /* rounded too */
                tg_tensor *y = tg_matmul(tape, a, b, ta, tb), *y_ref = tg_matmul(tape, a_ref, b_ref, ta, tb);
                cr_assert(y && y_ref, "%s", tg_last_error());
                cr_assert_eq(y->dtype, dtypes[d]);
                cr_assert_eq(tg_backward_with_grad(tape, y, dy), TG_OK, "%s", tg_last_error());
                cr_assert_eq(tg_backward_with_grad(tape, y_ref, dy_ref), TG_OK, "%s", tg_last_error());
                const char *name = tg_dtype_name(dtypes[d]);
                unsigned long long seed = (unsigned long long)tt_seed();
                cr_assert_lt(tt_rel_error(y, y_ref), tolerance[d], "%s %s y (seed %llu)", name, batch_names[kind],
                             seed);
                cr_assert_lt(tt_rel_error(a->grad, a_ref->grad), tolerance[d], "%s %s da (seed %llu)", name,
                             batch_names[kind], seed);
                cr_assert_lt(tt_rel_error(b->grad, b_ref->grad), tolerance[d], "%s %s db (seed %llu)", name,
                             batch_names[kind], seed);
                tg_tape_free(tape);
            }
        }
    }
}

/* ---- empty sizes --------------------------------------------------------------------------------- */

Test(matmul, empty_inner_dimension_gives_zeros)
{
    const tg_dtype dtypes[3] = {TG_F64, TG_F32, TG_BF16};
    for (int d = 0; d < 3; d++) {
        tg_tape *tape = tt_dirty_tape();
        int64_t B = tt_randint(1, 3), M = tt_randint(1, 5), N = tt_randint(1, 5);
        tg_tensor *a = tt_leaf(tape, dtypes[d], 3, (int64_t[]){B, M, 0});
        tg_tensor *b = tt_leaf(tape, dtypes[d], 2, (int64_t[]){0, N});
        tg_tensor *y = tg_matmul(tape, a, b, false, false);
        cr_assert(y, "%s", tg_last_error());
        cr_assert(y->ndim == 3 && y->shape[0] == B && y->shape[1] == M && y->shape[2] == N);
        for (int64_t i = 0; i < tg_numel(y); i++) cr_assert_eq(tg_get_flat(y, i), 0.0);
        /* Backward runs; both gradients are empty. */
        cr_assert_eq(tg_backward(tape, tg_sum_all(tape, y)), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_numel(a->grad), 0);
        cr_assert_eq(tg_numel(b->grad), 0);
        tg_tape_free(tape);
    }
}

Test(matmul, empty_rows_columns_or_batch_give_empty_results)
{
    for (int which = 0; which < 3; which++) {
        tg_tape *tape = tt_dirty_tape();
        int64_t B = which == 2 ? 0 : 2, M = which == 0 ? 0 : 3, N = which == 1 ? 0 : 4, K = tt_randint(1, 5);
        tg_tensor *a = tt_leaf(tape, TG_F64, 3, (int64_t[]){B, M, K});
        tg_tensor *b = tt_leaf(tape, TG_F64, 2, (int64_t[]){K, N});
        tg_tensor *y = tg_matmul(tape, a, b, false, false);
        cr_assert(y, "%s", tg_last_error());
        cr_assert(y->ndim == 3 && y->shape[0] == B && y->shape[1] == M && y->shape[2] == N);
        cr_assert_eq(tg_numel(y), 0);
        /* The shared b got no contribution from any batch: its gradient must be zeros. */
        cr_assert_eq(tg_backward(tape, tg_sum_all(tape, y)), TG_OK, "%s", tg_last_error());
        for (int64_t i = 0; i < tg_numel(b); i++) cr_assert_eq(tg_get_flat(b->grad, i), 0.0, "case %d", which);
        tg_tape_free(tape);
    }
}

/* ---- recording ------------------------------------------------------------------------------------ */

Test(matmul, records_only_when_an_input_needs_a_gradient)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *a = tt_randn(tape, TG_F64, 2, (int64_t[]){2, 3}), *b = tt_randn(tape, TG_F64, 2, (int64_t[]){3, 4});
    tg_tensor *y = tg_matmul(tape, a, b, false, false);
    cr_assert(y && !y->requires_grad);
    cr_assert_eq(tg_tape_node_count(tape), 0);
    cr_assert_eq(tg_set_requires_grad(b, true), TG_OK);
    y = tg_matmul(tape, a, b, false, false);
    cr_assert(y && y->requires_grad);
    cr_assert_eq(tg_tape_node_count(tape), 1);
    /* Only b needs a gradient: a must not get one. */
    cr_assert_eq(tg_backward(tape, tg_sum_all(tape, y)), TG_OK, "%s", tg_last_error());
    cr_assert_null(a->grad);
    for (int64_t k = 0; k < 3; k++)
        for (int64_t n = 0; n < 4; n++) {
            double ref = tg_get(a, (int64_t[]){0, k}) + tg_get(a, (int64_t[]){1, k});
            cr_assert_float_eq(tg_get(b->grad, (int64_t[]){k, n}), ref, 1e-12);
        }
    tg_tape_free(tape);
}

/* ---- bad input -------------------------------------------------------------------------------------- */

Test(matmul, bad_inputs_fail_cleanly)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *a = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3});
    tg_tensor *b = tt_randn(tape, TG_F32, 2, (int64_t[]){3, 5});
    tg_tensor *b_wrong = tt_randn(tape, TG_F32, 2, (int64_t[]){4, 5});
    tg_tensor *vec = tt_randn(tape, TG_F32, 1, (int64_t[]){3});
    tg_tensor *a3 = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 2, 3});
    tg_tensor *b3 = tt_randn(tape, TG_F32, 3, (int64_t[]){3, 3, 5});
    tg_tensor *b4 = tt_randn(tape, TG_F32, 4, (int64_t[]){1, 2, 3, 5});
    tg_tensor *d = tt_randn(tape, TG_F64, 2, (int64_t[]){3, 5});
    tg_tensor *ids = tt_ids(tape, 2, (int64_t[]){3, 5}, 7), *ids_a = tt_ids(tape, 2, (int64_t[]){2, 3}, 7);
    tg_tensor *cuda_a = tt_fake_cuda(tape, a), *cuda_b = tt_fake_cuda(tape, b);
    /* Views that claim huge sizes without memory behind them (all strides 0). */
    tg_tensor *huge_k_a = tg_view(tape, a, 2, (int64_t[]){2, 3000000000}, (int64_t[]){0, 0}, 0);
    tg_tensor *huge_k_b = tg_view(tape, b, 2, (int64_t[]){3000000000, 5}, (int64_t[]){0, 0}, 0);
    tg_tensor *huge_batch =
        tg_view(tape, a, 5, (int64_t[]){1 << 21, 1 << 21, 1 << 21, 2, 3}, (int64_t[]){0, 0, 0, 0, 0}, 0);
    const char *op = "tg_matmul";
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_matmul(NULL, a, b, false, false), op, "tape", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, NULL, b, false, false), op, "a", "NULL", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, a, NULL, false, false), op, "b", "NULL", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, vec, b, false, false), op, "2 dimensions", "[3]", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, a, vec, false, false), op, "2 dimensions", "[3]", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, a, b_wrong, false, false), op, "inner", "M", "K", "N", "[2, 3]", "[4, 5]",
                          NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, a, b, true, false), op, "inner", "transpose_a true", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, a, b, false, true), op, "inner", "transpose_b true", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, a3, b3, false, false), op, "batch", "[2, 2, 3]", "[3, 3, 5]", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, a3, b4, false, false), op, "batch", "[1, 2, 3, 5]", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, a, d, false, false), op, "dtype", "f32", "f64", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, a, ids, false, false), op, "float", "i32", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, ids_a, b, false, false), op, "i32", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, a, cuda_b, false, false), op, "device", "cuda", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, cuda_a, cuda_b, false, false), op, "cuda", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, huge_k_a, huge_k_b, false, false), op, "32-bit", "3000000000", NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, huge_batch, b, false, false), op, "too large", NULL);
    /* a's gradient is untouched by all of that */
    for (int64_t i = 0; i < 6; i++) cr_assert_eq(tg_get_flat(a->grad, i), 0.0);
    tg_tape_free(tape);
}
