#!/usr/bin/env python3
"""Privacy gate (pre_tool_execution, matcher "read_file").

Denies reads of paths under a /private/ directory and points the agent at
the approved /public/ tables instead.
"""
import json
import sys

data = json.load(sys.stdin)
path = str(data.get("tool_call", {}).get("args", {}).get("path", ""))

if "/private/" in path:
    resp = {
        "decision": "deny",
        "reason": "Access to confidential `/private/` records is blocked by PII compliance policy. "
        "Query approved `/public/` summary tables instead.",
    }
else:
    resp = {"decision": "allow"}

print(json.dumps(resp))
