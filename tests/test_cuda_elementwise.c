/* Elementwise ops on CUDA against the CPU kernels: every unary and binary op in f32,
 * bf16, f16 and f64, on contiguous and strided inputs, with broadcasting, edge sizes and
 * sizes that need many blocks (and more than one grid-stride round); forward values
 * and input gradients are compared. Skipped without a usable GPU. */
#include "cuda_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef tg_tensor *(*unary_op_fn)(tg_tape *, tg_tensor *);
typedef tg_tensor *(*binary_op_fn)(tg_tape *, tg_tensor *, tg_tensor *);

static tg_tensor *scale_by_minus_1_7(tg_tape *tape, tg_tensor *x) { return tg_scale(tape, x, -1.7); }

static const struct {
    const char *name;
    unary_op_fn fn;
    bool positive_input; /* log needs x > 0 */
} unary_ops[] = {
    {"tg_scale", scale_by_minus_1_7, false},
    {"tg_neg", tg_neg, false},
    {"tg_exp", tg_exp, false},
    {"tg_log", tg_log, true},
    {"tg_tanh", tg_tanh, false},
    {"tg_sigmoid", tg_sigmoid, false},
    {"tg_silu", tg_silu, false},
    {"tg_softplus", tg_softplus, false},
    {"tg_relu", tg_relu, false},
};
#define N_UNARY (sizeof unary_ops / sizeof unary_ops[0])

static const struct {
    const char *name;
    binary_op_fn fn;
} binary_ops[] = {{"tg_add", tg_add}, {"tg_sub", tg_sub}, {"tg_mul", tg_mul}, {"tg_div", tg_div}};
#define N_BINARY (sizeof binary_ops / sizeof binary_ops[0])

/* f32 results agree to rounding; the 8-bit (bf16) and 11-bit (f16) mantissas to one ulp
 * or so, where float and double maths round differently. */
static const tg_dtype dtypes[] = {TG_F32, TG_BF16, TG_F16};
static const double tolerances[] = {1e-5, 1e-2, 2e-3};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

/* ---- helpers ------------------------------------------------------------------------------ */

/* Values with |x| ≥ 0.1 (relu's kink) or, when positive, x ≥ 0.1 (log, divisors). */
static void keep_away_from_zero(tg_tensor *x, bool positive)
{
    for (int64_t i = 0; i < tg_numel(x); i++) {
        double v = tg_get_flat(x, i);
        if (positive)
            v = fabs(v) + 0.1;
        else if (fabs(v) < 0.1)
            v = v < 0 ? -0.1 - fabs(v) : 0.1 + v;
        tg_set_flat(x, i, v);
    }
}

static tg_tensor *random_input(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape, bool strided,
                               bool positive)
{
    tg_tensor *x = strided ? tt_strided_leaf(tape, dtype, ndim, shape) : tt_leaf(tape, dtype, ndim, shape);
    keep_away_from_zero(x, positive);
    return x;
}

/* y = fn(x) on both devices, then backward from the same random dy; compares y and x's
 * gradient. x is a CPU leaf; its CUDA twin keeps x's layout when x is strided. */
static void check_unary(size_t k, tg_tensor *x, double tolerance, const char *what)
{
    tg_tape *cpu = x->tape, *gpu = tg_tape_create();
    tg_tensor *xc = tt_cuda_twin(gpu, x, !tg_is_contiguous(x));
    tg_tensor *y = unary_ops[k].fn(cpu, x), *yc = unary_ops[k].fn(gpu, xc);
    cr_assert(y && yc, "%s: %s", what, tg_last_error());
    cu_assert_within(gpu, what, yc, y, tolerance);
    tg_tensor *dy = tt_randn(cpu, x->dtype, y->ndim, y->shape);
    cr_assert_eq(tg_backward_with_grad(cpu, y, dy), TG_OK, "%s: %s", what, tg_last_error());
    cr_assert_eq(tg_backward_with_grad(gpu, yc, tt_cuda_twin(gpu, dy, false)), TG_OK, "%s: %s", what, tg_last_error());
    char grad_what[160];
    snprintf(grad_what, sizeof grad_what, "%s: dx", what);
    cu_assert_within(gpu, grad_what, xc->grad, x->grad, tolerance);
    tg_tape_free(gpu);
}

