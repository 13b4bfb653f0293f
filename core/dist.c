/* core/dist.c: data-parallel training over MPI and NCCL (tapegrad/dist.h). Built with MPI
 * when CMake finds it (TG_HAVE_MPI) and with NCCL when it finds CUDA and NCCL (TG_HAVE_NCCL,
 * kernels/nccl.h). The world comes from mpirun, or from TG_WORLD_SIZE and TG_RANK with NCCL's
 * id passed through a file; otherwise it is this process alone. Host values travel over MPI
 * where there is MPI, else through NCCL; CUDA stores always over NCCL. Every collective is
 * waited for with a deadline, so a rank that died or hangs turns into an error on the others
 * instead of a silent hang. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */

#include "internal.h"
#include "tapegrad/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h> /* getpid */

#ifdef TG_HAVE_MPI
#include <stddef.h> /* Open MPI's mpi.h uses ptrdiff_t */

#include <mpi.h>
#endif
#ifdef TG_HAVE_NCCL
#include "kernels/nccl.h"
#endif

struct tg_dist {
    tg_dist_options options;
    int rank, size, local_rank;
    bool started_mpi; /* tg_dist_init called MPI_Init (so finalize calls MPI_Finalize) */
    bool over_mpi;    /* the world is mpirun's: host values travel over MPI */
    bool nccl_world;  /* the world is TG_WORLD_SIZE's: everything travels over NCCL */
    char *id_file;    /* the NCCL world's id file, which rank 0 wrote (removed at finalize) */
#ifdef TG_HAVE_NCCL
    tg_nccl *nccl; /* CUDA stores' collectives (under mpirun made at the first CUDA call) */
#endif
};

tg_dist_options tg_dist_defaults(void) { return (tg_dist_options){.mode = TG_DIST_DETERMINISTIC, .timeout_s = 300}; }

bool tg_dist_mpi_built(void)
{
#ifdef TG_HAVE_MPI
    return true;
#else
    return false;
#endif
}

bool tg_dist_nccl_built(void)
{
#ifdef TG_HAVE_NCCL
    return true;
#else
    return false;
#endif
}

int tg_dist_rank(const tg_dist *dist)
{
    if (!dist) tg_set_error(TG_ERR_INVALID, "tg_dist_rank: dist is NULL");
    return dist ? dist->rank : 0;
}

int tg_dist_world_size(const tg_dist *dist)
{
    if (!dist) tg_set_error(TG_ERR_INVALID, "tg_dist_world_size: dist is NULL");
    return dist ? dist->size : 1;
}

static tg_device store_device(const tg_params *params)
{
    return tg_params_count(params) ? tg_params_get(params, 0)->device : TG_DEVICE_CPU;
}

/* The checks every call makes: TG_OK, or the error (set) when dist or params is not usable:
 * a CUDA store needs NCCL, a CPU store MPI (once there is more than one rank). */
static tg_status check_usable(const char *fn, const tg_dist *dist, const tg_params *params)
{
    if (!dist) return tg_set_error(TG_ERR_INVALID, "%s: dist is NULL", fn);
    if (!params) return tg_set_error(TG_ERR_INVALID, "%s: params is NULL", fn);
    const tg_device device = store_device(params);
    if (device == TG_DEVICE_CUDA && !tg_dist_nccl_built() && dist->size > 1)
        return tg_set_error(TG_ERR_DEVICE, "%s: params: the store is on cuda, and this build has no NCCL", fn);
    if (device == TG_DEVICE_CPU && dist->nccl_world)
        return tg_set_error(TG_ERR_DEVICE,
                            "%s: params: the store is on the CPU, but ranks started through TG_WORLD_SIZE talk over "
                            "NCCL, which takes GPU stores only (start CPU ranks with mpirun)",
                            fn);
    return TG_OK;
}

static tg_dtype store_dtype(const tg_params *params)
{
    return tg_params_count(params) ? tg_params_get(params, 0)->dtype : TG_F32;
}

/* FNV-1a over bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static const uint64_t FNV_START = 1469598103934665603ull;

/* What tg_dist_check_params compares: the count, the elements and a hash of every name,
 * dtype, shape and the device. */
typedef struct {
    uint64_t count, numel, layout;
} params_layout;

