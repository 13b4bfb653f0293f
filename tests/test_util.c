/* tests/test_util.c: see test_util.h. */
#include "test_util.h"

#include "core/internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static tg_rng rng;
static uint64_t seed;
static bool seeded;

uint64_t tt_seed(void)
{
    if (!seeded) {
        const char *env = getenv("TG_TEST_SEED");
        seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
        tg_rng_seed(&rng, seed);
        seeded = true;
    }
    return seed;
}

tg_rng *tt_rng(void)
{
    tt_seed();
    return &rng;
}

int64_t tt_randint(int64_t low, int64_t high) { return low + tg_rng_below(tt_rng(), high - low + 1); }

tg_tensor *tt_randn(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape)
{
    tg_tensor *t = tg_empty(tape, dtype, TG_DEVICE_CPU, ndim, shape);
    cr_assert(t, "tt_randn: %s", tg_last_error());
    tg_fill_normal(t, tt_rng(), 0.0, 1.0);
    return t;
}

tg_tensor *tt_leaf(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape)
{
    tg_tensor *t = tt_randn(tape, dtype, ndim, shape);
    cr_assert_eq(tg_set_requires_grad(t, true), TG_OK, "%s", tg_last_error());
    return t;
}

tg_tensor *tt_strided_leaf(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape)
{
    /* Base: the wanted shape with the first two dimensions swapped and the last doubled. */
    int64_t base_shape[TG_MAX_DIMS];
    memcpy(base_shape, shape, sizeof(int64_t) * (size_t)ndim);
    if (ndim >= 2) {
        base_shape[0] = shape[1];
        base_shape[1] = shape[0];
    }
    base_shape[ndim - 1] *= 2;
    tg_tensor *base = tt_randn(tape, dtype, ndim, base_shape);
    int64_t strides[TG_MAX_DIMS];
    memcpy(strides, base->strides, sizeof strides);
    strides[ndim - 1] *= 2; /* every other element of the last dimension */
    if (ndim >= 2) {
        int64_t swap = strides[0];
        strides[0] = strides[1];
        strides[1] = swap;
    }
    tg_tensor *view = tg_view(tape, base, ndim, shape, strides, 1);
    cr_assert(view);
    cr_assert(!tg_is_contiguous(view) || tg_numel(view) <= 1);
    cr_assert_eq(tg_set_requires_grad(view, true), TG_OK, "%s", tg_last_error());
    return view;
}

tg_tape *tt_dirty_tape(void)
{
    tg_tape *tape = tg_tape_create();
    cr_assert(tg_full(tape, TG_F64, TG_DEVICE_CPU, 1, (int64_t[]){1 << 16}, NAN));
    tg_tape_reset(tape);
    return tape;
}

tg_tensor *tt_ids(tg_tape *tape, int ndim, const int64_t *shape, int32_t bound)
{
    tg_tensor *t = tg_empty(tape, TG_I32, TG_DEVICE_CPU, ndim, shape);
    cr_assert(t, "tt_ids: %s", tg_last_error());
    int32_t *ids = tg_data(t);
    for (int64_t i = 0; i < tg_numel(t); i++) ids[i] = (int32_t)tg_rng_below(tt_rng(), bound);
    return t;
}

void tt_gradcheck(const char *what, tg_gradcheck_fn fn, tg_tensor *const *inputs, int n_inputs, void *user,
                  const tg_gradcheck_options *opts)
{
    tg_gradcheck_result result;
    tg_status status = tg_gradcheck(fn, inputs, n_inputs, user, opts, &result);
    cr_assert_eq(status, TG_OK, "%s: gradcheck could not run: %s (seed %llu)", what, tg_last_error(),
                 (unsigned long long)tt_seed());
    cr_assert(result.passed, "%s: %s (seed %llu)", what, result.message, (unsigned long long)tt_seed());
}

/* All of t's values as doubles on the host (one copy, whatever the device). */
static double *host_values(const tg_tensor *t)
{
    int64_t n = tg_numel(t);
    double *values = malloc(sizeof(double) * (size_t)(n ? n : 1));
    cr_assert(values);
    cr_assert_eq(tg_copy_to_host(t, values, TG_F64), TG_OK, "%s", tg_last_error());
    return values;
}

double tt_rel_error(const tg_tensor *a, const tg_tensor *b)
{
    cr_assert(tg_same_shape(a, b), "tt_rel_error: shapes differ");
    double *av = host_values(a), *bv = host_values(b), diff = 0, norm = 0;
    bool nan = false;
    for (int64_t i = 0; i < tg_numel(a); i++) {
        nan = nan || isnan(av[i]) || isnan(bv[i]);
        diff += (av[i] - bv[i]) * (av[i] - bv[i]);
        norm += bv[i] * bv[i];
    }
    free(av);
    free(bv);
    if (nan) return INFINITY;
    return norm > 0 ? sqrt(diff / norm) : sqrt(diff);
}

