/* examples/train_char.c: a character-level Mamba language model on any text file.
 *
 * The text is tapegrad's character corpus (tapegrad/data.h): its characters (UTF-8 code
 * points) are the vocabulary, the first 90% trains on random windows and the last 10% is
 * held out. Every --eval-every steps the loss on the held-out text is reported in nats
 * per character, over consecutive windows that score each character once (docs/data.md
 * has the n-gram figures to beat on the King James Bible: 1.31 for a 5-gram).
 *
 *   bash scripts/get-kjv.sh                                 writes data/kjv.txt
 *   ./train_char --ckpt kjv.safetensors --csv kjv.csv       trains on it
 *   ./train_char --resume kjv.safetensors --sample 400 --temperature 0.8
 *                                                           writes 400 characters */
#include "train_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const eval_columns[] = {"val_loss", "val_accuracy", NULL};

/* Loss (nats per character) and next-character accuracy on the held-out text: its
 * windows of --seq-len in order, the first max_windows of them when max_windows > 0. */
static tg_status validate(train_session *s, const tg_text *text, int64_t max_windows, double *values)
{
    int64_t batch = s->options->batch, len = s->options->seq_len;
    int64_t windows = tg_text_window_count(text, TG_TEXT_VAL, len);
    if (max_windows > 0 && windows > max_windows) windows = max_windows;
    train_eval_sums sums = {0};
    for (int64_t w = 0; w < windows; w += batch) {
        int64_t n = windows - w < batch ? windows - w : batch;
        if (tg_text_windows(text, TG_TEXT_VAL, w, n, len, s->inputs, s->targets, NULL) != TG_OK ||
            train_eval_batch(s, s->inputs, s->targets, n, len, &sums) != TG_OK)
            return TG_ERR_INVALID;
    }
    values[0] = sums.scored ? sums.loss_sum / (double)sums.scored : NAN;
    values[1] = sums.scored ? (double)sums.correct / (double)sums.scored : NAN;
    return TG_OK;
}

/* A character id drawn from softmax(logits / temperature); the arg-max at temperature 0. */
static int32_t draw(const float *logits, int64_t vocab, double temperature, tg_rng *rng)
{
    int64_t best = train_argmax(logits, vocab);
    if (temperature == 0) return (int32_t)best;
    double total = 0;
    for (int64_t v = 0; v < vocab; v++) total += exp((logits[v] - logits[best]) / temperature);
    double u = tg_rng_uniform(rng) * total;
    for (int64_t v = 0; v < vocab; v++)
        if ((u -= exp((logits[v] - logits[best]) / temperature)) < 0) return (int32_t)v;
    return (int32_t)best; /* u was within rounding of the total */
}

/* Writes the prompt and n characters drawn one at a time: each is fed back to the model,
 * whose recurrent state carries everything before it (train_stream), so each character
 * costs one step, not a pass over the whole text so far. */
static tg_status sample(train_session *s, const tg_text *text, const int32_t *prompt, int64_t n_prompt, int64_t n,
                        double temperature)
{
    int64_t vocab = tg_text_vocab_size(text);
    float *logits = malloc((size_t)vocab * sizeof *logits);
    train_stream *stream = train_stream_create(s, 1);
    tg_rng rng;
    tg_rng_seed(&rng, (uint64_t)s->options->seed);
    tg_status status = logits && stream ? train_stream_feed(stream, prompt, n_prompt, logits) : TG_ERR_NOMEM;
    for (int64_t i = 0; i < n && status == TG_OK; i++) {
        int32_t id = draw(logits, vocab, temperature, &rng);
        char utf8[8];
        size_t bytes;
        if ((status = tg_text_decode(text, &id, 1, utf8, sizeof utf8, &bytes)) == TG_OK) fputs(utf8, stdout);
        if (status == TG_OK) status = train_stream_feed(stream, &id, 1, logits);
    }
    printf("\n");
    train_stream_free(stream);
    free(logits);
    return status;
}

/* The training loop; returns the exit code. */
static int train(train_session *s, const tg_text *text, int64_t max_windows)
{
    const train_options *o = s->options;
    double val[2] = {NAN, NAN};
    while (train_running(s)) {
        if (tg_text_batch(text, TG_TEXT_TRAIN, &s->data_rng, o->batch, o->seq_len, s->inputs, s->targets) != TG_OK ||
            train_step(s) != TG_OK)
            return train_fail(s);
        if (train_eval_due(s)) {
            if (validate(s, text, max_windows, val) != TG_OK) return train_fail(s);
            train_record_eval(s, val);
        }
        if (train_end_step(s) != TG_OK) return train_fail(s);
    }
    if (!isnan(val[0]))
        printf("held-out loss %.4f nats/char, %.1f%% of the characters predicted\n", val[0], 100 * val[1]);
    return train_close(s);
}

