"""Edits a plan the way a tool that edits plans must: applies the Python statements read from
standard input to the plan `p` (a dict), then records the content hash of the edited plan
(docs/FORMATS.md, section 5: compact, keys sorted, reals as %.17g), so that the executor's
hash check passes and what it checks next is reached.

    python3 plan_edit.py IN OUT <<'PY'
    p["params"][5]["tp_dim"] = 0
    PY
"""
import hashlib
import json
import sys


def canon(v):
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canon(v[k])
                              for k in sorted(v, key=lambda k: k.encode())) + "}"
    if isinstance(v, list):
        return "[" + ",".join(canon(x) for x in v) + "]"
    if isinstance(v, float):
        r = "%.17g" % v
        if "e" in r:
            m, e = r.split("e")
            r = m + "e" + str(int(e))
        elif "." not in r and "n" not in r:
            r += ".0"
        return r
    return json.dumps(v, ensure_ascii=False)


p = json.load(open(sys.argv[1]))
exec(sys.stdin.read(), {"p": p})
p.pop("content_sha256", None)
p["content_sha256"] = hashlib.sha256(canon(p).encode()).hexdigest()
json.dump(p, open(sys.argv[2], "w"))
