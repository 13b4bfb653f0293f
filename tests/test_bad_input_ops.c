/* tests/test_bad_input_ops.c: the bad-input matrix over the ops and the layers' forwards.
 *
 * Every op below is called with valid inputs but one broken: the tape NULL, or one tensor
 * NULL, of the wrong dtype, of another float dtype than the rest, claiming a device its
 * memory is not on, released to be recomputed, without storage, or of an impossible rank.
 * Hand-written cases after the table cover what only one op can get wrong (shapes, axes,
 * sizes). */
#include "bad_input.h"

#include <stdio.h>
#include <string.h>

#define MAX_TENSORS 9

typedef struct {
    const char *function;
    int n_tensors;
    const char *names[MAX_TENSORS]; /* as the op's messages name them */
    unsigned optional;              /* bit i: tensor i may be NULL */
    unsigned ids;                   /* bit i: tensor i holds i32 ids (the others are float) */
    bool float_with_params;         /* the float tensors meet the model's f32 parameters */
    bool any_dtype;                 /* a shape op: ids are as welcome as floats */
    void (*make)(bi_fixture *f, tg_tensor **t);
    const void *(*call)(tg_tape *tape, bi_fixture *f, tg_tensor *const *t);
} op_under_test;

/* a compound literal, which the formatter would spread over two lines */
// clang-format off
#define SHAPE(...) (int64_t[]){__VA_ARGS__}
// clang-format on
#define NDIM(...) ((int)(sizeof(int64_t[]){__VA_ARGS__} / sizeof(int64_t)))
#define RANDN(...) bi_leaf(f, TG_F32, NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__))

/* ---- valid inputs ---------------------------------------------------------------------- */

static void two_2x3(bi_fixture *f, tg_tensor **t) { t[0] = RANDN(2, 3), t[1] = RANDN(2, 3); }
static void one_2x3(bi_fixture *f, tg_tensor **t) { t[0] = RANDN(2, 3); }
static void matmul_inputs(bi_fixture *f, tg_tensor **t) { t[0] = RANDN(2, 3), t[1] = RANDN(3, 4); }
static void embedding_inputs(bi_fixture *f, tg_tensor **t) { t[0] = RANDN(5, 3), t[1] = bi_ids(f, 2, SHAPE(2, 4), 5); }
static void norm_inputs(bi_fixture *f, tg_tensor **t) { t[0] = RANDN(2, 3), t[1] = RANDN(3); }
static void add_norm_inputs(bi_fixture *f, tg_tensor **t) { t[0] = RANDN(2, 3), t[1] = RANDN(2, 3), t[2] = RANDN(3); }
static void loss_inputs(bi_fixture *f, tg_tensor **t) { t[0] = RANDN(2, 3, 5), t[1] = bi_ids(f, 2, SHAPE(2, 3), 5); }
static void conv_inputs(bi_fixture *f, tg_tensor **t)
{
    t[0] = RANDN(2, 3, 6), t[1] = RANDN(3, 4), t[2] = RANDN(3), t[3] = RANDN(2, 3, 3);
}
static void scan_inputs(bi_fixture *f, tg_tensor **t)
{
    t[0] = RANDN(2, 3, 5), t[1] = RANDN(2, 3, 5), t[2] = RANDN(3, 4), t[3] = RANDN(2, 4, 5), t[4] = RANDN(2, 4, 5);
    t[5] = RANDN(3), t[6] = RANDN(2, 3, 5), t[7] = RANDN(3), t[8] = RANDN(2, 3, 4);
}
static void model_ids(bi_fixture *f, tg_tensor **t)
{
    bi_model(f);
    t[0] = bi_ids(f, 2, SHAPE(2, 5), 8);
    t[1] = bi_ids(f, 2, SHAPE(2, 5), 8);
}
static void model_activations(bi_fixture *f, tg_tensor **t)
{
    bi_model(f);
    t[0] = RANDN(2, 5, 8);
}

/* ---- the calls ---------------------------------------------------------------------------- */

/* one wrapper per op; the formatter cannot lay out a list of function-defining macros */
// clang-format off
#define BINARY(name) \
    static const void *call_##name(tg_tape *tape, bi_fixture *f, tg_tensor *const *t) { (void)f; return tg_##name(tape, t[0], t[1]); }
#define UNARY(name) \
    static const void *call_##name(tg_tape *tape, bi_fixture *f, tg_tensor *const *t) { (void)f; return tg_##name(tape, t[0]); }
