/* Shape ops on CUDA against the CPU: slice, concat, split, reshape (the copying kind
 * too), permute and transpose, in f32, bf16 and i32, contiguous and strided, with empty
 * pieces and 100k+ elements; values and gradients must be equal (these ops only move
 * elements). Skipped without a usable GPU. */
#include "cuda_util.h"

#include <stdio.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static tg_tensor *random_leaf(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape, bool strided)
{
    return strided ? tt_strided_leaf(tape, dtype, ndim, shape) : tt_leaf(tape, dtype, ndim, shape);
}

/* Backward from the same random dy on both tapes; the caller then compares gradients. */
static void backward_both(tg_tape *cpu, tg_tensor *y, tg_tape *gpu, tg_tensor *yc, const char *what)
{
    tg_tensor *dy = tt_randn(cpu, y->dtype, y->ndim, y->shape);
    cr_assert_eq(tg_backward_with_grad(cpu, y, dy), TG_OK, "%s: %s", what, tg_last_error());
    cr_assert_eq(tg_backward_with_grad(gpu, yc, tt_cuda_twin(gpu, dy, false)), TG_OK, "%s: %s", what, tg_last_error());
}

static const tg_dtype float_dtypes[2] = {TG_F32, TG_BF16};

/* ---- slice ---------------------------------------------------------------------------------- */

Test(cuda_shape, slice_values_and_gradient_match_cpu)
{
    tt_require_cuda();
    for (int round = 0; round < 12; round++) {
        tg_tape *cpu = tg_tape_create(), *gpu = tg_tape_create();
        int64_t shape[3] = {tt_randint(1, 5), tt_randint(1, 6), tt_randint(1, 40)};
        tg_tensor *x = random_leaf(cpu, float_dtypes[round % 2], 3, shape, round % 4 >= 2);
        tg_tensor *xc = tt_cuda_twin(gpu, x, !tg_is_contiguous(x));
        int axis = (int)tt_randint(0, 2);
        int64_t start = tt_randint(-shape[axis], shape[axis]), end = tt_randint(-shape[axis], shape[axis] + 2);
        int64_t step = tt_randint(1, 3);
        tg_tensor *y = tg_slice(cpu, x, axis, start, end, step), *yc = tg_slice(gpu, xc, axis, start, end, step);
        char what[128];
        snprintf(what, sizeof what, "tg_slice axis %d [%lld:%lld:%lld] %s", axis, (long long)start, (long long)end,
                 (long long)step, tg_dtype_name(x->dtype));
        cu_assert_equal(gpu, what, yc, y);
        backward_both(cpu, y, gpu, yc, what);
        cu_assert_equal(gpu, what, xc->grad, x->grad);
        tg_tape_free(gpu);
        tg_tape_free(cpu);
    }
}

/* ---- concat and split ------------------------------------------------------------------------ */

Test(cuda_shape, concat_values_and_gradients_match_cpu)
{
    tt_require_cuda();
    for (int round = 0; round < 10; round++) {
        tg_tape *cpu = tg_tape_create(), *gpu = tg_tape_create();
        int n = (int)tt_randint(1, 4), axis = (int)tt_randint(0, 2);
        int64_t shape[3] = {tt_randint(1, 4), tt_randint(1, 5), tt_randint(1, 33)};
        tg_dtype dtype = float_dtypes[round % 2];
        tg_tensor *xs[4], *xcs[4];
        for (int i = 0; i < n; i++) {
            int64_t piece[3] = {shape[0], shape[1], shape[2]};
            piece[axis] = i == 1 ? 0 : tt_randint(1, 6); /* the second piece, if any, is empty */
            xs[i] = random_leaf(cpu, dtype, 3, piece, i % 2 == 0 && piece[axis] > 0);
            xcs[i] = tt_cuda_twin(gpu, xs[i], !tg_is_contiguous(xs[i]));
        }
        tg_tensor *y = tg_concat(cpu, xs, n, axis), *yc = tg_concat(gpu, xcs, n, axis);
        char what[96];
        snprintf(what, sizeof what, "tg_concat of %d along %d, %s", n, axis, tg_dtype_name(dtype));
        cu_assert_equal(gpu, what, yc, y);
        backward_both(cpu, y, gpu, yc, what);
        for (int i = 0; i < n; i++) cu_assert_equal(gpu, what, xcs[i]->grad, xs[i]->grad);
        tg_tape_free(gpu);
        tg_tape_free(cpu);
    }
}

