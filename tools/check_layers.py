#!/usr/bin/env python3
"""Fails when the source tree breaks the layering of docs/ARCHITECTURE.md or its docs name
what does not exist.

Rules (each file's quoted #include lines; a name is resolved to the project header of that name,
the including file's own folder first; angle-bracket includes are system headers):

  layers   Which planner headers a file may include, by where the file is:
             planner/format/  canzona.h and planner/format's own headers (the format builds on
                              nothing else of the planner);
             planner/lib/     canzona.h, cz_format.h and planner/lib's own headers;
             planner/cli/     canzona.h, cz_format.h, planner/lib's and planner/cli's headers;
             anywhere else    canzona.h, canzona_format.h and cz_format.h only (the
                              executor, tools, tests, examples): never a planner/lib or
                              planner/cli header, nor a header private to the format
                              (format_internal.h, json_util.h, cz_error.h, cz_assert.h, which
                              cz_format.h includes itself).
           The executor and the format include the plan format's public header
           canzona_format.h, never the planner's canzona.h: canzona_exec.h shows a job exactly
           what libcanzona-exec exports.
           Exempt: tests/unit/ and fuzz/, the planner's white-box tests, which test the
           planner library's and the format's internal functions by design.
           And outside executor/, no header of executor/src/ (the executor's insides): what
           tests or times them from outside (tests/, fuzz/, tools/bench/) includes the one
           test-only header executor/testing/cz_exec_testing.h (or its _mpi form), and
           nothing else outside executor/ includes that.
  cycles   The header include graph of planner/format/, planner/lib/ and executor/ (with the
           public headers in planner/include/ and executor/include/) has no cycle: no header
           includes itself, directly or through others. .c files include headers but are never
           included, so they cannot close a cycle and are not part of the graph.
  names    Every function or global defined without `static` in planner/format/*.c,
           planner/lib/*.c or executor/src/ (its .c and .cu files, the GPU plugin's included)
           is public (declared in canzona.h, or for the executor in canzona_exec.h, named cz_)
           or internal and named cz__ (the naming rule of docs/ARCHITECTURE.md). (The CLI is a
           program, not a library: its cz_cli_ and cz_cmd_ functions are exported by nothing.)
  seams    An executor file names only the optimizers and backends it implements. An
           implementation (muon, adamw, soap, shampoo; cpu, cuda, self, mpi, nccl) is named by
           the identifiers its own headers declare (IMPLEMENTATIONS below: muon.h, comm_mpi.h,
           cuda/, ...), by its constants and public configuration types (CZ_OPTIM_SOAP,
           CZ_BACKEND_CUDA, CZ_COMM_NCCL, cz_shampoo_grafting), by the cz_exec_config fields
           of it (its settings' struct, cfg->soap.beta1, whose type cz_soap_config and
           macros CZ_SOAP_CONFIG_* name it too; a field named after it, cfg->nccl_timeout_s),
           by including one of its
           headers or its library's system headers (<mpi.h>, <cublas_v2.h>, <cblas.h>), and,
           for a backend, by a string literal that is exactly its name ("cuda": how a
           configuration picks one). Comments and messages' prose are not names. Its own files
           may name it (IMPLEMENTED_BY), and a seam's dispatch every implementation of that
           seam (SEAM_DISPATCH: compute.c, comm.c, optimizer.c, the GPU plugin's loader and
           entry), and config.c, the one reading of the caller's config (every version
           converted once, at create), every optimizer's settings and every timeout; the core
           (executor.c, step.c, pipeline.c, checkpoint.c, ...) names none. A name that a shared
           header also declares (the opaque cz_event a backend completes) is the seam's, and
           the compute ops named after the math they do (the adamw op, cz_adamw_args) are the
           compute seam's, not AdamW's.
           And the seams are folders: every file of executor/src/ lies in core/, optim/,
           comm/, compute/ or util/; an implementation's files, and every file the tables let
           name it, lie in its seam's folder (SEAM_FOLDER: optimizers in optim/, planes in
           comm/, compute backends in compute/), but for the bridge of the two GPU seams (the
           plugin's loader and entry, and the nccl plane on the cuda backend's stream) and the
           config's one reader (core/config.c); core/ and util/ name none but that one.
  calls    No cycle between the .c files of planner/ and executor/ through their calls: a file
           depends on another when it uses a function or global the other defines without
           static, resolved within the link units it reaches (CALL_UNITS): planner/format
           alone; planner/lib, then the format; planner/cli, then planner/lib, then the
           format; the executor, then the format; the GPU plugin (cuda/, nccl/, linked apart),
           then the executor, then the format. A name a file defines static itself is its own.
           Calls through a seam's table (ops->f) are not edges: the table is how a seam calls
           back without depending on its implementations. Limits: a call made inside a static
           inline function of a header, or hidden in a macro defined in a header, is not seen
           (no header of these folders has one that calls another file).
  errors   One error idiom in planner/ and executor/src/ (docs/ARCHITECTURE.md, "Errors"): no
           `if (!rc) rc = call(...)` / `if (rc == CZ_OK && ...) rc = call(...)` ladder, which
           carries a failure down every later line instead of leaving at once
           (`if ((rc = call(...)) != CZ_OK) goto done;` or `return rc;`). What the rule sees: an
           `if` whose condition is `!rc` or `rc == CZ_OK` (alone or first of an `&&`) and whose
           statement (or a block's first statement) assigns rc from a call. Keeping the first
           of two failures (`rc = rc != CZ_OK ? rc : erc;`) is no call and is not flagged.
           And no goto (nor CZ_ASSERT_GOTO) to a label but `done` in their .c and .cu files.

  length   No function in planner/lib/, planner/format/ or executor/src/ (its .c and .cu
           files, the GPU plugin's included) is over 150 lines (docs/ARCHITECTURE.md,
           "Function length"), counted from the line of its body's opening brace to the line
           of its closing brace, both included. A function is a brace at file scope (extern "C"
           and namespace braces are not scopes) that follows a closing parenthesis. And no
           header of executor/src/ is over 300 lines (newlines counted).
  docs     README.md and docs/*.md name only files and cz_ symbols of the tree. A path is
           (1) an inline code span or a link target (outside fenced code blocks) that is one
           token of path characters and either has a '/' and starts at a top-level folder of
           the tree (`executor/src/core/step.c`, `docs/PERF.md`, `planner/`), or has a '/', starts
           at a folder name of the tree and ends in a source or doc extension (.c .h .cu .cuh
           .py .sh .cmake .md .in .toml: `cuda/plugin.c`, `lib/metrics.c`), or is a bare file
           name with such an extension (`executor.c`); (2) in prose and code blocks, a word
           that starts at a top-level folder of the tree and a '/' (tools/package.sh). A path
           exists when it names a file or folder from the root or from the doc's folder, or
           (not starting at a top-level folder) the end of a path of the tree (a bare name: a
           file of that name anywhere); a generated file counts when its template NAME.in
           exists, a glob (`tests/unit/test_*.c`, `cpu-4-dp{2-tp2,4-tp1}.json`) when it
           matches something, a bare header when the tree includes it as <NAME> (a system
           header). Not paths: a token with a space, '$', '<' or '://', one starting with '-',
           '.', '/' or '~', a line number's `:N` is dropped, and another project's file named
           by its project's path (`megatron/core/optimizer/optimizer_config.py`: the first
           folder is none of ours). A symbol is every cz_\w+ word of the doc's text (code
           blocks included) but a pattern (a word ending in '_', or followed by '<' or '*':
           cz_<noun>_<verb>, cz_cmd_*); it must be an identifier of the tree's code and build
           files (C outside comments, string literals kept; Python, shell, CMake, JSON
           anywhere). This rule lives here rather than in a script of its own because it
           walks the same tree, strips C the same way and shares the self-test's harness.

Usage: check_layers.py [ROOT]      (default: the source tree this script is in)
       check_layers.py --self-test (proves each rule catches a planted violation and passes a
                                    clean tree)
       check_layers.py --longest N [FOLDER]
                                   (prints the N longest functions of rule length's scope, or
                                    of FOLDER, as the rows of docs/ARCHITECTURE.md's table)
Prints each violation as RULE: FILE:LINE: what, and exits 1 when there is one.
"""
import fnmatch
import os
import re
import shutil
import sys
import tempfile