BINARY(add) BINARY(sub) BINARY(mul) BINARY(div) BINARY(embedding)
UNARY(neg) UNARY(exp) UNARY(log) UNARY(tanh) UNARY(sigmoid) UNARY(silu) UNARY(softplus) UNARY(relu)
UNARY(sum_all) UNARY(mean_all) UNARY(contiguous) UNARY(softmax) UNARY(log_softmax)
    // clang-format on

    static const void *call_scale(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_scale(tape, t[0], 2.0);
}
static const void *call_matmul(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_matmul(tape, t[0], t[1], false, false);
}
static const void *call_sum(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_sum(tape, t[0], 1, true);
}
static const void *call_mean(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_mean(tape, t[0], -1, false);
}
static const void *call_reshape(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_reshape(tape, t[0], 2, SHAPE(3, -1));
}
static const void *call_permute(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_permute(tape, t[0], (int[]){1, 0});
}
static const void *call_transpose(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_transpose(tape, t[0], 0, 1);
}
static const void *call_slice(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_slice(tape, t[0], 1, 0, 3, 2);
}
static const void *call_concat(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_concat(tape, t, 2, 0);
}
static const void *call_to_dtype(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_to_dtype(tape, t[0], TG_F64);
}
static const void *call_to_device(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_to_device(tape, t[0], TG_DEVICE_CPU);
}
static const void *call_detach(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_detach(tape, t[0]);
}
static const void *call_rmsnorm(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_rmsnorm(tape, t[0], t[1], 1e-5);
}
static const void *call_cross_entropy(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_cross_entropy(tape, t[0], t[1], -100);
}
static const void *call_count_correct(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    return tg_count_correct(tape, t[0], t[1], -100);
}

static const void *call_split(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    tg_tensor *out[2] = {NULL, NULL};
    return tg_split(tape, t[0], 1, 2, SHAPE(1, 2), out) == TG_OK ? out[0] : NULL;
}

static const void *call_add_rmsnorm(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    tg_tensor *sum = NULL;
    return tg_add_rmsnorm(tape, t[0], t[1], t[2], 1e-5, &sum);
}

static const void *call_conv(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    tg_tensor *final_states = NULL;
    tg_causal_conv1d_options options = {
        .bias = t[2], .initial_states = t[3], .activation = TG_ACT_SILU, .final_states = &final_states};
    return tg_causal_conv1d(tape, t[0], t[1], &options);
}

static const void *call_scan(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    (void)f;
    tg_tensor *final_state = NULL;
    tg_selective_scan_options options = {.Dv = t[5],
                                         .z = t[6],
                                         .delta_bias = t[7],
                                         .delta_softplus = true,
                                         .initial_state = t[8],
                                         .final_state = &final_state};
    return tg_selective_scan(tape, t[0], t[1], t[2], t[3], t[4], &options);
}

static const void *call_linear(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    return tg_nn_linear_forward(tape, &f->model->layers[0].mixer.in_proj, t[0]);
}
static const void *call_rmsnorm_layer(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    return tg_nn_rmsnorm_forward(tape, &f->model->norm_f, t[0]);
}
static const void *call_embedding_layer(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    return tg_nn_embedding_forward(tape, &f->model->embedding, t[0]);
}
static const void *call_mixer(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    return tg_mamba_mixer_forward(tape, &f->model->layers[0].mixer, t[0], NULL, NULL);
}
static const void *call_mamba(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    return tg_mamba_forward(tape, f->model, t[0], NULL, NULL);
}
static const void *call_mamba_loss(tg_tape *tape, bi_fixture *f, tg_tensor *const *t)
{
    return tg_mamba_loss(tape, f->model, t[0], t[1], -100);
}

#define OP(fn, n, make_fn, call_fn, ...)                                                                               \
    {                                                                                                                  \
        .function = #fn, .n_tensors = n, .make = make_fn, .call = call_fn, __VA_ARGS__                                 \
    }