/* As check_unary for out = fn(a, b): compares out, a's and b's gradients. */
static void check_binary(size_t k, tg_tensor *a, tg_tensor *b, double tolerance, const char *what)
{
    tg_tape *cpu = a->tape, *gpu = tg_tape_create();
    tg_tensor *ac = tt_cuda_twin(gpu, a, !tg_is_contiguous(a)), *bc = tt_cuda_twin(gpu, b, !tg_is_contiguous(b));
    tg_tensor *y = binary_ops[k].fn(cpu, a, b), *yc = binary_ops[k].fn(gpu, ac, bc);
    cr_assert(y && yc, "%s: %s", what, tg_last_error());
    cu_assert_within(gpu, what, yc, y, tolerance);
    tg_tensor *dy = tt_randn(cpu, a->dtype, y->ndim, y->shape);
    cr_assert_eq(tg_backward_with_grad(cpu, y, dy), TG_OK, "%s: %s", what, tg_last_error());
    cr_assert_eq(tg_backward_with_grad(gpu, yc, tt_cuda_twin(gpu, dy, false)), TG_OK, "%s: %s", what, tg_last_error());
    char grad_what[160];
    snprintf(grad_what, sizeof grad_what, "%s: da", what);
    cu_assert_within(gpu, grad_what, ac->grad, a->grad, tolerance);
    snprintf(grad_what, sizeof grad_what, "%s: db", what);
    cu_assert_within(gpu, grad_what, bc->grad, b->grad, tolerance);
    tg_tape_free(gpu);
}

/* Random broadcastable shapes: b drops leading dims and/or has 1s where a does not. */
static void random_broadcast_shapes(int64_t *a, int *ndim_b, int64_t *b)
{
    a[0] = tt_randint(1, 4), a[1] = tt_randint(1, 6), a[2] = tt_randint(1, 37);
    *ndim_b = (int)tt_randint(1, 3);
    for (int i = 0; i < *ndim_b; i++) b[i] = tt_randint(0, 1) ? a[3 - *ndim_b + i] : 1;
}

/* ---- unary ----------------------------------------------------------------------------------- */

Test(cuda_elementwise, unary_ops_match_cpu_every_dtype_and_layout)
{
    tt_require_cuda();
    for (size_t k = 0; k < N_UNARY; k++)
        for (size_t d = 0; d < N_DTYPES; d++)
            for (int strided = 0; strided < 2; strided++) {
                tg_tape *cpu = tg_tape_create();
                int64_t shape[3] = {tt_randint(1, 4), tt_randint(1, 6), tt_randint(1, 67)};
                tg_tensor *x = random_input(cpu, dtypes[d], 3, shape, strided, unary_ops[k].positive_input);
                char what[96];
                snprintf(what, sizeof what, "%s %s%s", unary_ops[k].name, tg_dtype_name(dtypes[d]),
                         strided ? " strided" : "");
                check_unary(k, x, tolerances[d], what);
                tg_tape_free(cpu);
            }
}

Test(cuda_elementwise, unary_ops_in_f64_take_the_generic_path)
{
    tt_require_cuda();
    for (size_t k = 0; k < N_UNARY; k++) {
        tg_tape *cpu = tg_tape_create();
        int64_t shape[2] = {tt_randint(1, 9), tt_randint(1, 33)};
        tg_tensor *x = random_input(cpu, TG_F64, 2, shape, k % 2 == 1, unary_ops[k].positive_input);
        check_unary(k, x, 1e-12, unary_ops[k].name);
        tg_tape_free(cpu);
    }
}

