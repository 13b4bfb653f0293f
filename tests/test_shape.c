/* Shape ops: gradient checks on random shapes (size-1 dims, strided inputs, negative
 * axes, stepped slices), values against index arithmetic written here, storage
 * sharing of views, and the bad-input matrix. */
#include "test_util.h"

#include <stdio.h>
#include <string.h>

/* Advances a row-major multi-index over shape; false after the last one. */
static bool next_index(int ndim, const int64_t *shape, int64_t *index)
{
    for (int d = ndim - 1; d >= 0; d--) {
        if (++index[d] < shape[d]) return true;
        index[d] = 0;
    }
    return false;
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

static void random_shape(int ndim, int64_t max, int64_t *shape)
{
    for (int i = 0; i < ndim; i++) shape[i] = tt_randint(1, max);
}

static tg_tensor *random_input(tg_tape *tape, bool strided, int ndim, const int64_t *shape)
{
    return strided ? tt_strided_leaf(tape, TG_F64, ndim, shape) : tt_leaf(tape, TG_F64, ndim, shape);
}

/* A random permutation of 0..n-1 (Fisher–Yates). */
static void random_perm(int n, int *perm)
{
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)tt_randint(0, i), swap = perm[i];
        perm[i] = perm[j];
        perm[j] = swap;
    }
}

static tg_tensor *weighted_sum(tg_tape *tape, tg_tensor *y, tg_tensor *w)
{
    return tg_sum_all(tape, tg_mul(tape, y, w));
}

/* ---- reshape ------------------------------------------------------------------------------ */

typedef struct {
    int ndim;
    int64_t shape[TG_MAX_DIMS]; /* as passed to tg_reshape (may hold a -1) */
} shape_arg;

static tg_tensor *reshape_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    const shape_arg *s = user;
    return weighted_sum(tape, tg_reshape(tape, in[0], s->ndim, s->shape), in[1]);
}

/* A random target shape for a, b, c elements (same count); *request gets it with one
 * entry replaced by -1 half of the time. */
static void random_target(const int64_t *abc, shape_arg *target, shape_arg *request)
{
    int64_t a = abc[0], b = abc[1], c = abc[2];
    switch (tt_randint(0, 4)) {
    case 0: *target = (shape_arg){1, {a * b * c}}; break;
    case 1: *target = (shape_arg){2, {a * b, c}}; break;
    case 2: *target = (shape_arg){2, {a, b * c}}; break;
    case 3: *target = (shape_arg){3, {c, b, a}}; break;
    default: *target = (shape_arg){4, {1, a, 1, b * c}}; break;
    }
    *request = *target;
    if (tt_randint(0, 1)) request->shape[tt_randint(0, target->ndim - 1)] = -1;
}

Test(shape, reshape_gradcheck_random_shapes)
{
    for (int round = 0; round < 4; round++) {
        for (int strided = 0; strided < 2; strided++) {
            tg_tape *tape = tg_tape_create();
            int64_t shape[3];
            random_shape(3, 4, shape);
            shape_arg target, request;
            random_target(shape, &target, &request);
            tg_tensor *x = random_input(tape, strided, 3, shape);
            tg_tensor *w = tt_randn(tape, TG_F64, target.ndim, target.shape);
            tg_tensor *inputs[2] = {x, w};
            tt_gradcheck(strided ? "tg_reshape strided" : "tg_reshape", reshape_loss, inputs, 2, &request, NULL);
            tg_tape_free(tape);
        }
    }
}

Test(shape, reshape_contiguous_is_a_view)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[3];
    random_shape(3, 5, shape);
    shape_arg target, request;
    random_target(shape, &target, &request);
    tg_tensor *x = tt_randn(tape, TG_F64, 3, shape);
    tg_tensor *y = tg_reshape(tape, x, request.ndim, request.shape);
    cr_assert(y, "%s", tg_last_error());
    cr_assert_eq(y->ndim, target.ndim);
    for (int i = 0; i < target.ndim; i++) cr_assert_eq(y->shape[i], target.shape[i]);
    cr_assert_eq(y->storage, x->storage, "a contiguous reshape must not copy");
    int64_t n = numel_of(3, shape), k = tt_randint(0, n - 1);
    for (int64_t i = 0; i < n; i++) cr_assert_eq(tg_get_flat(y, i), tg_get_flat(x, i));
    tg_set_flat(x, k, 1234.5); /* written through x, seen through y */
    cr_assert_eq(tg_get_flat(y, k), 1234.5);
    tg_tape_free(tape);
}