double tt_norm(const tg_tensor *t)
{
    double *v = host_values(t), sum = 0;
    for (int64_t i = 0; i < tg_numel(t); i++) sum += v[i] * v[i];
    free(v);
    return sqrt(sum);
}

double tt_distance(const tg_tensor *a, const tg_tensor *b)
{
    cr_assert(tg_same_shape(a, b), "tt_distance: shapes differ");
    double *av = host_values(a), *bv = host_values(b), sum = 0;
    for (int64_t i = 0; i < tg_numel(a); i++) sum += (av[i] - bv[i]) * (av[i] - bv[i]);
    free(av);
    free(bv);
    return sqrt(sum);
}

double *tt_params_grads(tg_params *params)
{
    double *grads = malloc(sizeof(double) * (size_t)tg_params_numel(params));
    cr_assert(grads, "out of memory");
    int64_t offset = 0;
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *g = tg_params_get(params, i)->grad;
        cr_assert_eq(tg_copy_to_host(g, grads + offset, TG_F64), TG_OK, "%s", tg_last_error());
        offset += tg_numel(g);
    }
    return grads;
}

tg_tensor *tt_f64_copy(tg_tape *tape, const tg_tensor *t, bool absolute)
{
    double *values = host_values(t);
    for (int64_t i = 0; absolute && i < tg_numel(t); i++) values[i] = fabs(values[i]);
    tg_tensor *copy = tg_from_data(tape, TG_F64, TG_DEVICE_CPU, t->ndim, t->shape, values);
    free(values);
    cr_assert(copy, "tt_f64_copy: %s", tg_last_error());
    return copy;
}

tt_state tt_snapshot(tg_tape *tape)
{
    tg_clear_error();
    return (tt_state){tape, tg_tape_node_count(tape), tg_tape_bytes_in_use(tape)};
}

static void assert_clean(const tt_state *before, const char *op)
{
    const char *message = tg_last_error();
    cr_assert(strstr(message, op), "the error should name %s, got: \"%s\"", op, message);
    cr_assert_eq(tg_tape_node_count(before->tape), before->nodes, "%s: a failed op left nodes on the tape", op);
    cr_assert_eq(tg_tape_bytes_in_use(before->tape), before->bytes, "%s: a failed op left memory on the tape (%s)", op,
                 message);
}

void tt_assert_failed(const tt_state *before, const void *result, const char *op)
{
    cr_assert_null(result, "%s should have failed", op);
    assert_clean(before, op);
}

void tt_assert_failed_with(const tt_state *before, const void *result, const char *op, ...)
{
    tt_assert_failed(before, result, op);
    va_list words;
    va_start(words, op);
    for (const char *word = va_arg(words, const char *); word; word = va_arg(words, const char *))
        cr_assert(strstr(tg_last_error(), word), "%s: the error should mention \"%s\", got: \"%s\"", op, word,
                  tg_last_error());
    va_end(words);
}

void tt_assert_status_failed(const tt_state *before, tg_status status, const char *op)
{
    cr_assert_neq(status, TG_OK, "%s should have failed", op);
    assert_clean(before, op);
}

void tt_require_cuda(void)
{
    if (!tg_device_available(TG_DEVICE_CUDA)) cr_skip("no usable CUDA device in this build or machine");
}

tg_tensor *tt_cuda_twin(tg_tape *tape, tg_tensor *x, bool keep_layout)
{
    tg_tensor *twin;
    if (keep_layout) {
        /* The same geometry over a device buffer as large as x's storage. */
        int64_t span = x->offset + 1;
        for (int d = 0; d < x->ndim; d++) span += (x->shape[d] - 1) * x->strides[d];
        tg_tensor *buffer = tg_zeros(tape, x->dtype, TG_DEVICE_CUDA, 1, &span);
        cr_assert(buffer, "tt_cuda_twin: %s", tg_last_error());
        twin = tg_view(tape, buffer, x->ndim, x->shape, x->strides, x->offset);
    } else {
        twin = tg_empty(tape, x->dtype, TG_DEVICE_CUDA, x->ndim, x->shape);
    }
    cr_assert(twin, "tt_cuda_twin: %s", tg_last_error());
    cr_assert_eq(tg_copy(twin, x), TG_OK, "tt_cuda_twin: %s", tg_last_error());
    if (x->requires_grad) cr_assert_eq(tg_set_requires_grad(twin, true), TG_OK, "%s", tg_last_error());
    return twin;
}

tg_tensor *tt_fake_cuda(tg_tape *tape, const tg_tensor *x)
{
    tg_tensor *fake = tg_tape_alloc(tape, sizeof *fake);
    *fake = *x;
    fake->device = TG_DEVICE_CUDA;
    fake->requires_grad = false;
    fake->grad = NULL;
    fake->producer = NULL;
    return fake;
}
