/* tg_matmul on CUDA (cuBLAS) against the CPU kernel: every transpose combination, batch
 * structure (2-D, batched, a matrix shared by every batch) and operand layout
 * (contiguous, strided, column-major, padded rows), in f32, bf16, f16 and f64, forward
 * and both gradients; large products; an empty inner dimension; reproducible gradients;
 * and the mixed-device error. Skipped without a GPU. */
#include "cuda_util.h"
#include "matmul_cases.h"

#include <stdio.h>

/* ---- the comparison ------------------------------------------------------------------ */

/* op(a)·op(b) on the CPU and on CUDA twins of a and b (same values, same layouts), then
 * backward from one random output gradient on both: the product and both gradients
 * must agree. For bf16 and f16 the CPU reference reads the same rounded values. */
static void compare_case(tg_dtype dtype, const case_shapes *s, bool ta, bool tb, layout la, layout lb,
                         const char *batch)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *a = mm_leaf(tape, dtype, s->ndim_a, s->shape_a, la);
    tg_tensor *b = mm_leaf(tape, dtype, s->ndim_b, s->shape_b, lb);
    tg_tensor *ca = tt_cuda_twin(tape, a, true), *cb = tt_cuda_twin(tape, b, true);
    char what[256], da[64], db[64];
    snprintf(what, sizeof what, "a %s %s%s, b %s %s%s, %s", tg_describe(a, da, sizeof da), layout_names[la],
             ta ? " (T)" : "", tg_describe(b, db, sizeof db), layout_names[lb], tb ? " (T)" : "", batch);
    tg_tensor *y = tg_matmul(tape, a, b, ta, tb), *cy = tg_matmul(tape, ca, cb, ta, tb);
    cr_assert(y, "%s: CPU: %s", what, tg_last_error());
    cr_assert(cy, "%s: CUDA: %s", what, tg_last_error());
    cu_assert_close(tape, what, cy, y);
    tg_tensor *dy = tt_randn(tape, dtype, y->ndim, y->shape);
    cu_backward(tape, y, dy);
    cu_backward(tape, cy, tt_cuda_twin(tape, dy, false));
    char grad_what[300];
    snprintf(grad_what, sizeof grad_what, "%s: da", what);
    cu_assert_close(tape, grad_what, ca->grad, a->grad);
    snprintf(grad_what, sizeof grad_what, "%s: db", what);
    cu_assert_close(tape, grad_what, cb->grad, b->grad);
    tg_tape_free(tape);
}

static const tg_dtype all_dtypes[4] = {TG_F32, TG_BF16, TG_F16, TG_F64};

/* Every dtype and transpose combination for the batch kind; a's layout runs through the
 * given ones, b's is picked at random for each. */
static void compare_kind(batch_kind kind, const layout *a_layouts, int n_a_layouts, int64_t max_size)
{
    for (int d = 0; d < 4; d++)
        for (int t = 0; t < 4; t++)
            for (int l = 0; l < n_a_layouts; l++) {
                bool ta = t & 1, tb = t & 2;
                case_shapes s = mm_random_shapes(kind, ta, tb, 1, max_size);
                compare_case(all_dtypes[d], &s, ta, tb, a_layouts[l], (layout)tt_randint(0, LAYOUT_COUNT - 1),
                             batch_names[kind]);
            }
}

static const layout every_layout[LAYOUT_COUNT] = {LAYOUT_CONTIGUOUS, LAYOUT_STRIDED, LAYOUT_TRANSPOSED, LAYOUT_PADDED};

Test(cuda_matmul, matrices_and_batches_match_cpu)
{
    tt_require_cuda();
    /* Sizes from 1 (size-1 rows and columns, whose strides do not matter) to odd 9. */
    compare_kind(BATCH_NONE, every_layout, LAYOUT_COUNT, 9);
    compare_kind(BATCH_3D, every_layout, LAYOUT_COUNT, 9);
    compare_kind(BATCH_4D, every_layout, LAYOUT_COUNT, 9);
}

Test(cuda_matmul, batch_times_shared_matrix_matches_cpu)
{
    tt_require_cuda();
    /* a (B..., M, K) times a 2-D b, with a laid out so that its batch folds into M: the
     * forward is one (B·M) × K product and b's gradient one product over the folded
     * batch, on cuBLAS alone. b's layout is random. */
    const layout foldable[2] = {LAYOUT_CONTIGUOUS, LAYOUT_PADDED};
    for (int kind = SHARED_B; kind <= SHARED_B_4D; kind++)
        for (int d = 0; d < 4; d++)
            for (int l = 0; l < 2; l++) {
                bool tb = tt_randint(0, 1);
                case_shapes s = mm_random_shapes((batch_kind)kind, false, tb, 1, 9);
                compare_case(all_dtypes[d], &s, false, tb, foldable[l], (layout)tt_randint(0, LAYOUT_COUNT - 1),
                             batch_names[kind]);
            }
}

Test(cuda_matmul, shared_matrix_gradient_summed_over_batch_matches_cpu)
{
    tt_require_cuda();
    /* The shared matrix's gradient when the batch does not fold (shared a, a transposed,
     * a strided or column-major a): per-batch products summed by tg_sum on the GPU, so
     * this also needs tg_sum's CUDA kernel. */
    compare_kind(SHARED_A, every_layout, LAYOUT_COUNT, 9);
    const layout unfoldable[2] = {LAYOUT_STRIDED, LAYOUT_TRANSPOSED};
    compare_kind(SHARED_B, unfoldable, 2, 9);
    for (int d = 0; d < 4; d++) {
        case_shapes s = mm_random_shapes(SHARED_B_4D, true, false, 1, 9);
        compare_case(all_dtypes[d], &s, true, false, LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS, "shared b 4-D");
    }
}

