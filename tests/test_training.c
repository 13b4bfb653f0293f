/* Training the Mamba language model on the CPU, end to end:
 * - the whole model's gradient against float64 central differences along random
 *   directions in the full parameter space (every parameter moved at once);
 * - a short AdamW run must solve Induction Heads within a fixed step budget, while the
 *   same run with the scan's memory cut off cannot (and the untrained model is at chance);
 * - training resumed from a checkpoint (model, AdamW state, step, data generator)
 *   repeats an uninterrupted run bit for bit;
 * - k micro-batches stepped with tg_optim_step(opt, k) equal one batch k times larger;
 * - after a backward only the parameters hold gradients, no activation gradient is left
 *   on the heap, and every step of the same shapes uses the same tape bytes.
 * tests/test_nn.c checks each parameter tensor's gradient on its own; the directional
 * check here moves all of them together, through the tied embedding and both layers. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEED ((unsigned long long)tt_seed())

/* ---- helpers ------------------------------------------------------------------------------ */

typedef struct {
    tg_params *params;
    tg_mamba *model;
} lm;

/* A model on the CPU in a new store, initialised from seed. */
static lm lm_new(tg_mamba_config config, uint64_t seed)
{
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    lm m = {tg_params_create(TG_DEVICE_CPU), NULL};
    cr_assert(m.params);
    m.model = tg_mamba_create(&config, m.params, &rng);
    cr_assert(m.model, "tg_mamba_create: %s", tg_last_error());
    return m;
}

static void lm_free(lm *m)
{
    tg_mamba_free(m->model);
    tg_params_free(m->params);
}

/* Rows of token ids and their targets on the host. */
typedef struct {
    int64_t rows, len;
    int32_t *inputs, *targets;
} batch;

static batch batch_new(int64_t rows, int64_t len)
{
    const size_t bytes = sizeof(int32_t) * (size_t)(rows * len);
    batch b = {rows, len, malloc(bytes), malloc(bytes)};
    cr_assert(b.inputs && b.targets);
    return b;
}

static void batch_free(batch *b)
{
    free(b->inputs);
    free(b->targets);
}

/* Rows first .. first + rows − 1 of b, as a batch of their own (no copy). */
static batch batch_rows(const batch *b, int64_t first, int64_t rows)
{
    return (batch){rows, b->len, b->inputs + first * b->len, b->targets + first * b->len};
}

static tg_tensor *ids_tensor(tg_tape *tape, const batch *b, const int32_t *values)
{
    tg_tensor *t = tg_from_data(tape, TG_I32, TG_DEVICE_CPU, 2, (int64_t[]){b->rows, b->len}, values);
    cr_assert(t, "%s", tg_last_error());
    return t;
}

/* The model's mean cross-entropy over the batch's scored positions. */
static tg_tensor *lm_loss(tg_tape *tape, const lm *m, const batch *b)
{
    tg_tensor *loss =
        tg_mamba_loss(tape, m->model, ids_tensor(tape, b, b->inputs), ids_tensor(tape, b, b->targets), TG_IGNORE_INDEX);
    cr_assert(loss, "%s (seed %llu)", tg_last_error(), SEED);
    return loss;
}

static void fill_induction(const tg_induction_config *task, tg_rng *rng, batch *b)
{
    cr_assert_eq(tg_task_induction_batch(task, rng, b->rows, b->len, b->inputs, b->targets), TG_OK, "%s",
                 tg_last_error());
}

static void fill_selective_copy(const tg_selective_copy_config *task, tg_rng *rng, batch *b)
{
    cr_assert_eq(tg_task_selective_copy_batch(task, rng, b->rows, b->len, b->inputs, b->targets), TG_OK, "%s",
                 tg_last_error());
}

/* All parameters (or all gradients) of an f64 store, copied out. */
static double *flat_copy(tg_params *params, bool grads)
{
    size_t bytes = sizeof(double) * (size_t)tg_params_numel(params);
    double *out = malloc(bytes);
    cr_assert(out);
    memcpy(out, grads ? tg_params_grad(params) : tg_params_data(params), bytes);
    return out;
}

/* ---- 1. the whole model's gradient along random directions -------------------------------------- */

/* Moves every parameter off its initial value (ones, exact logs, a tiny embedding), so that
 * a gradient mistake those values would hide shows. */
