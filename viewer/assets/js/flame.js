// flame.js — draws a tree as a flame graph (root at the bottom) or an icicle
// (root at the top) on a canvas. Text goes through fillText only.

const ROW = 18;
const FONT = '12px ui-monospace, "DejaVu Sans Mono", monospace';
// Canvas heights past ~32k pixels fail; deeper rows are not drawn.
const MAX_ROWS = 1700;

/** FNV-1a over a string's UTF-16 units. */
function hashString(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

class FlameChart {
  /**
   * `inverted`: root at the top (icicle). `onClick(node, event)` and
   * `onHover(node)` get node indices of the current tree (-1 for none).
   */
  constructor(canvas, opts) {
    this.canvas = canvas;
    this.inverted = !!opts.inverted;
    this.onClick = opts.onClick || (() => {});
    this.onHover = opts.onHover || (() => {});
    this.P = null;
    this.T = null;
    this.zoom = 0;
    this.matches = null;
    this.colors = [];
    this.diffMax = 0;
    this.rx = new Float64Array(1024);
    this.rw = new Float64Array(1024);
    this.rd = new Int32Array(1024);
    this.rn = new Int32Array(1024);
    this.count = 0;
    this.rows = 1;
    this.hover = -1;
    canvas.addEventListener('mousemove', (e) => {
      const n = this.hit(e);
      if (n !== this.hover) {
        this.hover = n;
        this.onHover(n);
      }
    });
    canvas.addEventListener('mouseleave', () => {
      this.hover = -1;
      this.onHover(-1);
    });
    canvas.addEventListener('click', (e) => {
      const n = this.hit(e);
      if (n >= 0) this.onClick(n, e);
    });
  }

  setTree(P, T) {
    this.P = P;
    this.T = T;
    this.zoom = 0;
    // As `flamerec diff --svg`: saturation relative to the largest change
    // of a frame's total share, but at least one point, so noise stays pale.
    this.diffMax = 0.01;
    if (T.selfB) {
      for (let i = 1; i < T.n; i++) {
        const d = Math.abs(this.diffShare(i));
        if (d > this.diffMax) this.diffMax = d;
      }
    }
  }

  /** Change of node i's total share (its stack path), NEW minus BASE. */
  diffShare(i) {
    const T = this.T;
    const nt = T.total[0];
    const bt = T.totalB[0];
    return (nt > 0 ? T.total[i] / nt : 0) - (bt > 0 ? T.totalB[i] / bt : 0);
  }

  /** diffShare scaled to [-1, 1]: red above 0, blue below. */
  diffRatio(i) {
    return this.T.selfB ? Math.max(-1, Math.min(1, this.diffShare(i) / this.diffMax)) : 0;
  }

  color(i) {
    const T = this.T;
    const nm = T.name[i];
    if (this.matches && this.matches[nm] && T.depth[i] >= T.frameDepth) return 'rgb(230,0,230)';
    if (T.selfB) {
      const t = this.diffRatio(i);
      const x = Math.round(225 * (1 - Math.min(1, Math.abs(t))));
      if (t > 0) return 'rgb(255,' + x + ',' + x + ')';
      if (t < 0) return 'rgb(' + x + ',' + x + ',255)';
      return 'rgb(225,225,225)';
    }
    if (T.depth[i] < T.frameDepth) return 'rgb(200,205,215)';
    let c = this.colors[nm];
    if (c === undefined) {
      const h = hashString(this.P.strings[nm]);
      const r = 205 + (h & 0x3f) % 50;
      const g = ((h >>> 8) & 0xff) % 230;
      const b = ((h >>> 16) & 0xff) % 55;
      c = 'rgb(' + r + ',' + g + ',' + b + ')';
      this.colors[nm] = c;
    }
    return c;
  }

  pushRect(x, w, d, n) {
    if (this.count === this.rx.length) {
      const g = (a, T) => {
        const b = new T(a.length * 2);
        b.set(a);
        return b;
      };
      this.rx = g(this.rx, Float64Array);
      this.rw = g(this.rw, Float64Array);
      this.rd = g(this.rd, Int32Array);
      this.rn = g(this.rn, Int32Array);
    }
    const k = this.count++;
    this.rx[k] = x;
    this.rw[k] = w;
    this.rd[k] = d;
    this.rn[k] = n;
  }

  /** Places the zoomed node's ancestors (full width) and its subtree; frames under a pixel are pruned. */
  layout(width) {
    const T = this.T;
    this.count = 0;
    if (!T || T.n === 0) return 0;
    const z = this.zoom;
    let maxD = 0;
    for (let a = T.parent[z]; a >= 0; a = T.parent[a]) this.pushRect(0, width, T.depth[a], a);
    const scale = T.total[z] > 0 ? width / T.total[z] : 0;
    const stackN = [z];
    const stackX = [0];
    while (stackN.length) {
      const i = stackN.pop();
      const x = stackX.pop();
      const w = T.total[i] * scale;
      if (w < 1 || T.depth[i] >= MAX_ROWS) continue;
      this.pushRect(x, w, T.depth[i], i);
      if (T.depth[i] > maxD) maxD = T.depth[i];
      let cx = x;
      for (let c = i + 1; c < T.end[i]; c = T.end[c]) {
        const cw = T.total[c] * scale;
        if (cw >= 1) {
          stackN.push(c);
          stackX.push(cx);
        }
        cx += cw;
      }
    }
    return maxD;
  }

  /** Lays out and draws; returns the number of frames drawn. */
  draw() {
    const canvas = this.canvas;
    const width = Math.max(200, canvas.parentElement ? canvas.parentElement.clientWidth : 800);
    const maxD = this.layout(width);
    this.rows = Math.min(MAX_ROWS, maxD + 1);
    const height = this.rows * ROW;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.width = width + 'px';
    canvas.style.height = height + 'px';
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = FONT;
    ctx.textBaseline = 'middle';
    const charW = ctx.measureText('M').width || 7;
    const T = this.T;
    const P = this.P;
    for (let k = 0; k < this.count; k++) {
      const i = this.rn[k];
      const x = this.rx[k];
      const w = this.rw[k];
      const y = this.rowY(this.rd[k]);
      const faded = T.depth[i] < T.depth[this.zoom];
      ctx.globalAlpha = faded ? 0.55 : 1;
      ctx.fillStyle = this.color(i);
      ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), ROW - 1);
      if (w > charW * 2 + 6) {
        const text = P.strings[T.name[i]];
        const fit = Math.floor((w - 6) / charW);
        ctx.fillStyle = '#000';
        ctx.fillText(text.length > fit ? text.slice(0, Math.max(fit - 1, 1)) + '…' : text, x + 3, y + ROW / 2);
      }
    }
    ctx.globalAlpha = 1;
    return this.count;
  }

  rowY(depth) {
    return this.inverted ? depth * ROW : (this.rows - 1 - depth) * ROW;
  }

  /** The node under a mouse event, or -1. */
  hit(e) {
    const r = this.canvas.getBoundingClientRect();
    return this.nodeAt(e.clientX - r.left, e.clientY - r.top);
  }

  nodeAt(x, y) {
    const row = Math.floor(y / ROW);
    const depth = this.inverted ? row : this.rows - 1 - row;
    for (let k = 0; k < this.count; k++) {
      if (this.rd[k] === depth && x >= this.rx[k] && x < this.rx[k] + this.rw[k]) return this.rn[k];
    }
    return -1;
  }

  /** Where node i was drawn (CSS pixels, canvas-relative), or null. */
  rectOf(i) {
    for (let k = 0; k < this.count; k++) {
      if (this.rn[k] === i) return { x: this.rx[k], y: this.rowY(this.rd[k]), w: this.rw[k], h: ROW };
    }
    return null;
  }
}
