// Administration: identities and their tokens (never a token's secret), the audit log
// and its verification.
import { h, table, time, replace, section, errorBox } from './dom.js';
import { get, call } from './api.js';

export async function identitiesPage() {
  const [users, tokens] = await Promise.all([get('/v1/users'), get('/v1/tokens')]);
  return h('div', {},
    section('Identities', table(['Name', 'Kind', 'Roles', 'Local uids', 'Created'],
      (users.users || []).map(u => [u.name, u.kind, (u.roles || []).join(', '), (u.uids || []).join(', '), time(u.created_at)]), { id: 'users' })),
    section('Tokens', table(['Id', 'Identity', 'Name', 'Prefix', 'Created', 'Expires', 'Revoked'],
      (tokens.tokens || []).map(t => [t.id, t.user, t.name || '', t.prefix, time(t.created_at),
        t.expires_at ? time(t.expires_at) : 'never', t.revoked_at ? time(t.revoked_at) : '']), { id: 'tokens' })));
}

export async function auditPage() {
  const list = await get('/v1/audit');
  const result = h('div', { id: 'verify-result' });
  const verify = h('button', { id: 'verify' }, 'Verify the chain');
  verify.addEventListener('click', async () => {
    try {
      const v = await call('POST', '/v1/audit/verify');
      replace(result, h('p', { class: v.ok ? 'ok' : 'error' }, v.ok ? 'Intact: ' + v.records + ' records verified.'
        : 'Broken at record ' + v.seq + ': ' + v.problem));
    } catch (err) { replace(result, errorBox(err)); }
  });
  const recs = (list.records || []).slice(-500).reverse();
  return section('Audit log', h('div', { class: 'toolbar' }, verify, result),
    table(['Seq', 'Time', 'Identity', 'Action', 'Resource', 'Result', 'Hash'], recs.map(r => {
      const b = r.record || {};
      return [String(r.seq), time(b.time), b.identity || '', b.action || '', b.resource || b.sandbox || '', String(b.result ?? ''),
        h('code', {}, (r.hash || '').slice(0, 12))];
    }), { id: 'audit' }));
}
