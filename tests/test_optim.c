/* Optimizers on the CPU: AdamW and momentum SGD against the textbook formulas in double,
 * the default weight-decay groups and overrides, gradient clipping, the schedules at known
 * points, gradient accumulation against one big batch, f32 master weights for bf16 stores,
 * minimising a quadratic, and bad inputs. */
#include "optim_cases.h"

#include <math.h>
#include <string.h>

/* |a − b| ≤ rel · max(|a|, |b|, 1) for every element: the values are of order 1, and one
 * that an update brings near 0 keeps the absolute error of the ones around it. */
static void assert_close(const char *what, const double *got, const double *want, int64_t n, double rel)
{
    for (int64_t i = 0; i < n; i++) {
        double scale = fmax(1.0, fmax(fabs(got[i]), fabs(want[i])));
        cr_assert(fabs(got[i] - want[i]) <= rel * scale, "%s: element %lld is %.17g, expected %.17g (seed %llu)", what,
                  (long long)i, got[i], want[i], (unsigned long long)tt_seed());
    }
}

static double uniform(double low, double high) { return low + (high - low) * tg_rng_uniform(tt_rng()); }

/* ---- AdamW ----------------------------------------------------------------------------- */

Test(optim, adamw_matches_the_textbook_formula_in_double)
{
    tg_params *params = oc_store(TG_F64, TG_DEVICE_CPU);
    int64_t n = tg_params_numel(params);
    tg_optim_config config = tg_adamw_config(uniform(1e-3, 1e-1));
    config.weight_decay = uniform(0.01, 0.3);
    config.beta1 = uniform(0.5, 0.95);
    config.beta2 = uniform(0.9, 0.9999);
    config.eps = pow(10, uniform(-8, -3));
    tg_optim *opt = tg_optim_create(params, &config);
    cr_assert(opt, "%s", tg_last_error());
    /* A third group: half the learning rate, its own decay, for the out_proj weight. */
    tg_optim_group slow = {0.5, uniform(0.0, 0.5)};
    int g = tg_optim_add_group(opt, slow);
    cr_assert_eq(tg_optim_assign(opt, "*.out_proj.*", g, NULL), TG_OK, "%s", tg_last_error());

    double *p = malloc((size_t)n * sizeof *p), *m = calloc((size_t)n, sizeof *m), *v = calloc((size_t)n, sizeof *v);
    double *got = malloc((size_t)n * sizeof *got);
    oc_get(params, p, false);
    for (int t = 1; t <= 6; t++) {
        double *grad = oc_random(n, uniform(0.1, 3.0), false);
        oc_put(params, grad, true);
        cr_assert_eq(tg_optim_step(opt, 1), TG_OK, "%s", tg_last_error());
        /* θ ← θ − γλθ;  m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g²;
         * m̂ = m / (1 − β1^t);  v̂ = v / (1 − β2^t);  θ ← θ − γ·m̂ / (√v̂ + ε) */
        for (int64_t i = 0; i < n; i++) {
            size_t k = oc_param_of(params, i);
            bool in_slow = strstr(oc_model[k].name, "out_proj") != NULL;
            double lr = config.lr * (in_slow ? slow.lr_scale : 1.0);
            double wd = in_slow ? slow.weight_decay : oc_model[k].decays ? config.weight_decay : 0.0;
            p[i] -= lr * wd * p[i];
            m[i] = config.beta1 * m[i] + (1 - config.beta1) * grad[i];
            v[i] = config.beta2 * v[i] + (1 - config.beta2) * grad[i] * grad[i];
            double m_hat = m[i] / (1 - pow(config.beta1, t)), v_hat = v[i] / (1 - pow(config.beta2, t));
            p[i] -= lr * m_hat / (sqrt(v_hat) + config.eps);
        }
        oc_get(params, got, false);
        assert_close("adamw", got, p, n, 1e-13);
        free(grad);
    }
    cr_assert_eq(tg_optim_step_count(opt), 6);
    free(p), free(m), free(v), free(got);
    tg_optim_free(opt);
    tg_params_free(params);
}

/* ---- momentum SGD ---------------------------------------------------------------------------- */

