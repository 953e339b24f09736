// One sandbox: its record and limits, live usage, events, egress decisions, ports,
// snapshots, its detached processes' logs, files, a terminal, and the actions.
import { h, replace, table, time, age, bytes, errorBox, section } from './dom.js';
import { get, call, lines, enc, can } from './api.js';
import { graph } from './graph.js';
import { openTerminal } from './term.js';
import { confirm } from './confirm.js';

// part loads one section's contents into el; a failure shows in that section only.
async function part(el, load) {
  try { replace(el, await load()); } catch (err) { replace(el, errorBox(err)); }
}

function limitsList(sb) {
  const l = sb.limits || {};
  return h('dl', { id: 'limits' },
    h('dt', {}, 'CPU'), h('dd', {}, l.cpu ? l.cpu + ' cores' : 'node default'),
    h('dt', {}, 'Memory'), h('dd', {}, l.memory ? bytes(l.memory) : 'node default'),
    h('dt', {}, 'Disk'), h('dd', {}, l.disk ? bytes(l.disk) : 'node default'),
    h('dt', {}, 'PIDs'), h('dd', {}, l.pids ? String(l.pids) : 'node default'),
    h('dt', {}, 'Idle suspend'), h('dd', {}, sb.idle_suspend || '–'),
    h('dt', {}, 'Expires'), h('dd', {}, time(sb.expires_at)));
}

function usagePart(ref, signal) {
  const el = h('div', { id: 'usage' }, 'loading usage…');
  let stopped = false;
  signal.addEventListener('abort', () => { stopped = true; });
  const tick = async () => {
    if (stopped) return;
    try {
      const s = await get('/v1/sandboxes/' + enc(ref) + '/stats?history=1', { signal, noSignIn: true });
      const hist = s.history || [];
      const cpu = s.cpu || {}, mem = s.memory || {};
      replace(el,
        h('div', { class: 'meter' }, h('strong', {}, 'CPU '), h('span', { id: 'usage-cpu' }, (cpu.cores || 0).toFixed(2)),
          ' of ', cpu.limit_cores ? cpu.limit_cores + ' cores' : 'no limit',
          graph(hist.map(p => p.cpu_cores || 0), cpu.limit_cores, 'cpu')),
        h('div', { class: 'meter' }, h('strong', {}, 'Memory '), h('span', { id: 'usage-memory' }, bytes(mem.used_bytes || 0)),
          ' of ', mem.limit_bytes ? bytes(mem.limit_bytes) : 'no limit', graph(hist.map(p => p.memory_bytes || 0), mem.limit_bytes, 'mem')),
        h('p', { class: 'muted' }, 'Disk ', bytes((s.disk || {}).used_bytes), (s.disk || {}).limit_bytes ? ' of ' + bytes(s.disk.limit_bytes) : '',
          ' · PIDs ', String((s.pids || {}).current ?? '–'), (s.pids || {}).limit ? ' of ' + s.pids.limit : '',
          ' · network ↓', bytes((s.network || {}).rx_bytes), ' ↑', bytes((s.network || {}).tx_bytes)));
      setTimeout(tick, 2000);
    } catch (err) {
      if (err.status === 404) { // a node without the usage API
        replace(el, h('p', { id: 'usage-na', class: 'muted' }, 'usage not available'));
        return;
      }
      if (!stopped) { replace(el, errorBox(err)); setTimeout(tick, 5000); }
    }
  };
  tick();
  return el;
}

async function eventsPart(sb) {
  const l = await get('/v1/events?sandbox=' + enc(sb.id));
  const evs = (l.events || []).slice(-200).reverse();
  return table(['Time', 'Gen', 'Type', 'Cause', 'Data'], evs.map(e => [time(e.time), String(e.generation), e.type, e.cause || '',
    e.data ? JSON.stringify(e.data) : '']), { id: 'events' });
}

async function egressPart(sb) {
  const l = await get('/v1/sandboxes/' + enc(sb.id) + '/egress');
  const recs = (l.records || []).slice(-200).reverse();
  return h('div', {},
    l.dropped ? h('p', { class: 'muted' }, l.dropped + ' records not kept (over the audit rate)') : null,
    recs.length ? table(['Time', 'Decision', 'Method', 'Host', 'Address', 'Rule', 'Reason'], recs.map(r => [time(r.time),
      h('span', { class: 'decision ' + r.decision }, r.decision + (r.repeats ? ' ×' + (r.repeats + 1) : '')), r.method,
      r.host + ':' + r.port, r.addr || '', r.rule || '', r.reason || r.summary || '']), { id: 'egress' }) : h('p', { class: 'muted' }, 'No egress yet.'));
}

