/* tg_cross_entropy on CUDA against the CPU kernels: loss and gradient on random shapes
 * (1-D to 3-D logits, strided logits and targets, ignored rows, a random upstream
 * gradient) in f32, bf16 and f64; row lengths around the kernels' limits; all rows
 * ignored; a large vocabulary and many rows; reproducible loss and gradient; bad targets
 * named by position like on the CPU; and the mixed-device error. Skipped without a GPU. */
#include "cuda_util.h"
#include "loss_cases.h"

#include <stdio.h>

#define IGNORE (-100)

/* The loss on the CPU and on CUDA twins of logits and targets (same values, layouts),
 * then backward from the same random upstream gradient: loss and dlogits must agree. */
static void compare_case(tg_dtype dtype, int ndim, const int64_t *shape, bool strided, double p_ignore)
{
    tg_tape *tape = tg_tape_create();
    int64_t tshape[TG_MAX_DIMS];
    int tndim = lc_targets_shape(ndim, shape, tshape);
    tg_tensor *logits = cu_input(tape, dtype, ndim, shape, strided, true);
    tg_tensor *targets = lc_random_targets(tape, tndim, tshape, (int32_t)shape[ndim - 1], strided, IGNORE, p_ignore);
    tg_tensor *clogits = tt_cuda_twin(tape, logits, true), *ctargets = tt_cuda_twin(tape, targets, true);
    char what[160], dims[64];
    snprintf(what, sizeof what, "tg_cross_entropy logits %s%s", tg_describe(logits, dims, sizeof dims),
             strided ? " strided" : "");
    tg_tensor *loss = tg_cross_entropy(tape, logits, targets, IGNORE);
    tg_tensor *closs = tg_cross_entropy(tape, clogits, ctargets, IGNORE);
    cu_assert_close(tape, what, closs, loss);
    double upstream = 0.25 + 2 * tg_rng_uniform(tt_rng());
    cu_backward(tape, loss, tg_full(tape, dtype, TG_DEVICE_CPU, 1, (int64_t[]){1}, upstream));
    cu_backward(tape, closs, tg_full(tape, dtype, TG_DEVICE_CUDA, 1, (int64_t[]){1}, upstream));
    char grad_what[200];
    snprintf(grad_what, sizeof grad_what, "%s: dlogits", what);
    cu_assert_close(tape, grad_what, clogits->grad, logits->grad);
    tg_tape_free(tape);
}

Test(cuda_cross_entropy, random_shapes_match_cpu)
{
    tt_require_cuda();
    const tg_dtype dtypes[3] = {TG_F32, TG_BF16, TG_F64};
    for (int d = 0; d < 3; d++)
        for (int ndim = 1; ndim <= 3; ndim++)
            for (int strided = 0; strided < 2; strided++) {
                int64_t shape[3];
                for (int i = 0; i < ndim; i++) shape[i] = tt_randint(1, 6);
                shape[ndim - 1] = tt_randint(1, 70); /* V = 1 up to past two warps */
                compare_case(dtypes[d], ndim, shape, strided, ndim == 1 ? 0.0 : 0.3);
            }
}

Test(cuda_cross_entropy, large_vocabulary_and_many_rows_match_cpu)
{
    tt_require_cuda();
    int64_t large[2] = {tt_randint(1000, 1100), tt_randint(4096, 5200)};
    compare_case(TG_F32, 2, large, false, 0.1);
    int64_t many[2] = {tt_randint(100000, 120000), tt_randint(2, 5)};
    compare_case(TG_F32, 2, many, tt_randint(0, 1), 0.1);
    int64_t bf16[3] = {2, tt_randint(20, 40), tt_randint(8000, 9000)};
    compare_case(TG_BF16, 3, bf16, tt_randint(0, 1), 0.1);
}

/* Rows of every length around the kernels' choices: lane groups of 1 to 32 lanes, several
 * classes per lane, the longest rows a group owns (1024) and the shortest a block owns, and
 * more rows than the group kernels' grid holds at once (rows taken in rounds). */
Test(cuda_cross_entropy, row_lengths_around_the_kernels_limits_match_cpu)
{
    tt_require_cuda();
    const int64_t lengths[] = {1, 2, 5, 16, 31, 32, 33, 200, 1023, 1024, 1025, 1300};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        int64_t shape[2] = {tt_randint(1, 400), lengths[i]};
        compare_case(i % 2 ? TG_BF16 : TG_F32, 2, shape, tt_randint(0, 1), 0.2);
    }
    int64_t rounds[2] = {tt_randint(40000, 50000), tt_randint(17, 32)};
    compare_case(TG_F32, 2, rounds, tt_randint(0, 1), 0.1);
}

Test(cuda_cross_entropy, all_rows_ignored_gives_zero_loss_and_zero_gradient)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 50), tt_randint(1, 50)};
    tg_tensor *logits = tt_cuda_twin(tape, tt_leaf(tape, TG_F32, 2, shape), false);
    tg_tensor *targets =
        tt_cuda_twin(tape, lc_random_targets(tape, 1, shape, (int32_t)shape[1], false, IGNORE, 1.0), false);
    /* The loss and the gradient start in NaN-filled memory: both must be written. */
    cu_dirty_device_memory(1, TG_F32, 4);
    cu_dirty_device_memory(shape[0] * shape[1], TG_F32, 4);
    tg_tensor *loss = tg_cross_entropy(tape, logits, targets, IGNORE);
    cr_assert(loss, "%s", tg_last_error());
    cr_assert_eq(tg_item(loss), 0.0);
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    tg_tensor *grad = cu_host(tape, logits->grad);
    for (int64_t i = 0; i < tg_numel(grad); i++) cr_assert_eq(tg_get_flat(grad, i), 0.0, "element %lld", (long long)i);
    tg_tape_free(tape);
}

