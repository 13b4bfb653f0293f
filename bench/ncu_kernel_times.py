"""Sums the kernel durations of an Nsight Compute CSV log by kernel name.

    ncu --metrics gpu__time_duration.sum --csv --log-file run.csv ./program ...
    python3 bench/ncu_kernel_times.py run.csv [top]

Prints the total GPU time and the `top` (default 25) kernels by their summed time, with
how often each ran: where a training step's device time goes."""
import collections
import csv
import sys

MICROSECONDS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6, "nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def main(path, top=25):
    rows = [row for row in csv.reader(open(path)) if len(row) > 10]
    if not rows:
        sys.exit(f"{path}: no kernel rows")
    head = rows[0]
    name_at, value_at, unit_at = (head.index(k) for k in ("Kernel Name", "Metric Value", "Metric Unit"))
    total, count = collections.Counter(), collections.Counter()
    for row in rows[1:]:
        name = row[name_at].split("(")[0][:80]
        total[name] += float(row[value_at].replace(",", "")) * MICROSECONDS[row[unit_at]]
        count[name] += 1
    print(f"{sum(total.values()):10.0f} us in {sum(count.values())} kernels")
    for name, us in total.most_common(top):
        print(f"{us:10.0f} us {count[name]:6d}x  {name}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25)
