"""Writes CPU-only stand-ins for the CUDA libraries that the PyPI torch wheel links, so that the
handler runtime's venv (Dockerfile.cpu, target handlers) imports torch without the ~3 GB of
nvidia-* wheels: python3 cuda-stubs.py FULL_SITE_PACKAGES SITE_PACKAGES.

PyPI's Linux torch is the CUDA build: libtorch_python.so and libtorch_cuda.so name libcudnn,
libcublas, libnccl, ... as NEEDED, and Python loads extensions with RTLD_NOW, so each of those
libraries must exist and define every symbol torch takes from it. For each library that a .so
under SITE_PACKAGES/torch* needs and SITE_PACKAGES lacks, this finds the real one in
FULL_SITE_PACKAGES (a venv with the full CUDA wheels), takes the symbols torch imports from it,
and compiles a library with the same soname, symbol versions and symbols, where each function
prints its name and aborts. It goes where torch's RPATH looks (nvidia/<pkg>/lib). No GPU is
used, torch.cuda.is_available() is False, so on CPU none of them is called.
"""
import os
import re
import subprocess
import sys
import tempfile

full, site = sys.argv[1], sys.argv[2]


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def elfs(root):
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            if ".so" in f and not os.path.islink(p):
                with open(p, "rb") as fh:
                    if fh.read(4) == b"\x7fELF":
                        yield p


ours = [p for top in ("torch", "torchvision", "torchvision.libs") for p in elfs(os.path.join(site, top))]
have = {os.path.basename(p) for p in elfs(site)} | {os.path.basename(p) for p in
                                                    (os.path.join(d, f) for d, _, fs in os.walk(site) for f in fs)}
real = {}
for p in elfs(os.path.join(full, "nvidia")):
    real.setdefault(os.path.basename(p), p)

needed, undefined = set(), set()
for p in ours:
    needed |= set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", run("readelf", "-d", "--wide", p)))
    for line in run("nm", "-D", "--undefined-only", p).splitlines():
        undefined.add(line.split()[-1].split("@")[0])

made = 0
for lib in sorted(needed - have):
    if lib not in real:
        continue  # a system library, or one dlopened only with a GPU (libcuda.so.1)
    src = real[lib]
    funcs, objects, versions = [], [], {}
    for line in run("nm", "-D", "--defined-only", "--with-symbol-versions", "-S", src).splitlines():
        parts = line.split()
        name, _, version = parts[-1].partition("@@")
        if name.split("@")[0] not in undefined or "@" in name:
            continue
        kind = parts[-2]
        if kind in "TtWi":
            funcs.append(name)
        elif kind in "DdBbRrV":
            objects.append((name, int(parts[1], 16) if len(parts) == 4 else 8))
        else:
            continue
        versions.setdefault(version, []).append(name)
    out = os.path.join(site, os.path.relpath(os.path.dirname(src), full))
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        c = os.path.join(tmp, "stub.c")
        with open(c, "w") as f:
            f.write("#include <stdio.h>\n#include <stdlib.h>\n")
            f.write("static void stub(const char *name) {\n"
                    f'  fprintf(stderr, "{lib} is a stand-in in this CPU-only image: %s needs a GPU image\\n", name);\n'
                    "  abort();\n}\n")
            for n in funcs:
                f.write(f'void {n}(void) {{ stub("{n}"); }}\n')
            for n, size in objects:
                f.write(f"char {n}[{max(size, 1)}];\n")
        flags = []
        if any(versions):
            vs = os.path.join(tmp, "versions")
            with open(vs, "w") as f:
                for v, names in versions.items():
                    f.write(f"{v} {{ global: {' '.join(n + ';' for n in names)} }};\n" if v else "")
            flags = [f"-Wl,--version-script={vs}"]
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-w", f"-Wl,-soname,{lib}", "-o",
                        os.path.join(out, lib), c, *flags], check=True)
    made += 1
    print(f"cuda-stubs: {os.path.relpath(os.path.join(out, lib), site)}: {len(funcs)} functions, {len(objects)} objects")
print(f"cuda-stubs: {made} stand-ins")
