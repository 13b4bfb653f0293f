/* core/cpu_quota.c: the CPU time a Linux control group lets this process use. A container
 * limited by quota (`docker --cpus 2`, a Kubernetes CPU limit) still lists every CPU of
 * the host in its affinity mask; a thread per CPU would then take turns on two CPUs' worth
 * of time, which at the small kernels' pace is many times slower than two threads. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { PATH_MAX_LENGTH = 4096 };

/* The whole of a small text file, or false when it cannot be read. */
static bool read_small_file(const char *path, char *text, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    const size_t n = fread(text, 1, size - 1, f);
    fclose(f);
    text[n] = '\0';
    return n > 0;
}

/* CPUs' worth of time a directory's limit allows (cgroup v2's "quota period" in cpu.max,
 * v1's cpu.cfs_quota_us over cpu.cfs_period_us), or 0 when it sets none. */
static double directory_limit(const char *dir, bool v2)
{
    char path[PATH_MAX_LENGTH + 32], text[128];
    double quota, period;
    if (v2) {
        snprintf(path, sizeof path, "%s/cpu.max", dir);
        if (!read_small_file(path, text, sizeof text) || sscanf(text, "%lf %lf", &quota, &period) != 2) return 0;
    } else {
        snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
        if (!read_small_file(path, text, sizeof text) || sscanf(text, "%lf", &quota) != 1) return 0;
        snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
        if (!read_small_file(path, text, sizeof text) || sscanf(text, "%lf", &period) != 1) return 0;
    }
    return quota > 0 && period > 0 ? quota / period : 0; /* "max" and -1 fail the test */
}

/* The tighter of two limits, where 0 is none. */
static double tighter(double a, double b) { return a > 0 && (b == 0 || a < b) ? a : b; }

/* The tightest limit on the way from mount/group up to mount itself (a limit set on a
 * parent binds its children; inside a container the group's own path may not exist and
 * the mount's root holds the container's limit), or 0 when none is set. */
static double tightest_limit(const char *mount, const char *group, bool v2)
{
    char dir[PATH_MAX_LENGTH];
    if (snprintf(dir, sizeof dir, "%s%s", mount, group) >= (int)sizeof dir) return 0;
    const size_t mount_length = strlen(mount);
    double tightest = 0;
    for (;;) {
        tightest = tighter(directory_limit(dir, v2), tightest);
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < mount_length) break;
        *slash = '\0';
    }
    return tightest;
}

/* Whether a cgroup v1 line's controller list ("cpu,cpuacct") names the cpu controller. */
static bool names_cpu_controller(const char *controllers, size_t length)
{
    for (const char *p = controllers; p < controllers + length;) {
        const char *comma = memchr(p, ',', (size_t)(controllers + length - p));
        const size_t n = comma ? (size_t)(comma - p) : (size_t)(controllers + length - p);
        if (n == 3 && !strncmp(p, "cpu", 3)) return true;
        p += n + 1;
    }
    return false;
}

int64_t tg_cgroup_cpu_limit(const char *proc_cgroup, const char *cgroup_root)
{
    FILE *f = fopen(proc_cgroup, "r");
    if (!f) return 0;
    char line[PATH_MAX_LENGTH], mount[PATH_MAX_LENGTH];
    double tightest = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *controllers = strchr(line, ':'), *group = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!group) continue;
        controllers++;
        const size_t length = (size_t)(group - controllers);
        if (length == 0) { /* "0::/path": the unified (v2) hierarchy */
            tightest = tighter(tightest_limit(cgroup_root, group + 1, true), tightest);
        } else if (names_cpu_controller(controllers, length)) {
            snprintf(mount, sizeof mount, "%s/%.*s", cgroup_root, (int)length, controllers);
            double limit = tightest_limit(mount, group + 1, false);
            if (limit == 0 && length != 3) { /* "cpu,cpuacct" may be mounted as "cpu" alone */
                snprintf(mount, sizeof mount, "%s/cpu", cgroup_root);
                limit = tightest_limit(mount, group + 1, false);
            }
            tightest = tighter(limit, tightest);
        }
    }
    fclose(f);
    return tightest > 0 ? (int64_t)ceil(tightest - 1e-9) : 0;
}
