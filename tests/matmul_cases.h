/* tests/matmul_cases.h: the operand layouts and batch structures the matmul tests (CPU and
 * CUDA) draw their cases from. */
#ifndef TAPEGRAD_TESTS_MATMUL_CASES_H
#define TAPEGRAD_TESTS_MATMUL_CASES_H

#include "test_util.h"

#include "core/internal.h"

#include <string.h>

typedef enum {
    LAYOUT_CONTIGUOUS,
    LAYOUT_STRIDED,    /* tt_strided_leaf: no unit stride in the matrix, batch axes mixed in */
    LAYOUT_TRANSPOSED, /* stored with the last two axes swapped (column-major matrices) */
    LAYOUT_PADDED,     /* rows further apart than their length, and a start offset */
    LAYOUT_COUNT
} layout;

static const char *const layout_names[LAYOUT_COUNT] = {"contiguous", "strided", "transposed", "padded"};

/* A random leaf (requiring a gradient) of the given shape, laid out as asked. */
static inline tg_tensor *mm_leaf(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape, layout lay)
{
    if (lay == LAYOUT_CONTIGUOUS) return tt_leaf(tape, dtype, ndim, shape);
    if (lay == LAYOUT_STRIDED) return tt_strided_leaf(tape, dtype, ndim, shape);
    int64_t base_shape[TG_MAX_DIMS], strides[TG_MAX_DIMS], offset = 0;
    memcpy(base_shape, shape, sizeof(int64_t) * (size_t)ndim);
    if (lay == LAYOUT_TRANSPOSED) {
        base_shape[ndim - 2] = shape[ndim - 1];
        base_shape[ndim - 1] = shape[ndim - 2];
    } else {
        offset = tt_randint(1, 3);
        base_shape[ndim - 1] += offset;
    }
    tg_tensor *base = tt_randn(tape, dtype, ndim, base_shape);
    memcpy(strides, base->strides, sizeof strides);
    if (lay == LAYOUT_TRANSPOSED) {
        strides[ndim - 2] = base->strides[ndim - 1];
        strides[ndim - 1] = base->strides[ndim - 2];
    }
    tg_tensor *view = tg_view(tape, base, ndim, shape, strides, offset);
    cr_assert(view);
    cr_assert_eq(tg_set_requires_grad(view, true), TG_OK, "%s", tg_last_error());
    return view;
}

/* How the batch axes of a and b relate. */
typedef enum {
    BATCH_NONE,  /* both 2-D */
    BATCH_3D,    /* (B, ., .) both */
    BATCH_4D,    /* (B1, B2, ., .) both */
    SHARED_B,    /* a (B, ., .), b 2-D */
    SHARED_B_4D, /* a (B1, B2, ., .), b 2-D */
    SHARED_A,    /* a 2-D, b (B, ., .) */
    BATCH_KIND_COUNT
} batch_kind;

static const char *const batch_names[BATCH_KIND_COUNT] = {"2-D", "3-D", "4-D", "shared b", "shared b 4-D", "shared a"};

typedef struct {
    int ndim_a, ndim_b;
    int64_t shape_a[TG_MAX_DIMS], shape_b[TG_MAX_DIMS];
} case_shapes;

/* Random shapes: op(a) (..., M, K), op(b) (..., K, N), sizes from min_size to max_size. */
static inline case_shapes mm_random_shapes(batch_kind kind, bool ta, bool tb, int64_t min_size, int64_t max_size)
{
    case_shapes s;
    int64_t batch[2] = {tt_randint(1, 3), tt_randint(1, 3)};
    int n_batch = kind == BATCH_NONE ? 0 : kind == BATCH_4D || kind == SHARED_B_4D ? 2 : 1;
    bool a_batched = kind != SHARED_A && kind != BATCH_NONE,
         b_batched = kind != SHARED_B && kind != SHARED_B_4D && kind != BATCH_NONE;
    int64_t m = tt_randint(min_size, max_size), k = tt_randint(min_size, max_size), n = tt_randint(min_size, max_size);
    s.ndim_a = 2 + (a_batched ? n_batch : 0);
    s.ndim_b = 2 + (b_batched ? n_batch : 0);
    memcpy(s.shape_a, batch, sizeof batch);
    memcpy(s.shape_b, batch, sizeof batch);
    s.shape_a[s.ndim_a - 2] = ta ? k : m;
    s.shape_a[s.ndim_a - 1] = ta ? m : k;
    s.shape_b[s.ndim_b - 2] = tb ? n : k;
    s.shape_b[s.ndim_b - 1] = tb ? k : n;
    return s;
}

#endif