static void randomise(tg_params *params, tg_rng *rng)
{
    for (size_t i = 0; i < tg_params_count(params); i++) {
        tg_tensor *p = tg_params_get(params, i);
        bool embedding = strstr(p->name, "embedding") != NULL;
        for (int64_t e = 0; e < tg_numel(p); e++) {
            double v = tg_get_flat(p, e), noise = tg_rng_normal(rng);
            tg_set_flat(p, e, embedding ? 0.5 * noise : v + 0.2 * noise * (fabs(v) + 0.1));
        }
    }
}

/* The loss at the parameters theta (written into the store, which is left holding them). */
static double loss_at(tg_tape *tape, const lm *m, const batch *b, const double *theta)
{
    memcpy(tg_params_data(m->params), theta, sizeof(double) * (size_t)tg_params_numel(m->params));
    double value = tg_item(lm_loss(tape, m, b));
    tg_tape_reset(tape);
    return value;
}

enum { DIRECTIONS = 16 };

/* f(θ + h·v) − f(θ − h·v) over 2h, for a unit direction v, differs from ∇f·v by the
 * truncation error (h²/6)·∂³f/∂v³ and a rounding error of about ε·|f|/h. At h = 1e-4 the
 * first is 1.7e-9·|∂³f/∂v³| and the second, with ε = 2.2e-16 and a loss of a few units,
 * about 1e-11. The bound is 1e-7 of the scale of a random direction's derivative,
 * ‖∇f‖/√P (P = 1584 and ‖∇f‖ ≈ 1.5 give a scale of 0.04 and a bound of 4e-9, or 1e-7 of
 * |∇f·v| when that is larger): room for third derivatives up to 2 along a unit direction,
 * where this model's are about 0.005 (differences at h = 1e-2 are off by 1e-7 at most).
 * The bound is also tight enough to catch a gradient wrong in any one tensor: leaving any
 * tensor's part out of the dot product must break it, at least twice over, in some
 * direction (checked at the end). */
Test(training, whole_model_gradient_along_random_directions)
{
    /* Sizes away from the defaults: d_conv 3, dt_rank 2, and scan chunks of 3 over L = 10
     * (four chunks, the last one short). */
    const int64_t V = 11;
    tg_mamba_config config = {.vocab_size = V,
                              .d_model = 8,
                              .n_layer = 2,
                              .d_state = 4,
                              .d_conv = 3,
                              .dt_rank = 2,
                              .dtype = TG_F64,
                              .scan_chunk = 3};
    lm m = lm_new(config, tg_rng_next(tt_rng()));
    randomise(m.params, tt_rng());
    batch b = batch_new(3, 10);
    for (int64_t i = 0; i < b.rows * b.len; i++) {
        b.inputs[i] = (int32_t)tt_randint(0, V - 1);
        b.targets[i] = (int32_t)tt_randint(0, V - 1);
    }
    b.targets[tt_randint(0, b.rows * b.len - 1)] = TG_IGNORE_INDEX;

    tg_tape *tape = tg_tape_create();
    cr_assert_eq(tg_params_zero_grad(m.params), TG_OK);
    tg_tensor *loss = lm_loss(tape, &m, &b);
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    tg_tape_reset(tape);
    const int64_t P = tg_params_numel(m.params);
    double *theta = flat_copy(m.params, false), *grad = flat_copy(m.params, true);
    double *v = malloc(sizeof(double) * (size_t)P), *shifted = malloc(sizeof(double) * (size_t)P);
    cr_assert(v && shifted);
    double grad_norm = 0;
    for (int64_t i = 0; i < P; i++) grad_norm += grad[i] * grad[i];
    grad_norm = sqrt(grad_norm);
    cr_assert(grad_norm > 0 && isfinite(grad_norm), "gradient norm %g (seed %llu)", grad_norm, SEED);

    tg_tape_set_grad_enabled(tape, false); /* the differences need forwards only */
    const double h = 1e-4, rtol = 1e-7, scale = grad_norm / sqrt((double)P);
    const size_t n_tensors = tg_params_count(m.params);
    double *left_out = calloc(n_tensors, sizeof(double)); /* per tensor: the largest |g_S·v_S| / bound */
    cr_assert(left_out);
    double worst = 0; /* the largest error, as a fraction of its bound */
    for (int d = 0; d < DIRECTIONS; d++) {
        double norm = 0;
        for (int64_t i = 0; i < P; i++) {
            v[i] = tg_rng_normal(tt_rng());
            norm += v[i] * v[i];
        }
        double along = 0; /* ∇f·v, v of unit length */
        for (int64_t i = 0; i < P; i++) {
            v[i] /= sqrt(norm);
            along += grad[i] * v[i];
        }
        for (int64_t i = 0; i < P; i++) shifted[i] = theta[i] + h * v[i];
        double plus = loss_at(tape, &m, &b, shifted);
        for (int64_t i = 0; i < P; i++) shifted[i] = theta[i] - h * v[i];
        double minus = loss_at(tape, &m, &b, shifted);
        double difference = (plus - minus) / (2 * h), bound = rtol * fmax(fabs(along), scale);
        cr_assert(fabs(difference - along) <= bound,
                  "direction %d: central difference %.12g, gradient·direction %.12g (error %.3g, bound %.3g; "
                  "seed %llu)",
                  d, difference, along, fabs(difference - along), bound, SEED);
        worst = fmax(worst, fabs(difference - along) / bound);
        /* The same bound would catch a wrong gradient in any single tensor. */
        int64_t offset = 0;
        for (size_t t = 0; t < n_tensors; t++) {
            int64_t n = tg_numel(tg_params_get(m.params, t));
            double part = 0;
            for (int64_t i = offset; i < offset + n; i++) part += grad[i] * v[i];
            left_out[t] = fmax(left_out[t], fabs(part) / bound);
            offset += n;
        }
    }
    double least = INFINITY;
    for (size_t t = 0; t < n_tensors; t++) least = fmin(least, left_out[t]);
    cr_log_info("%d directions over %lld parameters: worst error %.2g of the bound; the least visible tensor "
                "moves the derivative by %.3g bounds",
                DIRECTIONS, (long long)P, worst, least);
    for (size_t t = 0; t < n_tensors; t++)
        cr_assert(left_out[t] > 2,
                  "%s: its share of the directional derivatives is too small to be checked "
                  "(%.3g of the bound; seed %llu)",
                  tg_params_get(m.params, t)->name, left_out[t], SEED);
    free(left_out);
    free(theta), free(grad), free(v), free(shifted);
    tg_tape_free(tape);
    batch_free(&b);
    lm_free(&m);
}

