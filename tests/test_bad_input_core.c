/* tests/test_bad_input_core.c: the bad-input matrix over tensors, the tape, the generator,
 * memory and graphs (see bad_input.h). Where a wrong call targets a parameter (f->weight),
 * the harness also proves that the parameter kept its bits. */
#include "bad_input.h"

#include <stdint.h>
#include <string.h>

/* a compound literal, which the formatter would spread over two lines */
// clang-format off
#define SHAPE(...) (int64_t[]){__VA_ARGS__}
// clang-format on
#define NDIM(...) ((int)(sizeof(int64_t[]){__VA_ARGS__} / sizeof(int64_t)))
#define RANDN(...) bi_leaf(f, TG_F32, NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__))

BI_TEST_SUITE(core)

/* The enum queries never fail: an out-of-range value gets the documented answer, and the
 * error message is left alone (message-building code calls them). */
Test(bad_input, enum_queries_answer_out_of_range_values)
{
    tg_set_error(TG_ERR_INVALID, "an earlier message");
    const int values[] = {-1, 5, 99, INT32_MIN};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        int v = values[i];
        cr_assert_str_eq(tg_dtype_name((tg_dtype)v), "invalid-dtype");
        cr_assert_eq(tg_dtype_size((tg_dtype)v), 0);
        cr_assert(!tg_dtype_is_float((tg_dtype)v));
        cr_assert_str_eq(tg_device_name((tg_device)(v == 5 ? 7 : v)), "invalid-device");
        cr_assert(!tg_device_available((tg_device)(v == 5 ? 7 : v)));
        cr_assert_eq(tg_device_resolve((tg_device)v), (tg_device)v);
        cr_assert_str_eq(tg_status_name((tg_status)(v == 5 ? 17 : v)), "unknown status");
    }
    cr_assert_str_eq(tg_last_error(), "an earlier message");
}

/* ---- errors ------------------------------------------------------------------------------ */

/* A NULL format is the point here, so the compiler's format checks are off for this case. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-security"
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
BAD_INPUT(tg_set_error, "format", "NULL")
{
    const char *format = NULL;
    BI_EXPECT_STATUS(f, tg_set_error(TG_ERR_INVALID, format));
}
#pragma GCC diagnostic pop

/* ---- memory and devices ---------------------------------------------------------------------- */

BAD_INPUT(tg_memory_stats_get, "stats", "NULL") { BI_EXPECT_STATUS(f, tg_memory_stats_get(TG_DEVICE_CPU, NULL)); }

BAD_INPUT(tg_memory_stats_get, "device", "a device that does not exist")
{
    tg_memory_stats stats;
    BI_EXPECT_STATUS(f, tg_memory_stats_get((tg_device)9, &stats));
}

BAD_INPUT(tg_synchronize, "device", "a device that does not exist")
{
    BI_EXPECT_STATUS(f, tg_synchronize((tg_device)9));
}

BAD_INPUT(tg_device_check_errors, "device", "a device that does not exist")
{
    BI_EXPECT_STATUS(f, tg_device_check_errors((tg_device)9));
}

/* ---- creation ------------------------------------------------------------------------------ */

BAD_INPUT(tg_empty, "tape", "NULL") { BI_EXPECT_NULL(f, tg_empty(NULL, TG_F32, TG_DEVICE_CPU, 2, SHAPE(2, 3))); }

BAD_INPUT(tg_empty, "dtype", "a dtype that does not exist")
{
    BI_EXPECT_NULL(f, tg_empty(f->tape, (tg_dtype)17, TG_DEVICE_CPU, 2, SHAPE(2, 3)));
}

BAD_INPUT(tg_empty, "device", "a device that does not exist")
{
    BI_EXPECT_NULL(f, tg_empty(f->tape, TG_F32, (tg_device)9, 2, SHAPE(2, 3)));
}

BAD_INPUT(tg_empty, "ndim", "0") { BI_EXPECT_NULL(f, tg_empty(f->tape, TG_F32, TG_DEVICE_CPU, 0, SHAPE(2))); }

BAD_INPUT(tg_empty, "ndim", "above TG_MAX_DIMS")
{
    BI_EXPECT_NULL(f, tg_empty(f->tape, TG_F32, TG_DEVICE_CPU, TG_MAX_DIMS + 1, SHAPE(1, 1, 1, 1, 1, 1, 1)));
}

BAD_INPUT(tg_empty, "shape", "NULL") { BI_EXPECT_NULL(f, tg_empty(f->tape, TG_F32, TG_DEVICE_CPU, 2, NULL)); }

BAD_INPUT(tg_empty, "shape", "a negative dimension")
{
    BI_EXPECT_NULL(f, tg_empty(f->tape, TG_F32, TG_DEVICE_CPU, 2, SHAPE(2, -3)));
}

BAD_INPUT(tg_empty, "shape", "an element count that overflows")
{
    BI_EXPECT_NULL(f, tg_empty(f->tape, TG_F32, TG_DEVICE_CPU, 3, SHAPE(INT64_MAX / 4, 4, 4)));
}

BAD_INPUT(tg_empty, "shape", "a byte count that overflows")
{
    BI_EXPECT_NULL(f, tg_empty(f->tape, TG_F64, TG_DEVICE_CPU, 1, SHAPE(INT64_MAX / 4)));
}

