/* Reductions (tg_sum, tg_mean over one axis; tg_sum_all, tg_mean_all): values against a
 * naive loop, gradient checks over every axis, keepdim and layout, empty sizes, lower
 * precisions against f64, and the bad-input matrix. */
#include "test_util.h"

#include "core/internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef tg_tensor *(*axis_op_fn)(tg_tape *, tg_tensor *, int, bool);
typedef tg_tensor *(*all_op_fn)(tg_tape *, tg_tensor *);

static const struct {
    const char *name;
    axis_op_fn fn;
    bool mean;
} axis_ops[] = {{"tg_sum", tg_sum, false}, {"tg_mean", tg_mean, true}};

static const struct {
    const char *name;
    all_op_fn fn;
    bool mean;
} all_ops[] = {{"tg_sum_all", tg_sum_all, false}, {"tg_mean_all", tg_mean_all, true}};

static void random_shape(int ndim, int64_t low, int64_t high, int64_t *shape)
{
    for (int i = 0; i < ndim; i++) shape[i] = tt_randint(low, high);
}

static tg_tensor *random_leaf(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape, bool strided)
{
    return strided ? tt_strided_leaf(tape, dtype, ndim, shape) : tt_leaf(tape, dtype, ndim, shape);
}

/* The shape a reduction over `axis` (already non-negative) should give. */
static int reduced_shape(const tg_tensor *x, int axis, bool keepdim, int64_t *shape)
{
    int ndim = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i != axis)
            shape[ndim++] = x->shape[i];
        else if (keepdim)
            shape[ndim++] = 1;
    }
    if (ndim == 0) shape[ndim++] = 1; /* a 1-D input reduces to one element, shape (1) */
    return ndim;
}

static void assert_shape(const tg_tensor *y, int ndim, const int64_t *shape, const char *what)
{
    cr_assert(y, "%s: %s", what, tg_last_error());
    cr_assert_eq(y->ndim, ndim, "%s: ndim %d, expected %d", what, y->ndim, ndim);
    for (int i = 0; i < ndim; i++)
        cr_assert_eq(y->shape[i], shape[i], "%s: axis %d is %lld, expected %lld", what, i, (long long)y->shape[i],
                     (long long)shape[i]);
    cr_assert(tg_is_contiguous(y), "%s: the result should be contiguous", what);
}

/* Sums (or means) over `axis` by walking every element of x; expected[] is row-major
 * over x's shape without the axis. */
static void naive_reduce(const tg_tensor *x, int axis, bool mean, double *expected, int64_t n_out)
{
    for (int64_t o = 0; o < n_out; o++) expected[o] = 0;
    int64_t index[TG_MAX_DIMS];
    for (int64_t e = 0; e < tg_numel(x); e++) {
        int64_t rest = e, out = 0, place = 1;
        for (int i = x->ndim - 1; i >= 0; i--) {
            index[i] = rest % x->shape[i];
            rest /= x->shape[i];
        }
        for (int i = x->ndim - 1; i >= 0; i--) {
            if (i == axis) continue;
            out += index[i] * place;
            place *= x->shape[i];
        }
        expected[out] += tg_get(x, index);
    }
    if (mean)
        for (int64_t o = 0; o < n_out; o++) expected[o] /= (double)x->shape[axis];
}

/* ---- values ------------------------------------------------------------------------------ */