/* ---- 2. a short training run must solve Induction Heads ------------------------------------------ */

/* Rows of 16 tokens over 14 ordinary ids: the answer is the token after the first trigger,
 * which sits anywhere in positions 0 … 13. Chance accuracy is 1/14, and a model that cannot
 * see the first trigger does no better than log 14 ≈ 2.64 in loss. */
enum { IH_VOCAB = 16, IH_LEN = 16, IH_BATCH = 32, IH_EVAL_ROWS = 256, IH_EVAL_EVERY = 25 };
/* The step budget, and the steps the control trains for. With these sizes and a constant
 * learning rate, 25 seeds reached the target at the evaluations after 75 to 175 steps
 * (median 100). */
enum { IH_MAX_STEPS = 500, IH_CONTROL_STEPS = 250 };

static tg_mamba_config induction_model(void)
{
    return (tg_mamba_config){.vocab_size = IH_VOCAB, .d_model = 32, .n_layer = 2, .d_state = 8};
}

typedef struct {
    double loss, accuracy;
} score;

/* The target: at least 90% of fresh rows answered, and a loss below 0.5. */
static bool on_target(score s) { return s.accuracy >= 0.9 && s.loss < 0.5; }

/* The mean loss and the accuracy over the scored positions of b, without recording. */
static score evaluate(const lm *m, const batch *b)
{
    tg_tape *tape = tg_tape_create();
    tg_tape_set_grad_enabled(tape, false);
    tg_tensor *logits = tg_mamba_forward(tape, m->model, ids_tensor(tape, b, b->inputs), NULL, NULL);
    cr_assert(logits, "%s", tg_last_error());
    tg_tensor *mean = tg_cross_entropy(tape, logits, ids_tensor(tape, b, b->targets), TG_IGNORE_INDEX);
    cr_assert(mean, "%s", tg_last_error());
    const int64_t V = logits->shape[2];
    int64_t scored = 0, right = 0;
    for (int64_t i = 0; i < b->rows * b->len; i++) {
        if (b->targets[i] == TG_IGNORE_INDEX) continue;
        int64_t best = 0;
        for (int64_t k = 1; k < V; k++)
            if (tg_get_flat(logits, i * V + k) > tg_get_flat(logits, i * V + best)) best = k;
        scored++;
        right += best == b->targets[i];
    }
    score s = {tg_item(mean), (double)right / (double)scored};
    tg_tape_free(tape);
    return s;
}

