# torchd's supervisor of one handler process (supervisor.go says why it exists). Run as
# `python -I -S supervisor.py WORKER-ARGV...`, or as `supervisor.py --adopt PID` by the fork
# server's child (forkserver.py) once it has forked the worker: it starts the worker, is the subreaper of every
# process the handler starts (one that calls setsid stays in its tree), reaps them as they
# exit, and kills the whole tree when the worker exits, when torchd sends SIGTERM, or when
# torchd is gone (its stdin, a pipe only torchd writes to, closes). It then exits as the
# worker did, or by SIGKILL when it was told to stop. Nothing of the handler runs in it.
import ctypes
import os
import select
import signal
import sys
import time

PR_SET_PDEATHSIG, PR_SET_NAME, PR_SET_CHILD_SUBREAPER = 1, 15, 36
libc = ctypes.CDLL(None, use_errno=True)


def tree(root):
    """root's descendants as (pid, state), from /proc."""
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/" + name + "/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        kids.setdefault(int(fields[1]), []).append((int(name), fields[0]))
    out, todo = [], [root]
    while todo:
        for pid, state in kids.get(todo.pop(), ()):
            out.append((pid, state))
            todo.append(pid)
    return out


def reap(worker):
    """Collects every child that exited; returns the worker's status if it was one."""
    status = None
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == worker:
            status = st


def kill_tree(worker):
    """SIGKILLs every descendant until none is left (a process forking meanwhile is caught by
    the next round: its orphans come to this subreaper), then reaps them. Returns the worker's
    status if it was reaped here."""
    me, status = os.getpid(), None
    for _ in range(1000):
        live = [pid for pid, state in tree(me) if state != b"Z"]
        if not live:
            break
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        status = reap(worker) if status is None else status
        time.sleep(0.002)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == worker:
            status = st
        elif pid == 0:
            time.sleep(0.002)
    return status


def exec_worker():
    os.execv(sys.argv[1], sys.argv[1:])


def worker_child(me, run_worker, close=()):
    """The forked worker's side: it dies with its supervisor me, reads nothing from torchd's
    pipe, and runs run_worker, which must not return."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        # The worker dies with its supervisor, which may have gone before the prctl.
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != me:
            os._exit(1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd in close:
            os.close(fd)
        run_worker()
    except BaseException as e:
        os.write(2, ("torchd supervisor: cannot start the handler process: %s\n" % e).encode())
    os._exit(127)


def main(run_worker=exec_worker, worker=None):
    """Supervises run_worker, which runs in a forked child and must not return; or worker, a
    child started already (the fork server's: `supervisor.py --adopt PID`, exec'd by the
    worker's parent, a subreaper with SIGTERM blocked until it is handled here)."""
    me = os.getpid()
    # Its name, which ps and torchd's tests find it by.
    libc.prctl(PR_SET_NAME, b"torchd-sup", 0, 0, 0)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        os.write(2, b"torchd supervisor: cannot become a subreaper: a handler's detached children escape its tree\n")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if worker is None:
        worker = os.fork()
        if worker == 0:
            worker_child(me, run_worker, (wake_r, wake_w))
    # An adopted worker may have exited before SIGCHLD was handled.
    status = reap(worker)
    while status is None and not stop:
        try:
            ready, _, _ = select.select([0, wake_r], [], [])
        except InterruptedError:
            ready = []
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        if 0 in ready and not os.read(0, 4096):
            stop.append(True)  # torchd is gone
        status = reap(worker)
    killed = kill_tree(worker)
    status = status if status is not None else killed
    if stop or status is None:
        os.kill(me, signal.SIGKILL)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(me, sig)
        os.kill(me, signal.SIGKILL)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--adopt"]:
        main(worker=int(sys.argv[2]))
    else:
        main()
