/* optim/schedule.c: learning-rate schedules as a factor on the base rate, by step.
 *
 * The warm-up starts at 1/W rather than 0 so that the first step already moves the
 * parameters, and reaches 1 at step W − 1. The cosine starts at 1 at step W (its first
 * value equals the warm-up's last) and reaches the floor at step T. */
#include "core/internal.h"
#include "kernels/optim.h"

#include <math.h>

/* What is wrong with a schedule, naming the field; NULL when nothing. */
static const char *schedule_problem(const tg_schedule *s)
{
    if (s->kind != TG_SCHEDULE_CONSTANT && s->kind != TG_SCHEDULE_COSINE)
        return "kind must be TG_SCHEDULE_CONSTANT or TG_SCHEDULE_COSINE";
    if (s->warmup_steps < 0) return "warmup_steps must be >= 0";
    if (s->kind == TG_SCHEDULE_CONSTANT) return NULL;
    if (s->total_steps < s->warmup_steps) return "total_steps must be >= warmup_steps";
    if (!(s->min_factor >= 0 && s->min_factor <= 1)) return "min_factor must be in [0, 1]";
    return NULL;
}

double tg_schedule_factor(const tg_schedule *s, int64_t step)
{
    const char *op = "tg_schedule_factor";
    const char *problem = !s ? "schedule is NULL" : step < 0 ? "step must be >= 0" : schedule_problem(s);
    if (problem) {
        tg_set_error(TG_ERR_INVALID, "%s: %s", op, problem);
        return NAN;
    }
    return tg_schedule_factor_at(s, step); /* the formula the device's steps use too (kernels/optim.h) */
}