/* Samples after the prompt (or after a newline when there is none); returns the exit code. */
static int write_sample(train_session *s, const train_program *program, const tg_text *text, const char *prompt,
                        int64_t n, double temperature)
{
    size_t size = strlen(prompt);
    int64_t n_prompt = 0;
    int32_t *ids = malloc((size + 1) * sizeof *ids);
    if (ids && tg_text_encode(text, prompt, size, ids, (int64_t)size, &n_prompt) != TG_OK) {
        train_usage_error(program, "--prompt: %s", tg_last_error());
        free(ids), train_free(s);
        return 2;
    }
    if (ids && n_prompt == 0) {
        int32_t newline = tg_text_id(text, '\n');
        ids[n_prompt++] = newline >= 0 ? newline : 0;
    }
    fputs(prompt, stdout);
    tg_status status = ids ? sample(s, text, ids, n_prompt, n, temperature) : TG_ERR_NOMEM;
    free(ids);
    if (status != TG_OK) return train_fail(s);
    train_free(s);
    return 0;
}

int main(int argc, char **argv)
{
    /* A small model that trains in minutes on a CPU; on a GPU, try --layers 4 --d-model 256
     * --seq-len 256 --batch 32 --steps 5000. */
    train_options options = train_defaults();
    options.steps = 1500, options.batch = 16, options.seq_len = 128, options.layers = 2, options.d_model = 64;
    options.lr = 3e-3, options.weight_decay = 0.1, options.eval_every = 500;
    const char *data = "data/kjv.txt", *prompt = "";
    int64_t n_sample = 0, max_windows = 0;
    double temperature = 1.0;
    train_flag flags[] = {
        {"data", TRAIN_TEXT, &data, "PATH", "the text (UTF-8) to learn; the last 10% is held out", 0, 0,
         TRAIN_RESTORED},
        {"eval-windows", TRAIN_INT, &max_windows, "N", "held-out windows per evaluation; 0: all of them", 0, 1e15,
         TRAIN_RESTORED},
        {"sample", TRAIN_INT, &n_sample, "N", "write N characters from the checkpoint (--resume or --ckpt) and exit", 0,
         1e12, TRAIN_RUN_ONLY},
        {"temperature", TRAIN_REAL, &temperature, "T", "sampling temperature; 0: always the likeliest", 0, 100,
         TRAIN_RUN_ONLY},
        {"prompt", TRAIN_TEXT, &prompt, "TEXT", "sampling starts after this text", 0, 0, TRAIN_RUN_ONLY, "a newline"},
    };
    train_program program = {
        .name = "train_char",
        .summary = "Trains a character-level Mamba LM on a text file and reports the held-out loss in\n"
                   "nats per character; with --sample, writes text from a trained checkpoint instead.",
        .example = "train_char --ckpt kjv.safetensors && train_char --resume kjv.safetensors --sample 400",
        .options = &options,
        .flags = flags,
        .n_flags = sizeof flags / sizeof flags[0],
        .eval_columns = eval_columns,
    };
    int code = train_parse(&program, argc, argv);
    if (code != TRAIN_GO) return code;
    if (n_sample > 0 && !options.resume) { /* sampling reads the model from --ckpt when not resuming */
        if (!options.ckpt) return train_usage_error(&program, "--sample needs a checkpoint: --resume PATH");
        if ((code = train_apply_checkpoint_config(&program, options.ckpt)) != TRAIN_GO) return code;
        options.resume = options.ckpt, options.ckpt = NULL;
    }
    tg_text *text = tg_text_load(data, NULL);
    if (!text)
        return train_usage_error(&program, "--data %s: %s%s", data, tg_last_error(),
                                 strcmp(data, "data/kjv.txt") ? "" : " (bash scripts/get-kjv.sh writes it)");
    train_session *s = train_open(&program, tg_text_vocab_size(text));
    int result = !s             ? 1
                 : n_sample > 0 ? write_sample(s, &program, text, prompt, n_sample, temperature)
                                : train(s, text, max_windows);
    tg_text_free(text);
    return result;
}