# What a file outside planner/ may include of the planner's headers.
PUBLIC_HEADERS = {"canzona.h", "canzona_format.h", "cz_format.h"}
EXEMPT = ("tests/unit/", "fuzz/")
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
HEADER_EXT = (".h", ".cuh")
CYCLE_SCOPE = ("planner/format/", "planner/lib/", "planner/include/", "executor/")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


_STRIPPED = {}  # text -> its stripped form: every rule strips the same files


def strip_comments_and_strings(text):
    """Blanks comments and string literals, keeping line breaks so line numbers stay right."""
    if text not in _STRIPPED:
        _STRIPPED[text] = _strip(text)
    return _STRIPPED[text]


def _strip(text, keep_strings=False):
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
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1] if keep_strings else q + " " * (j - i - 1) + q)
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def source_files(root):
    """Every C/CUDA source and header under root, as paths relative to it ('/'-separated),
    leaving out build trees and hidden folders."""
    found = []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and
                         not (rel == "." and x.startswith("build")))
        for f in sorted(files):
            if f.endswith(SOURCE_EXT):
                found.append(os.path.normpath(os.path.join(rel, f)).replace(os.sep, "/"))
    return found


def includes(root, rel):
    """(line, name) of each quoted include of a file; a blanked comment hides none."""
    with open(os.path.join(root, rel), errors="replace") as fh:
        text = fh.read()
    # Comments blanked, but include names are strings: find them in the original text at the
    # lines where the stripped text still has an #include.
    stripped = strip_comments_and_strings(text)
    lines, kept = text.split("\n"), stripped.split("\n")
    out = []
    for no, (line, s) in enumerate(zip(lines, kept), 1):
        m = INCLUDE.match(line)
        if m and re.match(r"^[ \t]*#[ \t]*include", s):
            out.append((no, m.group(1)))
    return out


def header_index(files):
    """basename -> [paths] of the project's headers."""
    index = {}
    for f in files:
        if f.endswith(HEADER_EXT):
            index.setdefault(os.path.basename(f), []).append(f)
    return index


def resolve(index, including, name):
    """The project header an include names, or None for one outside the project."""
    own = os.path.normpath(os.path.join(os.path.dirname(including), name)).replace(os.sep, "/")
    candidates = index.get(os.path.basename(name), [])
    if own in candidates:
        return own
    return candidates[0] if len(candidates) == 1 else None


def layer_of(path):
    for layer in ("planner/format/", "planner/lib/", "planner/cli/", "planner/include/"):
        if path.startswith(layer):
            return layer
    return None


def allowed(src, header):
    """Whether file src may include project header header under the layers rule."""
    if os.path.basename(header) == "canzona.h" and src.startswith(PLANNER_FREE):
        return False
    hl = layer_of(header)
    if hl is None or hl == "planner/include/":  # not the planner's, or the public header
        return True
    sl = layer_of(src)
    name = os.path.basename(header)
    if sl == "planner/format/":
        return hl == "planner/format/"
    if sl == "planner/lib/":
        return hl == "planner/lib/" or name == "cz_format.h"
    if sl == "planner/cli/":
        return hl in ("planner/lib/", "planner/cli/") or name == "cz_format.h"
    return name in PUBLIC_HEADERS


TESTING_USERS = ("tests/", "fuzz/", "tools/bench/")


def check_executor_insides(root, files, index):
    """Rule layers, the executor's part: its insides stay inside executor/."""
    bad = []
    for f in files:
        if f.startswith("executor/"):
            continue
        for no, name in includes(root, f):
            h = resolve(index, f, name) or ""
            if h.startswith("executor/src/"):
                bad.append("layers: %s:%d: includes %s (%s), an executor-internal header; "
                           "outside executor/ include canzona_exec.h, or from a test, fuzzer "
                           "or canzona-bench the test-only cz_exec_testing.h" % (f, no, name, h))
            elif h.startswith("executor/testing/") and not f.startswith(TESTING_USERS):
                bad.append("layers: %s:%d: includes %s, which is for tests, fuzzers and "
                           "canzona-bench only; include canzona_exec.h" % (f, no, name))
    return bad


# What builds on the plan format's public header only, never the planner's canzona.h: the
# executor (its library exports the format's functions and its own) and the format itself.
PLANNER_FREE = ("executor/", "planner/format/")


def check_layers(root, files, index):
    bad = check_executor_insides(root, files, index)
    for f in files:
        if f.startswith(EXEMPT):
            continue
        for no, name in includes(root, f):
            h = resolve(index, f, name)
            if h and not allowed(f, h):
                bad.append("layers: %s:%d: includes %s (%s); %s" % (
                    f, no, name, h, "the format builds on nothing else of the planner"
                    if layer_of(f) == "planner/format/" else
                    "the executor sees the plan format's canzona_format.h, not the planner's "
                    "canzona.h" if f.startswith("executor/") and os.path.basename(h) == "canzona.h"
                    else "outside planner/ include only canzona.h, canzona_format.h or cz_format.h"
                    if layer_of(f) is None else "include cz_format.h, not the format's insides"))
    return bad


def check_cycles(root, files, index):
    graph = {}
    for f in files:
        if f.endswith(HEADER_EXT) and f.startswith(CYCLE_SCOPE):
            graph[f] = [h for _, name in includes(root, f)
                        for h in [resolve(index, f, name)] if h and h.startswith(CYCLE_SCOPE)]
    bad, state, stack = [], {}, []

    def visit(h):  # depth-first; state 1 = on the stack, 2 = done
        state[h] = 1
        stack.append(h)
        for nxt in graph.get(h, []):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                bad.append("cycles: %s: header include cycle: %s" % (nxt, " -> ".join(cycle)))
            elif state.get(nxt) is None:
                visit(nxt)
        stack.pop()
        state[h] = 2

    for h in sorted(graph):
        if state.get(h) is None:
            visit(h)
    return bad


DEFINITION = re.compile(r"(?m)^([A-Za-z_][\w \t\*]*?)\b([A-Za-z_]\w*)[ \t]*(\(|\[[^\]]*\][ \t]*=|=)")


def public_names(root, header):
    path = os.path.join(root, header)
    if not os.path.exists(path):
        return set()
    with open(path) as fh:
        return set(re.findall(r"\b(cz_\w+)\s*\(", strip_comments_and_strings(fh.read())))


def toplevel_definitions(text):
    """(line, name) of each function or global defined at file scope without static."""
    code = strip_comments_and_strings(text)
    # Preprocessor lines (with their continuations) define no symbol of their own.
    code = re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m: "\n" * m.group(0).count("\n"),
                  code)
    depth, out, opened = 0, [], []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == "{":
            # The braces of a CUDA file's extern "C" { ... } enclose file-scope definitions.
            linkage = re.search(r'\bextern\s*"\s*"\s*$', code[code.rfind("\n", 0, i) + 1:i])
            opened.append(bool(linkage))
            depth += 0 if linkage else 1
        elif c == "}":
            depth -= 0 if opened and opened.pop() else 1
        elif depth == 0 and (i == 0 or code[i - 1] == "\n"):
            m = DEFINITION.match(code, i)
            if m and "static" not in m.group(1).split() and "typedef" not in m.group(1).split() \
                    and "extern" not in m.group(1).split() and m.group(1).strip():
                line = code.count("\n", 0, i) + 1
                if m.group(3) == "(":  # a function only when a body follows its parameters
                    j, d = m.end() - 1, 0
                    while j < n:
                        d += code[j] == "("
                        d -= code[j] == ")"
                        if d == 0:
                            break
                        j += 1
                    rest = code[j + 1:j + 200].lstrip()
                    if rest.startswith("{"):
                        out.append((line, m.group(2)))
                else:
                    out.append((line, m.group(2)))
        i += 1
    return out


