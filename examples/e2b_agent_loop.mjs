// An agent loop through E2B's JavaScript SDK: a model writes Python, an Airlock
// sandbox runs it, the result goes back to the model, until the model is satisfied.
// It is examples/agent_loop.py done with the npm package e2b, unmodified, against
// Airlock's E2B-compatible API (docs/e2b.md).
//
// The "model" is a scripted stand-in (no model, no network): it proposes code, reads
// the result, fixes its own mistake once, and stops when the answer checks out. Swap
// ScriptedModel for a real model client and the loop stays the same.
//
//     airlock serve --e2b-listen 127.0.0.1:3000
//     npm install e2b@2.51.0
//     export E2B_API_URL=http://127.0.0.1:3000 E2B_SANDBOX_URL=http://127.0.0.1:3000
//     export E2B_API_KEY=$(airlock token create --user alice --format e2b)
//     node examples/e2b_agent_loop.mjs

import { CommandExitError, Sandbox } from 'e2b'

// ScriptedModel stands in for a model: each call returns the next piece of code to
// run, or null once the task is done. It reacts to what the sandbox said, as a model
// would.
class ScriptedModel {
  history = [] // {code, stdout, stderr, exitCode}

  nextCode() {
    if (this.history.length === 0) {
      // First try: a bug (an undefined name), as models write now and then.
      return 'primes = [n for n in range(2, 50) if all(n % d for d in range(2, n))]\nprint(sum(primez))'
    }
    const last = this.history.at(-1)
    if (last.exitCode !== 0 && last.stderr.includes('NameError')) {
      // The model reads the traceback and fixes its code.
      return 'primes = [n for n in range(2, 50) if all(n % d for d in range(2, n))]\nprint(sum(primes))'
    }
    if (last.exitCode === 0 && last.stdout.trim() === '328') {
      return null // the answer checks out: done
    }
    return "print('giving up')"
  }
}

// runPython runs code in the sandbox and returns what it printed and its exit code;
// a non-zero exit is a result to show the model, not an error of the loop.
async function runPython(sandbox, code) {
  await sandbox.files.write('/tmp/step.py', code)
  try {
    return await sandbox.commands.run('python3 /tmp/step.py', { timeoutMs: 30_000 })
  } catch (err) {
    if (err instanceof CommandExitError) return err
    throw err
  }
}

async function run(maxTurns = 5) {
  const model = new ScriptedModel()
  // One sandbox for the whole conversation: files persist between turns; no network
  // for model-written code.
  const sandbox = await Sandbox.create('base', {
    timeoutMs: 10 * 60_000,
    allowInternetAccess: false,
    metadata: { example: 'e2b_agent_loop' },
  })
  try {
    for (let turn = 1; turn <= maxTurns; turn++) {
      const code = model.nextCode()
      if (code === null) break
      const res = await runPython(sandbox, code)
      model.history.push({ code, stdout: res.stdout, stderr: res.stderr, exitCode: res.exitCode })
      const lines = (res.stdout || res.stderr).trim().split('\n')
      console.log(`turn ${turn}: exit ${res.exitCode}: ${lines.at(-1)}`)
    }
  } finally {
    await sandbox.kill()
  }
  const answer = model.history.at(-1).stdout.trim()
  console.log('answer:', answer)
  return answer
}

process.exit((await run()) === '328' ? 0 : 1)
