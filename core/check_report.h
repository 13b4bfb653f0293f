/* core/check_report.h: how tg_gradcheck and tg_gradcheck_cuda count, keep and describe the
 * elements they compare (core/check_report.c). Each compares a computed value ("got": the
 * analytic gradient, or the CUDA result) with a reference ("want": the finite difference, or
 * the CPU result) per element of a list of tensors, and reports in a tg_gradcheck_result. */
#ifndef TAPEGRAD_CORE_CHECK_REPORT_H
#define TAPEGRAD_CORE_CHECK_REPORT_H

#include "tapegrad/gradcheck.h"

/* What the failures of one tensor have in common, for the pattern summary. */
typedef struct {
    int64_t checked, failed;
    bool directions;                 /* compared along random directions, not element by element */
    int64_t first[TG_MAX_DIMS];      /* the first failing element's multi-index */
    unsigned shared_dims;            /* bit d: every failure so far has first[d] along dimension d */
    bool last_failed, others_failed; /* the tensor's last element failed; some other element did */
    double low, high;                /* the range of the values at the failures */
} tg_check_failures;

typedef struct {
    tg_gradcheck_result *result; /* zeroed, worst_input −1, before the first comparison */
    double atol, rtol;
    tg_check_failures *per_tensor; /* one per tensor compared, zeroed */
} tg_check_state;

/* Records one comparison for tensor `which` (x: its shape), at element index (or along
 * random direction `direction` when index is −1), where the tensor's value is `value`: it
 * fails when |got − want| > atol + rtol·|want| (NaN fails). Keeps the worst. */
void tg_check_compare(tg_check_state *c, const tg_tensor *x, int which, int64_t index, int direction, double value,
                      double got, double want);

/* The words of the summary: its title ("gradcheck"), the names of got and want ("analytic",
 * "numeric"), and which tensor is the function's output (−1: none; it is called "output",
 * the others "inputs[i]"). */
typedef struct {
    const char *title, *got, *want;
    int output;
} tg_check_words;

/* Sets result->passed, pattern and message from the comparisons of the n tensors. */
void tg_check_summarise(tg_gradcheck_result *result, const tg_check_failures *per_tensor,
                        const tg_tensor *const *tensors, int n, const tg_check_words *words);

#endif
