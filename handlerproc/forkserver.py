# torchd's fork server for one handler runtime (forkserver.go says why it exists). Run as
# `python -u forkserver.py` with a SOCK_SEQPACKET socket to torchd on fd 3: it imports torch
# and TorchServe's worker once, runs no torch op (so no OpenMP or intra-op pool is started),
# and then forks each handler process on torchd's request: its child forks the worker, which
# runs TorchServe's worker in the model's directory and environment, and then execs
# supervisor.py to become the worker's supervisor, as small as one torchd starts itself. It
# answers each request with the supervisor's pid, and reports each supervisor's exit status.
# It dies with torchd (its parent-death signal, and the socket's close); the supervisors die
# with torchd too (their stdin closes). Told to exit (torchd retires an idle fork server), it
# exits at once and leaves its supervisors to torchd. Nothing of a handler runs in it.
import ctypes
import gc
import importlib
import importlib.util
import json
import os
import runpy
import select
import signal
import socket
import sys
import traceback

PR_SET_PDEATHSIG, PR_SET_NAME = 1, 15
libc = ctypes.CDLL(None, use_errno=True)
HERE = os.path.dirname(os.path.abspath(__file__))


def load_supervisor():
    # Under a private name: a model may have a module called supervisor.
    spec = importlib.util.spec_from_file_location("_torchd_supervisor", os.path.join(HERE, "supervisor.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def preload():
    """Imports what every worker imports; what a runtime lacks is left to the workers."""
    import torch  # noqa: F401  a runtime without torch has no use for a fork server

    for name in ("numpy", "PIL.Image", "torchvision", "ts.model_service_worker", "ts.torch_handler.base_handler",
                 "ts.torch_handler.vision_handler", "ts.torch_handler.image_classifier"):
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001  any failure: the worker imports it itself
            print("torchd fork server: %s not preloaded: %s" % (name, e), file=sys.stderr)


MADV_DONTNEED = 4


def drop_file_pages():
    """Unmaps the fork server's resident pages of its read-only file mappings (the libraries'
    text and constants its imports touched): they stay in the page cache, the workers fault
    in those they use, and the fork server, which only waits and forks, faults them back if
    it needs them. That takes about 300 MiB off its RSS (not its PSS: the pages are shared).
    A mapping with anonymous pages (relocated data) keeps them, as does any writable one."""
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    dropped = 0
    try:
        with open("/proc/self/smaps") as f:
            span = None
            for line in f:
                head = line.split(None, 5)
                if "-" in head[0] and len(head) >= 5:  # a mapping's first line
                    start, end = (int(x, 16) for x in head[0].split("-"))
                    path = head[5].strip() if len(head) > 5 else ""
                    # A file's read-only mapping, not [vdso] and the like.
                    span = (start, end) if "w" not in head[1] and path.startswith("/") else None
                elif span and head[0] == "Anonymous:" and head[1] == "0":
                    if libc.madvise(span[0], span[1] - span[0], MADV_DONTNEED) == 0:
                        dropped += span[1] - span[0]
                    span = None
    except OSError:
        pass
    return dropped


def send(ctl, msg):
    ctl.sendall(json.dumps(msg).encode())


def run_worker(req):
    """The worker, in the supervisor's child: TorchServe's worker script as __main__, in the
    model's directory, with the path a worker started apart would have."""
    # The name an exec'd worker has, not its supervisor's.
    libc.prctl(PR_SET_NAME, os.path.basename(sys.executable).encode()[:15], 0, 0, 0)
    os.chdir(req["cwd"])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = paths + [p for p in sys.path if p not in paths]
    importlib.invalidate_caches()
    import torch

    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))  # sets the pool's size; the pool starts at the first op
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()  # not the fork server's state, shared by every worker
    sys.argv = list(req["argv"])
    code = 1
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001  the worker's own handler prints its errors; this is the rest
        traceback.print_exc()
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)