Test(reduce, values_match_naive_loop_every_axis)
{
    for (int ndim = 1; ndim <= TG_MAX_DIMS; ndim++) {
        for (int strided = 0; strided < 2; strided++) {
            tg_tape *tape = tg_tape_create();
            int64_t shape[TG_MAX_DIMS], out_shape[TG_MAX_DIMS];
            random_shape(ndim, 1, ndim <= 4 ? 5 : 3, shape); /* at most 5⁴ or 3⁶ elements */
            tg_tensor *x = random_leaf(tape, TG_F64, ndim, shape, strided);
            double expected[1024];
            for (size_t k = 0; k < 2; k++) {
                for (int axis = -ndim; axis < ndim; axis++) {
                    for (int keepdim = 0; keepdim < 2; keepdim++) {
                        int positive = axis < 0 ? axis + ndim : axis;
                        char what[96];
                        snprintf(what, sizeof what, "%s ndim %d axis %d keepdim %d%s", axis_ops[k].name, ndim, axis,
                                 keepdim, strided ? " strided" : "");
                        tg_tensor *y = axis_ops[k].fn(tape, x, axis, keepdim);
                        int out_ndim = reduced_shape(x, positive, keepdim, out_shape);
                        assert_shape(y, out_ndim, out_shape, what);
                        naive_reduce(x, positive, axis_ops[k].mean, expected, tg_numel(y));
                        for (int64_t o = 0; o < tg_numel(y); o++)
                            cr_assert_float_eq(tg_get_flat(y, o), expected[o], 1e-12 * (1 + fabs(expected[o])),
                                               "%s: element %lld (seed %llu)", what, (long long)o,
                                               (unsigned long long)tt_seed());
                    }
                }
            }
            tg_tape_free(tape);
        }
    }
}

Test(reduce, all_values_match_naive_loop)
{
    for (int ndim = 1; ndim <= 4; ndim++) {
        for (int strided = 0; strided < 2; strided++) {
            tg_tape *tape = tg_tape_create();
            int64_t shape[TG_MAX_DIMS];
            random_shape(ndim, 1, 5, shape);
            tg_tensor *x = random_leaf(tape, TG_F64, ndim, shape, strided);
            double sum = 0;
            for (int64_t e = 0; e < tg_numel(x); e++) sum += tg_get_flat(x, e);
            for (size_t k = 0; k < 2; k++) {
                tg_tensor *y = all_ops[k].fn(tape, x);
                assert_shape(y, 1, (int64_t[]){1}, all_ops[k].name);
                double expected = all_ops[k].mean ? sum / (double)tg_numel(x) : sum;
                cr_assert_float_eq(tg_item(y), expected, 1e-12 * (1 + fabs(expected)), "%s ndim %d", all_ops[k].name,
                                   ndim);
            }
            tg_tape_free(tape);
        }
    }
}

Test(reduce, larger_sums_are_accurate)
{
    /* Many terms: compare against a sum of the same values in a different order (sorted
     * by magnitude), which a double accumulator matches closely. */
    tg_tape *tape = tg_tape_create();
    int64_t n = tt_randint(1000, 5000);
    tg_tensor *x = tt_randn(tape, TG_F64, 2, (int64_t[]){2, n});
    tg_tensor *y = tg_sum(tape, x, -1, false);
    for (int64_t r = 0; r < 2; r++) {
        double positive = 0, negative = 0;
        for (int64_t j = 0; j < n; j++) {
            double v = tg_get(x, (int64_t[]){r, j});
            if (v > 0)
                positive += v;
            else
                negative += v;
        }
        cr_assert_float_eq(tg_get_flat(y, r), positive + negative, 1e-9);
    }
    tg_tape_free(tape);
}

/* ---- gradients ---------------------------------------------------------------------------- */

typedef struct {
    axis_op_fn fn;
    int axis;
    bool keepdim;
} axis_case;

/* loss = Σ op(x, axis, keepdim) · w, with w a fixed random weight of the result's shape. */
static tg_tensor *axis_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    const axis_case *c = user;
    return tg_sum_all(tape, tg_mul(tape, c->fn(tape, in[0], c->axis, c->keepdim), in[1]));
}

Test(reduce, gradcheck_every_axis_keepdim_and_layout)
{
    for (size_t k = 0; k < 2; k++) {
        for (int ndim = 1; ndim <= 4; ndim++) {
            for (int axis = -ndim; axis < ndim; axis++) {
                for (int keepdim = 0; keepdim < 2; keepdim++) {
                    tg_tape *tape = tg_tape_create();
                    int64_t shape[TG_MAX_DIMS], out_shape[TG_MAX_DIMS];
                    random_shape(ndim, 1, 3, shape);
                    bool strided = tt_randint(0, 1);
                    tg_tensor *x = random_leaf(tape, TG_F64, ndim, shape, strided);
                    int out_ndim = reduced_shape(x, axis < 0 ? axis + ndim : axis, keepdim, out_shape);
                    tg_tensor *inputs[2] = {x, tt_randn(tape, TG_F64, out_ndim, out_shape)};
                    axis_case c = {axis_ops[k].fn, axis, keepdim};
                    char what[96];
                    snprintf(what, sizeof what, "%s ndim %d axis %d keepdim %d%s", axis_ops[k].name, ndim, axis,
                             keepdim, strided ? " strided" : "");
                    tt_gradcheck(what, axis_loss, inputs, 2, &c, NULL);
                    tg_tape_free(tape);
                }
            }
        }
    }
}