Test(cuda_matmul, large_products_match_cpu)
{
    tt_require_cuda();
    /* Odd sizes, 100k+ outputs and a deep inner dimension, batched and as a linear layer
     * (x (B, T, D) times a shared W (D, N)). */
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    for (int d = 0; d < 2; d++) {
        bool ta = tt_randint(0, 1), tb = tt_randint(0, 1);
        case_shapes s = mm_random_shapes(BATCH_3D, ta, tb, 1, 1);
        int64_t m = tt_randint(230, 260), k = tt_randint(257, 300), n = tt_randint(150, 170), batch = 3;
        s.shape_a[0] = s.shape_b[0] = batch;
        s.shape_a[1] = ta ? k : m, s.shape_a[2] = ta ? m : k;
        s.shape_b[1] = tb ? n : k, s.shape_b[2] = tb ? k : n;
        compare_case(dtypes[d], &s, ta, tb, (layout)tt_randint(0, LAYOUT_COUNT - 1),
                     (layout)tt_randint(0, LAYOUT_COUNT - 1), "large 3-D");
        case_shapes linear = {.ndim_a = 3, .ndim_b = 2, .shape_a = {4, 64, 301}, .shape_b = {301, 403}};
        compare_case(dtypes[d], &linear, false, false, LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS, "linear layer");
    }
}

Test(cuda_matmul, empty_inner_dimension_gives_zeros)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    int64_t m = tt_randint(1, 40), n = tt_randint(1, 40);
    tg_tensor *a = tg_zeros(tape, TG_F32, TG_DEVICE_CUDA, 2, (int64_t[]){m, 0});
    tg_tensor *b = tg_zeros(tape, TG_F32, TG_DEVICE_CUDA, 2, (int64_t[]){0, n});
    cr_assert(a && b, "%s", tg_last_error());
    cu_dirty_device_memory(m * n, TG_F32, 4); /* the result's memory starts as NaNs */
    tg_tensor *y = tg_matmul(tape, a, b, false, false);
    cr_assert(y, "%s", tg_last_error());
    cr_assert(y->ndim == 2 && y->shape[0] == m && y->shape[1] == n);
    tg_tensor *host = cu_host(tape, y);
    for (int64_t i = 0; i < m * n; i++) cr_assert_eq(tg_get_flat(host, i), 0.0, "element %lld", (long long)i);
    /* M = 0 or an empty batch: an empty result, no error. */
    tg_tensor *empty_m = tg_zeros(tape, TG_F32, TG_DEVICE_CUDA, 2, (int64_t[]){0, 3});
    tg_tensor *c = tg_zeros(tape, TG_F32, TG_DEVICE_CUDA, 2, (int64_t[]){3, n});
    tg_tensor *y0 = tg_matmul(tape, empty_m, c, false, false);
    cr_assert(y0 && tg_numel(y0) == 0, "%s", tg_last_error());
    tg_tape_free(tape);
}

Test(cuda_matmul, gradients_are_reproducible)
{
    tt_require_cuda();
    /* The same linear layer twice: both gradients bit for bit the same. */
    tg_tape *tape = tg_tape_create();
    int64_t shape_x[3] = {tt_randint(2, 5), tt_randint(50, 90), tt_randint(60, 130)};
    int64_t shape_w[2] = {shape_x[2], tt_randint(40, 120)};
    tg_tensor *x = tt_leaf(tape, TG_F32, 3, shape_x), *w = tt_leaf(tape, TG_F32, 2, shape_w);
    tg_tensor *dy = tt_randn(tape, TG_F32, 3, (int64_t[]){shape_x[0], shape_x[1], shape_w[1]});
    tg_tensor *cdy = tt_cuda_twin(tape, dy, false), *cx[2], *cw[2];
    for (int run = 0; run < 2; run++) {
        cx[run] = tt_cuda_twin(tape, x, false);
        cw[run] = tt_cuda_twin(tape, w, false);
        cu_backward(tape, tg_matmul(tape, cx[run], cw[run], false, false), cdy);
    }
    cr_assert(cu_bitwise_equal(tape, cx[0]->grad, cx[1]->grad), "dx differs between two runs");
    cr_assert(cu_bitwise_equal(tape, cw[0]->grad, cw[1]->grad), "dw differs between two runs");
    tg_tape_free(tape);
}

Test(cuda_matmul, mixed_devices_fail_cleanly)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    tg_tensor *a = tt_leaf(tape, TG_F32, 2, (int64_t[]){3, 4}), *b = tt_leaf(tape, TG_F32, 2, (int64_t[]){4, 5});
    tg_tensor *ca = tt_cuda_twin(tape, a, false), *cb = tt_cuda_twin(tape, b, false);
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_matmul(tape, a, cb, false, false), "tg_matmul", "different devices", "cpu", "cuda",
                          NULL);
    tt_assert_failed_with(&s, tg_matmul(tape, ca, b, false, false), "tg_matmul", "different devices", NULL);
    for (int64_t i = 0; i < 12; i++) cr_assert_eq(tg_get_flat(a->grad, i), 0.0);
    tg_tensor *host_grad = cu_host(tape, cb->grad);
    for (int64_t i = 0; i < 20; i++) cr_assert_eq(tg_get_flat(host_grad, i), 0.0);
    tg_tape_free(tape);
}
