# The driver of a python session (run as `python3 -u -c <this>` by the Airlock agent).
# Each message is one JSON line on stdin: {"code": "...", "marker": "..."}. The code runs
# with persistent globals; if its last statement is an expression, its repr is printed as
# a REPL would. A traceback goes to stderr. Then the marker is written as a line to
# stderr and, followed by " ok" or " error", to stdout, so the agent knows the reply ended.
import ast
import json
import os
import signal
import sys
import traceback

_in = sys.stdin.buffer
sys.stdin = open(os.devnull)
_globals = {"__name__": "__main__", "__builtins__": __builtins__}
_running = False


def _on_sigint(signum, frame):
    # The agent interrupts a cancelled send; outside user code there is nothing to stop.
    if _running:
        raise KeyboardInterrupt


signal.signal(signal.SIGINT, _on_sigint)

while True:
    _line = _in.readline()
    if not _line:
        break
    _msg = json.loads(_line)
    _status = "ok"
    _running = True
    try:
        _tree = ast.parse(_msg["code"], "<input>", "exec")
        _last = None
        if _tree.body and isinstance(_tree.body[-1], ast.Expr):
            _last = ast.Expression(_tree.body.pop().value)
        exec(compile(_tree, "<input>", "exec"), _globals)
        if _last is not None:
            _value = eval(compile(_last, "<input>", "eval"), _globals)
            if _value is not None:
                print(repr(_value))
    except SystemExit:
        raise
    except BaseException as _e:
        _status = "error"
        _tb = _e.__traceback__
        if isinstance(_e, SyntaxError):
            _tb = None  # the parser's frames mean nothing to the user
        elif _tb is not None:
            _tb = _tb.tb_next  # hide the driver's own frame
        traceback.print_exception(type(_e), _e, _tb)
    finally:
        _running = False
    try:
        sys.stdout.flush()
    except Exception:
        pass
    sys.stderr.flush()
    sys.__stderr__.write(_msg["marker"] + "\n")
    sys.__stderr__.flush()
    sys.__stdout__.write(_msg["marker"] + " " + _status + "\n")
    sys.__stdout__.flush()
