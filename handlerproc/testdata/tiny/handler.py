"""A TorchServe custom handler for handlerproc's tests: an eager model (model.py) whose
state dict the test writes, with inputs that make it misbehave on purpose."""
import json
import os
import subprocess
import sys
import time

import torch
from ts.handler_utils.utils import send_intermediate_predict_response
from ts.torch_handler.base_handler import BaseHandler
from ts.utils.util import PredictionException


def hugepage_advised():
    """Whether torch asked transparent huge pages (MADV_HUGEPAGE, VmFlags "hg") for a tensor
    of 8 MiB: what THP_MEM_ALLOC_ENABLE turns on."""
    t = torch.empty(8 << 20, dtype=torch.uint8)
    addr, inside = t.data_ptr(), False
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split(" ", 1)[0]
            if "-" in first and not first.endswith(":"):
                lo, hi = (int(x, 16) for x in first.split("-"))
                inside = lo <= addr < hi
            elif inside and line.startswith("VmFlags:"):
                return "hg" in line.split()[1:]
    return False

class TinyHandler(BaseHandler):
    def preprocess(self, data):
        rows = []
        for d in data:
            body = d.get("data") or d.get("body")
            if isinstance(body, (bytes, bytearray)):
                body = json.loads(body)
            if body == "raise":
                raise ValueError("asked to raise")
            if body == "refuse":
                raise PredictionException("the handler refused this input", 500)
            if body == "grow":
                self.hog = b"x" * (1 << 30)  # written, so resident
                time.sleep(600)
            if body == "crash":
                os._exit(3)
            if body == "hang":
                time.sleep(600)
            if body == "wrong count":
                self.wrong = True
            if body == "stream":
                self.stream = True
            if body == "sequence":
                self.sequence = True
            if body == "probe":
                self.probe = True
            if isinstance(body, dict) and "probe_after" in body:
                # A batch that holds its process until the test creates the file, then probes.
                open(body["probe_after"] + ".in", "w").close()
                for _ in range(600):
                    if os.path.exists(body["probe_after"]):
                        break
                    time.sleep(0.05)
                self.probe = True
            if isinstance(body, dict) and "set_threads" in body:
                torch.set_num_threads(body["set_threads"])  # a handler that sets its own count
                self.probe = True
            if isinstance(body, dict) and "spin" in body:
                with open(body["spin"], "w") as f:
                    f.write(str(os.getpid()))
                while True:
                    pass
            if isinstance(body, dict) and "sleep" in body:
                time.sleep(body["sleep"])
            if body == "fragment":
                # 256 MiB of the heap freed between blocks still in use (64 MiB of them, too
                # large for any hole the imports left): glibc keeps it resident until malloc_trim.
                blocks, self.pins = [], []
                for _ in range(256):
                    blocks.append(b"x" * (1 << 20))
                    self.pins.append(b"y" * (256 << 10))
                del blocks
            if body == "long line":
                print("x" * (2 << 20))
                print("after the long line")
            if isinstance(body, dict) and "flood" in body:
                for i in range(body["flood"]):
                    print("flood line", i)
                sys.stdout.flush()
            if isinstance(body, dict) and "spawn" in body:
                # Children that leave the worker's process group: one in a session of its
                # own, one orphaned by a shell that exits at once.
                self.spawned = [subprocess.Popen(["sleep", "600"], start_new_session=True).pid]
                subprocess.run(["sh", "-c", "setsid sleep 601 & echo $! > " + body["spawn"]], check=True)
            if isinstance(body, dict) and "escape" in body:
                # A hostile handler: a child in a session of its own, then its supervisor
                # killed, which takes the worker with it.
                child = subprocess.Popen(["sleep", "602"], start_new_session=True)
                with open(body["escape"], "w") as f:
                    f.write(str(child.pid))
                os.kill(os.getppid(), 9)
                time.sleep(600)
            if isinstance(body, dict) and "status" in body:
                self.status = body["status"]
            if isinstance(body, dict) and "parts" in body:
                self.parts = (body["parts"], body["size"])
            if isinstance(body, dict) and "stream_until" in body:
                # One part, then the last once the client has shown it got the first
                # (by creating this file): a response that is not streamed never ends.
                self.until = body["stream_until"]
                body = {"x": [0.0] * 4}
            rows.append(torch.tensor(body["x"] if isinstance(body, dict) and "x" in body else [0.0] * 4, dtype=torch.float32))
        return torch.stack(rows)

    def postprocess(self, out):
        status = getattr(self, "status", None)
        if status is not None:
            self.status = None
            for i in range(len(out)):
                self.context.set_response_status(status, "set by the handler", i)
            return ["status set"] * len(out)
        parts = getattr(self, "parts", None)
        if parts:
            self.parts = None
            for _ in range(parts[0]):
                send_intermediate_predict_response(["p" * parts[1]] * len(out), self.context.request_ids, "Intermediate", 200, self.context)
            return ["end"] * len(out)
        spawned = getattr(self, "spawned", None)
        if spawned:
            self.spawned = None
            return [{"pids": spawned}] * len(out)
        if getattr(self, "wrong", False):
            self.wrong = False
            return []
        until = getattr(self, "until", None)
        if until:
            self.until = None
            send_intermediate_predict_response(["first;"] * len(out), self.context.request_ids, "Intermediate", 200, self.context)
            for _ in range(600):
                if os.path.exists(until):
                    return ["last"] * len(out)
                time.sleep(0.1)
            return ["the client never got the first part"] * len(out)
        if getattr(self, "probe", False):
            # What a process sees of how it started: forked or apart, the same.
            self.probe = False
            import numpy
            return [{"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(), "path0": sys.path[0],
                     "threads": torch.get_num_threads(), "numpy": int(numpy.random.randint(1 << 30)),
                     "mark": [k for k in os.environ if k.startswith("TORCHD_HANDLER_OF")],
                     "threads_header": self.context.get_request_header(0, "torchd-threads"),
                     "alloc_env": {k: os.environ.get(k) for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "THP_MEM_ALLOC_ENABLE")},
                     "hugepage": hugepage_advised()}] * len(out)
        if getattr(self, "sequence", False):
            self.sequence = False
            return [f"sequence {self.context.get_sequence_id(i)}" for i in range(len(out))]
        if getattr(self, "stream", False):
            self.stream = False
            for part in ("a", "b"):
                send_intermediate_predict_response([part] * len(out), self.context.request_ids, "Intermediate", 200, self.context)
            return ["c"] * len(out)
        return [{"logits": r.tolist(), "batch": len(out), "header": self.context.get_request_header(i, "X-Request-Id"),
                 "batch_size": self.context.system_properties.get("batch_size")} for i, r in enumerate(out)]