Test(shape, reshape_non_contiguous_copies_in_logical_order)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[3];
    random_shape(3, 5, shape);
    shape[0] = shape[1] = 2; /* makes the strided input certainly non-contiguous */
    tg_tensor *x = tt_strided_leaf(tape, TG_F64, 3, shape);
    tg_tensor *xt = tg_transpose(tape, tt_randn(tape, TG_F64, 3, shape), 0, 2);
    int64_t n = numel_of(3, shape);
    tg_tensor *sources[2] = {x, xt};
    for (int k = 0; k < 2; k++) {
        tg_tensor *y = tg_reshape(tape, sources[k], 2, (int64_t[]){-1, 2});
        cr_assert(y, "%s", tg_last_error());
        cr_assert(y->shape[0] == n / 2 && y->shape[1] == 2);
        cr_assert_neq(y->storage, sources[k]->storage);
        /* y's row-major elements are the source's elements in row-major (logical) order */
        int64_t index[TG_MAX_DIMS] = {0}, flat = 0;
        do {
            int64_t yi[2] = {flat / 2, flat % 2};
            cr_assert_eq(tg_get(y, yi), tg_get(sources[k], index));
            flat++;
        } while (next_index(3, sources[k]->shape, index));
    }
    tg_tape_free(tape);
}

/* ---- permute and transpose ---------------------------------------------------------------- */

static tg_tensor *permute_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    return weighted_sum(tape, tg_permute(tape, in[0], user), in[1]);
}

Test(shape, permute_gradcheck_random_perms)
{
    for (int round = 0; round < 3; round++) {
        for (int strided = 0; strided < 2; strided++) {
            tg_tape *tape = tg_tape_create();
            int ndim = (int)tt_randint(1, 4), perm[TG_MAX_DIMS];
            int64_t shape[TG_MAX_DIMS], permuted[TG_MAX_DIMS];
            random_shape(ndim, 3, shape);
            random_perm(ndim, perm);
            for (int i = 0; i < ndim; i++) permuted[i] = shape[perm[i]];
            tg_tensor *x = random_input(tape, strided, ndim, shape);
            tg_tensor *inputs[2] = {x, tt_randn(tape, TG_F64, ndim, permuted)};
            tt_gradcheck(strided ? "tg_permute strided" : "tg_permute", permute_loss, inputs, 2, perm, NULL);
            tg_tape_free(tape);
        }
    }
}

Test(shape, permute_values_and_shared_storage)
{
    tg_tape *tape = tg_tape_create();
    int ndim = (int)tt_randint(2, 5), perm[TG_MAX_DIMS];
    int64_t shape[TG_MAX_DIMS];
    random_shape(ndim, 3, shape);
    random_perm(ndim, perm);
    tg_tensor *x = tt_strided_leaf(tape, TG_F64, ndim, shape);
    tg_tensor *y = tg_permute(tape, x, perm);
    cr_assert(y, "%s", tg_last_error());
    cr_assert_eq(y->storage, x->storage, "permute is a view");
    int64_t j[TG_MAX_DIMS] = {0}, k[TG_MAX_DIMS];
    do {
        for (int i = 0; i < ndim; i++) k[perm[i]] = j[i]; /* y[j] = x[k] */
        cr_assert_eq(tg_get(y, j), tg_get(x, k));
        tg_set(x, k, -7.25 - (double)k[0]);
        cr_assert_eq(tg_get(y, j), -7.25 - (double)k[0], "a write to x shows in the view");
    } while (next_index(ndim, y->shape, j));
    tg_tape_free(tape);
}

typedef struct {
    int axis0, axis1;
} axes_arg;

static tg_tensor *transpose_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    const axes_arg *a = user;
    return weighted_sum(tape, tg_transpose(tape, in[0], a->axis0, a->axis1), in[1]);
}

Test(shape, transpose_gradcheck_and_values_with_negative_axes)
{
    for (int strided = 0; strided < 2; strided++) {
        tg_tape *tape = tg_tape_create();
        int64_t shape[3], swapped[3];
        random_shape(3, 4, shape);
        axes_arg axes = {(int)tt_randint(-3, 2), (int)tt_randint(-3, -1)};
        int a0 = (axes.axis0 + 3) % 3, a1 = (axes.axis1 + 3) % 3;
        memcpy(swapped, shape, sizeof swapped);
        swapped[a0] = shape[a1];
        swapped[a1] = shape[a0];
        tg_tensor *x = random_input(tape, strided, 3, shape);
        tg_tensor *inputs[2] = {x, tt_randn(tape, TG_F64, 3, swapped)};
        tt_gradcheck("tg_transpose", transpose_loss, inputs, 2, &axes, NULL);

        tg_tensor *y = tg_transpose(tape, x, axes.axis0, axes.axis1);
        cr_assert(y && y->storage == x->storage, "%s", tg_last_error());
        int64_t j[3] = {0}, k[3];
        do {
            memcpy(k, j, sizeof k);
            k[a0] = j[a1];
            k[a1] = j[a0];
            cr_assert_eq(tg_get(y, j), tg_get(x, k));
        } while (next_index(3, swapped, j));
        tg_tape_free(tape);
    }
}