BAD_INPUT(tg_empty, "shape", "zero elements, but strides that overflow")
{
    BI_EXPECT_NULL(f, tg_empty(f->tape, TG_F32, TG_DEVICE_CPU, 3, SHAPE(0, INT64_MAX, INT64_MAX)));
}

BAD_INPUT(tg_zeros, "shape", "a negative dimension")
{
    BI_EXPECT_NULL(f, tg_zeros(f->tape, TG_F32, TG_DEVICE_CPU, 1, SHAPE(-1)));
}

BAD_INPUT(tg_zeros, "tape", "NULL") { BI_EXPECT_NULL(f, tg_zeros(NULL, TG_F32, TG_DEVICE_CPU, 1, SHAPE(3))); }

BAD_INPUT(tg_full, "value", "NaN for an i32 tensor")
{
    BI_EXPECT_NULL(f, tg_full(f->tape, TG_I32, TG_DEVICE_CPU, 1, SHAPE(3), NAN));
}

BAD_INPUT(tg_full, "value", "1e20 for an i32 tensor")
{
    BI_EXPECT_NULL(f, tg_full(f->tape, TG_I32, TG_DEVICE_CPU, 1, SHAPE(3), 1e20));
}

BAD_INPUT(tg_full, "ndim", "0") { BI_EXPECT_NULL(f, tg_full(f->tape, TG_F32, TG_DEVICE_CPU, 0, SHAPE(3), 1.0)); }

BAD_INPUT(tg_from_data, "data", "NULL")
{
    BI_EXPECT_NULL(f, tg_from_data(f->tape, TG_F32, TG_DEVICE_CPU, 1, SHAPE(3), NULL));
}

BAD_INPUT(tg_from_data, "shape", "a negative dimension")
{
    float data[3] = {1, 2, 3};
    BI_EXPECT_NULL(f, tg_from_data(f->tape, TG_F32, TG_DEVICE_CPU, 1, SHAPE(-3), data));
}

BAD_INPUT(tg_from_data, "tape", "NULL")
{
    float data[3] = {1, 2, 3};
    BI_EXPECT_NULL(f, tg_from_data(NULL, TG_F32, TG_DEVICE_CPU, 1, SHAPE(3), data));
}

BAD_INPUT(tg_empty_like, "x", "NULL") { BI_EXPECT_NULL(f, tg_empty_like(f->tape, NULL)); }

BAD_INPUT(tg_empty_like, "tape", "NULL") { BI_EXPECT_NULL(f, tg_empty_like(NULL, f->x)); }

BAD_INPUT(tg_empty_like, "x", "no storage")
{
    tg_tensor *x = bi_no_storage(f, f->x);
    BI_EXPECT_NULL(f, tg_empty_like(f->tape, x));
}

BAD_INPUT(tg_zeros_like, "x", "NULL") { BI_EXPECT_NULL(f, tg_zeros_like(f->tape, NULL)); }

BAD_INPUT(tg_zeros_like, "x", "ndim 0")
{
    tg_tensor *x = bi_bad_rank(f, f->x, 0);
    BI_EXPECT_NULL(f, tg_zeros_like(f->tape, x));
}

BAD_INPUT(tg_tensor_new, "dtype", "a dtype that does not exist")
{
    BI_EXPECT_NULL(f, tg_tensor_new((tg_dtype)-1, TG_DEVICE_CPU, 1, SHAPE(3)));
}

BAD_INPUT(tg_tensor_new, "shape", "NULL") { BI_EXPECT_NULL(f, tg_tensor_new(TG_F32, TG_DEVICE_CPU, 1, NULL)); }

BAD_INPUT(tg_tensor_new, "shape", "a byte count that overflows")
{
    BI_EXPECT_NULL(f, tg_tensor_new(TG_F32, TG_DEVICE_CPU, 2, SHAPE(INT64_MAX / 2, 3)));
}

BAD_INPUT(tg_tensor_new, "device", "a device that does not exist")
{
    BI_EXPECT_NULL(f, tg_tensor_new(TG_F32, (tg_device)5, 1, SHAPE(3)));
}

BAD_INPUT(tg_tensor_new, "ndim", "negative") { BI_EXPECT_NULL(f, tg_tensor_new(TG_F32, TG_DEVICE_CPU, -1, SHAPE(3))); }

BAD_INPUT(tg_tensor_free, "t", "a tensor the tape owns") { BI_EXPECT_NOTHING(f, tg_tensor_free(f->x)); }

BAD_INPUT(tg_tensor_free, "t", "a parameter") { BI_EXPECT_NOTHING(f, tg_tensor_free(f->weight)); }

/* ---- properties ------------------------------------------------------------------------------- */

BAD_INPUT(tg_numel, "t", "NULL") { BI_EXPECT_VALUE(f, tg_numel(NULL), 0); }

BAD_INPUT(tg_numel, "t", "ndim above TG_MAX_DIMS")
{
    tg_tensor *x = bi_bad_rank(f, f->x, TG_MAX_DIMS + 1);
    BI_EXPECT_VALUE(f, tg_numel(x), 0);
}

BAD_INPUT(tg_is_contiguous, "t", "NULL") { BI_EXPECT_VALUE(f, tg_is_contiguous(NULL), false); }

