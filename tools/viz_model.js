// gpumem viz, the page's script, first part: the data the tool embedded (#viz-data), the words and
// numbers the page shows, and the stacked layout of the allocations (after PyTorch's memory_viz:
// an allocation goes on top of its stack; when one is freed, those above it move down).
'use strict';

const D = JSON.parse(document.getElementById('viz-data').textContent);
for (const cfg of D.configs) if (cfg.other_as !== undefined) cfg.other = D.configs[cfg.other_as].other; // the same
const KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;
const END = D.records;   // the x axis in records runs from 0 to here
const END_NS = D.end_ns; // and in time, to the last record's
const STATE_NAMES = ['free', 'in use', 'pending', 'unmapped']; // gpumem_block_state

const SELFTEST = location.hash === '#selftest'; // the page exercises itself (viz_selftest.js)

function $(id) { return document.getElementById(id); }
// An element with text (never markup: names and frames come from the trace) and children.
function el(tag, text, ...children) {
  const e = document.createElement(tag);
  if (text !== null && text !== undefined) e.textContent = text;
  for (const child of children) e.append(child);
  return e;
}

function human(n) { // as the tool's own tables write sizes
  if (n >= GiB) return (n / GiB).toFixed(2) + ' GiB';
  if (n >= MiB) return (n / MiB).toFixed(2) + ' MiB';
  return (n / KiB).toFixed(1) + ' KiB';
}
function count(n) { return Math.round(n).toLocaleString('en-US'); }
function exact(n) { return count(n) + ' bytes'; }
function both(n) { return human(n) + ' (' + exact(n) + ')'; }
function duration(ns) {
  const a = Math.abs(ns);
  if (a >= 1e9) return (ns / 1e9).toFixed(3) + ' s';
  if (a >= 1e6) return (ns / 1e6).toFixed(3) + ' ms';
  if (a >= 1e3) return (ns / 1e3).toFixed(1) + ' µs';
  return Math.round(ns) + ' ns';
}
function when(record, ns) { return 'record ' + count(record) + ' (' + duration(ns) + ')'; }
function streamName(s) { return D.streams[s] === '0x0' ? '0x0 (default)' : D.streams[s]; }
function article(format) { return (format.startsWith('RMM') ? 'an ' : 'a ') + format; }
function plural(n, one, many) { return count(n) + ' ' + (n === 1 ? one : many || one + 's'); }

// The bands' allocations: [record, ns] of the allocation and of the free (-1: never freed).
const BLOCKS = D.blocks.map((r, i) => ({
  i, a: r[0], ta: r[1], f: r[2], tf: r[3], size: r[4], stream: r[5], stack: r[6], thread: r[7],
}));

const STREAM_HUES = [210, 28, 120, 280, 0, 175, 50, 320, 90, 250];
function streamHue(s) { return STREAM_HUES[s % STREAM_HUES.length] + 17 * Math.floor(s / STREAM_HUES.length); }
function streamColour(s) { return 'hsl(' + streamHue(s) + ',55%,50%)'; }
function bandColour(block, byStream) {
  if (byStream) return 'hsl(' + streamHue(block.stream) + ',' + (48 + (block.i % 3) * 8) + '%,' + (40 + (block.i % 5) * 6) + '%)';
  return 'hsl(' + ((block.i * 137.508) % 360).toFixed(1) + ',62%,' + (46 + (block.i % 4) * 5) + '%)';
}
const CONFIG_COLOURS = ['#c0392b', '#111111', '#8e44ad', '#16a085', '#d35400', '#2c3e50', '#7f8c8d', '#b7950b'];
function configColour(c) { return CONFIG_COLOURS[c % CONFIG_COLOURS.length]; }

// ---- Step functions: rows [record, ns, value...], each value holding from its record on ----

// The index of the last row at or before x in column col (-1: none).
function rowAt(rows, x, col) {
  let lo = 0, hi = rows.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (rows[mid][col] <= x) lo = mid + 1; else hi = mid;
  }
  return lo - 1;
}
function valueAt(rows, x, col, v) {
  const k = rowAt(rows, x, col);
  return k < 0 ? 0 : rows[k][v];
}
// The highest of column v over [x0, x1] of the axis col.
function highest(rows, x0, x1, col, v) {
  let k = Math.max(rowAt(rows, x0, col), 0), most = 0;
  for (; k < rows.length && rows[k][col] <= x1; k++) most = Math.max(most, rows[k][v]);
  return most;
}
// Several step functions of one value each, summed, as one.
function sumSteps(lists) {
  const all = [];
  lists.forEach((rows, k) => rows.forEach(r => all.push([r[0], r[1], k, r[2]])));
  all.sort((x, y) => x[0] - y[0]);
  const now = new Array(lists.length).fill(0), out = [];
  let sum = 0;
  for (const [record, ns, k, v] of all) {
    sum += v - now[k];
    now[k] = v;
    if (out.length && out[out.length - 1][0] === record) out[out.length - 1][2] = sum;
    else out.push([record, ns, sum]);
  }
  return out;
}
// Two step functions of one value as one of both: rows [record, ns, a, b].
function zipSteps(a, b) {
  const out = [];
  let i = 0, j = 0, va = 0, vb = 0;
  while (i < a.length || j < b.length) {
    const ra = i < a.length ? a[i][0] : Infinity, rb = j < b.length ? b[j][0] : Infinity;
    const record = Math.min(ra, rb), ns = ra <= rb ? a[i][1] : b[j][1];
    if (ra === record) va = a[i++][2];
    if (rb === record) vb = b[j++][2];
    out.push([record, ns, va, vb]);
  }
  return out;
}

