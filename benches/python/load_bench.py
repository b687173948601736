"""How an in-process Adult epoch slows down when other processes compete for the cores, under
each thread policy, in one run.

For each number of competing processes (busy loops, each bounded in time, in their own process
group, killed when the measurement ends) and each policy, a fresh process times ``--epochs``
private Adult epochs (3 silos, batch 256, ε = 1, λ = 1, the validation defaults) and reports its
median epoch; meanwhile the bench samples the machine's runnable threads (``procs_running`` of
``/proc/stat``) every 20 ms. The policies:

* ``adaptive``: the default, the rayon pool sized from the cores this process may use, and one
  thread for a call that starts while the machine is oversubscribed (``rust/src/threads.rs``);
* ``pool``: ``PFAIR_ADAPTIVE_THREADS=0``, the pool whatever the load (pfair before);
* ``one thread``: ``RAYON_NUM_THREADS=1``.

Each competitor and the worker run in a session of their own by default, as separate programs
of separate users or terminals do: Linux's scheduler (autogroups, and CPU cgroups likewise) then
shares the cores fairly between sessions, not between threads, so a process's second thread
gains it no CPU time while the machine is oversubscribed. With ``--same-session`` they all run
in the bench's session (each still in a process group of its own, for the clean-up), as jobs
started from one shell do, and the cores are shared between threads.

The slow-down of a policy is its median epoch over its own median with no competing process, in
the same run; the machine's own load (other users) is printed with it. Policies and loads are
interleaved, ``--repeats`` times, and the median of the repeats is reported.

    python benches/python/load_bench.py [--epochs 150] [--competitors 0,2,4] [--repeats 2] [--same-session]
        [--out docs/dev/performance-notebook.md [--section load]]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

POLICIES = {
    "adaptive": {},
    "pool": {"PFAIR_ADAPTIVE_THREADS": "0"},
    "one thread": {"RAYON_NUM_THREADS": "1"},
}

WORKER = r"""
import sys, time, warnings, numpy as np, pfair
from pfair.protocol.simulation import Simulation
warnings.simplefilter("ignore")
fed = pfair.Federation.partition(pfair.datasets.load_adult(), 3, heterogeneity=0.0, by="age", seed=0)
def run(epochs):
    st = pfair.SteFFLe(epsilon=1.0, lam=1.0, batch_size=256, epochs=epochs).settings()
    sim = Simulation(st, fed, ledgers="new")
    stamps = [time.perf_counter()]
    sim.run(on_epoch=lambda *a: stamps.append(time.perf_counter()))
    return np.diff(stamps)[1:] * 1e3
run(5)
print("READY", flush=True)
sys.stdin.readline()
t = run(int(sys.argv[1]))
print(f"{np.median(t):.4f} {np.min(t):.4f}", flush=True)
"""

BURNER = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


def runnable() -> int:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("procs_running"):
                return int(line.split()[1])
    return 0


def measure(policy: str, competitors: int, epochs: int, limit: float, same_session: bool = False) -> tuple[float, float, float]:
    """(median epoch ms, min epoch ms, mean runnable threads during the run)."""
    # A process group of its own either way (killed as one); a session of its own unless same_session.
    group = {"process_group": 0} if same_session else {"start_new_session": True}
    env = dict(os.environ)
    env.pop("RAYON_NUM_THREADS", None)
    env.pop("PFAIR_ADAPTIVE_THREADS", None)
    env.update(POLICIES[policy])
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(epochs)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env, **group)
    burners = []
    try:
        if worker.stdout.readline().strip() != "READY":
            raise RuntimeError("the worker did not start")
        burners = [subprocess.Popen([sys.executable, "-c", BURNER.format(seconds=limit)], **group)
                   for _ in range(competitors)]
        time.sleep(0.3)  # the competitors are running
        samples: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append(runnable())
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        worker.stdin.write("go\n")
        worker.stdin.flush()
        out = worker.stdout.readline().split()
        stop.set()
        sampler.join()
        worker.wait(timeout=limit)
        med, mn = float(out[0]), float(out[1])
        # The sampler and the worker's own threads are among the runnable: count the others.
        return med, mn, statistics.mean(samples) if samples else float("nan")
    finally:
        for p in burners + [worker]:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=150)
    ap.add_argument("--competitors", default="0,2,4")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--limit", type=float, default=120.0, help="seconds a competitor or worker may live")
    ap.add_argument("--same-session", action="store_true", help="run the competitors and the worker in the bench's session")
    ap.add_argument("--out", default=None, help="also write the table into this Markdown page, between its markers")
    ap.add_argument("--section", default="load", help="name of the marked block of --out")
    args = ap.parse_args()
    loads = [int(c) for c in args.competitors.split(",")]
    load_before = os.getloadavg()
    res: dict = {}
    for _ in range(args.repeats):
        for c in loads:
            for policy in POLICIES:
                res.setdefault((policy, c), []).append(measure(policy, c, args.epochs, args.limit, args.same_session))
    load_after = os.getloadavg()
    med = {k: statistics.median(r[0] for r in v) for k, v in res.items()}
    run = {c: statistics.mean(r[2] for p in POLICIES for r in res[(p, c)]) for c in loads}
    lines = [f"Adult epoch (3 silos, batch 256, ε = 1, λ = 1, validation defaults), {args.epochs} epochs a "
             f"measurement, median of {args.repeats} repeats; competitors in "
             f"{'the same session' if args.same_session else 'sessions of their own'}; {os.cpu_count()} cores; load average (1, 5, 15 min) "
             f"{load_before[0]:.1f} {load_before[1]:.1f} {load_before[2]:.1f} before, {load_after[0]:.1f} "
             f"{load_after[1]:.1f} {load_after[2]:.1f} after (other users of the machine included).", "",
             "| competing processes | runnable threads (mean) | " + " | ".join(
                 f"{p}: median ms (slow-down)" for p in POLICIES) + " | adaptive / pool |",
             "|---|---|" + "---|" * len(POLICIES) + "---|"]
    for c in loads:
        cells = [f"{med[(p, c)]:.2f} ({med[(p, c)] / med[(p, loads[0])]:.2f}×)" for p in POLICIES]
        lines.append(f"| {c} | {run[c]:.1f} | " + " | ".join(cells) + f" | {med[('adaptive', c)] / med[('pool', c)]:.2f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from _markdown import write_between_markers

        write_between_markers(args.out, table, "load_bench.py", args.section)


if __name__ == "__main__":
    main()
