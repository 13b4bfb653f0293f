/* The residual add fused into RMS normalisation (tg_add_rmsnorm): its two outputs equal
 * tg_add followed by tg_rmsnorm bit for bit, its gradients pass a float64 gradcheck and
 * agree with the unfused pair's, with either output unused, for any thread count; bad
 * inputs fail cleanly. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* inputs: residual, x, weight, a, b; user: eps. loss = Σ y·a + Σ h·b with (y, h) the
 * fused op's outputs: both outputs carry a gradient. */
static tg_tensor *both_outputs_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    tg_tensor *h = NULL;
    tg_tensor *y = tg_add_rmsnorm(tape, in[0], in[1], in[2], *(double *)user, &h);
    if (!y) return NULL;
    return tg_add(tape, tg_sum_all(tape, tg_mul(tape, y, in[3])), tg_sum_all(tape, tg_mul(tape, h, in[4])));
}

static void random_shape(int ndim, int64_t *shape)
{
    for (int i = 0; i < ndim; i++) shape[i] = tt_randint(1, 4);
    shape[ndim - 1] = tt_randint(1, 9);
}

Test(add_rmsnorm, gradcheck_random_shapes)
{
    for (int ndim = 1; ndim <= 3; ndim++)
        for (int strided = 0; strided < 2; strided++) {
            tg_tape *tape = tg_tape_create();
            int64_t shape[3];
            random_shape(ndim, shape);
            int64_t d = shape[ndim - 1];
            tg_tensor *in[5];
            for (int i = 0; i < 2; i++)
                in[i] = strided ? tt_strided_leaf(tape, TG_F64, ndim, shape) : tt_leaf(tape, TG_F64, ndim, shape);
            in[2] = strided ? tt_strided_leaf(tape, TG_F64, 1, &d) : tt_leaf(tape, TG_F64, 1, &d);
            in[3] = tt_randn(tape, TG_F64, ndim, shape);
            in[4] = tt_randn(tape, TG_F64, ndim, shape);
            double eps = pow(10.0, -6.0 + 5.0 * tg_rng_uniform(tt_rng()));
            char what[128], dims[64];
            snprintf(what, sizeof what, "tg_add_rmsnorm x %s eps %g", tg_describe(in[1], dims, sizeof dims), eps);
            tt_gradcheck(what, both_outputs_loss, in, 5, &eps, NULL);
            tg_tape_free(tape);
        }
}

Test(add_rmsnorm, gradcheck_one_input_at_a_time)
{
    for (int wanted = 0; wanted < 3; wanted++) {
        tg_tape *tape = tg_tape_create();
        int64_t shape[2] = {tt_randint(1, 4), tt_randint(1, 6)};
        tg_tensor *in[5] = {tt_leaf(tape, TG_F64, 2, shape), tt_leaf(tape, TG_F64, 2, shape),
                            tt_leaf(tape, TG_F64, 1, &shape[1]), tt_randn(tape, TG_F64, 2, shape),
                            tt_randn(tape, TG_F64, 2, shape)};
        for (int i = 0; i < 3; i++) tg_set_requires_grad(in[i], i == wanted);
        double eps = 1e-4;
        char what[64];
        snprintf(what, sizeof what, "tg_add_rmsnorm, only input %d", wanted);
        tt_gradcheck(what, both_outputs_loss, in, 5, &eps, NULL);
        tg_tape_free(tape);
    }
}

/* The bytes of t (any layout) in row-major order, in t's dtype. */
static void *host_bytes(const tg_tensor *t)
{
    size_t size = (size_t)tg_numel(t) * tg_dtype_size(t->dtype);
    void *bytes = malloc(size ? size : 1);
    cr_assert(bytes && tg_copy_to_host(t, bytes, t->dtype) == TG_OK, "%s", tg_last_error());
    return bytes;
}

static void assert_same_bits(const tg_tensor *a, const tg_tensor *b, const char *what)
{
    void *x = host_bytes(a), *y = host_bytes(b);
    cr_assert_eq(a->dtype, b->dtype, "%s", what);
    cr_assert(tg_same_shape(a, b), "%s", what);
    cr_assert_eq(memcmp(x, y, (size_t)tg_numel(a) * tg_dtype_size(a->dtype)), 0, "%s: the bits differ", what);
    free(x), free(y);
}

