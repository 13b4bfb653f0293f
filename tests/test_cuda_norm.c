/* tg_rmsnorm on CUDA against the CPU kernel: forward, dx and dweight on random shapes
 * (1-D to 4-D, odd row lengths, strided x, weight and output gradient) in f32, bf16 and
 * f64; one gradient at a time; large rows and many short rows; reproducible weight
 * gradients; zero rows; and the mixed-device error. tg_add_rmsnorm the same way, in the
 * warp and block kernels, with either output's gradient alone; f16 at the warp-per-row
 * kernels' row limit; rows of whole 16-byte groups in f32, bf16 and f16. Skipped without
 * a GPU. */
#include "cuda_util.h"

#include <stdio.h>

static double random_eps(void) { return pow(10.0, -6.0 + 5.0 * tg_rng_uniform(tt_rng())); }

/* rmsnorm(x, w) on the CPU and on CUDA twins (same values and layouts), then backward
 * from one random output gradient (strided when asked): the output and the gradients
 * asked for must agree. */
static void compare_case(tg_dtype dtype, int ndim, const int64_t *shape, bool strided, bool x_grad, bool w_grad)
{
    tg_tape *tape = tg_tape_create();
    int64_t d = shape[ndim - 1];
    tg_tensor *x = cu_input(tape, dtype, ndim, shape, strided, x_grad);
    tg_tensor *w = cu_input(tape, dtype, 1, &d, strided, w_grad);
    tg_tensor *cx = tt_cuda_twin(tape, x, true), *cw = tt_cuda_twin(tape, w, true);
    /* With one element per row dx = r·g·eps/(x² + eps): float math forms it as the
     * difference of two nearly equal terms, g − x·r²·g·x, so its relative error grows like
     * 1e-7·x²/eps, past the f32 (and, for tiny eps, the bf16) tolerance. The CPU computes
     * in double. Such rows get an eps large enough for float to resolve the difference. */
    double eps = d == 1 ? 0.1 + 0.9 * tg_rng_uniform(tt_rng()) : random_eps();
    char what[160], dims[64];
    snprintf(what, sizeof what, "tg_rmsnorm x %s%s eps %g%s%s", tg_describe(x, dims, sizeof dims),
             strided ? " strided" : "", eps, x_grad ? " dx" : "", w_grad ? " dw" : "");
    tg_tensor *y = tg_rmsnorm(tape, x, w, eps), *cy = tg_rmsnorm(tape, cx, cw, eps);
    cu_assert_close(tape, what, cy, y);
    tg_tensor *dy = cu_input(tape, dtype, ndim, shape, tt_randint(0, 1), false);
    cu_backward(tape, y, dy);
    cu_backward(tape, cy, tt_cuda_twin(tape, dy, true));
    char grad_what[200];
    if (x_grad) {
        snprintf(grad_what, sizeof grad_what, "%s: dx", what);
        cu_assert_close(tape, grad_what, cx->grad, x->grad);
    }
    if (w_grad) {
        snprintf(grad_what, sizeof grad_what, "%s: dw", what);
        cu_assert_close(tape, grad_what, cw->grad, w->grad);
    }
    tg_tape_free(tape);
}

static void random_shape(int ndim, int64_t *shape, int64_t max_d)
{
    for (int i = 0; i < ndim; i++) shape[i] = tt_randint(1, 5);
    shape[ndim - 1] = tt_randint(1, max_d);
}

Test(cuda_rmsnorm, random_shapes_match_cpu)
{
    tt_require_cuda();
    const tg_dtype dtypes[3] = {TG_F32, TG_BF16, TG_F64};
    for (int k = 0; k < 3; k++)
        for (int ndim = 1; ndim <= 4; ndim++)
            for (int strided = 0; strided < 2; strided++) {
                int64_t shape[4];
                random_shape(ndim, shape, 70); /* rows shorter and longer than a warp */
                compare_case(dtypes[k], ndim, shape, strided, true, true);
            }
}

Test(cuda_rmsnorm, row_length_one_and_one_gradient_at_a_time)
{
    tt_require_cuda();
    for (int strided = 0; strided < 2; strided++) {
        int64_t shape[2] = {tt_randint(1, 6), 1};
        compare_case(TG_F32, 2, shape, strided, true, true);
        shape[1] = tt_randint(2, 600);
        compare_case(TG_F32, 2, shape, strided, true, false); /* no weight gradient */
        compare_case(TG_F32, 2, shape, strided, false, true); /* no input gradient */
    }
}

Test(cuda_rmsnorm, large_rows_match_cpu)
{
    tt_require_cuda();
    /* Rows longer than a block (4k+), over a thousand of them; and in bf16. */
    int64_t shape[2] = {tt_randint(1000, 1100), tt_randint(4097, 4200)};
    compare_case(TG_F32, 2, shape, false, true, true);
    int64_t bf16_shape[3] = {2, tt_randint(500, 600), tt_randint(500, 700)};
    compare_case(TG_BF16, 3, bf16_shape, tt_randint(0, 1), true, true);
}