static params_layout layout_of(const tg_params *params)
{
    params_layout l = {tg_params_count(params), (uint64_t)tg_params_numel(params), FNV_START};
    const tg_device device = store_device(params);
    l.layout = fnv(l.layout, &device, sizeof device);
    for (size_t i = 0; i < l.count; i++) {
        const tg_tensor *p = tg_params_get(params, i);
        l.layout = fnv(l.layout, p->name, strlen(p->name) + 1);
        l.layout = fnv(l.layout, &p->dtype, sizeof p->dtype);
        l.layout = fnv(l.layout, p->shape, sizeof(int64_t) * (size_t)p->ndim);
    }
    return l;
}

/* acc ← acc + g over n elements of the store's dtype, each sum rounded to it. */
static void add_into(void *acc, const void *g, tg_dtype dtype, int64_t n)
{
    if (dtype == TG_F32) {
        float *a = acc;
        const float *b = g;
        for (int64_t i = 0; i < n; i++) a[i] += b[i];
    } else if (dtype == TG_F64) {
        double *a = acc;
        const double *b = g;
        for (int64_t i = 0; i < n; i++) a[i] += b[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            tg_store(acc, dtype, i, (float)tg_load(acc, dtype, i) + (float)tg_load(g, dtype, i));
    }
}

#if defined(TG_HAVE_MPI) || defined(TG_HAVE_NCCL)
static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
#endif

/* The launcher's value of the first variable set among names, or -1. */
static int env_int(const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return atoi(v);
    }
    return -1;
}

/* The world size mpirun (Open MPI, MPICH/PMI, PMIx) announced, or -1. */
static int mpi_launched_size(void)
{
    const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    return env_int(names, 3);
}