static void check_sgd(bool nesterov)
{
    tg_params *params = oc_store(TG_F64, TG_DEVICE_CPU);
    int64_t n = tg_params_numel(params);
    tg_optim_config config = tg_sgd_config(uniform(0.01, 0.5), uniform(0.5, 0.99));
    config.nesterov = nesterov;
    config.weight_decay = uniform(0.01, 0.1);
    tg_optim *opt = tg_optim_create(params, &config);
    cr_assert(opt, "%s", tg_last_error());
    double *p = malloc((size_t)n * sizeof *p), *buf = calloc((size_t)n, sizeof *buf),
           *got = malloc((size_t)n * sizeof *got);
    oc_get(params, p, false);
    for (int t = 1; t <= 5; t++) {
        double *grad = oc_random(n, 1.0, false);
        oc_put(params, grad, true);
        cr_assert_eq(tg_optim_step(opt, 1), TG_OK, "%s", tg_last_error());
        /* g ← ∇ + λθ (decayed parameters only);  b ← μ·b + g;  θ ← θ − γ·(nesterov ? g + μ·b : b) */
        for (int64_t i = 0; i < n; i++) {
            double g = grad[i] + (oc_model[oc_param_of(params, i)].decays ? config.weight_decay * p[i] : 0.0);
            buf[i] = config.momentum * buf[i] + g;
            p[i] -= config.lr * (nesterov ? g + config.momentum * buf[i] : buf[i]);
        }
        oc_get(params, got, false);
        assert_close(nesterov ? "nesterov sgd" : "momentum sgd", got, p, n, 1e-13);
        free(grad);
    }
    free(p), free(buf), free(got);
    tg_optim_free(opt);
    tg_params_free(params);
}

Test(optim, momentum_sgd_matches_the_formula) { check_sgd(false); }

Test(optim, nesterov_sgd_matches_the_formula) { check_sgd(true); }

/* ---- groups ------------------------------------------------------------------------------------- */

Test(optim, default_rule_skips_biases_norms_ssm_and_embeddings)
{
    for (size_t i = 0; i < OC_COUNT; i++)
        cr_assert_eq(tg_optim_default_no_decay(oc_model[i].name), !oc_model[i].decays, "%s", oc_model[i].name);
    const char *no_decay[] = {"bias",          "fc.bias",          "ln_f.weight",
                              "h.3.ln.weight", "layernorm.weight", "tok_embeddings.weight",
                              "x.D",           "a.b.A_log",        "rmsnorm.scale"};
    const char *decay[] = {"weight",     "fc.weight",         "Dense.weight",
                           "x.D.weight", "A_log_proj.weight", "biased.weight",
                           "lnx.weight", "conv1d.weight",     "layers.0.mixer.x_proj.weight"};
    for (size_t i = 0; i < sizeof no_decay / sizeof *no_decay; i++)
        cr_assert(tg_optim_default_no_decay(no_decay[i]), "%s should not decay", no_decay[i]);
    for (size_t i = 0; i < sizeof decay / sizeof *decay; i++)
        cr_assert(!tg_optim_default_no_decay(decay[i]), "%s should decay", decay[i]);
}

/* With zero gradients AdamW's update is 0 / (0 + ε) = 0, so a step only decays: decaying
 * parameters shrink by exactly (1 − lr·wd), the others keep every bit. */