/* ---- slice -------------------------------------------------------------------------------- */

typedef struct {
    int axis;
    int64_t start, end, step;
} slice_arg;

/* The indices NumPy's x[start:end:step] takes along an axis of size dim. */
static int64_t slice_indices(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *out)
{
    int64_t s = start < 0 ? start + dim : start, e = end < 0 ? end + dim : end;
    s = s < 0 ? 0 : s > dim ? dim : s;
    e = e < 0 ? 0 : e > dim ? dim : e;
    int64_t n = 0;
    for (int64_t k = s; k < e; k += step) out[n++] = k;
    return n;
}

static tg_tensor *slice_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    const slice_arg *s = user;
    return weighted_sum(tape, tg_slice(tape, in[0], s->axis, s->start, s->end, s->step), in[1]);
}

static slice_arg random_slice(int ndim, const int64_t *shape)
{
    slice_arg s;
    s.axis = (int)tt_randint(-ndim, ndim - 1);
    int64_t dim = shape[(s.axis + ndim) % ndim];
    s.start = tt_randint(-dim - 2, dim + 1);
    s.end = tt_randint(-dim - 2, dim + 2);
    s.step = tt_randint(1, 3);
    return s;
}

/* y against x at the indices slice_indices gives. */
static void assert_slice_values(const tg_tensor *x, const tg_tensor *y, const slice_arg *s)
{
    int axis = (s->axis + x->ndim) % x->ndim;
    int64_t taken[64];
    int64_t count = slice_indices(x->shape[axis], s->start, s->end, s->step, taken);
    cr_assert_eq(y->ndim, x->ndim);
    for (int i = 0; i < x->ndim; i++) cr_assert_eq(y->shape[i], i == axis ? count : x->shape[i]);
    if (count == 0) return;
    int64_t j[TG_MAX_DIMS] = {0}, k[TG_MAX_DIMS];
    do {
        memcpy(k, j, sizeof k);
        k[axis] = taken[j[axis]];
        cr_assert_eq(tg_get(y, j), tg_get(x, k));
    } while (next_index(y->ndim, y->shape, j));
}

Test(shape, slice_gradcheck_random_bounds_and_steps)
{
    for (int round = 0; round < 6; round++) {
        tg_tape *tape = tg_tape_create();
        int64_t shape[3], taken[64], wshape[3];
        random_shape(3, 5, shape);
        slice_arg s = random_slice(3, shape);
        int axis = (s.axis + 3) % 3;
        if (round == 0) { /* always one slice that takes at least two elements, step apart */
            shape[axis] = tt_randint(3, 5);
            s = (slice_arg){s.axis, 0, INT64_MAX, 2};
        }
        memcpy(wshape, shape, sizeof wshape);
        wshape[axis] = slice_indices(shape[axis], s.start, s.end, s.step, taken);
        tg_tensor *x = random_input(tape, round % 2, 3, shape);
        tg_tensor *inputs[2] = {x, tt_randn(tape, TG_F64, 3, wshape)};
        char what[96];
        snprintf(what, sizeof what, "tg_slice axis %d [%lld:%lld:%lld]%s", s.axis, (long long)s.start, (long long)s.end,
                 (long long)s.step, round % 2 ? " strided" : "");
        tt_gradcheck(what, slice_loss, inputs, 2, &s, NULL);
        tg_tape_free(tape);
    }
}

Test(shape, slice_gradient_is_dy_on_taken_positions_and_zero_elsewhere)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 4), tt_randint(5, 9)}, taken[64];
    tg_tensor *x = tt_strided_leaf(tape, TG_F64, 2, shape);
    slice_arg s = {-1, tt_randint(0, 1), INT64_MAX, tt_randint(2, 3)}; /* two or more elements */
    int64_t count = slice_indices(shape[1], s.start, s.end, s.step, taken);
    tg_tensor *w = tt_randn(tape, TG_F64, 2, (int64_t[]){shape[0], count});
    cr_assert_eq(tg_backward(tape, slice_loss(tape, (tg_tensor *[]){x, w}, 2, &s)), TG_OK, "%s", tg_last_error());
    for (int64_t r = 0; r < shape[0]; r++) {
        for (int64_t c = 0, t = 0; c < shape[1]; c++) {
            double expected = t < count && taken[t] == c ? tg_get(w, (int64_t[]){r, t++}) : 0.0;
            cr_assert_eq(tg_get(x->grad, (int64_t[]){r, c}), expected);
        }
    }
    tg_tape_free(tape);
}

