/* kernels/embedding.h: the lookup kernels behind ops/embedding.c.
 * table is (V, D), ids is i32 of shape S, out and dy are (S..., D); all any strides. */
#ifndef TAPEGRAD_KERNELS_EMBEDDING_H
#define TAPEGRAD_KERNELS_EMBEDDING_H

#include "core/internal.h"

enum { TG_EMBEDDING_GRAD_CHUNK = 256 };

#ifdef __cplusplus
extern "C" {
#endif

/* Finds the first id (in row-major order of ids) outside [0, vocab): *bad_position gets
 * its flat position and *bad_id its value, or *bad_position = -1 when every id is valid.
 * During a CUDA graph capture the CUDA kernel cannot wait for the answer: it records bad
 * ids on the device (kernels/cuda_api.h) and answers -1. */
typedef tg_status (*tg_embedding_find_bad_id_kernel)(const tg_tensor *ids, int64_t vocab, int64_t *bad_position,
                                                     int64_t *bad_id);
/* out[p, :] = table[ids[p], :] for every position p of ids (ids already checked). */
typedef tg_status (*tg_embedding_fwd_kernel)(const tg_tensor *table, const tg_tensor *ids, tg_tensor *out);
/* dtable[v, :] = Σ dy[p, :] over the positions p with ids[p] = v; dtable holds zeros on
 * entry. Both devices sum in double with one grouping, so they give the same bits and so
 * does every run: an id's positions in row-major order are cut into chunks of
 * TG_EMBEDDING_GRAD_CHUNK, each chunk is summed in order from +0, the chunk sums are
 * added in order from +0, and the total is rounded once into dtable's dtype. (The chunks
 * let a GPU split the run of a token that fills most of a batch.) An id outside [0, V) can
 * only appear when ids changed after the forward: the CPU kernel then fails, writing
 * nothing; the CUDA kernel, which does not wait for the device, records it as a bad input
 * and leaves that position out. */
typedef tg_status (*tg_embedding_bwd_kernel)(const tg_tensor *dy, const tg_tensor *ids, tg_tensor *dtable);

tg_status tg_cpu_embedding_find_bad_id(const tg_tensor *ids, int64_t vocab, int64_t *bad_position, int64_t *bad_id);
tg_status tg_cpu_embedding_fwd(const tg_tensor *table, const tg_tensor *ids, tg_tensor *out);
tg_status tg_cpu_embedding_bwd(const tg_tensor *dy, const tg_tensor *ids, tg_tensor *dtable);

/* The same on CUDA (kernels/cuda/embedding.cu). */
tg_status tg_cuda_embedding_find_bad_id(const tg_tensor *ids, int64_t vocab, int64_t *bad_position, int64_t *bad_id);
tg_status tg_cuda_embedding_fwd(const tg_tensor *table, const tg_tensor *ids, tg_tensor *out);
tg_status tg_cuda_embedding_bwd(const tg_tensor *dy, const tg_tensor *ids, tg_tensor *dtable);

#ifdef __cplusplus
}
#endif

#endif
