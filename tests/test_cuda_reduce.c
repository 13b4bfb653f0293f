/* Reductions on CUDA against the CPU kernels: tg_sum and tg_mean over every axis (keepdim
 * or not, contiguous or strided), tg_sum_all and tg_mean_all, in f32, bf16 and f64 (and f16
 * for column sums), on shapes that take each way the kernels split the work (a warp, a thread
 * or a thread per group of columns per sum, one pass or chunked partial sums), empty sizes,
 * and bitwise-equal repeated runs. Skipped without a usable GPU. */
#include "cuda_util.h"

#include <stdio.h>
#include <string.h>

typedef tg_tensor *(*axis_op_fn)(tg_tape *, tg_tensor *, int, bool);
typedef tg_tensor *(*all_op_fn)(tg_tape *, tg_tensor *);

static const struct {
    const char *name;
    axis_op_fn fn;
} axis_ops[] = {{"tg_sum", tg_sum}, {"tg_mean", tg_mean}};

static const struct {
    const char *name;
    all_op_fn fn;
} all_ops[] = {{"tg_sum_all", tg_sum_all}, {"tg_mean_all", tg_mean_all}};

/* ---- helpers ------------------------------------------------------------------------------ */

static double tolerance_of(tg_dtype dtype) { return dtype == TG_F64 ? 1e-12 : dtype == TG_F32 ? 1e-5 : 1e-2; }

/* The reduction `op` (axis_ops[k] over axis, or all_ops[k] when axis is TG_MAX_DIMS) of
 * the CPU leaf x on both devices, then backward from one random dy: compares the result
 * and x's gradient. */
#define ALL TG_MAX_DIMS
static void check_reduce(size_t k, tg_tensor *x, int axis, bool keepdim, const char *what)
{
    tg_tape *cpu = x->tape, *gpu = tg_tape_create();
    tg_tensor *xc = tt_cuda_twin(gpu, x, !tg_is_contiguous(x));
    tg_tensor *y = axis == ALL ? all_ops[k].fn(cpu, x) : axis_ops[k].fn(cpu, x, axis, keepdim);
    tg_tensor *yc = axis == ALL ? all_ops[k].fn(gpu, xc) : axis_ops[k].fn(gpu, xc, axis, keepdim);
    cr_assert(y && yc, "%s: %s", what, tg_last_error());
    cu_assert_within(gpu, what, yc, y, tolerance_of(x->dtype));
    tg_tensor *dy = tt_randn(cpu, x->dtype, y->ndim, y->shape);
    cr_assert_eq(tg_backward_with_grad(cpu, y, dy), TG_OK, "%s: %s", what, tg_last_error());
    cr_assert_eq(tg_backward_with_grad(gpu, yc, tt_cuda_twin(gpu, dy, false)), TG_OK, "%s: %s", what, tg_last_error());
    char grad_what[160];
    snprintf(grad_what, sizeof grad_what, "%s: dx", what);
    cu_assert_within(gpu, grad_what, xc->grad, x->grad, tolerance_of(x->dtype));
    tg_tape_free(gpu);
}

static tg_tensor *random_leaf(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape, bool strided)
{
    return strided ? tt_strided_leaf(tape, dtype, ndim, shape) : tt_leaf(tape, dtype, ndim, shape);
}

/* ---- small random shapes ---------------------------------------------------------------------- */

Test(cuda_reduce, every_axis_keepdim_and_layout_match_cpu)
{
    tt_require_cuda();
    const tg_dtype dtypes[3] = {TG_F32, TG_BF16, TG_F64};
    for (int d = 0; d < 3; d++)
        for (int ndim = 1; ndim <= 4; ndim++)
            for (int strided = 0; strided < 2; strided++) {
                tg_tape *cpu = tg_tape_create();
                int64_t shape[4];
                for (int i = 0; i < ndim; i++) shape[i] = tt_randint(1, i == ndim - 1 ? 70 : 6);
                tg_tensor *x = random_leaf(cpu, dtypes[d], ndim, shape, strided);
                for (int axis = -ndim; axis < ndim; axis++) /* negative axes too */
                    for (int keepdim = 0; keepdim < 2; keepdim++) {
                        size_t k = (size_t)tt_randint(0, 1);
                        char what[128];
                        snprintf(what, sizeof what, "%s %s ndim %d axis %d%s%s", axis_ops[k].name,
                                 tg_dtype_name(dtypes[d]), ndim, axis, keepdim ? " keepdim" : "",
                                 strided ? " strided" : "");
                        check_reduce(k, x, axis, keepdim, what);
                        cr_assert_eq(tg_zero_grad(x), TG_OK);
                    }
                tg_tape_free(cpu);
            }
}