BAD_INPUT(tg_is_contiguous, "t", "ndim above TG_MAX_DIMS")
{
    tg_tensor *x = bi_bad_rank(f, f->x, 99);
    BI_EXPECT_VALUE(f, tg_is_contiguous(x), false);
}

BAD_INPUT(tg_same_shape, "a", "NULL") { BI_EXPECT_VALUE(f, tg_same_shape(NULL, f->x), false); }

BAD_INPUT(tg_same_shape, "b", "NULL") { BI_EXPECT_VALUE(f, tg_same_shape(f->x, NULL), false); }

BAD_INPUT(tg_describe, "buf", "NULL") { BI_EXPECT_NULL(f, tg_describe(f->x, NULL, 64)); }

BAD_INPUT(tg_describe, "size", "0")
{
    char buf[8];
    BI_EXPECT_NULL(f, tg_describe(f->x, buf, 0));
}

BAD_INPUT(tg_set_requires_grad, "t", "NULL") { BI_EXPECT_STATUS(f, tg_set_requires_grad(NULL, true)); }

BAD_INPUT(tg_set_requires_grad, "t", "i32 ids")
{
    tg_tensor *ids = bi_ids(f, 1, SHAPE(4), 3);
    BI_EXPECT_STATUS(f, tg_set_requires_grad(ids, true));
}

BAD_INPUT(tg_set_requires_grad, "t", "an op's output") { BI_EXPECT_STATUS(f, tg_set_requires_grad(f->loss, false)); }

BAD_INPUT(tg_set_requires_grad, "t", "a parameter, switched off")
{
    BI_EXPECT_STATUS(f, tg_set_requires_grad(f->weight, false));
}

BAD_INPUT(tg_zero_grad, "t", "NULL") { BI_EXPECT_STATUS(f, tg_zero_grad(NULL)); }

BAD_INPUT(tg_zero_grad, "t", "no storage")
{
    tg_tensor *arg = bi_no_storage(f, f->x);
    BI_EXPECT_STATUS(f, tg_zero_grad(arg));
}

/* ---- element access ---------------------------------------------------------------------------- */

BAD_INPUT(tg_data, "t", "NULL") { BI_EXPECT_NULL(f, tg_data(NULL)); }

BAD_INPUT(tg_data, "t", "claims CUDA, data on the host")
{
    tg_tensor *arg = bi_fake_device(f, f->x);
    BI_EXPECT_NULL(f, tg_data(arg));
}

BAD_INPUT(tg_data, "t", "released for recompute")
{
    tg_tensor *arg = bi_released(f, RANDN(2, 3));
    BI_EXPECT_NULL(f, tg_data(arg));
}

BAD_INPUT(tg_get, "t", "NULL") { BI_EXPECT_NAN(f, tg_get(NULL, SHAPE(0, 0))); }

BAD_INPUT(tg_get, "index", "NULL") { BI_EXPECT_NAN(f, tg_get(f->weight, NULL)); }

BAD_INPUT(tg_get, "index", "past the shape") { BI_EXPECT_NAN(f, tg_get(f->weight, SHAPE(4, 0))); }

BAD_INPUT(tg_get, "index", "negative") { BI_EXPECT_NAN(f, tg_get(f->weight, SHAPE(0, -1))); }

BAD_INPUT(tg_get, "t", "released for recompute")
{
    tg_tensor *arg = bi_released(f, RANDN(2, 3));
    BI_EXPECT_NAN(f, tg_get(arg, SHAPE(0, 0)));
}

BAD_INPUT(tg_set, "index", "past the shape") { BI_EXPECT_NOTHING(f, tg_set(f->weight, SHAPE(0, 3), 1.0)); }

BAD_INPUT(tg_set, "index", "NULL") { BI_EXPECT_NOTHING(f, tg_set(f->weight, NULL, 1.0)); }

BAD_INPUT(tg_set, "t", "NULL") { BI_EXPECT_NOTHING(f, tg_set(NULL, SHAPE(0, 0), 1.0)); }

BAD_INPUT(tg_set, "value", "NaN into i32")
{
    tg_tensor *ids = bi_ids(f, 1, SHAPE(4), 3);
    BI_EXPECT_NOTHING(f, tg_set(ids, SHAPE(1), NAN));
}

BAD_INPUT(tg_set, "value", "1e12 into i32")
{
    tg_tensor *ids = bi_ids(f, 1, SHAPE(4), 3);
    BI_EXPECT_NOTHING(f, tg_set(ids, SHAPE(1), 1e12));
}

BAD_INPUT(tg_get_flat, "flat_index", "past the end") { BI_EXPECT_NAN(f, tg_get_flat(f->weight, 12)); }

BAD_INPUT(tg_get_flat, "flat_index", "negative") { BI_EXPECT_NAN(f, tg_get_flat(f->weight, -1)); }

BAD_INPUT(tg_get_flat, "t", "NULL") { BI_EXPECT_NAN(f, tg_get_flat(NULL, 0)); }

BAD_INPUT(tg_set_flat, "flat_index", "past the end") { BI_EXPECT_NOTHING(f, tg_set_flat(f->weight, 12, 5.0)); }

