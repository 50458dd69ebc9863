// gpumem viz, second part: the timeline drawn on its canvas (bands, the band "other", each
// configuration's reserved bytes, the peaks, the axes), the strip of the whole trace under it, and
// what lies under the pointer.

// What the page shows now; the controls change it (viz_ui.js).
const S = {
  ci: 0,            // the configuration whose allocations are drawn
  axis: 'records',  // or 'time'
  lanes: false,     // a lane per stream
  byStream: true,   // colours
  shown: new Set(D.streams.map((_, i) => i)),
  view: [0, Math.max(END, 1)], // in the axis' units
  L: null,          // layout()
  selected: null,   // a band's block index
  hover: null,
  drag: null,
  g: null, ymax: 1, // the plot's geometry and top, as last drawn
};
const MARGIN = {left: 78, right: 16, top: 30, bottom: 34};

function col() { return S.axis === 'time' ? 1 : 0; }
function domainEnd() { return Math.max(S.axis === 'time' ? END_NS : END, 1); }
function sx(v) { return S.g.x0 + ((v - S.view[0]) / (S.view[1] - S.view[0])) * (S.g.x1 - S.g.x0); }
function vx(px) { return S.view[0] + ((px - S.g.x0) / (S.g.x1 - S.g.x0)) * (S.view[1] - S.view[0]); }
function sy(bytes) { return S.g.y1 - (bytes / S.ymax) * (S.g.y1 - S.g.y0); }
function vy(py) { return ((S.g.y1 - py) / (S.g.y1 - S.g.y0)) * S.ymax; }
function clampX(px) { return Math.max(-20, Math.min(S.g.w + 20, px)); }

// A canvas sized to its box at the screen's resolution, cleared: its context, in CSS pixels.
function prepare(canvas) {
  const ratio = window.devicePixelRatio || 1, w = canvas.clientWidth || 900, h = canvas.clientHeight || 300;
  if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) {
    canvas.width = Math.round(w * ratio);
    canvas.height = Math.round(h * ratio);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, h);
  return {ctx, w, h};
}

function niceStep(span, target) {
  const raw = span / Math.max(target, 1), p = 10 ** Math.floor(Math.log10(raw)), m = raw / p;
  return (m < 1.5 ? 1 : m < 3 ? 2 : m < 3.5 ? 2.5 : m < 7.5 ? 5 : 10) * p;
}
function byteTicks(top) {
  const unit = top >= 2 * GiB ? GiB : top >= 2 * MiB ? MiB : top >= 2 * KiB ? KiB : 1;
  const name = {[GiB]: ' GiB', [MiB]: ' MiB', [KiB]: ' KiB', 1: ' B'}[unit];
  const step = Math.max(niceStep(top / unit, 5), unit === 1 ? 1 : 0) * unit, ticks = [];
  for (let v = 0; v <= top * 1.0001; v += step) ticks.push([v, +(v / unit).toFixed(2) + name]);
  return ticks;
}
function axisTicks(width) {
  const [v0, v1] = S.view, time = S.axis === 'time';
  const step = Math.max(niceStep(v1 - v0, width / 120), time ? 1 : 1), ticks = [];
  for (let v = Math.ceil(v0 / step) * step; v <= v1; v += step) ticks.push([v, time ? duration(v) : count(v)]);
  return ticks;
}

// The top of the y axis: what the view holds at its highest (one stack), or every lane.
function yTop() {
  if (S.lanes) return Math.max(S.L.total, 1);
  const c = col(), [v0, v1] = S.view, lane = S.L.lanes[0];
  let top = lane ? highest(lane.rows, v0, v1, c, 3) : 0;
  D.configs.forEach(cfg => { top = Math.max(top, highest(cfg.series, v0, v1, c, 3)); });
  return Math.max(top * 1.06, 1);
}

