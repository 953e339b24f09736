// The node's runtime status: the banner on every page (live, degraded or off, and
// why) and the node page with its checks and the "where commands run" matrix.
import { h, replace, table, section } from './dom.js';
import { get } from './api.js';

export async function loadStatus() {
  const banner = document.getElementById('banner');
  try {
    const st = await get('/v1/status');
    const r = st.router || { state: 'live', reason: '' };
    const failing = (st.checks || []).filter(c => !c.ok && !c.optional);
    const state = failing.length && r.state === 'live' ? 'degraded' : r.state;
    banner.className = 'banner ' + state;
    replace(banner, h('strong', { id: 'runtime-state' }, 'Router: ' + state), ' (profile ' + (r.profile || 'off') + '):',
      ' ', h('span', { id: 'runtime-reason' }, r.reason || (failing.length ? failing.map(c => c.name + ': ' + (c.degrades || c.detail)).join('; ') : 'sandboxes run')),
      (st.runtimes || []).length ? h('span', { class: 'muted' }, ' · runtimes: ' + st.runtimes.join(', ')) : null);
    banner.hidden = false;
    return st;
  } catch (err) {
    banner.className = 'banner off';
    replace(banner, h('strong', {}, 'Runtime status unavailable: '), err.message);
    banner.hidden = false;
    return null;
  }
}

export async function statusPage() {
  const st = await loadStatus();
  if (!st) return h('p', {}, 'The node status could not be read.');
  const r = st.router;
  return h('div', {},
    section('Node',
      h('dl', {},
        h('dt', {}, 'Version'), h('dd', {}, st.version),
        h('dt', {}, 'Sandboxes'), h('dd', {}, String(st.sandboxes)),
        h('dt', {}, 'Runtimes'), h('dd', {}, (st.runtimes || []).join(', ') || 'none'),
        st.state_dir ? [h('dt', {}, 'State directory'), h('dd', {}, st.state_dir)] : null)),
    r ? section('Where commands run',
      h('p', {}, 'Profile ', h('strong', {}, r.profile || 'off'), ', router ', h('strong', { id: 'router-state' }, r.state),
        r.fail_closed ? ' (fail closed)' : '', r.reason ? ': ' + r.reason : ''),
      table(['Caller', 'Mechanism', 'Behaviour'], (r.matrix || []).map(m => [m.caller, m.mechanism, m.behaviour]), { id: 'matrix' })) : null,
    section('Checks', table(['Check', 'OK', 'Detail', 'Means'],
      (st.checks || []).map(c => [c.name + (c.optional ? ' (optional)' : ''), c.ok ? 'yes' : 'no', c.detail || '', c.degrades || '']))));
}
