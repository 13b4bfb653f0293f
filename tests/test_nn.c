/* Layers and the Mamba language model: each layer against a hand-written computation,
 * default initialisations by their statistics, the Mamba parameters' names, shapes and
 * initial values, reproducibility from a seed, a float64 gradient check of a whole
 * 2-layer model with respect to every parameter (and through the recurrent states),
 * pieces with states against one pass, f32 against f64, and bad configurations and
 * inputs. (tests/test_mamba_reference.c compares with an independent PyTorch model.) */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static tg_rng fresh_rng(void)
{
    tg_rng rng;
    tg_rng_seed(&rng, tg_rng_next(tt_rng()));
    return rng;
}

/* A model on the CPU in a new store; asserts it was made. */
static tg_mamba *make_model(const tg_mamba_config *config, uint64_t seed, tg_params **params)
{
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    *params = tg_params_create(TG_DEVICE_CPU);
    cr_assert(*params);
    tg_mamba *model = tg_mamba_create(config, *params, &rng);
    cr_assert(model, "tg_mamba_create: %s", tg_last_error());
    return model;
}

/* Mean and mean square of a tensor's values. */
static void moments(const tg_tensor *t, double *mean, double *mean_square)
{
    double s = 0, s2 = 0;
    int64_t n = tg_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = tg_get_flat(t, i);
        s += v;
        s2 += v * v;
    }
    *mean = s / (double)n;
    *mean_square = s2 / (double)n;
}

/* Values drawn from U(−b, b): every |w| ≤ b, and over n samples the mean (σ = b/√(3n)) and
 * the mean square (b²/3, σ = √(4/45)·b²/√n since Var w² = b⁴/5 − b⁴/9) lie within five
 * standard errors of their expectations. A wrong bound by a factor √2 moves the mean square
 * by 50% (or 100%), far outside that for the sizes used here. */
static void assert_uniform(const char *what, const tg_tensor *t, double b)
{
    int64_t n = tg_numel(t);
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(tg_get_flat(t, i)) <= b * (1 + 1e-6), "%s: |%g| exceeds the bound %g", what, tg_get_flat(t, i),
                  b);
    double mean, ms;
    moments(t, &mean, &ms);
    double se_mean = b / sqrt(3.0 * (double)n), se_ms = sqrt(4.0 / 45.0) * b * b / sqrt((double)n);
    cr_assert(fabs(mean) < 5 * se_mean, "%s: mean %g, expected 0 ± %g", what, mean, 5 * se_mean);
    cr_assert(fabs(ms - b * b / 3) < 5 * se_ms, "%s: mean square %g, expected %g ± %g", what, ms, b * b / 3, 5 * se_ms);
}

/* ---- Linear -------------------------------------------------------------------------------- */

static tg_tensor *linear_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    const tg_nn_linear *layer = user;
    return tg_sum_all(tape, tg_mul(tape, tg_nn_linear_forward(tape, layer, in[0]), in[1]));
}

Test(nn, linear_matches_a_hand_written_product)
{
    for (int round = 0; round < 12; round++) {
        const int64_t in = tt_randint(1, 9), out = tt_randint(1, 9);
        const bool bias = round % 2 == 0, one_row = round % 4 == 1;
        tg_params *params = tg_params_create(TG_DEVICE_CPU);
        tg_rng rng = fresh_rng();
        tg_nn_linear layer;
        cr_assert_eq(tg_nn_linear_init(&layer, params, "proj", in, out, bias, TG_F64, &rng), TG_OK, "%s",
                     tg_last_error());
        cr_assert_eq(layer.bias != NULL, bias);
        tg_tape *tape = tg_tape_create();
        const int64_t shape[3] = {tt_randint(1, 3), tt_randint(1, 4), in};
        tg_tensor *x = one_row ? tt_leaf(tape, TG_F64, 1, &in) : tt_leaf(tape, TG_F64, 3, shape);
        tg_tensor *y = tg_nn_linear_forward(tape, &layer, x);
        cr_assert(y, "%s", tg_last_error());
        cr_assert_eq(y->ndim, x->ndim);
        cr_assert_eq(y->shape[y->ndim - 1], out);
        const int64_t rows = tg_numel(x) / in;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = 0; o < out; o++) {
                double want = bias ? tg_get_flat(layer.bias, o) : 0.0;
                for (int64_t i = 0; i < in; i++)
                    want += tg_get_flat(x, r * in + i) * tg_get(layer.weight, (int64_t[]){o, i});
                cr_assert_float_eq(tg_get_flat(y, r * out + o), want, 1e-12, "row %lld output %lld", (long long)r,
                                   (long long)o);
            }
        /* The gradients with respect to x, the weight and the bias. */
        tg_tensor *w = tt_randn(tape, TG_F64, y->ndim, y->shape);
        tg_tensor *inputs[4] = {x, w, layer.weight, layer.bias};
        tt_gradcheck("linear", linear_loss, inputs, bias ? 4 : 3, &layer, NULL);
        tg_tape_free(tape);
        tg_params_free(params);
    }
}

Test(nn, linear_init_is_the_pytorch_default)
{
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    tg_rng rng = fresh_rng();
    tg_nn_linear layer;
    const int64_t in = tt_randint(40, 90), out = 200;
    cr_assert_eq(tg_nn_linear_init(&layer, params, "fc", in, out, true, TG_F32, &rng), TG_OK);
    cr_assert_str_eq(layer.weight->name, "fc.weight");
    cr_assert_str_eq(layer.bias->name, "fc.bias");
    cr_assert(layer.weight->shape[0] == out && layer.weight->shape[1] == in, "weight is (out, in)");
    assert_uniform("linear weight", layer.weight, 1 / sqrt((double)in));
    assert_uniform("linear bias", layer.bias, 1 / sqrt((double)in));
    tg_params_free(params);
}