Test(cuda_rmsnorm, many_short_rows_match_cpu)
{
    tt_require_cuda();
    /* 100k+ rows: each block of the weight-gradient pass loops over hundreds of them. */
    int64_t shape[2] = {tt_randint(100000, 120000), tt_randint(2, 5)};
    compare_case(TG_F32, 2, shape, false, true, true);
}

Test(cuda_rmsnorm, gradients_are_reproducible)
{
    tt_require_cuda();
    /* Two backward passes over the same data: dx and the reduced dw bit for bit equal. */
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1000, 1500), tt_randint(300, 900)};
    tg_tensor *x = tt_randn(tape, TG_F32, 2, shape), *w = tt_randn(tape, TG_F32, 1, &shape[1]);
    tg_set_requires_grad(x, true);
    tg_set_requires_grad(w, true);
    tg_tensor *cdy = tt_cuda_twin(tape, tt_randn(tape, TG_F32, 2, shape), false), *cx[2], *cw[2];
    for (int run = 0; run < 2; run++) {
        cx[run] = tt_cuda_twin(tape, x, false);
        cw[run] = tt_cuda_twin(tape, w, false);
        cu_backward(tape, tg_rmsnorm(tape, cx[run], cw[run], 1e-5), cdy);
    }
    cr_assert(cu_bitwise_equal(tape, cx[0]->grad, cx[1]->grad), "dx differs between two runs");
    cr_assert(cu_bitwise_equal(tape, cw[0]->grad, cw[1]->grad), "dw differs between two runs");
    tg_tape_free(tape);
}

Test(cuda_rmsnorm, zero_rows_give_zero_weight_gradient)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {0, tt_randint(1, 6)};
    tg_tensor *x = tg_zeros(tape, TG_F32, TG_DEVICE_CUDA, 2, shape);
    tg_tensor *w = tt_cuda_twin(tape, tt_leaf(tape, TG_F32, 1, &shape[1]), false);
    cr_assert(x && tg_set_requires_grad(x, true) == TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_fill(w->grad, 7.0), TG_OK, "%s", tg_last_error());
    tg_tensor *y = tg_rmsnorm(tape, x, w, 1e-5);
    cr_assert(y && tg_numel(y) == 0, "%s", tg_last_error());
    /* The weight gradient's memory starts as NaNs: the kernel must write its zeros. */
    cu_dirty_device_memory(shape[1], TG_F32, 8);
    cu_backward(tape, y, tg_zeros(tape, TG_F32, TG_DEVICE_CUDA, 2, shape));
    tg_tensor *grad = cu_host(tape, w->grad);
    for (int64_t j = 0; j < shape[1]; j++) cr_assert_eq(tg_get_flat(grad, j), 7.0, "dw[%lld]", (long long)j);
    tg_tape_free(tape);
}

Test(cuda_rmsnorm, mixed_devices_fail_cleanly)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3}), *w = tt_leaf(tape, TG_F32, 1, (int64_t[]){3});
    tg_tensor *cx = tt_cuda_twin(tape, x, false), *cw = tt_cuda_twin(tape, w, false);
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, x, cw, 1e-5), "tg_rmsnorm", "different devices", "cpu", "cuda", NULL);
    tt_assert_failed_with(&s, tg_rmsnorm(tape, cx, w, 1e-5), "tg_rmsnorm", "different devices", NULL);
    for (int64_t i = 0; i < 6; i++) cr_assert_eq(tg_get_flat(x->grad, i), 0.0);
    tg_tensor *host_grad = cu_host(tape, cw->grad);
    for (int64_t i = 0; i < 3; i++) cr_assert_eq(tg_get_flat(host_grad, i), 0.0);
    tg_tape_free(tape);
}

/* Σ y·a (when use_y) + Σ h·b (when use_h), with a and b moved to y's device. */
static tg_tensor *outputs_loss(tg_tape *tape, tg_tensor *y, tg_tensor *h, tg_tensor *a, tg_tensor *b, bool use_y,
                               bool use_h)
{
    if (y->device == TG_DEVICE_CUDA) a = tt_cuda_twin(tape, a, true), b = tt_cuda_twin(tape, b, true);
    tg_tensor *from_y = use_y ? tg_sum_all(tape, tg_mul(tape, y, a)) : NULL;
    tg_tensor *from_h = use_h ? tg_sum_all(tape, tg_mul(tape, h, b)) : NULL;
    tg_tensor *loss = from_y && from_h ? tg_add(tape, from_y, from_h) : from_y ? from_y : from_h;
    cr_assert(loss, "%s", tg_last_error());
    return loss;
}

