'use strict';
// model.js — the profile and the trees the views draw. No DOM here.
//
// A tree is a set of typed arrays in preorder: node i's subtree is the
// index range [i, end[i]), its children are i+1, end[i+1], ... up to end[i].
// Node 0 of every tree built here is a synthetic root. Names are ids into
// the profile's string table; `self`/`total` are the NEW side of a diff and
// `selfB`/`totalB` its BASE side (null when there is no diff).

/** Decodes the server's JSON (schema flamerec-view/1) into typed arrays. */
function decodeProfile(d) {
  if (!d || d.schema !== 'flamerec-view/1') {
    throw new Error('unexpected data (schema ' + String(d && d.schema) + ')');
  }
  const diff = !!d.diff;
  const stride = diff ? 4 : 3;
  const raw = Array.isArray(d.nodes) ? d.nodes : [];
  const strings = Array.isArray(d.strings) ? d.strings.map(String) : [];
  const n = Math.floor(raw.length / stride);
  const allId = strings.push('all') - 1;
  const unknownId = strings.push('[?]') - 1;
  const S = strings.length;
  const name = new Int32Array(n);
  const parent = new Int32Array(n);
  const end = new Int32Array(n);
  const self = new Float64Array(n);
  const selfB = diff ? new Float64Array(n) : null;
  const stackNode = new Int32Array(n + 1);
  const stackLeft = new Float64Array(n + 1);
  let sp = 0;
  for (let i = 0; i < n; i++) {
    const o = i * stride;
    const id = raw[o];
    name[i] = Number.isInteger(id) && id >= 0 && id < S ? id : unknownId;
    if (diff) {
      selfB[i] = +raw[o + 2] || 0;
      self[i] = +raw[o + 3] || 0;
    } else {
      self[i] = +raw[o + 2] || 0;
    }
    while (sp > 0 && stackLeft[sp - 1] <= 0) end[stackNode[--sp]] = i;
    parent[i] = sp > 0 ? stackNode[sp - 1] : -1;
    if (sp > 0) stackLeft[sp - 1]--;
    stackNode[sp] = i;
    stackLeft[sp] = +raw[o + 1] || 0;
    sp++;
  }
  while (sp > 0) end[stackNode[--sp]] = n;

  const str = (i) => (Number.isInteger(i) && i >= 0 && i < S ? i : unknownId);
  const threads = (Array.isArray(d.threads) ? d.threads : []).map((t, index) => ({
    index,
    label: str(t[0]),
    name: str(t[1]),
    process: str(t[2]),
    pid: Number.isInteger(t[3]) ? t[3] : null,
    tid: Number.isInteger(t[4]) ? t[4] : null,
  }));
  const threadOfLabel = new Map();
  for (const t of threads) threadOfLabel.set(t.label, t.index);
  const rootThread = new Int32Array(n).fill(-1);
  const threadTotal = new Float64Array(threads.length);
  for (let i = 0; i < n; i = end[i]) {
    const t = threadOfLabel.get(name[i]);
    if (t === undefined) continue;
    rootThread[i] = t;
    let sum = 0;
    for (let j = i; j < end[i]; j++) sum += self[j];
    threadTotal[t] += sum;
  }

  // Alphabetical rank of every string, to order children.
  const order = new Int32Array(S);
  for (let i = 0; i < S; i++) order[i] = i;
  order.sort((a, b) => (strings[a] < strings[b] ? -1 : strings[a] > strings[b] ? 1 : a - b));
  const rank = new Int32Array(S);
  for (let k = 0; k < S; k++) rank[order[k]] = k;

  const totals = (Array.isArray(d.totals) ? d.totals : []).map((x) => +x || 0);
  return {
    title: String(d.title || 'flamerec'),
    unit: String(d.unit || 'samples'),
    diff,
    info: Array.isArray(d.info) ? d.info : [],
    totals,
    strings,
    allId,
    threads,
    threadTotal,
    n,
    name,
    parent,
    end,
    self,
    selfB,
    rootThread,
    rank,
  };
}

