/* kernels/scan.h: the selective scan kernels behind ops/scan.c.
 *
 * Notation: u, delta, z (B, D, L); A (D, N); Bm, Cm (B, N, L); per (b, d) the state is a
 * vector h of N entries. dt = softplus(delta + bias) or delta + bias, Ā_t = exp(dt_t·A),
 *   h_t = Ā_t ⊙ h_{t−1} + dt_t·u_t·Bm_t,   y_t = Cm_t·h_t + Dv·u_t,   out_t = y_t·silu(z_t).
 *
 * The time axis is cut into chunks of `chunk` steps. The forward writes the state at the
 * start of every chunk (h_{c·chunk − 1}, the initial state for c = 0) into chunk_states
 * (B, D, N, n_chunks); the backward starts from those and recomputes the states inside
 * one chunk at a time, so no per-step state is ever stored. */
#ifndef TAPEGRAD_KERNELS_SCAN_H
#define TAPEGRAD_KERNELS_SCAN_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const tg_tensor *u;             /* (B, D, L), any strides */
    const tg_tensor *delta;         /* (B, D, L) */
    const tg_tensor *A;             /* (D, N) */
    const tg_tensor *Bm;            /* (B, N, L) */
    const tg_tensor *Cm;            /* (B, N, L) */
    const tg_tensor *Dv;            /* (D) or NULL */
    const tg_tensor *z;             /* (B, D, L) or NULL */
    const tg_tensor *delta_bias;    /* (D) or NULL */
    const tg_tensor *initial_state; /* (B, D, N) or NULL for zeros */
    bool delta_softplus;
    int64_t chunk; /* ≥ 1 */
} tg_scan_args;

/* The gradients the backward fills; any may be NULL when not wanted. */
typedef struct {
    tg_tensor *du, *ddelta, *dA, *dBm, *dCm, *dDv, *dz, *ddelta_bias, *dinitial_state;
} tg_scan_grads;

/* out (B, D, L); final_state (B, D, N) or NULL; chunk_states (B, D, N, n_chunks) or NULL
 * (when no backward will run). */
typedef tg_status (*tg_scan_fwd_kernel)(const tg_scan_args *args, tg_tensor *out, tg_tensor *final_state,
                                        tg_tensor *chunk_states);

/* Gradients from dout (or NULL: zeros) and dfinal (or NULL: zeros), given the forward's
 * chunk_states. Sums over b and t (dA, dDv, ddelta_bias) and over d (dBm, dCm) run in a
 * fixed order, so results are bitwise reproducible. */
typedef tg_status (*tg_scan_bwd_kernel)(const tg_scan_args *args, const tg_tensor *chunk_states, const tg_tensor *dout,
                                        const tg_tensor *dfinal, const tg_scan_grads *grads);

/* The CPU kernels: f64 in double (kernels/cpu/scan.c, the reference); f32, bf16 and f16
 * in float32 maths, vectorised over the state (kernels/cpu/scan_float.c, which the first
 * two hand those dtypes to). */
tg_status tg_cpu_selective_scan_fwd(const tg_scan_args *args, tg_tensor *out, tg_tensor *final_state,
                                    tg_tensor *chunk_states);
tg_status tg_cpu_selective_scan_bwd(const tg_scan_args *args, const tg_tensor *chunk_states, const tg_tensor *dout,
                                    const tg_tensor *dfinal, const tg_scan_grads *grads);
tg_status tg_cpu_selective_scan_fwd_float(const tg_scan_args *args, tg_tensor *out, tg_tensor *final_state,
                                          tg_tensor *chunk_states);
tg_status tg_cpu_selective_scan_bwd_float(const tg_scan_args *args, const tg_tensor *chunk_states,
                                          const tg_tensor *dout, const tg_tensor *dfinal, const tg_scan_grads *grads);

/* The CUDA kernels (kernels/cuda/scan.cu): f32, bf16 and f16 storage with float32 maths and
 * f32 chunk states, N ≤ 16; other dtypes and larger N fail with a message. */
tg_status tg_cuda_selective_scan_fwd(const tg_scan_args *args, tg_tensor *out, tg_tensor *final_state,
                                     tg_tensor *chunk_states);
tg_status tg_cuda_selective_scan_bwd(const tg_scan_args *args, const tg_tensor *chunk_states, const tg_tensor *dout,
                                     const tg_tensor *dfinal, const tg_scan_grads *grads);
/* The CUDA kernels cut a sequence into spans of whole chunks (each walked by its own blocks
 * after a summary pass) when B·⌈D/32⌉ blocks would leave SMs idle; this forces that number of
 * spans (at most 8, and at most one per chunk) for tests and benchmarks, 0 restores the
 * automatic choice. Returns the previous setting. Not thread-safe. */
int tg_cuda_scan_force_spans(int spans);
/* The spans the last CUDA forward and backward were cut into (0 before the first; NULL skips). */
void tg_cuda_scan_last_spans(int *fwd, int *bwd);

#ifdef __cplusplus
}
#endif

#endif
