"""An MMS-style entry point (--handler mms_service:handle): a module function that is called
once with no data to initialize, then with each batch."""
import hashlib


def handle(data, context):
    if data is None:
        return None
    out = []
    for d in data:
        body = d.get("data") or d.get("body")
        if isinstance(body, (bytearray, bytes)):
            body = bytes(body)
        else:
            body = str(body).encode()
        out.append({"length": len(body), "sha256": hashlib.sha256(body).hexdigest(), "model": context.model_name})
    return out
