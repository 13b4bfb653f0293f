/* kernels/nccl.h: the NCCL side of data parallelism, for core/dist.c (implemented in
 * kernels/cuda/nccl.cu, built only with TG_HAVE_NCCL). A communicator joins the ranks' GPUs;
 * every collective is queued on the library's stream (so a CUDA graph can capture it) and,
 * outside a capture, waited for with the deadline the communicator was made with: past it,
 * the communicator is aborted and the call fails naming fn, instead of hanging. */
#ifndef TAPEGRAD_KERNELS_NCCL_H
#define TAPEGRAD_KERNELS_NCCL_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TG_NCCL_ID_BYTES 128 /* the size of NCCL's unique id */

typedef struct tg_nccl tg_nccl;

/* Makes this process's rank use GPU local_rank mod the GPU count (when there are several),
 * before anything is allocated on the device. */
tg_status tg_nccl_select_device(int local_rank);
/* A new unique id (rank 0 makes it; every rank passes it to tg_nccl_create). */
tg_status tg_nccl_unique_id(unsigned char id[TG_NCCL_ID_BYTES]);
/* Joins the communicator of `size` ranks (collective: every rank calls it). NULL, error set,
 * when NCCL fails or the others do not join within timeout_s. */
tg_nccl *tg_nccl_create(int rank, int size, const unsigned char id[TG_NCCL_ID_BYTES], double timeout_s);
void tg_nccl_destroy(tg_nccl *comm);

/* data (n elements of dtype on the device) ← their sum over the ranks. rank_order: every
 * rank's values gathered and added in rank order, each addition rounded to dtype (the same
 * bits on every rank, and the same as the CPU path's); otherwise NCCL's all-reduce, whose
 * order NCCL chooses. The first call of a size allocates the gathering buffer: make it
 * before a capture. */
tg_status tg_nccl_allreduce(tg_nccl *comm, const char *fn, void *data, tg_dtype dtype, int64_t n, bool rank_order);
/* Rank 0's `bytes` bytes at data (on the device) on every rank. */
tg_status tg_nccl_broadcast(tg_nccl *comm, const char *fn, void *data, size_t bytes);
/* Every rank's `bytes` host bytes at mine into all (host, rank order), through the device. */
tg_status tg_nccl_allgather_host(tg_nccl *comm, const char *fn, const void *mine, void *all, size_t bytes);
/* Waits for the stream's queued work (collectives included) with the deadline. */
tg_status tg_nccl_wait(tg_nccl *comm, const char *fn);

/* out (n of dtype) ← slices[0] + slices[1] + … + slices[k − 1], added in that order and each
 * sum rounded to dtype; slices holds k runs of n elements, one after the other. */
tg_status tg_cuda_sum_in_order(void *out, const void *slices, int k, int64_t n, tg_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
