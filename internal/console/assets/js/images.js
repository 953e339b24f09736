import { h, table, bytes, time, section } from './dom.js';
import { get } from './api.js';

export async function imagesPage() {
  const l = await get('/v1/images');
  return section('Images', table(['Name', 'Digest', 'Layers', 'Size', 'Created', 'Owner'],
    (l.images || []).map(i => [i.name || '(by digest)', h('code', {}, (i.digest || '').slice(0, 19)), String(i.layers), bytes(i.size),
      i.builtin ? 'built in' : time(i.created), i.owner || '']), { id: 'images' }));
}
