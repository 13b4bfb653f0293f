/* tests/loss_cases.h: the targets the cross-entropy tests (CPU and CUDA) draw. */
#ifndef TAPEGRAD_TESTS_LOSS_CASES_H
#define TAPEGRAD_TESTS_LOSS_CASES_H

#include "test_util.h"

#include "core/internal.h"

#include <string.h>

/* targets for logits of `ndim` dims with `shape`: the leading shape, or (1) for 1-D. */
static inline int lc_targets_shape(int ndim, const int64_t *shape, int64_t *out)
{
    if (ndim == 1) {
        out[0] = 1;
        return 1;
    }
    for (int i = 0; i < ndim - 1; i++) out[i] = shape[i];
    return ndim - 1;
}

/* Random classes in [0, v) as i32, a strided view when asked (first two dims swapped,
 * every other element along the last), with each entry set to ignore_index with
 * probability p_ignore. */
static inline tg_tensor *lc_random_targets(tg_tape *tape, int ndim, const int64_t *shape, int32_t v, bool strided,
                                           int32_t ignore_index, double p_ignore)
{
    tg_tensor *t;
    if (strided) {
        int64_t base_shape[TG_MAX_DIMS], strides[TG_MAX_DIMS];
        memcpy(base_shape, shape, sizeof(int64_t) * (size_t)ndim);
        if (ndim >= 2) base_shape[0] = shape[1], base_shape[1] = shape[0];
        base_shape[ndim - 1] *= 2;
        tg_tensor *base = tt_ids(tape, ndim, base_shape, v);
        memcpy(strides, base->strides, sizeof strides);
        strides[ndim - 1] *= 2;
        if (ndim >= 2) strides[0] = base->strides[1], strides[1] = base->strides[0];
        t = tg_view(tape, base, ndim, shape, strides, 1);
        cr_assert(t);
    } else {
        t = tt_ids(tape, ndim, shape, v);
    }
    for (int64_t i = 0; i < tg_numel(t); i++)
        if (tg_rng_uniform(tt_rng()) < p_ignore) tg_set_flat(t, i, ignore_index);
    return t;
}

#endif
