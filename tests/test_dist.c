/* tapegrad/dist.h in a process started alone: a world of one whose collectives change
 * nothing, with or without MPI in the build; a build without MPI that was launched as one of
 * several processes says so instead of training alone; and a world announced through
 * TG_WORLD_SIZE without its rank, its id file or NCCL is refused. Several ranks are tested
 * under mpirun (tests/dist/dist_check.c); NCCL ranks on a GPU in tests/test_cuda_dist.c. */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include "test_util.h"

#include <stdlib.h>
#include <string.h>

Test(dist, a_process_alone_is_a_world_of_one)
{
    tg_dist *dist = tg_dist_init(NULL);
    cr_assert(dist, "%s", tg_last_error());
    cr_assert_eq(tg_dist_rank(dist), 0);
    cr_assert_eq(tg_dist_world_size(dist), 1);

    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    const int64_t n = tt_randint(1, 40);
    tg_tensor *w = tg_params_add(params, "w", TG_F32, 1, &n);
    cr_assert(w, "%s", tg_last_error());
    tg_rng rng;
    tg_rng_seed(&rng, tt_seed());
    cr_assert_eq(tg_fill_normal(w, &rng, 0, 1), TG_OK);
    cr_assert_eq(tg_fill_normal(w->grad, &rng, 0, 1), TG_OK);
    float *before = malloc(2 * sizeof(float) * (size_t)n);
    memcpy(before, tg_params_data(params), sizeof(float) * (size_t)n);
    memcpy(before + n, tg_params_grad(params), sizeof(float) * (size_t)n);

    cr_assert_eq(tg_dist_check_params(dist, params), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_dist_broadcast_params(dist, params), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_dist_allreduce_grads(dist, params), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_dist_check_same_values(dist, params), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_dist_barrier(dist), TG_OK, "%s", tg_last_error());
    cr_assert(!memcmp(before, tg_params_data(params), sizeof(float) * (size_t)n), "the values changed");
    cr_assert(!memcmp(before + n, tg_params_grad(params), sizeof(float) * (size_t)n), "the gradients changed");
    free(before);
    tg_params_free(params);
    tg_dist_finalize(dist);
}

Test(dist, a_build_without_mpi_refuses_to_be_one_of_several)
{
    if (tg_dist_mpi_built()) cr_skip_test("this build has MPI: tests/dist/dist_check.c runs under mpirun");
    cr_assert_eq(setenv("OMPI_COMM_WORLD_SIZE", "3", 1), 0);
    cr_assert_null(tg_dist_init(NULL));
    cr_assert(strstr(tg_last_error(), "tg_dist_init") && strstr(tg_last_error(), "3 processes") &&
                  strstr(tg_last_error(), "no MPI"),
              "%s", tg_last_error());
}

/* tg_dist_init with TG_WORLD_SIZE set, expecting NULL and a message holding `words`. */
static void refused_environment(const char *size, const char *rank, const char *words)
{
    cr_assert_eq(setenv("TG_WORLD_SIZE", size, 1), 0);
    cr_assert_eq(rank ? setenv("TG_RANK", rank, 1) : unsetenv("TG_RANK"), 0);
    cr_assert_eq(unsetenv("RANK"), 0);
    cr_assert_eq(unsetenv("TG_DIST_INIT_FILE"), 0);
    cr_assert_null(tg_dist_init(NULL), "TG_WORLD_SIZE %s, TG_RANK %s was taken", size, rank ? rank : "unset");
    cr_assert(strstr(tg_last_error(), "tg_dist_init") && strstr(tg_last_error(), words),
              "TG_WORLD_SIZE %s, TG_RANK %s: %s", size, rank ? rank : "unset", tg_last_error());
}

Test(dist, an_environment_world_needs_a_size_a_rank_and_nccl)
{
    refused_environment("2", NULL, "TG_RANK is not set");
    refused_environment("2", "2", "TG_RANK is out of range");
    refused_environment("3", "7", "TG_RANK is out of range");
    refused_environment("0", "0", "at least 1");
    if (tg_dist_nccl_built())
        refused_environment("2", "1", "TG_DIST_INIT_FILE");
    else
        refused_environment("2", "1", "no NCCL");
}