static tg_tensor *all_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    all_op_fn fn = *(all_op_fn *)user;
    return tg_sum_all(tape, tg_mul(tape, fn(tape, in[0]), in[1]));
}

Test(reduce, gradcheck_all_elements)
{
    for (size_t k = 0; k < 2; k++) {
        for (int ndim = 1; ndim <= 4; ndim++) {
            for (int strided = 0; strided < 2; strided++) {
                tg_tape *tape = tg_tape_create();
                int64_t shape[TG_MAX_DIMS];
                random_shape(ndim, 1, 3, shape);
                tg_tensor *x = random_leaf(tape, TG_F64, ndim, shape, strided);
                tg_tensor *inputs[2] = {x, tt_randn(tape, TG_F64, 1, (int64_t[]){1})};
                all_op_fn fn = all_ops[k].fn;
                tt_gradcheck(all_ops[k].name, all_loss, inputs, 2, &fn, NULL);
                tg_tape_free(tape);
            }
        }
    }
}

Test(reduce, gradient_values_are_the_broadcast_weight)
{
    /* d/dx Σ_o w[o]·mean(x)[o] = w broadcast back over the axis, divided by its length. */
    tg_tape *tape = tg_tape_create();
    int64_t shape[3];
    random_shape(3, 1, 5, shape);
    tg_tensor *x = tt_strided_leaf(tape, TG_F64, 3, shape);
    tg_tensor *w = tt_randn(tape, TG_F64, 3, (int64_t[]){shape[0], 1, shape[2]});
    tg_tensor *loss = tg_sum_all(tape, tg_mul(tape, tg_mean(tape, x, 1, true), w));
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    for (int64_t i = 0; i < shape[0]; i++)
        for (int64_t j = 0; j < shape[1]; j++)
            for (int64_t l = 0; l < shape[2]; l++)
                cr_assert_float_eq(tg_get(x->grad, (int64_t[]){i, j, l}),
                                   tg_get(w, (int64_t[]){i, 0, l}) / (double)shape[1], 1e-15);
    tg_tape_free(tape);
}

/* ---- lower precisions ------------------------------------------------------------------------- */

Test(reduce, f32_and_bf16_match_f64)
{
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    const double tolerance[2] = {1e-5, 1e-2};
    for (int d = 0; d < 2; d++) {
        tg_tape *tape = tg_tape_create();
        int64_t shape[3];
        random_shape(3, 1, 12, shape);
        tg_tensor *x = tg_to_dtype(tape, tt_randn(tape, TG_F64, 3, shape), dtypes[d]);
        tg_tensor *ref = tg_to_dtype(tape, x, TG_F64); /* the same rounded values */
        for (int axis = 0; axis < 3; axis++) {
            for (size_t k = 0; k < 2; k++) {
                tg_tensor *y = axis_ops[k].fn(tape, x, axis, false), *y_ref = axis_ops[k].fn(tape, ref, axis, false);
                cr_assert_eq(y->dtype, dtypes[d]);
                cr_assert_lt(tt_rel_error(y, y_ref), tolerance[d], "%s %s axis %d", axis_ops[k].name,
                             tg_dtype_name(dtypes[d]), axis);
            }
        }
        for (size_t k = 0; k < 2; k++)
            cr_assert_lt(tt_rel_error(all_ops[k].fn(tape, x), all_ops[k].fn(tape, ref)), tolerance[d], "%s %s",
                         all_ops[k].name, tg_dtype_name(dtypes[d]));
        tg_tape_free(tape);
    }
}

