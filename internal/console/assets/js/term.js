// A small terminal: enough of a VT100 for a shell (text, CR/LF, backspace, tabs, cursor
// moves, erase in line and display; colours and other sequences are dropped). Output is
// drawn as text into a <pre>; keystrokes go to the sandbox over the console's WebSocket.
import { h } from './dom.js';

const ROWS = 24, COLS = 100, KEEP = 1000;

class Screen {
  constructor() { this.lines = ['']; this.row = 0; this.col = 0; this.state = 0; this.seq = ''; }
  line() { while (this.lines.length <= this.row) this.lines.push(''); return this.lines[this.row]; }
  put(ch) {
    let l = this.line();
    if (l.length < this.col) l += ' '.repeat(this.col - l.length);
    this.lines[this.row] = l.slice(0, this.col) + ch + l.slice(this.col + 1);
    this.col++;
  }
  csi(params, final) {
    const n = parseInt(params, 10) || 1;
    const base = Math.max(0, this.lines.length - ROWS);
    switch (final) {
      case 'A': this.row = Math.max(base, this.row - n); break;
      case 'B': this.row += n; break;
      case 'C': this.col += n; break;
      case 'D': this.col = Math.max(0, this.col - n); break;
      case 'G': this.col = n - 1; break;
      case 'H': case 'f': {
        const [r, c] = params.split(';').map(x => parseInt(x, 10) || 1);
        this.row = base + (r || 1) - 1; this.col = (c || 1) - 1; break;
      }
      case 'K': { const l = this.line(); this.lines[this.row] = params === '2' ? '' : params === '1' ? ' '.repeat(this.col) + l.slice(this.col) : l.slice(0, this.col); break; }
      case 'J': if (params === '2' || params === '3') { this.lines = ['']; this.row = 0; this.col = 0; } else { this.lines.length = this.row + 1; this.lines[this.row] = this.line().slice(0, this.col); } break;
      default: break; // colours, modes: dropped
    }
  }
  write(text) {
    for (const ch of text) {
      if (this.state === 1) { // after ESC
        if (ch === '[') { this.state = 2; this.seq = ''; } else if (ch === ']') { this.state = 3; } else this.state = 0;
        continue;
      }
      if (this.state === 2) { // CSI
        if (ch >= '@' && ch <= '~') { this.csi(this.seq.replace(/^[?>=]/, ''), ch); this.state = 0; } else if (this.seq.length < 32) this.seq += ch; else this.state = 0;
        continue;
      }
      if (this.state === 3) { // OSC, to BEL or ESC
        if (ch === '\x07') this.state = 0; else if (ch === '\x1b') this.state = 1;
        continue;
      }
      switch (ch) {
        case '\x1b': this.state = 1; break;
        case '\r': this.col = 0; break;
        case '\n': this.row++; this.line(); break;
        case '\b': this.col = Math.max(0, this.col - 1); break;
        case '\t': this.col = (Math.floor(this.col / 8) + 1) * 8; break;
        case '\x07': break;
        default: if (ch >= ' ') { if (this.col >= COLS) { this.col = 0; this.row++; } this.put(ch); }
      }
    }
    if (this.lines.length > KEEP) { const cut = this.lines.length - KEEP; this.lines.splice(0, cut); this.row -= cut; }
  }
  text() { return this.lines.join('\n'); }
}

const keys = { Enter: '\r', Backspace: '\x7f', Tab: '\t', Escape: '\x1b', ArrowUp: '\x1b[A', ArrowDown: '\x1b[B',
  ArrowRight: '\x1b[C', ArrowLeft: '\x1b[D', Home: '\x1b[H', End: '\x1b[F', Delete: '\x1b[3~' };

// openTerminal starts a shell in the sandbox ref and returns its element; closing
// signal closes it.
export function openTerminal(ref, signal) {
  const screen = new Screen();
  const pre = h('pre', { id: 'term-screen', class: 'term', tabindex: '0' });
  const status = h('span', { id: 'term-status', class: 'muted' }, 'connecting…');
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const ws = new WebSocket(`${proto}//${location.host}/console/pty/${encodeURIComponent(ref)}?rows=${ROWS}&cols=${COLS}`);
  ws.binaryType = 'arraybuffer';
  const dec = new TextDecoder();
  let pending = false;
  const draw = () => { pending = false; pre.textContent = screen.text(); pre.scrollTop = pre.scrollHeight; };
  const send = data => { if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'stdin', data })); };
  ws.addEventListener('open', () => { status.textContent = 'connected'; pre.focus(); });
  ws.addEventListener('message', ev => {
    if (typeof ev.data === 'string') {
      const m = JSON.parse(ev.data);
      status.textContent = m.type === 'exit' ? 'ended (exit ' + ((m.result && m.result.exit_code) ?? '?') + ')' : 'error: ' + (m.error && m.error.message);
      return;
    }
    screen.write(dec.decode(ev.data, { stream: true }));
    if (!pending) { pending = true; requestAnimationFrame(draw); }
  });
  ws.addEventListener('close', () => { if (status.textContent === 'connected') status.textContent = 'closed'; });
  pre.addEventListener('keydown', ev => {
    let s = keys[ev.key];
    if (!s && ev.ctrlKey && ev.key.length === 1) {
      const c = ev.key.toUpperCase().charCodeAt(0);
      if (c >= 64 && c <= 95) s = String.fromCharCode(c - 64);
    }
    if (!s && !ev.ctrlKey && !ev.metaKey && ev.key.length === 1) s = ev.key;
    if (s) { ev.preventDefault(); send(s); }
  });
  pre.addEventListener('paste', ev => { ev.preventDefault(); send(ev.clipboardData.getData('text')); });
  signal.addEventListener('abort', () => ws.close());
  return h('div', { class: 'terminal' }, h('div', { class: 'toolbar' }, 'Terminal ', status), pre);
}
