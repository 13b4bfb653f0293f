/* examples/train_selective_copy.c: a Mamba LM learns Selective Copying, the first
 * synthetic task of the Mamba paper: a few data tokens lie at random places among noise,
 * and at the markers that end the sequence the model must write them out in order
 * (tapegrad/data.h and docs/data.md draw the layout). Only the answers are scored, so
 * the accuracy is the fraction of data tokens copied right.
 *
 *   ./train_selective_copy                       the demo: a small task that trains on a CPU
 *   ./train_selective_copy --device cuda --seq-len 4128 --copy 16 --vocab 16 \
 *       --batch 64 --steps 20000                 the paper's task size, on a GPU
 *
 * The task's size (--vocab, --copy, --seq-len) and the model's are saved in checkpoints;
 * the training loop itself is the one every program here shares (train_common.h). */
#include "train_common.h"

#include <math.h>

static const char *const eval_columns[] = {"eval_loss", "eval_accuracy", NULL};

static tg_status copy_batch(const void *task, tg_rng *rng, int64_t n, int64_t len, int32_t *inputs, int32_t *targets)
{
    return tg_task_selective_copy_batch(task, rng, n, len, inputs, targets);
}

/* The result beside the Mamba paper's (its Table 1: a 2-layer Mamba of S6 layers copies 16 tokens
 * from among 4096 noise tokens to 99.8%), in the same layout: one row per model. */
static void print_table(const train_session *s, int64_t noise, int64_t n_copy, double accuracy)
{
    printf("\nSelective Copying: copied tokens right (%%) on held-out sequences, beside the Mamba paper's\n\n"
           "| Model | Params | Noise tokens | Tokens copied | Accuracy |\n|---|---|---|---|---|\n");
    printf("| Mamba (this run) | %.1fK | %lld | %lld | %.2f |\n", (double)tg_params_numel(s->params) / 1e3,
           (long long)noise, (long long)n_copy, 100 * accuracy);
    printf("| Mamba (paper, S6 layers) | - | 4096 | 16 | 99.8 |\n");
}

int main(int argc, char **argv)
{
    /* The demo: copy 4 tokens of 14 symbols out of sequences of 32 (the paper's vocabulary,
     * a shorter sequence) with a 2-layer model of width 32, to 99.9-100% held-out accuracy
     * (README.md gives its time). */
    train_options options = train_defaults();
    options.steps = 1500, options.batch = 32, options.seq_len = 32, options.d_model = 32, options.d_state = 8;
    options.lr = 5e-3, options.eval_every = 100;
    int64_t vocab = 16, n_copy = 4, eval_rows = 512;
    train_flag flags[] = {
        {"vocab", TRAIN_INT, &vocab, "N", "ids: noise 0, data 1 .. N-2, marker N-1", 3, 1 << 16, TRAIN_FIXED},
        {"copy", TRAIN_INT, &n_copy, "M", "data tokens to copy (--seq-len counts them twice)", 1, 1 << 20, TRAIN_FIXED},
        {"eval-rows", TRAIN_INT, &eval_rows, "N", "held-out sequences per evaluation", 1, 1 << 24, TRAIN_RESTORED},
    };
    train_program program = {
        .name = "train_selective_copy",
        .summary = "Trains a Mamba LM on Selective Copying: M data tokens scattered among noise, to be\n"
                   "written out in order at the M markers that end each sequence of --seq-len tokens.",
        .example = "train_selective_copy --steps 3000 --csv copy.csv --ckpt copy.safetensors",
        .options = &options,
        .flags = flags,
        .n_flags = sizeof flags / sizeof flags[0],
        .eval_columns = eval_columns,
    };
    int code = train_parse(&program, argc, argv);
    if (code != TRAIN_GO) return code;
    if (options.seq_len < 2 * n_copy)
        return train_usage_error(&program, "--seq-len %lld is too short to copy %lld tokens (at least %lld)",
                                 (long long)options.seq_len, (long long)n_copy, 2 * (long long)n_copy);

    tg_selective_copy_config task = {.vocab = vocab, .n_copy = n_copy};
    train_session *s = train_open(&program, vocab);
    if (!s) return 1;
    double eval[2] = {NAN, NAN};
    while (train_running(s)) {
        if (tg_task_selective_copy_batch(&task, &s->data_rng, options.batch, options.seq_len, s->inputs, s->targets) !=
                TG_OK ||
            train_step(s) != TG_OK)
            return train_fail(s);
        if (train_eval_due(s)) {
            if (train_evaluate_task(s, copy_batch, &task, eval_rows, eval) != TG_OK) return train_fail(s);
            train_record_eval(s, eval);
        }
        if (train_end_step(s) != TG_OK) return train_fail(s);
    }
    if (!isnan(eval[1])) {
        printf("held-out accuracy %.2f%% (%lld sequences, %lld tokens to copy each)\n", 100 * eval[1],
               (long long)eval_rows, (long long)n_copy);
        print_table(s, options.seq_len - 2 * n_copy, n_copy, eval[1]);
    }
    return train_close(s);
}