/* ---- Embedding and RMSNorm -------------------------------------------------------------------- */

Test(nn, embedding_layer_looks_up_rows)
{
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    tg_rng rng = fresh_rng();
    tg_nn_embedding layer;
    const int64_t vocab = tt_randint(2, 20), dim = tt_randint(1, 12);
    cr_assert_eq(tg_nn_embedding_init(&layer, params, "emb", vocab, dim, 1.0, TG_F64, &rng), TG_OK);
    tg_tape *tape = tg_tape_create();
    const int64_t shape[2] = {3, 5};
    tg_tensor *ids = tt_ids(tape, 2, shape, (int32_t)vocab);
    tg_tensor *y = tg_nn_embedding_forward(tape, &layer, ids);
    cr_assert(y, "%s", tg_last_error());
    cr_assert(y->ndim == 3 && y->shape[2] == dim);
    for (int64_t p = 0; p < 15; p++)
        for (int64_t j = 0; j < dim; j++)
            cr_assert_eq(tg_get_flat(y, p * dim + j), tg_get_flat(layer.weight, tg_get_flat(ids, p) * dim + j));
    tg_tape_free(tape);
    tg_params_free(params);
}

Test(nn, rmsnorm_layer_matches_its_formula)
{
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    tg_nn_rmsnorm layer;
    const int64_t dim = tt_randint(1, 16);
    const double eps = 1e-3;
    cr_assert_eq(tg_nn_rmsnorm_init(&layer, params, "norm", dim, eps, TG_F64), TG_OK);
    for (int64_t j = 0; j < dim; j++) cr_assert_eq(tg_get_flat(layer.weight, j), 1.0, "norms start at one");
    tg_fill_normal(layer.weight, tt_rng(), 1.0, 0.5);
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_randn(tape, TG_F64, 2, (int64_t[]){4, dim});
    tg_tensor *y = tg_nn_rmsnorm_forward(tape, &layer, x);
    cr_assert(y, "%s", tg_last_error());
    for (int64_t r = 0; r < 4; r++) {
        double ms = 0;
        for (int64_t j = 0; j < dim; j++) ms += tg_get_flat(x, r * dim + j) * tg_get_flat(x, r * dim + j) / (double)dim;
        for (int64_t j = 0; j < dim; j++)
            cr_assert_float_eq(tg_get_flat(y, r * dim + j),
                               tg_get_flat(x, r * dim + j) / sqrt(ms + eps) * tg_get_flat(layer.weight, j), 1e-12);
    }
    tg_tape_free(tape);
    tg_params_free(params);
}

Test(nn, layers_reject_bad_arguments)
{
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    tg_rng rng = fresh_rng();
    tg_nn_linear layer;
    cr_assert_neq(tg_nn_linear_init(&layer, params, "fc", 0, 3, false, TG_F64, &rng), TG_OK);
    cr_assert(strstr(tg_last_error(), "tg_nn_linear_init"), "%s", tg_last_error());
    cr_assert_neq(tg_nn_linear_init(&layer, NULL, "fc", 2, 3, false, TG_F64, &rng), TG_OK);
    cr_assert_neq(tg_nn_linear_init(&layer, params, "fc", 2, 3, false, TG_I32, &rng), TG_OK);
    cr_assert(strstr(tg_last_error(), "i32"), "%s", tg_last_error());
    cr_assert_eq(tg_params_count(params), 0, "a rejected layer adds nothing");
    cr_assert_eq(tg_nn_linear_init(&layer, params, "fc", 4, 3, true, TG_F64, &rng), TG_OK);
    cr_assert_neq(tg_nn_linear_init(&layer, params, "fc", 4, 3, true, TG_F64, &rng), TG_OK, "names are unique");
    cr_assert(strstr(tg_last_error(), "fc.weight"), "%s", tg_last_error());
    tg_nn_embedding emb;
    cr_assert_neq(tg_nn_embedding_init(&emb, params, "emb", 4, 3, -1.0, TG_F64, &rng), TG_OK);
    tg_nn_rmsnorm norm;
    cr_assert_neq(tg_nn_rmsnorm_init(&norm, params, "norm", 4, NAN, TG_F64), TG_OK);

    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_randn(tape, TG_F64, 2, (int64_t[]){2, 5});
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_nn_linear_forward(tape, &layer, x), "tg_nn_linear_forward", "in_features = 4",
                          "[2, 5]", NULL);
    tg_tensor *x32 = tt_randn(tape, TG_F32, 2, (int64_t[]){2, 4});
    s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_nn_linear_forward(tape, &layer, x32), "tg_nn_linear_forward", "f32", "f64", NULL);
    tt_assert_failed_with(&s, tg_nn_linear_forward(tape, NULL, x32), "tg_nn_linear_forward", "NULL", NULL);
    tg_tape_free(tape);
    tg_params_free(params);
}

/* ---- Mamba: parameters ------------------------------------------------------------------------------ */

typedef struct {
    const char *suffix;
    int ndim;
    int64_t shape[3];
} expected_param;

