"""Writes the container test's handler archive (deploy/docker/test.sh): python3 make-handler-mar.py
DIGITS_MAR OUT_MAR. It takes the TorchScript digits CNN out of the image's digits.mar and
archives it with testdata/digits_handler.py as `torch-model-archiver --handler handler.py`
would (a zip with MAR-INF/MANIFEST.json), with the standard library only, so that the test
needs no torch on the host."""
import json
import os
import sys
import zipfile

src, out = sys.argv[1], sys.argv[2]
handler = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "digits_handler.py")
manifest = {"createdOn": "01/01/2026 00:00:00", "runtime": "python", "archiverVersion": "0.12.0",
            "model": {"modelName": "digits_py", "serializedFile": "model.pt", "handler": "handler.py",
                      "modelVersion": "1.0"}}
with zipfile.ZipFile(src) as z, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as o:
    o.writestr("model.pt", z.read("model.pt"))
    o.write(handler, "handler.py")
    o.writestr("MAR-INF/MANIFEST.json", json.dumps(manifest, indent=2))