Test(shape, slice_values_bounds_and_shared_storage)
{
    tg_tape *tape = tg_tape_create();
    for (int round = 0; round < 20; round++) {
        int64_t shape[3];
        random_shape(3, 6, shape);
        tg_tensor *x = round % 2 ? tt_strided_leaf(tape, TG_F64, 3, shape) : tt_randn(tape, TG_F64, 3, shape);
        slice_arg s = random_slice(3, shape);
        tg_tensor *y = tg_slice(tape, x, s.axis, s.start, s.end, s.step);
        cr_assert(y, "%s", tg_last_error());
        assert_slice_values(x, y, &s);
    }
    /* explicit NumPy-style edges on a length-6 axis */
    tg_tensor *x = tt_randn(tape, TG_F64, 2, (int64_t[]){2, 6});
    const slice_arg edges[] = {
        {1, -2, INT64_MAX, 1}, /* the last two */
        {1, 4, 2, 1},          /* start after end: empty */
        {1, -100, 100, 2},     /* clamped to the whole axis */
        {1, 0, 6, INT64_MAX},  /* one element */
        {0, 2, 5, 1},          /* start = dim: empty */
        {-1, 1, -1, 3},        /* negative end */
    };
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++) {
        const slice_arg *s = &edges[e];
        tg_tensor *y = tg_slice(tape, x, s->axis, s->start, s->end, s->step);
        cr_assert(y, "edge %zu: %s", e, tg_last_error());
        assert_slice_values(x, y, s);
    }
    tg_tensor *last_two = tg_slice(tape, x, 1, -2, INT64_MAX, 1);
    cr_assert_eq(last_two->shape[1], 2);
    cr_assert_eq(tg_slice(tape, x, 1, 4, 2, 1)->shape[1], 0);
    cr_assert_eq(last_two->storage, x->storage);
    tg_set(x, (int64_t[]){1, 5}, 99.5);
    cr_assert_eq(tg_get(last_two, (int64_t[]){1, 1}), 99.5, "a write to x shows in the slice");
    tg_tape_free(tape);
}

/* ---- concat ------------------------------------------------------------------------------- */

typedef struct {
    int n;
    int axis;
} concat_arg;

/* in[0..n-1] are the pieces, in[n] the weight. */
static tg_tensor *concat_loss(tg_tape *tape, tg_tensor *const *in, int n_inputs, void *user)
{
    (void)n_inputs;
    const concat_arg *c = user;
    return weighted_sum(tape, tg_concat(tape, in, c->n, c->axis), in[c->n]);
}

/* y against the pieces: along axis, y's index falls in exactly one piece. */
static void assert_concat_values(tg_tensor *const *xs, int n, int axis, const tg_tensor *y)
{
    int64_t j[TG_MAX_DIMS] = {0}, k[TG_MAX_DIMS];
    if (tg_numel(y) == 0) return;
    do {
        memcpy(k, j, sizeof k);
        int piece = 0;
        while (k[axis] >= xs[piece]->shape[axis]) k[axis] -= xs[piece++]->shape[axis];
        cr_assert_lt(piece, n);
        cr_assert_eq(tg_get(y, j), tg_get(xs[piece], k));
    } while (next_index(y->ndim, y->shape, j));
}

Test(shape, concat_gradcheck_one_and_three_pieces)
{
    for (int round = 0; round < 4; round++) {
        tg_tape *tape = tg_tape_create();
        concat_arg c = {round < 2 ? 1 : 3, (int)tt_randint(-3, 2)};
        int axis = (c.axis + 3) % 3;
        int64_t shape[3], total = 0;
        random_shape(3, 3, shape);
        tg_tensor *inputs[4];
        for (int i = 0; i < c.n; i++) {
            shape[axis] = tt_randint(1, 3); /* the sizes along axis differ */
            total += shape[axis];
            inputs[i] = random_input(tape, (round + i) % 2, 3, shape);
        }
        shape[axis] = total;
        inputs[c.n] = tt_randn(tape, TG_F64, 3, shape);
        tt_gradcheck(c.n == 1 ? "tg_concat of 1" : "tg_concat of 3", concat_loss, inputs, c.n + 1, &c, NULL);
        tg_tensor *y = tg_concat(tape, inputs, c.n, c.axis);
        cr_assert(y && tg_is_contiguous(y), "%s", tg_last_error());
        cr_assert_neq(y->storage, inputs[0]->storage, "concat copies");
        assert_concat_values(inputs, c.n, axis, y);
        tg_tape_free(tape);
    }
}

