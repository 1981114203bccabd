#!/usr/bin/env python3
"""Fails when a CUDA runtime, cuBLAS, cuSOLVER or NCCL call's status may be ignored in the GPU
backends.

Every call of a function named cuda*, cublas*, cusolver* or nccl* must be the argument of a
checking macro (CZ_CU, CZ_BLAS, CZ_SOLVER, CZ_NCCL, CZ_CU_RC, CZ_NCCL_RC;
executor/src/compute/cuda/check.h; CZ_NCCL_ON, comm_nccl.c's settled form), whose functions are
warn_unused_result so that dropping the checked status is a compile error. The exceptions are
the calls that return no status (error strings, the last-error query inside CZ_CU_RC).

Usage: check_gpu_status.py [FILE...]   (default: the GPU backend sources under executor/src)
       check_gpu_status.py --self-test (proves the check catches an unchecked call)
Prints each offending call as FILE:LINE: CALL and exits 1 when there is one.
"""
import os
import re
import sys
import tempfile

MACROS = ("CZ_CU", "CZ_BLAS", "CZ_SOLVER", "CZ_NCCL", "CZ_CU_RC", "CZ_NCCL_RC", "CZ_NCCL_ON")
NO_STATUS = {"cudaGetErrorString", "cudaGetErrorName", "cublasGetStatusString",
             "ncclGetErrorString"}
CALL = re.compile(r"\b((?:cuda|cublas|cusolver|nccl)[A-Z][A-Za-z0-9_]*)\s*\(")
MACRO = re.compile(r"\b(" + "|".join(MACROS) + r")\s*\(")


def strip_comments_and_strings(text):
    """Blanks comments and string literals, keeping line breaks so line numbers stay right."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(c if c == "\n" else " " for c in text[i:j]))
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + " " * (j - i - 1))
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def macro_spans(code):
    """(start, end) of every checking macro's argument list."""
    spans = []
    for m in MACRO.finditer(code):
        depth, j = 0, m.end() - 1
        while j < len(code):
            if code[j] == "(":
                depth += 1
            elif code[j] == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        spans.append((m.end(), j))
    return spans


def unchecked(path):
    with open(path, encoding="utf-8") as f:
        code = strip_comments_and_strings(f.read())
    spans = macro_spans(code)
    bad = []
    for m in CALL.finditer(code):
        name = m.group(1)
        if name in NO_STATUS:
            continue
        # A definition or declaration of our own function named like one is not a call.
        before = code[max(0, m.start() - 40):m.start()]
        if re.search(r"\b(int|void|static)\s+$", before):
            continue
        if any(s <= m.start() < e for s, e in spans):
            continue
        line = code.count("\n", 0, m.start()) + 1
        bad.append(f"{path}:{line}: {name}(...) is not inside {'/'.join(MACROS)}")
    return bad


def default_files(root):
    files = []
    for sub in ("executor/src/compute/cuda", "executor/src/comm/nccl"):
        d = os.path.join(root, sub)
        if os.path.isdir(d):
            files += sorted(os.path.join(d, f) for f in os.listdir(d)
                            if f.endswith((".c", ".cu", ".h")))
    return files


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        good = os.path.join(tmp, "good.c")
        bad = os.path.join(tmp, "bad.c")
        with open(good, "w") as f:
            f.write('/* cudaFree(p) in a comment */\nint f(void *p, cz_error *e)\n'
                    '{\n    puts("cudaMalloc(");\n    return CZ_CU(e, cudaFree(p));\n}\n')
        with open(bad, "w") as f:
            f.write("void g(void *p, void *h)\n{\n    cudaFree(p);\n    cusolverDnDestroy(h);\n}\n")
        ok = not unchecked(good) and len(unchecked(bad)) == 2
        print("self-test:", "passed" if ok else "FAILED", unchecked(bad))
        return 0 if ok else 1


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = argv[1:] or default_files(root)
    if not files:
        print("no GPU backend sources found")
        return 1
    bad = [b for f in files for b in unchecked(f)]
    for b in bad:
        print(b)
    print(f"{len(files)} files checked, {len(bad)} unchecked CUDA/cuBLAS/cuSOLVER/NCCL calls")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