Test(mamba, parameter_names_shapes_and_order)
{
    const int64_t V = tt_randint(5, 40), D = tt_randint(17, 40), L = 3;
    tg_mamba_config config = {.vocab_size = V, .d_model = D, .n_layer = L};
    tg_params *params;
    tg_mamba *model = make_model(&config, 1, &params);
    const int64_t E = 2 * D, N = 16, K = 4, R = (D + 15) / 16; /* the defaults */
    cr_assert_eq(model->config.d_state, N);
    cr_assert_eq(model->config.dt_rank, R);
    cr_assert_eq(model->config.eps, 1e-5);
    const expected_param mixer[] = {
        {"mixer.A_log", 2, {E, N}},
        {"mixer.D", 1, {E}},
        {"mixer.in_proj.weight", 2, {2 * E, D}},
        {"mixer.conv1d.weight", 3, {E, 1, K}},
        {"mixer.conv1d.bias", 1, {E}},
        {"mixer.x_proj.weight", 2, {R + 2 * N, E}},
        {"mixer.dt_proj.weight", 2, {E, R}},
        {"mixer.dt_proj.bias", 1, {E}},
        {"mixer.out_proj.weight", 2, {D, E}},
        {"norm.weight", 1, {D}},
    };
    const int per_layer = (int)(sizeof mixer / sizeof mixer[0]);
    cr_assert_eq(tg_params_count(params), (size_t)(2 + L * per_layer), "no separate LM head");
    int64_t numel = V * D + D;
    size_t index = 0;
    tg_tensor *p = tg_params_get(params, index++);
    cr_assert_str_eq(p->name, "backbone.embedding.weight");
    cr_assert(p->ndim == 2 && p->shape[0] == V && p->shape[1] == D);
    cr_assert_eq(p, model->embedding.weight);
    for (int64_t l = 0; l < L; l++)
        for (int k = 0; k < per_layer; k++) {
            char name[128];
            snprintf(name, sizeof name, "backbone.layers.%lld.%s", (long long)l, mixer[k].suffix);
            p = tg_params_get(params, index++);
            cr_assert_str_eq(p->name, name);
            cr_assert_eq(p->ndim, mixer[k].ndim, "%s", name);
            int64_t n = 1;
            for (int d = 0; d < p->ndim; d++) {
                cr_assert_eq(p->shape[d], mixer[k].shape[d], "%s dimension %d", name, d);
                n *= p->shape[d];
            }
            numel += n;
            cr_assert_eq(tg_params_find(params, name), p);
        }
    p = tg_params_get(params, index);
    cr_assert_str_eq(p->name, "backbone.norm_f.weight");
    cr_assert_eq(p, model->norm_f.weight);
    cr_assert_eq(tg_params_numel(params), numel);
    /* The struct points at the same tensors the names find. */
    const tg_mamba_mixer *m = &model->layers[1].mixer;
    cr_assert_eq(m->A_log, tg_params_find(params, "backbone.layers.1.mixer.A_log"));
    cr_assert_eq(m->conv_weight, tg_params_find(params, "backbone.layers.1.mixer.conv1d.weight"));
    cr_assert_eq(m->dt_proj.bias, tg_params_find(params, "backbone.layers.1.mixer.dt_proj.bias"));
    cr_assert_eq(model->layers[2].norm.weight, tg_params_find(params, "backbone.layers.2.norm.weight"));
    cr_assert_null(m->in_proj.bias);
    cr_assert_null(m->out_proj.bias);
    tg_mamba_free(model);
    tg_params_free(params);
}

Test(mamba, initial_values_follow_the_reference)
{
    const tg_dtype dtypes[2] = {TG_F64, TG_F32};
    for (int k = 0; k < 2; k++) {
        const int64_t D = 64, L = 4, V = 80;
        tg_mamba_config config = {.vocab_size = V, .d_model = D, .n_layer = L, .dtype = dtypes[k]};
        tg_params *params;
        tg_mamba *model = make_model(&config, tg_rng_next(tt_rng()), &params);
        const int64_t E = 2 * D, N = 16, K = 4, R = 4;
        /* Rounding to the dtype, for the values set exactly. */
        const double ulp = dtypes[k] == TG_F64 ? 0x1p-52 : 0x1p-23;
        double log_dt_sum = 0;
        for (int64_t l = 0; l < L; l++) {
            const tg_mamba_mixer *m = &model->layers[l].mixer;
            for (int64_t d = 0; d < E; d++)
                for (int64_t n = 0; n < N; n++) {
                    double want = log((double)(n + 1)), got = tg_get(m->A_log, (int64_t[]){d, n});
                    cr_assert(fabs(got - want) <= ulp * want, "A_log[%lld, %lld] = %.17g, not log(%lld)", (long long)d,
                              (long long)n, got, (long long)(n + 1));
                }
            for (int64_t d = 0; d < E; d++) {
                cr_assert_eq(tg_get_flat(m->D, d), 1.0);
                /* dt = softplus(bias) must be in [dt_min, dt_max] (up to the bias's rounding:
                 * d softplus(b)/db = σ(b) < dt, so a relative error 2·ulp·|b| in dt at most). */
                double b = tg_get_flat(m->dt_proj.bias, d), dt = log1p(exp(b)), slack = 2 * ulp * fabs(b);
                cr_assert(dt >= 1e-3 * (1 - slack) && dt <= 0.1 * (1 + slack), "dt = softplus(%g) = %g", b, dt);
                log_dt_sum += log(dt);
            }
            for (int64_t j = 0; j < D; j++) cr_assert_eq(tg_get_flat(model->layers[l].norm.weight, j), 1.0);
            if (dtypes[k] != TG_F64) continue;
            assert_uniform("in_proj", m->in_proj.weight, 1 / sqrt((double)D));
            assert_uniform("x_proj", m->x_proj.weight, 1 / sqrt((double)E));
            assert_uniform("conv1d.weight", m->conv_weight, 1 / sqrt((double)K));
            assert_uniform("dt_proj.weight", m->dt_proj.weight, 1 / sqrt((double)R));
            /* The Linear default scaled by 1/√n_layer = 1/2. */
            assert_uniform("out_proj", m->out_proj.weight, 1 / sqrt((double)E) / 2);
        }
        /* log dt is uniform on [log 1e-3, log 1e-1]: mean log 1e-2, σ = width/√12 per sample. */
        const double n = (double)(E * L), width = log(100.0), se = width / sqrt(12.0 * n);
        cr_assert(fabs(log_dt_sum / n - log(1e-2)) < 5 * se, "mean log dt %g, expected %g ± %g", log_dt_sum / n,
                  log(1e-2), 5 * se);
        for (int64_t j = 0; j < D; j++) cr_assert_eq(tg_get_flat(model->norm_f.weight, j), 1.0);
        /* Embedding N(0, 0.02²) over n = V·D samples: the sample standard deviation has a
         * relative standard error of about 1/√(2n) (1.0% here); allow five of them. */
        double mean, ms;
        moments(model->embedding.weight, &mean, &ms);
        const double count = (double)(V * D), std = sqrt(ms - mean * mean);
        cr_assert(fabs(mean) < 5 * 0.02 / sqrt(count), "embedding mean %g", mean);
        cr_assert(fabs(std / 0.02 - 1) < 5 / sqrt(2 * count), "embedding std %g, expected 0.02", std);
        tg_mamba_free(model);
        tg_params_free(params);
    }
}

