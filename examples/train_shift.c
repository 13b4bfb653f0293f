/* examples/train_shift.c: train the shift task (examples/shift_task.h) with plain SGD
 * and print loss and accuracy as it learns.
 *
 *   ./train_shift [steps]                                                              */
#include "shift_task.h"

#include <stdio.h>
#include <time.h>

/* Wall-clock seconds (C11's timespec_get). */
static double seconds_now(void)
{
    struct timespec now;
    timespec_get(&now, TIME_UTC);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

enum { BATCH = 16, LENGTH = 64, VOCAB = 16, DIM = 64, KERNEL = 4, LAG = 3 };

static int fail(const char *what)
{
    fprintf(stderr, "train_shift: %s: %s\n", what, tg_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 600;
    double lr = 0.5;
    shift_model model;
    if (shift_model_init(&model, TG_F32, VOCAB, DIM, KERNEL, LAG, 1234) != TG_OK) return fail("init");
    tg_tape *tape = tg_tape_create();
    tg_rng data;
    tg_rng_seed(&data, 99);
    int32_t tokens[BATCH * LENGTH], targets[BATCH * LENGTH];
    const int64_t shape[2] = {BATCH, LENGTH};
    printf("shift task: predict the token %d steps back (vocab %d, batch %d x %d), device cpu\n", LAG, VOCAB, BATCH,
           LENGTH);
    double start = seconds_now();
    double accuracy = 0;
    for (int step = 1; step <= steps; step++) {
        shift_batch(&data, &model, BATCH, LENGTH, tokens, targets);
        tg_tensor *x = tg_from_data(tape, TG_I32, TG_DEVICE_CPU, 2, shape, tokens);
        tg_tensor *y = tg_from_data(tape, TG_I32, TG_DEVICE_CPU, 2, shape, targets);
        tg_tensor *logits = NULL;
        tg_tensor *loss = shift_model_loss(&model, tape, x, y, &logits);
        if (!loss) return fail("forward");
        if (tg_backward(tape, loss) != TG_OK) return fail("backward");
        tg_params_sgd_step(model.params, lr);
        tg_params_zero_grad(model.params);
        accuracy = shift_accuracy(logits, targets);
        if (step % 50 == 0 || step == 1)
            printf("step %4d  loss %.4f  accuracy %5.1f%%\n", step, tg_item(loss), 100 * accuracy);
        tg_tape_reset(tape);
    }
    printf("done: %d steps in %.2f s, final batch accuracy %.1f%%\n", steps, seconds_now() - start, 100 * accuracy);
    tg_tape_free(tape);
    tg_params_free(model.params);
    return 0;
}