/** A power of two at least twice `n`, so probes stay short. */
function tableSize(n) {
  let s = 16;
  while (s < 2 * n) s *= 2;
  return s;
}

/** Collects nodes by (parent, name) and lays them out as a sorted tree. */
class TreeBuilder {
  constructor(P, capacity, rootName, dedupe) {
    this.P = P;
    this.cap = Math.max(16, capacity | 0);
    this.n = 0;
    this.name = new Int32Array(this.cap);
    this.parent = new Int32Array(this.cap);
    this.self = new Float64Array(this.cap);
    this.selfB = P.diff ? new Float64Array(this.cap) : null;
    // Open-addressing table of node index + 1, keyed by (parent, name).
    this.table = dedupe ? new Int32Array(tableSize(this.cap)) : null;
    this.push(-1, rootName);
  }

  push(parent, name) {
    if (this.n === this.cap) this.grow();
    const i = this.n++;
    this.name[i] = name;
    this.parent[i] = parent;
    return i;
  }

  grow() {
    this.cap *= 2;
    const g = (a, T) => {
      const b = new T(this.cap);
      b.set(a);
      return b;
    };
    this.name = g(this.name, Int32Array);
    this.parent = g(this.parent, Int32Array);
    this.self = g(this.self, Float64Array);
    if (this.selfB) this.selfB = g(this.selfB, Float64Array);
    if (this.table) {
      this.table = new Int32Array(tableSize(this.cap));
      for (let i = 1; i < this.n; i++) this.insert(i);
    }
  }

  slot(parent, name) {
    const mask = this.table.length - 1;
    let h = (Math.imul(parent, 0x9e3779b1) ^ Math.imul(name + 1, 0x85ebca77)) >>> 0;
    h = (h ^ (h >>> 15)) & mask;
    for (;;) {
      const v = this.table[h];
      if (v === 0 || (this.parent[v - 1] === parent && this.name[v - 1] === name)) return h;
      h = (h + 1) & mask;
    }
  }

  insert(i) {
    this.table[this.slot(this.parent[i], this.name[i])] = i + 1;
  }

  /** The child of `parent` named `name`, created when missing. */
  child(parent, name) {
    if (!this.table) return this.push(parent, name);
    const h = this.slot(parent, name);
    const v = this.table[h];
    if (v !== 0) return v - 1;
    const c = this.push(parent, name);
    // push() may have grown and rehashed the table: look the slot up again.
    this.table[this.slot(parent, name)] = c + 1;
    return c;
  }

  add(node, self, selfB) {
    this.self[node] += self;
    if (this.selfB) this.selfB[node] += selfB;
  }

