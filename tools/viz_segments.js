// gpumem viz, third part: the segments held at the peak of reserved bytes, the largest first, each
// row drawn to its own width so that its blocks can be read, and exactly what is left out.

const ROW = {label: 250, bar: 16, gap: 10, top: 4};

function mapBlockColour(b) {
  if (b[2] === 0) return '#dcdcdc';
  if (b[2] === 2) return '#f0a040';
  if (b.length > 4 && b[4] >= 0) return bandColour(BLOCKS[b[4]], S.byStream);
  if (b.length > 4) return 'hsl(' + streamHue(b[7]) + ',30%,68%)'; // in the band "other"
  return '#5b7fbf';
}

function mapTotal(map) { return map.rows.reduce((n, r) => n + r.mapped, 0) + map.left_out.bytes; }

function segmentsText(cfg) {
  const map = cfg.map;
  if (!map) {
    $('segments-title').textContent = 'Segments at the peak of ' + cfg.name;
    $('segments-note').textContent = cfg.allocs
      ? 'The configuration ' + cfg.name + ' is not a pool: each allocation is a block of its own from the device, so there are no segments to draw.'
      : 'Nothing was allocated, so there is no peak.';
    $('left-out').textContent = '';
    return;
  }
  const total = mapTotal(map), shown = map.rows.length;
  $('segments-title').textContent = 'Segments at the peak of ' + cfg.name + ': ' + when(map.record, map.ns) + ', ' +
    plural(map.segments, 'segment') + ' holding ' + both(total);
  $('segments-note').textContent = 'The ' + (shown < map.segments ? count(shown) + ' holding the most' : 'segments') +
    ', the largest first. Each row is drawn to its own width, so that its blocks can be read; the dark line under it is its size against the largest. ' +
    'In use: the colour of its band (pale: in the band "other"); free: light grey; pending (freed, waiting for another stream): orange. ' +
    'Over virtual memory (pool:vm) a row ends where its mapped memory ends.';
  const left = map.left_out;
  $('left-out').textContent = left.segments
    ? 'Left out: ' + count(left.segments) + ' of ' + count(map.segments) + ' segments, holding ' + exact(left.bytes) + ' (' +
      human(left.bytes) + ', ' + (total ? ((100 * left.bytes) / total).toFixed(2) : '0') + '% of the ' + human(total) +
      ' reserved at the peak): ' + exact(left.used) + ' in use, ' + exact(left.free) + ' free, ' + exact(left.pending) + ' pending.'
    : 'Left out: nothing; all ' + plural(map.segments, 'segment') + ' (' + exact(total) + ') are drawn.';
}

function drawSegments() {
  const cfg = D.configs[S.ci], map = cfg.map, canvas = $('segments');
  segmentsText(cfg);
  const rows = map ? map.rows : [];
  canvas.style.height = (rows.length ? ROW.top * 2 + rows.length * (ROW.bar + ROW.gap) : 0) + 'px';
  if (!rows.length) return;
  const {ctx, w} = prepare(canvas), x0 = ROW.label, x1 = w - MARGIN.right;
  const largest = rows.reduce((m, r) => Math.max(m, r.mapped), 1);
  ctx.font = '12px system-ui, sans-serif';
  ctx.textBaseline = 'middle';
  rows.forEach((row, k) => {
    const y = ROW.top + k * (ROW.bar + ROW.gap), extent = row.extent || row.size || 1;
    ctx.fillStyle = '#333';
    ctx.textAlign = 'right';
    ctx.fillText(human(row.mapped) + ', ' + (row.mapped ? Math.round((100 * row.used) / row.mapped) : 0) + '% in use · ' + row.stream, x0 - 8, y + ROW.bar / 2);
    ctx.fillStyle = '#f7f7f7';
    ctx.fillRect(x0, y, x1 - x0, ROW.bar);
    for (const b of row.blocks) {
      if (b[2] === 3) continue; // addresses with nothing mapped
      const bx = x0 + (b[0] / extent) * (x1 - x0), bw = Math.max((b[1] / extent) * (x1 - x0), 1);
      ctx.fillStyle = mapBlockColour(b);
      ctx.fillRect(bx, y, bw, ROW.bar);
      if (S.selected !== null && b.length > 4 && b[4] === S.selected) {
        ctx.strokeStyle = '#000';
        ctx.lineWidth = 2;
        ctx.strokeRect(bx + 1, y + 1, Math.max(bw - 2, 1), ROW.bar - 2);
      }
    }
    ctx.strokeStyle = '#999';
    ctx.lineWidth = 1;
    ctx.strokeRect(x0 + 0.5, y + 0.5, x1 - x0 - 1, ROW.bar - 1);
    ctx.fillStyle = '#444';
    ctx.fillRect(x0, y + ROW.bar + 2, Math.max(((x1 - x0) * row.mapped) / largest, 1), 2);
  });
  S.map = {x0, x1};
}

// The block of the segment map at a point: [row, block] or null.
function mapHit(px, py) {
  const map = D.configs[S.ci].map;
  if (!map || !S.map || px < S.map.x0 || px > S.map.x1) return null;
  const k = Math.floor((py - ROW.top) / (ROW.bar + ROW.gap)), y = py - ROW.top - k * (ROW.bar + ROW.gap);
  if (k < 0 || k >= map.rows.length || y > ROW.bar) return null;
  const row = map.rows[k], extent = row.extent || row.size || 1;
  const at = ((px - S.map.x0) / (S.map.x1 - S.map.x0)) * extent;
  let best = null;
  for (const b of row.blocks)
    if (b[2] !== 3 && at >= b[0] && at < b[0] + Math.max(b[1], (extent / (S.map.x1 - S.map.x0)))) best = b;
  return best ? [row, best] : null;
}

function mapTooltip(row, b) {
  const lines = [el('div', null, el('b', human(b[1])), ' (' + exact(b[1]) + '), ' + STATE_NAMES[b[2]])];
  if (b[2] === 1) lines.push(el('div', 'asked for ' + exact(b[3])));
  if (b.length > 4) {
    lines.push(el('div', 'stream ' + streamName(b[7]) + ', allocated at ' + when(b[5], b[6])));
    lines.push(el('div', b[4] >= 0 ? 'a band of the timeline: click for its details' : 'in the band "other" of the timeline'));
    if (b[8] >= 0) lines.push(el('div', 'called from ' + D.frames[D.stacks[b[8]][0]]));
  }
  lines.push(el('div', 'at offset ' + exact(b[0]) + ' of the segment at ' + row.start + ' (' + human(row.mapped) + ' mapped)'));
  return lines;
}