BAD_INPUT(tg_set_flat, "flat_index", "INT64_MIN") { BI_EXPECT_NOTHING(f, tg_set_flat(f->bias, INT64_MIN, 5.0)); }

BAD_INPUT(tg_set_flat, "value", "-inf into i32")
{
    tg_tensor *ids = bi_ids(f, 1, SHAPE(4), 3);
    BI_EXPECT_NOTHING(f, tg_set_flat(ids, 0, -INFINITY));
}

BAD_INPUT(tg_set_flat, "t", "claims CUDA, data on the host")
{
    tg_tensor *arg = bi_fake_device(f, f->weight);
    BI_EXPECT_NOTHING(f, tg_set_flat(arg, 0, 5.0));
}

BAD_INPUT(tg_item, "t", "six elements")
{
    tg_tensor *arg = RANDN(2, 3);
    BI_EXPECT_NAN(f, tg_item(arg));
}

BAD_INPUT(tg_item, "t", "NULL") { BI_EXPECT_NAN(f, tg_item(NULL)); }

BAD_INPUT(tg_copy_from_host, "host", "NULL") { BI_EXPECT_STATUS(f, tg_copy_from_host(f->weight, NULL, TG_F32)); }

BAD_INPUT(tg_copy_from_host, "host_dtype", "a dtype that does not exist")
{
    float host[12] = {0};
    BI_EXPECT_STATUS(f, tg_copy_from_host(f->weight, host, (tg_dtype)12));
}

BAD_INPUT(tg_copy_from_host, "t", "NULL")
{
    float host[12] = {0};
    BI_EXPECT_STATUS(f, tg_copy_from_host(NULL, host, TG_F32));
}

BAD_INPUT(tg_copy_from_host, "host", "NaN into i32")
{
    tg_tensor *ids = bi_ids(f, 1, SHAPE(3), 3);
    double host[3] = {1, NAN, 2};
    BI_EXPECT_STATUS(f, tg_copy_from_host(ids, host, TG_F64));
}

BAD_INPUT(tg_copy_from_host, "t", "released for recompute")
{
    float host[6] = {0};
    tg_tensor *arg = bi_released(f, RANDN(2, 3));
    BI_EXPECT_STATUS(f, tg_copy_from_host(arg, host, TG_F32));
}

BAD_INPUT(tg_copy_to_host, "host", "NULL") { BI_EXPECT_STATUS(f, tg_copy_to_host(f->weight, NULL, TG_F32)); }

BAD_INPUT(tg_copy_to_host, "host_dtype", "a dtype that does not exist")
{
    float host[12];
    BI_EXPECT_STATUS(f, tg_copy_to_host(f->weight, host, (tg_dtype)-3));
}

BAD_INPUT(tg_copy_to_host, "t", "no storage")
{
    float host[12];
    tg_tensor *arg = bi_no_storage(f, f->weight);
    BI_EXPECT_STATUS(f, tg_copy_to_host(arg, host, TG_F32));
}

BAD_INPUT(tg_copy_to_host, "t", "NaN values into i32")
{
    int32_t host[3];
    tg_tensor *x = RANDN(3);
    tg_set_flat(x, 1, NAN);
    BI_EXPECT_STATUS(f, tg_copy_to_host(x, host, TG_I32));
}

BAD_INPUT(tg_copy, "src", "NULL") { BI_EXPECT_STATUS(f, tg_copy(f->weight, NULL)); }

BAD_INPUT(tg_copy, "dst", "NULL") { BI_EXPECT_STATUS(f, tg_copy(NULL, f->weight)); }

BAD_INPUT(tg_copy, "src", "another shape")
{
    tg_tensor *arg = RANDN(3, 4);
    BI_EXPECT_STATUS(f, tg_copy(f->weight, arg));
}

BAD_INPUT(tg_copy, "dst", "i32")
{
    tg_tensor *arg = bi_ids(f, 2, SHAPE(4, 3), 2);
    BI_EXPECT_STATUS(f, tg_copy(arg, f->weight));
}

BAD_INPUT(tg_copy, "src", "claims CUDA, data on the host")
{
    tg_tensor *arg = bi_fake_device(f, RANDN(4, 3));
    BI_EXPECT_STATUS(f, tg_copy(f->weight, arg));
}

BAD_INPUT(tg_copy, "src", "released for recompute")
{
    tg_tensor *arg = bi_released(f, RANDN(4, 3));
    BI_EXPECT_STATUS(f, tg_copy(f->weight, arg));
}

BAD_INPUT(tg_fill, "t", "NULL") { BI_EXPECT_STATUS(f, tg_fill(NULL, 1.0)); }

BAD_INPUT(tg_fill, "value", "NaN into i32")
{
    tg_tensor *arg = bi_ids(f, 1, SHAPE(3), 3);
    BI_EXPECT_STATUS(f, tg_fill(arg, NAN));
}

BAD_INPUT(tg_fill, "value", "3e9 into i32")
{
    tg_tensor *arg = bi_ids(f, 1, SHAPE(3), 3);
    BI_EXPECT_STATUS(f, tg_fill(arg, 3e9));
}

BAD_INPUT(tg_fill, "t", "released for recompute")
{
    tg_tensor *arg = bi_released(f, RANDN(3));
    BI_EXPECT_STATUS(f, tg_fill(arg, 1.0));
}

