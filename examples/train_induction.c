/* examples/train_induction.c: a Mamba LM learns Induction Heads, the Mamba paper's test
 * of in-context recall: random tokens, a trigger somewhere, and at the second trigger
 * (the last token) the model must name the token that followed the first one
 * (tapegrad/data.h, docs/data.md). Only that last token is scored.
 *
 * After training at --seq-len (256, as in the paper) it measures how the model
 * extrapolates: the accuracy at lengths 2^6 … 2^k (--eval-max-log2 k), printed as the
 * paper's Table 11 prints it. A long sequence is run in pieces that hand the recurrent
 * state on (train_stream), so memory does not grow with its length.
 *
 *   ./train_induction                        minutes on two CPU cores (docs/training.md); table to 2^12
 *   ./train_induction --seq-len 64 --steps 1500      shorter: trained at 2^6 instead
 *   ./train_induction --device cuda --eval-max-log2 20              the paper's whole range */
#include "train_common.h"

#include <math.h>
#include <stdlib.h>

enum {
    EVAL_PIECE = 1024, /* steps per piece of a long evaluation sequence */
    EVAL_MIN_SAMPLES = 16,
};

/* rows × piece in one forward: bounds the evaluation's memory (a GPU wants wide forwards) */
static int64_t eval_tokens(tg_device device) { return device == TG_DEVICE_CUDA ? 1 << 18 : 1 << 15; }
/* past this many tokens per length, fewer samples are scored: on a CPU the long lengths
 * would take hours, a GPU can afford 256 sequences of 2^20 */
static int64_t eval_long_tokens(tg_device device)
{
    return device == TG_DEVICE_CUDA ? (int64_t)1 << 28 : (int64_t)1 << 20;
}

static const char *const eval_columns[] = {"eval_loss", "eval_accuracy", NULL};

static tg_status induction_batch(const void *task, tg_rng *rng, int64_t n, int64_t len, int32_t *inputs,
                                 int32_t *targets)
{
    return tg_task_induction_batch(task, rng, n, len, inputs, targets);
}

/* How many of `samples` sequences of length len the model answers right. The rows of
 * one forward and the piece length are chosen so that at most eval_tokens() tokens are in
 * flight; only the last position's logits are needed. */
static tg_status count_right(train_session *s, const tg_induction_config *task, tg_rng *rng, int64_t len,
                             int64_t samples, int64_t *right)
{
    int64_t piece = len < EVAL_PIECE ? len : EVAL_PIECE;
    int64_t in_flight = eval_tokens(s->device);
    int64_t rows = in_flight / piece < samples ? in_flight / piece : samples;
    int64_t vocab = s->model->config.vocab_size;
    int32_t *ids = malloc((size_t)(rows * len) * sizeof *ids);
    int32_t *targets = malloc((size_t)(rows * len) * sizeof *targets);
    int32_t *chunk = malloc((size_t)(rows * piece) * sizeof *chunk);
    float *logits = malloc((size_t)(rows * vocab) * sizeof *logits);
    tg_status status = ids && targets && chunk && logits ? TG_OK : tg_set_error(TG_ERR_NOMEM, "out of memory");
    for (int64_t done = 0; done < samples && status == TG_OK; done += rows) {
        int64_t n = samples - done < rows ? samples - done : rows;
        train_stream *stream = train_stream_create(s, n); /* zero states: a new sequence */
        status = stream ? tg_task_induction_batch(task, rng, n, len, ids, targets) : TG_ERR_NOMEM;
        for (int64_t t = 0; t < len && status == TG_OK; t += piece) {
            int64_t width = len - t < piece ? len - t : piece;
            for (int64_t r = 0; r < n; r++) /* the piece's columns of every row, contiguous */
                for (int64_t i = 0; i < width; i++) chunk[r * width + i] = ids[r * len + t + i];
            status = train_stream_feed(stream, chunk, width, logits);
        }
        for (int64_t r = 0; r < n && status == TG_OK; r++)
            *right += train_argmax(logits + r * vocab, vocab) == targets[r * len + len - 1];
        train_stream_free(stream);
    }
    free(ids), free(targets), free(chunk), free(logits);
    return status;
}

/* The extrapolation table, in the layout of the Mamba paper's Table 11: one row per model,
 * one column per length; ✓ marks 100% (the training length's column says 100). */