Test(cuda_elementwise, unary_edge_sizes)
{
    tt_require_cuda();
    /* one element, a size-1 dimension in the middle, sizes around a warp and a block */
    const int64_t shapes[][3] = {{1, 1, 1}, {3, 1, 5}, {1, 31, 1}, {1, 33, 1}, {1, 1, 255}, {1, 1, 257}, {2, 129, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int strided = 0; strided < 2; strided++) {
            tg_tape *cpu = tg_tape_create();
            size_t k = (size_t)tt_randint(0, N_UNARY - 1);
            tg_tensor *x = random_input(cpu, TG_F32, 3, shapes[s], strided, unary_ops[k].positive_input);
            char what[96];
            snprintf(what, sizeof what, "%s shape %zu%s", unary_ops[k].name, s, strided ? " strided" : "");
            check_unary(k, x, 1e-5, what);
            tg_tape_free(cpu);
        }
}

Test(cuda_elementwise, stable_at_extremes)
{
    tt_require_cuda();
    tg_tape *cpu = tg_tape_create();
    float values[6] = {-800.0f, -88.0f, -20.0f, 20.0f, 88.0f, 800.0f};
    tg_tensor *x = tg_from_data(cpu, TG_F32, TG_DEVICE_CPU, 1, (int64_t[]){6}, values);
    cr_assert_eq(tg_set_requires_grad(x, true), TG_OK);
    const size_t stable[3] = {5, 6, 7}; /* sigmoid, silu, softplus */
    for (int i = 0; i < 3; i++) {
        tg_tape *gpu = tg_tape_create();
        tg_tensor *y = unary_ops[stable[i]].fn(gpu, tt_cuda_twin(gpu, x, false));
        cr_assert(y, "%s", tg_last_error());
        tg_tensor *h = cu_host(gpu, y);
        for (int j = 0; j < 6; j++)
            cr_assert(isfinite(tg_get_flat(h, j)), "%s(%g) = %g", unary_ops[stable[i]].name, values[j],
                      tg_get_flat(h, j));
        tg_tape_free(gpu);
        check_unary(stable[i], x, 1e-5, unary_ops[stable[i]].name);
        cr_assert_eq(tg_zero_grad(x), TG_OK);
    }
    tg_tape_free(cpu);
}

/* ---- binary ---------------------------------------------------------------------------------- */

Test(cuda_elementwise, binary_ops_broadcast_match_cpu)
{
    tt_require_cuda();
    for (size_t k = 0; k < N_BINARY; k++)
        for (size_t d = 0; d < N_DTYPES; d++)
            for (int swap = 0; swap < 2; swap++) {
                tg_tape *cpu = tg_tape_create();
                int64_t sa[3], sb[3];
                int nb;
                random_broadcast_shapes(sa, &nb, sb);
                tg_tensor *big = random_input(cpu, dtypes[d], 3, sa, false, swap);
                tg_tensor *small = random_input(cpu, dtypes[d], nb, sb, d == 0, !swap); /* divisors ≥ 0.1 */
                char what[96];
                snprintf(what, sizeof what, "%s %s%s", binary_ops[k].name, tg_dtype_name(dtypes[d]),
                         swap ? " (small, big)" : " (big, small)");
                check_binary(k, swap ? small : big, swap ? big : small, tolerances[d], what);
                tg_tape_free(cpu);
            }
}

Test(cuda_elementwise, binary_ops_strided_and_f64_match_cpu)
{
    tt_require_cuda();
    const tg_dtype types[2] = {TG_F32, TG_F64};
    const double tolerance[2] = {1e-5, 1e-12};
    for (size_t k = 0; k < N_BINARY; k++)
        for (int t = 0; t < 2; t++)
            for (int layout = 0; layout < 3; layout++) { /* a strided, b strided, both */
                tg_tape *cpu = tg_tape_create();
                int64_t shape[2] = {tt_randint(1, 7), tt_randint(1, 45)};
                tg_tensor *a = random_input(cpu, types[t], 2, shape, layout != 1, false);
                tg_tensor *b = random_input(cpu, types[t], 2, shape, layout != 0, true);
                char what[96];
                snprintf(what, sizeof what, "%s %s layout %d", binary_ops[k].name, tg_dtype_name(types[t]), layout);
                check_binary(k, a, b, tolerance[t], what);
                tg_tape_free(cpu);
            }
}

Test(cuda_elementwise, binary_with_a_one_element_operand)
{
    tt_require_cuda();
    for (size_t k = 0; k < N_BINARY; k++) {
        tg_tape *cpu = tg_tape_create();
        int64_t shape[2] = {tt_randint(1, 5), tt_randint(1, 300)};
        tg_tensor *a = random_input(cpu, TG_F32, 2, shape, false, false);
        tg_tensor *b = random_input(cpu, TG_F32, 1, (int64_t[]){1}, false, true);
        check_binary(k, a, b, 1e-5, binary_ops[k].name);
        tg_tape_free(cpu);
    }
}

/* ---- large sizes ----------------------------------------------------------------------------- */

Test(cuda_elementwise, large_inputs_need_many_blocks)
{
    tt_require_cuda();
    /* 100k+ elements, an odd count; then more than 65536 blocks × 256 threads, so the
     * grid-stride loops go round more than once. */
    const int64_t sizes[2] = {100000 + 2 * tt_randint(0, 5000) + 1, ((int64_t)1 << 24) + tt_randint(1, 99999)};
    for (int s = 0; s < 2; s++) {
        tg_tape *cpu = tg_tape_create();
        int64_t shape[2] = {sizes[s] / 97, 97};
        tg_tensor *x = random_input(cpu, TG_F32, 2, shape, false, false);
        check_unary(6, x, 1e-5, s ? "tg_silu huge" : "tg_silu 100k"); /* silu */
        tg_tensor *row = random_input(cpu, TG_F32, 1, (int64_t[]){97}, false, true);
        cr_assert_eq(tg_zero_grad(x), TG_OK);
        check_binary(3, x, row, 1e-5, s ? "tg_div huge broadcast" : "tg_div 100k broadcast");
        if (s == 0) {
            tg_tensor *xs = random_input(cpu, TG_BF16, 2, shape, true, false);
            check_unary(4, xs, 1e-2, "tg_tanh 100k strided bf16");
        }
        tg_tape_free(cpu);
    }
}

/* Dense 16-bit copies and gradient sums, 8 values per access when aligned: y = x·w + x
 * gives x's gradient as two contributions (dy·w, then dy added), and the copy of y checks
 * the copy kernel. Counts around multiples of 8, and x at an odd element offset (not
 * 16-byte aligned), in bf16 and f16: equal to the CPU. */
Test(cuda_elementwise, dense_16_bit_copies_and_gradient_sums_match_cpu)
{
    tt_require_cuda();
    const tg_dtype halves[2] = {TG_BF16, TG_F16};
    for (int round = 0; round < 24; round++) {
        const tg_dtype dtype = halves[round % 2];
        const int64_t n = round < 16 ? round / 2 + 1 : 8 * tt_randint(1, 5000) + tt_randint(0, 7);
        const bool offset = round % 4 >= 2;
        tg_tape *cpu = tg_tape_create(), *gpu = tg_tape_create();
        tg_tensor *whole = tt_leaf(cpu, dtype, 1, (int64_t[]){n + 1});
        tg_tensor *x = offset ? tg_slice(cpu, whole, 0, 1, n + 1, 1) : tg_slice(cpu, whole, 0, 0, n, 1);
        tg_tensor *w = tt_randn(cpu, dtype, 1, &n);
        tg_tensor *wholec = tt_cuda_twin(gpu, whole, false), *wc = tt_cuda_twin(gpu, w, false);
        tg_tensor *xc = offset ? tg_slice(gpu, wholec, 0, 1, n + 1, 1) : tg_slice(gpu, wholec, 0, 0, n, 1);
        tg_tensor *y = tg_add(cpu, tg_mul(cpu, x, w), x), *yc = tg_add(gpu, tg_mul(gpu, xc, wc), xc);
        char what[96];
        snprintf(what, sizeof what, "x·w + x, %lld %s values%s", (long long)n, tg_dtype_name(dtype),
                 offset ? " at offset 1" : "");
        cu_assert_equal(gpu, what, yc, y);
        tg_tensor *copy = tg_empty(gpu, dtype, TG_DEVICE_CUDA, 1, &n);
        cr_assert_eq(tg_copy(copy, yc), TG_OK, "%s", tg_last_error());
        cu_assert_equal(gpu, what, copy, y);
        tg_tensor *dy = tt_randn(cpu, dtype, 1, &n);
        cr_assert_eq(tg_backward_with_grad(cpu, y, dy), TG_OK, "%s: %s", what, tg_last_error());
        cr_assert_eq(tg_backward_with_grad(gpu, yc, tt_cuda_twin(gpu, dy, false)), TG_OK, "%s: %s", what,
                     tg_last_error());
        cu_assert_equal(gpu, what, wholec->grad, whole->grad);
        tg_tape_free(gpu);
        tg_tape_free(cpu);
    }
}

/* ---- determinism ------------------------------------------------------------------------------- */

/* The gradient of a broadcast operand is a reduction: two runs give the same bits. */
Test(cuda_elementwise, broadcast_gradient_is_deterministic)
{
    tt_require_cuda();
    tg_tape *cpu = tg_tape_create();
    int64_t shape[2] = {tt_randint(20000, 40000), 33};
    tg_tensor *a = tt_randn(cpu, TG_F32, 2, shape);
    tg_tensor *b = tt_leaf(cpu, TG_F32, 1, (int64_t[]){33});
    tg_tensor *dy = tt_randn(cpu, TG_F32, 2, shape);
    tg_tensor *grads[2];
    for (int run = 0; run < 2; run++) {
        tg_tape *gpu = tg_tape_create();
        tg_tensor *bc = tt_cuda_twin(gpu, b, false);
        tg_tensor *y = tg_mul(gpu, tt_cuda_twin(gpu, a, false), bc);
        cr_assert_eq(tg_backward_with_grad(gpu, y, tt_cuda_twin(gpu, dy, false)), TG_OK, "%s", tg_last_error());
        grads[run] = cu_host(cpu, bc->grad);
        tg_tape_free(gpu);
    }
    cr_assert_eq(memcmp(tg_data(grads[0]), tg_data(grads[1]), 33 * sizeof(float)), 0,
                 "two backward runs differ (seed %llu)", (unsigned long long)tt_seed());
    tg_tape_free(cpu);
}

/* ---- errors ---------------------------------------------------------------------------------- */

Test(cuda_elementwise, cpu_and_cuda_inputs_together_fail_cleanly)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    tg_tensor *a = tt_leaf(tape, TG_F32, 2, (int64_t[]){2, 3});
    tg_tensor *b = tt_cuda_twin(tape, a, false);
    tt_state s = tt_snapshot(tape);
    for (size_t k = 0; k < N_BINARY; k++) {
        tt_assert_failed_with(&s, binary_ops[k].fn(tape, a, b), binary_ops[k].name, "device", "cpu", "cuda", NULL);
        tt_assert_failed_with(&s, binary_ops[k].fn(tape, b, a), binary_ops[k].name, "device", "cpu", "cuda", NULL);
    }
    tg_tensor *h = cu_host(tape, b->grad);
    for (int64_t i = 0; i < 6; i++) {
        cr_assert_eq(tg_get_flat(a->grad, i), 0.0);
        cr_assert_eq(tg_get_flat(h, i), 0.0);
    }
    tg_tape_free(tape);
}