static tg_tensor *concat_self_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    (void)user;
    tg_tensor *twice[2] = {in[0], in[0]};
    return weighted_sum(tape, tg_concat(tape, twice, 2, 0), in[1]);
}

Test(shape, concat_of_a_tensor_with_itself_sums_both_gradients)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 3), tt_randint(1, 4)};
    tg_tensor *x = tt_leaf(tape, TG_F64, 2, shape);
    tg_tensor *inputs[2] = {x, tt_randn(tape, TG_F64, 2, (int64_t[]){2 * shape[0], shape[1]})};
    tt_gradcheck("tg_concat x with x", concat_self_loss, inputs, 2, NULL, NULL);
    tg_tape_free(tape);
}

Test(shape, concat_with_an_empty_piece)
{
    tg_tape *tape = tg_tape_create();
    int64_t rows = tt_randint(1, 4);
    tg_tensor *xs[3] = {tt_randn(tape, TG_F64, 2, (int64_t[]){rows, 2}),
                        tt_randn(tape, TG_F64, 2, (int64_t[]){rows, 0}),
                        tt_strided_leaf(tape, TG_F64, 2, (int64_t[]){rows, 3})};
    tg_tensor *y = tg_concat(tape, xs, 3, -1);
    cr_assert(y, "%s", tg_last_error());
    cr_assert(y->shape[0] == rows && y->shape[1] == 5);
    assert_concat_values(xs, 3, 1, y);
    tg_tape_free(tape);
}

/* ---- split -------------------------------------------------------------------------------- */

typedef struct {
    int axis;
    int n;
    int64_t sizes[8];
    bool last_only; /* the loss uses only the last piece */
} split_arg;

/* loss = Σ_i Σ piece_i · w_i, where the w_i are the same cut of the weight in[1]. */
static tg_tensor *split_loss(tg_tape *tape, tg_tensor *const *in, int n_inputs, void *user)
{
    (void)n_inputs;
    const split_arg *s = user;
    tg_tensor *pieces[8], *weights[8];
    if (tg_split(tape, in[0], s->axis, s->n, s->sizes, pieces) != TG_OK) return NULL;
    if (tg_split(tape, in[1], s->axis, s->n, s->sizes, weights) != TG_OK) return NULL;
    tg_tensor *loss = weighted_sum(tape, pieces[s->n - 1], weights[s->n - 1]);
    for (int i = 0; !s->last_only && i < s->n - 1; i++)
        loss = tg_add(tape, loss, weighted_sum(tape, pieces[i], weights[i]));
    return loss;
}

/* n random sizes ≥ 0 adding up to dim. */
static void random_sizes(int64_t dim, int n, int64_t *sizes)
{
    int64_t left = dim;
    for (int i = 0; i < n - 1; i++) {
        sizes[i] = tt_randint(0, left);
        left -= sizes[i];
    }
    sizes[n - 1] = left;
}

Test(shape, split_gradcheck_one_and_several_pieces)
{
    for (int round = 0; round < 6; round++) {
        tg_tape *tape = tg_tape_create();
        int64_t shape[3];
        random_shape(3, 4, shape);
        split_arg s = {(int)tt_randint(-3, 2), round < 2 ? 1 : (int)tt_randint(2, 4), {0}, round == 5};
        shape[(s.axis + 3) % 3] = tt_randint(2, 6);
        random_sizes(shape[(s.axis + 3) % 3], s.n, s.sizes);
        tg_tensor *inputs[2] = {random_input(tape, round % 2, 3, shape), tt_randn(tape, TG_F64, 3, shape)};
        char what[64];
        snprintf(what, sizeof what, "tg_split into %d%s", s.n, s.last_only ? " (last piece used)" : "");
        tt_gradcheck(what, split_loss, inputs, 2, &s, NULL);
        tg_tape_free(tape);
    }
}