/* Cuts the scan's memory: with dt = softplus(5) ≈ 5 and A = −exp(3) ≈ −20, the state decays
 * by exp(−100) per step, so each position's scan output depends on that position's input
 * only; dt_proj.weight at zero keeps dt from depending on the input. These parameters are
 * then frozen (a group with learning rate 0). What is left sees back through the two
 * convolutions only: positions t − 6 … t. */
static void cut_memory(lm *m, tg_optim *opt)
{
    for (int64_t l = 0; l < m->model->config.n_layer; l++) {
        tg_mamba_mixer *mixer = &m->model->layers[l].mixer;
        cr_assert_eq(tg_fill(mixer->A_log, 3.0), TG_OK);
        cr_assert_eq(tg_fill(mixer->dt_proj.bias, 5.0), TG_OK);
        cr_assert_eq(tg_fill(mixer->dt_proj.weight, 0.0), TG_OK);
    }
    int frozen = tg_optim_add_group(opt, (tg_optim_group){.lr_scale = 0.0, .weight_decay = 0.0});
    cr_assert_geq(frozen, 0, "%s", tg_last_error());
    cr_assert_eq(tg_optim_assign(opt, "*.A_log", frozen, NULL), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_optim_assign(opt, "*.dt_proj.*", frozen, NULL), TG_OK, "%s", tg_last_error());
}

typedef struct {
    score start, end; /* on fresh rows before training and at the last evaluation */
    int steps;
} run_result;

/* AdamW at a constant learning rate (clipped, with weight decay) on fresh batches, scored
 * on fresh rows every IH_EVAL_EVERY steps; stops at the target or after max_steps. */
static run_result train_induction(bool without_memory, int max_steps)
{
    lm m = lm_new(induction_model(), tg_rng_next(tt_rng()));
    tg_optim_config config = tg_adamw_config(1e-2);
    config.max_grad_norm = 1.0;
    tg_optim *opt = tg_optim_create(m.params, &config);
    cr_assert(opt, "%s", tg_last_error());
    if (without_memory) cut_memory(&m, opt);
    const tg_induction_config task = {.vocab = IH_VOCAB};
    tg_rng data;
    tg_rng_seed(&data, tg_rng_next(tt_rng()));
    batch eval = batch_new(IH_EVAL_ROWS, IH_LEN), b = batch_new(IH_BATCH, IH_LEN);
    fill_induction(&task, &data, &eval);
    run_result r = {.start = evaluate(&m, &eval)};
    tg_tape *tape = tg_tape_create();
    for (r.steps = 1; r.steps <= max_steps; r.steps++) {
        fill_induction(&task, &data, &b);
        cr_assert_eq(tg_backward(tape, lm_loss(tape, &m, &b)), TG_OK, "%s", tg_last_error());
        tg_tape_reset(tape);
        cr_assert_eq(tg_optim_step(opt, 1), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_params_zero_grad(m.params), TG_OK);
        if (r.steps % IH_EVAL_EVERY) continue;
        fill_induction(&task, &data, &eval);
        r.end = evaluate(&m, &eval);
        if (on_target(r.end)) break;
    }
    r.steps = r.steps > max_steps ? max_steps : r.steps;
    tg_tape_free(tape);
    batch_free(&eval), batch_free(&b);
    tg_optim_free(opt);
    lm_free(&m);
    return r;
}

/* From chance (loss ≈ log 16, accuracy ≈ 1/14) to the target within the budget. */
Test(training, adamw_solves_induction_heads)
{
    run_result r = train_induction(false, IH_MAX_STEPS);
    cr_log_info("induction heads: loss %.3f → %.3f, accuracy %.1f%% → %.1f%% in %d steps", r.start.loss, r.end.loss,
                100 * r.start.accuracy, 100 * r.end.accuracy, r.steps);
    cr_assert_gt(r.start.loss, log(14.0), "the untrained model should be at chance: loss %.3f (seed %llu)",
                 r.start.loss, SEED);
    cr_assert_lt(r.start.accuracy, 0.2, "the untrained model should be at chance: accuracy %.3f (seed %llu)",
                 r.start.accuracy, SEED);
    cr_assert(on_target(r.end), "loss %.3f, accuracy %.3f after %d steps (seed %llu)", r.end.loss, r.end.accuracy,
              r.steps, SEED);
}

