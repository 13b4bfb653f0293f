/* tapegrad/dist.h: data-parallel training: processes on CPUs over MPI, GPUs over NCCL.
 *
 * N processes start together, one per CPU (or host) or one per GPU. Each holds the whole
 * model; each step every rank takes its shard of the global batch, runs forward and
 * backward, and the ranks add their gradients together before the optimizer step:
 *
 *   tg_dist *dist = tg_dist_init(NULL);               // the launcher's world, or a world of one
 *   build the model;  tg_dist_check_params(dist, params);  tg_dist_broadcast_params(dist, params);
 *   create the optimizer, then every step:
 *       rows [rank·B/N, (rank + 1)·B/N) of the global batch of B rows → loss → tg_backward
 *       tg_dist_allreduce_grads(dist, params);         // the sum over the ranks
 *       tg_optim_step(opt, tg_dist_world_size(dist));  // the mean over the N shards
 *   rank 0 prints and saves checkpoints;  tg_dist_finalize(dist).
 *
 * Worlds. Under `mpirun -np N` the ranks are MPI's. CPU stores travel over MPI; CUDA stores
 * over NCCL, whose communicator is made at the first call with a CUDA store (its id sent
 * from rank 0 over MPI). Without mpirun, TG_WORLD_SIZE, TG_RANK and TG_DIST_INIT_FILE (or
 * torchrun's WORLD_SIZE and RANK) start NCCL ranks, CUDA stores only: rank 0 writes NCCL's id
 * to the file, a path every rank can read that does not exist yet, and removes it at
 * finalize; the others read it. A world made this way talks over NCCL even at size 1. On a
 * host with several GPUs, each rank takes GPU (local rank mod GPU count) at tg_dist_init,
 * the local rank coming from TG_LOCAL_RANK, Open MPI, MPICH, Slurm or torchrun.
 *
 * In TG_DIST_DETERMINISTIC mode (the default) the sum is taken in a fixed order: rank 0's
 * gradients, plus rank 1's, plus rank 2's, …, each addition rounded to the store's dtype, on
 * every rank alike (on GPUs: the ranks' gradients gathered, then added on each GPU). N ranks
 * then train bit for bit like one process that computes each of the N shards' gradients on
 * its own and adds them in that order, and every rank holds the same parameters after every
 * step. (One process that lets successive backwards add into the same gradients agrees
 * within rounding, not bit for bit, where a parameter collects several terms in one
 * backward, as a tied embedding does.) TG_DIST_FAST uses MPI's or NCCL's own all-reduce,
 * whose order the library chooses. The gradient norm for clipping is taken after the sum, so
 * every rank clips alike. On GPUs the all-reduce is queued on the library's stream: a CUDA
 * graph capture of the step holds it (run one step outside the capture first).
 *
 * A collective that waits longer than the timeout (a rank died or hangs) fails with
 * TG_ERR_STATE and a message saying which call and for how long; the program should then
 * exit, and the launcher stops the others. A step replayed from a CUDA graph is not waited
 * for: tg_dist_sync waits for the device with the same deadline. Without MPI and NCCL in the
 * build, or started without a launcher, the world is this process alone: every call below
 * works and does nothing. */
#ifndef TAPEGRAD_DIST_H
#define TAPEGRAD_DIST_H

#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tg_dist tg_dist;

typedef enum { TG_DIST_DETERMINISTIC = 0, TG_DIST_FAST = 1 } tg_dist_mode;

typedef struct {
    tg_dist_mode mode;
    double timeout_s; /* how long a collective may wait for the other ranks; default 300 */
} tg_dist_options;

TG_API tg_dist_options tg_dist_defaults(void);
/* Whether this build can run over MPI, and over NCCL. */
TG_API bool tg_dist_mpi_built(void);
TG_API bool tg_dist_nccl_built(void);
/* Joins the launcher's world (initialising MPI unless the program did; making the NCCL
 * communicator in a TG_WORLD_SIZE world), or makes a world of this process alone when none
 * was launched. NULL (error set) when MPI or NCCL fails to start, the others do not join
 * within the timeout, the environment's world is incomplete, or the process was launched as
 * one of several by a build without the library it needs. options may be NULL. */
TG_API tg_dist *tg_dist_init(const tg_dist_options *options);
/* This process's rank (0 … world size − 1) and the world's size; 0 and 1 (error set) for NULL. */
TG_API int tg_dist_rank(const tg_dist *dist);
TG_API int tg_dist_world_size(const tg_dist *dist);
/* Every rank's store has the same parameters: count, names, dtypes and shapes. Otherwise
 * TG_ERR_INVALID on every rank, naming a rank that differs from rank 0 and how. */
TG_API tg_status tg_dist_check_params(tg_dist *dist, const tg_params *params);
/* Rank 0's parameter values on every rank (call before creating the optimizer, or call
 * tg_optim_sync_master after it for a 16-bit store). */
TG_API tg_status tg_dist_broadcast_params(tg_dist *dist, tg_params *params);
/* Replaces every rank's gradients with their sum over the ranks (see the mode above). */
TG_API tg_status tg_dist_allreduce_grads(tg_dist *dist, tg_params *params);
/* values[0 .. n) ← their sums over the ranks, added in rank order (the same bits on every
 * rank): for a step's loss and counts. */
TG_API tg_status tg_dist_allreduce_sum(tg_dist *dist, double *values, int64_t n);
/* Whether every rank's parameter values are the same bits as rank 0's: TG_OK, or
 * TG_ERR_STATE on every rank naming the first rank that differs. */
TG_API tg_status tg_dist_check_same_values(tg_dist *dist, const tg_params *params);
TG_API tg_status tg_dist_barrier(tg_dist *dist);
/* Waits for the device's queued work (a replayed step's all-reduce) with the timeout: TG_OK,
 * or TG_ERR_STATE when the other ranks do not take part in time. Does nothing without NCCL. */
TG_API tg_status tg_dist_sync(tg_dist *dist);
/* Leaves the world (finalising MPI if tg_dist_init started it, closing the NCCL
 * communicator) and frees dist; NULL does nothing. */
TG_API void tg_dist_finalize(tg_dist *dist);

#ifdef __cplusplus
}
#endif
#endif