async function portsPart(sb) {
  const l = await get('/v1/sandboxes/' + enc(sb.id) + '/ports');
  const ports = l.ports || [];
  return ports.length ? table(['Port', 'Access', 'URL'], ports.map(p => [String(p.port), p.public ? 'public' : 'token', h('code', {}, p.url)]), { id: 'ports' })
    : h('p', { class: 'muted' }, 'No exposed port.');
}

async function snapshotsPart(sb) {
  const l = await get('/v1/snapshots?sandbox=' + enc(sb.id));
  const snaps = l.snapshots || [];
  return snaps.length ? table(['Id', 'State', 'Consistency', 'Size', 'Files', 'Created'], snaps.map(s => [h('code', {}, s.id), s.state, s.consistency,
    bytes(s.logical_size), String(s.files), time(s.created)]), { id: 'snapshots' }) : h('p', { class: 'muted' }, 'No snapshot.');
}

async function logsPart(sb, signal) {
  const l = await get('/v1/sandboxes/' + enc(sb.id) + '/sessions');
  const bg = (l.sessions || []).filter(s => s.background);
  if (!bg.length) return h('p', { class: 'muted' }, 'No detached process.');
  const out = h('pre', { id: 'logs', class: 'log' });
  const pick = h('select', { id: 'log-session' }, bg.map(s => h('option', { value: s.id }, s.id + (s.exited ? ' (exited ' + s.exit_code + ')' : ' (running)'))));
  const show = async () => {
    out.textContent = '';
    const text = [];
    try {
      await lines('/v1/sandboxes/' + enc(sb.id) + '/sessions/' + enc(pick.value) + '/logs?tail=500', ev => {
        if (ev.type === 'stdout' || ev.type === 'stderr') text.push(ev.data ?? (ev.bytes ? atob(ev.bytes) : ''));
      }, signal);
      out.textContent = text.join('');
    } catch (err) { replace(out, errorBox(err)); }
  };
  pick.addEventListener('change', show);
  show();
  return h('div', {}, pick, out);
}

function filesPart(sb) {
  const el = h('div', { id: 'files' });
  const base = '/v1/sandboxes/' + enc(sb.id) + '/files';
  const show = async dir => {
    try {
      const l = await get(base + '/list?path=' + enc(dir));
      const up = dir === '/' ? null : dir.replace(/\/[^/]*\/?$/, '') || '/';
      const file = h('input', { type: 'file', id: 'upload-file' });
      const upBtn = h('button', { id: 'upload' }, 'Upload here');
      const msg = h('span', {});
      upBtn.addEventListener('click', async () => {
        const f = file.files[0];
        if (!f) return;
        try {
          await call('PUT', base + '?path=' + enc(join(dir, f.name)), f, { headers: { 'Content-Type': 'application/octet-stream' } });
          show(dir);
        } catch (err) { replace(msg, errorBox(err)); }
      });
      const rows = (l.files || []).map(f => {
        const p = join(dir, f.name);
        const name = f.is_dir ? h('a', { href: '#', class: 'dir' }, f.name + '/') : h('span', { class: 'file-name' }, f.name);
        if (f.is_dir) name.addEventListener('click', ev => { ev.preventDefault(); show(p); });
        const dl = f.is_dir ? '' : h('a', { href: '/console' + base + '?path=' + enc(p), download: f.name, class: 'download' }, 'download');
        return [name, f.is_dir ? '' : bytes(f.size), time(f.mtime), dl];
      });
      replace(el, h('div', { class: 'toolbar' }, h('code', { id: 'files-path' }, dir),
        up ? h('a', { href: '#', id: 'files-up' }, '↑ up') : null, file, upBtn, msg),
      table(['Name', 'Size', 'Modified', ''], rows, { id: 'file-list' }));
      const upLink = el.querySelector('#files-up');
      if (upLink) upLink.addEventListener('click', ev => { ev.preventDefault(); show(up); });
    } catch (err) { replace(el, errorBox(err)); }
  };
  show('/');
  return el;
}

const join = (dir, name) => (dir.endsWith('/') ? dir : dir + '/') + name;