static const op_under_test ops[] = {
    OP(tg_add, 2, two_2x3, call_add, .names = {"a", "b"}),
    OP(tg_sub, 2, two_2x3, call_sub, .names = {"a", "b"}),
    OP(tg_mul, 2, two_2x3, call_mul, .names = {"a", "b"}),
    OP(tg_div, 2, two_2x3, call_div, .names = {"a", "b"}),
    OP(tg_scale, 1, one_2x3, call_scale, .names = {"x"}),
    OP(tg_neg, 1, one_2x3, call_neg, .names = {"x"}),
    OP(tg_exp, 1, one_2x3, call_exp, .names = {"x"}),
    OP(tg_log, 1, one_2x3, call_log, .names = {"x"}),
    OP(tg_tanh, 1, one_2x3, call_tanh, .names = {"x"}),
    OP(tg_sigmoid, 1, one_2x3, call_sigmoid, .names = {"x"}),
    OP(tg_silu, 1, one_2x3, call_silu, .names = {"x"}),
    OP(tg_softplus, 1, one_2x3, call_softplus, .names = {"x"}),
    OP(tg_relu, 1, one_2x3, call_relu, .names = {"x"}),
    OP(tg_matmul, 2, matmul_inputs, call_matmul, .names = {"a", "b"}),
    OP(tg_sum, 1, one_2x3, call_sum, .names = {"x"}),
    OP(tg_mean, 1, one_2x3, call_mean, .names = {"x"}),
    OP(tg_sum_all, 1, one_2x3, call_sum_all, .names = {"x"}),
    OP(tg_mean_all, 1, one_2x3, call_mean_all, .names = {"x"}),
    OP(tg_reshape, 1, one_2x3, call_reshape, .names = {"x"}, .any_dtype = true),
    OP(tg_permute, 1, one_2x3, call_permute, .names = {"x"}, .any_dtype = true),
    OP(tg_transpose, 1, one_2x3, call_transpose, .names = {"x"}, .any_dtype = true),
    OP(tg_slice, 1, one_2x3, call_slice, .names = {"x"}, .any_dtype = true),
    OP(tg_concat, 2, two_2x3, call_concat, .names = {"xs[0]", "xs[1]"}),
    OP(tg_split, 1, one_2x3, call_split, .names = {"x"}, .any_dtype = true),
    OP(tg_contiguous, 1, one_2x3, call_contiguous, .names = {"x"}, .any_dtype = true),
    OP(tg_to_dtype, 1, one_2x3, call_to_dtype, .names = {"x"}),
    OP(tg_to_device, 1, one_2x3, call_to_device, .names = {"x"}, .any_dtype = true),
    OP(tg_detach, 1, one_2x3, call_detach, .names = {"x"}, .any_dtype = true),
    OP(tg_embedding, 2, embedding_inputs, call_embedding, .names = {"table", "ids"}, .ids = 2),
    OP(tg_rmsnorm, 2, norm_inputs, call_rmsnorm, .names = {"x", "weight"}),
    OP(tg_add_rmsnorm, 3, add_norm_inputs, call_add_rmsnorm, .names = {"residual", "x", "weight"}),
    OP(tg_softmax, 1, one_2x3, call_softmax, .names = {"x"}),
    OP(tg_log_softmax, 1, one_2x3, call_log_softmax, .names = {"x"}),
    OP(tg_cross_entropy, 2, loss_inputs, call_cross_entropy, .names = {"logits", "targets"}, .ids = 2),
    OP(tg_count_correct, 2, loss_inputs, call_count_correct, .names = {"logits", "targets"}, .ids = 2),
    OP(tg_causal_conv1d, 4, conv_inputs, call_conv, .names = {"x", "weight", "bias", "initial_states"},
       .optional = 4 | 8),
    OP(tg_selective_scan, 9, scan_inputs, call_scan,
       .names = {"u", "delta", "A", "Bm", "Cm", "Dv", "z", "delta_bias", "initial_state"},
       .optional = 32 | 64 | 128 | 256),
    OP(tg_nn_linear_forward, 1, model_activations, call_linear, .names = {"x"}, .float_with_params = true),
    OP(tg_nn_rmsnorm_forward, 1, model_activations, call_rmsnorm_layer, .names = {"x"}, .float_with_params = true),
    OP(tg_nn_embedding_forward, 1, model_ids, call_embedding_layer, .names = {"ids"}, .ids = 1),
    OP(tg_mamba_mixer_forward, 1, model_activations, call_mixer, .names = {"x"}, .float_with_params = true),
    OP(tg_mamba_forward, 1, model_ids, call_mamba, .names = {"ids"}, .ids = 1),
    OP(tg_mamba_loss, 2, model_ids, call_mamba_loss, .names = {"ids", "targets"}, .ids = 1 | 2),
};
#define N_OPS (sizeof ops / sizeof ops[0])

/* ---- the broken inputs -------------------------------------------------------------------- */

typedef enum {
    TAPE_NULL,
    TENSOR_NULL,
    WRONG_KIND,  /* i32 where a float belongs, f32 where ids belong */
    OTHER_FLOAT, /* f64 among f32 tensors */
    FAKE_DEVICE,
    RELEASED,
    NO_STORAGE,
    RANK_ZERO,
    RANK_TOO_HIGH,
    N_MUTATIONS
} mutation;