// ---- The stacked layout ----

// The bands of configuration ci (its allocations made, on the streams shown), stacked in one stack
// or a lane per stream: each band's bottom edge as rows [record, ns, offset], its end, and per lane
// the band "other" between the top of the bands (lower) and that plus the rest (upper). Each band
// knows its place in its stack, so that a free costs the bands above it, which move down, and no
// search: the work is that of the steps drawn.
function layout(ci, lanes, shown) {
  const cfg = D.configs[ci];
  const events = [];
  for (const b of BLOCKS) {
    if (cfg.addresses[b.i] === null || !shown.has(b.stream)) continue;
    events.push([b.a, b.ta, b, 1]);
    if (b.f >= 0) events.push([b.f, b.tf, b, -1]);
  }
  events.sort((x, y) => x[0] - y[0]);
  const laneOf = s => (lanes ? s : -1);
  const state = new Map(); // lane: {stack, total, tops}
  const bands = [], bandOf = new Map();
  for (const [record, ns, b, d] of events) {
    const lane = laneOf(b.stream);
    if (!state.has(lane)) state.set(lane, {stack: [], total: 0, tops: []});
    const s = state.get(lane);
    if (d > 0) {
      const band = {block: b, lane, pts: [[record, ns, s.total]], end: [END, END_NS], place: s.stack.length};
      bands.push(band);
      bandOf.set(b.i, band);
      s.stack.push(band);
      s.total += b.size;
    } else {
      const band = bandOf.get(b.i);
      for (let j = band.place + 1; j < s.stack.length; j++) { // each moves down, into the place below
        const above = s.stack[j], last = above.pts[above.pts.length - 1];
        if (last[0] === record) last[2] -= b.size;
        else above.pts.push([record, ns, last[2] - b.size]);
        above.place = j - 1;
        s.stack[j - 1] = above;
      }
      s.stack.pop();
      band.end = [record, ns];
      s.total -= b.size;
    }
    s.tops.push([record, ns, s.total]);
  }
  return finishLanes(cfg, lanes, shown, state, bands, bandOf);
}

function finishLanes(cfg, lanes, shown, state, bands, bandOf) {
  const streams = [...shown].sort((x, y) => x - y);
  const keys = lanes ? streams : [-1];
  const out = [];
  let base = 0;
  for (const key of keys) {
    const s = state.get(key) || {tops: []};
    const others = (key < 0 ? streams : [key]).map(k => cfg.other[k] || []);
    const rows = zipSteps(s.tops, sumSteps(others)).map(r => [r[0], r[1], r[2], r[2] + r[3]]);
    const height = rows.reduce((m, r) => Math.max(m, r[3]), 0);
    const hasOther = rows.some(r => r[3] > r[2]);
    out.push({key, base, height, rows, hasOther, label: key < 0 ? 'all streams' : 'stream ' + streamName(key)});
    base += height + (lanes ? Math.max(height, 1) * 0.08 : 0);
  }
  return {lanes: out, bands, bandOf, total: base, byLane: new Map(out.map(l => [l.key, l])), trees: new Map()};
}

// ---- Which bands are live at a point: an interval tree per lane and axis ----

// A centred interval tree of items [start, end, band] (end excluded, after start): the centre the
// median start, so that each side holds half the items at most; the items that hold the centre
// sorted both ways, the rest in the subtrees either side.
function intervalTree(items) {
  if (!items.length) return null;
  const starts = items.map(it => it[0]).sort((x, y) => x - y), centre = starts[starts.length >> 1];
  const left = [], right = [], here = [];
  for (const it of items) (it[1] <= centre ? left : it[0] > centre ? right : here).push(it);
  return {
    centre, byStart: here.slice().sort((x, y) => x[0] - y[0]), byEnd: here.sort((x, y) => y[1] - x[1]),
    left: intervalTree(left), right: intervalTree(right),
  };
}
// The bands of the tree live at x: start <= x < end.
function stab(tree, x, out) {
  for (let node = tree; node;) {
    if (x < node.centre) {
      for (const it of node.byStart) { if (it[0] > x) break; out.push(it[2]); }
      node = node.left;
    } else {
      for (const it of node.byEnd) { if (it[1] <= x) break; out.push(it[2]); }
      node = node.right;
    }
  }
  return out;
}
// The bands of a lane of layout L live at x of the axis col, made once a lane and axis.
function liveBands(L, lane, x, col) {
  const key = lane + ':' + col;
  if (!L.trees.has(key))
    L.trees.set(key, intervalTree(L.bands.filter(b => b.lane === lane && b.pts[0][col] < b.end[col])
      .map(b => [b.pts[0][col], b.end[col], b])));
  return stab(L.trees.get(key), x, []);
}

// The bottom of a band at x (the axis col), relative to its lane.
function bandOffset(band, x, col) {
  const k = Math.max(rowAt(band.pts, x, col), 0);
  return band.pts[k][2];
}
