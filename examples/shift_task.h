/* examples/shift_task.h: a tiny model and task that need the causal convolution.
 *
 * Task: at each position t, predict the token seen `lag` steps earlier (positions
 * t < lag have nothing to predict and are ignored). A per-position classifier cannot
 * do it; a causal conv1d of width K > lag can, by routing the token at t − lag to t.
 *
 * Model: embedding (V, D) → causal conv1d over the D channels (K taps, bias, SiLU) →
 * linear head (D → V, with bias) → cross-entropy. The convolution runs on a channel-last
 * view of the (B, L, D) activations, so no transpose is ever copied.
 *
 * Shared by examples/train_shift.c (the demo) and tests/test_train.c. */
#ifndef TAPEGRAD_EXAMPLES_SHIFT_TASK_H
#define TAPEGRAD_EXAMPLES_SHIFT_TASK_H

#include <tapegrad.h>

#include <math.h>
#include <stdlib.h>

#define SHIFT_IGNORE (-100) /* target of positions with nothing to predict */

typedef struct {
    int64_t vocab, dim, kernel;
    int lag;
    tg_params *params;
    tg_tensor *embedding;   /* (V, D) */
    tg_tensor *conv_weight; /* (D, K) */
    tg_tensor *conv_bias;   /* (D) */
    tg_tensor *head_weight; /* (D, V) */
    tg_tensor *head_bias;   /* (V) */
} shift_model;

static tg_status shift_model_init(shift_model *m, tg_dtype dtype, int64_t vocab, int64_t dim, int64_t kernel, int lag,
                                  uint64_t seed)
{
    *m = (shift_model){.vocab = vocab, .dim = dim, .kernel = kernel, .lag = lag};
    m->params = tg_params_create(TG_DEVICE_CPU);
    if (!m->params) return TG_ERR_NOMEM;
    m->embedding = tg_params_add(m->params, "embedding.weight", dtype, 2, (int64_t[]){vocab, dim});
    m->conv_weight = tg_params_add(m->params, "conv1d.weight", dtype, 2, (int64_t[]){dim, kernel});
    m->conv_bias = tg_params_add(m->params, "conv1d.bias", dtype, 1, (int64_t[]){dim});
    m->head_weight = tg_params_add(m->params, "head.weight", dtype, 2, (int64_t[]){dim, vocab});
    m->head_bias = tg_params_add(m->params, "head.bias", dtype, 1, (int64_t[]){vocab});
    if (!m->head_bias) return TG_ERR_INVALID;
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    tg_fill_normal(m->embedding, &rng, 0.0, 1.0);
    tg_fill_uniform(m->conv_weight, &rng, -1.0 / sqrt((double)kernel), 1.0 / sqrt((double)kernel));
    tg_fill_uniform(m->head_weight, &rng, -1.0 / sqrt((double)dim), 1.0 / sqrt((double)dim));
    return TG_OK;
}

/* Mean cross-entropy of the batch; *logits_out (if non-NULL) receives (B, L, V). */
static tg_tensor *shift_model_loss(shift_model *m, tg_tape *tape, tg_tensor *tokens, tg_tensor *targets,
                                   tg_tensor **logits_out)
{
    tg_tensor *h = tg_embedding(tape, m->embedding, tokens); /* (B, L, D) */
    tg_tensor *channels = tg_transpose(tape, h, 1, 2);       /* (B, D, L) view */
    tg_causal_conv1d_options conv = {.bias = m->conv_bias, .activation = TG_ACT_SILU};
    tg_tensor *mixed = tg_causal_conv1d(tape, channels, m->conv_weight, &conv); /* channel-last */
    tg_tensor *features = tg_transpose(tape, mixed, 1, 2);                      /* (B, L, D) */
    tg_tensor *logits = tg_add(tape, tg_matmul(tape, features, m->head_weight, false, false), m->head_bias);
    if (logits_out) *logits_out = logits;
    return tg_cross_entropy(tape, logits, targets, SHIFT_IGNORE);
}

/* Fills a batch of random tokens and their targets (the token `lag` steps back). */
static void shift_batch(tg_rng *rng, const shift_model *m, int64_t B, int64_t L, int32_t *tokens, int32_t *targets)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < L; t++) {
            tokens[b * L + t] = (int32_t)tg_rng_below(rng, m->vocab);
            targets[b * L + t] = t >= m->lag ? tokens[b * L + t - m->lag] : SHIFT_IGNORE;
        }
}

/* Fraction of predicted positions whose arg-max logit is the target. */
static double shift_accuracy(const tg_tensor *logits, const int32_t *targets)
{
    int64_t V = logits->shape[2], rows = tg_numel(logits) / V, right = 0, counted = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (targets[r] == SHIFT_IGNORE) continue;
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (tg_get_flat(logits, r * V + v) > tg_get_flat(logits, r * V + best)) best = v;
        right += best == targets[r];
        counted++;
    }
    return counted ? (double)right / (double)counted : 0.0;
}

#endif
