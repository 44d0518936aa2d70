#!/usr/bin/env python3
"""Security gate (pre_tool_execution, matcher "code_execution").

Denies code that runs `rm -rf`; allows everything else. Reads the event
JSON on stdin and prints the decision JSON on stdout.
"""
import json
import sys

data = json.load(sys.stdin)
cmd = str(data.get("tool_call", {}).get("args", {}))
if "rm -rf" in cmd:
    print(json.dumps({"decision": "deny", "reason": "Destructive command blocked by security gate."}))
else:
    print(json.dumps({"decision": "allow"}))