/* The control: the same training with the scan's memory cut off, for more steps than any of
 * the 25 seeds above needed. The last position then sees positions 9 … 15 only, so it can
 * find the first trigger and its successor for 5 of the 14 trigger positions (9 … 13); for
 * the other 9 the answer is independent of all it sees. Accuracy is thus at most
 * 5/14 + 9/14 · 1/14 ≈ 0.40 and the expected loss at least 9/14 · log 14 ≈ 1.70 (Gibbs'
 * inequality), whatever the training. */
Test(training, induction_heads_need_the_scans_memory)
{
    run_result r = train_induction(true, IH_CONTROL_STEPS);
    cr_log_info("induction heads without the scan's memory: loss %.3f → %.3f, accuracy %.1f%% → %.1f%% in %d steps",
                r.start.loss, r.end.loss, 100 * r.start.accuracy, 100 * r.end.accuracy, r.steps);
    cr_assert(!on_target(r.end) && r.end.accuracy < 0.6 && r.end.loss > 1.4,
              "loss %.3f, accuracy %.3f without the scan's memory (seed %llu)", r.end.loss, r.end.accuracy, SEED);
}

/* ---- 3. resuming from a checkpoint -------------------------------------------------------------- */

enum { HALF = 4, MICRO = 2, COPY_ROWS = 4, COPY_LEN = 14 };

typedef struct {
    lm m;
    tg_optim *opt;
    tg_rng data; /* draws every batch */
    tg_tape *tape;
} trainer;

static const tg_selective_copy_config copy_task = {.vocab = 8, .n_copy = 3};

static trainer trainer_new(uint64_t init_seed, uint64_t data_seed)
{
    tg_mamba_config config = {.vocab_size = 8, .d_model = 16, .n_layer = 2, .d_state = 4, .scan_chunk = 5};
    trainer t = {.m = lm_new(config, init_seed), .tape = tg_tape_create()};
    tg_optim_config oc = tg_adamw_config(1e-2);
    oc.max_grad_norm = 0.5;
    oc.schedule = (tg_schedule){TG_SCHEDULE_COSINE, 2, 2 * HALF, 0.1};
    t.opt = tg_optim_create(t.m.params, &oc);
    cr_assert(t.opt, "%s", tg_last_error());
    tg_rng_seed(&t.data, data_seed);
    return t;
}

static void trainer_free(trainer *t)
{
    tg_tape_free(t->tape);
    tg_optim_free(t->opt);
    lm_free(&t->m);
}

/* Steps [from, to), each of MICRO micro-batches drawn from the trainer's generator; the
 * micro-batch losses go to losses[step · MICRO + micro]. */
static void train_copying(trainer *t, int from, int to, double *losses)
{
    batch b = batch_new(COPY_ROWS, COPY_LEN);
    for (int step = from; step < to; step++) {
        for (int micro = 0; micro < MICRO; micro++) {
            fill_selective_copy(&copy_task, &t->data, &b);
            tg_tensor *loss = lm_loss(t->tape, &t->m, &b);
            cr_assert_eq(tg_backward(t->tape, loss), TG_OK, "%s", tg_last_error());
            losses[step * MICRO + micro] = tg_item(loss);
            tg_tape_reset(t->tape);
        }
        cr_assert_eq(tg_optim_step(t->opt, MICRO), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_params_zero_grad(t->m.params), TG_OK);
    }
    batch_free(&b);
}

static bool same_parameters(const trainer *a, const trainer *b)
{
    size_t bytes = sizeof(float) * (size_t)tg_params_numel(a->m.params);
    return memcmp(tg_params_data(a->m.params), tg_params_data(b->m.params), bytes) == 0;
}

/* n steps, a checkpoint, fresh objects loaded from it, n more steps: the same losses and
 * final parameters, bit for bit, as 2n steps in one go. The control: the parameters alone
 * (a fresh AdamW state) do not continue the run. */