  /** The tree in preorder, children alphabetical, totals summed. */
  finish() {
    const n = this.n;
    const rank = this.P.rank;
    const name = this.name;
    const first = new Int32Array(n + 1);
    for (let i = 1; i < n; i++) first[this.parent[i] + 1]++;
    for (let i = 0; i < n; i++) first[i + 1] += first[i];
    const fill = first.slice(0, n);
    const kids = new Int32Array(Math.max(n - 1, 0));
    for (let i = 1; i < n; i++) kids[fill[this.parent[i]]++] = i;
    const byName = (a, b) => rank[name[a]] - rank[name[b]];
    for (let i = 0; i < n; i++) {
      if (first[i + 1] - first[i] > 1) kids.subarray(first[i], first[i + 1]).sort(byName);
    }
    const T = {
      n,
      name: new Int32Array(n),
      parent: new Int32Array(n),
      end: new Int32Array(n),
      depth: new Int32Array(n),
      self: new Float64Array(n),
      total: new Float64Array(n),
      selfB: this.selfB ? new Float64Array(n) : null,
      totalB: this.selfB ? new Float64Array(n) : null,
      maxDepth: 0,
    };
    // Iterative DFS; `stack` holds old ids, `newOf` maps them.
    const newOf = new Int32Array(n);
    const stack = new Int32Array(n);
    let sp = 0;
    let next = 0;
    if (n > 0) stack[sp++] = 0;
    while (sp > 0) {
      const old = stack[--sp];
      const i = next++;
      newOf[old] = i;
      const op = this.parent[old];
      const p = op < 0 ? -1 : newOf[op];
      T.name[i] = name[old];
      T.parent[i] = p;
      T.depth[i] = p < 0 ? 0 : T.depth[p] + 1;
      if (T.depth[i] > T.maxDepth) T.maxDepth = T.depth[i];
      T.self[i] = this.self[old];
      if (T.selfB) T.selfB[i] = this.selfB[old];
      for (let k = first[old + 1] - 1; k >= first[old]; k--) stack[sp++] = kids[k];
    }
    T.total.set(T.self);
    if (T.totalB) T.totalB.set(T.selfB);
    for (let i = n - 1; i > 0; i--) {
      T.total[T.parent[i]] += T.total[i];
      if (T.totalB) T.totalB[T.parent[i]] += T.totalB[i];
    }
    // Subtree ends, from the last node back: end = next sibling's start.
    for (let i = 0; i < n; i++) T.end[i] = n;
    const open = [];
    for (let i = 0; i < n; i++) {
      while (open.length && T.depth[open[open.length - 1]] >= T.depth[i]) T.end[open.pop()] = i;
      open.push(i);
    }
    return T;
  }
}

/**
 * The tree the flame graph shows, from the profile and the view options:
 * `group` ('name' | 'process' | 'thread' | 'all') decides what the root
 * frames are; `hidden` (Set of thread indices) filters; `merged` (Set of
 * name ids) removes functions, giving their time to their callers; `focus`
 * (a name id, or -1) roots the tree at that function, merging every
 * outermost call of it.
 */
function buildView(P, o) {
  const focus = o.focus >= 0 ? o.focus : -1;
  const dedupe = o.merged.size > 0 || focus >= 0 || groupsCollide(P, o);
  const B = new TreeBuilder(P, P.n + 1, focus >= 0 ? focus : P.allId, dedupe);
  const mapped = new Int32Array(P.n);
  let i = 0;
  while (i < P.n) {
    const p = P.parent[i];
    const nm = P.name[i];
    let m;
    if (p < 0) {
      const t = P.rootThread[i];
      if (t >= 0 && o.hidden.has(t)) {
        i = P.end[i];
        continue;
      }
      if (focus >= 0) m = -1;
      else if (o.group === 'all') m = 0;
      else m = B.child(0, groupName(P, t, nm, o.group));
    } else {
      const pm = mapped[p];
      if (pm < 0) m = nm === focus ? 0 : -1;
      else if (o.merged.has(nm)) m = pm;
      else m = B.child(pm, nm);
    }
    mapped[i] = m;
    if (m >= 0) B.add(m, P.self[i], P.selfB ? P.selfB[i] : 0);
    i++;
  }
  const T = B.finish();
  // Depth of the first real function frame: below it are root and groups.
  T.frameDepth = focus >= 0 ? 0 : o.group === 'all' ? 1 : 2;
  return T;
}

/** Whether two shown root frames fall into one group (so their subtrees merge). */
function groupsCollide(P, o) {
  if (o.group === 'all') return true;
  const seen = new Set();
  for (let i = 0; i < P.n; i = P.end[i]) {
    const t = P.rootThread[i];
    if (t >= 0 && o.hidden.has(t)) continue;
    const g = groupName(P, t, P.name[i], o.group);
    if (seen.has(g)) return true;
    seen.add(g);
  }
  return false;
}

function groupName(P, t, fallback, group) {
  const th = t >= 0 ? P.threads[t] : null;
  if (!th) return fallback;
  if (group === 'process') return th.process;
  if (group === 'name') return th.name;
  return th.label;
}