/* tg_add_rmsnorm on the CPU and on CUDA twins: the sum must agree exactly (one rounded
 * addition) and y closely; then the three gradients, from the outputs used (y, h or both). */
static void compare_add_case(tg_dtype dtype, int ndim, const int64_t *shape, bool strided, bool use_y, bool use_h)
{
    tg_tape *tape = tg_tape_create();
    int64_t d = shape[ndim - 1];
    tg_tensor *in[3] = {cu_input(tape, dtype, ndim, shape, strided, true),
                        cu_input(tape, dtype, ndim, shape, false, true), cu_input(tape, dtype, 1, &d, strided, true)};
    tg_tensor *cin[3];
    for (int i = 0; i < 3; i++) cin[i] = tt_cuda_twin(tape, in[i], true);
    char what[160], dims[64];
    snprintf(what, sizeof what, "tg_add_rmsnorm x %s%s%s%s", tg_describe(in[1], dims, sizeof dims),
             strided ? " strided" : "", use_y ? " y" : "", use_h ? " h" : "");
    tg_tensor *h = NULL, *ch = NULL;
    tg_tensor *y = tg_add_rmsnorm(tape, in[0], in[1], in[2], 1e-5, &h);
    tg_tensor *cy = tg_add_rmsnorm(tape, cin[0], cin[1], cin[2], 1e-5, &ch);
    cu_assert_equal(tape, what, ch, h);
    cu_assert_close(tape, what, cy, y);
    tg_tensor *a = tt_randn(tape, dtype, ndim, shape), *b = tt_randn(tape, dtype, ndim, shape);
    cr_assert_eq(tg_backward(tape, outputs_loss(tape, y, h, a, b, use_y, use_h)), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_backward(tape, outputs_loss(tape, cy, ch, a, b, use_y, use_h)), TG_OK, "%s", tg_last_error());
    const char *names[3] = {"dresidual", "dx", "dweight"};
    for (int i = 0; i < 3; i++) {
        char grad_what[200];
        snprintf(grad_what, sizeof grad_what, "%s: %s", what, names[i]);
        if (i < 2 || use_y) cu_assert_close(tape, grad_what, cin[i]->grad, in[i]->grad);
    }
    tg_tape_free(tape);
}

Test(cuda_add_rmsnorm, random_shapes_match_cpu)
{
    tt_require_cuda();
    const tg_dtype dtypes[3] = {TG_F32, TG_BF16, TG_F64};
    for (int k = 0; k < 3; k++)
        for (int ndim = 1; ndim <= 3; ndim++) {
            int64_t shape[3];
            random_shape(ndim, shape, 70);
            compare_add_case(dtypes[k], ndim, shape, ndim == 2, true, true);
        }
}

Test(cuda_add_rmsnorm, long_rows_and_either_output_alone)
{
    tt_require_cuda();
    /* Rows past 512 go to the block kernel; 768 is the 130M model's d_model. */
    int64_t shape[3] = {2, tt_randint(50, 200), 768};
    compare_add_case(TG_F32, 3, shape, false, true, true);
    compare_add_case(TG_BF16, 3, shape, true, true, true);
    shape[2] = tt_randint(513, 2000);
    compare_add_case(TG_F32, 3, shape, true, true, false);
    shape[2] = tt_randint(1, 512);
    compare_add_case(TG_F32, 3, shape, false, false, true);
    compare_add_case(TG_F32, 3, shape, false, true, false);
}

Test(cuda_add_rmsnorm, f16_and_the_fast_kernels_row_limit)
{
    tt_require_cuda();
    /* Contiguous rows of up to 1024 take the warp-per-row kernels, longer ones the block
     * kernels; f16 storage goes the way of bf16. */
    const int64_t lengths[3] = {1023, 1024, 1025};
    for (int i = 0; i < 3; i++) {
        int64_t shape[2] = {tt_randint(3, 40), lengths[i]};
        compare_add_case(TG_F32, 2, shape, false, true, true);
        compare_add_case(TG_F16, 2, shape, false, true, true);
        compare_case(TG_F16, 2, shape, false, true, true);
    }
}

Test(cuda_add_rmsnorm, rows_of_16_byte_groups_match_cpu)
{
    tt_require_cuda();
    /* Row lengths that are whole 16-byte groups (8 values of bf16 or f16, 4 of f32), so the
     * warp-per-row kernels go a vector per access, and two that are not for the 16-bit
     * dtypes (772) or for any (770). */
    const int64_t lengths[8] = {8, 16, 64, 200, 768, 772, 1016, 770};
    const tg_dtype dtypes[3] = {TG_F32, TG_BF16, TG_F16};
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < 3; k++) {
            int64_t shape[3] = {tt_randint(1, 3), tt_randint(1, 40), lengths[i]};
            compare_case(dtypes[k], 3, shape, false, true, true);
            compare_add_case(dtypes[k], 3, shape, false, true, true);
        }
}
