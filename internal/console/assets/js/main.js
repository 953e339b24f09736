// The console's page: sign-in, navigation (the URL's #fragment), the node's runtime
// banner, and the pages.
import { h, replace, errorBox } from './dom.js';
import { session, signIn, signOut, resumeSession, isAdmin, can } from './api.js';
import { loadStatus } from './status.js';
import { listPage, resetFilters } from './list.js';
import { sandboxPage } from './sandbox.js';
import { imagesPage } from './images.js';
import { identitiesPage, auditPage } from './admin.js';
import { statusPage } from './status.js';

const main = document.getElementById('main');
let leave = null; // stops the current page's timers and streams

function signInPage() {
  const input = h('input', { type: 'password', id: 'token', autocomplete: 'off', placeholder: 'al_…', required: true });
  const msg = h('div', {});
  const form = h('form', { id: 'signin', class: 'card narrow' },
    h('h2', {}, 'Sign in'),
    h('p', { class: 'muted' }, 'Paste an API token (airlock token create). It stays on the daemon: this browser keeps only a session cookie.'),
    h('label', {}, 'Token ', input), h('button', { type: 'submit', id: 'signin-submit' }, 'Sign in'), msg);
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    try {
      await signIn(input.value);
      input.value = '';
      location.hash = '#/sandboxes';
      start();
    } catch (err) { replace(msg, errorBox(err)); }
  });
  replace(document.getElementById('nav'));
  replace(document.getElementById('viewer'));
  document.getElementById('banner').hidden = true;
  return form;
}

function nav() {
  const links = [['#/sandboxes', 'Sandboxes'], ['#/images', 'Images'], ['#/status', 'Node']];
  if (isAdmin()) links.push(['#/identities', 'Identities & tokens']);
  if (can('audit.read')) links.push(['#/audit', 'Audit']);
  replace(document.getElementById('nav'), links.map(([href, text]) => h('a', { href }, text)));
  const out = h('button', { id: 'signout', class: 'link' }, 'Sign out');
  out.addEventListener('click', async () => { await signOut(); resetFilters(); location.hash = '#/signin'; route(); });
  replace(document.getElementById('viewer'), h('span', { id: 'whoami' }, session.whoami.user), ' ', out);
}

async function route() {
  if (leave) { leave(); leave = null; }
  const hash = location.hash || '#/sandboxes';
  if (hash === '#/signin' || !session.whoami) { replace(main, signInPage()); return; }
  const parts = hash.slice(2).split('/').map(decodeURIComponent);
  const ctl = new AbortController();
  leave = () => ctl.abort();
  try {
    let page;
    switch (parts[0]) {
      case 'sandbox': page = await sandboxPage(parts[1], ctl.signal); break;
      case 'images': page = await imagesPage(); break;
      case 'status': page = await statusPage(); break;
      case 'identities': page = await identitiesPage(); break;
      case 'audit': page = await auditPage(); break;
      default: page = await listPage(ctl.signal);
    }
    if (!ctl.signal.aborted) replace(main, page);
  } catch (err) {
    if (!ctl.signal.aborted) replace(main, errorBox(err));
  }
}

async function start() {
  if (!session.whoami && !(await resumeSession())) { replace(main, signInPage()); return; }
  nav();
  loadStatus();
  if (location.hash === '#/signin') location.hash = '#/sandboxes';
  route();
}

window.addEventListener('hashchange', () => { if (session.whoami) route(); });
start();
