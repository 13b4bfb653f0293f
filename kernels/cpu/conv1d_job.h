/* kernels/cpu/conv1d_job.h: what the CPU conv1d's two paths share. kernels/cpu/conv1d.c has the
 * entry points, which split the channels over threads and run either its own double range
 * functions (f64) or the float32 ones of kernels/cpu/conv1d_float.c (f32, bf16, f16). */
#ifndef TAPEGRAD_KERNELS_CPU_CONV1D_JOB_H
#define TAPEGRAD_KERNELS_CPU_CONV1D_JOB_H

#include "kernels/conv1d.h"

#include <stdatomic.h>

/* What a range of channels needs: the arguments, the outputs, a failure flag. */
typedef struct {
    const tg_conv1d_args *a;
    const tg_tensor *dout, *dfinal;
    tg_tensor *out, *final_states, *dx, *dweight, *dbias, *dinitial;
    atomic_bool out_of_memory;
} conv_job;

/* The float32 path's range functions (tg_range_fn), context a conv_job. */
void conv_float_forward_channels(void *context, int64_t c_begin, int64_t c_end);
void conv_float_backward_channels(void *context, int64_t c_begin, int64_t c_end);

#endif