function actions(sb, rerender) {
  const msg = h('div', { id: 'action-result' });
  const act = (label, id, question, fn, askName) => {
    const b = h('button', { id: 'action-' + id, class: id === 'terminate' ? 'danger' : '' }, label);
    b.addEventListener('click', async () => {
      const answer = await confirm(question, askName);
      if (!answer) return;
      b.disabled = true;
      replace(msg, label + '…');
      try { const r = await fn(answer); replace(msg, label + ': done' + (r && r.sandbox ? ' (' + r.sandbox.name + ', ' + r.sandbox.state + ')' : '')); rerender(); }
      catch (err) { replace(msg, errorBox(err)); }
      b.disabled = false;
    });
    return b;
  };
  const p = '/v1/sandboxes/' + enc(sb.id);
  if (!can('sandbox.create')) return null;
  return h('div', { class: 'toolbar', id: 'actions' },
    act('Suspend', 'suspend', `Suspend ${sb.name}? Its processes stop; its files are kept.`, () => call('POST', p + '/suspend')),
    act('Resume', 'resume', `Resume ${sb.name}? A new container starts from its kept files.`, () => call('POST', p + '/resume')),
    can('snapshot.create') ? act('Snapshot', 'snapshot', `Take a snapshot of ${sb.name}?`, () => call('POST', p + '/snapshots', {})) : null,
    act('Fork', 'fork', `Fork ${sb.name} into a new sandbox named:`, name => call('POST', p + '/fork', { name }), sb.name + '-fork'),
    act('Terminate', 'terminate', `Terminate ${sb.name}? Its container and files are deleted; this cannot be undone.`, () => call('DELETE', p)),
    msg);
}

export async function sandboxPage(ref, signal) {
  const sb = await get('/v1/sandboxes/' + enc(ref), { signal });
  const rerender = () => window.dispatchEvent(new HashChangeEvent('hashchange'));
  const live = sb.state === 'running';
  const termBox = h('div', { id: 'terminal' });
  const termBtn = h('button', { id: 'open-terminal', disabled: !live || !can('sandbox.exec') }, 'Open a terminal');
  termBtn.addEventListener('click', () => { termBtn.hidden = true; replace(termBox, openTerminal(sb.id, signal)); });
  const sections = [['Events', eventsPart], ['Egress', egressPart], ['Exposed ports', portsPart], ['Snapshots', snapshotsPart]].map(([t, f]) => {
    const el = h('div', {}, 'loading…');
    part(el, () => f(sb));
    return section(t, el);
  });
  const logs = h('div', {}, 'loading…');
  if (live) part(logs, () => logsPart(sb, signal)); else replace(logs, h('p', { class: 'muted' }, 'The sandbox is ' + sb.state + '.'));
  return h('div', { id: 'sandbox-page' },
    h('div', { class: 'toolbar' }, h('a', { href: '#/sandboxes' }, '← Sandboxes'), h('h1', { id: 'sandbox-name' }, sb.name),
      h('span', { class: 'state ' + sb.state, id: 'sandbox-state' }, sb.state)),
    actions(sb, rerender),
    h('div', { class: 'grid' },
      section('Sandbox', h('dl', {},
        h('dt', {}, 'Id'), h('dd', {}, h('code', {}, sb.id)),
        h('dt', {}, 'Owner'), h('dd', {}, sb.owner),
        h('dt', {}, 'Image'), h('dd', {}, sb.image),
        h('dt', {}, 'Runtime'), h('dd', {}, sb.runtime || 'runc'),
        h('dt', {}, 'Generation'), h('dd', { id: 'generation' }, String(sb.generation)),
        h('dt', {}, 'Age'), h('dd', {}, age(sb.created_at)),
        h('dt', {}, 'Network'), h('dd', {}, (sb.network && sb.network.mode) || '–'),
        h('dt', {}, 'Labels'), h('dd', {}, Object.entries(sb.labels || {}).map(([k, v]) => k + '=' + v).join(', ') || '–'),
        sb.failure ? [h('dt', {}, 'Failure'), h('dd', {}, sb.failure)] : null)),
      section('Limits', limitsList(sb)),
      section('Usage', live ? usagePart(sb.id, signal) : h('p', { class: 'muted' }, 'No usage while ' + sb.state + '.'))),
    section('Terminal', termBtn, termBox),
    section('Files', live && can('sandbox.files') ? filesPart(sb) : h('p', { class: 'muted' }, live ? 'Needs the sandbox.files permission.' : 'The sandbox is ' + sb.state + '.')),
    section('Logs of detached processes', logs),
    sections);
}