Test(training, resumed_run_repeats_an_uninterrupted_one_bit_for_bit)
{
    char dir[] = "/tmp/tg_training_XXXXXX";
    cr_assert(mkdtemp(dir), "mkdtemp failed");
    char path[64];
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    const uint64_t init_seed = tg_rng_next(tt_rng()), data_seed = tg_rng_next(tt_rng());
    double straight[2 * HALF * MICRO], resumed[2 * HALF * MICRO], restarted[2 * HALF * MICRO];

    trainer a = trainer_new(init_seed, data_seed);
    train_copying(&a, 0, 2 * HALF, straight);

    trainer b = trainer_new(init_seed, data_seed);
    train_copying(&b, 0, HALF, resumed);
    tg_checkpoint_info info = {.step = HALF, .rng = b.data, .config = (char *)"{\"task\": \"selective copying\"}"};
    cr_assert_eq(tg_checkpoint_save(path, b.m.params, b.opt, &info), TG_OK, "%s", tg_last_error());
    trainer_free(&b);

    /* Fresh objects with other initial values and another data seed: the file must set them. */
    trainer c = trainer_new(init_seed ^ 1, data_seed ^ 1);
    tg_checkpoint_info loaded;
    cr_assert_eq(tg_checkpoint_load(path, c.m.params, c.opt, &loaded), TG_OK, "%s", tg_last_error());
    cr_assert_eq(loaded.step, HALF);
    cr_assert_eq(tg_optim_step_count(c.opt), HALF);
    c.data = loaded.rng;
    tg_checkpoint_info_clear(&loaded);
    train_copying(&c, HALF, 2 * HALF, resumed);

    for (int i = 0; i < 2 * HALF * MICRO; i++)
        cr_assert(memcmp(&resumed[i], &straight[i], sizeof(double)) == 0,
                  "step %d micro-batch %d: loss %.17g resumed, %.17g straight (seed %llu)", i / MICRO, i % MICRO,
                  resumed[i], straight[i], SEED);
    cr_assert(same_parameters(&a, &c), "final parameters differ (seed %llu)", SEED);
    cr_assert_neq(straight[0], straight[2 * HALF * MICRO - 1], "the losses should move (seed %llu)", SEED);

    trainer d = trainer_new(init_seed ^ 2, data_seed ^ 2);
    cr_assert_eq(tg_checkpoint_load(path, d.m.params, NULL, &loaded), TG_OK, "%s", tg_last_error());
    d.data = loaded.rng;
    tg_checkpoint_info_clear(&loaded);
    train_copying(&d, HALF, 2 * HALF, restarted);
    cr_assert(memcmp(&restarted[HALF * MICRO], &straight[HALF * MICRO], sizeof(double) * MICRO) == 0,
              "the first step after loading runs on the loaded parameters and batches (seed %llu)", SEED);
    cr_assert(!same_parameters(&a, &d), "without the AdamW state the run should go elsewhere (seed %llu)", SEED);

    trainer_free(&a), trainer_free(&c), trainer_free(&d);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(rmdir(dir), 0);
}

/* ---- 4. gradient accumulation ----------------------------------------------------------------------- */

enum { K = 4, PER_MICRO = 3, ACC_STEPS = 3 };

/* Every Selective Copying row scores the same number of positions (n_copy), so the mean over
 * K·m rows is the mean of K micro-batch means over m rows each: K micro-batches stepped with
 * tg_optim_step(opt, K) must equal one batch of the same K·m rows. Only rounding differs (the
 * sums run in another order), so the gradients and the parameters agree to 1e-13 of their
 * norms, step after step. In norm, not element by element: AdamW's update m̂/(√v̂ + ε)
 * divides by each element's own scale, so where an element's gradient is near zero its
 * rounding difference is magnified (one seed put one parameter 1.2 times past a per-element
 * bound of 1e-12 of its size; 190 others stayed within 0.62 of it). Clipping is on, so the
 * step measures a norm: the mean's, not the sum's (K times larger). */