Test(mamba, same_seed_same_parameters_bit_for_bit)
{
    tg_mamba_config config = {.vocab_size = 13, .d_model = 24, .n_layer = 2, .d_state = 5};
    const uint64_t seed = tg_rng_next(tt_rng());
    tg_params *a, *b, *c;
    tg_mamba *ma = make_model(&config, seed, &a), *mb = make_model(&config, seed, &b);
    tg_mamba *mc = make_model(&config, seed + 1, &c);
    size_t bytes = (size_t)tg_params_numel(a) * sizeof(float);
    cr_assert_eq(tg_params_numel(a), tg_params_numel(b));
    cr_assert(memcmp(tg_params_data(a), tg_params_data(b), bytes) == 0, "one seed, one model");
    cr_assert(memcmp(tg_params_data(a), tg_params_data(c), bytes) != 0, "another seed, another model");
    tg_mamba_free(ma);
    tg_mamba_free(mb);
    tg_mamba_free(mc);
    tg_params_free(a);
    tg_params_free(b);
    tg_params_free(c);
}

/* ---- Mamba: forward and gradients ------------------------------------------------------------------ */

/* Moves every parameter off its special initial value (ones, exact logs, tiny embeddings), so
 * that a gradient mistake those values would hide shows. */
static void perturb(tg_params *params)
{
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *p = tg_params_get(params, i);
        bool embedding = strstr(p->name, "embedding") != NULL;
        for (int64_t e = 0; e < tg_numel(p); e++) {
            double v = tg_get_flat(p, e), noise = tg_rng_normal(tt_rng());
            tg_set_flat(p, e, embedding ? 0.5 * noise : v + 0.1 * noise * (fabs(v) + 0.1));
        }
    }
}

typedef struct {
    const tg_mamba *model;
    tg_tensor *ids, *targets;
} model_case;

static tg_tensor *model_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)in;
    (void)n;
    const model_case *c = user;
    return tg_mamba_loss(tape, c->model, c->ids, c->targets, -1);
}

Test(mamba, gradcheck_of_a_two_layer_model_against_every_parameter)
{
    /* d_inner 16, dt_rank 1, several scan chunks over L = 7. */
    tg_mamba_config config = {
        .vocab_size = 7, .d_model = 8, .n_layer = 2, .d_state = 4, .dtype = TG_F64, .scan_chunk = 3};
    tg_params *params;
    tg_mamba *model = make_model(&config, tg_rng_next(tt_rng()), &params);
    perturb(params);
    tg_tape *tape = tg_tape_create();
    const int64_t shape[2] = {2, 7};
    tg_tensor *ids = tt_ids(tape, 2, shape, 7), *targets = tt_ids(tape, 2, shape, 7);
    tg_set_flat(targets, 3, -1); /* an ignored position */
    model_case c = {model, ids, targets};
    size_t n = tg_params_count(params);
    tg_tensor **inputs = malloc(n * sizeof *inputs);
    for (size_t i = 0; i < n; i++) inputs[i] = tg_params_get(params, i);
    /* Parameters above 128 elements (in_proj, x_proj) are checked along 8 random directions. */
    tg_gradcheck_options opts = tg_gradcheck_defaults();
    opts.max_elements_per_input = 128;
    opts.n_directions = 8;
    opts.atol = 1e-8;
    opts.rtol = 1e-5;
    tt_gradcheck("2-layer Mamba", model_loss, inputs, (int)n, &c, &opts);
    free(inputs);
    tg_tape_free(tape);
    tg_mamba_free(model);
    tg_params_free(params);
}

typedef struct {
    const tg_mamba *model;
    tg_tensor *ids, *targets;
    tg_tensor *weights[4]; /* random weights on the final states, per layer conv and ssm */
} state_case;

