#!/usr/bin/env python3
"""The step logic touches parameter, gradient and optimizer-state data only through the backend
seam: step.c, binding.c, bucket_step.c, pipeline.c, muon.c, adamw.c, shampoo.c and soap.c
(executor/src) may pass data pointers around and offset them, but never read or write an element
(no subscript or dereference of a float, double or bf16 data pointer), never copy data themselves
(memcpy, memmove) and never call BLAS.

Data pointers are the variables, parameters and struct fields declared as a pointer to float,
double or uint16_t (or an array of such pointers): the struct fields of the executor/src headers the files
include, and each file's own declarations. It is a source check, not a C parser: a name that a file also declares with
another type is not checked as a plain variable (only after -> or .); the output lists what
was checked and what was not. The one exception is stats_host: the host copy of the
per-parameter sums of squares, read by step.c at the documented read-back point.

Usage: seam_only.py SOURCE_DIR [FILE...]  (FILEs default to those files; exit 1 listing
every violation)."""
import os
import re
import sys

ALLOWED = {"stats_host"}
FILES = ("step.c", "binding.c", "bucket_step.c", "pipeline.c", "muon.c", "adamw.c", "shampoo.c",
         "soap.c")
DATA_TYPES = r"(?:float|double|uint16_t)"


def strip(text):
    """Removes comments, string and character literals, keeping line numbers."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q:
                j += 2 if text[j] == "\\" else 1
            out.append(q + q)
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def unconst(code):
    """Drops const, so that "float *const *x" reads as "float **x"."""
    code = re.sub(r"\bconst\b", " ", code)
    while re.search(r"\*\s+\*", code):
        code = re.sub(r"\*\s+\*", "**", code)
    return code


def decls(code):
    """Declared names: {name: depth} for pointers to the data types (depth = pointer levels plus
    array dimensions), and the set of names also declared with another type (ambiguous)."""
    code = unconst(code)
    data, other = {}, set()
    for m in re.finditer(r"\b" + DATA_TYPES + r"\b([^;{}()]*?)(?=[;{)=])", code):
        for d in re.finditer(r"(\*+)\s*([A-Za-z_]\w*)\s*((?:\[[^]]*\]\s*)*)", m.group(1)):
            data[d.group(2)] = len(d.group(1)) + d.group(3).count("[")
    # Parameters too: "float *x," inside a parameter list.
    for d in re.finditer(r"\b" + DATA_TYPES + r"\s*(\*+)\s*([A-Za-z_]\w*)\s*((?:\[[^]]*\]\s*)*)[,)]", code):
        data[d.group(2)] = len(d.group(1)) + d.group(3).count("[")
    for d in re.finditer(r"\b(?!(?:float|double|uint16_t|return|else)\b)([A-Za-z_]\w*)\s+\**\s*([A-Za-z_]\w*)\s*(?=[;,=)\[])", code):
        other.add(d.group(2))
    return data, other


def subscripts(line, i):
    """Number of top-level [..] subscripts in a row starting at line[i] == '['."""
    n = 0
    while i < len(line) and line[i] == "[":
        level = 0
        while i < len(line):
            level += {"[": 1, "]": -1}.get(line[i], 0)
            i += 1
            if level == 0:
                break
        n += 1
        while i < len(line) and line[i] == " ":
            i += 1
    return n


def violations(path, depth, fields):
    """depth: the file's own data pointers; fields: the header's data fields (after -> or .)."""
    code = unconst(strip(open(path, encoding="utf-8").read()))
    found = []
    for ln, line in enumerate(code.split("\n"), 1):
        for m in re.finditer(r"\b(memcpy|memmove|cblas_\w+)\s*\(", line):
            found.append((ln, f"calls {m.group(1)}"))
        # name[..] (depth 1), name[..][..] (depth 2): an element.
        declaration = re.match(r"\s*(?:static\s+)?" + DATA_TYPES + r"\b", line)
        for m in re.finditer(r"(&\s*(?:[A-Za-z_]\w*\s*(?:->|\.)\s*)*)?(->|\.)?\s*\b([A-Za-z_]\w*)\s*\[", line):
            name, subs = m.group(3), subscripts(line, m.end() - 1)
            if m.group(1):
                continue  # &x[i] is an address, not an access
            known = fields if m.group(2) else depth
            if name in known and subs >= known[name]:
                # "float *x[2]" declares an array of pointers; not an access.
                if declaration:
                    continue
                found.append((ln, f"reads or writes an element of '{name}'"))
        # *name, or *name[..] for depth 2: an element.
        for m in re.finditer(r"(?:^|[=(,;!?:+\-]|return)\s*\*\s*(?:[A-Za-z_]\w*\s*(->|\.)\s*)*([A-Za-z_]\w*)(\s*\[[^]]*\])?", line):
            name = m.group(2)
            if declaration:
                continue
            known = fields if m.group(1) else depth
            if name in known and (1 if m.group(3) else 0) + 1 >= known[name]:
                found.append((ln, f"dereferences '{name}'"))
    return found


def drop_parens(code):
    """Empties every (...): what is left of a header is its struct fields and globals."""
    while re.search(r"\([^()]*\)", code):
        code = re.sub(r"\([^()]*\)", "_", code)
    return code


def main():
    src = sys.argv[1]
    exec_src = os.path.join(src, "executor", "src")
    # The executor's files by name, in whichever of its folders (core/, optim/, ...) they lie.
    where = {f: os.path.join(d, f) for d, _, fs in os.walk(exec_src) for f in fs}
    missing = [f for f in FILES if f not in where]
    if missing and not sys.argv[2:]:
        print("seam_only: not in executor/src: " + " ".join(missing))
        return 1
    files = sys.argv[2:] or [where[f] for f in FILES]
    # The headers' struct fields (reached through -> and .) count for every file; a file's own
    # declarations only for itself.
    # The headers the checked files include (executor/src's own): where their structs are.
    names = set()
    for f in files:
        names |= set(re.findall(r'^\s*#\s*include\s*"([^"/]+\.h)"', open(f, encoding="utf-8").read(), re.M))
    headers = "\n".join(open(where[h], encoding="utf-8").read() for h in sorted(names) if h in where)
    header = decls(drop_parens(strip(headers)))
    fields = {k: v for k, v in header[0].items() if k not in header[1] and k not in ALLOWED}
    bad = 0
    for f in files:
        own, ambiguous = decls(strip(open(f, encoding="utf-8").read()))
        skipped = sorted(k for k in own if k in ambiguous)
        depth = {k: v for k, v in own.items() if k not in ambiguous and k not in ALLOWED}
        # After -> or ., a name is a field: the header's, or one of this file's own structs.
        own_fields = dict(fields)
        for k, v in own.items():
            if k not in ALLOWED:
                own_fields[k] = min(v, own_fields.get(k, v))
        for ln, what in violations(f, depth, own_fields):
            print(f"{os.path.relpath(f, src)}:{ln}: {what}; data is touched only through the compute ops")
            bad += 1
        print(f"  {os.path.relpath(f, src)}: own data pointers checked (name/depth): "
              + (" ".join(f"{k}/{v}" for k, v in sorted(depth.items())) or "none")
              + "; not checked (also declared with another type): " + (" ".join(skipped) or "none"))
    print("  fields checked: " + " ".join(f"{k}/{v}" for k, v in sorted(fields.items())))
    print(f"seam_only: {len(files)} files, {bad} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