/* ---- the tape and backward -------------------------------------------------------------------- */

BAD_INPUT(tg_tape_reset, "tape", "NULL") { BI_EXPECT_NOTHING(f, tg_tape_reset(NULL)); }

BAD_INPUT(tg_tape_set_grad_enabled, "tape", "NULL")
{
    BI_EXPECT_VALUE(f, tg_tape_set_grad_enabled(NULL, false), false);
}

BAD_INPUT(tg_tape_grad_enabled, "tape", "NULL") { BI_EXPECT_VALUE(f, tg_tape_grad_enabled(NULL), false); }

BAD_INPUT(tg_tape_node_count, "tape", "NULL") { BI_EXPECT_VALUE(f, tg_tape_node_count(NULL), 0); }

BAD_INPUT(tg_tape_bytes_in_use, "tape", "NULL") { BI_EXPECT_VALUE(f, tg_tape_bytes_in_use(NULL), 0); }

BAD_INPUT(tg_tape_peak_bytes, "tape", "NULL") { BI_EXPECT_VALUE(f, tg_tape_peak_bytes(NULL), 0); }

BAD_INPUT(tg_backward, "tape", "NULL") { BI_EXPECT_STATUS(f, tg_backward(NULL, f->loss)); }

BAD_INPUT(tg_backward, "loss", "NULL") { BI_EXPECT_STATUS(f, tg_backward(f->tape, NULL)); }

BAD_INPUT(tg_backward, "loss", "a tensor of six elements")
{
    tg_tensor *y = tg_tanh(f->tape, RANDN(2, 3));
    BI_EXPECT_STATUS(f, tg_backward(f->tape, y));
}

BAD_INPUT(tg_backward, "loss", "a loss recorded on another tape")
{
    tg_tape *other = tg_tape_create();
    tg_tensor *leaf = tg_empty(other, TG_F32, TG_DEVICE_CPU, 1, SHAPE(3));
    tg_fill(leaf, 1.0);
    tg_set_requires_grad(leaf, true);
    tg_tensor *loss = tg_sum_all(other, leaf);
    BI_EXPECT_STATUS(f, tg_backward(f->tape, loss));
    tg_tape_free(other);
}

BAD_INPUT(tg_backward, "loss", "a leaf that needs no gradient")
{
    tg_tensor *arg = bi_randn(f, TG_F32, 1, SHAPE(1));
    BI_EXPECT_STATUS(f, tg_backward(f->tape, arg));
}

BAD_INPUT(tg_backward, "loss", "i32")
{
    tg_tensor *arg = bi_ids(f, 1, SHAPE(1), 3);
    BI_EXPECT_STATUS(f, tg_backward(f->tape, arg));
}

BAD_INPUT(tg_backward, "loss", "claims CUDA, data on the host")
{
    tg_tensor *arg = bi_fake_device(f, f->loss);
    BI_EXPECT_STATUS(f, tg_backward(f->tape, arg));
}

BAD_INPUT(tg_backward_with_grad, "output_grad", "NULL")
{
    BI_EXPECT_STATUS(f, tg_backward_with_grad(f->tape, f->loss, NULL));
}

BAD_INPUT(tg_backward_with_grad, "output_grad", "another shape")
{
    tg_tensor *arg = RANDN(2);
    BI_EXPECT_STATUS(f, tg_backward_with_grad(f->tape, f->loss, arg));
}

BAD_INPUT(tg_backward_with_grad, "output_grad", "another dtype")
{
    tg_tensor *arg = bi_randn(f, TG_F64, 1, SHAPE(1));
    BI_EXPECT_STATUS(f, tg_backward_with_grad(f->tape, f->loss, arg));
}

BAD_INPUT(tg_backward_with_grad, "output_grad", "released for recompute")
{
    tg_tensor *arg = bi_released(f, RANDN(1));
    BI_EXPECT_STATUS(f, tg_backward_with_grad(f->tape, f->loss, arg));
}

BAD_INPUT(tg_backward_with_grad, "output", "NULL")
{
    tg_tensor *arg = RANDN(1);
    BI_EXPECT_STATUS(f, tg_backward_with_grad(f->tape, NULL, arg));
}

BAD_INPUT(tg_backward_with_grad, "output", "recorded on another tape")
{
    tg_tape *other = tg_tape_create();
    tg_tensor *leaf = tg_empty(other, TG_F32, TG_DEVICE_CPU, 1, SHAPE(3));
    tg_fill(leaf, 1.0);
    tg_set_requires_grad(leaf, true);
    tg_tensor *y = tg_tanh(other, leaf);
    tg_tensor *arg = RANDN(3);
    BI_EXPECT_STATUS(f, tg_backward_with_grad(f->tape, y, arg));
    tg_tape_free(other);
}

BAD_INPUT(tg_backward_with_grad, "tape", "NULL")
{
    tg_tensor *arg = RANDN(1);
    BI_EXPECT_STATUS(f, tg_backward_with_grad(NULL, f->loss, arg));
}

/* ---- recording custom ops ----------------------------------------------------------------------- */

static tg_status no_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    (void)node, (void)dy, (void)dx;
    return TG_OK;
}

