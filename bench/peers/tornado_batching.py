"""The Python batching baseline: a Tornado HTTP service with one batching thread per model.

Requests are decoded and transformed in the handler, on Tornado's IO loop; the batching
thread takes the first queued request, collects more for up to 1 ms or until it has 64,
stacks them, runs one forward under torch.inference_mode(), and hands each request its rows
back on the IO loop, which postprocesses and answers. This is how image captioning and
similar Python services batch.

  /usr/bin/python3 bench/peers/tornado_batching.py --port 8090 [--threads 2]

POST /predictions/{resnet18,digits,digits_tensor} with the raw body; GET /ping.
"""
import argparse
import asyncio
import queue
import threading
import time

import tornado.ioloop
import tornado.web

import zoo

MAX_BATCH = 64
MAX_DELAY = 0.001  # seconds


class Batcher:
    def __init__(self, model, threads):
        self.model, self.threads = model, threads
        self.q = queue.SimpleQueue()
        threading.Thread(target=self.run, daemon=True, name="batch-" + model.name).start()

    def submit(self, loop, x):
        fut = loop.create_future()
        self.q.put((x, fut, loop))
        return fut

    def run(self):
        zoo.set_threads(self.threads)
        while True:
            items = [self.q.get()]
            deadline = time.monotonic() + MAX_DELAY
            while len(items) < MAX_BATCH:
                wait = deadline - time.monotonic()
                try:
                    items.append(self.q.get(timeout=wait) if wait > 0 else self.q.get_nowait())
                except queue.Empty:
                    break
            try:
                x = zoo.torch.cat([i[0] for i in items]) if len(items) > 1 else items[0][0]
                y = self.model.forward(x)
                off = 0
                for x_i, fut, loop in items:
                    n = x_i.shape[0]
                    loop.call_soon_threadsafe(_resolve, fut, y[off:off + n], None)
                    off += n
            except Exception as e:  # one bad batch answers each of its requests
                for _, fut, loop in items:
                    loop.call_soon_threadsafe(_resolve, fut, None, e)


def _resolve(fut, value, err):
    if fut.done():
        return
    if err is not None:
        fut.set_exception(err)
    else:
        fut.set_result(value)


class Predict(tornado.web.RequestHandler):
    def initialize(self, models, batchers):
        self.models, self.batchers = models, batchers

    async def post(self, name):
        m = self.models.get(name)
        if m is None:
            self.set_status(404)
            return self.finish({"code": 404, "message": "Model not found: " + name})
        try:
            x = m.preprocess(self.request.body)
        except Exception as e:
            self.set_status(400)
            return self.finish({"code": 400, "message": str(e)})
        y = await self.batchers[name].submit(asyncio.get_running_loop(), x)
        ctype, body = m.postprocess(y)
        self.set_header("Content-Type", ctype)
        self.finish(body)


class Ping(tornado.web.RequestHandler):
    def get(self):
        self.finish({"status": "Healthy"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads of each batching thread")
    a = ap.parse_args()
    zoo.set_threads(a.threads, interop=True)
    models = zoo.load_models()
    batchers = {n: Batcher(m, a.threads) for n, m in models.items()}
    app = tornado.web.Application([
        (r"/predictions/([^/]+)", Predict, dict(models=models, batchers=batchers)),
        (r"/ping", Ping),
    ])
    app.listen(a.port, address="127.0.0.1", max_body_size=64 << 20)
    tornado.ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()