function drawAxes(ctx) {
  const g = S.g;
  ctx.font = '11px system-ui, sans-serif';
  ctx.fillStyle = '#555';
  ctx.strokeStyle = '#e4e4e4';
  ctx.lineWidth = 1;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  if (S.lanes) {
    for (const lane of S.L.lanes) {
      ctx.fillText(lane.label.replace('stream ', ''), g.x0 - 6, sy(lane.base + lane.height / 2));
      ctx.beginPath(); ctx.moveTo(g.x0, sy(lane.base) + 0.5); ctx.lineTo(g.x1, sy(lane.base) + 0.5); ctx.stroke();
    }
  } else {
    for (const [v, label] of byteTicks(S.ymax)) {
      const y = Math.round(sy(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(g.x0, y); ctx.lineTo(g.x1, y); ctx.stroke();
      ctx.fillText(label, g.x0 - 6, y);
    }
  }
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (const [v, label] of axisTicks(g.x1 - g.x0)) {
    const x = Math.round(sx(v)) + 0.5;
    ctx.beginPath(); ctx.moveTo(x, g.y1); ctx.lineTo(x, g.y1 + 4); ctx.strokeStyle = '#888'; ctx.stroke();
    ctx.fillText(label, x, g.y1 + 6);
  }
  ctx.strokeStyle = '#888';
  ctx.strokeRect(g.x0 + 0.5, g.y0 + 0.5, g.x1 - g.x0, g.y1 - g.y0);
}

// A band's outline: its bottom edge forward, its top edge back, with the steps where it moved down.
function bandPath(ctx, band, base) {
  const c = col(), pts = band.pts, h = band.block.size;
  ctx.beginPath();
  ctx.moveTo(clampX(sx(pts[0][c])), sy(base + pts[0][2]));
  for (let k = 1; k < pts.length; k++) {
    const x = clampX(sx(pts[k][c]));
    ctx.lineTo(x, sy(base + pts[k - 1][2]));
    ctx.lineTo(x, sy(base + pts[k][2]));
  }
  const last = pts[pts.length - 1][2], xe = clampX(sx(band.end[c]));
  ctx.lineTo(xe, sy(base + last));
  ctx.lineTo(xe, sy(base + last + h));
  for (let k = pts.length - 1; k >= 1; k--) {
    const x = clampX(sx(pts[k][c]));
    ctx.lineTo(x, sy(base + pts[k][2] + h));
    ctx.lineTo(x, sy(base + pts[k - 1][2] + h));
  }
  ctx.lineTo(clampX(sx(pts[0][c])), sy(base + pts[0][2] + h));
  ctx.closePath();
}

function visible(band) {
  const c = col();
  return band.pts[0][c] <= S.view[1] && band.end[c] >= S.view[0];
}

// The rows of a step function that the view needs: from the one holding at its start.
function rowsInView(rows) {
  const c = col(), from = Math.max(rowAt(rows, S.view[0], c), 0), out = [];
  for (let k = from; k < rows.length && rows[k][c] <= S.view[1]; k++) out.push(rows[k]);
  return out;
}

// The band "other" of a lane: between the top of its bands and that plus the rest.
function drawOther(ctx, lane) {
  if (!lane.hasOther) return;
  const c = col(), rows = rowsInView(lane.rows);
  if (!rows.length) return;
  const xEnd = clampX(sx(S.view[1]));
  ctx.beginPath();
  rows.forEach((r, k) => {
    const x = clampX(sx(Math.max(r[c], S.view[0])));
    if (k) ctx.lineTo(x, sy(lane.base + rows[k - 1][3])); else ctx.moveTo(x, sy(lane.base + r[2]));
    ctx.lineTo(x, sy(lane.base + r[3]));
  });
  ctx.lineTo(xEnd, sy(lane.base + rows[rows.length - 1][3]));
  ctx.lineTo(xEnd, sy(lane.base + rows[rows.length - 1][2]));
  for (let k = rows.length - 1; k >= 0; k--) {
    const x = clampX(sx(Math.max(rows[k][c], S.view[0])));
    ctx.lineTo(x, sy(lane.base + rows[k][2]));
    if (k) ctx.lineTo(x, sy(lane.base + rows[k - 1][2]));
  }
  ctx.closePath();
  ctx.fillStyle = '#c9c9c9';
  ctx.fill();
}

function drawSteps(ctx, rows, v) {
  const c = col(), shown = rowsInView(rows);
  if (!shown.length) return;
  ctx.beginPath();
  shown.forEach((r, k) => {
    const x = clampX(sx(Math.max(r[c], S.view[0])));
    if (k) ctx.lineTo(x, sy(shown[k - 1][v])); else ctx.moveTo(x, sy(r[v]));
    ctx.lineTo(x, sy(r[v]));
  });
  ctx.lineTo(clampX(sx(Math.min(domainEnd(), S.view[1]))), sy(shown[shown.length - 1][v]));
  ctx.stroke();
}

function label(ctx, text, x, y, colour) {
  const g = S.g, w = ctx.measureText(text).width;
  const left = Math.min(Math.max(x + 6, g.x0 + 2), g.x1 - w - 2), top = Math.max(y - 8, g.y0 - 24);
  ctx.fillStyle = 'rgba(255,255,255,0.85)';
  ctx.fillRect(left - 2, top - 7, w + 4, 14);
  ctx.fillStyle = colour;
  ctx.textAlign = 'left';
  ctx.textBaseline = 'middle';
  ctx.fillText(text, left, top);
}

function marker(ctx, x, y, colour) {
  ctx.beginPath();
  ctx.arc(x, y, 4, 0, 2 * Math.PI);
  ctx.fillStyle = colour;
  ctx.fill();
  ctx.strokeStyle = '#fff';
  ctx.lineWidth = 1.5;
  ctx.stroke();
}

// The peaks: live bytes of the configuration drawn, reserved bytes of each.
function drawPeaks(ctx) {
  const c = col(), cfg = D.configs[S.ci], g = S.g;
  ctx.font = '12px system-ui, sans-serif';
  const xl = sx(c ? cfg.peak_live_ns : cfg.peak_live_record);
  ctx.setLineDash([4, 3]);
  ctx.strokeStyle = '#1f4e9e';
  ctx.lineWidth = 1;
  ctx.beginPath(); ctx.moveTo(xl, g.y0); ctx.lineTo(xl, g.y1); ctx.stroke();
  ctx.setLineDash([]);
  const at = (record, ns) => (c ? duration(ns) : 'record ' + count(record));
  const live = 'peak live ' + human(cfg.peak_live) + ' at ' + at(cfg.peak_live_record, cfg.peak_live_ns);
  if (S.lanes) return label(ctx, live, xl, g.y0 + 10, '#1f4e9e');
  D.configs.forEach((other, k) => {
    if (!other.allocs) return;
    const x = sx(c ? other.peak_reserved_ns : other.peak_reserved_record), y = sy(other.peak_reserved);
    marker(ctx, x, y, configColour(k));
    if (k === S.ci)
      label(ctx, 'peak reserved ' + human(other.peak_reserved) + ' at ' + at(other.peak_reserved_record, other.peak_reserved_ns) +
        ' (' + other.name + ')', x, y - 6, configColour(k));
  });
  marker(ctx, xl, sy(cfg.peak_live), '#1f4e9e');
  label(ctx, live, xl, sy(cfg.peak_live) + 14, '#1f4e9e');
  if (cfg.first_failure_record >= 0) { // where the configuration first ran out of memory
    const xf = sx(c ? cfg.first_failure_ns : cfg.first_failure_record);
    ctx.fillStyle = '#c0392b';
    ctx.beginPath(); ctx.moveTo(xf, g.y1); ctx.lineTo(xf - 5, g.y1 - 9); ctx.lineTo(xf + 5, g.y1 - 9); ctx.fill();
    label(ctx, 'first out of memory (' + plural(cfg.failed, 'allocation') + ' in all)', xf, g.y1 - 16, '#c0392b');
  }
}

function drawTimeline() {
  const canvas = $('timeline'), {ctx, w, h} = prepare(canvas);
  S.g = {w, h, x0: MARGIN.left, x1: w - MARGIN.right, y0: MARGIN.top, y1: h - MARGIN.bottom};
  S.ymax = yTop();
  drawAxes(ctx);
  ctx.save();
  ctx.beginPath();
  ctx.rect(S.g.x0, S.g.y0 - 26, S.g.x1 - S.g.x0, S.g.y1 - S.g.y0 + 26);
  ctx.clip();
  for (const lane of S.L.lanes) drawOther(ctx, lane);
  for (const band of S.L.bands) {
    if (!visible(band)) continue;
    bandPath(ctx, band, S.L.byLane.get(band.lane).base);
    ctx.fillStyle = bandColour(band.block, S.byStream);
    ctx.fill();
  }
  const picked = S.selected !== null && S.L.bandOf.get(S.selected);
  if (picked) {
    bandPath(ctx, picked, S.L.byLane.get(picked.lane).base);
    ctx.strokeStyle = '#000';
    ctx.lineWidth = 2;
    ctx.stroke();
  }
  if (!S.lanes) {
    D.configs.forEach((cfg, k) => {
      ctx.strokeStyle = configColour(k);
      ctx.lineWidth = k === S.ci ? 2 : 1.4;
      ctx.setLineDash(k === S.ci ? [] : [6, 4]);
      drawSteps(ctx, cfg.series, 3);
    });
    ctx.setLineDash([]);
  }
  drawPeaks(ctx);
  ctx.restore();
  if (S.drag && S.drag.mode === 'select') {
    ctx.fillStyle = 'rgba(60,90,200,0.15)';
    ctx.fillRect(Math.min(S.drag.from, S.drag.to), S.g.y0, Math.abs(S.drag.to - S.drag.from), S.g.y1 - S.g.y0);
  }
  $('view-range').textContent = viewText();
}

function viewText() {
  const [v0, v1] = S.view;
  const whole = v0 <= 0 && v1 >= domainEnd();
  if (S.axis === 'time')
    return (whole ? 'The whole trace: ' : 'Shown: ') + duration(v0) + ' to ' + duration(v1) + ' of ' + duration(END_NS) + '.';
  return (whole ? 'The whole trace: ' : 'Shown: ') + 'records ' + count(v0) + ' to ' + count(v1) + ' of ' + count(END) +
    ' (one step of the x axis per record of the trace).';
}

// The strip of the whole trace: live and reserved bytes, and the part the chart shows.
function drawOverview() {
  const canvas = $('overview'), {ctx, w, h} = prepare(canvas), c = col(), end = domainEnd();
  const cfg = D.configs[S.ci];
  let top = 1;
  D.configs.forEach(k => { top = Math.max(top, k.peak_reserved, k.peak_live); });
  const x = v => MARGIN.left + (v / end) * (w - MARGIN.left - MARGIN.right), y = v => h - 2 - (v / top) * (h - 6);
  ctx.fillStyle = '#f3f3f3';
  ctx.fillRect(MARGIN.left, 0, w - MARGIN.left - MARGIN.right, h);
  const line = (rows, v, stroke, fill) => {
    ctx.beginPath();
    ctx.moveTo(x(0), y(0));
    rows.forEach((r, k) => { if (k) ctx.lineTo(x(r[c]), y(rows[k - 1][v])); ctx.lineTo(x(r[c]), y(r[v])); });
    if (rows.length) ctx.lineTo(x(end), y(rows[rows.length - 1][v]));
    if (fill) { ctx.lineTo(x(end), y(0)); ctx.fillStyle = fill; ctx.fill(); } else { ctx.strokeStyle = stroke; ctx.stroke(); }
  };
  line(cfg.series, 2, null, '#9fb8dd');
  D.configs.forEach((k, i) => { ctx.lineWidth = 1; line(k.series, 3, configColour(i)); });
  ctx.fillStyle = 'rgba(40,60,160,0.18)';
  ctx.strokeStyle = '#334';
  const a = x(S.view[0]), b = Math.max(x(S.view[1]), a + 2);
  ctx.fillRect(a, 0, b - a, h);
  ctx.strokeRect(a + 0.5, 0.5, b - a - 1, h - 1);
  S.overview = {x0: MARGIN.left, x1: w - MARGIN.right};
}

// What lies at a point of the chart (CSS pixels in the canvas): a band, the band "other", or none.
function hitTest(px, py) {
  const g = S.g;
  if (!g || px < g.x0 || px > g.x1 || py < g.y0 || py > g.y1) return null;
  const c = col(), x = vx(px), y = vy(py);
  const lane = S.L.lanes.find(l => y >= l.base && y < l.base + Math.max(l.height, S.ymax * 0.02)) || null;
  if (!lane) return {x};
  const rel = y - lane.base;
  for (const band of liveBands(S.L, lane.key, x, c)) { // those stacked at x, not every band
    const off = bandOffset(band, x, c);
    if (rel >= off && rel < off + band.block.size) return {x, band};
  }
  const k = rowAt(lane.rows, x, c);
  if (k >= 0 && rel >= lane.rows[k][2] && rel < lane.rows[k][3])
    return {x, other: lane, bytes: lane.rows[k][3] - lane.rows[k][2]};
  return {x, lane};
}