Test(cuda_cross_entropy, loss_and_gradient_are_reproducible)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(2000, 3000), tt_randint(500, 1500)};
    tg_tensor *logits = tt_leaf(tape, TG_F32, 2, shape);
    tg_tensor *targets =
        tt_cuda_twin(tape, lc_random_targets(tape, 1, shape, (int32_t)shape[1], false, IGNORE, 0.1), false);
    tg_tensor *cl[2], *loss[2];
    for (int run = 0; run < 2; run++) {
        cl[run] = tt_cuda_twin(tape, logits, false);
        loss[run] = tg_cross_entropy(tape, cl[run], targets, IGNORE);
        cr_assert(loss[run], "%s", tg_last_error());
        cr_assert_eq(tg_backward(tape, loss[run]), TG_OK, "%s", tg_last_error());
    }
    cr_assert(cu_bitwise_equal(tape, loss[0], loss[1]), "the loss differs between two runs");
    cr_assert(cu_bitwise_equal(tape, cl[0]->grad, cl[1]->grad), "dlogits differs between two runs");
    tg_tape_free(tape);
}

/* Asserts the message names the target's value and its position (rendered like the
 * op's own shape text, "[i, j]"). */
static void assert_names_target(int32_t value, int ndim, const int64_t *position)
{
    char expected_value[32], expected_position[64];
    snprintf(expected_value, sizeof expected_value, "target %d", (int)value);
    tg_shape_str(ndim, position, expected_position, sizeof expected_position);
    const char *message = tg_last_error();
    cr_assert(strstr(message, expected_value) && strstr(message, expected_position), "expected \"%s\" at %s in: %s",
              expected_value, expected_position, message);
}

Test(cuda_cross_entropy, first_bad_target_is_named_by_position)
{
    tt_require_cuda();
    for (int strided = 0; strided < 2; strided++) {
        tg_tape *tape = tg_tape_create();
        int64_t shape[3] = {tt_randint(2, 40), tt_randint(2, 40), tt_randint(2, 30)};
        tg_tensor *logits = tt_cuda_twin(tape, tt_leaf(tape, TG_F32, 3, shape), false);
        tg_tensor *targets = lc_random_targets(tape, 2, shape, (int32_t)shape[2], strided, IGNORE, 0.2);
        /* Two bad targets: the first in row-major order must be the one named, on the
         * GPU as on the CPU; a negative one that is not ignore_index is bad too. */
        int64_t n = shape[0] * shape[1], first = tt_randint(0, n - 2), second = tt_randint(first + 1, n - 1);
        int32_t bad_first = strided ? -7 : (int32_t)shape[2] + (int32_t)tt_randint(0, 5);
        tg_set_flat(targets, first, bad_first);
        tg_set_flat(targets, second, (int32_t)shape[2]);
        int64_t position[2] = {first / shape[1], first % shape[1]};
        tg_tensor *ctargets = tt_cuda_twin(tape, targets, true);
        tt_state s = tt_snapshot(tape);
        tt_assert_failed_with(&s, tg_cross_entropy(tape, logits, ctargets, IGNORE), "tg_cross_entropy", "outside",
                              NULL);
        assert_names_target(bad_first, 2, position);
        tg_tensor *cpu_logits = cu_host(tape, logits);
        s = tt_snapshot(tape);
        tt_assert_failed(&s, tg_cross_entropy(tape, cpu_logits, targets, IGNORE), "tg_cross_entropy");
        assert_names_target(bad_first, 2, position);
        tg_tape_free(tape);
    }
}

Test(cuda_cross_entropy, mixed_devices_fail_cleanly)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {3, 5};
    tg_tensor *logits = tt_leaf(tape, TG_F32, 2, shape);
    tg_tensor *targets = lc_random_targets(tape, 1, shape, 5, false, IGNORE, 0.0);
    tg_tensor *clogits = tt_cuda_twin(tape, logits, false), *ctargets = tt_cuda_twin(tape, targets, false);
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, clogits, targets, IGNORE), "tg_cross_entropy", "different devices",
                          "cpu", "cuda", NULL);
    tt_assert_failed_with(&s, tg_cross_entropy(tape, logits, ctargets, IGNORE), "tg_cross_entropy", "different devices",
                          NULL);
    for (int64_t i = 0; i < 15; i++) cr_assert_eq(tg_get_flat(logits->grad, i), 0.0);
    tg_tensor *host_grad = cu_host(tape, clogits->grad);
    for (int64_t i = 0; i < 15; i++) cr_assert_eq(tg_get_flat(host_grad, i), 0.0);
    tg_tape_free(tape);
}

Test(cuda_count_correct, counts_equal_the_cpus)
{
    tt_require_cuda();
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    for (int round = 0; round < 12; round++) {
        tg_tape *tape = tg_tape_create();
        const int64_t shape[3] = {tt_randint(1, 5), tt_randint(1, 300), tt_randint(1, 100)};
        tg_tensor *logits = cu_input(tape, dtypes[round % 2], 3, shape, round % 3 == 0, false);
        for (int64_t i = 0; i < tg_numel(logits); i += tt_randint(1, 7)) tg_set_flat(logits, i, 0.75); /* ties */
        tg_tensor *targets = lc_random_targets(tape, 2, shape, (int32_t)shape[2], round % 4 == 1, IGNORE, 0.3);
        tg_tensor *hits = tg_count_correct(tape, logits, targets, IGNORE);
        tg_tensor *chits =
            tg_count_correct(tape, tt_cuda_twin(tape, logits, true), tt_cuda_twin(tape, targets, true), IGNORE);
        cu_assert_equal(tape, "tg_count_correct", chits, hits);
        tg_tape_free(tape);
    }
}
