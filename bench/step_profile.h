/* bench/step_profile.h: where a training step's GPU time goes, through CUPTI (the CUDA
 * profiling interface that ships with the toolkit).
 *
 * Between step_profile_start and step_profile_stop it records every kernel, copy and
 * memset the GPU ran (with their device times) and every CUDA runtime call the host made.
 * step_profile_report then prints, per step: the kernels' time summed by name (most first),
 * the launches, the copies by direction, and the runtime calls that make the host wait for
 * the device (synchronisations, blocking copies, frees). Used by bench/train_bench. */
#ifndef TAPEGRAD_BENCH_STEP_PROFILE_H
#define TAPEGRAD_BENCH_STEP_PROFILE_H

#include <stdbool.h>
#include <stdio.h>

/* Starts recording (clearing what an earlier recording kept); false with a message on stderr
 * when CUPTI cannot be used. */
bool step_profile_start(void);
/* Waits for the device, flushes CUPTI's buffers and stops recording. */
void step_profile_stop(void);
/* The breakdown of what was recorded, divided by `steps`; at most `top` kernel rows (the
 * rest summed into one). `title` heads the table. */
void step_profile_report(FILE *out, const char *title, int steps, int top);

/* Totals of the last recording, per step. */
typedef struct {
    double kernel_us;  /* summed kernel time */
    double launches;   /* kernels run */
    double host_waits; /* runtime calls that wait for the device */
} step_profile_totals;
step_profile_totals step_profile_get_totals(int steps);

#endif
