// The debug page's live charts (served inline by endpoint.rs; no external resource).
// Each series is a list of [t, value] points, t in seconds relative to the answer (<= 0).
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const W = 280, H = 96, PL = 46, PR = 6, PT = 16, PB = 15;
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
  let refreshes = 0;
  let inflight = false;

  function fmtNum(v) {
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 10000) return (v / 1000).toFixed(0) + "k";
    if (a >= 1000) return (v / 1000).toFixed(1) + "k";
    if (a >= 10) return v.toFixed(0);
    if (a >= 1) return v.toFixed(1);
    return v.toPrecision(2);
  }
  function fmtDur(s) {
    if (s === 0) return "0";
    if (s < 1e-3) return (s * 1e6).toFixed(s < 1e-5 ? 1 : 0) + "µs";
    if (s < 1) return (s * 1e3).toFixed(s < 1e-2 ? 2 : s < 0.1 ? 1 : 0) + "ms";
    return s.toFixed(2) + "s";
  }
  function fmtSpan(s) {
    return s >= 120 ? Math.round(s / 60) + "m" : Math.round(s) + "s";
  }
  function node(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // One chart: a figure with an SVG of one line per entry of `lines` ({name, points}) over
  // the span of the data (at least ten intervals, at most the window), 0 at the bottom.
  function chart(key, title, unit, lines, data) {
    const fmt = unit === "s" ? fmtDur : fmtNum;
    const interval = data.interval_seconds;
    let oldest = 0, max = 0;
    for (const l of lines) {
      for (const p of l.points) {
        oldest = Math.min(oldest, p[0]);
        max = Math.max(max, p[1]);
      }
    }
    const span = Math.min(data.window_seconds, Math.max(-oldest, 10 * interval));
    if (!(max > 0)) max = unit === "s" ? 0.001 : 1;
    const top = max * 1.08;
    const x = t => PL + (W - PL - PR) * (1 + t / span);
    const y = v => PT + (H - PT - PB) * (1 - v / top);
    const fig = document.createElement("figure");
    fig.className = "chart";
    fig.dataset.series = key;
    const svg = node("svg", { class: "chart", "data-series": key, width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    svg.appendChild(node("rect", { class: "plot", x: PL, y: PT, width: W - PL - PR, height: H - PT - PB }));
    const lastOf = l => (l.points.length ? fmt(l.points[l.points.length - 1][1]) : "–");
    svg.appendChild(node("text", { class: "title", x: 4, y: 11 }, lines.length === 1 ? `${title}: ${lastOf(lines[0])}` : title));
    svg.appendChild(node("text", { x: PL - 3, y: PT + 8, "text-anchor": "end" }, fmt(max)));
    svg.appendChild(node("text", { x: PL - 3, y: H - PB, "text-anchor": "end" }, "0"));
    svg.appendChild(node("text", { x: PL, y: H - 3 }, "−" + fmtSpan(span)));
    svg.appendChild(node("text", { x: W - PR, y: H - 3, "text-anchor": "end" }, "now"));
    lines.forEach((l, i) => {
      let d = "", prev = null, n = 0;
      for (const p of l.points) {
        if (-p[0] > span) continue;
        // A gap (no sample, or no observation for a latency) breaks the line; a lone point
        // is a dot (a zero-length segment with round caps).
        const gap = prev === null || p[0] - prev > 2.5 * interval;
        d += (gap ? "M" : "L") + x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1) + (gap ? "l0,0" : "");
        prev = p[0];
        n++;
      }
      svg.appendChild(node("path", { class: "line", d: d || "M0,0", stroke: COLORS[i % COLORS.length], "data-points": n, "data-name": l.name }));
    });
    fig.appendChild(svg);
    if (lines.length > 1 || (lines.length === 1 && lines[0].name !== "")) {
      const cap = document.createElement("figcaption");
      lines.forEach((l, i) => {
        const s = document.createElement("span");
        s.style.color = COLORS[i % COLORS.length];
        s.textContent = `■ ${l.name}: ${lastOf(l)}`;
        cap.appendChild(s);
      });
      fig.appendChild(cap);
    }
    return fig;
  }

  function draw(data) {
    const boxes = document.querySelectorAll("#informers div.charts");
    for (const inf of data.informers) {
      const box = Array.from(boxes).find(b => b.dataset.informer === inf.name);
      if (!box) continue;
      box.replaceChildren(
        chart("events_per_second", "events/s", "", [{ name: "", points: inf.events_per_second }], data),
        chart("fifo_depth", "FIFO depth (deltas)", "", [{ name: "", points: inf.fifo_depth }], data),
        chart("listener_buffered", "listener buffers", "", inf.listeners.map(l => ({ name: l.name, points: l.buffered })), data),
        chart("handler_latency_seconds", "handler latency (mean)", "s", inf.listeners.map(l => ({ name: l.name, points: l.handler_latency_seconds })), data)
      );
    }
    const queues = document.getElementById("workqueues");
    const sections = data.workqueues.map(q => {
      const sec = document.createElement("section");
      sec.className = "workqueue";
      sec.dataset.workqueue = q.name;
      const h = document.createElement("h2");
      h.textContent = "workqueue " + q.name;
      const box = document.createElement("div");
      box.className = "charts";
      box.append(
        chart("depth", "depth", "", [{ name: "", points: q.depth }], data),
        chart("adds_per_second", "adds/s", "", [{ name: "", points: q.adds_per_second }], data),
        chart("queue_latency_seconds", "queue wait (mean)", "s", [{ name: "", points: q.queue_latency_seconds }], data),
        chart("work_duration_seconds", "reconcile: get→done (mean)", "s", [{ name: "", points: q.work_duration_seconds }], data)
      );
      sec.append(h, box);
      return sec;
    });
    if (sections.length) {
      const title = document.createElement("h1");
      title.textContent = "Workqueues";
      queues.replaceChildren(title, ...sections);
    } else {
      queues.replaceChildren();
    }
  }

  async function refresh(data) {
    if (inflight) return;
    inflight = true;
    const live = document.getElementById("live");
    try {
      const base = location.pathname.replace(/\/$/, "");
      // The page inlines its series: one request (and one sample) per refresh.
      const page = await fetch(base + "?format=html", { cache: "no-store" }).then(r => r.text());
      const doc = new DOMParser().parseFromString(page, "text/html");
      const series = JSON.parse(doc.getElementById("series-data").textContent);
      const fresh = doc.getElementById("informers");
      if (fresh) document.getElementById("informers").replaceWith(document.adoptNode(fresh));
      draw(series);
      refreshes++;
      document.body.dataset.refreshes = refreshes;
      live.textContent = `live charts, updated ${new Date().toLocaleTimeString()}: one point every ${series.interval_seconds}s over the last ${fmtSpan(series.window_seconds)}`;
      live.className = "";
      delay = period;
    } catch (e) {
      live.textContent = "not refreshed (endpoint gone?): " + e;
      live.className = "bad";
      // Back off while the endpoint does not answer: doubling, up to 30 s.
      delay = Math.min(30000, delay * 2);
    } finally {
      inflight = false;
    }
  }

  const first = JSON.parse(document.getElementById("series-data").textContent);
  draw(first);
  const period = Math.min(2000, Math.max(1000, first.interval_seconds * 1000));
  let delay = period;
  (function tick() {
    setTimeout(() => refresh().finally(tick), delay);
  })();
})();
