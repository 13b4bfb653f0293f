/* tg_gradcheck_cuda: an op's CUDA kernels against its CPU ones. It passes ops whose kernels
 * agree (outputs and every input gradient compared, for outputs of any shape), catches a
 * difference in the output or only in a gradient and says where, and without a GPU it says
 * so. The CUDA cases are skipped without a GPU. */
#include "cuda_util.h"

#include <math.h>
#include <string.h>

/* The Mamba block's pieces in a row: RMSNorm, a projection, causal conv1d with SiLU, softmax
 * over channels: (B, C, L) in, the same shape out. */
static tg_tensor *block(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n, (void)user;
    tg_tensor *x = in[0], *norm_weight = in[1], *proj = in[2], *conv_weight = in[3];
    tg_tensor *h = tg_rmsnorm(tape, x, norm_weight, 1e-5); /* over L */
    tg_tensor *p = tg_matmul(tape, proj, h, false, false); /* (C, C)·(B, C, L) */
    tg_causal_conv1d_options conv = {NULL, NULL, TG_ACT_SILU, NULL};
    tg_tensor *u = tg_causal_conv1d(tape, p, conv_weight, &conv);
    return tg_softmax(tape, u);
}

static void make_block_inputs(tg_tape *tape, tg_tensor **in)
{
    const int64_t B = tt_randint(1, 3), C = tt_randint(2, 9), L = tt_randint(1, 70), K = tt_randint(1, 5);
    in[0] = tt_leaf(tape, TG_F32, 3, (int64_t[]){B, C, L});
    in[1] = tt_leaf(tape, TG_F32, 1, (int64_t[]){L});
    in[2] = tt_leaf(tape, TG_F32, 2, (int64_t[]){C, C});
    in[3] = tt_leaf(tape, TG_F32, 2, (int64_t[]){C, K});
}

Test(cuda_gradcheck, passes_kernels_that_agree)
{
    tt_require_cuda();
    for (int round = 0; round < 4; round++) {
        tg_tape *tape = tg_tape_create();
        tg_tensor *in[4];
        make_block_inputs(tape, in);
        tg_gradcheck_options options = tg_gradcheck_defaults();
        options.atol = 1e-5;
        tg_gradcheck_result result;
        cr_assert_eq(tg_gradcheck_cuda(block, in, 4, NULL, &options, &result), TG_OK, "%s", tg_last_error());
        cr_assert(result.passed, "%s", result.message);
        int64_t compared = tg_numel(in[0]); /* the output has x's shape */
        for (int i = 0; i < 4; i++) compared += tg_numel(in[i]);
        cr_assert_eq(result.n_checked, compared);
        tg_tape_free(tape);
    }
}

/* x² everywhere, with a planted CUDA-only bug: `which` 0 adds 1 to the output's last element
 * (the gradients stay right), 1 computes x·c with c a constant copy of x (the output stays
 * right, the gradient is half). */
static tg_tensor *square_with_a_cuda_bug(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    const int which = *(const int *)user;
    tg_tensor *x = in[0];
    if (x->device != TG_DEVICE_CUDA) return tg_mul(tape, x, x);
    if (which == 1) {
        tg_tensor *c = tg_empty_like(tape, x);
        return c && tg_copy(c, x) == TG_OK ? tg_mul(tape, x, c) : NULL;
    }
    tg_tensor *bump = tg_zeros_like(tape, x);
    tg_set_flat(bump, tg_numel(x) - 1, 1.0); /* a CUDA tensor: through the element setter */
    return tg_add(tape, tg_mul(tape, x, x), bump);
}

Test(cuda_gradcheck, finds_a_wrong_output_element_and_a_wrong_gradient)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    const int64_t rows = tt_randint(2, 6), cols = tt_randint(2, 6);
    tg_tensor *x = tt_leaf(tape, TG_F32, 2, (int64_t[]){rows, cols});
    for (int64_t i = 0; i < rows * cols; i++) /* away from 0, so that half the gradient shows */
        tg_set_flat(x, i, copysign(0.5 + fabs(tg_get_flat(x, i)), tg_get_flat(x, i)));
    tg_gradcheck_result result;

    int which = 0;
    cr_assert_eq(tg_gradcheck_cuda(square_with_a_cuda_bug, &x, 1, &which, NULL, &result), TG_OK, "%s", tg_last_error());
    cr_assert_not(result.passed);
    cr_assert_eq(result.n_failed, 1, "%s", result.message);
    cr_assert_eq(result.worst_input, 1, "the output is reported as inputs[n_inputs]: %s", result.message);
    cr_assert_eq(result.worst_position[0], rows - 1);
    cr_assert_eq(result.worst_position[1], cols - 1);
    cr_assert(fabs(result.analytic - result.numeric - 1.0) < 1e-5, "%s", result.message);
    cr_assert(strstr(result.message, "output: 1 of") && strstr(result.message, "only the last one"), "%s",
              result.message);

    which = 1;
    cr_assert_eq(tg_gradcheck_cuda(square_with_a_cuda_bug, &x, 1, &which, NULL, &result), TG_OK, "%s", tg_last_error());
    cr_assert_not(result.passed);
    cr_assert_eq(result.n_failed, rows * cols, "%s", result.message);
    cr_assert_eq(result.worst_input, 0, "%s", result.message);
    cr_assert(strstr(result.message, "inputs[0]") && strstr(result.message, "every one"), "%s", result.message);
    tg_tape_free(tape);
}