/* cross-entropy + Σ final_state·w over both layers' final states, from given initial states. */
static tg_tensor *state_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    const state_case *c = user;
    tg_mamba_state initial[2] = {{in[0], in[1]}, {in[2], in[3]}}, final[2];
    tg_tensor *logits = tg_mamba_forward(tape, c->model, c->ids, initial, final);
    tg_tensor *loss = tg_cross_entropy(tape, logits, c->targets, -1);
    for (int l = 0; loss && l < 2; l++) {
        loss = tg_add(tape, loss, tg_sum_all(tape, tg_mul(tape, final[l].conv, c->weights[2 * l])));
        loss = tg_add(tape, loss, tg_sum_all(tape, tg_mul(tape, final[l].ssm, c->weights[2 * l + 1])));
    }
    return loss;
}

Test(mamba, gradcheck_through_the_recurrent_states)
{
    tg_mamba_config config = {
        .vocab_size = 6, .d_model = 4, .n_layer = 2, .d_state = 3, .dtype = TG_F64, .scan_chunk = 2};
    tg_params *params;
    tg_mamba *model = make_model(&config, tg_rng_next(tt_rng()), &params);
    perturb(params);
    tg_tape *tape = tg_tape_create();
    const int64_t B = 2, E = 8, shape[2] = {B, 5};
    state_case c = {model, tt_ids(tape, 2, shape, 6), tt_ids(tape, 2, shape, 6), {NULL}};
    tg_tensor *inputs[6];
    for (int l = 0; l < 2; l++) {
        const int64_t conv_shape[3] = {B, E, 3}, ssm_shape[3] = {B, E, 3};
        inputs[2 * l] = tt_leaf(tape, TG_F64, 3, conv_shape);
        inputs[2 * l + 1] = tt_leaf(tape, TG_F64, 3, ssm_shape);
        c.weights[2 * l] = tt_randn(tape, TG_F64, 3, conv_shape);
        c.weights[2 * l + 1] = tt_randn(tape, TG_F64, 3, ssm_shape);
    }
    inputs[4] = model->layers[0].mixer.A_log;
    inputs[5] = model->layers[1].mixer.conv_weight;
    tt_gradcheck("states", state_loss, inputs, 6, &c, NULL);
    tg_tape_free(tape);
    tg_mamba_free(model);
    tg_params_free(params);
}

/* ids[:, start:end] as a contiguous tensor. */
static tg_tensor *ids_piece(tg_tape *tape, tg_tensor *ids, int64_t start, int64_t end)
{
    const int64_t B = ids->shape[0], L = ids->shape[1], shape[2] = {B, end - start};
    int32_t *piece = malloc(sizeof(int32_t) * (size_t)(B * (end - start)));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = start; t < end; t++)
            piece[b * (end - start) + t - start] = ((int32_t *)tg_data(ids))[b * L + t];
    tg_tensor *out = tg_from_data(tape, TG_I32, TG_DEVICE_CPU, 2, shape, piece);
    free(piece);
    return out;
}

Test(mamba, pieces_with_states_match_one_pass)
{
    tg_mamba_config config = {
        .vocab_size = 9, .d_model = 12, .n_layer = 3, .d_state = 5, .dtype = TG_F64, .scan_chunk = 4};
    tg_params *params;
    tg_mamba *model = make_model(&config, tg_rng_next(tt_rng()), &params);
    perturb(params);
    tg_tape *tape = tg_tape_create();
    const int64_t B = 2, L = tt_randint(6, 14), V = 9;
    tg_tensor *ids = tt_ids(tape, 2, (int64_t[]){B, L}, 9);
    tg_tensor *whole = tg_mamba_forward(tape, model, ids, NULL, NULL);
    cr_assert(whole, "%s", tg_last_error());
    /* Three pieces (lengths ≥ 1, the first shorter than d_conv − 1 at times). */
    const int64_t cut1 = tt_randint(1, L - 2), cut2 = tt_randint(cut1 + 1, L - 1);
    const int64_t cuts[4] = {0, cut1, cut2, L};
    tg_mamba_state states[3], next[3];
    for (int k = 0; k < 3; k++) {
        tg_tensor *piece = ids_piece(tape, ids, cuts[k], cuts[k + 1]);
        tg_tensor *logits = tg_mamba_forward(tape, model, piece, k ? states : NULL, next);
        cr_assert(logits, "%s", tg_last_error());
        for (int l = 0; l < 3; l++) {
            cr_assert(next[l].conv && next[l].ssm);
            cr_assert(next[l].conv->shape[2] == 3 && next[l].ssm->shape[2] == 5);
        }
        memcpy(states, next, sizeof states);
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = cuts[k]; t < cuts[k + 1]; t++)
                for (int64_t v = 0; v < V; v++) {
                    double got = tg_get(logits, (int64_t[]){b, t - cuts[k], v});
                    double want = tg_get(whole, (int64_t[]){b, t, v});
                    cr_assert(fabs(got - want) <= 1e-12 * (1 + fabs(want)), "b %lld t %lld v %lld: %.15g vs %.15g",
                              (long long)b, (long long)t, (long long)v, got, want);
                }
    }
    tg_tape_free(tape);
    tg_mamba_free(model);
    tg_params_free(params);
}