Test(training, micro_batches_equal_one_large_batch)
{
    tg_mamba_config config = {
        .vocab_size = 8, .d_model = 12, .n_layer = 2, .d_state = 4, .dtype = TG_F64, .scan_chunk = 4};
    const uint64_t seed = tg_rng_next(tt_rng());
    lm big = lm_new(config, seed), small = lm_new(config, seed);
    tg_optim_config oc = tg_adamw_config(1e-2);
    oc.max_grad_norm = 1.0;
    tg_optim *opt_big = tg_optim_create(big.params, &oc), *opt_small = tg_optim_create(small.params, &oc);
    cr_assert(opt_big && opt_small, "%s", tg_last_error());
    const int64_t P = tg_params_numel(big.params);
    tg_tape *tape = tg_tape_create();
    batch b = batch_new(K * PER_MICRO, COPY_LEN);
    double worst_grad = 0, worst_param = 0; /* the largest deviations seen, as fractions of their bounds */
    for (int step = 0; step < ACC_STEPS; step++) {
        fill_selective_copy(&copy_task, tt_rng(), &b);
        cr_assert_eq(tg_backward(tape, lm_loss(tape, &big, &b)), TG_OK, "%s", tg_last_error());
        tg_tape_reset(tape);
        for (int k = 0; k < K; k++) {
            batch part = batch_rows(&b, k * PER_MICRO, PER_MICRO);
            cr_assert_eq(tg_backward(tape, lm_loss(tape, &small, &part)), TG_OK, "%s", tg_last_error());
            tg_tape_reset(tape);
        }
        /* The store holds the sum of K micro-batch means: over K, the batch's gradient. */
        const double *g_big = tg_params_grad(big.params), *g_small = tg_params_grad(small.params);
        double diff = 0, norm = 0;
        for (int64_t i = 0; i < P; i++) {
            diff += (g_small[i] / K - g_big[i]) * (g_small[i] / K - g_big[i]);
            norm += g_big[i] * g_big[i];
        }
        worst_grad = fmax(worst_grad, sqrt(diff / norm) / 1e-13);
        cr_assert(sqrt(diff) <= 1e-13 * sqrt(norm),
                  "step %d: summed gradients / %d differ by %.3g of the norm "
                  "(seed %llu)",
                  step, K, sqrt(diff / norm), SEED);
        cr_assert_eq(tg_optim_step(opt_big, 1), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_optim_step(opt_small, K), TG_OK, "%s", tg_last_error());
        double norm_big = tg_optim_last_grad_norm(opt_big), norm_small = tg_optim_last_grad_norm(opt_small);
        cr_assert(fabs(norm_small - norm_big) <= 1e-13 * norm_big,
                  "step %d: gradient norm %.17g accumulated, "
                  "%.17g in one batch (seed %llu)",
                  step, norm_small, norm_big, SEED);
        const double *p_big = tg_params_data(big.params), *p_small = tg_params_data(small.params);
        double p_diff = 0, p_norm = 0;
        for (int64_t i = 0; i < P; i++) {
            p_diff += (p_small[i] - p_big[i]) * (p_small[i] - p_big[i]);
            p_norm += p_big[i] * p_big[i];
        }
        worst_param = fmax(worst_param, sqrt(p_diff / p_norm) / 1e-13);
        cr_assert(sqrt(p_diff) <= 1e-13 * sqrt(p_norm), "step %d: parameters differ by %.3g of their norm (seed %llu)",
                  step, sqrt(p_diff / p_norm), SEED);
        tg_params_zero_grad(big.params), tg_params_zero_grad(small.params);
    }
    cr_log_info("%d micro-batches against one batch: gradients within %.2g of their bound, parameters within %.2g", K,
                worst_grad, worst_param);
    batch_free(&b);
    tg_tape_free(tape);
    tg_optim_free(opt_big), tg_optim_free(opt_small);
    lm_free(&big), lm_free(&small);
}

/* ---- 5. what a backward leaves behind ------------------------------------------------------------ */

enum { MEM_STEPS = 3 };

typedef struct {
    size_t tape_after_forward, tape_after_backward, tape_peak;
    size_t heap_after_forward, heap_after_backward, heap_peak_in_backward;
} step_memory;

static size_t heap_in_use(size_t *peak)
{
    tg_memory_stats stats;
    cr_assert_eq(tg_memory_stats_get(TG_DEVICE_CPU, &stats), TG_OK, "%s", tg_last_error());
    if (peak) *peak = stats.peak_bytes_in_use;
    return stats.bytes_in_use;
}

/* The index of t in the store, or the store's count when t is not one of its parameters. */
static size_t parameter_index(const tg_params *params, const tg_tensor *t)
{
    size_t i = 0;
    while (i < tg_params_count(params) && tg_params_get(params, i) != t) i++;
    return i;
}

/* Walks every node of the step (from the loss's producer back through ->prev): no output of
 * any node holds a gradient, every leaf input that requires one is a parameter, and every
 * parameter is met. */