def check_names(root, files):
    planner = public_names(root, "planner/include/canzona.h") | \
        public_names(root, "planner/include/canzona_format.h")
    executor = planner | public_names(root, "executor/include/canzona_exec.h")
    bad = []
    for f in files:
        if f.startswith(("planner/format/", "planner/lib/")) and f.endswith(".c"):
            public, header = planner, "canzona.h"
        elif f.startswith("executor/src/") and f.endswith((".c", ".cu")):
            public, header = executor, "canzona.h or canzona_exec.h"
        else:
            continue
        with open(os.path.join(root, f), errors="replace") as fh:
            defs = toplevel_definitions(fh.read())
        for no, name in defs:
            if name in public or name.startswith("cz__"):
                continue
            bad.append("names: %s:%d: %s is defined without static but is not in %s; "
                       "name it cz__%s (internal) or make it static" % (
                           f, no, name, header, name[3:] if name.startswith("cz_") else name))
    return bad



# ---- rule seams: an executor file names only the optimizers and backends it implements ----
EXEC = "executor/src/"
# Each implementation behind one of the executor's seams, and what names it: the identifiers
# its own headers declare (functions, types, tables, macros, enum constants), the constants and
# public configuration types other headers declare for it, the system headers of its library,
# and a string literal that is exactly its name (what a dispatch compares a configured name
# with). Headers in no entry (compute.h, comm.h, optimizer.h, ns_coop.h, ns_plan.h,
# linalg_plan.h, elementwise.h, gpu_plugin.h, ...) are shared vocabulary: a compute op named
# after the math it does (the adamw op, cz_adamw_args) names no optimizer.
IMPLEMENTATIONS = {
    # name: (its headers under executor/src, its other identifiers, its system headers)
    "muon": (("optim/muon.h", "optim/ns_workload.h"),
             ("CZ_OPTIM_MUON", "cz_muon_scaling", "CZ_MUON_SCALE_RMS", "CZ_MUON_SCALE_SHAPE"), ()),
    "adamw": (("optim/adamw.h",), ("CZ_OPTIM_ADAMW",), ()),
    "soap": (("optim/soap.h",), ("CZ_OPTIM_SOAP",), ()),
    "shampoo": (("optim/shampoo.h",),
                ("CZ_OPTIM_SHAMPOO", "cz_shampoo_grafting", "CZ_GRAFT_NONE", "CZ_GRAFT_ADAGRAD",
                 "CZ_GRAFT_RMSPROP", "CZ_GRAFT_ADAM"), ()),
    "cpu": (("compute/compute_cpu.h",), ("CZ_BACKEND_CPU",), ("cblas.h", "lapacke.h")),
    "cuda": (("compute/compute_cuda.h", "compute/cuda/"), ("CZ_BACKEND_CUDA",),
             ("cuda.h", "cuda_runtime.h", "cuda_runtime_api.h", "cublas_v2.h", "cusolverDn.h")),
    "self": (("comm/comm_self.h",), ("CZ_COMM_SELF",), ()),
    "mpi": (("comm/comm_mpi.h", "comm/mpi_watch.h"), ("CZ_COMM_MPI",), ("mpi.h",)),
    "nccl": (("comm/comm_nccl.h", "comm/nccl_plan.h", "comm/nccl/"), ("CZ_COMM_NCCL",), ("nccl.h",)),
}
# Backends are picked by name (cz_exec_config.backend, .comm): a literal of their name is how a
# file dispatches to one. Optimizers are picked by the plan's constant (CZ_OPTIM_*), and a
# compute op may be named after an optimizer's math (the cuda backend's "adamw" kernel).
BACKENDS = ("cpu", "cuda", "self", "mpi", "nccl")
SEAM_DISPATCH = {  # a seam's dispatch names every implementation of its seam
    "compute/compute.c": {"cpu", "cuda"}, "compute/compute.h": {"cpu", "cuda"},
    "comm/comm.c": {"self", "mpi", "nccl"}, "comm/comm.h": {"self", "mpi", "nccl"},
    "optim/optimizer.c": {"muon", "adamw", "soap", "shampoo"},
    # the way the dispatch reaches the GPU plugin, and the plugin's entry
    "compute/gpu_loader.c": {"cuda", "nccl"}, "compute/gpu_plugin.h": {"cuda", "nccl"},
    "compute/cuda/plugin.c": {"cuda", "nccl"},
}
IMPLEMENTED_BY = {  # the other files of an implementation (a folder covers what is in it)
    "optim/muon.c": {"muon"}, "optim/ns_workload.c": {"muon"}, "optim/adamw.c": {"adamw"},
    # the step's device-byte model: Muon's passes come from its Newton-Schulz workload
    "optim/step_bytes.c": {"muon"},
    # the executor's memory model: Muon's batches come from the same workload
    "optim/memory_model.c": {"muon"},
    "optim/soap.c": {"soap"}, "optim/shampoo.c": {"shampoo"}, "compute/compute_cpu.c": {"cpu"},
    "compute/compute_cpu_linalg.c": {"cpu"}, "compute/cuda/": {"cuda"},
    "comm/comm_self.c": {"self"}, "comm/comm_mpi.c": {"mpi"}, "comm/mpi_watch.c": {"mpi"},
    "comm/nccl_plan.c": {"nccl"},
    # the one reading of the caller's config (every version converted once, at create) names
    # every optimizer's settings and every timeout there
    "core/config.c": {"muon", "adamw", "soap", "shampoo", "mpi", "nccl"},
    # the nccl plane runs on the cuda backend's stream and events (compute_cuda.h)
    "comm/nccl/": {"nccl", "cuda"},
}
# The folder of each implementation's seam, where its files lie; the folders of executor/src.
SEAM_FOLDER = {"muon": "optim/", "adamw": "optim/", "soap": "optim/", "shampoo": "optim/",
               "cpu": "compute/", "cuda": "compute/", "self": "comm/", "mpi": "comm/",
               "nccl": "comm/"}
EXEC_FOLDERS = ("core/", "optim/", "comm/", "compute/", "util/")
# The files that join the two GPU seams (compute's cuda, comm's nccl: one plugin).
GPU_BRIDGE = ("compute/gpu_loader.c", "compute/gpu_plugin.h", "compute/cuda/plugin.c",
              "comm/nccl/")
# The one file outside optim/ and comm/ that names their implementations: the config's reader.
CONFIG_READER = "core/config.c"
SYSTEM_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*<([^>]+)>', re.M)
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def implemented(rel):
    """What file rel (under executor/src/) implements or dispatches: names it may use."""
    own = set()
    for table in (SEAM_DISPATCH, IMPLEMENTED_BY):
        for key, names in table.items():
            if rel == key or (key.endswith("/") and rel.startswith(key)):
                own |= names
    for name, (headers, _, _) in IMPLEMENTATIONS.items():
        if any(rel == h or (h.endswith("/") and rel.startswith(h)) for h in headers):
            own.add(name)
    return own