Test(shape, split_values_and_shared_storage)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[3];
    random_shape(3, 4, shape);
    int axis = (int)tt_randint(0, 2), n = (int)tt_randint(1, 5);
    shape[axis] = tt_randint(1, 7);
    int64_t sizes[5];
    random_sizes(shape[axis], n, sizes);
    tg_tensor *x = tt_strided_leaf(tape, TG_F64, 3, shape), *pieces[5];
    cr_assert_eq(tg_split(tape, x, axis - 3, n, sizes, pieces), TG_OK, "%s", tg_last_error());
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        cr_assert_eq(pieces[i]->storage, x->storage, "split gives views");
        for (int d = 0; d < 3; d++) cr_assert_eq(pieces[i]->shape[d], d == axis ? sizes[i] : shape[d]);
        int64_t j[3] = {0}, k[3];
        if (sizes[i] > 0) do {
                memcpy(k, j, sizeof k);
                k[axis] += start;
                cr_assert_eq(tg_get(pieces[i], j), tg_get(x, k));
                tg_set(x, k, 3.5 + (double)i);
                cr_assert_eq(tg_get(pieces[i], j), 3.5 + (double)i, "a write to x shows in the piece");
            } while (next_index(3, pieces[i]->shape, j));
        start += sizes[i];
    }
    tg_tape_free(tape);
}

/* ---- dtypes --------------------------------------------------------------------------------- */

Test(shape, i32_tensors_move_like_floats)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(2, 4), tt_randint(2, 5)};
    tg_tensor *ids = tt_ids(tape, 2, shape, 1000);
    tg_tensor *t = tg_transpose(tape, ids, 0, 1);
    tg_tensor *flat = tg_reshape(tape, t, 1, (int64_t[]){-1});
    tg_tensor *cut = tg_slice(tape, ids, 1, 1, INT64_MAX, 2);
    tg_tensor *both[2] = {ids, ids};
    tg_tensor *joined = tg_concat(tape, both, 2, 0), *halves[2];
    cr_assert(t && flat && cut && joined, "%s", tg_last_error());
    cr_assert_eq(tg_split(tape, ids, 1, 2, (int64_t[]){1, shape[1] - 1}, halves), TG_OK, "%s", tg_last_error());
    cr_assert(flat->dtype == TG_I32 && joined->dtype == TG_I32 && halves[1]->dtype == TG_I32);
    for (int64_t r = 0; r < shape[0]; r++)
        for (int64_t c = 0; c < shape[1]; c++) {
            double v = tg_get(ids, (int64_t[]){r, c});
            cr_assert_eq(tg_get_flat(flat, c * shape[0] + r), v);
            cr_assert_eq(tg_get(joined, (int64_t[]){r + shape[0], c}), v);
            if (c % 2 == 1) cr_assert_eq(tg_get(cut, (int64_t[]){r, c / 2}), v);
            if (c >= 1) cr_assert_eq(tg_get(halves[1], (int64_t[]){r, c - 1}), v);
        }
    tg_tape_free(tape);
}

Test(shape, f32_and_bf16_match_f64)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[3] = {2, tt_randint(2, 4), tt_randint(1, 6)};
    tg_tensor *a64 = tt_strided_leaf(tape, TG_F64, 3, shape), *b64 = tt_randn(tape, TG_F64, 3, shape);
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    const double tolerance[2] = {1e-5, 1e-2};
    for (int d = 0; d < 2; d++) {
        /* a strided copy in the low dtype, so that reshape takes its copying path */
        tg_tensor *a = tg_transpose(tape, tg_to_dtype(tape, tg_transpose(tape, a64, 0, 2), dtypes[d]), 0, 2);
        tg_tensor *b = tg_to_dtype(tape, b64, dtypes[d]);
        int64_t rows[2] = {-1, shape[2]};
        tg_tensor *pair[2] = {tg_reshape(tape, a, 2, rows), tg_reshape(tape, b, 2, rows)};
        tg_tensor *pair64[2] = {tg_reshape(tape, a64, 2, rows), tg_reshape(tape, b64, 2, rows)};
        cr_assert(!tg_is_contiguous(a) && pair[0] && pair[0]->storage != a->storage, "%s", tg_last_error());
        tg_tensor *y = tg_slice(tape, tg_concat(tape, pair, 2, 0), 0, 1, -1, 2);
        tg_tensor *ref = tg_slice(tape, tg_concat(tape, pair64, 2, 0), 0, 1, -1, 2);
        cr_assert(y && ref, "%s", tg_last_error());
        cr_assert_eq(y->dtype, dtypes[d]);
        cr_assert_lt(tt_rel_error(y, ref), tolerance[d], "%s", tg_dtype_name(dtypes[d]));
    }
    tg_tape_free(tape);
}

