"""An MMS-style module:function handler."""


def handle(data, context):
    if data is None:  # initialize
        return None
    return [{"echo": (d.get("body") or d.get("data")).decode() if isinstance(d.get("body") or d.get("data"), (bytes, bytearray)) else d.get("body") or d.get("data")} for d in data]