static tg_status print_table(train_session *s, const tg_induction_config *task, int max_log2, int64_t samples)
{
    double accuracy[23];
    int64_t scored[23];
    tg_rng rng;
    tg_rng_seed(&rng, (uint64_t)s->options->seed + 0x7ab1e);
    for (int k = 6; k <= max_log2; k++) {
        int64_t len = (int64_t)1 << k, right = 0;
        int64_t cap = eval_long_tokens(s->device);
        int64_t n = samples * len <= cap ? samples : cap / len;
        scored[k] = n < EVAL_MIN_SAMPLES ? (samples < EVAL_MIN_SAMPLES ? samples : EVAL_MIN_SAMPLES) : n;
        double start = train_seconds();
        if (count_right(s, task, &rng, len, scored[k], &right) != TG_OK) return TG_ERR_INVALID;
        accuracy[k] = 100.0 * (double)right / (double)scored[k];
        train_note(s, "length 2^%d: %lld of %lld right (%.1f s)", k, (long long)right, (long long)scored[k],
                   train_seconds() - start);
    }
    printf("\nInduction heads: test accuracy (%%) by sequence length, trained at length %lld "
           "(check mark = 100%%)\n\n| Model | Params |",
           (long long)s->options->seq_len);
    for (int k = 6; k <= max_log2; k++) printf(" 2^%d |", k);
    printf("\n|---|---|");
    for (int k = 6; k <= max_log2; k++) printf("---|");
    printf("\n| Mamba | %.1fK |", (double)tg_params_numel(s->params) / 1e3);
    for (int k = 6; k <= max_log2; k++) {
        bool trained_here = ((int64_t)1 << k) == s->options->seq_len;
        if (accuracy[k] == 100.0 && !trained_here)
            printf(" \u2713 |");
        else
            printf(" %.1f |", accuracy[k]);
    }
    printf("\n\nsequences scored per length:");
    for (int k = 6; k <= max_log2; k++) printf(" %lld", (long long)scored[k]);
    printf("\n");
    return TG_OK;
}

int main(int argc, char **argv)
{
    /* The paper's model and task (2 layers, d_model 64, vocab 16, length 256). Its batch of 8
     * learns too slowly for a CPU: 32 sequences at lr 2e-3 learn within 2000 steps. */
    train_options options = train_defaults();
    options.steps = 2000, options.batch = 32, options.seq_len = 256, options.lr = 2e-3, options.eval_every = 250;
    int64_t vocab = 16, eval_rows = 256, max_log2 = 12, samples = 256;
    train_flag flags[] = {
        {"vocab", TRAIN_INT, &vocab, "N", "ids: ordinary 0 .. N-3, trigger N-1", 3, 1 << 16, TRAIN_FIXED},
        {"eval-rows", TRAIN_INT, &eval_rows, "N", "held-out sequences per evaluation during training", 1, 1 << 24,
         TRAIN_RESTORED},
        {"eval-max-log2", TRAIN_INT, &max_log2, "K", "after training, test at lengths 2^6 .. 2^K (5: none)", 5, 22,
         TRAIN_RESTORED},
        {"eval-samples", TRAIN_INT, &samples, "N",
         "sequences per test length (fewer past 2^20 tokens on a CPU, 2^28 on a GPU; at least 16)", 1, 1 << 24,
         TRAIN_RESTORED},
    };
    train_program program = {
        .name = "train_induction",
        .summary = "Trains a Mamba LM on Induction Heads (recall the token after the first trigger at the\n"
                   "second one), then tests it at lengths 2^6 .. 2^K and prints the table of the paper.",
        .example = "train_induction --steps 4000 --eval-every 500 --eval-max-log2 14",
        .options = &options,
        .flags = flags,
        .n_flags = sizeof flags / sizeof flags[0],
        .eval_columns = eval_columns,
    };
    int code = train_parse(&program, argc, argv);
    if (code != TRAIN_GO) return code;

    tg_induction_config task = {.vocab = vocab};
    train_session *s = train_open(&program, vocab);
    if (!s) return 1;
    double eval[2];
    while (train_running(s)) {
        if (tg_task_induction_batch(&task, &s->data_rng, options.batch, options.seq_len, s->inputs, s->targets) !=
                TG_OK ||
            train_step(s) != TG_OK)
            return train_fail(s);
        if (train_eval_due(s)) {
            if (train_evaluate_task(s, induction_batch, &task, eval_rows, eval) != TG_OK) return train_fail(s);
            train_record_eval(s, eval);
        }
        if (train_end_step(s) != TG_OK) return train_fail(s);
    }
    if (s->step == options.steps && max_log2 >= 6 && print_table(s, &task, (int)max_log2, samples) != TG_OK)
        return train_fail(s);
    return train_close(s);
}
