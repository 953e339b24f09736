// The sandbox list: state, image, runtime, owner (for administrators), age and usage,
// with filters by state and label and a search.
import { h, replace, age, bytes, errorBox } from './dom.js';
import { get, isAdmin, enc } from './api.js';

const states = ['', 'creating', 'running', 'suspending', 'suspended', 'resuming', 'terminating', 'terminated', 'failed', 'lost'];
const filter = { state: '', label: '', search: '' };

// resetFilters forgets the list's filters (a new viewer starts with none).
export function resetFilters() { Object.assign(filter, { state: '', label: '', search: '' }); }

// usageText is a sandbox's usage in one cell, or why there is none.
export function usageText(u) {
  if (!u) return '–';
  return (u.cpu ? u.cpu.cores.toFixed(2) + ' cpu' : '') + (u.memory ? ' · ' + bytes(u.memory.used_bytes) : '');
}

// usageAll is every visible sandbox's usage by id, or null when the node has no usage API.
export async function usageAll(signal) {
  try {
    const st = await get('/v1/stats', { signal, noSignIn: true });
    const m = new Map();
    for (const s of st.sandboxes || []) m.set(s.id, s);
    return m;
  } catch (err) {
    if (err.status === 404) return null;
    throw err;
  }
}

export function rows(list, usage, admin) {
  const q = filter.search.toLowerCase();
  const frag = document.createDocumentFragment();
  let n = 0;
  for (const sb of list) {
    if (q && ![sb.name, sb.id, sb.image, sb.owner].some(v => (v || '').toLowerCase().includes(q))) continue;
    n++;
    const tr = document.createElement('tr');
    const link = h('a', { href: '#/sandbox/' + enc(sb.id), class: 'sb-name' }, sb.name);
    const cells = [link, h('span', { class: 'state ' + sb.state }, sb.state), sb.image, sb.runtime || 'runc'];
    if (admin) cells.push(sb.owner);
    cells.push(age(sb.created_at), usage ? usageText(usage.get(sb.id)) : 'usage not available');
    for (const c of cells) {
      const td = document.createElement('td');
      if (c instanceof Node) td.appendChild(c); else td.textContent = c;
      tr.appendChild(td);
    }
    frag.appendChild(tr);
  }
  return [frag, n];
}

export async function listPage(signal) {
  const admin = isAdmin();
  const tbody = h('tbody', { id: 'sandbox-rows' });
  const count = h('span', { id: 'sandbox-count', class: 'muted' });
  const msg = h('div', {});
  let list = [], usage = null;
  const draw = () => { const [frag, n] = rows(list, usage, admin); tbody.replaceChildren(frag); count.textContent = n + ' of ' + list.length + ' sandboxes'; };
  const load = async () => {
    const q = new URLSearchParams();
    if (filter.state) q.set('state', filter.state);
    if (filter.label) q.set('label', filter.label);
    if (admin) q.set('all_owners', 'true');
    try {
      const [l, u] = await Promise.all([get('/v1/sandboxes?' + q, { signal }), usageAll(signal)]);
      list = l.sandboxes || []; usage = u;
      replace(msg);
      draw();
    } catch (err) { if (!signal.aborted) replace(msg, errorBox(err)); }
  };
  const stateSel = h('select', { id: 'filter-state' }, states.map(s => h('option', { value: s }, s || 'any state')));
  stateSel.value = filter.state;
  stateSel.addEventListener('change', () => { filter.state = stateSel.value; load(); });
  const label = h('input', { id: 'filter-label', placeholder: 'label key=value', value: filter.label });
  label.addEventListener('change', () => { filter.label = label.value.trim(); load(); });
  const search = h('input', { id: 'search', type: 'search', placeholder: 'search name, id, image, owner', value: filter.search });
  search.addEventListener('input', () => { filter.search = search.value; draw(); });
  const head = ['Name', 'State', 'Image', 'Runtime'];
  if (admin) head.push('Owner');
  head.push('Age', 'Usage');
  await load();
  const timer = setInterval(load, 5000);
  signal.addEventListener('abort', () => clearInterval(timer));
  return h('div', {},
    h('div', { class: 'toolbar' }, h('h1', {}, 'Sandboxes'), stateSel, label, search, count),
    msg,
    h('table', { id: 'sandboxes' }, h('thead', {}, h('tr', {}, head.map(c => h('th', {}, c)))), tbody));
}