def declared_names(code):
    """Identifiers a header declares: functions, types, tables, macros, enum constants."""
    names = set(re.findall(r"\b(cz_{1,2}\w+)\s*\(", code))
    names |= set(re.findall(r"}\s*(cz_\w+)\s*;", code))
    names |= set(re.findall(r"typedef[^;{]*?\b(cz_\w+)\s*;", code))
    names |= set(re.findall(r"\bstruct\s+(cz_\w+)\s*{", code))
    names |= set(re.findall(r"\bextern\s+const\s+\w+\s+(cz_\w+)\s*;", code))
    names |= set(re.findall(r"(?m)^[ \t]*#[ \t]*define[ \t]+(CZ_\w+)", code))
    names |= set(re.findall(r"(?m)^[ \t]*(CZ_[A-Z0-9_]+)\s*(?:=|,)", code))
    # A header's own include guard names nothing.
    return {n for n in names if not n.endswith("_H")}


def implementation_names(root, files):
    """name -> (identifiers, system headers, quoted headers) of every implementation. A name a
    shared header declares too (an opaque seam type a backend completes: cz_event, cz_runs) is
    the seam's, not the implementation's."""
    def owned_header(rel):
        return any(rel == h or (h.endswith("/") and rel.startswith(h))
                   for headers, _, _ in IMPLEMENTATIONS.values() for h in headers)

    shared = set()
    for f in files:
        if f.startswith(EXEC) and f.endswith(HEADER_EXT) and not owned_header(f[len(EXEC):]):
            with open(os.path.join(root, f), errors="replace") as fh:
                shared |= declared_names(strip_comments_and_strings(fh.read()))
    out = {}
    for name, (headers, extra, system) in IMPLEMENTATIONS.items():
        idents, quoted = set(extra), set()
        for f in files:
            rel = f[len(EXEC):] if f.startswith(EXEC) else None
            if rel is None or not f.endswith(HEADER_EXT):
                continue
            if any(rel == h or (h.endswith("/") and rel.startswith(h)) for h in headers):
                quoted.add(os.path.basename(f))
                with open(os.path.join(root, f), errors="replace") as fh:
                    idents |= declared_names(strip_comments_and_strings(fh.read()))
        out[name] = (idents - shared, set(system), quoted)
    return out


