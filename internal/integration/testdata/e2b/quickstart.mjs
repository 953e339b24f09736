// E2B's quickstart, done with E2B's JavaScript SDK (npm package e2b, unmodified)
// against Airlock's E2B-compatible API, every result checked. TestE2BSDK runs it with
// E2B_API_URL and E2B_SANDBOX_URL set to the daemon's e2b_listen address and
// E2B_API_KEY to an Airlock token in E2B's format.
//
// It prints one line per step; on the first result that is not what E2B's SDK
// documents it prints what differed and exits 1, after killing its sandboxes and
// deleting its snapshot.

import { CommandExitError, NotFoundError, Sandbox, SandboxError } from 'e2b'

const run = Math.random().toString(16).slice(2, 10) // this run's metadata, to find its sandbox
let current = '' // the step under way, for the failure message
let sandbox // the sandbox to kill if a step fails
let others = [] // its forks and the other sandboxes it makes, to kill if a step fails
let snapshotId // the snapshot to delete if a step fails

function step(name) {
  current = name
  console.log(`step: ${name}`)
}

function expect(ok, what) {
  if (!ok) throw new Error(what)
}

// canonical is value as JSON with the keys of its objects sorted.
function canonical(value) {
  return JSON.stringify(value, (_, v) =>
    v && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort()) : v)
}

function expectEqual(got, want, what) {
  if (canonical(got) !== canonical(want)) {
    throw new Error(`${what}: got ${canonical(got)}, want ${canonical(want)}`)
  }
}

// expectThrow awaits promise and returns the error it rejects with, which must be an
// instance of cls.
async function expectThrow(promise, cls, what) {
  try {
    await promise
  } catch (err) {
    expect(err instanceof cls, `${what}: threw ${err?.constructor?.name}: ${err?.message}, want a ${cls.name}`)
    return err
  }
  throw new Error(`${what}: succeeded, want a ${cls.name}`)
}

