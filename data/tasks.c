/* data/tasks.c: the synthetic tasks of the Mamba paper, Selective Copying and Induction
 * Heads (token layouts in include/tapegrad/data.h and docs/data.md).
 *
 * Every argument is checked before the first draw, so a failed call leaves the rng and
 * the buffers as they were. Rows are generated one after another from the one rng, so a
 * batch of 2B rows holds the same rows as two batches of B drawn in turn. */
#include "core/internal.h"
#include "tapegrad/data.h"
#include "tapegrad/rng.h"

#include <limits.h>

/* ---- shared checks -------------------------------------------------------------------- */

static tg_status check_buffers(const char *fn, const void *config, const tg_rng *rng, int64_t batch, int64_t seq_len,
                               const int32_t *inputs, const int32_t *targets)
{
    int64_t total;
    if (!config) return tg_set_error(TG_ERR_INVALID, "%s: config is NULL", fn);
    if (!rng) return tg_set_error(TG_ERR_INVALID, "%s: rng is NULL", fn);
    if (!inputs || !targets) return tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", fn, inputs ? "targets" : "inputs");
    if (batch < 1) return tg_set_error(TG_ERR_INVALID, "%s: batch is %lld; it must be ≥ 1", fn, (long long)batch);
    if (seq_len < 1) return tg_set_error(TG_ERR_INVALID, "%s: seq_len is %lld; it must be ≥ 1", fn, (long long)seq_len);
    if (tg_mul_overflows(batch, seq_len, &total))
        return tg_set_error(TG_ERR_OVERFLOW, "%s: batch %lld × seq_len %lld overflows", fn, (long long)batch,
                            (long long)seq_len);
    return TG_OK;
}

/* vocab must be at least min_vocab, and every id must fit an int32. */
static tg_status check_vocab(const char *fn, int64_t vocab, int64_t min_vocab, const char *why)
{
    if (vocab < min_vocab)
        return tg_set_error(TG_ERR_INVALID, "%s: vocab %lld is too small: %s (vocab ≥ %lld)", fn, (long long)vocab, why,
                            (long long)min_vocab);
    if (vocab > INT32_MAX)
        return tg_set_error(TG_ERR_INVALID, "%s: vocab %lld does not fit int32 ids", fn, (long long)vocab);
    return TG_OK;
}

/* inputs and targets must be contiguous (batch, seq_len) i32 CPU tensors of one shape. */
static tg_status check_tensors(const char *fn, const tg_tensor *inputs, const tg_tensor *targets)
{
    if (!tg_check_tensor(fn, "inputs", inputs) || !tg_check_tensor(fn, "targets", targets)) return tg_last_status();
    const char *const names[] = {"inputs", "targets"};
    const tg_tensor *const tensors[] = {inputs, targets};
    for (int i = 0; i < 2; i++) {
        const tg_tensor *t = tensors[i];
        if (t->dtype != TG_I32 || t->device != TG_DEVICE_CPU || t->ndim != 2 || !tg_is_contiguous(t))
            return tg_error_tensors(TG_ERR_INVALID, 2, names, tensors,
                                    "%s: %s must be a contiguous (batch, seq_len) i32 cpu tensor", fn, names[i]);
    }
    if (!tg_same_shape(inputs, targets))
        return tg_error_tensors(TG_ERR_INVALID, 2, names, tensors, "%s: inputs and targets differ in shape", fn);
    return TG_OK;
}

/* ---- Selective Copying -------------------------------------------------------------------- */

static tg_status check_selective_copy(const char *fn, const tg_selective_copy_config *c, int64_t seq_len)
{
    tg_status status = check_vocab(fn, c->vocab, 3, "it needs noise, a marker and at least one data token");
    if (status != TG_OK) return status;
    if (c->n_copy < 1)
        return tg_set_error(TG_ERR_INVALID, "%s: n_copy is %lld; it must be ≥ 1", fn, (long long)c->n_copy);
    if (seq_len / 2 < c->n_copy)
        return tg_set_error(TG_ERR_INVALID,
                            "%s: seq_len %lld is shorter than 2 · n_copy = %lld (n_copy data tokens, then "
                            "n_copy markers)",
                            fn, (long long)seq_len, 2 * (long long)c->n_copy);
    return TG_OK;
}

/* One row. The data slots are chosen by selection sampling: slot j of the S = L − M
 * candidates is taken with probability (still needed)/(slots left), which picks every
 * M-subset with equal probability and visits the slots in order, so the data tokens come
 * out already sorted by position. */
