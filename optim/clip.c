/* optim/clip.c: the gradients' global L2 norm over a whole store, and clipping to a
 * maximum norm. The norm is a fixed-order sum (kernels/optim.h), so the same gradients
 * always give the same norm, and so the same clipped step. */
#include "core/internal.h"
#include "kernels/optim.h"

#include <math.h>

static const tg_sum_squares_kernel sum_squares[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_sum_squares, TG_CUDA_KERNEL(tg_cuda_sum_squares));
static const tg_scale_kernel scale[TG_DEVICE_COUNT] = TG_KERNELS(tg_cpu_scale, TG_CUDA_KERNEL(tg_cuda_scale));

static tg_status norm_of(const char *op, tg_params *params, double *norm)
{
    if (!params || !norm) return tg_set_error(TG_ERR_INVALID, "%s: params and norm must not be NULL", op);
    *norm = 0.0;
    const tg_tensor *first = tg_params_get(params, 0);
    if (!first) return TG_OK; /* an empty store: a norm of 0 */
    double sum = 0.0;
    tg_status status = TG_DISPATCH(op, sum_squares, first->device, tg_params_grad(params), first->dtype,
                                   tg_params_numel(params), &sum);
    *norm = sqrt(sum);
    return status;
}

tg_status tg_params_grad_norm(tg_params *params, double *norm) { return norm_of("tg_params_grad_norm", params, norm); }

tg_status tg_params_clip_grad_norm(tg_params *params, double max_norm, double *norm_before)
{
    const char *op = "tg_params_clip_grad_norm";
    if (!(max_norm > 0) || !isfinite(max_norm))
        return tg_set_error(TG_ERR_INVALID, "%s: max_norm must be finite and > 0, not %g", op, max_norm);
    double norm = 0.0;
    tg_status status = norm_of(op, params, &norm);
    if (status != TG_OK) return status;
    if (norm_before) *norm_before = norm;
    if (!isfinite(norm))
        return tg_set_error(TG_ERR_STATE, "%s: the gradient norm is %g; gradients left unchanged", op, norm);
    if (norm <= max_norm) return TG_OK;
    const tg_tensor *first = tg_params_get(params, 0);
    return TG_DISPATCH(op, scale, first->device, tg_params_grad(params), first->dtype, tg_params_numel(params),
                       max_norm / norm);
}