/* All parameter gradients of one forward + backward, as doubles. */
static double *loss_and_grads(tg_mamba *model, tg_params *params, tg_tensor *ids, tg_tensor *targets,
                              double *loss_value)
{
    tg_tape *tape = tg_tape_create();
    cr_assert_eq(tg_params_zero_grad(params), TG_OK);
    tg_tensor *loss = tg_mamba_loss(tape, model, ids, targets, -1);
    cr_assert(loss, "%s", tg_last_error());
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    *loss_value = tg_item(loss);
    double *grads = tt_params_grads(params);
    tg_tape_free(tape);
    return grads;
}

Test(mamba, backward_is_deterministic_and_every_parameter_gets_a_gradient)
{
    tg_mamba_config config = {.vocab_size = 10, .d_model = 16, .n_layer = 2, .scan_chunk = 5};
    tg_params *params;
    tg_mamba *model = make_model(&config, tg_rng_next(tt_rng()), &params);
    tg_tape *data = tg_tape_create();
    const int64_t shape[2] = {3, 11};
    tg_tensor *ids = tt_ids(data, 2, shape, 10), *targets = tt_ids(data, 2, shape, 10);
    double loss_a, loss_b;
    double *a = loss_and_grads(model, params, ids, targets, &loss_a);
    double *b = loss_and_grads(model, params, ids, targets, &loss_b);
    cr_assert(memcmp(&loss_a, &loss_b, sizeof loss_a) == 0);
    cr_assert(memcmp(a, b, sizeof(double) * (size_t)tg_params_numel(params)) == 0, "two runs, one result");
    int64_t offset = 0;
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *p = tg_params_get(params, i);
        double norm = 0;
        for (int64_t e = 0; e < tg_numel(p); e++) norm += a[offset + e] * a[offset + e];
        cr_assert(norm > 0 && isfinite(norm), "%s has no gradient", p->name);
        offset += tg_numel(p);
    }
    free(a);
    free(b);
    tg_tape_free(data);
    tg_mamba_free(model);
    tg_params_free(params);
}

/* Giving u and delta back after the forward and recomputing them in the backward changes
 * no bit of the loss or of any gradient (f32 and bf16). */
Test(mamba, recomputed_activations_give_the_gradients_of_kept_ones)
{
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    for (int k = 0; k < 2; k++) {
        const uint64_t seed = tg_rng_next(tt_rng());
        tg_params *params[2];
        tg_mamba *models[2];
        for (int m = 0; m < 2; m++) {
            tg_mamba_config config = {.vocab_size = 11,
                                      .d_model = 16,
                                      .n_layer = 2,
                                      .scan_chunk = 4,
                                      .dtype = dtypes[k],
                                      .activations = m ? TG_ACTIVATIONS_RECOMPUTE : TG_ACTIVATIONS_KEEP};
            models[m] = make_model(&config, seed, &params[m]);
        }
        tg_tape *data = tg_tape_create();
        const int64_t shape[2] = {tt_randint(1, 3), tt_randint(5, 20)};
        tg_tensor *ids = tt_ids(data, 2, shape, 11), *targets = tt_ids(data, 2, shape, 11);
        double loss[2], *grads[2];
        for (int m = 0; m < 2; m++) grads[m] = loss_and_grads(models[m], params[m], ids, targets, &loss[m]);
        cr_assert(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0, "%s loss: %.17g kept, %.17g recomputed",
                  tg_dtype_name(dtypes[k]), loss[0], loss[1]);
        const int64_t n = tg_params_numel(params[0]);
        for (int64_t i = 0; i < n; i++)
            cr_assert(memcmp(&grads[0][i], &grads[1][i], sizeof(double)) == 0 && isfinite(grads[0][i]),
                      "%s gradient element %lld: %.17g kept, %.17g recomputed", tg_dtype_name(dtypes[k]), (long long)i,
                      grads[0][i], grads[1][i]);
        for (int m = 0; m < 2; m++) {
            free(grads[m]);
            tg_mamba_free(models[m]);
            tg_params_free(params[m]);
        }
        tg_tape_free(data);
    }
}

Test(mamba, loss_at_initialisation_is_near_log_vocab)
{
    /* The final features have unit RMS and the tied head is N(0, 0.02²), so each logit is
     * about N(0, 0.02²·d_model) = N(0, 0.11²) at d_model 32, and the loss exceeds log V by
     * about half the logits' variance (0.006). The head is also the input embedding, so the
     * input token's own logit gains about |e|²/0.02 = 0.64 (the residual stream still holds
     * e ≈ 0.02·√d_model in norm), which moves the loss by a few hundredths more (within
     * ±0.025 over 40 seeds). An embedding drawn from N(0, 1) would give logits of standard
     * deviation 5.7 and a loss far above log V. */
    const int64_t V = 50;
    tg_mamba_config config = {.vocab_size = V, .d_model = 32, .n_layer = 2};
    tg_params *params;
    tg_mamba *model = make_model(&config, tg_rng_next(tt_rng()), &params);
    tg_tape *tape = tg_tape_create();
    const int64_t shape[2] = {4, 32};
    tg_tensor *ids = tt_ids(tape, 2, shape, (int32_t)V), *targets = tt_ids(tape, 2, shape, (int32_t)V);
    tg_tensor *loss = tg_mamba_loss(tape, model, ids, targets, -1);
    cr_assert(loss, "%s", tg_last_error());
    cr_assert(fabs(tg_item(loss) - log((double)V)) < 0.1, "loss %g, log V %g", tg_item(loss), log((double)V));
    tg_tape_free(tape);
    tg_mamba_free(model);
    tg_params_free(params);
}