/* Split into pieces, join them again in reverse order: gradients go back through both. */
Test(cuda_shape, split_then_concat_match_cpu)
{
    tt_require_cuda();
    for (int strided = 0; strided < 2; strided++) {
        tg_tape *cpu = tg_tape_create(), *gpu = tg_tape_create();
        int64_t shape[2] = {tt_randint(1, 6), tt_randint(3, 50)};
        tg_tensor *x = random_leaf(cpu, TG_F32, 2, shape, strided);
        tg_tensor *xc = tt_cuda_twin(gpu, x, strided);
        int64_t sizes[3] = {1, shape[1] - 2, 1};
        tg_tensor *pieces[3], *pieces_c[3];
        cr_assert_eq(tg_split(cpu, x, -1, 3, sizes, pieces), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_split(gpu, xc, -1, 3, sizes, pieces_c), TG_OK, "%s", tg_last_error());
        tg_tensor *reversed[3] = {pieces[2], pieces[1], pieces[0]};
        tg_tensor *reversed_c[3] = {pieces_c[2], pieces_c[1], pieces_c[0]};
        tg_tensor *y = tg_concat(cpu, reversed, 3, 1), *yc = tg_concat(gpu, reversed_c, 3, 1);
        cu_assert_equal(gpu, "split, concat", yc, y);
        backward_both(cpu, y, gpu, yc, "split, concat");
        cu_assert_equal(gpu, "split, concat: dx", xc->grad, x->grad);
        tg_tape_free(gpu);
        tg_tape_free(cpu);
    }
}

/* Split along the channels of a (B, C, L) tensor and concat the pieces in reverse order,
 * with rows of L elements that are whole 16-byte vectors (the row-block copies) or not:
 * forward and gradient equal the CPU's in every dtype. */
Test(cuda_shape, split_and_concat_of_row_blocks_match_cpu)
{
    tt_require_cuda();
    const tg_dtype dtypes[4] = {TG_F32, TG_BF16, TG_F16, TG_F64};
    for (int round = 0; round < 16; round++) {
        tg_tape *cpu = tg_tape_create(), *gpu = tg_tape_create();
        const tg_dtype dtype = dtypes[round % 4];
        const int64_t vector = 16 / (int64_t)tg_dtype_size(dtype); /* elements per 16 bytes */
        const int64_t L = round < 12 ? vector * tt_randint(1, 40) : vector * tt_randint(1, 9) + 1;
        int64_t sizes[3] = {tt_randint(1, 9), tt_randint(0, 9), tt_randint(1, 9)};
        int64_t shape[3] = {tt_randint(1, 5), sizes[0] + sizes[1] + sizes[2], L};
        tg_tensor *x = random_leaf(cpu, dtype, 3, shape, false), *xc = tt_cuda_twin(gpu, x, false);
        tg_tensor *pieces[3], *pieces_c[3];
        cr_assert_eq(tg_split(cpu, x, 1, 3, sizes, pieces), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_split(gpu, xc, 1, 3, sizes, pieces_c), TG_OK, "%s", tg_last_error());
        tg_tensor *reversed[3] = {pieces[2], pieces[1], pieces[0]};
        tg_tensor *reversed_c[3] = {pieces_c[2], pieces_c[1], pieces_c[0]};
        tg_tensor *y = tg_concat(cpu, reversed, 3, 1), *yc = tg_concat(gpu, reversed_c, 3, 1);
        char what[96];
        snprintf(what, sizeof what, "split, concat of (%lld, %lld, %lld) %s", (long long)shape[0], (long long)shape[1],
                 (long long)L, tg_dtype_name(dtype));
        cu_assert_equal(gpu, what, yc, y);
        backward_both(cpu, y, gpu, yc, what);
        cu_assert_equal(gpu, what, xc->grad, x->grad);
        tg_tape_free(gpu);
        tg_tape_free(cpu);
    }
}

