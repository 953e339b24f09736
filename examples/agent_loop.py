"""An agent loop: a model writes Python, Airlock runs it in a sandbox, the result goes
back to the model, until the model is satisfied.

The "model" here is a scripted stand-in (no model, no network): it proposes code, reads
the result, fixes its own mistake once, and stops when the answer checks out. Swap
`ScriptedModel` for a real model client and the loop stays the same.

    AIRLOCK_SOCKET=/run/airlock/airlock.sock python3 examples/agent_loop.py
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass, field
from typing import List, Optional

sys.path.insert(0, __file__.rsplit("/examples/", 1)[0] + "/sdk/python")

from airlock import Sandbox  # noqa: E402


@dataclass
class Turn:
    code: str
    stdout: str = ""
    stderr: str = ""
    exit_code: Optional[int] = None


@dataclass
class ScriptedModel:
    """Stands in for a model: each call returns the next piece of code to run, or None
    once the task is done. It reacts to what the sandbox said, as a model would."""

    history: List[Turn] = field(default_factory=list)

    def next_code(self) -> Optional[str]:
        if not self.history:
            # First try: a bug (an undefined name), as models write now and then.
            return "primes = [n for n in range(2, 50) if all(n % d for d in range(2, n))]\nprint(sum(primez))"
        last = self.history[-1]
        if last.exit_code != 0 and "NameError" in last.stderr:
            # The model reads the traceback and fixes its code.
            return "primes = [n for n in range(2, 50) if all(n % d for d in range(2, n))]\nprint(sum(primes))"
        if last.exit_code == 0 and last.stdout.strip() == "328":
            return None  # the answer checks out: done
        return "print('giving up')"


def run(max_turns: int = 5) -> str:
    model = ScriptedModel()
    name = "agent-loop-" + uuid.uuid4().hex[:8]
    # One sandbox for the whole conversation: files and installed packages persist
    # between turns; no network for model-written code.
    with Sandbox.create(name, network="none", memory="512Mi") as sb:
        for turn in range(1, max_turns + 1):
            code = model.next_code()
            if code is None:
                break
            sb.files.write("/root/step.py", code)
            res = sb.exec(["python3", "/root/step.py"], timeout=30)
            model.history.append(Turn(code, res.stdout, res.stderr, res.exit_code))
            print(f"turn {turn}: exit {res.exit_code}: {(res.stdout or res.stderr).strip().splitlines()[-1]}")
    answer = model.history[-1].stdout.strip()
    print("answer:", answer)
    return answer


if __name__ == "__main__":
    sys.exit(0 if run() == "328" else 1)
