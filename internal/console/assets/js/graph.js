// A small line graph in SVG: values over a limit.
import { svg } from './dom.js';

export function graph(values, limit, cls) {
  const W = 300, H = 60;
  const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'graph ' + (cls || ''), role: 'img' });
  const top = Math.max(limit || 0, ...values, 1e-9);
  g.appendChild(svg('rect', { x: 0, y: 0, width: W, height: H, class: 'graph-bg' }));
  if (values.length > 1) {
    const pts = values.map((v, i) => `${(i / (values.length - 1) * W).toFixed(1)},${(H - v / top * (H - 2) - 1).toFixed(1)}`);
    g.appendChild(svg('polyline', { points: pts.join(' '), class: 'graph-line' }));
  }
  return g;
}
