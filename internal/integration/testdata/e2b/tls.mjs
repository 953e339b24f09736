// E2B's JavaScript SDK, unmodified, against Airlock's E2B-compatible API served over
// HTTPS (tls_cert and tls_key): both planes at https:// URLs, the CA trusted through
// NODE_EXTRA_CA_CERTS. TestE2BSDKOverTLS runs it; it prints one line per step and exits
// 1 on the first result that is not what the SDK documents, after killing its sandbox.

import { Sandbox } from 'e2b'

let sandbox
function expect(ok, what) {
  if (!ok) throw new Error(what)
}

try {
  console.log('step: create')
  sandbox = await Sandbox.create({ timeoutMs: 120_000 })
  console.log('step: run a command, output streamed')
  let streamed = ''
  const r = await sandbox.commands.run('echo over-tls', { onStdout: (d) => { streamed += d } })
  expect(r.exitCode === 0 && r.stdout === 'over-tls\n' && streamed === 'over-tls\n', `run: ${JSON.stringify(r)}, streamed ${JSON.stringify(streamed)}`)
  console.log('step: write and read a file')
  await sandbox.files.write('/tmp/tls.txt', 'sealed')
  const body = await sandbox.files.read('/tmp/tls.txt')
  expect(body === 'sealed', `read: ${JSON.stringify(body)}`)
  console.log('step: kill')
  await sandbox.kill()
  sandbox = undefined
  console.log('ok')
} catch (err) {
  console.log(`failed: ${err?.constructor?.name}: ${err?.message}`)
  if (sandbox) await sandbox.kill().catch(() => {})
  process.exit(1)
}