/* A record of y = op(x) for a leaf x, to be broken by each case. */
static tg_op_record valid_record(bi_fixture *f, tg_tensor **io)
{
    io[0] = RANDN(3);
    io[1] = bi_randn(f, TG_F32, 1, SHAPE(3));
    return (tg_op_record){
        .op = "custom", .backward = no_backward, .inputs = io, .n_inputs = 1, .outputs = io + 1, .n_outputs = 1};
}

BAD_INPUT(tg_record, "tape", "NULL")
{
    tg_tensor *io[2];
    tg_op_record r = valid_record(f, io);
    BI_EXPECT_STATUS(f, tg_record(NULL, &r));
}

BAD_INPUT(tg_record, "record", "NULL") { BI_EXPECT_STATUS(f, tg_record(f->tape, NULL)); }

BAD_INPUT(tg_record, "backward", "NULL")
{
    tg_tensor *io[2];
    tg_op_record r = valid_record(f, io);
    r.backward = NULL;
    BI_EXPECT_STATUS(f, tg_record(f->tape, &r));
}

BAD_INPUT(tg_record, "n_outputs", "0")
{
    tg_tensor *io[2];
    tg_op_record r = valid_record(f, io);
    r.n_outputs = 0;
    BI_EXPECT_STATUS(f, tg_record(f->tape, &r));
}

BAD_INPUT(tg_record, "n_inputs", "negative")
{
    tg_tensor *io[2];
    tg_op_record r = valid_record(f, io);
    r.n_inputs = -2;
    BI_EXPECT_STATUS(f, tg_record(f->tape, &r));
}

BAD_INPUT(tg_record, "inputs", "NULL with one input")
{
    tg_tensor *io[2];
    tg_op_record r = valid_record(f, io);
    r.inputs = NULL;
    BI_EXPECT_STATUS(f, tg_record(f->tape, &r));
}

BAD_INPUT(tg_record, "outputs", "NULL with one output")
{
    tg_tensor *io[2];
    tg_op_record r = valid_record(f, io);
    r.outputs = NULL;
    BI_EXPECT_STATUS(f, tg_record(f->tape, &r));
}

BAD_INPUT(tg_record, "ctx", "NULL with ctx_size 16")
{
    tg_tensor *io[2];
    tg_op_record r = valid_record(f, io);
    r.ctx_size = 16;
    BI_EXPECT_STATUS(f, tg_record(f->tape, &r));
}

BAD_INPUT(tg_record, "outputs", "an output that is a parameter")
{
    tg_tensor *io[2];
    tg_op_record r = valid_record(f, io);
    io[1] = f->weight;
    BI_EXPECT_STATUS(f, tg_record(f->tape, &r));
}

BAD_INPUT(tg_node_needs_grad, "node", "NULL") { BI_EXPECT_VALUE(f, tg_node_needs_grad(NULL, 0), false); }

BAD_INPUT(tg_node_needs_grad, "input_index", "past the inputs")
{
    BI_EXPECT_VALUE(f, tg_node_needs_grad(f->loss->producer, 5), false);
}

BAD_INPUT(tg_node_grad_buffer, "node", "NULL") { BI_EXPECT_NULL(f, tg_node_grad_buffer(NULL, 0)); }

BAD_INPUT(tg_node_grad_buffer, "input_index", "negative")
{
    BI_EXPECT_NULL(f, tg_node_grad_buffer(f->loss->producer, -1));
}

BAD_INPUT(tg_tape_get_mark, "tape", "NULL") { BI_EXPECT_NOTHING(f, (void)tg_tape_get_mark(NULL)); }

BAD_INPUT(tg_tape_rewind, "tape", "NULL")
{
    tg_tape_mark mark = tg_tape_get_mark(f->tape);
    BI_EXPECT_NOTHING(f, tg_tape_rewind(NULL, mark));
}

BAD_INPUT(tg_tape_rewind, "mark", "a mark of another tape")
{
    tg_tape *other = tg_tape_create();
    tg_tape_mark mark = tg_tape_get_mark(other);
    BI_EXPECT_NOTHING(f, tg_tape_rewind(f->tape, mark));
    tg_tape_free(other);
}

BAD_INPUT(tg_tape_rewind, "mark", "a mark from after the present")
{
    tg_tape_mark mark = tg_tape_get_mark(f->tape);
    mark.n_nodes += 3;
    BI_EXPECT_NOTHING(f, tg_tape_rewind(f->tape, mark));
}

BAD_INPUT(tg_tape_alloc, "tape", "NULL") { BI_EXPECT_NULL(f, tg_tape_alloc(NULL, 16)); }

BAD_INPUT(tg_tape_alloc, "nbytes", "SIZE_MAX") { BI_EXPECT_NULL(f, tg_tape_alloc(f->tape, SIZE_MAX)); }

BAD_INPUT(tg_tape_alloc, "nbytes", "SIZE_MAX - 63") { BI_EXPECT_NULL(f, tg_tape_alloc(f->tape, SIZE_MAX - 63)); }

/* ---- released and given-back activations ---------------------------------------------------- */

static tg_status recompute_nothing(tg_tape *tape, const void *ctx, tg_tensor **out)
{
    (void)tape, (void)ctx, (void)out;
    return TG_ERR_INVALID;
}

#define RECOMPUTE(tensors, n) tg_recompute_in_backward(f->tape, n, tensors, recompute_nothing, NULL, 0)