static const char *const mutation_names[N_MUTATIONS] = {
    "NULL",
    "NULL",
    "the wrong dtype kind",
    "f64 among f32",
    "claims CUDA, data on the host",
    "released for recompute",
    "no storage",
    "ndim 0",
    "ndim above TG_MAX_DIMS",
};

static int float_count(const op_under_test *op)
{
    int n = op->float_with_params;
    for (int i = 0; i < op->n_tensors; i++) n += !(op->ids >> i & 1);
    return n;
}

static bool applies(const op_under_test *op, int i, mutation m)
{
    bool ids = op->ids >> i & 1;
    switch (m) {
    case TENSOR_NULL: return !(op->optional >> i & 1);
    case OTHER_FLOAT: return !ids && float_count(op) >= 2;
    case RELEASED: return !ids;
    case WRONG_KIND: return !op->any_dtype;
    default: return true;
    }
}

static tg_tensor *broken(bi_fixture *f, const op_under_test *op, int i, mutation m, tg_tensor *t)
{
    bool ids = op->ids >> i & 1;
    switch (m) {
    case TENSOR_NULL: return NULL;
    case WRONG_KIND: return ids ? bi_randn(f, TG_F32, t->ndim, t->shape) : bi_ids(f, t->ndim, t->shape, 2);
    case OTHER_FLOAT: return bi_randn(f, TG_F64, t->ndim, t->shape);
    case FAKE_DEVICE: return bi_fake_device(f, t);
    case RELEASED: return bi_released(f, t);
    case NO_STORAGE: return bi_no_storage(f, t);
    case RANK_ZERO: return bi_bad_rank(f, t, 0);
    case RANK_TOO_HIGH: return bi_bad_rank(f, t, TG_MAX_DIMS + 1);
    default: return t;
    }
}

static void run_broken_call(bi_fixture *f, const bi_case *c)
{
    const op_under_test *op = c->data;
    tg_tensor *t[MAX_TENSORS] = {0};
    op->make(f, t);
    tg_tape *tape = f->tape;
    if (c->mutation == TAPE_NULL)
        tape = NULL;
    else
        t[c->index] = broken(f, op, c->index, (mutation)c->mutation, t[c->index]);
    BI_EXPECT_NULL(f, op->call(tape, f, t));
}

__attribute__((constructor)) static void register_broken_calls(void)
{
    for (size_t k = 0; k < N_OPS; k++) {
        const op_under_test *op = &ops[k];
        bi_case *c = bi_register(op->function, "tape", "tape NULL", run_broken_call);
        c->data = op, c->mutation = TAPE_NULL;
        for (int i = 0; i < op->n_tensors; i++)
            for (int m = TENSOR_NULL; m < N_MUTATIONS; m++) {
                if (!applies(op, i, (mutation)m)) continue;
                char what[96];
                snprintf(what, sizeof what, "%s: %s", op->names[i], mutation_names[m]);
                c = bi_register(op->function, op->names[i], what, run_broken_call);
                c->data = op, c->index = i, c->mutation = m;
            }
    }
}

BI_TEST_SUITE(ops)

/* The table's valid inputs work: each case above fails because of what it broke. */
Test(bad_input, ops_accept_their_valid_inputs)
{
    for (size_t k = 0; k < N_OPS; k++) {
        bi_fixture f;
        bi_fixture_init(&f, tt_seed() + k, false);
        tg_tensor *t[MAX_TENSORS] = {0};
        ops[k].make(&f, t);
        cr_assert(ops[k].call(f.tape, &f, t), "%s with valid inputs: %s", ops[k].function, tg_last_error());
        bi_fixture_free(&f);
    }
}

/* ---- what only one op can get wrong ------------------------------------------------------ */

BAD_INPUT(tg_add, "b", "shapes that do not broadcast")
{
    tg_tensor *a = RANDN(2, 3), *b = RANDN(2, 4);
    BI_EXPECT_NULL(f, tg_add(f->tape, a, b));
}

BAD_INPUT(tg_mul, "b", "shapes that do not broadcast (leading)")
{
    tg_tensor *a = RANDN(3, 2, 3), *b = RANDN(2, 2, 3);
    BI_EXPECT_NULL(f, tg_mul(f->tape, a, b));
}

BAD_INPUT(tg_matmul, "b", "inner dimensions differ")
{
    tg_tensor *a = RANDN(2, 3), *b = RANDN(4, 5);
    BI_EXPECT_NULL(f, tg_matmul(f->tape, a, b, false, false));
}

