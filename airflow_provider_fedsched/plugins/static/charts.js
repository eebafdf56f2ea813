// Small inline-SVG plots for the Federation page, drawn from the API's JSON (no library, no build step).
// Every data point is an element carrying its values (data-series, data-x, data-y), so what a plot shows
// can be read back and compared with the data it was drawn from.
"use strict";

const FedCharts = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const PALETTE = ["#017cee", "#e8590c", "#2f9e44", "#ae3ec9", "#f59f00", "#1098ad", "#c2255c", "#5c7cfa"];
  const SIZE = { width: 880, height: 240, left: 64, right: 44, top: 12, bottom: 36 };  // room for the last time label

  function svg(tag, attrs = {}, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value !== null && value !== undefined) node.setAttribute(key, String(value));
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function color(index) { return PALETTE[index % PALETTE.length]; }

  function frame(label) {
    return svg("svg", { class: "chart", viewBox: `0 0 ${SIZE.width} ${SIZE.height}`, role: "img", "aria-label": label,
      preserveAspectRatio: "xMinYMin meet" });
  }

  function yAxis(root, max, format) {
    const plotHeight = SIZE.height - SIZE.top - SIZE.bottom;
    for (let i = 0; i <= 4; i += 1) {
      const value = (max * i) / 4;
      const y = SIZE.top + plotHeight - (plotHeight * i) / 4;
      root.append(svg("line", { class: "grid", x1: SIZE.left, x2: SIZE.width - SIZE.right, y1: y, y2: y }));
      root.append(svg("text", { class: "tick", x: SIZE.left - 6, y: y + 4, "text-anchor": "end" }, format(value)));
    }
  }

  function legend(names) {
    const box = document.createElement("div");
    box.className = "legend";
    names.forEach((name, i) => {
      const item = document.createElement("span");
      item.className = "legend-item";
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = color(i);
      item.append(swatch, document.createTextNode(name));
      box.append(item);
    });
    return box;
  }

  function empty(text) {
    const note = document.createElement("p");
    note.className = "muted chart-empty";
    note.textContent = text;
    return note;
  }

  // Lines over time: series [{name, points: [{at: ISO time, value}]}], values 0..max.
  function lines(series, { label, max = 1, format = (v) => `${Math.round(v * 100)}%`, none = "No samples yet." }) {
    const all = series.flatMap((s) => s.points.map((p) => new Date(p.at).getTime()));
    const wrap = document.createElement("figure");
    wrap.className = "figure";
    if (!all.length) { wrap.append(empty(none)); return wrap; }
    let start = Math.min(...all);
    let end = Math.max(...all);
    if (start === end) { start -= 60000; end += 60000; }  // one sample: a minute either side
    const plotWidth = SIZE.width - SIZE.left - SIZE.right;
    const plotHeight = SIZE.height - SIZE.top - SIZE.bottom;
    const x = (t) => SIZE.left + ((t - start) / (end - start)) * plotWidth;
    const y = (v) => SIZE.top + plotHeight - (Math.min(v, max) / max) * plotHeight;
    const root = frame(label);
    yAxis(root, max, format);
    for (let i = 0; i <= 4; i += 1) {
      const t = start + ((end - start) * i) / 4;
      const text = new Date(t).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
      root.append(svg("text", { class: "tick", x: x(t), y: SIZE.height - 12, "text-anchor": "middle" }, text));
    }
    series.forEach((s, i) => {
      const points = s.points.map((p) => [x(new Date(p.at).getTime()), y(p.value)]);
      if (points.length > 1) {
        root.append(svg("polyline", { class: "line", fill: "none", stroke: color(i), "stroke-width": 2,
          points: points.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(" ") }));
      }
      s.points.forEach((p, j) => {
        root.append(svg("circle", { class: "point", cx: points[j][0].toFixed(1), cy: points[j][1].toFixed(1), r: 3.5,
          fill: color(i), "data-series": s.name, "data-x": p.at, "data-y": p.value },
          svg("title", {}, `${s.name} · ${new Date(p.at).toLocaleString()} · ${format(p.value)}`)));
      });
    });
    wrap.append(root, legend(series.map((s) => s.name)));
    return wrap;
  }

  // Stacked bars per category (a day): series [{name, values: {category: value}}].
  // counts: whole numbers on the axis (a top that divides into four whole steps).
  function stackedBars(categories, series, { label, format = (v) => v.toFixed(2), none = "Nothing recorded yet.", counts = false }) {
    const wrap = document.createElement("figure");
    wrap.className = "figure";
    const totals = categories.map((c) => series.reduce((sum, s) => sum + (s.values[c] || 0), 0));
    const max = Math.max(0, ...totals);
    if (!categories.length || max <= 0) { wrap.append(empty(none)); return wrap; }
    const top = counts ? Math.max(4, Math.ceil((max * 1.1) / 4) * 4) : max * 1.1;
    const plotWidth = SIZE.width - SIZE.left - SIZE.right;
    const plotHeight = SIZE.height - SIZE.top - SIZE.bottom;
    const slot = plotWidth / categories.length;
    const barWidth = Math.min(48, slot * 0.6);
    const root = frame(label);
    yAxis(root, top, format);
    categories.forEach((category, ci) => {
      const center = SIZE.left + slot * (ci + 0.5);
      let base = 0;
      series.forEach((s, si) => {
        const value = s.values[category] || 0;
        if (value <= 0) return;
        const height = (value / top) * plotHeight;
        const yTop = SIZE.top + plotHeight - ((base + value) / top) * plotHeight;
        root.append(svg("rect", { class: "bar", x: (center - barWidth / 2).toFixed(1), y: yTop.toFixed(1),
          width: barWidth.toFixed(1), height: Math.max(height, 1).toFixed(1), fill: color(si),
          "data-series": s.name, "data-x": category, "data-y": value },
          svg("title", {}, `${s.name} · ${category} · ${format(value)}`)));
        base += value;
      });
      root.append(svg("text", { class: "tick", x: center, y: SIZE.height - 12, "text-anchor": "middle" }, category));
    });
    wrap.append(root, legend(series.map((s) => s.name)));
    return wrap;
  }

  return { lines, stackedBars };
})();
