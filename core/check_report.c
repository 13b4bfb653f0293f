/* core/check_report.c: counting, keeping and describing the comparisons of tg_gradcheck and
 * tg_gradcheck_cuda (core/check_report.h). */
#include "core/check_report.h"
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The multi-index of a flat row-major index into t. */
static void position_of(const tg_tensor *t, int64_t flat, int64_t *position)
{
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t n = t->shape[d] ? t->shape[d] : 1;
        position[d] = flat % n;
        flat /= n;
    }
}

static void note_failure(tg_check_failures *fl, const tg_tensor *x, int64_t index, double value)
{
    fl->failed++;
    if (index < 0) return;
    int64_t position[TG_MAX_DIMS];
    position_of(x, index, position);
    if (fl->failed == 1) {
        memcpy(fl->first, position, sizeof position);
        fl->shared_dims = (1u << x->ndim) - 1;
        fl->low = fl->high = value;
    }
    for (int d = 0; d < x->ndim; d++)
        if (position[d] != fl->first[d]) fl->shared_dims &= ~(1u << d);
    if (index == tg_numel(x) - 1)
        fl->last_failed = true;
    else
        fl->others_failed = true;
    fl->low = fmin(fl->low, value), fl->high = fmax(fl->high, value);
}

void tg_check_compare(tg_check_state *c, const tg_tensor *x, int which, int64_t index, int direction, double value,
                      double got, double want)
{
    tg_gradcheck_result *result = c->result;
    double ratio = fabs(got - want) / (c->atol + c->rtol * fabs(want));
    if (isnan(ratio)) ratio = INFINITY;
    result->n_checked++;
    c->per_tensor[which].checked++;
    c->per_tensor[which].directions = index < 0;
    if (ratio > 1.0) {
        result->n_failed++;
        note_failure(&c->per_tensor[which], x, index, value);
    }
    if (result->worst_input >= 0 && ratio <= result->worst_ratio) return;
    result->worst_input = which;
    result->worst_index = index;
    result->worst_direction = direction;
    result->worst_input_value = index >= 0 ? value : NAN;
    memset(result->worst_position, 0, sizeof result->worst_position);
    if (index >= 0) position_of(x, index, result->worst_position);
    result->analytic = got;
    result->numeric = want;
    result->worst_ratio = ratio;
}

/* "inputs[2]", or "output" for the function's output. */
static void name_of(int which, const tg_check_words *words, char *out, size_t size)
{
    if (which == words->output)
        snprintf(out, size, "output");
    else
        snprintf(out, size, "inputs[%d]", which);
}

/* One tensor's failures in words, e.g. "inputs[0]: 3 of 12 elements, all with index 2 along
 * dimension 0, at input values from -0.9 to -0.1". */
static void describe_failures(const tg_check_failures *fl, const tg_tensor *x, const char *name, bool output, char *out,
                              size_t size)
{
    int used = snprintf(out, size, "%s: %lld of %lld %s", name, (long long)fl->failed, (long long)fl->checked,
                        fl->directions ? "random directions" : "elements");
    if (fl->directions || used < 0 || (size_t)used >= size) return;
    if (fl->failed == fl->checked) {
        snprintf(out + used, size - (size_t)used, " (every one)");
        return;
    }
    if (fl->last_failed && !fl->others_failed) {
        snprintf(out + used, size - (size_t)used, " (only the last one)");
        return;
    }
    for (int d = 0; d < x->ndim && fl->failed > 1; d++)
        if (fl->shared_dims >> d & 1) {
            used += snprintf(out + used, size - (size_t)used, ", all with index %lld along dimension %d",
                             (long long)fl->first[d], d);
            if ((size_t)used >= size) return;
        }
    const char *values = output ? "values" : "input values";
    if (fl->low >= 0 || fl->high <= 0)
        snprintf(out + used, size - (size_t)used, ", all at %s %s (%.3g to %.3g)",
                 fl->high <= 0 ? "negative" : "positive", values, fl->low, fl->high);
    else
        snprintf(out + used, size - (size_t)used, ", at %s from %.3g to %.3g", values, fl->low, fl->high);
}

void tg_check_summarise(tg_gradcheck_result *result, const tg_check_failures *per_tensor,
                        const tg_tensor *const *tensors, int n, const tg_check_words *words)
{
    result->passed = result->n_checked > 0 && result->n_failed == 0;
    size_t used = 0;
    for (int i = 0; i < n && used + 1 < sizeof result->pattern; i++) {
        if (!per_tensor[i].failed) continue;
        char name[32];
        name_of(i, words, name, sizeof name);
        if (used) used += (size_t)snprintf(result->pattern + used, sizeof result->pattern - used, "; ");
        if (used + 1 < sizeof result->pattern)
            describe_failures(&per_tensor[i], tensors[i], name, i == words->output, result->pattern + used,
                              sizeof result->pattern - used);
        used = strlen(result->pattern);
    }
    char where[160], name[32];
    const tg_tensor *x = result->worst_input >= 0 ? tensors[result->worst_input] : NULL;
    name_of(result->worst_input, words, name, sizeof name);
    if (result->worst_index >= 0 && x) {
        char position[96];
        tg_shape_str(x->ndim, result->worst_position, position, sizeof position);
        snprintf(where, sizeof where, "%s%s = %.6g", name, position, result->worst_input_value);
    } else {
        snprintf(where, sizeof where, "%s random direction %d", name, result->worst_direction);
    }
    snprintf(result->message, sizeof result->message,
             "%s %s: %lld of %lld comparisons over the tolerance%s%s; worst at %s: %s %.10g, %s %.10g (ratio %.3g)",
             words->title, result->passed ? "passed" : "FAILED", (long long)result->n_failed,
             (long long)result->n_checked, result->n_failed ? ": " : "", result->pattern, where, words->got,
             result->analytic, words->want, result->numeric, result->worst_ratio);
}