BAD_INPUT(tg_matmul, "b", "inner dimensions differ once transposed")
{
    tg_tensor *a = RANDN(2, 3), *b = RANDN(3, 4);
    BI_EXPECT_NULL(f, tg_matmul(f->tape, a, b, false, true));
}

BAD_INPUT(tg_matmul, "a", "a vector")
{
    tg_tensor *a = RANDN(3), *b = RANDN(3, 4);
    BI_EXPECT_NULL(f, tg_matmul(f->tape, a, b, false, false));
}

BAD_INPUT(tg_matmul, "b", "batch dimensions differ")
{
    tg_tensor *a = RANDN(2, 2, 3), *b = RANDN(3, 3, 4);
    BI_EXPECT_NULL(f, tg_matmul(f->tape, a, b, false, false));
}

BAD_INPUT(tg_sum, "axis", "an axis past the rank")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_sum(f->tape, x, 2, false));
}

BAD_INPUT(tg_mean, "axis", "a negative axis past the rank")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_mean(f->tape, x, -3, true));
}

BAD_INPUT(tg_reshape, "shape", "a different element count")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_reshape(f->tape, x, 2, SHAPE(4, 2)));
}

BAD_INPUT(tg_reshape, "shape", "two inferred dimensions")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_reshape(f->tape, x, 2, SHAPE(-1, -1)));
}

BAD_INPUT(tg_reshape, "shape", "a negative dimension other than -1")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_reshape(f->tape, x, 2, SHAPE(-2, -3)));
}

BAD_INPUT(tg_reshape, "shape", "NULL")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_reshape(f->tape, x, 2, NULL));
}

BAD_INPUT(tg_reshape, "ndim", "above TG_MAX_DIMS")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_reshape(f->tape, x, TG_MAX_DIMS + 1, SHAPE(1, 1, 1, 1, 1, 2, 3)));
}

BAD_INPUT(tg_reshape, "shape", "dimensions whose product overflows")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_reshape(f->tape, x, 3, SHAPE(INT64_MAX / 2, 4, 0)));
}

BAD_INPUT(tg_permute, "perm", "a repeated axis")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_permute(f->tape, x, (int[]){0, 0}));
}

BAD_INPUT(tg_permute, "perm", "an axis past the rank")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_permute(f->tape, x, (int[]){0, 2}));
}

BAD_INPUT(tg_permute, "perm", "NULL")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_permute(f->tape, x, NULL));
}

BAD_INPUT(tg_transpose, "axis", "an axis past the rank")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_transpose(f->tape, x, 0, 5));
}

BAD_INPUT(tg_slice, "step", "a zero step")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_slice(f->tape, x, 1, 0, 3, 0));
}

BAD_INPUT(tg_slice, "axis", "an axis past the rank")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_slice(f->tape, x, 3, 0, 1, 1));
}

BAD_INPUT(tg_slice, "step", "a step near INT64_MAX")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_slice(f->tape, x, 1, 0, 3, -INT64_MAX));
}

BAD_INPUT(tg_concat, "xs[1]", "shapes that differ outside the axis")
{
    tg_tensor *xs[2] = {RANDN(2, 3), RANDN(2, 4)};
    BI_EXPECT_NULL(f, tg_concat(f->tape, xs, 2, 0));
}

BAD_INPUT(tg_concat, "n", "no tensors")
{
    tg_tensor *xs[1] = {RANDN(2, 3)};
    BI_EXPECT_NULL(f, tg_concat(f->tape, xs, 0, 0));
}

BAD_INPUT(tg_concat, "xs", "NULL") { BI_EXPECT_NULL(f, tg_concat(f->tape, NULL, 2, 0)); }

BAD_INPUT(tg_concat, "axis", "an axis past the rank")
{
    tg_tensor *xs[2] = {RANDN(2, 3), RANDN(2, 3)};
    BI_EXPECT_NULL(f, tg_concat(f->tape, xs, 2, 2));
}

BAD_INPUT(tg_split, "sizes", "sizes that do not add up")
{
    tg_tensor *x = RANDN(2, 3), *out[2];
    BI_EXPECT_STATUS(f, tg_split(f->tape, x, 1, 2, SHAPE(1, 1), out));
}

BAD_INPUT(tg_split, "sizes", "a negative size")
{
    tg_tensor *x = RANDN(2, 3), *out[2];
    BI_EXPECT_STATUS(f, tg_split(f->tape, x, 1, 2, SHAPE(4, -1), out));
}