Test(add_rmsnorm, values_are_those_of_add_then_rmsnorm)
{
    const tg_dtype dtypes[3] = {TG_F64, TG_F32, TG_BF16};
    for (int k = 0; k < 3; k++) {
        tg_tape *tape = tg_tape_create();
        int64_t shape[3] = {tt_randint(1, 4), tt_randint(1, 9), tt_randint(1, 80)};
        tg_tensor *residual = tt_strided_leaf(tape, dtypes[k], 3, shape), *x = tt_leaf(tape, dtypes[k], 3, shape);
        tg_tensor *w = tt_leaf(tape, dtypes[k], 1, &shape[2]), *h = NULL;
        tg_tensor *y = tg_add_rmsnorm(tape, residual, x, w, 1e-5, &h);
        cr_assert(y && h, "%s", tg_last_error());
        cr_assert(tg_is_contiguous(y) && tg_is_contiguous(h));
        tg_tensor *h_ref = tg_add(tape, residual, x);
        const char *name = tg_dtype_name(dtypes[k]);
        char what[64];
        snprintf(what, sizeof what, "%s sum", name);
        assert_same_bits(h, h_ref, what);
        snprintf(what, sizeof what, "%s y", name);
        assert_same_bits(y, tg_rmsnorm(tape, h_ref, w, 1e-5), what);
        tg_tape_free(tape);
    }
}

/* The gradients of residual, x and w under loss = Σ y·a·use_y + Σ h·b·use_h, fused or not. */
typedef struct {
    tg_tensor *residual, *x, *w;
} inputs;

static inputs fresh_inputs(tg_tape *tape, const inputs *from)
{
    inputs in = {tt_leaf(tape, TG_F32, 3, from->x->shape), tt_leaf(tape, TG_F32, 3, from->x->shape),
                 tt_leaf(tape, TG_F32, 1, from->w->shape)};
    cr_assert(tg_copy(in.residual, from->residual) == TG_OK && tg_copy(in.x, from->x) == TG_OK &&
              tg_copy(in.w, from->w) == TG_OK);
    return in;
}

static void run(tg_tape *tape, const inputs *in, bool fused, bool use_y, bool use_h, tg_tensor *a, tg_tensor *b)
{
    tg_tensor *h = NULL, *y;
    if (fused) {
        y = tg_add_rmsnorm(tape, in->residual, in->x, in->w, 1e-5, &h);
    } else {
        h = tg_add(tape, in->residual, in->x);
        y = tg_rmsnorm(tape, h, in->w, 1e-5);
    }
    cr_assert(y && h, "%s", tg_last_error());
    tg_tensor *loss = use_y ? tg_sum_all(tape, tg_mul(tape, y, a)) : NULL;
    if (use_h) {
        tg_tensor *part = tg_sum_all(tape, tg_mul(tape, h, b));
        loss = loss ? tg_add(tape, loss, part) : part;
    }
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
}

Test(add_rmsnorm, gradients_match_the_unfused_pair_with_either_output_unused)
{
    const bool uses[3][2] = {{true, true}, {true, false}, {false, true}};
    for (int u = 0; u < 3; u++) {
        tg_tape *tape = tg_tape_create();
        int64_t shape[3] = {tt_randint(1, 4), tt_randint(1, 20), tt_randint(1, 70)};
        inputs init = {tt_randn(tape, TG_F32, 3, shape), tt_randn(tape, TG_F32, 3, shape),
                       tt_randn(tape, TG_F32, 1, &shape[2])};
        tg_tensor *a = tt_randn(tape, TG_F32, 3, shape), *b = tt_randn(tape, TG_F32, 3, shape);
        inputs fused = fresh_inputs(tape, &init), pair = fresh_inputs(tape, &init);
        run(tape, &fused, true, uses[u][0], uses[u][1], a, b);
        run(tape, &pair, false, uses[u][0], uses[u][1], a, b);
        const char *names[3] = {"residual", "x", "weight"};
        tg_tensor *got[3] = {fused.residual, fused.x, fused.w}, *want[3] = {pair.residual, pair.x, pair.w};
        for (int i = 0; i < 3; i++) {
            double error = tt_rel_error(got[i]->grad, want[i]->grad);
            if (!uses[u][0] && i == 2) /* no gradient reaches the weight: it stays zero */
                cr_assert_eq(tt_norm(got[i]->grad), 0.0, "weight gradient without y");
            else
                cr_assert_lt(error, 1e-6, "d%s (y %s, h %s): relative error %g", names[i],
                             uses[u][0] ? "used" : "unused", uses[u][1] ? "used" : "unused", error);
        }
        tg_tape_free(tape);
    }
}