Test(mamba, f32_matches_f64)
{
    tg_mamba_config config = {.vocab_size = 12, .d_model = 20, .n_layer = 2, .dtype = TG_F64, .scan_chunk = 8};
    tg_params *p64, *p32;
    const uint64_t seed = tg_rng_next(tt_rng());
    tg_mamba *m64 = make_model(&config, seed, &p64);
    config.dtype = TG_F32;
    tg_mamba *m32 = make_model(&config, seed, &p32);
    perturb(p64);
    for (size_t i = 0; i < tg_params_count(p64); i++)
        cr_assert_eq(tg_copy(tg_params_get(p32, i), tg_params_get(p64, i)), TG_OK);
    tg_tape *tape = tg_tape_create();
    const int64_t shape[2] = {2, 19};
    tg_tensor *ids = tt_ids(tape, 2, shape, 12);
    tg_tensor *l64 = tg_mamba_forward(tape, m64, ids, NULL, NULL), *l32 = tg_mamba_forward(tape, m32, ids, NULL, NULL);
    cr_assert(l64 && l32, "%s", tg_last_error());
    double error = tt_rel_error(l32, l64);
    cr_assert(error < 1e-5, "f32 logits differ from f64 by %g", error);
    tg_tape_free(tape);
    tg_mamba_free(m64);
    tg_mamba_free(m32);
    tg_params_free(p64);
    tg_params_free(p32);
}

Test(mamba, mixer_on_its_own)
{
    tg_mamba_config config = {.vocab_size = 1, .d_model = 6, .n_layer = 1, .d_state = 2, .dtype = TG_F64};
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    tg_rng rng = fresh_rng();
    tg_mamba_mixer mixer;
    cr_assert_eq(tg_mamba_mixer_init(&mixer, params, "", &config, &rng), TG_OK, "%s", tg_last_error());
    cr_assert_str_eq(tg_params_get(params, 0)->name, "A_log");
    cr_assert_str_eq(tg_params_get(params, 2)->name, "in_proj.weight");
    cr_assert_eq(mixer.d_inner, 12);
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_randn(tape, TG_F64, 3, (int64_t[]){2, 5, 6});
    tg_mamba_state final;
    tg_tensor *y = tg_mamba_mixer_forward(tape, &mixer, x, NULL, &final);
    cr_assert(y, "%s", tg_last_error());
    cr_assert(tg_same_shape(x, y));
    cr_assert(final.conv && final.conv->shape[1] == 12 && final.conv->shape[2] == 3);
    cr_assert(final.ssm && final.ssm->shape[2] == 2);
    /* Causality: changing the last step leaves the earlier outputs as they were. */
    tg_set(x, (int64_t[]){1, 4, 0}, 10.0);
    tg_tensor *y2 = tg_mamba_mixer_forward(tape, &mixer, x, NULL, NULL);
    for (int64_t t = 0; t < 5; t++) {
        double diff = fabs(tg_get(y2, (int64_t[]){1, t, 3}) - tg_get(y, (int64_t[]){1, t, 3}));
        if (t < 4)
            cr_assert_eq(diff, 0.0, "step %lld depends on the future", (long long)t);
        else
            cr_assert(diff > 0);
    }
    tt_state s = tt_snapshot(tape);
    tg_tensor *wrong = tt_randn(tape, TG_F64, 3, (int64_t[]){2, 5, 7});
    s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_mamba_mixer_forward(tape, &mixer, wrong, NULL, NULL), "tg_mamba_mixer_forward",
                          "d_model = 6", NULL);
    tg_tape_free(tape);
    tg_params_free(params);
}

/* ---- Mamba: bad configurations and inputs ------------------------------------------------------------- */

static void assert_rejected(tg_mamba_config config, const char *word)
{
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    tg_rng rng = fresh_rng();
    tg_clear_error();
    tg_mamba *model = tg_mamba_create(&config, params, &rng);
    cr_assert_null(model, "a config with a bad %s was accepted", word);
    cr_assert(strstr(tg_last_error(), "tg_mamba_create"), "%s", tg_last_error());
    cr_assert(strstr(tg_last_error(), word), "the error should name %s: %s", word, tg_last_error());
    cr_assert_eq(tg_params_count(params), 0, "a rejected config adds no parameter");
    tg_mamba_config resolved;
    cr_assert_neq(tg_mamba_config_resolve(&config, &resolved), TG_OK);
    tg_params_free(params);
}