BAD_INPUT(tg_split, "out", "NULL")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_STATUS(f, tg_split(f->tape, x, 1, 2, SHAPE(1, 2), NULL));
}

BAD_INPUT(tg_split, "sizes", "NULL")
{
    tg_tensor *x = RANDN(2, 3), *out[2];
    BI_EXPECT_STATUS(f, tg_split(f->tape, x, 1, 2, NULL, out));
}

BAD_INPUT(tg_split, "n", "no pieces")
{
    tg_tensor *x = RANDN(2, 3), *out[2];
    BI_EXPECT_STATUS(f, tg_split(f->tape, x, 1, 0, SHAPE(3), out));
}

BAD_INPUT(tg_to_dtype, "dtype", "an i32 target")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_to_dtype(f->tape, x, TG_I32));
}

BAD_INPUT(tg_to_dtype, "dtype", "a dtype that does not exist")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_to_dtype(f->tape, x, (tg_dtype)99));
}

BAD_INPUT(tg_to_device, "device", "a device that does not exist")
{
    tg_tensor *x = RANDN(2, 3);
    BI_EXPECT_NULL(f, tg_to_device(f->tape, x, (tg_device)7));
}

BAD_INPUT(tg_embedding, "table", "a vector table")
{
    tg_tensor *table = RANDN(5), *ids = bi_ids(f, 1, SHAPE(4), 5);
    BI_EXPECT_NULL(f, tg_embedding(f->tape, table, ids));
}

BAD_INPUT(tg_embedding, "ids", "an id past the table")
{
    tg_tensor *table = RANDN(5, 3), *ids = bi_ids(f, 1, SHAPE(4), 5);
    ((int32_t *)tg_data(ids))[2] = 5;
    BI_EXPECT_NULL(f, tg_embedding(f->tape, table, ids));
}

BAD_INPUT(tg_embedding, "ids", "a negative id")
{
    tg_tensor *table = RANDN(5, 3), *ids = bi_ids(f, 1, SHAPE(4), 5);
    ((int32_t *)tg_data(ids))[0] = -1;
    BI_EXPECT_NULL(f, tg_embedding(f->tape, table, ids));
}

BAD_INPUT(tg_rmsnorm, "weight", "a weight of the wrong length")
{
    tg_tensor *x = RANDN(2, 3), *weight = RANDN(4);
    BI_EXPECT_NULL(f, tg_rmsnorm(f->tape, x, weight, 1e-5));
}

BAD_INPUT(tg_rmsnorm, "eps", "a negative eps")
{
    tg_tensor *x = RANDN(2, 3), *weight = RANDN(3);
    BI_EXPECT_NULL(f, tg_rmsnorm(f->tape, x, weight, -1.0));
}

BAD_INPUT(tg_rmsnorm, "eps", "a NaN eps")
{
    tg_tensor *x = RANDN(2, 3), *weight = RANDN(3);
    BI_EXPECT_NULL(f, tg_rmsnorm(f->tape, x, weight, NAN));
}

BAD_INPUT(tg_add_rmsnorm, "x", "x shaped unlike residual")
{
    tg_tensor *residual = RANDN(2, 3), *x = RANDN(3, 3), *weight = RANDN(3), *sum;
    BI_EXPECT_NULL(f, tg_add_rmsnorm(f->tape, residual, x, weight, 1e-5, &sum));
}

BAD_INPUT(tg_add_rmsnorm, "sum", "NULL")
{
    tg_tensor *residual = RANDN(2, 3), *x = RANDN(2, 3), *weight = RANDN(3);
    BI_EXPECT_NULL(f, tg_add_rmsnorm(f->tape, residual, x, weight, 1e-5, NULL));
}

BAD_INPUT(tg_cross_entropy, "targets", "targets of the wrong shape")
{
    tg_tensor *logits = RANDN(2, 3, 5), *targets = bi_ids(f, 2, SHAPE(3, 2), 5);
    BI_EXPECT_NULL(f, tg_cross_entropy(f->tape, logits, targets, -100));
}

BAD_INPUT(tg_cross_entropy, "targets", "a target past the vocabulary")
{
    tg_tensor *logits = RANDN(2, 5), *targets = bi_ids(f, 1, SHAPE(2), 5);
    ((int32_t *)tg_data(targets))[1] = 7;
    BI_EXPECT_NULL(f, tg_cross_entropy(f->tape, logits, targets, -100));
}