Test(cuda_reduce, all_elements_match_cpu)
{
    tt_require_cuda();
    /* around a warp and the chunk lengths, 100k+, and one needing many chunks */
    const int64_t sizes[] = {1, 31, 32, 33, 1023, 1025, 100003, 3000017};
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int d = 0; d < 2; d++)
            for (int strided = 0; strided < 2; strided++) {
                tg_tape *cpu = tg_tape_create();
                int64_t shape[2] = {sizes[s] > 1000 ? 7 : 1, sizes[s] > 1000 ? sizes[s] / 7 : sizes[s]};
                tg_tensor *x = random_leaf(cpu, dtypes[d], 2, shape, strided);
                size_t k = s % 2;
                char what[128];
                snprintf(what, sizeof what, "%s of %lld %s%s", all_ops[k].name, (long long)tg_numel(x),
                         tg_dtype_name(dtypes[d]), strided ? " strided" : "");
                check_reduce(k, x, ALL, false, what);
                tg_tape_free(cpu);
            }
}

/* ---- large shapes: each way of splitting the work ---------------------------------------------- */

Test(cuda_reduce, large_shapes_take_every_path)
{
    tt_require_cuda();
    const struct {
        int64_t rows, cols;
        int axis;
        const char *path;
    } cases[] = {
        {9001, 40, 1, "a warp per row, one pass"},
        {3, 200001, 1, "a warp per chunk of a long row"},
        {40, 300007, 0, "a thread per column, one pass"},
        {200001, 3, 0, "a thread per chunk of a long column"},
        {2048, 1031, 0, "chunked columns"},
        {1031, 2048, 1, "rows"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int strided = 0; strided < 2; strided++) {
            tg_tape *cpu = tg_tape_create();
            int64_t shape[2] = {cases[c].rows, cases[c].cols};
            tg_tensor *x = random_leaf(cpu, TG_F32, 2, shape, strided);
            char what[128];
            snprintf(what, sizeof what, "tg_sum %lldx%lld axis %d (%s)%s", (long long)shape[0], (long long)shape[1],
                     cases[c].axis, cases[c].path, strided ? " strided" : "");
            check_reduce(0, x, cases[c].axis, c % 2 == 1, what);
            tg_tape_free(cpu);
        }
}

Test(cuda_reduce, middle_axis_of_a_3d_tensor)
{
    tt_require_cuda();
    tg_tape *cpu = tg_tape_create();
    int64_t shape[3] = {tt_randint(2, 6), tt_randint(100, 3000), tt_randint(30, 70)};
    for (int strided = 0; strided < 2; strided++) {
        tg_tensor *x = random_leaf(cpu, TG_F32, 3, shape, strided);
        check_reduce(1, x, 1, strided, strided ? "tg_mean middle axis strided" : "tg_mean middle axis");
    }
    tg_tape_free(cpu);
}

/* A CUDA view of x's values with rows row_stride elements apart, starting `offset` elements
 * into a fresh buffer. */
static tg_tensor *padded_twin(tg_tape *gpu, tg_tensor *x, int64_t row_stride, int64_t offset)
{
    int64_t span = offset + x->shape[0] * row_stride;
    tg_tensor *buffer = tg_zeros(gpu, x->dtype, TG_DEVICE_CUDA, 1, &span);
    cr_assert(buffer, "%s", tg_last_error());
    tg_tensor *twin = tg_view(gpu, buffer, 2, x->shape, (int64_t[]){row_stride, 1}, offset);
    cr_assert(twin && tg_copy(twin, x) == TG_OK, "%s", tg_last_error());
    return twin;
}

/* Sums down the columns take a group of adjacent columns per thread when every row starts on
 * a 16-byte boundary (the batch sums of weight gradients): with rows whose length is no
 * multiple of a group (a short last group), and with more rows than one pass takes (chunks),
 * they agree with the CPU and give the same bits as the same values one element off that
 * boundary, which take a thread per column and add in the same order. */
Test(cuda_reduce, column_groups_match_cpu_and_the_thread_per_column_bits)
{
    tt_require_cuda();
    const tg_dtype dtypes[4] = {TG_F32, TG_BF16, TG_F16, TG_F64};
    for (int d = 0; d < 4; d++)
        for (int c = 0; c < 3; c++) {
            tg_tape *cpu = tg_tape_create(), *gpu = tg_tape_create();
            int64_t rows = c == 2 ? tt_randint(600, 900) : tt_randint(2, 40);
            int64_t cols = c == 0 ? 8 * tt_randint(1, 300) : tt_randint(1, 2000);
            int64_t row_stride = 8 * ((cols + 7) / 8 + tt_randint(0, 2)); /* 16-byte rows for every dtype */
            tg_tensor *x = tt_leaf(cpu, dtypes[d], 2, (int64_t[]){rows, cols});
            tg_tensor *on_boundary = padded_twin(gpu, x, row_stride, 0), *off = padded_twin(gpu, x, row_stride, 1);
            tg_tensor *y = tg_sum(cpu, x, 0, false), *y_groups = tg_sum(gpu, on_boundary, 0, false);
            tg_tensor *y_threads = tg_sum(gpu, off, 0, false);
            cr_assert(y && y_groups && y_threads, "%s", tg_last_error());
            char what[128];
            snprintf(what, sizeof what, "tg_sum %s %lldx%lld (rows %lld apart) axis 0", tg_dtype_name(dtypes[d]),
                     (long long)rows, (long long)cols, (long long)row_stride);
            cu_assert_within(gpu, what, y_groups, y, tolerance_of(dtypes[d]));
            tg_tensor *groups_host = cu_host(cpu, y_groups), *threads_host = cu_host(cpu, y_threads);
            cr_assert(memcmp(tg_data(groups_host), tg_data(threads_host), (size_t)cols * tg_dtype_size(dtypes[d])) == 0,
                      "%s: column groups and a thread per column differ (seed %llu)", what,
                      (unsigned long long)tt_seed());
            tg_tape_free(gpu);
            tg_tape_free(cpu);
        }
}

/* ---- determinism -------------------------------------------------------------------------------- */

/* The bytes of f(x) (and of x's gradient from a fixed dy) for a CUDA twin of x. */
static void run_on_gpu(tg_tensor *x, int axis, tg_tensor *dy, tg_tensor **y_host, tg_tensor **dx_host)
{
    tg_tape *cpu = x->tape, *gpu = tg_tape_create();
    tg_tensor *xc = tt_cuda_twin(gpu, x, false);
    tg_tensor *yc = axis == ALL ? tg_sum_all(gpu, xc) : tg_sum(gpu, xc, axis, false);
    cr_assert(yc, "%s", tg_last_error());
    cr_assert_eq(tg_backward_with_grad(gpu, yc, tt_cuda_twin(gpu, dy, false)), TG_OK, "%s", tg_last_error());
    *y_host = cu_host(cpu, yc);
    *dx_host = cu_host(cpu, xc->grad);
    tg_tape_free(gpu);
}

static bool same_bytes(const tg_tensor *a, const tg_tensor *b)
{
    return memcmp(tg_data(a), tg_data(b), (size_t)tg_numel(a) * tg_dtype_size(a->dtype)) == 0;
}

Test(cuda_reduce, two_runs_give_the_same_bits)
{
    tt_require_cuda();
    tg_tape *cpu = tg_tape_create();
    const struct {
        int64_t rows, cols;
        int axis;
    } cases[] = {{5, 1000003, ALL}, {3, 400009, 1}, {300007, 5, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tg_tensor *x = tt_leaf(cpu, TG_F32, 2, (int64_t[]){cases[c].rows, cases[c].cols});
        int64_t n_out = cases[c].axis == ALL ? 1 : cases[c].axis == 0 ? cases[c].cols : cases[c].rows;
        tg_tensor *dy = tt_randn(cpu, TG_F32, 1, &n_out);
        tg_tensor *y[2], *dx[2];
        for (int run = 0; run < 2; run++) run_on_gpu(x, cases[c].axis, dy, &y[run], &dx[run]);
        cr_assert(same_bytes(y[0], y[1]), "case %zu: two forward runs differ (seed %llu)", c,
                  (unsigned long long)tt_seed());
        cr_assert(same_bytes(dx[0], dx[1]), "case %zu: two backward runs differ (seed %llu)", c,
                  (unsigned long long)tt_seed());
    }
    tg_tape_free(cpu);
}

/* ---- empty sizes ---------------------------------------------------------------------------------- */

Test(cuda_reduce, empty_axis_sums_to_zero_and_empty_results_are_fine)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    int64_t a = tt_randint(1, 4), b = tt_randint(1, 40);
    tg_tensor *x = tg_empty(tape, TG_F32, TG_DEVICE_CUDA, 3, (int64_t[]){a, 0, b});
    cr_assert(x && tg_set_requires_grad(x, true) == TG_OK, "%s", tg_last_error());
    for (int keepdim = 0; keepdim < 2; keepdim++) {
        tg_tensor *y = tg_sum(tape, x, 1, keepdim);
        cr_assert(y && y->ndim == (keepdim ? 3 : 2) && tg_numel(y) == a * b, "%s", tg_last_error());
        tg_tensor *h = cu_host(tape, y);
        for (int64_t i = 0; i < a * b; i++) cr_assert_eq(tg_get_flat(h, i), 0.0, "element %lld", (long long)i);
        cr_assert_eq(tg_backward(tape, tg_sum_all(tape, y)), TG_OK, "%s", tg_last_error());
    }
    tg_tensor *all = tg_sum_all(tape, x);
    cr_assert(all && tg_numel(all) == 1, "%s", tg_last_error());
    cr_assert_eq(tg_item(all), 0.0);
    tg_tensor *y = tg_mean(tape, x, 2, false);
    cr_assert(y && y->ndim == 2 && y->shape[0] == a && y->shape[1] == 0, "%s", tg_last_error());
    tg_tape_free(tape);
}

/* The result stays on the device, and a CPU input still takes the CPU kernel. */
Test(cuda_reduce, results_stay_on_their_device)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_randn(tape, TG_F32, 2, (int64_t[]){3, 4});
    tg_tensor *xc = tt_cuda_twin(tape, x, false);
    tg_tensor *y = tg_sum(tape, x, 0, false), *yc = tg_sum(tape, xc, 0, false);
    cr_assert(y && yc, "%s", tg_last_error());
    cr_assert_eq(y->device, TG_DEVICE_CPU);
    cu_assert_within(tape, "tg_sum", yc, y, 1e-6);
    tg_tape_free(tape);
}