/**
 * Per function (name id): self = weight where it is the leaf; total =
 * weight of stacks it is in, counted once however often it recurs.
 * Returns arrays over the string table plus the ids present.
 */
function functionStats(P, T) {
  const S = P.strings.length;
  const r = {
    self: new Float64Array(S),
    total: new Float64Array(S),
    selfB: T.selfB ? new Float64Array(S) : null,
    totalB: T.selfB ? new Float64Array(S) : null,
    ids: [],
  };
  const onPath = new Int32Array(S);
  const seen = new Uint8Array(S);
  const stack = [];
  for (let i = 0; i < T.n; i++) {
    while (stack.length && T.end[stack[stack.length - 1]] <= i) onPath[T.name[stack.pop()]]--;
    if (T.depth[i] < T.frameDepth) continue;
    const nm = T.name[i];
    r.self[nm] += T.self[i];
    if (r.selfB) r.selfB[nm] += T.selfB[i];
    if (onPath[nm] === 0) {
      r.total[nm] += T.total[i];
      if (r.totalB) r.totalB[nm] += T.totalB[i];
    }
    onPath[nm]++;
    stack.push(i);
    if (!seen[nm]) {
      seen[nm] = 1;
      r.ids.push(nm);
    }
  }
  return r;
}

/** Sum of `total` over the outermost nodes in [from, to) whose name matches. */
function matchedWeight(T, matches, from, to) {
  let sum = 0;
  let i = from;
  while (i < to) {
    if (T.depth[i] >= T.frameDepth && matches[T.name[i]]) {
      sum += T.total[i];
      i = T.end[i];
    } else {
      i++;
    }
  }
  return sum;
}

/**
 * Sandwich of function `f` in tree T: `callees` merges every outermost
 * call of f (f at the root); `callers` stacks f's callers above it, each
 * path weighted by the time spent in f under it.
 */
function sandwich(P, T, f) {
  const callees = new TreeBuilder(P, 64, f, true);
  const callers = new TreeBuilder(P, 64, f, true);
  const mapped = new Int32Array(T.n);
  let i = 0;
  while (i < T.n) {
    if (T.name[i] !== f || T.depth[i] < T.frameDepth) {
      i++;
      continue;
    }
    mapped[i] = 0;
    callees.add(0, T.self[i], T.selfB ? T.selfB[i] : 0);
    for (let j = i + 1; j < T.end[i]; j++) {
      const c = callees.child(mapped[T.parent[j]], T.name[j]);
      mapped[j] = c;
      callees.add(c, T.self[j], T.selfB ? T.selfB[j] : 0);
    }
    let c = 0;
    for (let a = T.parent[i]; a > 0; a = T.parent[a]) c = callers.child(c, T.name[a]);
    callers.add(c, T.total[i], T.totalB ? T.totalB[i] : 0);
    i = T.end[i];
  }
  const ce = callees.finish();
  const cr = callers.finish();
  ce.frameDepth = 0;
  cr.frameDepth = 0;
  return { callers: cr, callees: ce };
}

/** The node reached from T's root by following child names; stops early when one is missing. */
function resolvePath(T, names) {
  let node = 0;
  for (const nm of names) {
    let c = node + 1;
    let found = -1;
    while (c < T.end[node]) {
      if (T.name[c] === nm) {
        found = c;
        break;
      }
      c = T.end[c];
    }
    if (found < 0) break;
    node = found;
  }
  return node;
}

/** Name ids from the root (exclusive) to `node` (inclusive). */
function pathOf(T, node) {
  const out = [];
  for (let i = node; i > 0; i = T.parent[i]) out.push(T.name[i]);
  return out.reverse();
}

/** A Uint8Array over the string table: 1 where `re` matches. */
function matchStrings(P, re) {
  const m = new Uint8Array(P.strings.length);
  for (let i = 0; i < P.strings.length; i++) {
    re.lastIndex = 0;
    if (re.test(P.strings[i])) m[i] = 1;
  }
  return m;
}
