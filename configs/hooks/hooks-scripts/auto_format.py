#!/usr/bin/env python3
"""Catch-all formatter (post_tool_execution, matcher "*").

After a tool wrote a file, reformat it in place when we know how:
JSON files are pretty-printed with two-space indentation (standard library
only). Anything else, and any failed tool call, is left alone. Output is
ignored for post events; we print {} for tidiness.
"""
import json
import os
import sys

data = json.load(sys.stdin)
call = data.get("tool_call", {})
args = call.get("args", {}) if isinstance(call.get("args"), dict) else {}
path = args.get("path", "")

if "error" not in data and call.get("name") == "write_file" and path.endswith(".json") and os.path.isfile(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        tmp = path + ".fmt.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2, sort_keys=False)
            f.write("\n")
        os.replace(tmp, path)
    except (OSError, ValueError) as e:
        print(f"auto_format: {path}: {e}", file=sys.stderr)

print("{}")