Test(optim, weight_decay_is_skipped_where_it_should_be)
{
    tg_params *params = oc_store(TG_F64, TG_DEVICE_CPU);
    int64_t n = tg_params_numel(params);
    tg_optim_config config = tg_adamw_config(uniform(0.01, 0.1));
    config.weight_decay = uniform(0.1, 1.0);
    tg_optim *opt = tg_optim_create(params, &config);
    /* An override: the biases decay after all, into a group with its own decay. */
    int g = tg_optim_add_group(opt, (tg_optim_group){1.0, 2 * config.weight_decay});
    size_t matched = 0;
    cr_assert_eq(tg_optim_assign(opt, "*.bias", g, &matched), TG_OK, "%s", tg_last_error());
    cr_assert_eq(matched, 1u, "only conv1d.bias matches '*.bias' (dt_bias does not)");
    cr_assert_eq(tg_optim_group_of(opt, "backbone.layers.0.mixer.conv1d.bias"), g);
    cr_assert_eq(tg_optim_group_of(opt, "backbone.layers.0.mixer.D"), TG_OPTIM_GROUP_NO_DECAY);
    cr_assert_eq(tg_optim_group_of(opt, "lm_head.weight"), TG_OPTIM_GROUP_DECAY);
    cr_assert_eq(tg_optim_group_of(opt, "missing"), -1);
    double *before = malloc((size_t)n * sizeof *before), *after = malloc((size_t)n * sizeof *after);
    oc_get(params, before, false);
    cr_assert_eq(tg_optim_step(opt, 1), TG_OK, "%s", tg_last_error());
    oc_get(params, after, false);
    for (int64_t i = 0; i < n; i++) {
        const char *name = oc_model[oc_param_of(params, i)].name;
        double wd = !strcmp(name, "backbone.layers.0.mixer.conv1d.bias") ? 2 * config.weight_decay
                    : oc_model[oc_param_of(params, i)].decays            ? config.weight_decay
                                                                         : 0.0;
        double want = before[i] * (1 - config.lr * wd);
        cr_assert(after[i] == want, "%s (element %lld): %.17g, expected %.17g", name, (long long)i, after[i], want);
    }
    free(before), free(after);
    tg_optim_free(opt);
    tg_params_free(params);
}

Test(optim, group_requests_that_cannot_work)
{
    tg_params *params = oc_store(TG_F32, TG_DEVICE_CPU);
    tg_optim_config config = tg_adamw_config(0.01);
    tg_optim *opt = tg_optim_create(params, &config);
    cr_assert_neq(tg_optim_assign(opt, "decoder.*", TG_OPTIM_GROUP_DECAY, NULL), TG_OK);
    cr_assert(strstr(tg_last_error(), "tg_optim_assign") && strstr(tg_last_error(), "decoder.*"), "%s",
              tg_last_error());
    cr_assert_neq(tg_optim_assign(opt, "*", 7, NULL), TG_OK);
    cr_assert(strstr(tg_last_error(), "group 7"), "%s", tg_last_error());
    cr_assert_eq(tg_optim_add_group(opt, (tg_optim_group){-1.0, 0.0}), -1);
    cr_assert_eq(tg_optim_add_group(opt, (tg_optim_group){1.0, NAN}), -1);
    for (int i = 2; i < TG_OPTIM_MAX_GROUPS; i++) cr_assert_eq(tg_optim_add_group(opt, (tg_optim_group){1, 0}), i);
    cr_assert_eq(tg_optim_add_group(opt, (tg_optim_group){1, 0}), -1);
    cr_assert(strstr(tg_last_error(), "groups"), "%s", tg_last_error());
    tg_optim_group group;
    cr_assert_eq(tg_optim_get_group(opt, TG_OPTIM_GROUP_DECAY, &group), TG_OK);
    cr_assert(group.lr_scale == 1.0 && group.weight_decay == config.weight_decay);
    cr_assert_eq(tg_optim_set_group(opt, TG_OPTIM_GROUP_NO_DECAY, (tg_optim_group){0.5, 0.0}), TG_OK);
    cr_assert_neq(tg_optim_set_group(opt, -1, (tg_optim_group){0.5, 0.0}), TG_OK);
    tg_optim_free(opt);
    tg_params_free(params);
}

/* ---- clipping ------------------------------------------------------------------------------------ */

Test(optim, grad_norm_is_the_l2_norm_of_every_gradient)
{
    const tg_dtype dtypes[3] = {TG_F64, TG_F32, TG_BF16};
    for (int d = 0; d < 3; d++) {
        tg_params *params = oc_store(dtypes[d], TG_DEVICE_CPU);
        int64_t n = tg_params_numel(params);
        double *grad = oc_random(n, uniform(0.1, 10), true), sum = 0, norm = -1;
        oc_put(params, grad, true);
        for (int64_t i = 0; i < n; i++) sum += grad[i] * grad[i];
        cr_assert_eq(tg_params_grad_norm(params, &norm), TG_OK, "%s", tg_last_error());
        cr_assert(fabs(norm - sqrt(sum)) <= 1e-14 * sqrt(sum), "%s: norm %.17g, expected %.17g",
                  tg_dtype_name(dtypes[d]), norm, sqrt(sum));
        free(grad);
        tg_params_free(params);
    }
}