def string_literals(text):
    """(line, content) of every string literal outside comments."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += text.count("\n", i, j)
            i = j
        elif text[i] == "'":
            j = i + 1
            while j < n and text[j] != "'" and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append((line, text[i + 1:j]))
            i = j + 1
        else:
            line += text[i] == "\n"
            i += 1
    return out


def config_fields(root):
    """name -> (the fields of cz_exec_config named after it, the identifiers of its settings'
    struct). A field is the implementation's when it is its struct of settings (cfg->soap, of
    type cz_soap_config: cfg->soap.beta1 is SOAP's) or its name starts with the implementation's
    (cfg->mpi_timeout_s is MPI's); the struct's type, CZ_SOAP_CONFIG_INIT and
    CZ_SOAP_CONFIG_VERSION name it too."""
    path = os.path.join(root, "executor/include/canzona_exec.h")
    fields, typed = set(), {}
    if os.path.exists(path):
        with open(path) as fh:
            code = strip_comments_and_strings(fh.read())
        m = re.search(r"typedef\s+struct\s+cz_exec_config\s*{(.*?)}\s*cz_exec_config\s*;", code, re.S)
        for decl in (m.group(1).split(";") if m else []):
            decl = decl.strip()
            fields |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:,|$)", decl))
            t = re.match(r"cz_([a-z0-9]+)_config\s+([A-Za-z_]\w*)$", decl)
            if t:
                typed.setdefault(t.group(1), set()).add(t.group(2))
    out = {}
    for name in IMPLEMENTATIONS:
        own = {f for f in fields if f.startswith(name + "_")} | typed.get(name, set())
        idents = set()
        if name in typed:
            idents = {"cz_%s_config" % name, "CZ_%s_CONFIG_INIT" % name.upper(),
                      "CZ_%s_CONFIG_VERSION" % name.upper()}
        out[name] = (own, idents)
    return out


def check_folders(files):
    """The seams as folders (rule seams): where each executor file lies, against the tables."""
    bad = []
    for f in files:
        rel = f[len(EXEC):] if f.startswith(EXEC) else None
        if rel is None:
            continue
        if not rel.startswith(EXEC_FOLDERS):
            bad.append("seams: %s: an executor file outside the seams' folders; put it in one of "
                       "%s (docs/ARCHITECTURE.md, \"The executor's folders\")" % (
                           f, ", ".join(EXEC + d for d in EXEC_FOLDERS)))
            continue
        bridge = any(rel == b or (b.endswith("/") and rel.startswith(b)) for b in GPU_BRIDGE) or \
            rel == CONFIG_READER
        for name in sorted(implemented(rel)):
            if not rel.startswith(SEAM_FOLDER[name]) and not bridge:
                bad.append("seams: %s: implements or dispatches %s, whose seam's folder is %s%s" %
                           (f, name, EXEC, SEAM_FOLDER[name]))
    return bad


def check_seams(root, files):
    names = implementation_names(root, files)
    cfg = config_fields(root)
    bad = check_folders(files)
    for f in files:
        if not f.startswith(EXEC):
            continue
        own = implemented(f[len(EXEC):])
        with open(os.path.join(root, f), errors="replace") as fh:
            text = fh.read()
        code = strip_comments_and_strings(text)
        lines = code.split("\n")
        for name, (idents, system, quoted) in sorted(names.items()):
            if name in own:
                continue
            found = []
            for no, line in enumerate(lines, 1):
                for m in IDENT.finditer(line):
                    word = m.group(0)
                    # A configuration field of the implementation (cfg->soap.beta1,
                    # cfg->mpi_timeout_s), or its settings' struct type (cz_soap_config).
                    # (Not a designated initializer's .adamw = nor a call ops->adamw(: a
                    # compute op may be named after an optimizer's math.)
                    member = (word in cfg[name][0]
                              and re.search(r"(?:\w|\)|\])\s*(?:->|\.)\s*$", line[:m.start()])
                              and not re.match(r"\s*\(", line[m.end():]))
                    if word in idents or word in cfg[name][1] or member:
                        found.append((no, word))
            for no, inc in includes(root, f):
                if os.path.basename(inc) in quoted:
                    found.append((no, '#include "%s"' % inc))
            for m in SYSTEM_INCLUDE.finditer(text):
                if m.group(1) in system and re.match(r"^[ \t]*#", lines[text.count("\n", 0, m.start())]):
                    found.append((text.count("\n", 0, m.start()) + 1, "#include <%s>" % m.group(1)))
            for no, lit in string_literals(text):
                if name in BACKENDS and lit.lower() == name:
                    found.append((no, '"%s"' % lit))
            for no, what in sorted(set(found))[:3]:
                bad.append("seams: %s:%d: names %s (%s), which it does not implement; go "
                           "through the seam (compute.h, comm.h, optimizer.h) or move the code "
                           "to %s's files" % (f, no, name, what, name))
    return bad


# ---- rule calls: no cycle between the .c files of planner/ or executor/ through their calls ----
# Each link unit and the units it links, in the order a name resolves: a file's own unit first.
# The executor links the format too, but the format calls nothing back, so it adds no edge.
CALL_UNITS = (  # (unit, its folders, the units it reaches)
    ("format", ("planner/format/",), ("format",)),
    ("lib", ("planner/lib/",), ("lib", "format")),
    ("cli", ("planner/cli/",), ("cli", "lib", "format")),
    ("plugin", (EXEC + "compute/cuda/", EXEC + "comm/nccl/"), ("plugin", "exec", "format")),
    ("exec", (EXEC,), ("exec", "format")),
)


def call_unit(f):
    for unit, folders, reach in CALL_UNITS:
        if f.startswith(folders):
            return unit, reach
    return None, ()


def check_calls(root, files):
    """A file calls (or refers to) another when it uses a function or global that the other
    defines without static, in a unit it links. Calls through the seams' tables (ops->f) are
    not edges: a table is how a seam calls back without depending on its implementations. A
    name a file defines static itself is its own."""
    units = [f for f in files if f.endswith((".c", ".cu")) and call_unit(f)[0]]
    defs, code, own_static = {}, {}, {}
    for f in units:
        with open(os.path.join(root, f), errors="replace") as fh:
            text = fh.read()
        code[f] = strip_comments_and_strings(text)
        for _, name in toplevel_definitions(text):
            defs.setdefault(name, []).append(f)
        own_static[f] = {name for name, _, _, static in function_bodies(text) if static}
    graph = {}
    for f in units:
        _, reach = call_unit(f)
        used = set(IDENT.findall(code[f])) & set(defs)
        for name in sorted(used - own_static[f]):
            if f in defs[name]:
                continue
            for unit in reach:  # the first unit in reach that defines it
                cands = [d for d in defs[name] if call_unit(d)[0] == unit]
                if cands:
                    break
            if len(cands) == 1:
                graph.setdefault(f, {}).setdefault(cands[0], name)
    bad, state, stack = [], {}, []

    def visit(f):
        state[f] = 1
        stack.append(f)
        for nxt in sorted(graph.get(f, {})):
            if state.get(nxt) == 1:
                cyc = stack[stack.index(nxt):] + [nxt]
                how = ", ".join("%s calls %s" % (os.path.basename(a), graph[a][b])
                                for a, b in zip(cyc, cyc[1:]))
                bad.append("calls: %s: call cycle: %s (%s)" % (nxt, " -> ".join(cyc), how))
            elif state.get(nxt) is None:
                visit(nxt)
        stack.pop()
        state[f] = 2

    for f in sorted(units):
        if state.get(f) is None:
            visit(f)
    return bad


# ---- rule length: no function over LENGTH_LIMIT lines in the libraries ----
LENGTH_LIMIT = 150
LENGTH_SCOPE = ("planner/lib/", "planner/format/", EXEC)


def blank_preprocessor(code):
    """Preprocessor lines (with their continuations) blanked, line breaks kept."""
    return re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*",
                  lambda m: "\n" * m.group(0).count("\n"), code)


def function_bodies(text):
    """(name, line of the opening brace, line of the closing brace, static) of every function
    defined at file scope: a brace at file scope that follows a closing parenthesis, the
    function's name the identifier before the matching open one. The braces of a CUDA file's
    extern "C" { } and namespace { } enclose file-scope definitions."""
    code = blank_preprocessor(strip_comments_and_strings(text))
    out, depth, opened, current = [], 0, [], None
    for brace in re.finditer(r"[{}]", code):
        i, c = brace.start(), brace.group(0)
        if c == "{":
            before = code[max(0, i - 400):i].rstrip()
            linkage = depth == 0 and bool(
                re.search(r'(?:\bextern\s*"\s*"|\bnamespace(?:\s+\w+)?)$', before))
            opened.append(linkage)
            if linkage:
                continue
            before = code[:i].rstrip() if depth == 0 else ""
            if before.endswith(")"):
                j, d = len(before) - 1, 0
                while j >= 0:
                    d += before[j] == ")"
                    d -= before[j] == "("
                    if d == 0:
                        break
                    j -= 1
                m = re.search(r"([A-Za-z_]\w*)\s*$", before[:j])
                if m:
                    decl = before[max(before.rfind(";", 0, j), before.rfind("}", 0, j)) + 1:j]
                    current = (m.group(1), code.count("\n", 0, i) + 1, "static" in decl.split())
            depth += 1
        elif c == "}":
            if opened and opened.pop():
                continue
            depth -= 1
            if depth == 0 and current:
                out.append((current[0], current[1], code.count("\n", 0, i) + 1, current[2]))
                current = None
    return out


def function_lengths(root, files):
    """(lines, name, file) of every function in LENGTH_SCOPE, the longest first; lines counts
    from the line of the opening brace to the line of the closing one, both included."""
    out = []
    for f in files:
        if f.startswith(LENGTH_SCOPE) and f.endswith((".c", ".cu")):
            with open(os.path.join(root, f), errors="replace") as fh:
                for name, first, last, _ in function_bodies(fh.read()):
                    out.append((last - first + 1, name, f, first))
    return sorted(out, key=lambda t: (-t[0], t[2], t[1]))


HEADER_LIMIT = 300  # lines of a header of executor/src/ (its GPU plugin's included)


def check_length(root, files):
    bad = ["length: %s:%d: %s is %d lines (over %d, docs/ARCHITECTURE.md \"Function length\"); "
           "split it by phase into static helpers" % (f, line, name, n, LENGTH_LIMIT)
           for n, name, f, line in function_lengths(root, files) if n > LENGTH_LIMIT]
    for f in files:
        if f.startswith(EXEC) and f.endswith(HEADER_EXT):
            with open(os.path.join(root, f), errors="replace") as fh:
                n = fh.read().count("\n")
            if n > HEADER_LIMIT:
                bad.append("length: %s: %d lines (a header of executor/src/ is at most %d, "
                           "docs/ARCHITECTURE.md \"Function length\"); split it by what its "
                           "parts declare" % (f, n, HEADER_LIMIT))
    return bad


# ---- rule errors: no `if (!rc) rc = ...` ladders ----
ERRORS_SCOPE = ("planner/", "executor/src/")
LADDER = re.compile(r"\bif\s*\(\s*(?:!\s*rc|rc\s*==\s*CZ_OK)\s*(?:&&[^{};]*?)?\)\s*\{?\s*"
                    r"rc\s*=\s*[A-Za-z_]\w*(?:\s*(?:->|\.)\s*\w+)*\s*\(")


GOTO = re.compile(r"\bgoto\s+([A-Za-z_]\w*)\s*;|\bCZ_ASSERT_GOTO\s*\([^;]*,\s*([A-Za-z_]\w*)\s*\)")
def check_errors(root, files):
    bad = []
    for f in files:
        if not f.startswith(ERRORS_SCOPE) or not f.endswith((".c", ".cu")):
            continue
        with open(os.path.join(root, f), errors="replace") as fh:
            code = strip_comments_and_strings(fh.read())
        for m in GOTO.finditer(code):
            label = m.group(1) or m.group(2)
            if label != "done":
                bad.append("errors: %s:%d: goto %s; the one exit label is done (docs/"
                           "ARCHITECTURE.md, \"Errors\"): jump to it, or give the code between "
                           "a function or an if of its own" % (
                               f, code.count("\n", 0, m.start()) + 1, label))
        for m in LADDER.finditer(code):
            bad.append("errors: %s:%d: an `if (!rc) rc = ...` ladder; pass the failure on at "
                       "once: `if ((rc = call(...)) != CZ_OK) goto done;` (or `return rc;` when "
                       "the function holds nothing)" % (f, code.count("\n", 0, m.start()) + 1))
    return bad


# ---- rule docs: README.md and docs/*.md name only files and cz_ symbols that exist ----
DOC_SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".py", ".sh", ".cmake", ".md", ".in", ".toml")
SYMBOL_FILES = (".c", ".h", ".cu", ".cuh", ".py", ".sh", ".bash", ".cmake", ".in", ".toml",
                ".json", ".map", "CMakeLists.txt")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
FENCE = re.compile(r"(?ms)^[ \t]*```.*?^[ \t]*```[^\n]*$")
SYMBOL = re.compile(r"\bcz_\w*")


def doc_files(root):
    docs = ["README.md"] if os.path.exists(os.path.join(root, "README.md")) else []
    d = os.path.join(root, "docs")
    if os.path.isdir(d):
        docs += sorted("docs/" + f for f in os.listdir(d) if f.endswith(".md"))
    return docs


def tree_entries(root):
    """Every file and folder of the tree ('/'-separated; folders end with '/'), leaving out
    build trees and hidden folders, as source_files does."""
    out = set()
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root).replace(os.sep, "/")
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and
                         not (rel == "." and x.startswith("build")))
        if rel != ".":
            out.add(rel + "/")
        for f in files:
            out.add(f if rel == "." else rel + "/" + f)
    return out


def comments_blanked(text):
    """A C file with its comments blanked and its string literals kept (a name in a string is
    a name the code uses: a dlsym'd entry, a ctypes binding's)."""
    return _strip(text, keep_strings=True)


def tree_identifiers(root, entries):
    """Every identifier of the tree's code and build files (docs apart): C outside comments,
    the others (Python, shell, CMake, JSON, linker maps) anywhere."""
    idents = set()
    for f in entries:
        if f.endswith("/") or f.startswith("docs/") or not f.endswith(SYMBOL_FILES):
            continue
        with open(os.path.join(root, f), errors="replace") as fh:
            text = fh.read()
        if f.endswith(SOURCE_EXT):
            text = comments_blanked(text)
        idents |= set(IDENT.findall(text))
    return idents


def brace_expand(t):
    m = re.search(r"\{([^{}]*)\}", t)
    if not m:
        return [t]
    return [x for alt in m.group(1).split(",") for x in brace_expand(t[:m.start()] + alt +
                                                                    t[m.end():])]


def path_exists(entries, t, docdir):
    """Whether path t names something of the tree: from the root, from the doc's folder, or,
    not starting at a top-level entry, as the end of a path of the tree (`cuda/plugin.c`, a
    bare `plan_io.c`). A generated file counts when its template (NAME.in) exists; a glob
    (`tests/unit/test_*.c`, `cpu-4-dp{2-tp2,4-tp1}.json`) must match something."""
    for alt in brace_expand(t):
        alt = alt.rstrip("/") if alt.endswith("/") else alt
        want = (alt + "/", alt, alt + ".in")
        joined = os.path.normpath(os.path.join(docdir, alt)).replace(os.sep, "/")
        if any(w in entries for w in want) or any(w in entries for w in (joined, joined + "/")):
            continue
        top = alt.split("/")[0] + ("/" if "/" in alt else "")
        anchored = top in entries or alt.split("/")[0] in entries
        if any(c in alt for c in "*?["):
            pats = want if anchored else tuple("*/" + w for w in want) + want
            if any(fnmatch.fnmatchcase(e.rstrip("/"), pt.rstrip("/")) for e in entries
                   for pt in pats):
                continue
            return False
        if anchored:
            return False
        if not any(e.endswith("/" + w) for e in entries for w in want):
            return False
    return True


def doc_paths(text, tops, folders):
    """(offset, path) of each path a doc names, by the rules of the docstring."""
    out = []
    body = FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    spans = [(m.start(1), m.group(1)) for m in CODE_SPAN.finditer(body)]
    spans += [(m.start(1), m.group(1)) for m in LINK.finditer(body)]
    for pos, t in spans:
        t = re.sub(r":\d+(?:-\d+)?$", "", t.strip())
        if "://" in t or "$" in t or "<" in t or t.startswith(("-", ".", "/", "~")):
            continue
        if not re.fullmatch(r"[\w.+*?{},-]+(?:/[\w.+*?{},-]+)*/?", t):
            continue
        first = t.split("/")[0]
        if "/" in t.rstrip("/"):
            # From the root; or by a folder of the tree (`cuda/kernels.cu`) when it names a
            # source file; another project's path starts with none of ours (`megatron/...`).
            if first in tops or (first in folders and t.endswith(DOC_SOURCE_EXT)):
                out.append((pos, t))
        elif t.endswith("/"):
            if first in tops:
                out.append((pos, t))
        elif t.endswith(DOC_SOURCE_EXT) and "," not in t:
            out.append((pos, t))
    # Paths in prose and in code blocks: from a top-level folder of the tree only.
    if tops:
        prose = re.compile(r"(?<![\w/.~$-])(?:%s)/[\w.+*/-]*(?:\{[^}\s]*\}[\w.+*/-]*)*" %
                           "|".join(re.escape(x) for x in sorted(tops)))
        spans_at = {p for p, _ in spans}
        for m in prose.finditer(text):
            t = m.group(0).rstrip(".-")
            if m.start() in spans_at or text[m.end():m.end() + 1] in "$<":
                continue
            out.append((m.start(), t))
    return out


def check_docs(root, files):
    entries = tree_entries(root)
    tops = {e.rstrip("/") for e in entries if "/" not in e.rstrip("/") and e.endswith("/")
            and not e.startswith(("build", "."))}
    folders = {x for e in entries if e.endswith("/") for x in e.rstrip("/").split("/")}
    system = set()
    for f in files:
        with open(os.path.join(root, f), errors="replace") as fh:
            system |= set(SYSTEM_INCLUDE.findall(fh.read()))
    idents = None
    bad = []
    for doc in doc_files(root):
        with open(os.path.join(root, doc), errors="replace") as fh:
            text = fh.read()
        docdir = os.path.dirname(doc)
        seen = set()
        for pos, t in sorted(doc_paths(text, tops, folders)):
            if t in seen or t in system or path_exists(entries, t, docdir):
                continue
            seen.add(t)
            bad.append("docs: %s:%d: names %s, which is not in the tree; name what exists, or "
                       "another project's file by its project's path" % (
                           doc, text.count("\n", 0, pos) + 1, t))
        for m in SYMBOL.finditer(text):
            w, nxt = m.group(0), text[m.end():m.end() + 1]
            if w.endswith("_") or nxt in ("<", "*") or w in seen:  # a pattern: cz_<noun>, cz_cli_*
                continue
            if idents is None:
                idents = tree_identifiers(root, entries)
            if w not in idents:
                seen.add(w)
                bad.append("docs: %s:%d: names %s, which no source file of the tree does" % (
                    doc, text.count("\n", 0, m.start()) + 1, w))
    return bad


def check(root):
    files = source_files(root)
    index = header_index(files)
    return check_layers(root, files, index) + check_cycles(root, files, index) + \
        check_names(root, files) + check_seams(root, files) + check_calls(root, files) + \
        check_errors(root, files) + check_length(root, files) + \
        check_docs(root, files)


# ---- self-test ------------------------------------------------------------------------------
CLEAN = {
    "planner/include/canzona_format.h": "int cz_plan_read(void);\n",
    "planner/include/canzona.h": '#include "canzona_format.h"\nint cz_plan_build(void);\n',
    "planner/format/cz_format.h": '#include "canzona_format.h"\n#include "cz_error.h"\n',
    "planner/format/cz_error.h": '#include "canzona_format.h"\nint cz__strdup(void);\n',
    "planner/format/format_internal.h": '#include "cz_format.h"\n',
    "planner/format/plan_io.c": '#include "format_internal.h"\n'
                                "int cz_plan_read(void)\n{\n    return 0;\n}\n"
                                "static int helper(void)\n{\n    return 1;\n}\n"
                                "int cz__strdup(void)\n{\n    return 2;\n}\n"
                                "int cz__error_set(void)\n{\n    return 3;\n}\n"
                                "const char *const cz__names[] = {\"a\", 0};\n",
    "planner/lib/cz_types.h": '#include "cz_format.h"\n#include "cz_algorithms.h"\n',
    "planner/lib/cz_algorithms.h": '#include "cz_format.h"\n',
    "planner/lib/cost.c": '#include "cz_types.h"\n',
    "planner/cli/main.c": '#include "cz_types.h"\n',
    "executor/src/core/executor_impl.h": '#include "cz_format.h"\n#include "ns_plan.h"\n',
    "executor/testing/cz_exec_testing.h": '#include "executor_impl.h"\n',
    "tests/mpi/check_step.c": '#include "cz_exec_testing.h"\n#include "canzona_exec.h"\n',
    "executor/src/compute/ns_plan.h": "/* #include \"executor_impl.h\" (a comment closes no cycle) */\n" +
                              "\n" * 299,
    "executor/src/core/step.c": '#include "executor_impl.h"\n#include <stdio.h>\n'
                           "int cz_executor_step(void)\n{\n    return 0;\n}\n"
                           "int cz__exec_step_run(void)\n{\n    return 1;\n}\n",
    "executor/src/compute/cuda/kernels.cu": 'extern "C" {\nint cz__k_scale(void)\n{\n    return 0;\n}\n'
                                    "int cz__k_sum(void)\n{\n    return 0;\n}\n"
                                    '} // extern "C"\n',
    "executor/src/compute/cuda/norm.c": "int cz__k_norm(void)\n{\n    return cz__k_sum();\n}\n",
    "executor/include/canzona_exec.h": '#include "canzona_format.h"\nint cz_executor_step(void);\n'
                                       "typedef struct cz_soap_config {\n    int version;\n"
                                       "    float beta1, eps;\n} cz_soap_config;\n"
                                       "typedef struct cz_shampoo_config {\n    int version;\n"
                                       "    int max_dim;\n} cz_shampoo_config;\n"
                                       "typedef struct cz_exec_config {\n    float lr;\n"
                                       "    double mpi_timeout_s, nccl_timeout_s;\n"
                                       "    cz_soap_config soap;\n    cz_shampoo_config shampoo;\n"
                                       "} cz_exec_config;\n",
    # The seams: each implementation names itself, a dispatch every one of its seam, the core
    # none; the executor's own files call each other one way.
    "executor/src/compute/compute.h": "typedef struct cz_event cz_event;\nenum { CZ_BACKEND_CPU = 1, "
                              "CZ_BACKEND_CUDA = 2 };\n",
    "executor/src/compute/compute.c": '#include "compute_cpu.h"\n#include "gpu_plugin.h"\n'
                              "static int open_cuda(const char *n)\n{\n"
                              '    return strcmp(n, "cuda") == 0 && cz__cpu_ns() == CZ_BACKEND_CPU;'
                              "\n}\n",
    "executor/src/compute/compute_cpu.h": '#include "compute.h"\nint cz__cpu_ns(void);\n',
    "executor/src/compute/compute_cpu.c": '#include "compute_cpu.h"\n#include <cblas.h>\n'
                                  "struct cz_event {\n    int recorded;\n};\n"
                                  'static const char *name = "cpu";\n',
    "executor/src/compute/cuda/cuda_impl.h": "struct cz_event {\n    void *ev;\n};\n",
    "executor/src/comm/comm_mpi.c": "#include <mpi.h>\n"
                               "static double t(const cz_exec_config *c)\n{\n"
                               "    return c->mpi_timeout_s;\n}\n",
    "executor/src/optim/muon.h": '#include "optimizer.h"\nint cz__muon_run(void);\n'
                           "extern const cz_optimizer_ops cz__muon_ops;\n",
    "executor/src/optim/muon.c": '#include "muon.h"\nstatic int step(const cz_exec_config *c)\n{\n'
                           "    return cz__muon_run() + c->muon_scaling;\n}\n",
    "executor/src/optim/adamw.c": "static float lr(const cz_exec_config *c)\n{\n    return c->adamw_lr;"
                            "\n}\n",
    "executor/src/optim/optimizer.c": '#include "muon.h"\nstatic const cz_optimizer_ops *r = '
                                "&cz__muon_ops;\nstatic int muon = CZ_OPTIM_MUON;\n",
    "executor/src/core/executor.c": '#include "optimizer.h"\n'
                               "int cz__exec_create(void)\n{\n    return cz__pipeline_init();\n}\n"
                               "int cz__exec_param_offset(void)\n{\n    return 0;\n}\n",
    "executor/src/core/pipeline.c": "int cz__pipeline_init(void)\n{\n    return 0;\n}\n",
    # The error idiom, and the first of two failures kept: not ladders.
    "planner/lib/strbuf.c": "static int f(void)\n{\n    int rc, erc = 0;\n"
                            "    if ((rc = a()) != CZ_OK || (rc = b()) != CZ_OK)\n"
                            "        goto done;\n    rc = rc != CZ_OK ? rc : erc;\n"
                            "    /* if (!rc) rc = c(); in a comment */\n"
                            "    if (rc == CZ_OK)\n        *out = v;\ndone:\n    return rc;\n}\n",
    # The planner's files call each other one way, the CLI into the library; a name a file
    # defines static itself is its own (cost_model.c's sim_run is no call of simulate.c).
    "planner/lib/simulate.c": "int cz__sim_run(void)\n{\n    return cz__cost_of();\n}\n",
    "planner/lib/cost_model.c": "static int cz__sim_run(void)\n{\n    return 1;\n}\n"
                                "int cz__cost_of(void)\n{\n    return cz__sim_run();\n}\n",
    "planner/cli/cmd_sim.c": "int cz_cmd_sim(void)\n{\n    return cz__sim_run();\n}\n",
    # A function of exactly the limit, brace to brace, and a CUDA kernel inside a namespace.
    "planner/lib/metrics.c": "static int f(int x)\n{\n" + "    x++;\n" * 147 + "    return x;\n}\n",
    "executor/src/compute/cuda/small.cu": "namespace\n{\n__global__ void k(float *x)\n{\n    *x = 0;\n}\n"
                                  "} // namespace\n",
    # The docs name files from the root, from their folder, by a folder of the tree, bare,
    # generated (canzona_version.h from its .in), as globs, and cz_ symbols; patterns, system
    # headers, other projects' paths and build trees are not names of the tree.
    "planner/include/canzona_version.h.in": "#define CZ_VERSION \"@V@\"\n",
    "tools/check.sh": "#!/bin/sh\ncz_tool_run() { :; }\n",
    "README.md": "See `docs/GUIDE.md`, [the guide](docs/GUIDE.md#top), `tools/check.sh:2`,\n"
                 "`planner/`, `cuda/kernels.cu`, `plan_io.c`, `canzona_version.h`,\n"
                 "`cz_plan_read()` and `cz_tool_run`; tests are `tests/unit/test_*.c` and\n"
                 "`executor/src/{core/step,optim/muon}.c`.\n"
                 "Names: `cz_<noun>_<verb>`, `cz_cmd_*`, `cz__`; `<mpi.h>` is `mpi.h`; Megatron's\n"
                 "`megatron/core/optimizer/optimizer_config.py`; `build/canzona`, `./x.json`,\n"
                 "`plan.json`, `a/b` and https://example.org/planner/gone.c name nothing here.\n"
                 "```\n$ tools/check.sh planner/lib/cost.c\n```\n",
    "docs/GUIDE.md": "Back to [the README](../README.md); `GUIDE.md`; the format is\n"
                     "planner/format/plan_io.c, its header `cz_format.h`.\n",
    "tools/bench/npy.c": '#include "cz_format.h"\n#include "canzona.h"\n',
    "tests/unit/test_cost.c": '#include "cz_types.h"\n#include "format_internal.h"\n',
    "build/junk.c": '#include "cz_types.h"\n',
}
PLANTED = {  # rule -> (file, content) that breaks only that rule
    "layers": [("tools/bench/bad.c", '#include "cz_types.h"\n'),
               ("executor/src/core/bad.c", '#include "canzona.h"\n'),
               ("tests/exec/bad.c", '#include "executor_impl.h"\n'),
               ("examples/bad.c", '#include "cz_exec_testing.h"\n'),
               ("executor/src/core/bad.c", '#include "format_internal.h"\n'),
               ("planner/format/bad.c", '#include "cz_algorithms.h"\n'),
               ("planner/lib/bad.c", '#include "cz_error.h"\n')],
    "cycles": [("executor/src/compute/ns_plan.h", '#include "executor_impl.h"\n'),
               ("planner/lib/cz_algorithms.h", '#include "cz_types.h"\n')],
    "names": [("planner/format/bad.c", '#include "cz_format.h"\nint cz_helper(int a,\n'
                                       "              int b)\n{\n    return a + b;\n}\n"),
              ("planner/format/bad.c", "const char *const cz_table[] = {0};\n"),
              ("planner/lib/bad.c", "double cz_cost_of(void)\n{\n    return 1.0;\n}\n"),
              ("executor/src/core/bad.c", "int cz_exec_helper(void)\n{\n    return 0;\n}\n"),
              ("executor/src/compute/cuda/bad.cu", 'extern "C" {\nint cz_k_bad(void)\n{\n    return 0;\n}\n'
                                           '} // extern "C"\n')],
    "seams": [("executor/src/core/step.c", "static int f(void)\n{\n    return cz__muon_run();\n}\n"),
              ("executor/src/stray.c", "static int f(void)\n{\n    return 0;\n}\n"),
              ("executor/src/core/pipeline.c", 'int cz__pipeline_init(void)\n{\n    return strcmp(b, '
                                          '"cuda");\n}\n'),
              ("executor/src/core/step.c", "static int f(int o)\n{\n    return o == CZ_OPTIM_MUON;\n}\n"),
              ("executor/src/core/step.c", '#include "compute_cpu.h"\n'),
              ("executor/src/core/step.c", "#include <mpi.h>\n"),
              ("executor/src/optim/adamw.c", "static int f(void)\n{\n    return cz__muon_run();\n}\n"),
              ("executor/src/core/step.c", "static float f(const cz_exec_config *c)\n{\n"
                                      "    return c->soap.beta1;\n}\n"),
              ("executor/src/core/pipeline.c", "static int f(const cz_shampoo_config *s)\n{\n"
                                          "    return s->max_dim;\n}\n"),
              ("executor/src/core/step.c", "static double f(const cz_exec_config *c)\n{\n"
                                      "    return c->nccl_timeout_s;\n}\n"),
              ("executor/src/optim/muon.c", "static int f(void)\n{\n    return CZ_BACKEND_CUDA;\n}\n")],
    "errors": [("planner/lib/cost.c", "static int f(void)\n{\n    int rc = a();\n    if (!rc)\n"
                                      "        rc = b(1, 2);\n    return rc;\n}\n"),
               ("executor/src/core/pipeline.c", "int cz__pipeline_init(void)\n{\n    int rc = a();\n"
                                           "    if (rc == CZ_OK && ex->rank == 0)\n"
                                           "        rc = c->ops->download(c);\n    return rc;\n}\n"),
               ("planner/format/plan_io.c", "static int f(void)\n{\n    int rc = a();\n"
                                            "    if (!rc && n) {\n        rc = g(n);\n    }\n"
                                            "    return rc;\n}\n"),
               ("planner/lib/cost.c", "static int f(void)\n{\n    if (a())\n        goto oom;\n"
                                      "    return 0;\noom:\n    return -1;\n}\n"),
               ("executor/src/core/step.c", "static int f(cz_error *err)\n{\n    int rc = 0;\n"
                                       "    CZ_ASSERT_GOTO(n > 0, err, rc, out);\nout:\n"
                                       "    return rc;\n}\n")],
    "calls": [("executor/src/core/pipeline.c", "int cz__pipeline_init(void)\n{\n"
                                          "    return cz__exec_param_offset();\n}\n"),
              ("executor/src/compute/cuda/kernels.cu", 'extern "C" {\nint cz__k_sum(void)\n{\n'
                                               "    return cz__k_norm();\n}\n"
                                               '} // extern "C"\n'),
              ("planner/lib/cost_model.c",
               "int cz__cost_of(void)\n{\n    return cz__sim_run();\n}\n")],
    "docs": [("docs/GUIDE.md", "The backend is `executor_backend.c`.\n"),
             ("docs/GUIDE.md", "It is in `executor/src/gone.c`.\n"),
             ("README.md", "Run [the check](tools/gone.sh).\n"),
             ("docs/GUIDE.md", "See `lib/gone.c`.\n"),
             ("docs/GUIDE.md", "It is in planner/lib/gone.c.\n"),
             ("docs/GUIDE.md", "```\n$ tools/gone.sh\n```\n"),
             ("docs/GUIDE.md", "Every test is `tests/exec/test_*.c`.\n"),
             ("docs/GUIDE.md", "Call `cz_plan_gone()` first.\n"),
             ("docs/GUIDE.md", "The entry is cz__gone_internal, in prose.\n")],
    "length": [("planner/lib/metrics.c", "static int f(int x)\n{\n" + "    x++;\n" * 148 +
                "    return x;\n}\n"),
               ("executor/src/compute/cuda/small.cu", "namespace\n{\n__global__ void k(float *x)\n{\n" +
                "    x[0] = 0;\n" * 150 + "}\n} // namespace\n"),
               ("planner/format/plan_io.c", 'extern "C" {\nint cz_plan_read(void)\n{\n' +
                "    return 0;\n" * 150 + "}\n}\n"),
               ("executor/src/compute/ns_plan.h", "/* a header of 301 lines */\n" * 301)],
}


def write_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)


def self_test():
    ok = True
    tmp = tempfile.mkdtemp(prefix="check_layers.")
    try:
        clean = os.path.join(tmp, "clean")
        write_tree(clean, CLEAN)
        found = check(clean)
        print("self-test: clean tree:", "passed" if not found else "FAILED %s" % found)
        ok &= not found
        for rule, plants in PLANTED.items():
            for k, (rel, text) in enumerate(plants):
                tree = os.path.join(tmp, "%s%d" % (rule, k))
                write_tree(tree, dict(CLEAN, **{rel: text}))
                found = check(tree)
                caught = bool(found) and all(v.startswith(rule + ":") for v in found)
                print("self-test: %s planted in %s: %s" % (
                    rule, rel, "caught" if caught else "NOT CAUGHT (found %s)" % found))
                ok &= caught
    finally:
        shutil.rmtree(tmp)
    print("self-test:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def longest(root, count, under):
    """Prints the count longest functions of rule length's scope (under a folder when given),
    as the rows of docs/ARCHITECTURE.md's table."""
    rows = [r for r in function_lengths(root, source_files(root)) if r[2].startswith(under)]
    for n, name, f, line in rows[:count]:
        print("| %d | `%s` | %s |" % (n, name, f))
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    here = os.path.dirname(os.path.dirname(os.path.abspath(argv[0])))
    if argv[1:2] == ["--longest"] and len(argv) in (3, 4) and argv[2].isdigit():
        return longest(here, int(argv[2]), argv[3] if len(argv) == 4 else "")
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print("Usage: " + __doc__.split("Usage: ")[1].split("Prints each")[0].rstrip(),
              file=sys.stderr)
        return 2
    root = argv[1] if len(argv) > 1 else here
    found = check(root)
    for v in found:
        print(v)
    if found:
        print("check_layers: %d violation(s); the rules are in this script's docstring and "
              "docs/ARCHITECTURE.md" % len(found))
        return 1
    print("check_layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
