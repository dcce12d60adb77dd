# torchd's side of TorchServe's worker protocol, run as `python worker.py
# .../ts/model_service_worker.py ARGS` (or forked, as the fork server runs it): it runs
# TorchServe's worker script unchanged as __main__, and takes, before the handler sees a
# batch, the intra-op thread count torchd sends on its first request (threads.go): torch
# runs the batch on that many threads, set only when it changes. A count fixed by
# OMP_NUM_THREADS, or by the handler's own torch.set_num_threads, is left as it is. Once the
# process has been idle for a second after a batch, it gives the free pages of its heap back.
import ctypes
import os
import runpy
import sys
import threading
import time

HEADER = b"torchd-threads"


def take_threads(batch):
    """Removes torchd's thread count from the batch's first request (its last header of that
    name: torchd drops a client's there) and returns it, or 0 when none was sent."""
    headers = batch[0].get("headers") if batch else None
    n = 0
    for i in reversed(range(len(headers or ()))):
        if headers[i].get("name") == HEADER:
            try:
                n = int(headers[i].get("value"))
            except (TypeError, ValueError):
                n = 0
            del headers[i]
            break
    return n


def share_threads():
    try:
        import torch
        from ts.service import Service
    except Exception:  # noqa: BLE001  the worker reports it as it imports
        return
    # The count torch runs with unless someone sets another: while it holds, the count is
    # ours to set; once it does not (the handler set its own), it never is again.
    state = {"expect": torch.get_num_threads(), "owned": os.environ.get("OMP_NUM_THREADS", "").strip() != ""}
    predict = Service.predict

    def predict_shared(self, batch):
        n = take_threads(batch)
        if n > 0 and not state["owned"]:
            now = torch.get_num_threads()
            if now != state["expect"]:
                state["owned"] = True
            elif n != now:
                torch.set_num_threads(n)
                state["expect"] = n
        return predict(self, batch)

    Service.predict = predict_shared


IDLE_TRIM_S = 1.0


def trim_when_idle():
    """Once no batch has run for IDLE_TRIM_S after one, glibc's malloc_trim gives the free
    pages of the heap back to the system. glibc returns on its own only the free space at the
    heap's top, so what a burst's batches freed below a block still in use stayed resident
    for good. Under load no batch waits for it; an idle process pays it once per burst, and
    the next batch faults back what it uses."""
    try:
        from ts.service import Service
        trim = ctypes.CDLL(None).malloc_trim  # glibc's; elsewhere nothing is trimmed
    except (ImportError, OSError, AttributeError):
        return
    trim.argtypes = (ctypes.c_size_t,)
    cond = threading.Condition()
    # ended: when the last batch ended, None once trimmed; parked: the trimmer waits for a batch
    state = {"busy": 0, "ended": None, "parked": False}
    predict = Service.predict

    def predict_then_trim(self, batch):
        with cond:
            state["busy"] += 1
        try:
            return predict(self, batch)
        finally:
            with cond:
                state["busy"] -= 1
                if state["parked"]:  # else it wakes on its own to look again
                    cond.notify()
                state["ended"] = time.monotonic()

    def trimmer():
        while True:
            with cond:
                while state["busy"] or state["ended"] is None:
                    state["parked"] = True
                    cond.wait()
                state["parked"] = False
                left = state["ended"] + IDLE_TRIM_S - time.monotonic()
                if left > 0:
                    cond.wait(left)
                    continue
                state["ended"] = None
            trim(0)

    threading.Thread(target=trimmer, name="torchd-trim", daemon=True).start()
    Service.predict = predict_then_trim


def main():
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    # As `python script` has it (the worker takes its own directory off the path again); a
    # forked worker's path is the fork server's, left as it is.
    if sys.path and sys.path[0] == os.path.dirname(os.path.realpath(__file__)):
        sys.path[0] = os.path.dirname(os.path.realpath(script))
    share_threads()
    trim_when_idle()
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