BAD_INPUT(tg_count_correct, "targets", "targets of the wrong shape")
{
    tg_tensor *logits = RANDN(2, 5), *targets = bi_ids(f, 1, SHAPE(3), 5);
    BI_EXPECT_NULL(f, tg_count_correct(f->tape, logits, targets, -100));
}

BAD_INPUT(tg_causal_conv1d, "weight", "a weight for other channels")
{
    tg_tensor *x = RANDN(2, 3, 6), *weight = RANDN(4, 4);
    BI_EXPECT_NULL(f, tg_causal_conv1d(f->tape, x, weight, NULL));
}

BAD_INPUT(tg_causal_conv1d, "initial_states", "states of the wrong width")
{
    tg_tensor *x = RANDN(2, 3, 6), *weight = RANDN(3, 4), *states = RANDN(2, 3, 2);
    tg_causal_conv1d_options options = {.initial_states = states};
    BI_EXPECT_NULL(f, tg_causal_conv1d(f->tape, x, weight, &options));
}

BAD_INPUT(tg_causal_conv1d, "bias", "a bias of the wrong length")
{
    tg_tensor *x = RANDN(2, 3, 6), *weight = RANDN(3, 4), *bias = RANDN(2);
    tg_causal_conv1d_options options = {.bias = bias};
    BI_EXPECT_NULL(f, tg_causal_conv1d(f->tape, x, weight, &options));
}

BAD_INPUT(tg_causal_conv1d, "activation", "an activation that does not exist")
{
    tg_tensor *x = RANDN(2, 3, 6), *weight = RANDN(3, 4);
    tg_causal_conv1d_options options = {.activation = (tg_activation)9};
    BI_EXPECT_NULL(f, tg_causal_conv1d(f->tape, x, weight, &options));
}

BAD_INPUT(tg_causal_conv1d, "x", "a matrix")
{
    tg_tensor *x = RANDN(3, 6), *weight = RANDN(3, 4);
    BI_EXPECT_NULL(f, tg_causal_conv1d(f->tape, x, weight, NULL));
}

BAD_INPUT(tg_selective_scan, "A", "A for other channels")
{
    tg_tensor *u = RANDN(2, 3, 5), *delta = RANDN(2, 3, 5), *A = RANDN(4, 4), *Bm = RANDN(2, 4, 5),
              *Cm = RANDN(2, 4, 5);
    BI_EXPECT_NULL(f, tg_selective_scan(f->tape, u, delta, A, Bm, Cm, NULL));
}

BAD_INPUT(tg_selective_scan, "Cm", "Cm of another length")
{
    tg_tensor *u = RANDN(2, 3, 5), *delta = RANDN(2, 3, 5), *A = RANDN(3, 4), *Bm = RANDN(2, 4, 5),
              *Cm = RANDN(2, 4, 6);
    BI_EXPECT_NULL(f, tg_selective_scan(f->tape, u, delta, A, Bm, Cm, NULL));
}

BAD_INPUT(tg_selective_scan, "delta", "delta shaped unlike u")
{
    tg_tensor *u = RANDN(2, 3, 5), *delta = RANDN(2, 3, 4), *A = RANDN(3, 4), *Bm = RANDN(2, 4, 5),
              *Cm = RANDN(2, 4, 5);
    BI_EXPECT_NULL(f, tg_selective_scan(f->tape, u, delta, A, Bm, Cm, NULL));
}

BAD_INPUT(tg_selective_scan, "chunk", "a negative chunk")
{
    tg_tensor *u = RANDN(2, 3, 5), *delta = RANDN(2, 3, 5), *A = RANDN(3, 4), *Bm = RANDN(2, 4, 5),
              *Cm = RANDN(2, 4, 5);
    tg_selective_scan_options options = {.chunk = -3};
    BI_EXPECT_NULL(f, tg_selective_scan(f->tape, u, delta, A, Bm, Cm, &options));
}

BAD_INPUT(tg_selective_scan, "initial_state", "a state of the wrong size")
{
    tg_tensor *u = RANDN(2, 3, 5), *delta = RANDN(2, 3, 5), *A = RANDN(3, 4), *Bm = RANDN(2, 4, 5),
              *Cm = RANDN(2, 4, 5);
    tg_selective_scan_options options = {.initial_state = RANDN(2, 3, 5)};
    BI_EXPECT_NULL(f, tg_selective_scan(f->tape, u, delta, A, Bm, Cm, &options));
}

BAD_INPUT(tg_nn_linear_forward, "x", "features that do not match the layer")
{
    bi_model(f);
    tg_tensor *x = RANDN(2, 5, 7);
    BI_EXPECT_NULL(f, tg_nn_linear_forward(f->tape, &f->model->layers[0].mixer.in_proj, x));
}