BAD_INPUT(tg_recompute_in_backward, "tape", "NULL")
{
    tg_tensor *y = tg_tanh(f->tape, RANDN(3));
    BI_EXPECT_STATUS(f, tg_recompute_in_backward(NULL, 1, &y, recompute_nothing, NULL, 0));
}

BAD_INPUT(tg_recompute_in_backward, "n", "0")
{
    tg_tensor *y = tg_tanh(f->tape, RANDN(3));
    BI_EXPECT_STATUS(f, RECOMPUTE(&y, 0));
}

BAD_INPUT(tg_recompute_in_backward, "n", "9")
{
    tg_tensor *y[9];
    for (int i = 0; i < 9; i++) y[i] = tg_tanh(f->tape, RANDN(3));
    BI_EXPECT_STATUS(f, RECOMPUTE(y, 9));
}

BAD_INPUT(tg_recompute_in_backward, "tensors", "NULL") { BI_EXPECT_STATUS(f, RECOMPUTE(NULL, 1)); }

BAD_INPUT(tg_recompute_in_backward, "fn", "NULL")
{
    tg_tensor *y = tg_tanh(f->tape, RANDN(3));
    BI_EXPECT_STATUS(f, tg_recompute_in_backward(f->tape, 1, &y, NULL, NULL, 0));
}

BAD_INPUT(tg_recompute_in_backward, "ctx", "NULL with ctx_size 8")
{
    tg_tensor *y = tg_tanh(f->tape, RANDN(3));
    BI_EXPECT_STATUS(f, tg_recompute_in_backward(f->tape, 1, &y, recompute_nothing, NULL, 8));
}

BAD_INPUT(tg_recompute_in_backward, "tensors[0]", "a leaf")
{
    tg_tensor *x = RANDN(3);
    BI_EXPECT_STATUS(f, RECOMPUTE(&x, 1));
}

BAD_INPUT(tg_recompute_in_backward, "tensors[0]", "a parameter") { BI_EXPECT_STATUS(f, RECOMPUTE(&f->weight, 1)); }

BAD_INPUT(tg_recompute_in_backward, "tensors[0]", "a view of part of an activation")
{
    tg_tensor *y = tg_slice(f->tape, tg_tanh(f->tape, RANDN(4)), 0, 0, 2, 1);
    BI_EXPECT_STATUS(f, RECOMPUTE(&y, 1));
}

BAD_INPUT(tg_recompute_in_backward, "tensors[1]", "the same tensor twice")
{
    tg_tensor *y = tg_tanh(f->tape, RANDN(3));
    tg_tensor *twice[2] = {y, y};
    BI_EXPECT_STATUS(f, RECOMPUTE(twice, 2));
}

BAD_INPUT(tg_recompute_in_backward, "tensors[0]", "already released")
{
    tg_tensor *y = bi_released(f, RANDN(3));
    BI_EXPECT_STATUS(f, RECOMPUTE(&y, 1));
}

BAD_INPUT(tg_recompute_in_backward, "tensors[0]", "an activation of another tape")
{
    tg_tape *other = tg_tape_create();
    tg_tensor *leaf = tg_empty(other, TG_F32, TG_DEVICE_CPU, 1, SHAPE(3));
    tg_fill(leaf, 1.0);
    tg_set_requires_grad(leaf, true);
    tg_tensor *y = tg_tanh(other, leaf);
    BI_EXPECT_STATUS(f, RECOMPUTE(&y, 1));
    tg_tape_free(other);
}

BAD_INPUT(tg_recompute_in_backward, "tensors[0]", "i32 ids")
{
    tg_tensor *ids = bi_ids(f, 1, SHAPE(3), 2);
    BI_EXPECT_STATUS(f, RECOMPUTE(&ids, 1));
}

BAD_INPUT(tg_give_back, "tape", "NULL")
{
    tg_tensor *y = tg_tanh(f->tape, RANDN(3));
    BI_EXPECT_STATUS(f, tg_give_back(NULL, 1, &y));
}

BAD_INPUT(tg_give_back, "n", "-1")
{
    tg_tensor *y = tg_tanh(f->tape, RANDN(3));
    BI_EXPECT_STATUS(f, tg_give_back(f->tape, -1, &y));
}

BAD_INPUT(tg_give_back, "tensors", "NULL") { BI_EXPECT_STATUS(f, tg_give_back(f->tape, 1, NULL)); }

BAD_INPUT(tg_give_back, "tensors[0]", "NULL")
{
    tg_tensor *none = NULL;
    BI_EXPECT_STATUS(f, tg_give_back(f->tape, 1, &none));
}

BAD_INPUT(tg_give_back, "tensors[0]", "a parameter") { BI_EXPECT_STATUS(f, tg_give_back(f->tape, 1, &f->bias)); }

BAD_INPUT(tg_give_back, "tensors[0]", "a leaf")
{
    tg_tensor *x = RANDN(3);
    BI_EXPECT_STATUS(f, tg_give_back(f->tape, 1, &x));
}

BAD_INPUT(tg_give_back, "tensors[1]", "a view sharing the first one's bytes")
{
    tg_tensor *y = tg_tanh(f->tape, RANDN(2, 3));
    tg_tensor *pair[2] = {y, tg_reshape(f->tape, y, 1, SHAPE(6))};
    BI_EXPECT_STATUS(f, tg_give_back(f->tape, 2, pair));
}