Test(optim, clipping_scales_to_exactly_the_max_norm)
{
    tg_params *params = oc_store(TG_F64, TG_DEVICE_CPU);
    int64_t n = tg_params_numel(params);
    double *grad = oc_random(n, uniform(0.5, 5), false), *after = malloc((size_t)n * sizeof *after);
    oc_put(params, grad, true);
    double norm = 0, before = 0;
    tg_params_grad_norm(params, &norm);
    double max_norm = norm * uniform(0.05, 0.9);
    cr_assert_eq(tg_params_clip_grad_norm(params, max_norm, &before), TG_OK, "%s", tg_last_error());
    cr_assert_eq(before, norm, "the norm before clipping is reported");
    tg_params_grad_norm(params, &norm);
    cr_assert(fabs(norm - max_norm) <= 1e-14 * max_norm, "clipped norm %.17g, max %.17g", norm, max_norm);
    oc_get(params, after, true);
    for (int64_t i = 0; i < n; i++) /* one factor for all: the direction is kept */
        cr_assert(fabs(after[i] - grad[i] * max_norm / before) <= 1e-15 * fabs(grad[i]), "element %lld", (long long)i);
    /* A norm already under the limit is left alone, bit for bit. */
    cr_assert_eq(tg_params_clip_grad_norm(params, 2 * max_norm, NULL), TG_OK);
    double *again = malloc((size_t)n * sizeof *again);
    oc_get(params, again, true);
    cr_assert(memcmp(after, again, (size_t)n * sizeof *again) == 0);
    cr_assert_neq(tg_params_clip_grad_norm(params, 0.0, NULL), TG_OK);
    cr_assert_neq(tg_params_clip_grad_norm(params, NAN, NULL), TG_OK);
    free(grad), free(after), free(again);
    tg_params_free(params);
}

/* The optimizer's own clipping (folded into the update) equals clipping the gradients
 * first and stepping without it: bit for bit, in f64. */
Test(optim, step_with_clipping_equals_clip_then_step)
{
    tg_params *a = oc_store(TG_F64, TG_DEVICE_CPU), *b = oc_store(TG_F64, TG_DEVICE_CPU);
    int64_t n = tg_params_numel(a);
    double *values = oc_random(n, 1.0, false), *grad = oc_random(n, 3.0, false);
    oc_put(a, values, false), oc_put(b, values, false);
    oc_put(a, grad, true), oc_put(b, grad, true);
    double norm;
    tg_params_grad_norm(a, &norm);
    tg_optim_config config = tg_adamw_config(0.01);
    tg_optim *plain = tg_optim_create(b, &config);
    config.max_grad_norm = norm / 4;
    tg_optim *clipping = tg_optim_create(a, &config);
    cr_assert_eq(tg_params_clip_grad_norm(b, norm / 4, NULL), TG_OK);
    cr_assert_eq(tg_optim_step(clipping, 1), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_optim_step(plain, 1), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_optim_last_grad_norm(clipping), norm);
    cr_assert(isnan(tg_optim_last_grad_norm(plain)), "no clipping: no norm measured");
    double *pa = malloc((size_t)n * sizeof *pa), *pb = malloc((size_t)n * sizeof *pb);
    oc_get(a, pa, false), oc_get(b, pb, false);
    cr_assert(memcmp(pa, pb, (size_t)n * sizeof *pa) == 0, "clipping in the step differs from clipping first");
    oc_get(a, pb, true);
    cr_assert(memcmp(pb, grad, (size_t)n * sizeof *pb) == 0, "the step must not modify the gradients");
    free(values), free(grad), free(pa), free(pb);
    tg_optim_free(clipping), tg_optim_free(plain);
    tg_params_free(a), tg_params_free(b);
}

