/* ops/convert.c: contiguous copies, dtype conversion and moves between devices.
 * All are copies, so their backward is a copy back: dx = dy (in x's dtype, on x's device).
 * tg_copy handles every device pair itself (core/tensor.c), so one entry serves both slots. */
#include "core/internal.h"
#include "tapegrad/ops.h"

typedef tg_status (*copy_kernel)(tg_tensor *dst, const tg_tensor *src);
static const copy_kernel copy[TG_DEVICE_COUNT] = TG_KERNELS(tg_copy, tg_copy);

static tg_status copy_backward(tg_node *node, tg_tensor *const *dy, tg_tensor **dx)
{
    const tg_tensor *x = node->inputs[0];
    dx[0] = tg_node_grad_buffer(node, 0);
    if (!dx[0]) return TG_ERR_NOMEM;
    return TG_DISPATCH(node->op, copy, x->device, dx[0], dy[0]);
}

static tg_tensor *copy_as(tg_tape *tape, const char *name, tg_tensor *x, tg_dtype dtype, tg_device device)
{
    tg_tape_mark mark = tg_tape_get_mark(tape);
    tg_tensor *y = tg_empty(tape, dtype, device, x->ndim, x->shape);
    if (!y || TG_DISPATCH(name, copy, x->device, y, x) != TG_OK) return tg_op_fail(tape, mark);
    tg_op_record record = {name, copy_backward, &x, 1, &y, 1, NULL, 0};
    if (tg_record(tape, &record) != TG_OK) return tg_op_fail(tape, mark);
    return y;
}

tg_tensor *tg_contiguous(tg_tape *tape, tg_tensor *x)
{
    const char *name = "tg_contiguous";
    if (!tg_check_tape(name, tape) || !tg_check_tensor(name, "x", x) || !tg_check_device_usable(name, "x", x))
        return NULL;
    if (tg_is_contiguous(x)) return x;
    return copy_as(tape, name, x, x->dtype, x->device);
}

tg_tensor *tg_to_dtype(tg_tape *tape, tg_tensor *x, tg_dtype dtype)
{
    const char *name = "tg_to_dtype";
    if (!tg_check_tape(name, tape) || !tg_check_float(name, "x", x) || !tg_check_device_usable(name, "x", x))
        return NULL;
    if (!tg_dtype_is_float(dtype)) {
        const char *names[1] = {"x"};
        const tg_tensor *tensors[1] = {x};
        tg_error_tensors(TG_ERR_DTYPE, 1, names, tensors, "%s: the target dtype must be a float dtype, not %s", name,
                         tg_dtype_name(dtype));
        return NULL;
    }
    return copy_as(tape, name, x, dtype, x->device);
}

tg_tensor *tg_to_device(tg_tape *tape, tg_tensor *x, tg_device device)
{
    const char *name = "tg_to_device";
    if (!tg_check_tape(name, tape) || !tg_check_tensor(name, "x", x) || !tg_check_device_usable(name, "x", x))
        return NULL;
    tg_device target = tg_device_resolve(device);
    if (!tg_device_has_tensors(target)) {
        const char *names[1] = {"x"};
        const tg_tensor *tensors[1] = {x};
        tg_error_tensors(TG_ERR_DEVICE, 1, names, tensors, "%s: %s is not available in this build or on this machine",
                         name, tg_device_name(device));
        return NULL;
    }
    if (target == x->device) return x;
    return copy_as(tape, name, x, x->dtype, target);
}