BAD_INPUT(tg_nn_linear_forward, "layer", "NULL")
{
    tg_tensor *x = RANDN(2, 8);
    BI_EXPECT_NULL(f, tg_nn_linear_forward(f->tape, NULL, x));
}

BAD_INPUT(tg_nn_rmsnorm_forward, "layer", "NULL")
{
    tg_tensor *x = RANDN(2, 8);
    BI_EXPECT_NULL(f, tg_nn_rmsnorm_forward(f->tape, NULL, x));
}

BAD_INPUT(tg_nn_embedding_forward, "layer", "NULL")
{
    tg_tensor *ids = bi_ids(f, 1, SHAPE(4), 5);
    BI_EXPECT_NULL(f, tg_nn_embedding_forward(f->tape, NULL, ids));
}

BAD_INPUT(tg_nn_embedding_forward, "ids", "an id past the vocabulary")
{
    bi_model(f);
    tg_tensor *ids = bi_ids(f, 1, SHAPE(4), 8);
    ((int32_t *)tg_data(ids))[3] = 8;
    BI_EXPECT_NULL(f, tg_nn_embedding_forward(f->tape, &f->model->embedding, ids));
}

BAD_INPUT(tg_mamba_mixer_forward, "mixer", "NULL")
{
    tg_tensor *x = RANDN(2, 5, 8);
    BI_EXPECT_NULL(f, tg_mamba_mixer_forward(f->tape, NULL, x, NULL, NULL));
}

BAD_INPUT(tg_mamba_mixer_forward, "x", "x of another width")
{
    bi_model(f);
    tg_tensor *x = RANDN(2, 5, 6);
    BI_EXPECT_NULL(f, tg_mamba_mixer_forward(f->tape, &f->model->layers[0].mixer, x, NULL, NULL));
}

BAD_INPUT(tg_mamba_mixer_forward, "ssm", "an initial scan state of the wrong shape")
{
    bi_model(f);
    tg_tensor *x = RANDN(2, 5, 8);
    tg_mamba_state initial = {.ssm = RANDN(2, 16, 5)};
    BI_EXPECT_NULL(f, tg_mamba_mixer_forward(f->tape, &f->model->layers[0].mixer, x, &initial, NULL));
}

BAD_INPUT(tg_mamba_mixer_forward, "conv", "an initial conv state of the wrong shape")
{
    bi_model(f);
    tg_tensor *x = RANDN(2, 5, 8);
    tg_mamba_state initial = {.conv = RANDN(2, 16, 2)};
    BI_EXPECT_NULL(f, tg_mamba_mixer_forward(f->tape, &f->model->layers[0].mixer, x, &initial, NULL));
}

BAD_INPUT(tg_mamba_forward, "model", "NULL")
{
    tg_tensor *ids = bi_ids(f, 2, SHAPE(2, 5), 8);
    BI_EXPECT_NULL(f, tg_mamba_forward(f->tape, NULL, ids, NULL, NULL));
}

BAD_INPUT(tg_mamba_forward, "ids", "ids of rank 3")
{
    bi_model(f);
    tg_tensor *ids = bi_ids(f, 3, SHAPE(2, 5, 1), 8);
    BI_EXPECT_NULL(f, tg_mamba_forward(f->tape, f->model, ids, NULL, NULL));
}

BAD_INPUT(tg_mamba_forward, "ids", "an id past the vocabulary")
{
    bi_model(f);
    tg_tensor *ids = bi_ids(f, 2, SHAPE(2, 5), 8);
    ((int32_t *)tg_data(ids))[7] = 9;
    BI_EXPECT_NULL(f, tg_mamba_forward(f->tape, f->model, ids, NULL, NULL));
}

BAD_INPUT(tg_mamba_loss, "targets", "targets of another shape")
{
    bi_model(f);
    tg_tensor *ids = bi_ids(f, 2, SHAPE(2, 5), 8), *targets = bi_ids(f, 2, SHAPE(2, 4), 8);
    BI_EXPECT_NULL(f, tg_mamba_loss(f->tape, f->model, ids, targets, -100));
}

BAD_INPUT(tg_mamba_loss, "model", "NULL")
{
    tg_tensor *ids = bi_ids(f, 2, SHAPE(2, 5), 8), *targets = bi_ids(f, 2, SHAPE(2, 5), 8);
    BI_EXPECT_NULL(f, tg_mamba_loss(f->tape, NULL, ids, targets, -100));
}