BAD_INPUT(tg_give_back, "tensors[0]", "already given back")
{
    tg_tensor *y = bi_released(f, RANDN(3));
    BI_EXPECT_STATUS(f, tg_give_back(f->tape, 1, &y));
}

/* ---- the generator ---------------------------------------------------------------------------- */

BAD_INPUT(tg_rng_seed, "rng", "NULL") { BI_EXPECT_NOTHING(f, tg_rng_seed(NULL, 7)); }

BAD_INPUT(tg_rng_next, "rng", "NULL") { BI_EXPECT_VALUE(f, tg_rng_next(NULL), 0); }

BAD_INPUT(tg_rng_uniform, "rng", "NULL") { BI_EXPECT_NAN(f, tg_rng_uniform(NULL)); }

BAD_INPUT(tg_rng_normal, "rng", "NULL") { BI_EXPECT_NAN(f, tg_rng_normal(NULL)); }

BAD_INPUT(tg_rng_below, "bound", "0") { BI_EXPECT_VALUE(f, tg_rng_below(&f->rng, 0), -1); }

BAD_INPUT(tg_rng_below, "bound", "negative") { BI_EXPECT_VALUE(f, tg_rng_below(&f->rng, INT64_MIN), -1); }

BAD_INPUT(tg_rng_below, "rng", "NULL") { BI_EXPECT_VALUE(f, tg_rng_below(NULL, 10), -1); }

BAD_INPUT(tg_fill_uniform, "high", "low above high")
{
    BI_EXPECT_STATUS(f, tg_fill_uniform(f->weight, &f->rng, 1.0, -1.0));
}

BAD_INPUT(tg_fill_uniform, "low", "NaN") { BI_EXPECT_STATUS(f, tg_fill_uniform(f->weight, &f->rng, NAN, 1.0)); }

BAD_INPUT(tg_fill_uniform, "high", "infinite")
{
    BI_EXPECT_STATUS(f, tg_fill_uniform(f->weight, &f->rng, 0.0, INFINITY));
}

BAD_INPUT(tg_fill_uniform, "rng", "NULL") { BI_EXPECT_STATUS(f, tg_fill_uniform(f->weight, NULL, 0.0, 1.0)); }

BAD_INPUT(tg_fill_uniform, "t", "NULL") { BI_EXPECT_STATUS(f, tg_fill_uniform(NULL, &f->rng, 0.0, 1.0)); }

BAD_INPUT(tg_fill_uniform, "t", "i32 ids")
{
    tg_tensor *arg = bi_ids(f, 1, SHAPE(3), 2);
    BI_EXPECT_STATUS(f, tg_fill_uniform(arg, &f->rng, 0.0, 1.0));
}

BAD_INPUT(tg_fill_uniform, "t", "claims CUDA, data on the host")
{
    tg_tensor *arg = bi_fake_device(f, f->weight);
    BI_EXPECT_STATUS(f, tg_fill_uniform(arg, &f->rng, 0.0, 1.0));
}

BAD_INPUT(tg_fill_normal, "stddev", "negative") { BI_EXPECT_STATUS(f, tg_fill_normal(f->weight, &f->rng, 0.0, -1.0)); }

BAD_INPUT(tg_fill_normal, "mean", "NaN") { BI_EXPECT_STATUS(f, tg_fill_normal(f->weight, &f->rng, NAN, 1.0)); }

BAD_INPUT(tg_fill_normal, "stddev", "infinite")
{
    BI_EXPECT_STATUS(f, tg_fill_normal(f->bias, &f->rng, 0.0, INFINITY));
}

BAD_INPUT(tg_fill_normal, "rng", "NULL") { BI_EXPECT_STATUS(f, tg_fill_normal(f->weight, NULL, 0.0, 1.0)); }

BAD_INPUT(tg_fill_normal, "t", "released for recompute")
{
    tg_tensor *arg = bi_released(f, RANDN(3));
    BI_EXPECT_STATUS(f, tg_fill_normal(arg, &f->rng, 0.0, 1.0));
}

BAD_INPUT(tg_fill_normal, "t", "no storage")
{
    tg_tensor *arg = bi_no_storage(f, f->weight);
    BI_EXPECT_STATUS(f, tg_fill_normal(arg, &f->rng, 0.0, 1.0));
}

/* ---- graphs ------------------------------------------------------------------------------------ */

BAD_INPUT(tg_graph_begin, "device", "the CPU") { BI_EXPECT_STATUS(f, tg_graph_begin(TG_DEVICE_CPU)); }

BAD_INPUT(tg_graph_begin, "device", "a device that does not exist")
{
    BI_EXPECT_STATUS(f, tg_graph_begin((tg_device)9));
}

BAD_INPUT(tg_graph_end, "capture", "no capture running") { BI_EXPECT_NULL(f, tg_graph_end()); }

BAD_INPUT(tg_graph_replay, "graph", "NULL") { BI_EXPECT_STATUS(f, tg_graph_replay(NULL)); }

BAD_INPUT(tg_graph_node_count, "graph", "NULL") { BI_EXPECT_VALUE(f, tg_graph_node_count(NULL), 0); }