def child(me, ctl, wake, sup, req, fds):
    """The forked child: it forks the worker, a copy of the warm image, then becomes the
    worker's supervisor by exec'ing supervisor.py, a fresh interpreter that holds none of the
    fork server's pages (a subreaper, its parent-death signal and its child kept)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # SIGTERM (torchd's stop) waits until the supervisor handles it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # No parent-death signal: it outlives a fork server that exits once idle, becoming torchd's
    # child (torchd is the subreaper). It dies with torchd by its stdin, a pipe only torchd
    # writes to, closing; if the fork server dies alone, torchd kills its tree.
    os.setpgid(0, 0)  # a group of its own, as an exec'd supervisor has
    # Before the worker exists, so that no orphan of its tree escapes before the exec.
    libc.prctl(sup.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    ctl.close()
    for fd in wake:
        os.close(fd)
    stdin, out = fds
    os.dup2(stdin, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(stdin)
    os.close(out)
    os.environ.clear()
    os.environ.update(dict(kv.split("=", 1) for kv in req["env"] if "=" in kv))
    mine = os.getpid()
    worker = os.fork()
    if worker == 0:
        sup.worker_child(mine, lambda: run_worker(req))
    try:
        os.execv(sys.executable, [sys.executable, "-I", "-S", os.path.join(HERE, "supervisor.py"), "--adopt", str(worker)])
    except OSError as e:
        os.write(2, ("torchd fork server: cannot exec the supervisor (%s): supervising in the fork\n" % e.strerror).encode())
    sup.main(worker=worker)
    os._exit(1)


def handle(me, ctl, wake, sup, data, fds):
    req = json.loads(data)
    if len(fds) != 2:
        for fd in fds:
            os.close(fd)
        send(ctl, {"op": "forked", "id": req.get("id"), "error": "the request did not carry the process's stdin and output"})
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as e:
        for fd in fds:
            os.close(fd)
        send(ctl, {"op": "forked", "id": req["id"], "error": "cannot fork: %s" % e.strerror})
        return
    if pid == 0:
        try:
            child(me, ctl, wake, sup, req, fds)
        except BaseException as e:  # noqa: BLE001
            os.write(2, ("torchd fork server: cannot start the handler process: %s\n" % e).encode())
        os._exit(127)
    for fd in fds:
        os.close(fd)
    send(ctl, {"op": "forked", "id": req["id"], "pid": pid})
    drop_file_pages()  # what the fork touched again


def reap(ctl):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        send(ctl, {"op": "exit", "pid": pid, "status": status})


def main():
    me = os.getpid()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    ctl = socket.socket(fileno=3)
    sup = load_supervisor()
    while HERE in sys.path:
        sys.path.remove(HERE)
    try:
        preload()
    except Exception as e:  # noqa: BLE001
        send(ctl, {"op": "failed", "error": "%s: %s" % (type(e).__name__, e)})
        return 1
    modules = sorted({name.split(".")[0] for name in sys.modules})
    # The imports' objects out of the collector's reach: a worker's full collection would
    # otherwise write every object's header, copying the pages that hold them (about 70 MiB
    # of private memory a worker that loads resnet18).
    gc.collect()
    gc.freeze()
    threads = len(os.listdir("/proc/self/task"))
    drop_file_pages()
    send(ctl, {"op": "ready", "modules": modules, "threads": threads})
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        try:
            ready, _, _ = select.select([ctl, wake_r], [], [])
        except InterruptedError:
            ready = []
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        reap(ctl)
        if ctl in ready:
            data, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 2)
            if not data:
                return 0  # torchd is gone; the supervisors follow (their stdin closes)
            if json.loads(data).get("op") == "exit":
                # Idle (RetireForkServers): its processes, and any it has not reaped, go to
                # torchd, their subreaper, which waits for them from now on.
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
            handle(me, ctl, (wake_r, wake_w), sup, data, fds)


if __name__ == "__main__":
    sys.exit(main())