/* ---- bad input ------------------------------------------------------------------------------ */

Test(shape, reshape_permute_transpose_bad_inputs_fail_cleanly)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3});
    tg_tensor *empty = tt_randn(tape, TG_F32, 2, (int64_t[]){0, 3});
    tg_tensor *cuda = tt_fake_cuda(tape, x);
    tt_state s = tt_snapshot(tape);
    const char *op = "tg_reshape";
    tt_assert_failed_with(&s, tg_reshape(NULL, x, 1, (int64_t[]){6}), op, "tape", NULL);
    tt_assert_failed_with(&s, tg_reshape(tape, NULL, 1, (int64_t[]){6}), op, "NULL", NULL);
    tt_assert_failed_with(&s, tg_reshape(tape, x, 1, NULL), op, "NULL", NULL);
    tt_assert_failed_with(&s, tg_reshape(tape, x, 0, (int64_t[]){6}), op, "dimensions", NULL);
    tt_assert_failed_with(&s, tg_reshape(tape, x, 7, (int64_t[]){6, 1, 1, 1, 1, 1, 1}), op, "dimensions", NULL);
    tt_assert_failed_with(&s, tg_reshape(tape, x, 2, (int64_t[]){4, 2}), op, "6", "[4, 2]", "[2, 3]", NULL);
    tt_assert_failed_with(&s, tg_reshape(tape, x, 2, (int64_t[]){-1, 4}), op, "[-1, 4]", NULL);
    tt_assert_failed_with(&s, tg_reshape(tape, x, 3, (int64_t[]){-1, 3, -1}), op, "-1", NULL);
    tt_assert_failed_with(&s, tg_reshape(tape, x, 2, (int64_t[]){-2, -3}), op, "-2", NULL);
    tt_assert_failed_with(&s, tg_reshape(tape, x, 2, (int64_t[]){INT64_MAX / 2, 4}), op, "too large", NULL);
    tt_assert_failed_with(&s, tg_reshape(tape, empty, 2, (int64_t[]){0, -1}), op, "[0, -1]", NULL);
    tt_assert_failed_with(&s, tg_reshape(tape, cuda, 1, (int64_t[]){6}), op, "cuda", NULL);

    op = "tg_permute";
    tt_assert_failed_with(&s, tg_permute(NULL, x, (int[]){1, 0}), op, "tape", NULL);
    tt_assert_failed_with(&s, tg_permute(tape, NULL, (int[]){1, 0}), op, "NULL", NULL);
    tt_assert_failed_with(&s, tg_permute(tape, x, NULL), op, "perm", NULL);
    tt_assert_failed_with(&s, tg_permute(tape, x, (int[]){1, 1}), op, "[1, 1]", "permutation", NULL);
    tt_assert_failed_with(&s, tg_permute(tape, x, (int[]){0, 2}), op, "[0, 2]", NULL);
    tt_assert_failed_with(&s, tg_permute(tape, x, (int[]){-1, 0}), op, "[-1, 0]", NULL);
    tt_assert_failed_with(&s, tg_permute(tape, cuda, (int[]){1, 0}), op, "cuda", NULL);

    op = "tg_transpose";
    tt_assert_failed_with(&s, tg_transpose(NULL, x, 0, 1), op, "tape", NULL);
    tt_assert_failed_with(&s, tg_transpose(tape, NULL, 0, 1), op, "NULL", NULL);
    tt_assert_failed_with(&s, tg_transpose(tape, x, 0, 2), op, "axis 2", NULL);
    tt_assert_failed_with(&s, tg_transpose(tape, x, -3, 1), op, "axis -3", NULL);
    tt_assert_failed_with(&s, tg_transpose(tape, cuda, 0, 1), op, "cuda", NULL);
    for (int64_t i = 0; i < 6; i++) cr_assert_eq(tg_get_flat(x->grad, i), 0.0);
    tg_tape_free(tape);
}

