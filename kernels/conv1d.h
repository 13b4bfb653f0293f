/* kernels/conv1d.h: the causal conv1d kernels behind ops/conv1d.c.
 *
 * Notation (docs/causal_conv1d.md): x (B, C, L), weight (C, K), xe = x with K−1 steps of history in
 * front (initial states, or zeros), so xe[j] = history[j] for j < K−1 and
 * xe[j] = x[j − K + 1] after. z[t] = bias + Σ_k w[k]·xe[t+k]; out[t] = act(z[t]). */
#ifndef TAPEGRAD_KERNELS_CONV1D_H
#define TAPEGRAD_KERNELS_CONV1D_H

#include "core/internal.h"
#include "tapegrad/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const tg_tensor *x;              /* (B, C, L), any strides */
    const tg_tensor *weight;         /* (C, K), any strides */
    const tg_tensor *bias;           /* (C) or NULL */
    const tg_tensor *initial_states; /* (B, C, K−1) or NULL for zeros */
    tg_activation activation;
} tg_conv1d_args;

/* out (B, C, L) any layout; final_states (B, C, K−1) or NULL. */
typedef tg_status (*tg_conv1d_fwd_kernel)(const tg_conv1d_args *args, tg_tensor *out, tg_tensor *final_states);

/* Gradients from dout (or NULL: zeros) and dfinal_states (or NULL: zeros). Any output
 * pointer may be NULL when that gradient is not wanted. dweight and dbias are reduced over
 * batch and time in a fixed order, so results are bitwise reproducible. */
typedef tg_status (*tg_conv1d_bwd_kernel)(const tg_conv1d_args *args, const tg_tensor *dout,
                                          const tg_tensor *dfinal_states, tg_tensor *dx, tg_tensor *dweight,
                                          tg_tensor *dbias, tg_tensor *dinitial_states);

tg_status tg_cpu_causal_conv1d_fwd(const tg_conv1d_args *args, tg_tensor *out, tg_tensor *final_states);
tg_status tg_cpu_causal_conv1d_bwd(const tg_conv1d_args *args, const tg_tensor *dout, const tg_tensor *dfinal_states,
                                   tg_tensor *dx, tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial_states);

/* The CUDA kernels (launched from kernels/cuda/conv1d.cu, written in kernels/cuda/conv1d/):
 * f32, bf16 and f16 storage, K ≤ 16. */
tg_status tg_cuda_causal_conv1d_fwd(const tg_conv1d_args *args, tg_tensor *out, tg_tensor *final_states);
tg_status tg_cuda_causal_conv1d_bwd(const tg_conv1d_args *args, const tg_tensor *dout, const tg_tensor *dfinal_states,
                                    tg_tensor *dx, tg_tensor *dweight, tg_tensor *dbias, tg_tensor *dinitial_states);

/* The CUDA kernel families a call can run on (kernels/cuda/conv1d.cu's selection table says
 * which runs when). The forward runs on all but ROW_TENSOR_CORES, the backward on all but
 * ROW_DIRECT and ROW_GROUPED. */
typedef enum {
    TG_CONV1D_AUTO = 0,            /* the selection table's choice */
    TG_CONV1D_ROW_DIRECT,          /* channel-first, a thread's steps from its neighbours' */
    TG_CONV1D_ROW_GROUPED,         /* the same, a block taking 2 or 4 short rows in turn */
    TG_CONV1D_ROW_SIDE_BY_SIDE,    /* channel-first rows shorter than a warp's steps */
    TG_CONV1D_ROW_STAGED,          /* channel-first spans staged in shared memory */
    TG_CONV1D_ROW_TENSOR_CORES,    /* the staged backward's products on tensor cores */
    TG_CONV1D_STREAM,              /* channel-last, a warp walking its channels in time */
    TG_CONV1D_STREAM_TENSOR_CORES, /* the same, products on tensor cores */
    TG_CONV1D_TILE,                /* any strides: channel × time tiles */
    TG_CONV1D_KERNELS              /* the count */
} tg_conv1d_kernel;

typedef enum { TG_CONV1D_FORWARD, TG_CONV1D_BACKWARD } tg_conv1d_pass;

/* For debugging and tests. The kernel's name ("row-direct", …; "?" outside the enum). */
const char *tg_conv1d_kernel_name(tg_conv1d_kernel kernel);
/* Whether the pass has a kernel of that family (on some shape). */
bool tg_conv1d_pass_has(tg_conv1d_pass pass, tg_conv1d_kernel kernel);
/* Makes every later CUDA call of the pass run `kernel` (TG_CONV1D_AUTO: the selection table
 * again), process-wide. A call the kernel cannot take fails with TG_ERR_INVALID saying why;
 * nothing is written. */
void tg_cuda_conv1d_force_kernel(tg_conv1d_pass pass, tg_conv1d_kernel kernel);
/* The kernel the calling thread's last CUDA call of the pass ran (TG_CONV1D_AUTO before any). */
tg_conv1d_kernel tg_cuda_conv1d_last_kernel(tg_conv1d_pass pass);
/* For the launcher: the kernel forced on the pass (TG_CONV1D_AUTO: none), and noting the one
 * a call runs. (These live in ops/conv1d.c, so that every build has them.) */
tg_conv1d_kernel tg_cuda_conv1d_forced_kernel(tg_conv1d_pass pass);
void tg_cuda_conv1d_note_kernel(tg_conv1d_pass pass, tg_conv1d_kernel kernel);

#ifdef __cplusplus
}
#endif

#endif
