"""Archives bench/handlerproc/echo_handler.py twice with torch-model-archiver (python
make_echo.py STORE): echo1, batch size 1 and one worker (a request's own path), and echo32,
the resnet18 benchmark's batch size 32, maxBatchDelay 10 and two workers."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
store = sys.argv[1]
os.makedirs(store, exist_ok=True)
for name, cfg in (("echo1", "minWorkers: 1\nmaxWorkers: 1\nbatchSize: 1\n"),
                  ("echo32", "minWorkers: 2\nmaxWorkers: 2\nbatchSize: 32\nmaxBatchDelay: 10\n")):
    work = tempfile.mkdtemp()
    try:
        shutil.copy(os.path.join(HERE, "echo_handler.py"), work)
        with open(os.path.join(work, "model-config.yaml"), "w") as f:
            f.write(cfg + "responseTimeout: 120\n")
        subprocess.run([sys.executable, "-c", "import sys; from model_archiver.model_packaging import generate_model_archive; sys.exit(generate_model_archive())",
                        "--model-name", name, "--version", "1.0", "--handler", "echo_handler:handle",
                        "--config-file", "model-config.yaml", "--export-path", store, "--force"], cwd=work, check=True)
    finally:
        shutil.rmtree(work)