static void selective_copy_row(const tg_selective_copy_config *c, tg_rng *rng, int64_t seq_len, int32_t *in,
                               int32_t *tgt)
{
    const int64_t m = c->n_copy, slots = seq_len - m;
    const int32_t marker = (int32_t)(c->vocab - 1);
    int64_t placed = 0;
    for (int64_t j = 0; j < slots; j++) {
        tgt[j] = TG_IGNORE_INDEX;
        if (tg_rng_below(rng, slots - j) < m - placed) {
            int32_t token = (int32_t)(1 + tg_rng_below(rng, c->vocab - 2));
            in[j] = token;
            tgt[slots + placed] = token; /* the placed-th marker asks for it */
            placed++;
        } else {
            in[j] = 0;
        }
    }
    for (int64_t i = 0; i < m; i++) in[slots + i] = marker;
}

static tg_status selective_copy(const char *fn, const tg_selective_copy_config *config, tg_rng *rng, int64_t batch,
                                int64_t seq_len, int32_t *inputs, int32_t *targets)
{
    tg_status status = check_buffers(fn, config, rng, batch, seq_len, inputs, targets);
    if (status == TG_OK) status = check_selective_copy(fn, config, seq_len);
    if (status != TG_OK) return status;
    for (int64_t b = 0; b < batch; b++)
        selective_copy_row(config, rng, seq_len, inputs + b * seq_len, targets + b * seq_len);
    return TG_OK;
}

tg_status tg_task_selective_copy_batch(const tg_selective_copy_config *config, tg_rng *rng, int64_t batch,
                                       int64_t seq_len, int32_t *inputs, int32_t *targets)
{
    return selective_copy("tg_task_selective_copy_batch", config, rng, batch, seq_len, inputs, targets);
}

tg_status tg_task_selective_copy_fill(const tg_selective_copy_config *config, tg_rng *rng, tg_tensor *inputs,
                                      tg_tensor *targets)
{
    static const char *const fn = "tg_task_selective_copy_fill";
    tg_status status = check_tensors(fn, inputs, targets);
    if (status != TG_OK) return status;
    return selective_copy(fn, config, rng, inputs->shape[0], inputs->shape[1], tg_data(inputs), tg_data(targets));
}

/* ---- Induction Heads ------------------------------------------------------------------------ */

static tg_status check_induction(const char *fn, const tg_induction_config *c, int64_t seq_len)
{
    tg_status status = check_vocab(fn, c->vocab, 3, "it needs a trigger, a reserved id and an ordinary token");
    if (status != TG_OK) return status;
    if (seq_len < 3)
        return tg_set_error(TG_ERR_INVALID,
                            "%s: seq_len %lld is too short: a row needs the trigger, the token after it and "
                            "the final trigger (seq_len ≥ 3)",
                            fn, (long long)seq_len);
    return TG_OK;
}

static void induction_row(const tg_induction_config *c, tg_rng *rng, int64_t seq_len, int32_t *in, int32_t *tgt)
{
    const int32_t trigger = (int32_t)(c->vocab - 1);
    const int64_t ordinary = c->vocab - 2;
    for (int64_t t = 0; t < seq_len - 1; t++) in[t] = (int32_t)tg_rng_below(rng, ordinary);
    int64_t p = tg_rng_below(rng, seq_len - 2); /* p + 1 ≤ seq_len − 2: the answer precedes the last trigger */
    in[p] = trigger;
    in[seq_len - 1] = trigger;
    for (int64_t t = 0; t < seq_len - 1; t++) tgt[t] = c->score_all_positions ? in[t + 1] : TG_IGNORE_INDEX;
    tgt[seq_len - 1] = in[p + 1];
}

static tg_status induction(const char *fn, const tg_induction_config *config, tg_rng *rng, int64_t batch,
                           int64_t seq_len, int32_t *inputs, int32_t *targets)
{
    tg_status status = check_buffers(fn, config, rng, batch, seq_len, inputs, targets);
    if (status == TG_OK) status = check_induction(fn, config, seq_len);
    if (status != TG_OK) return status;
    for (int64_t b = 0; b < batch; b++)
        induction_row(config, rng, seq_len, inputs + b * seq_len, targets + b * seq_len);
    return TG_OK;
}

tg_status tg_task_induction_batch(const tg_induction_config *config, tg_rng *rng, int64_t batch, int64_t seq_len,
                                  int32_t *inputs, int32_t *targets)
{
    return induction("tg_task_induction_batch", config, rng, batch, seq_len, inputs, targets);
}

tg_status tg_task_induction_fill(const tg_induction_config *config, tg_rng *rng, tg_tensor *inputs, tg_tensor *targets)
{
    static const char *const fn = "tg_task_induction_fill";
    tg_status status = check_tensors(fn, inputs, targets);
    if (status != TG_OK) return status;
    return induction(fn, config, rng, inputs->shape[0], inputs->shape[1], tg_data(inputs), tg_data(targets));
}