Test(optim, non_finite_gradient_norm_stops_the_step)
{
    tg_params *params = oc_store(TG_F32, TG_DEVICE_CPU);
    int64_t n = tg_params_numel(params);
    double *grad = oc_random(n, 1.0, false), *before = malloc((size_t)n * sizeof *before),
           *after = malloc((size_t)n * sizeof *after);
    grad[tt_randint(0, n - 1)] = tt_randint(0, 1) ? NAN : INFINITY;
    oc_put(params, grad, true);
    tg_optim_config config = tg_adamw_config(0.01);
    config.max_grad_norm = 1.0;
    tg_optim *opt = tg_optim_create(params, &config);
    oc_get(params, before, false);
    cr_assert_eq(tg_optim_step(opt, 1), TG_ERR_STATE);
    cr_assert(strstr(tg_last_error(), "tg_optim_step") && strstr(tg_last_error(), "norm"), "%s", tg_last_error());
    oc_get(params, after, false);
    cr_assert(memcmp(before, after, (size_t)n * sizeof *after) == 0);
    cr_assert_eq(tg_optim_step_count(opt), 0);
    cr_assert_eq(tg_optim_skipped_steps(opt), 1, "the step is counted as skipped");
    free(grad), free(before), free(after);
    tg_optim_free(opt);
    tg_params_free(params);
}

/* ---- schedules ------------------------------------------------------------------------------------ */