// until polls check every 50 ms until it is true, for at most ms.
async function until(check, ms, what) {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

// snapshotsListed returns the snapshots Sandbox.listSnapshots(opts) pages, by id.
async function snapshotsListed(opts) {
  const out = []
  const pages = Sandbox.listSnapshots(opts)
  while (pages.hasNext) out.push(...(await pages.nextItems()))
  return out
}

// listed returns this run's sandboxes as Sandbox.list() pages them.
async function listed(query = {}) {
  const out = []
  const pages = Sandbox.list({ query: { metadata: { run }, ...query } })
  while (pages.hasNext) out.push(...(await pages.nextItems()))
  return out
}

async function main() {
  step('create a sandbox from the base template, with metadata and envs')
  sandbox = await Sandbox.create('base', {
    timeoutMs: 10 * 60_000,
    metadata: { suite: 'quickstart', run },
    envs: { GREETING: 'hello from create' },
  })
  expect(sandbox.sandboxId.startsWith('sb_'), `sandboxId ${sandbox.sandboxId}, want an Airlock id (sb_...)`)
  const info = await sandbox.getInfo()
  expectEqual(info.metadata, { suite: 'quickstart', run }, 'getInfo().metadata')
  expectEqual(info.state, 'running', 'getInfo().state')

  step('commands and files run as user, in /home/user, as in E2B; root by name')
  expectEqual((await sandbox.commands.run('whoami; pwd; echo "$HOME"')).stdout, 'user\n/home/user\n/home/user\n',
    'whoami; pwd; echo $HOME')
  expectEqual((await sandbox.files.write(`as-user-${run}.txt`, 'mine\n')).path, `/home/user/as-user-${run}.txt`,
    'write of a relative path: path')
  expectEqual((await sandbox.commands.run(`stat -c %U /home/user/as-user-${run}.txt /home/user`)).stdout, 'user\nuser\n',
    'the owner of the written file and of /home/user')
  expectEqual((await sandbox.commands.run('whoami; pwd', { user: 'root' })).stdout, 'root\n/root\n', 'whoami; pwd as root')
  await sandbox.files.remove(`as-user-${run}.txt`)

  step('run `echo hello` with streamed stdout')
  let streamed = ''
  const hello = await sandbox.commands.run('echo hello', { onStdout: (data) => { streamed += data } })
  expectEqual(hello.exitCode, 0, 'exit code')
  expectEqual(hello.stdout, 'hello\n', 'result stdout')
  expectEqual(streamed, 'hello\n', 'stdout passed to onStdout')
  expectEqual(hello.stderr, '', 'stderr')

  step('a failing command throws CommandExitError with its exit code')
  let streamedErr = ''
  const failed = await expectThrow(
    sandbox.commands.run('echo oops >&2; exit 3', { onStderr: (data) => { streamedErr += data } }),
    CommandExitError, 'run `exit 3`')
  expectEqual(failed.exitCode, 3, 'CommandExitError.exitCode')
  expectEqual(failed.stderr, 'oops\n', 'CommandExitError.stderr')
  expectEqual(streamedErr, 'oops\n', 'stderr passed to onStderr')

  step('the env var given at create, and one given to the command')
  expectEqual((await sandbox.commands.run('echo -n "$GREETING"')).stdout, 'hello from create', '$GREETING')
  expectEqual((await sandbox.commands.run('echo -n "$GREETING/$EXTRA"', { envs: { EXTRA: 'x' } })).stdout,
    'hello from create/x', '$GREETING/$EXTRA with envs {EXTRA: x}')
  expectEqual((await sandbox.commands.run('pwd', { cwd: '/usr' })).stdout, '/usr\n', 'pwd with cwd /usr')

  step('makeDir')
  const dir = `/tmp/quickstart-${run}`
  expectEqual(await sandbox.files.makeDir(dir), true, `makeDir ${dir} (new)`)
  expectEqual(await sandbox.files.makeDir(dir), false, `makeDir ${dir} (already there)`)

  step('write a file and read it back')
  const notes = `${dir}/notes.txt`
  const text = 'line 1\nline 2 \u00e9\n'
  const written = await sandbox.files.write(notes, text)
  expectEqual(written.path, notes, 'write: path')
  expectEqual(written.name, 'notes.txt', 'write: name')
  expectEqual(await sandbox.files.read(notes), text, `read ${notes}`)
  const bytes = await sandbox.files.read(notes, { format: 'bytes' })
  expectEqual(Buffer.from(bytes).toString('utf8'), text, `read ${notes} as bytes`)
  expectEqual((await sandbox.commands.run(`cat ${notes}`)).stdout, text, `cat ${notes} in the sandbox`)

  step('write several files in one request (a list of entries: one multipart POST)')
  const many = await sandbox.files.write([
    { path: `${dir}/many/a.txt`, data: 'a\n' },
    { path: `many-${run}/b b.txt`, data: 'b\n' },
    { path: `${dir}/many/deep/c.txt`, data: new Blob(['c\n']) },
  ])
  expectEqual(many.map((f) => f.path), [`${dir}/many/a.txt`, `/home/user/many-${run}/b b.txt`, `${dir}/many/deep/c.txt`],
    'write of a list: the paths written, in order')
  expectEqual((await sandbox.commands.run(`cat ${dir}/many/a.txt "/home/user/many-${run}/b b.txt" ${dir}/many/deep/c.txt`)).stdout,
    'a\nb\nc\n', 'the files of the list, in the sandbox')
  await sandbox.files.remove(`${dir}/many`)
  await sandbox.files.remove(`many-${run}`)

  step('list its directory, exists')
  const entries = await sandbox.files.list(dir)
  expectEqual(entries.map((e) => [e.name, e.type, e.path, e.size]),
    [['notes.txt', 'file', notes, Buffer.byteLength(text)]], `list ${dir}`)
  expectEqual(await sandbox.files.exists(notes), true, `exists ${notes}`)
  expectEqual(await sandbox.files.exists(`${dir}/absent`), false, `exists ${dir}/absent`)
  expectEqual((await sandbox.files.getInfo(dir)).type, 'dir', `getInfo ${dir}: type`)

  step('rename it')
  const moved = `${dir}/renamed.txt`
  const renamed = await sandbox.files.rename(notes, moved)
  expectEqual([renamed.name, renamed.path], ['renamed.txt', moved], 'rename: entry')
  expectEqual(await sandbox.files.exists(notes), false, `exists ${notes} after the rename`)
  expectEqual(await sandbox.files.read(moved), text, `read ${moved}`)

  step('remove it, and it is gone')
  await sandbox.files.remove(moved)
  expectEqual(await sandbox.files.exists(moved), false, `exists ${moved} after remove`)
  await expectThrow(sandbox.files.read(moved), NotFoundError, `read ${moved} after remove`)
  expectEqual(await sandbox.files.list(dir), [], `list ${dir} after remove`)

  step('a background process: listed while it runs, gone once killed')
  const ticks = []
  const loop = await sandbox.commands.run('for i in $(seq 1 3000); do echo tick $i; sleep 0.1; done', {
    background: true,
    timeoutMs: 120_000,
    onStdout: (data) => { ticks.push(data) },
  })
  expect(Number.isInteger(loop.pid) && loop.pid > 0, `background pid ${loop.pid}`)
  await until(() => ticks.join('').includes('tick 2\n'), 10_000, 'the background loop printing "tick 2"')
  const running = (await sandbox.commands.list()).find((p) => p.pid === loop.pid)
  expect(running, `commands.list() does not show pid ${loop.pid}`)
  expectEqual([running.cmd, running.args.at(-1)],
    ['/bin/bash', 'for i in $(seq 1 3000); do echo tick $i; sleep 0.1; done'], 'commands.list(): the process')
  expectEqual(await loop.kill(), true, 'kill()')
  const killed = await expectThrow(loop.wait(), CommandExitError, 'wait() after kill()')
  expect(killed.exitCode !== 0, `exit code after kill: ${killed.exitCode}`)
  await until(async () => !(await sandbox.commands.list()).some((p) => p.pid === loop.pid), 5_000,
    `pid ${loop.pid} leaving commands.list()`)
  expectEqual(await sandbox.commands.kill(loop.pid), false, 'commands.kill() of a process that ended')

  step('write to a process\'s stdin, then close it')
  let catOut = ''
  const cat = await sandbox.commands.run('cat', { background: true, stdin: true, onStdout: (data) => { catOut += data } })
  await cat.sendStdin('first line\n')
  await until(() => catOut === 'first line\n', 10_000, `cat echoing "first line" (has ${JSON.stringify(catOut)})`)
  await sandbox.commands.sendStdin(cat.pid, 'second line\n')
  await cat.closeStdin()
  const catRes = await cat.wait()
  expectEqual([catRes.exitCode, catRes.stdout], [0, 'first line\nsecond line\n'], 'cat after closeStdin')

  step('setTimeout')
  const before = Date.now()
  await sandbox.setTimeout(5 * 60_000)
  const endAt = (await sandbox.getInfo()).endAt.getTime()
  expect(endAt >= before + 4 * 60_000 && endAt <= Date.now() + 6 * 60_000,
    `endAt ${new Date(endAt).toISOString()} after setTimeout(5 min) at ${new Date(before).toISOString()}`)

  step('Sandbox.list() shows it')
  const shown = (await listed()).filter((s) => s.sandboxId === sandbox.sandboxId)
  expectEqual(shown.map((s) => [s.state, s.metadata.suite]), [['running', 'quickstart']], 'Sandbox.list(): this sandbox')

  step('fork it twice: each fork sees a file written before the fork, and has its metadata')
  const beforeFork = 'written before the fork\n'
  await sandbox.files.write(`before-${run}.txt`, beforeFork)
  const forked = await sandbox.fork({ count: 2, timeoutMs: 5 * 60_000 })
  others = forked.filter((f) => f instanceof Sandbox)
  expectEqual(forked.map((f) => f instanceof Sandbox ? 'sandbox' : `${f?.constructor?.name}: ${f?.message}`),
    ['sandbox', 'sandbox'], 'fork({count: 2})')
  for (const fork of others) {
    expect(fork.sandboxId.startsWith('sb_') && fork.sandboxId !== sandbox.sandboxId,
      `fork's sandboxId ${fork.sandboxId}, want a new Airlock id`)
    expectEqual((await fork.commands.run(`cat before-${run}.txt`)).stdout, beforeFork, `cat before-${run}.txt in ${fork.sandboxId}`)
    expectEqual((await fork.getInfo()).metadata, { suite: 'quickstart', run }, `${fork.sandboxId}: getInfo().metadata`)
  }

  step('Sandbox.list() lists newest first')
  expectEqual((await listed()).map((s) => s.sandboxId), [others[1].sandboxId, others[0].sandboxId, sandbox.sandboxId],
    'Sandbox.list(): the forks, then their source')

  step('a fork is its own sandbox: what it writes the source does not see')
  await others[0].files.write(`fork-only-${run}.txt`, 'fork only\n')
  expectEqual(await sandbox.files.exists(`fork-only-${run}.txt`), false, `exists fork-only-${run}.txt in the source`)
  expectEqual(await others[1].files.exists(`fork-only-${run}.txt`), false, `exists fork-only-${run}.txt in the other fork`)

  step('createSnapshot, and Sandbox.create(snapshotId) sees the file')
  const snap = await sandbox.createSnapshot({ name: `quickstart-${run}` })
  snapshotId = snap.snapshotId
  expect(snapshotId.startsWith('snap_'), `snapshotId ${snapshotId}, want an Airlock snapshot id (snap_...)`)
  expectEqual(snap.names, [`quickstart-${run}`], 'createSnapshot: names')
  const fromSnap = await Sandbox.create(snapshotId, { timeoutMs: 5 * 60_000, metadata: { suite: 'quickstart', run } })
  others.push(fromSnap)
  expectEqual((await fromSnap.commands.run(`cat before-${run}.txt`)).stdout, beforeFork,
    `cat before-${run}.txt in the sandbox made from ${snapshotId}`)

  step('Sandbox.listSnapshots() shows the snapshot')
  expectEqual((await snapshotsListed({ name: `quickstart-${run}` })).map((s) => [s.snapshotId, s.names]),
    [[snapshotId, [`quickstart-${run}`]]], 'Sandbox.listSnapshots({name})')
  const ofSandbox = await snapshotsListed({ sandboxId: sandbox.sandboxId })
  expect(ofSandbox.some((s) => s.snapshotId === snapshotId), `Sandbox.listSnapshots({sandboxId}) lacks ${snapshotId}: ${canonical(ofSandbox)}`)
  const all = await snapshotsListed()
  expect(all.some((s) => s.snapshotId === snapshotId), `Sandbox.listSnapshots() lacks ${snapshotId}`)

  step('deleteSnapshot is refused while a sandbox comes from it, and works once it is killed')
  const refused = await expectThrow(Sandbox.deleteSnapshot(snapshotId), SandboxError, 'deleteSnapshot with a sandbox from it')
  expect(refused.message.startsWith('409: '), `deleteSnapshot with a sandbox from it: ${refused.message}, want 409`)
  expectEqual(await fromSnap.kill(), true, 'kill() of the sandbox from the snapshot')
  expectEqual(await Sandbox.deleteSnapshot(snapshotId), true, 'deleteSnapshot')
  expectEqual(await Sandbox.deleteSnapshot(snapshotId), false, 'deleteSnapshot of a deleted snapshot')
  snapshotId = undefined
  expectEqual(await snapshotsListed({ name: `quickstart-${run}` }), [], 'Sandbox.listSnapshots({name}) after the delete')

  step('kill the forks')
  for (const fork of others.slice(0, 2)) expectEqual(await fork.kill(), true, `kill() of fork ${fork.sandboxId}`)
  others = []

  step('getMetrics answers the sandbox\'s usage samples in E2B\'s shape')
  const metrics = await sandbox.getMetrics()
  expect(Array.isArray(metrics), `getMetrics(): ${JSON.stringify(metrics)}, want a list of samples`)
  for (const m of metrics) {
    expect(m.timestamp instanceof Date && typeof m.cpuCount === 'number' && typeof m.memTotal === 'number' && m.memTotal > 0,
      `getMetrics() sample ${JSON.stringify(m)}: want timestamp, cpuCount and memTotal`)
  }

  step('updateNetwork sets the egress policy')
  await sandbox.updateNetwork({ denyOut: ['0.0.0.0/0'], allowOut: ['pypi.org'] })
  await sandbox.updateNetwork({ allowInternetAccess: true })

  step('lifecycle onTimeout pause (autoPause): the timeout pauses the sandbox instead of ending it')
  const pausing = await Sandbox.create('base', { timeoutMs: 2 * 60_000, lifecycle: { onTimeout: 'pause' }, metadata: { suite: 'quickstart', run } })
  others.push(pausing)
  const pausingEnd = (await pausing.getInfo()).endAt.getTime()
  expect(pausingEnd > Date.now() + 60 * 60_000, `an autoPause sandbox ends at ${new Date(pausingEnd).toISOString()}, want later than its 2-minute timeout`)
  expectEqual(await pausing.kill(), true, 'kill() of the autoPause sandbox')
  others = []

  step('write a file in the home directory (a relative path), pause')
  const home = (await sandbox.commands.run('echo -n "$HOME"')).stdout
  expect(home.startsWith('/'), `$HOME is ${JSON.stringify(home)}`)
  // A relative path is relative to the user's home, as in E2B.
  await sandbox.files.write(`kept-${run}.txt`, 'kept across pause\n')
  const kept = `${home}/kept-${run}.txt`
  expectEqual((await sandbox.commands.run(`cat kept-${run}.txt`)).stdout, 'kept across pause\n',
    `cat kept-${run}.txt in the home directory`)
  expectEqual(await sandbox.pause(), true, 'pause()')
  expectEqual((await listed({ state: ['paused'] })).map((s) => s.sandboxId), [sandbox.sandboxId],
    'Sandbox.list({state: [paused]})')

  step('resume it with Sandbox.connect, and run a command')
  // As E2B's documentation does it: no timeoutMs, so the API's default (300 s) applies.
  const resumed = await Sandbox.connect(sandbox.sandboxId)
  expectEqual(resumed.sandboxId, sandbox.sandboxId, 'Sandbox.connect: sandboxId')
  expectEqual((await resumed.getInfo()).state, 'running', 'getInfo().state after connect')
  expectEqual((await resumed.commands.run('echo -n resumed "$GREETING"')).stdout, 'resumed hello from create',
    'a command after the resume')
  expectEqual(await resumed.files.read(kept), 'kept across pause\n', `read ${kept} after the resume`)

  step('kill it while a command runs: the command ends, and isRunning() says false')
  const sleeper = await resumed.commands.run('sleep 600', { background: true })
  expectEqual(await resumed.kill(), true, 'kill()')
  sandbox = undefined
  const ended = await expectThrow(sleeper.wait(), SandboxError, 'wait() for a command of a killed sandbox')
  expect(ended instanceof CommandExitError || ended.message === 'Process exited without a result',
    `wait() for a command of a killed sandbox: ${ended.constructor.name}: ${ended.message}, want its end`)
  expectEqual(await resumed.isRunning(), false, 'isRunning() after kill()')

  step('Sandbox.list() no longer shows it')
  expectEqual((await listed()).map((s) => s.sandboxId), [], 'Sandbox.list() after kill')
  expectEqual(await Sandbox.kill(resumed.sandboxId), false, 'Sandbox.kill() of a killed sandbox')

  console.log('quickstart: all steps passed')
}

try {
  await main()
} catch (err) {
  console.log(`FAIL at step "${current}": ${err?.stack ?? err}`)
  for (const sb of [sandbox, ...others].filter(Boolean)) {
    await sb.kill().catch((e) => console.log(`kill ${sb.sandboxId} after the failure: ${e.message}`))
  }
  if (snapshotId) {
    await Sandbox.deleteSnapshot(snapshotId).catch((e) => console.log(`delete ${snapshotId} after the failure: ${e.message}`))
  }
  process.exit(1)
}
process.exit(0)