Test(mamba, bad_configurations_are_rejected)
{
    const tg_mamba_config good = {.vocab_size = 5, .d_model = 8, .n_layer = 2};
    tg_mamba_config c;
    c = good, c.vocab_size = 0, assert_rejected(c, "vocab_size");
    c = good, c.d_model = -3, assert_rejected(c, "d_model");
    c = good, c.n_layer = 0, assert_rejected(c, "n_layer");
    c = good, c.d_state = -1, assert_rejected(c, "d_state");
    c = good, c.expand = -2, assert_rejected(c, "expand");
    c = good, c.d_conv = -4, assert_rejected(c, "d_conv");
    c = good, c.dt_rank = -1, assert_rejected(c, "dt_rank");
    c = good, c.scan_chunk = -1, assert_rejected(c, "scan_chunk");
    c = good, c.eps = -1e-5, assert_rejected(c, "eps");
    c = good, c.eps = NAN, assert_rejected(c, "eps");
    c = good, c.dt_min = 0.5, assert_rejected(c, "dt_min");
    c = good, c.dt_max = INFINITY, assert_rejected(c, "dt_max");
    c = good, c.embedding_std = -0.02, assert_rejected(c, "embedding_std");
    c = good, c.dtype = TG_I32, assert_rejected(c, "i32");
    c = good, c.dtype = (tg_dtype)42, assert_rejected(c, "dtype");
    c = good, c.activations = (tg_mamba_activations)3, assert_rejected(c, "activations");
    c = good, c.activations = (tg_mamba_activations)-1, assert_rejected(c, "activations");
    c = good, c.d_model = (int64_t)1 << 40, assert_rejected(c, "too large");

    tg_rng rng = fresh_rng();
    cr_assert_null(tg_mamba_create(NULL, NULL, &rng));
    cr_assert(strstr(tg_last_error(), "tg_mamba_create"));
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    cr_assert_null(tg_mamba_create(&good, params, NULL));
    cr_assert(strstr(tg_last_error(), "rng"), "%s", tg_last_error());
    /* A second model in the same store, and a store of another dtype. */
    tg_mamba *model = tg_mamba_create(&good, params, &rng);
    cr_assert(model, "%s", tg_last_error());
    size_t count = tg_params_count(params);
    cr_assert_null(tg_mamba_create(&good, params, &rng));
    cr_assert(strstr(tg_last_error(), "backbone.embedding.weight"), "%s", tg_last_error());
    cr_assert_eq(tg_params_count(params), count);
    tg_params *other = tg_params_create(TG_DEVICE_CPU);
    cr_assert(tg_params_add(other, "head.weight", TG_F64, 1, (int64_t[]){3}));
    cr_assert_null(tg_mamba_create(&good, other, &rng));
    cr_assert(strstr(tg_last_error(), "f64") && strstr(tg_last_error(), "f32"), "%s", tg_last_error());
    cr_assert_eq(tg_params_count(other), 1);
    tg_mamba_free(model);
    tg_params_free(params);
    tg_params_free(other);
}

Test(mamba, bad_inputs_fail_cleanly)
{
    tg_mamba_config config = {.vocab_size = 5, .d_model = 8, .n_layer = 2, .d_state = 3, .dtype = TG_F64};
    tg_params *params;
    tg_mamba *model = make_model(&config, 7, &params);
    tg_tape *tape = tg_tape_create();
    const int64_t shape[2] = {2, 6};
    tg_tensor *ids = tt_ids(tape, 2, shape, 5), *targets = tt_ids(tape, 2, shape, 5);
    tg_tensor *floats = tt_randn(tape, TG_F64, 2, shape), *flat = tt_ids(tape, 1, shape, 5);
    tg_tensor *too_big = tt_ids(tape, 2, shape, 5);
    tg_set_flat(too_big, 7, 5);
    tg_tensor *cuda_ids = tt_fake_cuda(tape, ids), *short_targets = tt_ids(tape, 2, (int64_t[]){2, 5}, 5);
    tg_mamba_state bad_states[2] = {{tt_randn(tape, TG_F64, 3, (int64_t[]){2, 16, 2}), NULL}, {NULL, NULL}};
    tg_mamba_state bad_ssm[2] = {{NULL, NULL}, {NULL, tt_randn(tape, TG_F64, 3, (int64_t[]){2, 16, 4})}};
    tg_mamba_state final[2] = {{NULL, NULL}, {NULL, NULL}};
    tt_state s = tt_snapshot(tape);
    const char *op = "tg_mamba_forward";
    tt_assert_failed_with(&s, tg_mamba_forward(NULL, model, ids, NULL, NULL), op, "tape", NULL);
    tt_assert_failed_with(&s, tg_mamba_forward(tape, NULL, ids, NULL, NULL), op, "model", NULL);
    tt_assert_failed_with(&s, tg_mamba_forward(tape, model, NULL, NULL, NULL), op, "ids", "NULL", NULL);
    tt_assert_failed_with(&s, tg_mamba_forward(tape, model, floats, NULL, NULL), op, "i32", "f64", NULL);
    tt_assert_failed_with(&s, tg_mamba_forward(tape, model, flat, NULL, NULL), op, "ids", NULL);
    tt_assert_failed_with(&s, tg_mamba_forward(tape, model, too_big, NULL, NULL), op, "embedding", "5", NULL);
    tt_assert_failed_with(&s, tg_mamba_forward(tape, model, cuda_ids, NULL, NULL), op, "device", "cuda", NULL);
    tt_assert_failed_with(&s, tg_mamba_forward(tape, model, ids, bad_states, final), op, "initial[0].conv",
                          "[2, 16, 3]", NULL);
    tt_assert_failed_with(&s, tg_mamba_forward(tape, model, ids, bad_ssm, final), op, "initial[1].ssm", "[2, 16, 3]",
                          NULL);
    cr_assert(!final[0].conv && !final[0].ssm && !final[1].ssm, "a failed forward publishes no state");
    tt_assert_failed_with(&s, tg_mamba_loss(tape, model, ids, short_targets, -1), "tg_mamba_loss", "cross-entropy",
                          "targets", NULL);
    tt_assert_failed_with(&s, tg_mamba_loss(tape, model, ids, floats, -1), "tg_mamba_loss", "i32", NULL);
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *g = tg_params_get(params, i)->grad;
        for (int64_t e = 0; e < tg_numel(g); e++) cr_assert_eq(tg_get_flat(g, e), 0.0, "a failed call left a gradient");
    }
    (void)targets;
    tg_tape_free(tape);
    tg_mamba_free(model);
    tg_params_free(params);
}