Test(optim, cosine_schedule_at_known_points)
{
    for (int round = 0; round < 20; round++) {
        int64_t warmup = tt_randint(1, 100), decay = 2 * tt_randint(1, 500);
        tg_schedule s = {TG_SCHEDULE_COSINE, warmup, warmup + decay, uniform(0, 0.5)};
        double min = s.min_factor;
        cr_assert(fabs(tg_schedule_factor(&s, 0) - 1.0 / (double)warmup) <= 1e-15, "warm-up starts at 1/W");
        cr_assert_eq(tg_schedule_factor(&s, warmup - 1), 1.0, "warm-up ends at 1");
        cr_assert_eq(tg_schedule_factor(&s, warmup), 1.0, "the cosine starts at 1");
        cr_assert(fabs(tg_schedule_factor(&s, warmup + decay / 2) - (1 + min) / 2) <= 1e-15, "midpoint");
        cr_assert_eq(tg_schedule_factor(&s, warmup + decay), min, "the end is the floor");
        cr_assert_eq(tg_schedule_factor(&s, warmup + decay + tt_randint(1, 1000)), min, "then it stays there");
        for (int64_t step = 1; step < warmup; step++)
            cr_assert_gt(tg_schedule_factor(&s, step), tg_schedule_factor(&s, step - 1), "warm-up rises");
        for (int64_t step = warmup + 1; step <= warmup + decay; step++)
            cr_assert_lt(tg_schedule_factor(&s, step), tg_schedule_factor(&s, step - 1), "the cosine falls");
    }
    tg_schedule none = {0};
    cr_assert_eq(tg_schedule_factor(&none, 0), 1.0);
    cr_assert_eq(tg_schedule_factor(&none, 123456), 1.0);
    tg_schedule warm = {TG_SCHEDULE_CONSTANT, 4, 0, 0};
    cr_assert_eq(tg_schedule_factor(&warm, 1), 0.5);
    cr_assert_eq(tg_schedule_factor(&warm, 99), 1.0);
    tg_schedule bad[] = {{TG_SCHEDULE_COSINE, 10, 5, 0},
                         {TG_SCHEDULE_COSINE, 0, 10, 1.5},
                         {7, 0, 0, 0},
                         {TG_SCHEDULE_CONSTANT, -1, 0, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert(isnan(tg_schedule_factor(&bad[i], 0)), "bad %zu", i);
}

/* The optimizer's lr follows the schedule, step by step, and drives the update: SGD
 * without momentum moves by exactly lr·g. */
Test(optim, the_step_uses_the_scheduled_lr)
{
    tg_params *params = oc_store(TG_F64, TG_DEVICE_CPU);
    int64_t n = tg_params_numel(params);
    tg_optim_config config = tg_sgd_config(uniform(0.1, 1), 0);
    config.schedule = (tg_schedule){TG_SCHEDULE_COSINE, 3, 9, 0.1};
    tg_optim *opt = tg_optim_create(params, &config);
    double *grad = oc_random(n, 1.0, false), *before = malloc((size_t)n * sizeof *before),
           *after = malloc((size_t)n * sizeof *after);
    oc_put(params, grad, true);
    for (int64_t step = 0; step < 12; step++) {
        double lr = config.lr * tg_schedule_factor(&config.schedule, step);
        cr_assert_eq(tg_optim_lr(opt), lr);
        oc_get(params, before, false);
        cr_assert_eq(tg_optim_step(opt, 1), TG_OK);
        oc_get(params, after, false);
        for (int64_t i = 0; i < n; i++) cr_assert_eq(after[i], before[i] - lr * grad[i]);
    }
    free(grad), free(before), free(after);
    tg_optim_free(opt);
    tg_params_free(params);
}

/* ---- gradient accumulation ---------------------------------------------------------------------------- */

enum { FEATURES = 7, MICRO = 4, PER_MICRO = 6 };

/* Mean squared error of a linear model over `rows` examples: mean((X·w − y)²). */
static tg_tensor *mse(tg_tape *tape, tg_tensor *w, const double *x, const double *y, int64_t rows)
{
    tg_tensor *X = tg_from_data(tape, TG_F64, TG_DEVICE_CPU, 2, (int64_t[]){rows, FEATURES}, x);
    tg_tensor *Y = tg_from_data(tape, TG_F64, TG_DEVICE_CPU, 2, (int64_t[]){rows, 1}, y);
    tg_tensor *r = tg_sub(tape, tg_matmul(tape, X, w, false, false), Y);
    return tg_mean_all(tape, tg_mul(tape, r, r));
}

/* n micro-batches of m examples, each loss a mean, accumulated and stepped with
 * micro_batches = n, equal one batch of n·m examples: the gradients (up to summation
 * order) and so the updated parameters. With clipping on, the norm clipped is the mean's. */
static void check_accumulation(tg_optim_config config)
{
    const int64_t rows = MICRO * PER_MICRO;
    double *x = oc_random(rows * FEATURES, 1.0, false), *y = oc_random(rows, 1.0, false),
           *w0 = oc_random(FEATURES, 1.0, false);
    tg_params *big = tg_params_create(TG_DEVICE_CPU), *small = tg_params_create(TG_DEVICE_CPU);
    tg_tensor *wb = tg_params_add(big, "w", TG_F64, 2, (int64_t[]){FEATURES, 1});
    tg_tensor *ws = tg_params_add(small, "w", TG_F64, 2, (int64_t[]){FEATURES, 1});
    tg_copy_from_host(wb, w0, TG_F64), tg_copy_from_host(ws, w0, TG_F64);
    tg_tape *tape = tg_tape_create();
    cr_assert_eq(tg_backward(tape, mse(tape, wb, x, y, rows)), TG_OK, "%s", tg_last_error());
    tg_tape_reset(tape);
    for (int k = 0; k < MICRO; k++) {
        cr_assert_eq(tg_backward(tape, mse(tape, ws, x + k * PER_MICRO * FEATURES, y + k * PER_MICRO, PER_MICRO)),
                     TG_OK);
        tg_tape_reset(tape);
    }
    double gb[FEATURES], gs[FEATURES], pb[FEATURES], ps[FEATURES];
    tg_copy_to_host(wb->grad, gb, TG_F64), tg_copy_to_host(ws->grad, gs, TG_F64);
    for (int i = 0; i < FEATURES; i++) gs[i] /= MICRO; /* the store holds the sum of the micro-batch means */
    assert_close("accumulated gradient / n", gs, gb, FEATURES, 1e-13);
    double norm;
    tg_params_grad_norm(big, &norm);
    if (config.max_grad_norm) config.max_grad_norm = norm / 2; /* so that clipping happens */
    tg_optim *ob = tg_optim_create(big, &config), *os = tg_optim_create(small, &config);
    for (int step = 0; step < 3; step++) { /* the same gradients again: the state builds up */
        cr_assert_eq(tg_optim_step(ob, 1), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_optim_step(os, MICRO), TG_OK, "%s", tg_last_error());
    }
    if (config.max_grad_norm) cr_assert(fabs(tg_optim_last_grad_norm(os) - norm) <= 1e-13 * norm, "the mean's norm");
    tg_copy_to_host(wb, pb, TG_F64), tg_copy_to_host(ws, ps, TG_F64);
    assert_close("parameters after accumulated steps", ps, pb, FEATURES, 1e-12);
    /* The control: stepping the sum as if it were one batch gives another result (unless
     * clipping cuts both to the same norm). */
    if (!config.max_grad_norm) {
        cr_assert_eq(tg_optim_step(os, 1), TG_OK);
        cr_assert_eq(tg_optim_step(ob, 1), TG_OK);
        tg_copy_to_host(wb, pb, TG_F64), tg_copy_to_host(ws, ps, TG_F64);
        double diff = 0;
        for (int i = 0; i < FEATURES; i++) diff = fmax(diff, fabs(ps[i] - pb[i]));
        cr_assert_gt(diff, 1e-9, "a step over the summed gradients should differ from one over their mean");
    }
    free(x), free(y), free(w0);
    tg_optim_free(ob), tg_optim_free(os);
    tg_params_free(big), tg_params_free(small);
    tg_tape_free(tape);
}

Test(optim, accumulating_micro_batches_equals_one_big_batch)
{
    check_accumulation(tg_sgd_config(0.05, 0.9));
    tg_optim_config adamw = tg_adamw_config(0.01);
    adamw.eps = 1e-2; /* large enough that the sum (n× the mean) changes the update, for the control */
    check_accumulation(adamw);
    tg_optim_config clipped = tg_sgd_config(0.05, 0.0);
    clipped.max_grad_norm = 1; /* set to half the norm inside */
    check_accumulation(clipped);
}

/* ---- master weights for low-precision stores ------------------------------------------------------------ */

/* A bf16 store keeps an f32 master copy: the update is done on it, exactly as an f32 store
 * would do it (the gradients hold bf16 values either way), and the store gets the master
 * rounded to bf16. Updates far below bf16's resolution still add up. */
Test(optim, bf16_store_updates_an_f32_master)
{
    tg_params *low = oc_store(TG_BF16, TG_DEVICE_CPU), *full = oc_store(TG_F32, TG_DEVICE_CPU);
    int64_t n = tg_params_numel(low);
    double *values = oc_random(n, 1.0, true), *got = malloc((size_t)n * sizeof *got),
           *want = malloc((size_t)n * sizeof *want);
    oc_put(low, values, false), oc_put(full, values, false);
    tg_optim_config config = tg_adamw_config(1e-4); /* each step moves far less than a bf16 step of ~4e-3 */
    tg_optim *ol = tg_optim_create(low, &config), *of = tg_optim_create(full, &config);
    for (int step = 0; step < 60; step++) {
        double *grad = oc_random(n, 1.0, true);
        for (int64_t i = 0; i < n; i++) /* a steady push, held exactly by bf16 */
            grad[i] = tg_bf16_to_f32(tg_f32_to_bf16((float)(fabs(grad[i]) + 0.25)));
        oc_put(low, grad, true), oc_put(full, grad, true);
        cr_assert_eq(tg_optim_step(ol, 1), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_optim_step(of, 1), TG_OK, "%s", tg_last_error());
        free(grad);
    }
    oc_get(low, got, false), oc_get(full, want, false);
    int64_t moved = 0;
    for (int64_t i = 0; i < n; i++) {
        double rounded = tg_bf16_to_f32(tg_f32_to_bf16((float)want[i]));
        cr_assert_eq(got[i], rounded, "element %lld: bf16 %.9g, the f32 run rounded %.9g", (long long)i, got[i],
                     rounded);
        moved += got[i] != values[i];
    }
    cr_assert_gt(moved, n / 2, "only %lld of %lld values moved: the small updates were lost", (long long)moved,
                 (long long)n);
    free(values), free(got), free(want);
    tg_optim_free(ol), tg_optim_free(of);
    tg_params_free(low), tg_params_free(full);
}

/* ---- convergence -------------------------------------------------------------------------------------------- */

/* f(w) = Σ a·(w − c)² with random a > 0 and c, from the autograd ops. */
static double minimise(tg_optim_config config, int steps)
{
    const int64_t n = 24;
    double *a = oc_random(n, 1.0, false), *c = oc_random(n, 2.0, false);
    for (int64_t i = 0; i < n; i++) a[i] = 0.2 + fabs(a[i]);
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    tg_tensor *w = tg_params_add(params, "w", TG_F32, 1, &n);
    tg_fill_normal(w, tt_rng(), 0, 1);
    tg_optim *opt = tg_optim_create(params, &config);
    tg_tape *tape = tg_tape_create();
    double first = 0, last = 0;
    for (int step = 0; step <= steps; step++) {
        tg_tensor *A = tg_from_data(tape, TG_F64, TG_DEVICE_CPU, 1, &n, a);
        tg_tensor *C = tg_from_data(tape, TG_F64, TG_DEVICE_CPU, 1, &n, c);
        tg_tensor *d = tg_sub(tape, w, tg_to_dtype(tape, C, TG_F32));
        tg_tensor *loss = tg_sum_all(tape, tg_mul(tape, tg_to_dtype(tape, A, TG_F32), tg_mul(tape, d, d)));
        cr_assert(loss, "%s", tg_last_error());
        last = tg_item(loss);
        if (step == 0) first = last;
        if (step < steps) {
            cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
            cr_assert_eq(tg_optim_step(opt, 1), TG_OK, "%s", tg_last_error());
            tg_params_zero_grad(params);
        }
        tg_tape_reset(tape);
    }
    free(a), free(c);
    tg_tape_free(tape);
    tg_optim_free(opt);
    tg_params_free(params);
    return last / first;
}

Test(optim, optimizers_minimise_a_quadratic)
{
    tg_optim_config adamw = tg_adamw_config(0.1);
    adamw.beta2 = 0.99; /* a shorter memory of the large early gradients: faster at the end */
    adamw.schedule = (tg_schedule){TG_SCHEDULE_COSINE, 20, 1000, 0.0};
    double ratio = minimise(adamw, 1000);
    cr_assert_lt(ratio, 1e-6, "AdamW left %g of the initial loss (seed %llu)", ratio, (unsigned long long)tt_seed());
    tg_optim_config sgd = tg_sgd_config(0.05, 0.9);
    sgd.nesterov = true;
    ratio = minimise(sgd, 300);
    cr_assert_lt(ratio, 1e-6, "SGD left %g of the initial loss (seed %llu)", ratio, (unsigned long long)tt_seed());
}

/* ---- bad inputs ---------------------------------------------------------------------------------------------- */

Test(optim, bad_configs_are_refused)
{
    tg_params *params = oc_store(TG_F32, TG_DEVICE_CPU), *empty = tg_params_create(TG_DEVICE_CPU);
    tg_optim_config good = tg_adamw_config(0.01);
    cr_assert_null(tg_optim_create(NULL, &good));
    cr_assert_null(tg_optim_create(params, NULL));
    cr_assert_null(tg_optim_create(empty, &good));
    cr_assert(strstr(tg_last_error(), "no parameters"), "%s", tg_last_error());
    tg_optim_config bad[10];
    for (int i = 0; i < 10; i++) bad[i] = good;
    bad[0].lr = -1;
    bad[1].lr = NAN;
    bad[2].beta1 = 1.0;
    bad[3].beta2 = -0.1;
    bad[4].eps = 0;
    bad[5].weight_decay = -0.1;
    bad[6].max_grad_norm = INFINITY;
    bad[7] = tg_sgd_config(0.1, 1.0);
    bad[8] = tg_sgd_config(0.1, 0.0);
    bad[8].nesterov = true;
    bad[9].schedule = (tg_schedule){TG_SCHEDULE_COSINE, 100, 10, 0};
    for (int i = 0; i < 10; i++) {
        tg_clear_error();
        cr_assert_null(tg_optim_create(params, &bad[i]), "config %d was accepted", i);
        cr_assert(strstr(tg_last_error(), "tg_optim_create"), "config %d: %s", i, tg_last_error());
    }
    tg_optim *opt = tg_optim_create(params, &good);
    cr_assert_eq(tg_optim_step(opt, 0), TG_ERR_INVALID);
    cr_assert_eq(tg_optim_step(NULL, 1), TG_ERR_INVALID);
    cr_assert_neq(tg_optim_set_lr(opt, -1), TG_OK);
    /* A parameter added after the optimizer: its state would not cover it. */
    cr_assert(tg_params_add(params, "late.weight", TG_F32, 1, (int64_t[]){5}));
    cr_assert_eq(tg_optim_step(opt, 1), TG_ERR_STATE);
    cr_assert(strstr(tg_last_error(), "before creating the optimizer"), "%s", tg_last_error());
    tg_optim_free(opt);
    tg_params_free(params);
    tg_params_free(empty);
}