static void assert_only_parameters_hold_gradients(tg_tape *tape, const lm *m, const tg_tensor *loss)
{
    size_t nodes = 0, n_params = tg_params_count(m->params), reached = 0;
    bool *seen = calloc(n_params, sizeof(bool));
    cr_assert(seen);
    for (const tg_node *node = loss->producer; node; node = node->prev, nodes++) {
        for (int j = 0; j < node->n_outputs; j++) {
            const tg_tensor *out = node->outputs[j];
            cr_assert(!out || !out->grad, "output %d of %s still holds its gradient after the backward (seed %llu)", j,
                      node->op, SEED);
        }
        for (int i = 0; i < node->n_inputs; i++) {
            const tg_tensor *in = node->inputs[i];
            if (!in || in->producer) continue; /* absent, or an activation: checked as an output */
            if (!in->requires_grad) {
                cr_assert(!in->grad, "input %d of %s needs no gradient but holds one", i, node->op);
                continue;
            }
            size_t index = parameter_index(m->params, in);
            cr_assert(index < n_params, "input %d of %s is a leaf with a gradient but not a parameter", i, node->op);
            reached += !seen[index];
            seen[index] = true;
        }
    }
    cr_assert_eq(nodes, tg_tape_node_count(tape), "the loss's producer should be the step's last node");
    cr_assert_eq(reached, n_params, "the walk met %zu of the %zu parameters", reached, n_params);
    free(seen);
}

/* Three steps of the same shapes (each with fresh tokens and an AdamW update in between):
 * after each backward only the parameters hold gradients; from the second step on, the heap
 * holds exactly what it held after the forward (activation gradients live on the heap and
 * must all be freed by the end of the backward), and while the backward ran it held less
 * than a second copy of the activations; and every step uses the tape bytes of the first
 * (after the forward, after the backward, and at the peak), the first of which outgrew the
 * tape's initial chunk so that the chunks were merged. */
Test(training, backward_leaves_gradients_on_parameters_only_and_steps_reuse_the_tape)
{
    tg_mamba_config config = {.vocab_size = 32, .d_model = 32, .n_layer = 4, .scan_chunk = 16};
    lm m = lm_new(config, tg_rng_next(tt_rng()));
    tg_optim_config oc = tg_adamw_config(1e-3);
    tg_optim *opt = tg_optim_create(m.params, &oc);
    cr_assert(opt, "%s", tg_last_error());
    tg_tape *tape = tg_tape_create();
    batch b = batch_new(4, 64);
    step_memory mem[MEM_STEPS];
    for (int step = 0; step < MEM_STEPS; step++) {
        for (int64_t i = 0; i < b.rows * b.len; i++) {
            b.inputs[i] = (int32_t)tt_randint(0, 31);
            b.targets[i] = (int32_t)tt_randint(0, 31);
        }
        tg_tensor *loss = lm_loss(tape, &m, &b);
        mem[step].tape_after_forward = tg_tape_bytes_in_use(tape);
        mem[step].heap_after_forward = heap_in_use(NULL);
        tg_memory_reset_peak();
        cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
        mem[step].tape_after_backward = tg_tape_bytes_in_use(tape);
        mem[step].heap_after_backward = heap_in_use(&mem[step].heap_peak_in_backward);
        mem[step].tape_peak = tg_tape_peak_bytes(tape);
        assert_only_parameters_hold_gradients(tape, &m, loss);
        tg_tape_reset(tape);
        cr_assert_eq(tg_optim_step(opt, 1), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_params_zero_grad(m.params), TG_OK);
    }
    cr_log_info("tape: %zu bytes after the forward, %zu after the backward, peak %zu; heap during the backward: "
                "%zu bytes above the forward's",
                mem[0].tape_after_forward, mem[0].tape_after_backward, mem[0].tape_peak,
                mem[1].heap_peak_in_backward - mem[1].heap_after_forward);
    cr_assert_gt(mem[0].tape_peak, (size_t)1 << 20, "the step should outgrow the tape's first 1 MiB chunk");
    for (int step = 1; step < MEM_STEPS; step++) {
        cr_assert_eq(mem[step].heap_after_backward, mem[step].heap_after_forward,
                     "step %d: the backward left %lld bytes on the heap", step,
                     (long long)(mem[step].heap_after_backward - mem[step].heap_after_forward));
        cr_assert_lt(mem[step].heap_peak_in_backward - mem[step].heap_after_forward, mem[step].tape_after_forward,
                     "step %d: the backward's gradients took as much as the activations", step);
        cr_assert_eq(mem[step].tape_after_forward, mem[0].tape_after_forward, "step %d: tape after the forward", step);
        cr_assert_eq(mem[step].tape_after_backward, mem[0].tape_after_backward, "step %d: tape after the backward",
                     step);
        cr_assert_eq(mem[step].tape_peak, mem[0].tape_peak, "step %d: the tape's peak", step);
    }
    batch_free(&b);
    tg_tape_free(tape);
    tg_optim_free(opt);
    lm_free(&m);
}
