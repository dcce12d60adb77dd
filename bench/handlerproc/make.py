"""Writes resnet18's random weights (seeded) and archives them with the benchmark's handler
using torch-model-archiver: python make.py STORE."""
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
store = sys.argv[1]
os.makedirs(store, exist_ok=True)
work = tempfile.mkdtemp()
try:
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), os.path.join(work, "resnet18.pt"))
    shutil.copy(os.path.join(HERE, "handler.py"), work)
    with open(os.path.join(work, "model-config.yaml"), "w") as f:
        # The mission's BATCH_SIZE=32 WORKERS=2, for both servers.
        f.write("minWorkers: 2\nmaxWorkers: 2\nbatchSize: 32\nmaxBatchDelay: 10\nresponseTimeout: 120\nstartupTimeout: 600\n")
    subprocess.run([sys.executable, "-c", "import sys; from model_archiver.model_packaging import generate_model_archive; sys.exit(generate_model_archive())",
                    "--model-name", "resnet18_py", "--version", "1.0", "--serialized-file", "resnet18.pt", "--handler", "handler.py",
                    "--config-file", "model-config.yaml", "--export-path", store, "--force"], cwd=work, check=True)
finally:
    shutil.rmtree(work)