/* ---- empty sizes -------------------------------------------------------------------------------- */

Test(reduce, sum_over_an_empty_axis_is_zero)
{
    tg_tape *tape = tt_dirty_tape();
    int64_t a = tt_randint(1, 4), b = tt_randint(1, 4);
    tg_tensor *x = tt_leaf(tape, TG_F64, 3, (int64_t[]){a, 0, b});
    for (int keepdim = 0; keepdim < 2; keepdim++) {
        tg_tensor *y = tg_sum(tape, x, 1, keepdim);
        assert_shape(y, keepdim ? 3 : 2, keepdim ? (int64_t[]){a, 1, b} : (int64_t[]){a, b}, "empty axis");
        for (int64_t i = 0; i < tg_numel(y); i++) cr_assert_eq(tg_get_flat(y, i), 0.0);
        cr_assert_eq(tg_backward(tape, tg_sum_all(tape, y)), TG_OK, "%s", tg_last_error());
    }
    tg_tensor *all = tg_sum_all(tape, x);
    assert_shape(all, 1, (int64_t[]){1}, "sum_all of empty");
    cr_assert_eq(tg_item(all), 0.0);
    /* Reducing a non-empty axis of an empty tensor gives an empty result (and the mean is fine). */
    tg_tensor *y = tg_mean(tape, x, 2, false);
    assert_shape(y, 2, (int64_t[]){a, 0}, "mean over a non-empty axis");
    tg_tape_free(tape);
}

/* ---- bad input ------------------------------------------------------------------------------------- */

Test(reduce, bad_inputs_fail_cleanly)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F32, 3, (int64_t[]){2, 3, 4});
    tg_tensor *empty = tt_randn(tape, TG_F32, 2, (int64_t[]){3, 0});
    tg_tensor *ids = tt_ids(tape, 2, (int64_t[]){2, 3}, 5);
    tg_tensor *cuda = tt_fake_cuda(tape, x);
    tt_state s = tt_snapshot(tape);
    for (size_t k = 0; k < 2; k++) {
        const char *op = axis_ops[k].name;
        axis_op_fn fn = axis_ops[k].fn;
        tt_assert_failed_with(&s, fn(NULL, x, 0, false), op, "tape", NULL);
        tt_assert_failed_with(&s, fn(tape, NULL, 0, false), op, "NULL", NULL);
        tt_assert_failed_with(&s, fn(tape, ids, 0, false), op, "float", "i32", NULL);
        tt_assert_failed_with(&s, fn(tape, cuda, 0, false), op, "cuda", NULL);
        tt_assert_failed_with(&s, fn(tape, x, 3, false), op, "axis 3", "[2, 3, 4]", NULL);
        tt_assert_failed_with(&s, fn(tape, x, -4, true), op, "axis -4", NULL);
        tt_assert_failed_with(&s, fn(tape, x, INT_MAX, false), op, "axis", NULL);
        tt_assert_failed_with(&s, fn(tape, x, INT_MIN, false), op, "axis", NULL);
    }
    tt_assert_failed_with(&s, tg_mean(tape, empty, 1, false), "tg_mean", "zero elements", "[3, 0]", NULL);
    tt_assert_failed_with(&s, tg_mean(tape, empty, -1, true), "tg_mean", "zero elements", NULL);
    for (size_t k = 0; k < 2; k++) {
        const char *op = all_ops[k].name;
        tt_assert_failed_with(&s, all_ops[k].fn(NULL, x), op, "tape", NULL);
        tt_assert_failed_with(&s, all_ops[k].fn(tape, NULL), op, "NULL", NULL);
        tt_assert_failed_with(&s, all_ops[k].fn(tape, ids), op, "i32", NULL);
        tt_assert_failed_with(&s, all_ops[k].fn(tape, cuda), op, "cuda", NULL);
    }
    tt_assert_failed_with(&s, tg_mean_all(tape, empty), "tg_mean_all", "zero elements", NULL);
    /* x's gradient is untouched by all of that */
    for (int64_t i = 0; i < tg_numel(x); i++) cr_assert_eq(tg_get_flat(x->grad, i), 0.0);
    tg_tape_free(tape);
}