Test(shape, slice_and_concat_bad_inputs_fail_cleanly)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3});
    tg_tensor *wide = tt_randn(tape, TG_F32, 2, (int64_t[]){4, 5});
    tg_tensor *d = tt_randn(tape, TG_F64, 2, (int64_t[]){2, 3});
    tg_tensor *flat = tt_randn(tape, TG_F32, 1, (int64_t[]){6});
    tg_tensor *ids = tt_ids(tape, 2, (int64_t[]){2, 3}, 5);
    tg_tensor *cuda = tt_fake_cuda(tape, x);
    tt_state s = tt_snapshot(tape);
    const char *op = "tg_slice";
    tt_assert_failed_with(&s, tg_slice(NULL, x, 0, 0, 1, 1), op, "tape", NULL);
    tt_assert_failed_with(&s, tg_slice(tape, NULL, 0, 0, 1, 1), op, "NULL", NULL);
    tt_assert_failed_with(&s, tg_slice(tape, x, 2, 0, 1, 1), op, "axis 2", NULL);
    tt_assert_failed_with(&s, tg_slice(tape, x, -3, 0, 1, 1), op, "axis -3", NULL);
    tt_assert_failed_with(&s, tg_slice(tape, x, 0, 0, 1, 0), op, "step", "0", NULL);
    tt_assert_failed_with(&s, tg_slice(tape, x, 0, 1, 0, -1), op, "step", "-1", NULL);
    tt_assert_failed_with(&s, tg_slice(tape, cuda, 0, 0, 1, 1), op, "cuda", NULL);

    op = "tg_concat";
    tg_tensor *pair[2] = {x, x};
    tt_assert_failed_with(&s, tg_concat(NULL, pair, 2, 0), op, "tape", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, NULL, 2, 0), op, "NULL", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, pair, 0, 0), op, "n = 0", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, pair, -1, 0), op, "n = -1", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, (tg_tensor *[]){x, NULL}, 2, 0), op, "xs[1]", "NULL", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, (tg_tensor *[]){x, d}, 2, 0), op, "dtype", "f32", "f64", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, (tg_tensor *[]){ids, x}, 2, 0), op, "dtype", "i32", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, (tg_tensor *[]){x, cuda}, 2, 0), op, "device", "cuda", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, (tg_tensor *[]){cuda, cuda}, 2, 0), op, "cuda", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, (tg_tensor *[]){x, flat}, 2, 0), op, "xs[1]", "[6]", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, (tg_tensor *[]){x, x, wide}, 3, 0), op, "xs[2]", "[4, 5]", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, pair, 2, 2), op, "axis 2", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, pair, 2, -3), op, "axis -3", NULL);
    for (int64_t i = 0; i < 6; i++) cr_assert_eq(tg_get_flat(x->grad, i), 0.0);
    tg_tape_free(tape);
}

/* tg_split failed cleanly, named the words, and left out as it was. */
static void assert_split_failed(const tt_state *s, tg_status status, tg_tensor *const *out, const char *word)
{
    tt_assert_status_failed(s, status, "tg_split");
    cr_assert(strstr(tg_last_error(), word), "tg_split: the error should mention \"%s\", got: \"%s\"", word,
              tg_last_error());
    for (int i = 0; i < 3; i++) cr_assert_null(out[i], "tg_split wrote to out on error");
}

Test(shape, split_bad_inputs_fail_cleanly_and_leave_out_alone)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3});
    tg_tensor *cuda = tt_fake_cuda(tape, x);
    tg_tensor *out[3] = {NULL, NULL, NULL};
    int64_t sizes[3] = {1, 0, 2};
    tt_state s = tt_snapshot(tape);
    assert_split_failed(&s, tg_split(NULL, x, 1, 3, sizes, out), out, "tape");
    assert_split_failed(&s, tg_split(tape, NULL, 1, 3, sizes, out), out, "NULL");
    assert_split_failed(&s, tg_split(tape, x, 2, 3, sizes, out), out, "axis 2");
    assert_split_failed(&s, tg_split(tape, x, -3, 3, sizes, out), out, "axis -3");
    assert_split_failed(&s, tg_split(tape, x, 1, 0, sizes, out), out, "n = 0");
    assert_split_failed(&s, tg_split(tape, x, 1, 3, NULL, out), out, "sizes NULL");
    assert_split_failed(&s, tg_split(tape, x, 1, 3, sizes, NULL), out, "out NULL");
    assert_split_failed(&s, tg_split(tape, x, 1, 3, (int64_t[]){1, -1, 3}, out), out, "negative");
    assert_split_failed(&s, tg_split(tape, x, 1, 3, (int64_t[]){1, 1, 0}, out), out, "add up to 2");
    assert_split_failed(&s, tg_split(tape, x, 1, 3, (int64_t[]){1, 1, 2}, out), out, "more than");
    assert_split_failed(&s, tg_split(tape, x, 0, 3, sizes, out), out, "[2, 3]");
    assert_split_failed(&s, tg_split(tape, cuda, 1, 3, sizes, out), out, "cuda");
    for (int64_t i = 0; i < 6; i++) cr_assert_eq(tg_get_flat(x->grad, i), 0.0);
    tg_tape_free(tape);
}
