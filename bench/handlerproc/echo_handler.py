"""The trivial handler of bench/handlerproc/echo.sh: each request's body back, untouched, so
that a request's time is the server's and the worker protocol's, not the handler's."""


def handle(data, context):
    if data is None:  # the worker's load call
        return None
    return [row.get("body") if row.get("body") is not None else row.get("data") for row in data]