/* This rank's index among the ranks on its host: which GPU it takes. */
static int local_rank_of(int rank)
{
    const char *names[] = {"TG_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                           "LOCAL_RANK"};
    int local = env_int(names, 5);
    return local >= 0 ? local : rank;
}

#ifdef TG_HAVE_MPI

static void pause_briefly(void)
{
    struct timespec pause = {0, 20000};
    nanosleep(&pause, NULL);
}

/* Waits for the request until the deadline: TG_OK, or TG_ERR_STATE naming fn. */
static tg_status wait_for(const char *fn, const tg_dist *dist, MPI_Request *request)
{
    const double start = seconds();
    for (int done = 0;;) {
        if (MPI_Test(request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return tg_set_error(TG_ERR_STATE, "%s: MPI failed on rank %d", fn, dist->rank);
        if (done) return TG_OK;
        if (seconds() - start > dist->options.timeout_s)
            return tg_set_error(TG_ERR_STATE,
                                "%s: rank %d waited %.0f s for the other ranks (timeout_s): one has failed, "
                                "died or is stuck",
                                fn, dist->rank, dist->options.timeout_s);
        pause_briefly(); /* MPI makes progress inside MPI_Test */
    }
}

static tg_status mpi_broadcast(const char *fn, const tg_dist *dist, void *bytes, size_t n)
{
    if (n > INT32_MAX) return tg_set_error(TG_ERR_OVERFLOW, "%s: %zu bytes is more than MPI takes", fn, n);
    MPI_Request request;
    if (MPI_Ibcast(bytes, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD, &request) != MPI_SUCCESS)
        return tg_set_error(TG_ERR_STATE, "%s: MPI_Ibcast failed on rank %d", fn, dist->rank);
    return wait_for(fn, dist, &request);
}

#endif

/* Every rank's `bytes` host bytes at `mine` into `all` (rank order): over MPI, or through
 * NCCL in a TG_WORLD_SIZE world. */
static tg_status allgather(const char *fn, tg_dist *dist, const void *mine, void *all, size_t bytes)
{
#ifdef TG_HAVE_NCCL
    if (dist->nccl_world) return tg_nccl_allgather_host(dist->nccl, fn, mine, all, bytes);
#endif
#ifdef TG_HAVE_MPI
    if (bytes > INT32_MAX)
        return tg_set_error(TG_ERR_OVERFLOW, "%s: %zu bytes per rank is more than MPI takes", fn, bytes);
    MPI_Request request;
    if (MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &request) != MPI_SUCCESS)
        return tg_set_error(TG_ERR_STATE, "%s: MPI_Iallgather failed on rank %d", fn, dist->rank);
    return wait_for(fn, dist, &request);
#else
    for (int r = 0; r < dist->size; r++) memcpy((char *)all + (size_t)r * bytes, mine, bytes);
    return dist->size == 1 ? TG_OK : tg_set_error(TG_ERR_STATE, "%s: no transport for host values in this build", fn);
#endif
}

/* values (n of dtype, on the host) ← every rank's values added in rank order: rank 0's, plus
 * rank 1's, …, the same bits on every rank. */
static tg_status sum_in_rank_order(const char *fn, tg_dist *dist, void *values, tg_dtype dtype, int64_t n)
{
    const size_t bytes = (size_t)n * tg_dtype_size(dtype);
    char *all = malloc(bytes * (size_t)dist->size + 1);
    if (!all) return tg_set_error(TG_ERR_NOMEM, "%s: out of memory for %d ranks' values", fn, dist->size);
    tg_status status = allgather(fn, dist, values, all, bytes);
    if (status == TG_OK) {
        memcpy(values, all, bytes);
        for (int r = 1; r < dist->size; r++) add_into(values, all + (size_t)r * bytes, dtype, n);
    }
    free(all);
    return status;
}

/* Whether calls have others to talk to: more than one rank, or an NCCL world (of any size,
 * so that a world of one exercises the same path). */
static bool has_peers(const tg_dist *dist) { return dist->size > 1 || dist->nccl_world; }

/* ---- NCCL ---------------------------------------------------------------------------------- */

#ifdef TG_HAVE_NCCL

/* Rank 0 writes the id to a temporary name and renames it into place, so the others never
 * read half of it; they wait for the file until the deadline. */
static tg_status share_id_by_file(tg_dist *dist, unsigned char id[TG_NCCL_ID_BYTES])
{
    const char *fn = "tg_dist_init", *path = dist->id_file;
    if (dist->rank == 0) {
        char temporary[4096];
        if (snprintf(temporary, sizeof temporary, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof temporary)
            return tg_set_error(TG_ERR_INVALID, "%s: TG_DIST_INIT_FILE: the path is too long", fn);
        FILE *f = fopen(temporary, "wbx");
        bool written = f && fwrite(id, 1, TG_NCCL_ID_BYTES, f) == TG_NCCL_ID_BYTES;
        if (f && fclose(f) != 0) written = false;
        if (!written || rename(temporary, path) != 0) {
            remove(temporary);
            return tg_set_error(TG_ERR_STATE, "%s: TG_DIST_INIT_FILE: cannot write %s", fn, path);
        }
        return TG_OK;
    }
    const double start = seconds();
    for (;;) {
        FILE *f = fopen(path, "rb");
        size_t got = f ? fread(id, 1, TG_NCCL_ID_BYTES, f) : 0;
        if (f) fclose(f);
        if (got == TG_NCCL_ID_BYTES) return TG_OK;
        if (seconds() - start > dist->options.timeout_s)
            return tg_set_error(TG_ERR_STATE, "%s: rank %d waited %.0f s for rank 0 to write TG_DIST_INIT_FILE %s", fn,
                                dist->rank, dist->options.timeout_s, path);
        struct timespec pause = {0, 10000000};
        nanosleep(&pause, NULL);
    }
}

/* Makes the ranks' communicator: rank 0's id over MPI, or through the id file. */
static tg_status join_nccl(tg_dist *dist)
{
    unsigned char id[TG_NCCL_ID_BYTES] = {0};
    tg_status status = dist->rank == 0 ? tg_nccl_unique_id(id) : TG_OK;
#ifdef TG_HAVE_MPI
    if (dist->over_mpi) {
        /* every rank takes part in the broadcast, so that a failed rank 0 does not hang the others */
        tg_status shared = mpi_broadcast("tg_dist_init", dist, id, sizeof id);
        if (status == TG_OK) status = shared;
    }
#endif
    if (status == TG_OK && dist->nccl_world) status = share_id_by_file(dist, id);
    if (status == TG_OK && !(dist->nccl = tg_nccl_create(dist->rank, dist->size, id, dist->options.timeout_s)))
        status = TG_ERR_STATE;
    return status;
}

/* The communicator for a CUDA store's call (made now under mpirun, at the first such call,
 * which every rank makes). */
static tg_nccl *nccl_for(tg_dist *dist)
{
    if (!dist->nccl && join_nccl(dist) != TG_OK) return NULL;
    return dist->nccl;
}

#endif

/* ---- the world ----------------------------------------------------------------------------- */

/* A world from TG_WORLD_SIZE, TG_RANK and TG_DIST_INIT_FILE (WORLD_SIZE, RANK as torchrun
 * sets them are read too): NCCL ranks on GPUs. */
static tg_status join_environment_world(tg_dist *dist, int size)
{
    const char *fn = "tg_dist_init";
    const char *rank_names[] = {"TG_RANK", "RANK"};
    const char *file = getenv("TG_DIST_INIT_FILE");
    dist->rank = env_int(rank_names, 2);
    dist->size = size;
    if (dist->rank < 0 || dist->rank >= size)
        return tg_set_error(TG_ERR_INVALID, "%s: TG_WORLD_SIZE is %d, and TG_RANK is %s", fn, size,
                            dist->rank < 0 ? "not set" : "out of range");
    if (!tg_dist_nccl_built())
        return tg_set_error(TG_ERR_STATE,
                            "%s: TG_WORLD_SIZE starts NCCL ranks, but this build has no NCCL (or start CPU ranks with "
                            "mpirun)",
                            fn);
    if (!file || !*file)
        return tg_set_error(TG_ERR_INVALID,
                            "%s: TG_WORLD_SIZE needs TG_DIST_INIT_FILE: a path every rank can read, not there yet, "
                            "where rank 0 leaves NCCL's id",
                            fn);
    if (!(dist->id_file = malloc(strlen(file) + 1))) return tg_set_error(TG_ERR_NOMEM, "%s: out of memory", fn);
    strcpy(dist->id_file, file);
    dist->nccl_world = true;
    dist->local_rank = local_rank_of(dist->rank);
#ifdef TG_HAVE_NCCL
    tg_status status = tg_nccl_select_device(dist->local_rank);
    return status == TG_OK ? join_nccl(dist) : status;
#else
    return TG_ERR_STATE;
#endif
}

/* mpirun's world (or a world of one when MPI starts without a launcher). */
static tg_status join_mpi_world(tg_dist *dist)
{
#ifdef TG_HAVE_MPI
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
        int provided;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return tg_set_error(TG_ERR_STATE, "tg_dist_init: MPI_Init_thread failed");
        dist->started_mpi = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &dist->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &dist->size);
    dist->over_mpi = true;
    dist->local_rank = local_rank_of(dist->rank);
#ifdef TG_HAVE_NCCL
    if (dist->size > 1) return tg_nccl_select_device(dist->local_rank);
#endif
    return TG_OK;
#else
    (void)dist;
    if (mpi_launched_size() > 1)
        return tg_set_error(TG_ERR_STATE,
                            "tg_dist_init: started as one of %d processes, but this build has no MPI (install Open "
                            "MPI and build again)",
                            mpi_launched_size());
    return TG_OK;
#endif
}

tg_dist *tg_dist_init(const tg_dist_options *options)
{
    tg_dist_options opt = options ? *options : tg_dist_defaults();
    if ((opt.mode != TG_DIST_DETERMINISTIC && opt.mode != TG_DIST_FAST) || !(opt.timeout_s > 0) ||
        !isfinite(opt.timeout_s)) {
        tg_set_error(TG_ERR_INVALID, "tg_dist_init: options: %s",
                     opt.mode != TG_DIST_DETERMINISTIC && opt.mode != TG_DIST_FAST
                         ? "mode is not a tg_dist_mode"
                         : "timeout_s must be finite and > 0");
        return NULL;
    }
    tg_dist *dist = calloc(1, sizeof *dist);
    if (!dist) return tg_set_error(TG_ERR_NOMEM, "tg_dist_init: out of memory"), NULL;
    *dist = (tg_dist){.options = opt, .rank = 0, .size = 1};
    const char *size_names[] = {"TG_WORLD_SIZE", "WORLD_SIZE"};
    const int environment_size = mpi_launched_size() > 0 ? -1 : env_int(size_names, 2);
    tg_status status = environment_size >= 1 ? join_environment_world(dist, environment_size)
                       : environment_size == 0
                           ? tg_set_error(TG_ERR_INVALID, "tg_dist_init: TG_WORLD_SIZE must be at least 1")
                           : join_mpi_world(dist);
    if (status != TG_OK) {
        char message[1024];
        snprintf(message, sizeof message, "%s", tg_last_error());
        tg_dist_finalize(dist);
        tg_set_error(status, "%s", message);
        return NULL;
    }
    return dist;
}

void tg_dist_finalize(tg_dist *dist)
{
    if (!dist) return;
#ifdef TG_HAVE_NCCL
    tg_nccl_destroy(dist->nccl);
#endif
    if (dist->id_file && dist->rank == 0) remove(dist->id_file);
    free(dist->id_file);
#ifdef TG_HAVE_MPI
    if (dist->started_mpi) MPI_Finalize();
#endif
    free(dist);
}

tg_status tg_dist_barrier(tg_dist *dist)
{
    if (!dist) return tg_set_error(TG_ERR_INVALID, "tg_dist_barrier: dist is NULL");
    if (!has_peers(dist)) return TG_OK;
#ifdef TG_HAVE_MPI
    if (dist->over_mpi) {
        MPI_Request request;
        if (MPI_Ibarrier(MPI_COMM_WORLD, &request) != MPI_SUCCESS)
            return tg_set_error(TG_ERR_STATE, "tg_dist_barrier: MPI_Ibarrier failed on rank %d", dist->rank);
        return wait_for("tg_dist_barrier", dist, &request);
    }
#endif
    unsigned char mine = 1, *all = malloc((size_t)dist->size);
    if (!all) return tg_set_error(TG_ERR_NOMEM, "tg_dist_barrier: out of memory");
    tg_status status = allgather("tg_dist_barrier", dist, &mine, all, 1);
    free(all);
    return status;
}

tg_status tg_dist_check_params(tg_dist *dist, const tg_params *params)
{
    const char *fn = "tg_dist_check_params";
    tg_status usable = check_usable(fn, dist, params);
    if (usable != TG_OK) return usable;
    if (!has_peers(dist)) return TG_OK;
    params_layout mine = layout_of(params), *all = malloc(sizeof *all * (size_t)dist->size);
    if (!all) return tg_set_error(TG_ERR_NOMEM, "%s: out of memory", fn);
    tg_status status = allgather(fn, dist, &mine, all, sizeof mine);
    for (int r = 1; status == TG_OK && r < dist->size; r++) {
        if (!memcmp(&all[r], &all[0], sizeof mine)) continue;
        status = tg_set_error(TG_ERR_INVALID,
                              "%s: rank %d has %llu parameters of %llu elements, rank 0 %llu of %llu%s: the ranks must "
                              "build the same model",
                              fn, r, (unsigned long long)all[r].count, (unsigned long long)all[r].numel,
                              (unsigned long long)all[0].count, (unsigned long long)all[0].numel,
                              all[r].count == all[0].count && all[r].numel == all[0].numel
                                  ? " (their names, dtypes, shapes or devices differ)"
                                  : "");
    }
    free(all);
    return status;
}

tg_status tg_dist_broadcast_params(tg_dist *dist, tg_params *params)
{
    const char *fn = "tg_dist_broadcast_params";
    tg_status usable = check_usable(fn, dist, params);
    if (usable != TG_OK) return usable;
    if (!has_peers(dist)) return TG_OK;
    tg_status status = tg_dist_check_params(dist, params);
    if (status != TG_OK) return status;
    const size_t bytes = (size_t)tg_params_numel(params) * tg_dtype_size(store_dtype(params));
#ifdef TG_HAVE_NCCL
    if (store_device(params) == TG_DEVICE_CUDA) {
        tg_nccl *nccl = nccl_for(dist);
        return nccl ? tg_nccl_broadcast(nccl, fn, tg_params_data(params), bytes) : TG_ERR_STATE;
    }
#endif
#ifdef TG_HAVE_MPI
    return mpi_broadcast(fn, dist, tg_params_data(params), bytes);
#else
    (void)bytes;
    return TG_OK;
#endif
}

tg_status tg_dist_allreduce_grads(tg_dist *dist, tg_params *params)
{
    const char *fn = "tg_dist_allreduce_grads";
    tg_status usable = check_usable(fn, dist, params);
    if (usable != TG_OK) return usable;
    if (!has_peers(dist)) return TG_OK;
    const tg_dtype dtype = store_dtype(params);
    const int64_t n = tg_params_numel(params);
    void *grad = tg_params_grad(params);
    const bool rank_order = dist->options.mode == TG_DIST_DETERMINISTIC;
#ifdef TG_HAVE_NCCL
    if (store_device(params) == TG_DEVICE_CUDA) {
        tg_nccl *nccl = nccl_for(dist);
        return nccl ? tg_nccl_allreduce(nccl, fn, grad, dtype, n, rank_order) : TG_ERR_STATE;
    }
#endif
#ifdef TG_HAVE_MPI
    if (!rank_order && (dtype == TG_F32 || dtype == TG_F64)) {
        if (n > INT32_MAX)
            return tg_set_error(TG_ERR_OVERFLOW, "%s: %lld elements is more than MPI takes", fn, (long long)n);
        MPI_Request request;
        if (MPI_Iallreduce(MPI_IN_PLACE, grad, (int)n, dtype == TG_F32 ? MPI_FLOAT : MPI_DOUBLE, MPI_SUM,
                           MPI_COMM_WORLD, &request) != MPI_SUCCESS)
            return tg_set_error(TG_ERR_STATE, "%s: MPI_Iallreduce failed on rank %d", fn, dist->rank);
        return wait_for(fn, dist, &request);
    }
#endif
    (void)rank_order;
    return sum_in_rank_order(fn, dist, grad, dtype, n);
}

tg_status tg_dist_allreduce_sum(tg_dist *dist, double *values, int64_t n)
{
    const char *fn = "tg_dist_allreduce_sum";
    if (!dist) return tg_set_error(TG_ERR_INVALID, "%s: dist is NULL", fn);
    if (n < 0 || (n > 0 && !values))
        return tg_set_error(TG_ERR_INVALID, "%s: %s", fn, n < 0 ? "n is negative" : "values is NULL");
    if (!has_peers(dist) || n == 0) return TG_OK;
    return sum_in_rank_order(fn, dist, values, TG_F64, n);
}

tg_status tg_dist_check_same_values(tg_dist *dist, const tg_params *params)
{
    const char *fn = "tg_dist_check_same_values";
    tg_status usable = check_usable(fn, dist, params);
    if (usable != TG_OK) return usable;
    if (!has_peers(dist)) return TG_OK;
    const size_t bytes = (size_t)tg_params_numel(params) * tg_dtype_size(store_dtype(params));
    const void *data = tg_params_data((tg_params *)params);
    void *host = NULL;
    if (store_device(params) == TG_DEVICE_CUDA) { /* hashed on the host */
        if (!(host = malloc(bytes + 1))) return tg_set_error(TG_ERR_NOMEM, "%s: out of memory", fn);
        if (tg_device_memcpy(host, data, bytes, TG_COPY_DEVICE_TO_HOST) != TG_OK) return free(host), TG_ERR_DEVICE;
        data = host;
    }
    uint64_t mine = fnv(FNV_START, data, bytes), *all = malloc(sizeof mine * (size_t)dist->size);
    free(host);
    if (!all) return tg_set_error(TG_ERR_NOMEM, "%s: out of memory", fn);
    tg_status status = allgather(fn, dist, &mine, all, sizeof mine);
    for (int r = 1; status == TG_OK && r < dist->size; r++)
        if (all[r] != all[0])
            status = tg_set_error(TG_ERR_STATE, "%s: rank %d's parameter values differ from rank 0's", fn, r);
    free(all);
    return status;
}

tg_status tg_dist_sync(tg_dist *dist)
{
    if (!dist) return tg_set_error(TG_ERR_INVALID, "tg_dist_sync: dist is NULL");
#ifdef TG_HAVE_NCCL
    if (dist->nccl) return tg_nccl_wait(dist->nccl, "tg_dist_sync");
#endif
    return TG_OK;
}