/* Rows split over 1, 2, 3 or 16 threads give the same bits for y, h and every gradient. */
Test(add_rmsnorm, thread_count_changes_nothing)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[3] = {tt_randint(2, 4), tt_randint(40, 90), tt_randint(1, 70)};
    inputs init = {tt_randn(tape, TG_F32, 3, shape), tt_randn(tape, TG_F32, 3, shape),
                   tt_randn(tape, TG_F32, 1, &shape[2])};
    tg_tensor *a = tt_randn(tape, TG_F32, 3, shape), *b = tt_randn(tape, TG_F32, 3, shape);
    tg_set_num_threads(1);
    inputs base = fresh_inputs(tape, &init);
    run(tape, &base, true, true, true, a, b);
    const int threads[] = {2, 3, 16};
    for (size_t k = 0; k < sizeof threads / sizeof threads[0]; k++) {
        tg_set_num_threads(threads[k]);
        inputs now = fresh_inputs(tape, &init);
        run(tape, &now, true, true, true, a, b);
        char what[64];
        snprintf(what, sizeof what, "%d threads vs 1: dresidual", threads[k]);
        assert_same_bits(now.residual->grad, base.residual->grad, what);
        snprintf(what, sizeof what, "%d threads vs 1: dweight", threads[k]);
        assert_same_bits(now.w->grad, base.w->grad, what);
    }
    tg_set_num_threads(0);
    tg_tape_free(tape);
}

Test(add_rmsnorm, bad_inputs_fail_cleanly)
{
    tg_tape *tape = tg_tape_create();
    const char *op = "tg_add_rmsnorm";
    tg_tensor *x = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3}), *r = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3});
    tg_tensor *w = tt_leaf(tape, TG_F32, 1, (int64_t[]){3});
    tg_tensor *r_wide = tt_randn(tape, TG_F32, 2, (int64_t[]){2, 4}),
              *r_3d = tt_randn(tape, TG_F32, 3, (int64_t[]){1, 2, 3});
    tg_tensor *r64 = tt_randn(tape, TG_F64, 2, (int64_t[]){2, 3}), *w4 = tt_randn(tape, TG_F32, 1, (int64_t[]){4});
    tg_tensor *ids = tt_ids(tape, 2, (int64_t[]){2, 3}, 5), *cuda_r = tt_fake_cuda(tape, r);
    tg_tensor *h = x; /* must come back NULL on failure */
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_add_rmsnorm(tape, r, x, w, 1e-5, NULL), op, "sum", "NULL", NULL);
    tt_assert_failed_with(&s, tg_add_rmsnorm(NULL, r, x, w, 1e-5, &h), op, "tape", NULL);
    cr_assert_null(h, "a failed call leaves *sum NULL");
    tt_assert_failed_with(&s, tg_add_rmsnorm(tape, NULL, x, w, 1e-5, &h), op, "residual", "NULL", NULL);
    tt_assert_failed_with(&s, tg_add_rmsnorm(tape, r, NULL, w, 1e-5, &h), op, "x", "NULL", NULL);
    tt_assert_failed_with(&s, tg_add_rmsnorm(tape, r, x, NULL, 1e-5, &h), op, "weight", "NULL", NULL);
    tt_assert_failed_with(&s, tg_add_rmsnorm(tape, r_wide, x, w, 1e-5, &h), op, "residual", "[2, 4]", "[2, 3]", NULL);
    tt_assert_failed_with(&s, tg_add_rmsnorm(tape, r_3d, x, w, 1e-5, &h), op, "residual", "[1, 2, 3]", NULL);
    tt_assert_failed_with(&s, tg_add_rmsnorm(tape, r64, x, w, 1e-5, &h), op, "residual", "f64", "f32", NULL);
    tt_assert_failed_with(&s, tg_add_rmsnorm(tape, ids, x, w, 1e-5, &h), op, "residual", "i32", NULL);
    tt_assert_failed_with(&s, tg_add_rmsnorm(tape, r, x, w4, 1e-5, &h), op, "weight", "[4]", NULL);
    tt_assert_failed_with(&s, tg_add_rmsnorm(tape, r, x, w, 0.0, &h), op, "eps", NULL);
    tt_assert_failed_with(&s, tg_add_rmsnorm(tape, cuda_r, x, w, 1e-5, &h), op, "device", "cuda", NULL);
    cr_assert_null(h);
    for (int64_t i = 0; i < 6; i++) cr_assert_eq(tg_get_flat(x->grad, i) + tg_get_flat(r->grad, i), 0.0);
    tg_tape_free(tape);
}
