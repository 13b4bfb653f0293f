/* End to end on the CPU: embedding → causal conv1d (SiLU) → linear → cross-entropy,
 * trained with plain SGD on the shift task (examples/shift_task.h), must reach 99%
 * accuracy on fresh data within a fixed number of steps; and the whole model's loss
 * must pass a float64 finite-difference check on every parameter. */
#include "test_util.h"

#include "examples/shift_task.h"

enum { BATCH = 16, LENGTH = 32, VOCAB = 8, DIM = 32, KERNEL = 4, LAG = 3, MAX_STEPS = 800 };

static tg_tensor *ids(tg_tape *tape, const int32_t *values)
{
    return tg_from_data(tape, TG_I32, TG_DEVICE_CPU, 2, (int64_t[]){BATCH, LENGTH}, values);
}

/* Trains with SGD for at most max_steps; returns the accuracy on a fresh batch when it
 * reached 99% or the steps ran out, and the steps taken in *steps_taken. */
static double train(int64_t kernel, int max_steps, int *steps_taken)
{
    shift_model model;
    cr_assert_eq(shift_model_init(&model, TG_F32, VOCAB, DIM, kernel, LAG, tt_seed()), TG_OK, "%s", tg_last_error());
    tg_tape *tape = tg_tape_create();
    int32_t tokens[BATCH * LENGTH], targets[BATCH * LENGTH];
    double accuracy = 0;
    int step;
    for (step = 1; step <= max_steps; step++) {
        shift_batch(tt_rng(), &model, BATCH, LENGTH, tokens, targets);
        tg_tensor *loss = shift_model_loss(&model, tape, ids(tape, tokens), ids(tape, targets), NULL);
        cr_assert(loss, "%s", tg_last_error());
        cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
        tg_params_sgd_step(model.params, 0.5);
        tg_params_zero_grad(model.params);
        tg_tape_reset(tape);
        if (step % 25 == 0) { /* accuracy on a fresh batch, without recording */
            tg_tape_set_grad_enabled(tape, false);
            shift_batch(tt_rng(), &model, BATCH, LENGTH, tokens, targets);
            tg_tensor *logits = NULL;
            shift_model_loss(&model, tape, ids(tape, tokens), ids(tape, targets), &logits);
            accuracy = shift_accuracy(logits, targets);
            tg_tape_reset(tape);
            tg_tape_set_grad_enabled(tape, true);
            if (accuracy >= 0.99) break;
        }
    }
    *steps_taken = step > max_steps ? max_steps : step;
    tg_tape_free(tape);
    tg_params_free(model.params);
    return accuracy;
}

Test(train, sgd_learns_the_shift_task)
{
    int steps;
    double accuracy = train(KERNEL, MAX_STEPS, &steps);
    cr_assert_geq(accuracy, 0.99, "accuracy %.3f after %d steps (seed %llu)", accuracy, steps,
                  (unsigned long long)tt_seed());
    cr_log_info("shift task, K=%d: %.1f%% after %d steps", KERNEL, 100 * accuracy, steps);
}

/* The control: with K = LAG taps the convolution cannot see the token LAG steps back,
 * and the same training stays near chance (1/VOCAB). The task does need the conv. */
Test(train, the_task_needs_the_convolution)
{
    int steps;
    double accuracy = train(LAG, 200, &steps);
    cr_assert_lt(accuracy, 0.5, "K=%d cannot see %d steps back, yet reached %.3f", LAG, LAG, accuracy);
    cr_log_info("shift task, K=%d: %.1f%% after %d steps (chance %.1f%%)", LAG, 100 * accuracy, steps, 100.0 / VOCAB);
}

typedef struct {
    shift_model *model;
    const int32_t *tokens, *targets;
} batch;

static tg_tensor *model_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)in;
    (void)n;
    batch *b = user;
    return shift_model_loss(b->model, tape, ids(tape, b->tokens), ids(tape, b->targets), NULL);
}

Test(train, whole_model_gradient_matches_finite_differences)
{
    shift_model model;
    cr_assert_eq(shift_model_init(&model, TG_F64, 5, 6, KERNEL, LAG, tt_seed()), TG_OK, "%s", tg_last_error());
    tg_fill_normal(model.conv_bias, tt_rng(), 0, 0.5); /* not zeros: every parameter matters */
    tg_fill_normal(model.head_bias, tt_rng(), 0, 0.5);
    int32_t tokens[BATCH * LENGTH], targets[BATCH * LENGTH];
    shift_batch(tt_rng(), &model, BATCH, LENGTH, tokens, targets);
    batch b = {&model, tokens, targets};
    tg_tensor *inputs[8];
    int n = (int)tg_params_count(model.params);
    for (int i = 0; i < n; i++) inputs[i] = tg_params_get(model.params, (size_t)i);
    tt_gradcheck("shift model", model_loss, inputs, n, &b, NULL);
    tg_params_free(model.params);
}