Test(cuda_shape, i32_tensors_move_on_the_device)
{
    tt_require_cuda();
    tg_tape *cpu = tg_tape_create(), *gpu = tg_tape_create();
    tg_tensor *a = tt_ids(cpu, 2, (int64_t[]){3, 7}, 1000), *b = tt_ids(cpu, 2, (int64_t[]){2, 7}, 1000);
    tg_tensor *ac = tt_cuda_twin(gpu, a, false), *bc = tt_cuda_twin(gpu, b, false);
    tg_tensor *ab[2] = {a, b}, *abc[2] = {ac, bc};
    cu_assert_equal(gpu, "i32 concat", tg_concat(gpu, abc, 2, 0), tg_concat(cpu, ab, 2, 0));
    tg_tensor *t = tg_transpose(cpu, a, 0, 1), *tc = tg_transpose(gpu, ac, 0, 1);
    cu_assert_equal(gpu, "i32 reshape of a transpose", tg_reshape(gpu, tc, 1, (int64_t[]){-1}),
                    tg_reshape(cpu, t, 1, (int64_t[]){-1}));
    tg_tape_free(gpu);
    tg_tape_free(cpu);
}

/* ---- reshape, permute, transpose ---------------------------------------------------------------- */

Test(cuda_shape, reshape_permute_transpose_match_cpu)
{
    tt_require_cuda();
    for (int round = 0; round < 8; round++) {
        tg_tape *cpu = tg_tape_create(), *gpu = tg_tape_create();
        int64_t shape[3] = {tt_randint(1, 4), tt_randint(1, 5), tt_randint(1, 6)};
        tg_tensor *x = random_leaf(cpu, float_dtypes[round % 2], 3, shape, round % 4 >= 2);
        tg_tensor *xc = tt_cuda_twin(gpu, x, !tg_is_contiguous(x));
        int perm[3] = {2, 0, 1};
        /* permute (a view), then reshape of the non-contiguous result (a copy), then transpose */
        tg_tensor *y = tg_transpose(cpu, tg_reshape(cpu, tg_permute(cpu, x, perm), 2, (int64_t[]){shape[2], -1}), 0, 1);
        tg_tensor *yc =
            tg_transpose(gpu, tg_reshape(gpu, tg_permute(gpu, xc, perm), 2, (int64_t[]){shape[2], -1}), 0, 1);
        cu_assert_equal(gpu, "permute, reshape, transpose", yc, y);
        backward_both(cpu, y, gpu, yc, "permute, reshape, transpose");
        cu_assert_equal(gpu, "permute, reshape, transpose: dx", xc->grad, x->grad);
        tg_tape_free(gpu);
        tg_tape_free(cpu);
    }
}

/* ---- large ------------------------------------------------------------------------------------ */

Test(cuda_shape, large_concat_and_slice)
{
    tt_require_cuda();
    tg_tape *cpu = tg_tape_create(), *gpu = tg_tape_create();
    int64_t rows = tt_randint(300, 400);
    tg_tensor *a = tt_leaf(cpu, TG_F32, 2, (int64_t[]){rows, 331});
    tg_tensor *b = tt_strided_leaf(cpu, TG_F32, 2, (int64_t[]){rows, 97});
    tg_tensor *ac = tt_cuda_twin(gpu, a, false), *bc = tt_cuda_twin(gpu, b, true);
    tg_tensor *ab[2] = {a, b}, *abc[2] = {ac, bc};
    tg_tensor *y = tg_slice(cpu, tg_concat(cpu, ab, 2, 1), 1, 5, -3, 2);
    tg_tensor *yc = tg_slice(gpu, tg_concat(gpu, abc, 2, 1), 1, 5, -3, 2);
    cu_assert_equal(gpu, "large concat, slice", yc, y);
    backward_both(cpu, y, gpu, yc, "large concat, slice");
    cu_assert_equal(gpu, "large: da", ac->grad, a->grad);
    cu_assert_equal(gpu, "large: db", bc->grad, b->grad);
    tg_tape_free(gpu);
    tg_tape_free(cpu);
}

/* ---- errors -------------------------------------------------------------------------------------- */

Test(cuda_shape, cpu_and_cuda_pieces_together_fail_cleanly)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    tg_tensor *a = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3});
    tg_tensor *b = tt_cuda_twin(tape, a, false);
    tg_tensor *ab[2] = {a, b}, *ba[2] = {b, a};
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_concat(tape, ab, 2, 0), "tg_concat", "device", "cpu", "cuda", NULL);
    tt_assert_failed_with(&s, tg_concat(tape, ba, 2, 1), "tg_concat", "device", "cpu", "cuda", NULL);
    for (int64_t i = 0; i < 6; i++) cr_assert_eq(tg_get_flat(a->grad, i), 0.0);
    tg_tape_free(tape);
}
