/* kernels/elementwise.h: the elementwise kernels behind ops/elementwise.c.
 * One entry point per device for unary forward, unary backward and binary forward. */
#ifndef TAPEGRAD_KERNELS_ELEMENTWISE_H
#define TAPEGRAD_KERNELS_ELEMENTWISE_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TG_UNARY_SCALE, /* param · x */
    TG_UNARY_NEG,
    TG_UNARY_EXP,
    TG_UNARY_LOG,
    TG_UNARY_TANH,
    TG_UNARY_SIGMOID,
    TG_UNARY_SILU,
    TG_UNARY_SOFTPLUS,
    TG_UNARY_RELU,
    TG_UNARY_COUNT, /* not an op: how many there are (the CUDA side asserts it has them all) */
} tg_unary_op;

typedef enum {
    TG_BINARY_ADD,
    TG_BINARY_SUB,
    TG_BINARY_MUL,
    TG_BINARY_DIV,
    TG_BINARY_COUNT, /* not an op: how many there are */
} tg_binary_op;

/* y = f(x); y is contiguous with x's shape. */
typedef tg_status (*tg_unary_fwd_kernel)(tg_unary_op op, double param, const tg_tensor *x, tg_tensor *y);
/* dx = dy · f'(x), given x and y = f(x); dx is contiguous. */
typedef tg_status (*tg_unary_bwd_kernel)(tg_unary_op op, double param, const tg_tensor *x, const tg_tensor *y,
                                         const tg_tensor *dy, tg_tensor *dx);
/* out = a ∘ b with broadcasting; out is contiguous with the broadcast shape. */
typedef tg_status (*tg_binary_fwd_kernel)(tg_binary_op op, const tg_tensor *a, const tg_tensor *b, tg_tensor *out);

tg_status tg_cpu_unary_fwd(tg_unary_op op, double param, const tg_tensor *x, tg_tensor *y);
tg_status tg_cpu_unary_bwd(tg_unary_op op, double param, const tg_tensor *x, const tg_tensor *y, const tg_tensor *dy,
                           tg_tensor *dx);
tg_status tg_cpu_binary_fwd(tg_binary_op op, const tg_tensor *a, const tg_tensor *b, tg_tensor *out);

/* The same on CUDA (kernels/cuda/elementwise.cu). */
tg_status tg_cuda_unary_fwd(tg_unary_op op, double param, const tg_tensor *x, tg_tensor *y);
tg_status tg_cuda_unary_bwd(tg_unary_op op, double param, const tg_tensor *x, const tg_tensor *y, const tg_tensor *dy,
                            tg_tensor *dx);
tg_status tg_cuda_binary_fwd(tg_binary_op op, const tg_tensor *a, const tg_tensor *b, tg_tensor *out);

#ifdef __cplusplus
}
#endif

#endif
