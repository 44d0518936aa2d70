#!/usr/bin/env python3
"""Safety gate (agent-CLI PreToolUse, matcher "run_command|code_execution").

Denies command lines that run `rm -rf`, asks before `git push`, allows the
rest. Reads the event JSON on stdin ("toolCall": {"name", "args"}) and
prints the decision JSON on stdout. hookgate hands a remote-sandbox
pre_tool_execution call to it in this same form, so it gates both kinds
of agent.
"""
import json
import sys

data = json.load(sys.stdin)
args = data.get("toolCall", {}).get("args", {})
cmd = str(args.get("CommandLine", args.get("code", "")))
if "rm -rf" in cmd:
    print(json.dumps({"decision": "deny", "reason": "Destructive command blocked by the safety gate."}))
elif "git push" in cmd:
    print(json.dumps({"decision": "ask", "reason": "Pushing needs your confirmation.",
                      "permissionOverrides": ["command(git push)"]}))
else:
    print(json.dumps({"decision": "allow"}))
